//===- Float16.h - bf16 and f16 storage, f32 arithmetic ----------*- C++ -*-===//
//
// The two 16-bit float formats as storage types: a value is held in 16 bits
// and read as f32 (exactly: every bf16 and f16 value is an f32 value), and an
// f32 written to it is rounded to the nearest 16-bit value, ties to even, as
// the hardware conversions (AVX512_BF16's vcvtneps2bf16, F16C's vcvtps2ph
// with round-to-nearest) and llvm::APFloat do. NaN stays NaN (made quiet),
// infinities stay infinite, values past the largest finite value round to
// infinity, f16's subnormals are kept (no flushing).
//
// Header-only and free of LLVM: the runtime's kernels and the reference
// evaluator's tests use the same conversions.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_SUPPORT_FLOAT16_H
#define TRAINMEM_SUPPORT_FLOAT16_H

#include "trainmem/Support/HostDevice.h"

#include <cstdint>

namespace trainmem {

TRAINMEM_HD inline uint32_t floatBits(float value) {
  return bitCast<uint32_t>(value);
}

TRAINMEM_HD inline float floatFromBits(uint32_t bits) {
  return bitCast<float>(bits);
}

/// f32 -> bf16 bits, round to nearest, ties to even.
TRAINMEM_HD inline uint16_t bf16BitsFromFloat(float value) {
  uint32_t bits = floatBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) // NaN: keep sign, make quiet
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

TRAINMEM_HD inline float floatFromBF16Bits(uint16_t bits) {
  return floatFromBits(static_cast<uint32_t>(bits) << 16);
}

/// f32 -> f16 bits (IEEE binary16), round to nearest, ties to even,
/// subnormals kept.
TRAINMEM_HD inline uint16_t f16BitsFromFloat(float value) {
  uint32_t bits = floatBits(value);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) // NaN: quiet, top of the payload kept
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  // 65520 = 65504 + half an ulp: it and everything above round to infinity.
  if (magnitude >= 0x477ff000u)
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (magnitude >= 0x38800000u) { // a normal f16 (>= 2^-14)
    uint32_t rebiased = magnitude - 0x38000000u; // exponent bias 127 -> 15
    rebiased += 0xfffu + ((rebiased >> 13) & 1u);
    return static_cast<uint16_t>(sign | (rebiased >> 13));
  }
  // A subnormal f16: q * 2^-24 with q = mantissa * 2^(exponent - 150 + 24).
  int exponent = static_cast<int>(magnitude >> 23);
  int shift = 126 - exponent; // >= 14 here
  if (shift > 24) // below half of the smallest subnormal: zero
    return static_cast<uint16_t>(sign);
  uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  uint32_t quotient = mantissa >> shift;
  uint32_t remainder = mantissa & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1);
  if (remainder > half || (remainder == half && (quotient & 1u)))
    ++quotient; // may carry into the smallest normal: the right encoding
  return static_cast<uint16_t>(sign | quotient);
}

TRAINMEM_HD inline float floatFromF16Bits(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) { // zero or subnormal: mantissa * 2^-24, exact in f32
    float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) // infinity or NaN
    return floatFromBits(sign | 0x7f800000u | (mantissa << 13));
  return floatFromBits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

/// A bf16 in memory. Reads as f32; assigning an f32 rounds.
struct BFloat16 {
  uint16_t bits;
  BFloat16() = default;
  TRAINMEM_HD BFloat16(float value) : bits(bf16BitsFromFloat(value)) {}
  TRAINMEM_HD operator float() const { return floatFromBF16Bits(bits); }
  static constexpr const char *name() { return "bf16"; }
};

/// An IEEE f16 in memory. Reads as f32; assigning an f32 rounds.
struct Float16 {
  uint16_t bits;
  Float16() = default;
  TRAINMEM_HD Float16(float value) : bits(f16BitsFromFloat(value)) {}
  TRAINMEM_HD operator float() const { return floatFromF16Bits(bits); }
  static constexpr const char *name() { return "f16"; }
};

static_assert(sizeof(BFloat16) == 2 && sizeof(Float16) == 2,
              "16-bit storage types must be 16 bits");

} // namespace trainmem

#endif // TRAINMEM_SUPPORT_FLOAT16_H
