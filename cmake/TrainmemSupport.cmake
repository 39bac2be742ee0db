# TrainmemSupport: the LLVM-free headers of include/trainmem/Support (Philox,
# the 8-bit dynamic maps, AdamW's step arithmetic, activations) that the
# runtime, the reference evaluator and the tools share. An INTERFACE library
# carrying the numerics flags its users must agree on: no multiply-add
# contraction (the AVX-512 kernels, which have FMA, and the scalar kernels
# and reference evaluator, which do not on baseline x86-64, must round the
# same way, also where a scalar helper is inlined into an AVX-512 function),
# and no errno from the math library (nothing reads it, and with it a square
# root is a call that blocks vectorization).
if(NOT TARGET TrainmemSupport)
  add_library(TrainmemSupport INTERFACE)
  target_include_directories(TrainmemSupport INTERFACE
    $<BUILD_INTERFACE:${TRAINMEM_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_options(TrainmemSupport INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>
    $<$<COMPILE_LANGUAGE:CXX>:-fno-math-errno>)
endif()
