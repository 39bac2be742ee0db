//===- Dispatch.cpp - the kernels' C entry points -------------------------===//
//
// tmrt_<kernel> (Runtime.h) calls the kernel of the context's backend
// (Backend.h) and counts the call. Generated from Kernels.def, which is
// checked here against the prototypes of Runtime.h.
//
//===----------------------------------------------------------------------===//

#include "Backend.h"
#include "Context.h"

#include <type_traits>

// Each entry point of Runtime.h has the prototype Kernels.def gives it.
#define TMRT_KERNEL(name, parameters, arguments)                               \
  static_assert(std::is_same_v<decltype(&tmrt_##name), void(*) parameters>,   \
                "tmrt_" #name " in Runtime.h differs from Kernels.def");
#include "trainmem-runtime/Kernels.def"

extern "C" {

#define TMRT_KERNEL(name, parameters, arguments)                               \
  void tmrt_##name parameters {                                                \
    ++ctx->kernelCalls;                                                        \
    ctx->backend->name arguments;                                              \
  }
#include "trainmem-runtime/Kernels.def"

} // extern "C"
