//===- GradAccumTest.cpp - N micro-batches equal one batch ----------------===//
//
// The tiny model in f32, without dropout and with it. A step accumulated over N
// micro-batches must give the gradients and updated weights of the step on
// the whole batch, within a relative 1e-5 of each tensor's largest
// magnitude (max |accumulated - whole| <= 1e-5 · max(|whole|, 1e-3); sums
// in another order differ by float rounding only), on the reference
// evaluator (the train.accumulate loop) and on the CPU runtime (unrolled).
//
//===----------------------------------------------------------------------===//

#include "CpuStepRun.h"
#include "TestModels.h"
#include "Tolerance.h"
#include "trainmem-runtime/Runtime.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Evaluator/Evaluator.h"
#include "trainmem/Model/ModelBuilder.h"
#include "trainmem/Run/Step.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

using namespace mlir;
using namespace mlir::train;

namespace {

constexpr double kRelTol = 1e-5;

class GradAccumTest : public StepTest {
protected:
  OwningOpRef<ModuleOp> step(StringRef pipeline) {
    ModelConfig config = *getPreset("tiny");
    config.dropout = dropout;
    config.layers = 2;
    config.batch = batch;
    config.seq = 16;
    return buildStep(config, pipeline);
  }

  /// Tokens and targets of 4 rows of 16; with `padded`, row r keeps only
  /// its first lengths[r] targets (the rest are the ignore index).
  std::vector<RefTensor> inputs(func::FuncOp func, bool padded) {
    std::mt19937 rng(11);
    std::uniform_int_distribution<int64_t> byte(0, 255);
    std::normal_distribution<float> normal(0.0f, 0.1f);
    const int64_t lengths[] = {16, 3, 9, 1};
    std::vector<RefTensor> args;
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      auto type = cast<RankedTensorType>(func.getArgument(i).getType());
      std::vector<int64_t> shape(type.getShape().begin(),
                                 type.getShape().end());
      auto input = func.getArgAttrOfType<StringAttr>(i, kInputAttrName);
      if (isa<IntegerType>(type.getElementType())) {
        std::vector<int64_t> ids(type.getNumElements());
        for (size_t j = 0; j < ids.size(); ++j) {
          ids[j] = type.getRank() == 0 ? 1 : byte(rng);
          if (padded && input && input.getValue() == "targets" &&
              static_cast<int64_t>(j % 16) >= lengths[(j / 16) % 4])
            ids[j] = -100;
        }
        args.push_back(RefTensor::ofInts(shape, ids));
      } else {
        bool nonNegative = static_cast<bool>(
            func.getArgAttr(i, kOptimizerStateAttrName));
        std::vector<float> values(type.getNumElements());
        for (float &v : values)
          v = nonNegative ? std::abs(normal(rng)) : normal(rng);
        args.push_back(RefTensor::ofFloats(shape, values));
      }
    }
    return args;
  }

  std::vector<RefTensor> onEvaluator(ModuleOp module,
                                     const std::vector<RefTensor> &args) {
    return evaluateTrainStep(module, args);
  }

  /// The step on the CPU runtime, its micro-batch loop unrolled or run
  /// as a loop (convert-train-to-runtime); each result's bytes.
  std::vector<std::string> runtimeBytes(ModuleOp module,
                                        const std::vector<RefTensor> &args,
                                        bool unroll) {
    OwningOpRef<ModuleOp> step = module.clone();
    PassManager pm(&context);
    EXPECT_TRUE(succeeded(
        parsePassPipeline(unroll ? "train-unroll-accum,train-materialize-remat"
                                 : "train-materialize-remat",
                          pm)));
    EXPECT_TRUE(succeeded(pm.run(*step)));
    CpuStepRun run = runStepOnCpu(*step, args);
    if (!run) {
      ADD_FAILURE() << run.error;
      return {};
    }
    return run.results;
  }

