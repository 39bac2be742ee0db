//===- MemoryPlan.h - static offsets of a step's buffers ---------*- C++ -*-===//
//
// Places every buffer of a step in one arena so that buffers live at the same
// time never overlap. Greedy by size (Pisarchyk & Lee 2020, as TFLite does):
// buffers in decreasing size, each at the lowest offset where it fits among
// the already placed buffers whose lifetimes overlap its own. Large tensors
// dominate a training step (activations, logits, gradients), and placing
// them first keeps the small ones in the gaps they leave; on the models here
// the arena comes within a few percent of the analysis's peak live bytes,
// which is the lower bound for the schedule.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_ANALYSIS_MEMORYPLAN_H
#define TRAINMEM_ANALYSIS_MEMORYPLAN_H

#include "trainmem/Analysis/MemoryAnalysis.h"

#include <vector>

namespace mlir {
namespace train {

class MemoryPlan {
public:
  /// Every buffer's size is rounded up to `alignment` bytes, a power of two.
  /// Two arenas, planned apart: the device's, and the host's for the
  /// buffers train-offload-optimizer put in host memory (Buffer::host).
  explicit MemoryPlan(const FunctionMemory &memory, uint64_t alignment = 64);
  /// The same with some device buffers at given offsets (buffer index,
  /// offset) and some device bytes (offset, bytes) kept free all along: a
  /// function that shares another's state (a Hessian step) keeps what it
  /// reads where the other's plan put it, and places the rest around all
  /// of the other's state.
  MemoryPlan(const FunctionMemory &memory,
             ArrayRef<std::pair<unsigned, uint64_t>> pinned,
             ArrayRef<std::pair<uint64_t, uint64_t>> reserved,
             uint64_t alignment = 64);

  /// Bytes the device's arena needs.
  uint64_t getArenaBytes() const { return arenaBytes; }
  /// Bytes the host's arena needs (0 without host memory).
  uint64_t getHostArenaBytes() const { return hostArenaBytes; }
  uint64_t getAlignment() const { return alignment; }
  /// Offset of buffer `index` of the FunctionMemory (getBuffers() order) in
  /// its arena (the host's for a host buffer).
  uint64_t getOffset(unsigned index) const { return offsets[index]; }
  ArrayRef<uint64_t> getOffsets() const { return offsets; }

  /// Writes the plan into the function `memory` analyzed, as
  /// train-plan-arena does: `train.arena_bytes` on it (and
  /// `train.host_arena_bytes` with host memory), `train.offset` on its
  /// tensor arguments, `train.offsets` on every op with results, and
  /// `train.staging_offsets` on an update with staging copies (one per
  /// operand, -1 for an operand without). A host buffer's offsets are in
  /// the host's arena.
  void writeToIR(const FunctionMemory &memory) const;
  /// Whether `func` carries a plan (`train.arena_bytes`).
  static bool hasPlanInIR(Operation *func);
  /// The plan written into the function `memory` analyzed, checked against
  /// the analysis: every tensor value has an offset, 64-byte aligned, values
  /// of one buffer share it, every buffer lies inside the arena, and no two
  /// buffers live at the same time overlap. Otherwise an error at the
  /// offending op naming `passName`, and failure: a plan written before a
  /// later transform is refused, never used.
  static FailureOr<MemoryPlan> readFromIR(const FunctionMemory &memory,
                                          StringRef passName);

private:
  MemoryPlan() = default;

  uint64_t alignment;
  uint64_t arenaBytes = 0;
  uint64_t hostArenaBytes = 0;
  std::vector<uint64_t> offsets;
};

} // namespace train
} // namespace mlir

#endif // TRAINMEM_ANALYSIS_MEMORYPLAN_H
