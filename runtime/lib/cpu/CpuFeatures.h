//===- CpuFeatures.h - which vector code the CPU kernels run -----*- C++ -*-===//
//
// The CPU backend's kernels that have AVX2 or AVX-512 versions (with the
// same bits as the baseline ones) run them where the CPU has the features
// and the environment does not switch them off: TMRT_NO_AVX512=1 stops at
// AVX2, TMRT_NO_AVX2=1 at the baseline (SSE2) code, so every path can be
// tested on one machine.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_RUNTIME_CPU_CPUFEATURES_H
#define TRAINMEM_RUNTIME_CPU_CPUFEATURES_H

#include <cstdlib>

namespace tmrt {

/// AVX2, unless TMRT_NO_AVX2 is set.
inline bool avx2Enabled() {
#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))
  static const bool enabled = __builtin_cpu_supports("avx2") &&
                              std::getenv("TMRT_NO_AVX2") == nullptr;
  return enabled;
#else
  return false;
#endif
}

/// AVX-512 F, BW, DQ and VBMI, unless TMRT_NO_AVX512 or TMRT_NO_AVX2 is set.
inline bool avx512VbmiEnabled() {
#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))
  static const bool enabled =
      avx2Enabled() && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vbmi") &&
      std::getenv("TMRT_NO_AVX512") == nullptr;
  return enabled;
#else
  return false;
#endif
}

} // namespace tmrt

#endif // TRAINMEM_RUNTIME_CPU_CPUFEATURES_H