  /// The step's results on the CPU runtime, its loop unrolled; each as
  /// floats (the results are f32).
  std::vector<RefTensor> onRuntime(ModuleOp module,
                                   const std::vector<RefTensor> &args) {
    OwningOpRef<ModuleOp> step = module.clone();
    PassManager pm(&context);
    EXPECT_TRUE(succeeded(
        parsePassPipeline("train-unroll-accum,train-materialize-remat", pm)));
    EXPECT_TRUE(succeeded(pm.run(*step)));
    CpuStepRun run = runStepOnCpu(*step, args);
    if (!run) {
      ADD_FAILURE() << run.error;
      return {};
    }
    std::vector<RefTensor> results;
    for (auto [slot, bytes] : llvm::zip(run.layout.results, run.results)) {
      std::vector<float> values(slot.numElements());
      std::memcpy(values.data(), bytes.data(), slot.bytes);
      results.push_back(RefTensor::ofFloats(slot.shape, values));
    }
    return results;
  }

  void expectEqualToWholeBatch(StringRef autodiff, StringRef extra,
                               StringRef accum, bool padded) {
    std::string base = ("train-autodiff{" + autodiff + "}").str();
    if (!extra.empty())
      base += "," + extra.str();
    OwningOpRef<ModuleOp> whole = step(base);
    OwningOpRef<ModuleOp> accumulated =
        step(base + ",train-grad-accum{" + accum.str() + "}");
    std::vector<RefTensor> args =
        inputs(whole->lookupSymbol<func::FuncOp>("train_step"), padded);
    std::vector<RefTensor> expected = onEvaluator(*whole, args);
    EXPECT_LE(worstRelative(onEvaluator(*accumulated, args), expected),
              kRelTol)
        << accum.str() << " " << extra.str() << " (evaluator)";
    EXPECT_LE(worstRelative(onRuntime(*accumulated, args),
                            onRuntime(*whole, args)),
              kRelTol)
        << accum.str() << " " << extra.str() << " (CPU runtime)";
    // The loop run rolled computes the unrolled step's bits (a loop summed
    // in groups runs unrolled only).
    if (!StringRef(accum).contains("groups"))
      EXPECT_EQ(runtimeBytes(*accumulated, args, /*unroll=*/false),
                runtimeBytes(*accumulated, args, /*unroll=*/true))
          << accum.str() << " " << extra.str() << " (rolled against unrolled)";
  }

  double dropout = 0.0;
  /// The step's batch rows.
  int64_t batch = 4;
};

TEST_F(GradAccumTest, MeanOnUnpaddedDataEqualsOneBatch) {
  // Also a batch that does not divide: 3 micro-batches of 2, 2 and 0 real
  // rows, each weighed by its share of the rows.
  for (const char *accum : {"steps=2 normalize=mean", "steps=4 normalize=mean",
                            "steps=3 normalize=mean"})
    for (const char *autodiff : {"optimizer=none", "clip-norm=0.5 lr=1e-2"})
      expectEqualToWholeBatch(autodiff, "", accum, /*padded=*/false);
}

TEST_F(GradAccumTest, TokensOnPaddedDataEqualsOneBatch) {
  // Variable-length rows (16, 3, 9 and 1 valid targets), also with a batch
  // that does not divide (3 micro-batches of 2 rows, the last padded).
  for (const char *accum : {"steps=2", "steps=4", "steps=3"})
    for (const char *autodiff : {"optimizer=none", "clip-norm=0.5 lr=1e-2"})
      expectEqualToWholeBatch(autodiff, "", accum, /*padded=*/true);
}

TEST_F(GradAccumTest, NaiveMeanOfMicroBatchMeansDiffersOnPaddedData) {
  // The bug of transformers PR 34191: averaging each micro-batch's mean
  // weighs a token of a short micro-batch more than one of a long one.
  OwningOpRef<ModuleOp> whole = step("train-autodiff{optimizer=none}");
  OwningOpRef<ModuleOp> naive = step(
      "train-autodiff{optimizer=none},train-grad-accum{steps=2 normalize=mean}");
  std::vector<RefTensor> args =
      inputs(whole->lookupSymbol<func::FuncOp>("train_step"), true);
  EXPECT_GT(worstRelative(onEvaluator(*naive, args), onEvaluator(*whole, args)),
            1e-2);
}

