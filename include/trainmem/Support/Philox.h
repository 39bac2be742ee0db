//===- Philox.h - Philox-4x32-10 counter-based RNG ---------------*- C++ -*-===//
//
// Philox-4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2,
// 3", SC'11). Header-only and free of LLVM so that the reference evaluator,
// the CPU runtime and device kernels draw identical streams.
//
// Dropout's keep decision for element i of a tensor, with a seed and an
// offset (see train.dropout):
//   counter = (lo32(i/4), hi32(i/4), lo32(offset), hi32(offset))
//   key     = (lo32(seed), hi32(seed))
//   word    = philox4x32_10(counter, key)[i % 4]
//   keep    = (word >> 8) < dropoutKeepThreshold(rate)
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_SUPPORT_PHILOX_H
#define TRAINMEM_SUPPORT_PHILOX_H

#include "trainmem/Support/HostDevice.h"

#include <array>
#include <cmath>
#include <cstdint>

namespace trainmem {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

TRAINMEM_HD inline PhiloxCounter philox4x32Round(const PhiloxCounter &ctr,
                                                 const PhiloxKey &key) {
  constexpr uint64_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  uint64_t p0 = kM0 * ctr[0];
  uint64_t p1 = kM1 * ctr[2];
  return {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0],
          static_cast<uint32_t>(p1),
          static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1],
          static_cast<uint32_t>(p0)};
}

/// Ten rounds of Philox-4x32 with the Weyl key schedule.
TRAINMEM_HD inline PhiloxCounter philox4x32_10(PhiloxCounter ctr,
                                               PhiloxKey key) {
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  ctr = philox4x32Round(ctr, key);
  for (int round = 1; round < 10; ++round) {
    key[0] += kW0;
    key[1] += kW1;
    ctr = philox4x32Round(ctr, key);
  }
  return ctr;
}

/// The 32-bit word of the stream (seed, offset) at element `index`.
TRAINMEM_HD inline uint32_t philoxWord(uint64_t seed, uint64_t offset,
                                       uint64_t index) {
  uint64_t block = index / 4;
  PhiloxCounter ctr = {static_cast<uint32_t>(block),
                       static_cast<uint32_t>(block >> 32),
                       static_cast<uint32_t>(offset),
                       static_cast<uint32_t>(offset >> 32)};
  PhiloxKey key = {static_cast<uint32_t>(seed),
                   static_cast<uint32_t>(seed >> 32)};
  return philox4x32_10(ctr, key)[index % 4];
}

/// Elements whose top 24 bits fall below this value are kept: the integer
/// form of "uniform in [0, 1) < 1 - rate", exact on every executor.
inline uint32_t dropoutKeepThreshold(double rate) {
  return static_cast<uint32_t>(std::llround((1.0 - rate) * 16777216.0));
}

TRAINMEM_HD inline bool dropoutKeep(uint64_t seed, uint64_t offset,
                                    uint64_t index, uint32_t keepThreshold) {
  return (philoxWord(seed, offset, index) >> 8) < keepThreshold;
}

/// Where element `i` of one rank's part of a draw lies in the whole draw
/// (train.dropout's `split`): the part is blocks of `block` elements (its
/// elements from the split dimension on), the whole `parts` times as many
/// per block, the rank's at `position`; `block` 0 is a whole draw. A
/// `balanced` part (a context-parallel rank's positions) is two chunks of
/// block / 2, chunks `position` and 2·parts - 1 - `position` of the
/// whole's 2·parts.
TRAINMEM_HD inline uint64_t splitDrawIndex(uint64_t i, uint64_t block,
                                           uint64_t parts, uint64_t position,
                                           bool balanced = false) {
  if (block == 0)
    return i;
  if (!balanced)
    return (i / block) * block * parts + position * block + i % block;
  uint64_t chunk = block / 2, k = i / chunk;
  uint64_t at = k % 2 == 0 ? position : 2 * parts - 1 - position;
  return (k / 2) * block * parts + at * chunk + i % chunk;
}

/// The elements of a rank's part of a draw that lie together in the whole
/// draw, from each multiple of it on: a block, or a balanced part's chunk.
TRAINMEM_HD inline uint64_t splitDrawRun(uint64_t block, bool balanced) {
  return balanced ? block / 2 : block;
}

} // namespace trainmem

#endif // TRAINMEM_SUPPORT_PHILOX_H
