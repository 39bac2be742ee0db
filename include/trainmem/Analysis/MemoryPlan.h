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
  /// The device's arena, or with `host` the host's (the buffers
  /// train-offload-optimizer put in host memory): each plans only its own
  /// buffers, so the two arenas are planned apart.
  explicit MemoryPlan(const FunctionMemory &memory, uint64_t alignment = 64,
                      bool host = false);

  /// Bytes the arena needs.
  uint64_t getArenaBytes() const { return arenaBytes; }
  uint64_t getAlignment() const { return alignment; }
  /// Offset of buffer `index` of the FunctionMemory (getBuffers() order).
  uint64_t getOffset(unsigned index) const { return offsets[index]; }
  ArrayRef<uint64_t> getOffsets() const { return offsets; }

  /// Writes the plan into the function `memory` analyzed, as
  /// train-plan-arena does: `train.arena_bytes` on it, `train.offset` on its
  /// tensor arguments, `train.offsets` on every op with results.
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
  std::vector<uint64_t> offsets;
};

} // namespace train
} // namespace mlir

#endif // TRAINMEM_ANALYSIS_MEMORYPLAN_H
