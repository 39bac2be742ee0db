//===- RematBudgetTest.cpp - policy=budget against exhaustive search ------===//
//
// For chains of up to 6 layers, every assignment of a recompute choice
// (none, selective, attention, mlp, full) to each layer is materialized and
// measured: its most live bytes and the arena its memory plan needs. For a
// sweep of budgets, the plan train-remat{policy=budget} picks must fit the
// budget with its arena (measured, not predicted); where the assignments
// with the least recompute among those whose live bytes fit all fit by
// their arenas too, it costs exactly that recompute; where no assignment's
// arena fits, the pass must fail.
//
//===----------------------------------------------------------------------===//

#include "TestModels.h"
#include "trainmem/Analysis/MemoryAnalysis.h"
#include "trainmem/Analysis/MemoryPlan.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Dialect/Train/Transforms/RegionUtils.h"
#include "trainmem/Model/ModelBuilder.h"
#include "trainmem/Run/Step.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include <gtest/gtest.h>

#include <set>

using namespace mlir;
using namespace mlir::train;

namespace {

const char *const kChoices[] = {"none", "selective", "attention", "mlp",
                                "full"};

struct Outcome {
  uint64_t peak = 0;
  uint64_t arena = 0;
  uint64_t recompute = 0;
};

class RematBudgetTest : public StepTest {
protected:
  RematBudgetTest() {
    context.getDiagEngine().registerHandler([](Diagnostic &) {
      return success(); // Quiet: remarks and expected failures.
    });
  }

  OwningOpRef<ModuleOp> step(int64_t layers) {
    ModelConfig config = smallModel("tiny", {layers, 16, 2, 2, 32, 8, 2, 256});
    config.dropout = 0.1;
    return buildStep(config, "train-autodiff");
  }

  /// Runs train-remat{options} and materialization on a copy; the measured
  /// outcome, or nothing when the pass fails.
  std::optional<Outcome> run(ModuleOp module, const std::string &options) {
    OwningOpRef<ModuleOp> copy = module.clone();
    PassManager pm(&context);
    if (failed(parsePassPipeline("train-remat{" + options +
                                     "},train-materialize-remat,train-"
                                     "materialize-layouts",
                                 pm)))
      return std::nullopt;
    if (failed(pm.run(*copy)))
      return std::nullopt;
    FunctionMemory memory(copy->lookupSymbol<func::FuncOp>("train_step"));
    return Outcome{memory.getPeakBytes(),
                   std::max(MemoryPlan(memory).getArenaBytes(),
                            memory.getPeakBytes()),
                   memory.getRecomputeFlops()};
  }

  void checkAgainstExhaustiveSearch(int64_t layers) {
    OwningOpRef<ModuleOp> module = step(layers);
    std::vector<Outcome> all;
    std::vector<unsigned> digits(layers, 0);
    while (true) {
      std::string choices;
      for (int64_t i = 0; i < layers; ++i)
        choices += std::string(i ? "," : "") + kChoices[digits[i]];
      std::optional<Outcome> outcome =
          run(*module, "policy=custom choices=" + choices);
      ASSERT_TRUE(outcome) << choices;
      all.push_back(*outcome);
      int64_t i = 0;
      while (i < layers && ++digits[i] == 5)
        digits[i++] = 0;
      if (i == layers)
        break;
    }

    // Budgets: every distinct arena an assignment needs (thinned to at
    // most 24), and one byte below the smallest.
    std::set<uint64_t> peaks;
    for (const Outcome &o : all)
      peaks.insert(o.arena);
    std::vector<uint64_t> budgets;
    size_t stride = std::max<size_t>(1, peaks.size() / 24);
    size_t index = 0;
    for (uint64_t peak : peaks)
      if (index++ % stride == 0)
        budgets.push_back(peak);
    budgets.push_back(*peaks.rbegin());
    budgets.push_back(*peaks.begin() - 1);

    for (uint64_t budget : budgets) {
      // The least recompute by live bytes, and whether every assignment
      // that reaches it fits by its arena too; the least by arena.
      std::optional<uint64_t> bestLive, bestArena;
      for (const Outcome &o : all) {
        if (o.peak <= budget && (!bestLive || o.recompute < *bestLive))
          bestLive = o.recompute;
        if (o.arena <= budget && (!bestArena || o.recompute < *bestArena))
          bestArena = o.recompute;
      }
      bool liveOptimumFits =
          bestLive && llvm::all_of(all, [&](const Outcome &o) {
            return o.peak > budget || o.recompute != *bestLive ||
                   o.arena <= budget;
          });
      std::optional<Outcome> planned =
          run(*module, "policy=budget budget=" + std::to_string(budget));
      if (!bestArena) {
        EXPECT_FALSE(planned) << layers << " layers, budget " << budget
                              << ": nothing fits, the pass must fail";
        continue;
      }
      if (!planned) {
        EXPECT_FALSE(liveOptimumFits)
            << layers << " layers, budget " << budget;
        continue;
      }
      EXPECT_LE(planned->arena, budget) << layers << " layers";
      EXPECT_GE(planned->recompute, *bestArena) << layers << " layers";
      if (liveOptimumFits)
        EXPECT_EQ(planned->recompute, *bestLive)
            << layers << " layers, budget " << budget;
    }
  }
};

TEST_F(RematBudgetTest, OptimalOnChainsOfOneToFourLayers) {
  for (int64_t layers = 1; layers <= 4; ++layers)
    checkAgainstExhaustiveSearch(layers);
}

TEST_F(RematBudgetTest, OptimalOnAChainOfSixLayers) {
  checkAgainstExhaustiveSearch(6);
}

} // namespace
