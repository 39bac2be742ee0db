//===- HostDevice.h - for the host and the GPU alike ------------*- C++ -*-===//
//
// TRAINMEM_HD marks the support headers' per-element math (the 16-bit
// conversions, fastExp, GELU and SiLU) as `__host__ __device__` when nvcc
// compiles them, so that the CUDA kernels run the very functions the CPU
// kernels and the reference evaluator run; elsewhere it is empty.
// trainmem::bitCast copies an object's bits with __builtin_memcpy, which
// the host compilers and nvcc's device code all have.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_SUPPORT_HOSTDEVICE_H
#define TRAINMEM_SUPPORT_HOSTDEVICE_H

#if defined(__CUDACC__)
#define TRAINMEM_HD __host__ __device__
#else
#define TRAINMEM_HD
#endif

namespace trainmem {

template <typename To, typename From>
TRAINMEM_HD inline To bitCast(const From &from) {
  static_assert(sizeof(To) == sizeof(From), "bitCast between sizes");
  To to;
  __builtin_memcpy(&to, &from, sizeof(To));
  return to;
}

} // namespace trainmem

#endif // TRAINMEM_SUPPORT_HOSTDEVICE_H
