//===- CpuStepRun.h - a step run on the CPU runtime -------------*- C++ -*-===//
//
// The harness the unit tests that run steps share: a copy of a
// tensor-level step lowered (convert-train-to-runtime, then LLVM),
// JIT-compiled, its arguments written into a fresh arena of the CPU
// backend, run once, and each result's bytes read back.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_UNITTESTS_CPUSTEPRUN_H
#define TRAINMEM_UNITTESTS_CPUSTEPRUN_H

#include "trainmem-runtime/Runtime.h"
#include "trainmem/Evaluator/Evaluator.h"
#include "trainmem/Run/Step.h"
#include "trainmem/Support/Float16.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace mlir {
namespace train {

/// What one run of a step on the CPU backend gave: its layout and each
/// result's bytes (in the order of its result slots), or why it did not
/// run.
struct CpuStepRun {
  StepLayout layout;
  std::vector<std::string> results;
  std::string error;
  explicit operator bool() const { return error.empty(); }
};

/// Writes `value` at `slot` of `arena`: f32, bf16 or f16 (rounded from its
/// floats), i64, i32 or bytes (from its ints).
inline void writeSlot(uint8_t *arena, const TensorSlot &slot,
                      const RefTensor &value) {
  uint8_t *p = arena + slot.offset;
  for (int64_t i = 0; i < slot.numElements(); ++i) {
    if (slot.dtypeName() == "f32") {
      reinterpret_cast<float *>(p)[i] = value.floats[i];
    } else if (slot.dtypeName() == "bf16" || slot.dtypeName() == "f16") {
      uint16_t bits = slot.dtypeName() == "bf16"
                          ? trainmem::bf16BitsFromFloat(value.floats[i])
                          : trainmem::f16BitsFromFloat(value.floats[i]);
      std::memcpy(p + 2 * i, &bits, 2);
    } else if (slot.dtypeName() == "i64") {
      reinterpret_cast<int64_t *>(p)[i] = value.ints[i];
    } else if (slot.dtypeName() == "i32") {
      reinterpret_cast<int32_t *>(p)[i] = static_cast<int32_t>(value.ints[i]);
    } else {
      p[i] = static_cast<uint8_t>(value.ints[i]);
    }
  }
}

/// Lowers a copy of `module`'s step, compiles it, runs it once with `args`
/// (one per argument slot) on the CPU backend with `threads` threads.
inline CpuStepRun runStepOnCpu(ModuleOp module, ArrayRef<RefTensor> args,
                               int threads = 2) {
  CpuStepRun run;
  OwningOpRef<ModuleOp> lowered = module.clone();
  FailureOr<StepLayout> layout = lowerStep(*lowered);
  if (failed(layout)) {
    run.error = "lowering the step failed";
    return run;
  }
  run.layout = std::move(*layout);
  llvm::Expected<std::unique_ptr<JitStep>> compiled = JitStep::create(*lowered);
  if (!compiled) {
    run.error = llvm::toString(compiled.takeError());
    return run;
  }
  const char *contextError = nullptr;
  tmrt_context *ctx = tmrt_context_create("cpu", threads, &contextError);
  if (!ctx) {
    run.error = contextError ? contextError : "no CPU context";
    return run;
  }
  if (tmrt_arena_alloc(ctx, std::max<uint64_t>(run.layout.arenaBytes, 1))) {
    tmrt_context_destroy(ctx);
    run.error = "the arena could not be allocated";
    return run;
  }
  uint8_t *arena = tmrt_arena_base(ctx);
  for (auto [slot, value] : llvm::zip(run.layout.arguments, args))
    writeSlot(arena, slot, value);
  (*compiled)->run(ctx);
  if (const char *failure = tmrt_context_error(ctx))
    run.error = failure;
  for (const TensorSlot &slot : run.layout.results)
    run.results.emplace_back(reinterpret_cast<char *>(arena + slot.offset),
                             slot.bytes);
  tmrt_context_destroy(ctx);
  return run;
}

} // namespace train
} // namespace mlir

#endif // TRAINMEM_UNITTESTS_CPUSTEPRUN_H
