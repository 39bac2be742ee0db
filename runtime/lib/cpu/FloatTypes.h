//===- FloatTypes.h - dispatch on a tensor's element type -------*- C++ -*-===//
//
// The CPU kernels are templates over the storage type of their float
// tensors (float, trainmem::BFloat16, trainmem::Float16); this instantiates
// the right one for an element-type code (Runtime.h's TMRT_DTYPE_*).
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_RUNTIME_CPU_FLOATTYPES_H
#define TRAINMEM_RUNTIME_CPU_FLOATTYPES_H

#include "../Context.h"
#include "trainmem-runtime/ForEach.h"

#include <initializer_list>
#include <string>

namespace tmrt {
namespace cpu {

/// Calls fn(T{}) with the storage type of element-type code `dtype`; fails
/// the context, naming `kernel`, for a code the runtime does not know.
template <typename Fn>
void dispatchFloatType(tmrt_context *ctx, const char *kernel, int64_t dtype,
                       Fn fn) {
  switch (dtype) {
  case TMRT_DTYPE_F32:
    return fn(float{});
  case TMRT_DTYPE_BF16:
    return fn(trainmem::BFloat16{});
  case TMRT_DTYPE_F16:
    return fn(trainmem::Float16{});
  default:
    ctx->fail(std::string(kernel) + ": element type code " +
              std::to_string(dtype) + " is not one the runtime knows");
  }
}

/// Calls fn(T{}) with T the element type (float, BFloat16, Float16) that
/// the tensor references `refs` share; fails the context when they differ.
/// (The CPU and the CUDA kernels dispatch through it.)
template <typename Fn>
void withFloatType(tmrt_context *ctx, const char *kernel,
                   std::initializer_list<int64_t> refs, Fn fn) {
  int64_t dtype = tmrt::dtypeOf(*refs.begin());
  for (int64_t ref : refs)
    if (tmrt::dtypeOf(ref) != dtype) {
      ctx->fail(std::string(kernel) + ": operands of element types " +
                tmrt::dtypeName(dtype) + " and " +
                tmrt::dtypeName(tmrt::dtypeOf(ref)) +
                "; this kernel's operands share one");
      return;
    }
  dispatchFloatType(ctx, kernel, dtype, fn);
}

} // namespace cpu
} // namespace tmrt

/// The entry points of the float kernels a file defines, from Kernels.def:
/// where the file says `#define TMRT_FLOAT_<kernel> (operands)` for a
/// kernel whose template <kernel>Of<T> it defines,
///   #define TMRT_KERNEL(name, parameters, arguments) \
///     TMRT_FLOAT_ENTRY(name, parameters, arguments)
///   #include "trainmem-runtime/Kernels.def"
/// defines `void <kernel>(parameters)`, which calls <kernel>Of<T>(arguments)
/// with T the element type the operands share (withFloatType); a kernel
/// without its TMRT_FLOAT_ line is left to the file (or to another one).
#define TMRT_FLOAT_ENTRY(name, parameters, arguments)                          \
  TMRT_FLOAT_ENTRY_CAT(TMRT_FLOAT_ENTRY_,                                      \
                       TMRT_FLOAT_ENTRY_IS_LIST(TMRT_FLOAT_##name))            \
  (name, parameters, arguments, TMRT_FLOAT_##name)
#define TMRT_FLOAT_ENTRY_0(name, parameters, arguments, operands)
#define TMRT_FLOAT_ENTRY_1(name, parameters, arguments, operands)              \
  void name parameters {                                                       \
    withFloatType(ctx, #name, {TMRT_UNPAREN(operands)},                        \
                  [&](auto type) { name##Of<decltype(type)> arguments; });     \
  }
/// 1 where `x` is a parenthesized list (a TMRT_FLOAT_ line's operands), 0
/// where it is a name no macro defines.
#define TMRT_FLOAT_ENTRY_IS_LIST(x)                                            \
  TMRT_FLOAT_ENTRY_SECOND(TMRT_FLOAT_ENTRY_PROBE x, 0, ~)
#define TMRT_FLOAT_ENTRY_PROBE(...) ~, 1
#define TMRT_FLOAT_ENTRY_SECOND(...) TMRT_FLOAT_ENTRY_SECOND_(__VA_ARGS__)
#define TMRT_FLOAT_ENTRY_SECOND_(a, b, ...) b
#define TMRT_FLOAT_ENTRY_CAT(a, b) TMRT_FLOAT_ENTRY_CAT_(a, b)
#define TMRT_FLOAT_ENTRY_CAT_(a, b) a##b

#endif // TRAINMEM_RUNTIME_CPU_FLOATTYPES_H
