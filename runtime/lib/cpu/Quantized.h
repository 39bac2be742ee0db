//===- Quantized.h - the block loop of the fused 8-bit AdamW ----*- C++ -*-===//

#ifndef TRAINMEM_RUNTIME_CPU_QUANTIZED_H
#define TRAINMEM_RUNTIME_CPU_QUANTIZED_H

#include "trainmem/Support/AdamW.h"
#include "trainmem/Support/DynamicMap.h"

#include <cstdint>

namespace tmrt {

/// The operands of tmrt_adamw_8bit (outputs may equal inputs: in place).
struct AdamW8bitBlock {
  const float *p, *g;
  const uint8_t *mc;
  const float *ma;
  const uint8_t *vc;
  const float *va;
  float *np;
  uint8_t *nmc;
  float *nma;
  uint8_t *nvc;
  float *nva;
  int64_t n, block;
  const trainmem::AdamWStep *update;
  const trainmem::DynamicMap *mMap, *vMap;
};

/// The vector code the 8-bit state kernels run: AVX-512 (F, BW, DQ, VBMI)
/// where the CPU has it, else AVX2 where it has that, else scalar loops.
/// TMRT_NO_AVX512=1 in the environment stops at AVX2, TMRT_NO_AVX2=1 at
/// the scalar loops (to test every path on one machine). The results are
/// the same bits on every path.
enum class StatePath { Scalar, Avx2, Avx512 };
StatePath statePath();
const char *statePathName(StatePath path);

/// Whether statePath() has vector code for the fused AdamW update; where
/// it has not, tmrt_adamw_8bit runs the block loop every 8-bit update
/// shares (cpu/Kernels.cpp, blockwise8bit), which gives the same bits.
bool hasVectorAdamW8bit();

/// Blocks [b0, b1) of the fused update on statePath()'s vector code (only
/// where hasVectorAdamW8bit()).
void adamW8bitBlocks(const AdamW8bitBlock &work, int64_t b0, int64_t b1);

/// trainmem::quantizeBlockwise over blocks [b0, b1) of x[0..n): vectorized
/// for the dynamic maps where the CPU allows, the same bits either way.
void quantizeBlocks(const trainmem::DynamicMap &map, const float *x,
                    int64_t n, int64_t block, uint8_t *codes, float *absmax,
                    int64_t b0, int64_t b1);

/// out[i] = dequantizeValue(map, codes[i], absmax[i / block]) for i in
/// [i0, i1): vectorized likewise.
void dequantizeRange(const trainmem::DynamicMap &map, const uint8_t *codes,
                     const float *absmax, int64_t block, float *out,
                     int64_t i0, int64_t i1);

/// What the vector quantizers do with negative values: mirror them (a
/// signed map), give them code 0 (an unsigned map, as quantizeToMap does),
/// or nothing (an unsigned map's values known to be at least +0: v).
enum class Signs { Mirror, Zero, None };

/// The AVX2 versions (QuantizedAvx2.cpp), for the signed and unsigned
/// dynamic maps only; call them only where statePath() is Avx2 or better.
void adamW8bitBlocksAvx2(const AdamW8bitBlock &work, int64_t b0, int64_t b1);
void quantizeBlocksAvx2(const trainmem::DynamicMap &map, const float *x,
                        int64_t n, int64_t block, uint8_t *codes,
                        float *absmax, int64_t b0, int64_t b1);
void dequantizeAvx2(const trainmem::DynamicMap &map, const uint8_t *codes,
                    const float *absmax, int64_t block, float *out,
                    int64_t i0, int64_t i1);

} // namespace tmrt

#endif // TRAINMEM_RUNTIME_CPU_QUANTIZED_H
