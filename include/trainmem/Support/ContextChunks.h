//===- ContextChunks.h - a rank's positions of a split sequence -*- C++ -*-===//
//
// Which positions of a sequence a rank of a context-parallel group holds
// (train-context-parallel, #train.context): a contiguous piece, or, load
// balanced for a causal mask, chunks p and 2c - 1 - p of 2c equal chunks
// (Megatron-Core's order). Header-only and free of LLVM, so the reference
// evaluator and the runtime's kernels (CPU and CUDA) agree on them by
// construction.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_SUPPORT_CONTEXTCHUNKS_H
#define TRAINMEM_SUPPORT_CONTEXTCHUNKS_H

#include "trainmem/Support/HostDevice.h"

#include <cstdint>

namespace trainmem {

/// One rank's part of a sequence cut among `parts` ranks.
struct ContextChunks {
  /// Ranks of the group; 1: the whole sequence.
  int64_t parts = 1;
  /// This rank's place in its group.
  int64_t position = 0;
  /// Chunks p and 2·parts - 1 - p of 2·parts (else the p-th of parts).
  bool balanced = false;

  TRAINMEM_HD bool isWhole() const { return parts <= 1; }

  /// The place in the whole sequence of row `i` of the `local` rows this
  /// rank holds.
  TRAINMEM_HD int64_t wholeRow(int64_t i, int64_t local) const {
    if (parts <= 1)
      return i;
    if (!balanced)
      return position * local + i;
    int64_t chunk = local / 2;
    return i < chunk ? position * chunk + i
                     : (2 * parts - 1 - position) * chunk + (i - chunk);
  }

  /// The place in the whole sequence of row `j` of the group's rows
  /// gathered in rank order (`gathered` rows: each rank's, one after
  /// another).
  TRAINMEM_HD int64_t gatheredRow(int64_t j, int64_t gathered) const {
    if (parts <= 1 || !balanced)
      return j;
    int64_t local = gathered / parts;
    ContextChunks owner{parts, j / local, balanced};
    return owner.wholeRow(j % local, local);
  }

  /// The longest run of gathered rows that are consecutive in the whole
  /// sequence, each run starting at a multiple of it.
  TRAINMEM_HD int64_t gatheredRun(int64_t gathered) const {
    return parts > 1 && balanced ? gathered / (2 * parts) : gathered;
  }

  /// The longest run of this rank's rows consecutive in the whole
  /// sequence (a multiple of it starts each).
  TRAINMEM_HD int64_t localRun(int64_t local) const {
    return parts > 1 && balanced ? local / 2 : local;
  }
};

} // namespace trainmem

#endif // TRAINMEM_SUPPORT_CONTEXTCHUNKS_H
