//===- MemoryPlanTest.cpp - the static arena plan -------------------------===//

#include "trainmem/Analysis/MemoryAnalysis.h"
#include "trainmem/Analysis/MemoryPlan.h"
#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Model/ModelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace mlir::train;

namespace {

class MemoryPlanTest : public ::testing::Test {
protected:
  MemoryPlanTest() {
    context.loadDialect<TrainDialect, func::FuncDialect, arith::ArithDialect>();
  }

  /// The training step of `preset`, after train-autodiff.
  OwningOpRef<ModuleOp> step(const ModelConfig &config) {
    OwningOpRef<ModuleOp> module = buildModel(&context, config);
    PassManager pm(&context);
    pm.addPass(createTrainAutodiffPass());
    EXPECT_TRUE(succeeded(pm.run(*module)));
    return module;
  }

  /// No two buffers live at the same point share a byte, every offset is
  /// aligned, and the arena holds them all.
  static void expectValid(const FunctionMemory &memory,
                          const MemoryPlan &plan) {
    ArrayRef<Buffer> buffers = memory.getBuffers();
    for (unsigned i = 0; i < buffers.size(); ++i) {
      const Buffer &a = buffers[i];
      EXPECT_EQ(plan.getOffset(i) % plan.getAlignment(), 0u);
      EXPECT_LE(plan.getOffset(i) + a.bytes, plan.getArenaBytes());
      for (unsigned j = i + 1; j < buffers.size(); ++j) {
        const Buffer &b = buffers[j];
        bool liveTogether = !(a.lastPoint < b.firstPoint ||
                              b.lastPoint < a.firstPoint);
        bool overlap = plan.getOffset(i) < plan.getOffset(j) + b.bytes &&
                       plan.getOffset(j) < plan.getOffset(i) + a.bytes;
        if (a.bytes && b.bytes && liveTogether)
          ASSERT_FALSE(overlap) << "buffers " << i << " and " << j;
      }
    }
  }

  MLIRContext context;
};

TEST_F(MemoryPlanTest, TinyStepPlanIsValidAndTight) {
  OwningOpRef<ModuleOp> module = step(*getPreset("tiny"));
  MemoryAnalysis analysis(*module);
  const FunctionMemory &memory = analysis.getFunctions().front();
  MemoryPlan plan(memory);
  expectValid(memory, plan);
  // The peak of live bytes is the lower bound for this schedule.
  EXPECT_GE(plan.getArenaBytes(), memory.getPeakBytes());
  EXPECT_LE(plan.getArenaBytes(), 1.05 * memory.getPeakBytes());
}

TEST_F(MemoryPlanTest, Gpt2StepPlanIsWithinFivePercentOfPeak) {
  // Validity is checked pairwise on tiny; here the bound on a real model
  // (gpt2-124m, b = 8, s = 1024, bf16) and non-overlap of the large buffers.
  OwningOpRef<ModuleOp> module = step(*getPreset("gpt2-124m"));
  MemoryAnalysis analysis(*module);
  const FunctionMemory &memory = analysis.getFunctions().front();
  MemoryPlan plan(memory);
  EXPECT_GE(plan.getArenaBytes(), memory.getPeakBytes());
  EXPECT_LE(plan.getArenaBytes(), 1.05 * memory.getPeakBytes());
}

TEST_F(MemoryPlanTest, DisjointLifetimesShareMemory) {
  // Two 4 KiB temporaries, one dead before the other is born, and a third
  // live across both: the plan reuses the first's memory for the second.
  const char *source = R"mlir(
    func.func @f(%x: tensor<1024xf32>) -> tensor<1024xf32> {
      %a = train.gelu %x : tensor<1024xf32>
      %b = train.silu %a : tensor<1024xf32>
      %c = train.gelu %b : tensor<1024xf32>
      %d = train.add %c, %x : tensor<1024xf32>
      return %d : tensor<1024xf32>
    })mlir";
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(source, &context);
  ASSERT_TRUE(module);
  MemoryAnalysis analysis(*module);
  const FunctionMemory &memory = analysis.getFunctions().front();
  MemoryPlan plan(memory);
  expectValid(memory, plan);
  // x lives throughout; at most two of a, b, c, d are live at once.
  EXPECT_EQ(memory.getPeakBytes(), 3u * 4096);
  EXPECT_EQ(plan.getArenaBytes(), 3u * 4096);
}

} // namespace