// Every split of a batch, also when the steps do not divide it (issue 31,
// item 2: 8 rows in 3 built an invalid reshape): micro-batches of
// ceil(B / steps) rows, the last ones padded (ignored targets) and weighed
// by their real rows or tokens, equal the whole batch.
TEST_F(GradAccumTest, UnevenSplitsEqualOneBatch) {
  for (auto [rows, steps] : {std::pair<int64_t, int>{8, 3}, {5, 2}, {10, 4},
                             {7, 7}, {6, 4}}) {
    batch = rows;
    std::string accum = "steps=" + std::to_string(steps);
    for (const char *autodiff : {"optimizer=none", "clip-norm=0.5 lr=1e-2"}) {
      expectEqualToWholeBatch(autodiff, "", accum, /*padded=*/true);
      expectEqualToWholeBatch(autodiff, "", accum + " normalize=mean",
                              /*padded=*/false);
    }
    dropout = 0.1;
    expectEqualToWholeBatch("optimizer=none", "", accum, /*padded=*/true);
    dropout = 0.0;
  }
}

TEST_F(GradAccumTest, ComposesWithRemat) {
  for (const char *remat : {"train-remat{policy=selective}",
                            "train-remat{policy=full}"})
    expectEqualToWholeBatch("optimizer=none", remat, "steps=2",
                            /*padded=*/true);
}

} // namespace

