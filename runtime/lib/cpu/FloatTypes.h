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

#endif // TRAINMEM_RUNTIME_CPU_FLOATTYPES_H