namespace {

// With dropout each sample draws the mask it draws in the whole batch (its
// place in the batch, not in its micro-batch, keys the mask), so dropout
// does not change the result of accumulation either; the same masks are
// drawn again by remat's recompute and by a partly unrolled loop.
TEST_F(GradAccumTest, DropoutDrawsTheWholeBatchMasks) {
  dropout = 0.1;
  for (const char *accum : {"steps=2", "steps=4", "steps=3"})
    for (const char *autodiff : {"optimizer=none", "clip-norm=0.5 lr=1e-2"})
      expectEqualToWholeBatch(autodiff, "", accum, /*padded=*/true);
  expectEqualToWholeBatch("optimizer=none", "train-remat{policy=selective}",
                          "steps=2", /*padded=*/false);
  expectEqualToWholeBatch("optimizer=none", "train-remat{policy=full}",
                          "steps=4", /*padded=*/false);
}

TEST_F(GradAccumTest, DropoutInAPartlyUnrolledLoop) {
  dropout = 0.1;
  OwningOpRef<ModuleOp> whole = step("train-autodiff{optimizer=none}");
  OwningOpRef<ModuleOp> partial =
      step("train-autodiff{optimizer=none},train-grad-accum{steps=4},"
           "train-unroll-accum{factor=2}");
  std::vector<RefTensor> args =
      inputs(whole->lookupSymbol<func::FuncOp>("train_step"), true);
  EXPECT_LE(worstRelative(onEvaluator(*partial, args),
                          onEvaluator(*whole, args)),
            kRelTol);
}

// `groups` sets the order of the sums (ZeRO's ranks' order: docs/Zero.md):
// the evaluator's rolled loop sums as the unrolled copies do, to the bit,
// for consecutive and interleaved groups, with dropout; the result is the
// whole batch's within the tolerance, and not the plain order's bits.
TEST_F(GradAccumTest, GroupsSetTheOrderOfTheSums) {
  dropout = 0.1;
  OwningOpRef<ModuleOp> whole = step("train-autodiff{optimizer=none}");
  OwningOpRef<ModuleOp> plain =
      step("train-autodiff{optimizer=none},train-grad-accum{steps=4}");
  std::vector<RefTensor> args =
      inputs(whole->lookupSymbol<func::FuncOp>("train_step"), true);
  std::vector<RefTensor> plainSums = onEvaluator(*plain, args);
  for (const char *accum :
       {"steps=4 groups=2", "steps=4 groups=2 interleaved=true"}) {
    std::string pipeline = std::string("train-autodiff{optimizer=none},"
                                       "train-grad-accum{") +
                           accum + "}";
    OwningOpRef<ModuleOp> rolled = step(pipeline);
    OwningOpRef<ModuleOp> unrolled = step(pipeline + ",train-unroll-accum");
    std::vector<RefTensor> grouped = onEvaluator(*rolled, args);
    EXPECT_EQ(worstRelative(grouped, onEvaluator(*unrolled, args)), 0.0)
        << accum;
    EXPECT_LE(worstRelative(grouped, onEvaluator(*whole, args)), kRelTol)
        << accum;
    EXPECT_GT(worstRelative(grouped, plainSums), 0.0) << accum;
  }
}

// The test above can fail: without the micro-batch's place, every
// micro-batch draws the first micro-batch's masks.
TEST_F(GradAccumTest, DropoutWithoutPlacesDiffers) {
  dropout = 0.1;
  OwningOpRef<ModuleOp> whole = step("train-autodiff{optimizer=none}");
  OwningOpRef<ModuleOp> accumulated =
      step("train-autodiff{optimizer=none},train-grad-accum{steps=2}");
  accumulated->walk([](DropoutOp op) {
    op.getPartMutable().clear();
    op.setPartElements(0);
  });
  accumulated->walk([](DropoutMaskOp op) {
    op.getPartMutable().clear();
    op.setPartElements(0);
  });
  std::vector<RefTensor> args =
      inputs(whole->lookupSymbol<func::FuncOp>("train_step"), false);
  EXPECT_GT(worstRelative(onEvaluator(*accumulated, args),
                          onEvaluator(*whole, args)),
            1e-3);
}

// train-unroll-accum creates arith constants (the micro-batch shares): it
// declares the arith dialect, so it runs on a module that never loaded it.
TEST(GradAccumDialects, UnrollLoadsArithItself) {
  DialectRegistry registry;
  registry.insert<TrainDialect, func::FuncDialect, arith::ArithDialect>();
  MLIRContext context(registry);
  registerTrainPasses();
  const char *source = R"mlir(
func.func @train_step(%tokens: tensor<4x8xi32> {train.input = "tokens"}, %table: tensor<16x2xf32> {train.param = "table"}, %n: tensor<i64> {train.input = "n"}) -> tensor<f32> attributes {train.step} {
  %loss = train.accumulate %tokens steps 3 padding [0] weighted : (tensor<4x8xi32>) -> tensor<f32> {
  ^bb0(%t: tensor<2x8xi32>, %w: tensor<f32>):
    %e = train.embedding %table, %t : tensor<16x2xf32>, tensor<2x8xi32> -> tensor<2x8x2xf32>
    %s, %c = train.cross_entropy %e, %t {ignore_index = -100 : i64} : tensor<2x8x2xf32>, tensor<2x8xi32> -> tensor<f32>, tensor<i64>
    %l = train.mean_loss %s, %n weighted by %w : tensor<f32> : tensor<f32>, tensor<i64>
    train.yield %l : tensor<f32>
  }
  return %loss : tensor<f32>
}
)mlir";
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(source, &context);
  ASSERT_TRUE(module);
  ASSERT_EQ(context.getLoadedDialect<arith::ArithDialect>(), nullptr);
  PassManager pm(&context);
  ASSERT_TRUE(succeeded(parsePassPipeline("train-unroll-accum", pm)));
  ASSERT_TRUE(succeeded(pm.run(*module)));
  size_t constants = 0;
  module->walk([&](arith::ConstantOp) { ++constants; });
  EXPECT_GE(constants, 3u);
}

} // namespace
