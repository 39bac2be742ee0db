//===- PipelineOptionsTest.cpp - typed pass options and their text --------===//
//
// Each pass's generated options struct and its text (PassOptionText.h,
// trainmem-tblgen -gen-pass-option-text), train-step's typed options and
// the printed pipeline: what is printed parses back to equal options, and
// the printed pipeline builds the passes the typed options build.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Dialect/Train/Transforms/OptimizerRegistry.h"
#include "trainmem/Dialect/Train/Transforms/PassOptionText.h"
#include "trainmem/Dialect/Train/Transforms/Pipelines.h"
#include "trainmem/Dialect/Train/Transforms/StepPhases.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace mlir::train;

namespace {

class PipelineOptionsTest : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    registerTrainPasses();
    registerTrainPipelines();
  }

  /// `text` parsed, printed and parsed again: equal, and printed the same.
  template <typename OptionsT> static OptionsT roundTrip(StringRef text) {
    OptionsT first;
    std::string errors;
    llvm::raw_string_ostream os(errors);
    EXPECT_TRUE(succeeded(parsePassOptions(text, first, os)))
        << text.str() << ": " << errors;
    std::string printed = printPassOptions(first);
    OptionsT second;
    EXPECT_TRUE(succeeded(parsePassOptions(printed, second, os)))
        << printed << ": " << errors;
    EXPECT_EQ(first, second) << text.str() << " printed as " << printed;
    EXPECT_EQ(printPassOptions(second), printed);
    // Every option printed (also the defaults) parses back the same.
    OptionsT third;
    EXPECT_TRUE(succeeded(
        parsePassOptions(printPassOptions(first, /*all=*/true), third, os)))
        << printPassOptions(first, true) << ": " << errors;
    EXPECT_EQ(first, third);
    return first;
  }

  /// The passes `pm` holds, in MLIR's own printed form (every option).
  static std::string passesOf(OpPassManager &pm) {
    std::string text;
    llvm::raw_string_ostream os(text);
    pm.printAsTextualPipeline(os);
    return text;
  }

  static LogicalResult fail(const Twine &message) {
    ADD_FAILURE() << message.str();
    return failure();
  }
};

TEST_F(PipelineOptionsTest, PassOptionsParseBackFromTheirText) {
  auto zero = roundTrip<TrainZeroPassOptions>(
      "stage=3 ranks=4 bucket=1000 prefetch=2 accumulate=full");
  EXPECT_EQ(zero.stage, 3);
  EXPECT_EQ(zero.ranks, 4);
  EXPECT_EQ(zero.accumulate, ZeroAccumulate::full);
  EXPECT_EQ(printPassOptions(zero),
            "stage=3 ranks=4 bucket=1000 prefetch=2 accumulate=full");
  EXPECT_EQ(printPass(zero),
            "train-zero{stage=3 ranks=4 bucket=1000 prefetch=2 "
            "accumulate=full}");
  // Defaults print as nothing; the pass alone.
  EXPECT_EQ(printPass(TrainZeroPassOptions()), "train-zero");
  // Lists, strings with spaces and nested pipelines.
  auto remat = roundTrip<TrainRematPassOptions>(
      "policy=custom layers=0,2 choices=full,none "
      "measure-after={train-zero{stage=1 ranks=2},train-release-gradients}");
  EXPECT_EQ(remat.policy, RematPolicy::custom);
  EXPECT_EQ(remat.choices.size(), 2u);
  EXPECT_EQ(remat.measureAfter,
            "train-zero{stage=1 ranks=2},train-release-gradients");
  roundTrip<TrainRematPassOptions>("function={my step} budget=1000000");
  // Doubles print as the shortest text that reads back the same.
  auto scale =
      roundTrip<TrainLossScalePassOptions>("initial=0.1 growth-interval=7");
  EXPECT_EQ(printPassOptions(scale), "initial=0.1 growth-interval=7");
  roundTrip<TrainTensorParallelPassOptions>("");
  roundTrip<TrainTensorParallelPassOptions>(
      "size=4 data=2 sequence-parallel=true vocabulary-parallel=false");
  roundTrip<TrainGradAccumPassOptions>(
      "steps=8 normalize=mean uneven=refuse groups=2 interleaved=true");
  roundTrip<TrainOffloadOptimizerPassOptions>("what=states+update");
  roundTrip<TrainQuantizeOptimizerStatePassOptions>("block=128 min-size=1");
}

TEST_F(PipelineOptionsTest, OptimizerOptionsAreCompletedAsThePassDoes) {
  // Every registered optimizer: the options it reads, with values no
  // default has, parse back; those it does not given are refused.
  for (const OptimizerInfo &info : getRegisteredOptimizers()) {
    std::string text =
        "optimizer=" + info.name.str() + " lr=1.2345678901234e-4 clip-norm=0.5";
    auto options = roundTrip<TrainAutodiffPassOptions>(text);
    EXPECT_EQ(options.lr, 1.2345678901234e-4) << text;
    // What was not given is the registry's default.
    TrainAutodiffPassOptions plain;
    std::string errors;
    llvm::raw_string_ostream os(errors);
    ASSERT_TRUE(
        succeeded(parsePassOptions("optimizer=" + info.name.str(), plain, os)))
        << errors;
    EXPECT_EQ(plain.lr, info.defaults.lr) << info.name.str();
  }
  TrainAutodiffPassOptions bad;
  std::string errors;
  llvm::raw_string_ostream os(errors);
  EXPECT_TRUE(failed(parsePassOptions("optimizer=lion eps=0.5", bad, os)));
  EXPECT_NE(errors.find("train-autodiff: optimizer=lion has no option eps"),
            std::string::npos)
      << errors;
  errors.clear();
  EXPECT_TRUE(failed(parsePassOptions("optimizer=adam", bad, os)));
  EXPECT_NE(errors.find("unknown optimizer 'adam'"), std::string::npos)
      << errors;
}

TEST_F(PipelineOptionsTest, TrainStepOptionsRoundTrip) {
  const char *texts[] = {
      "",
      "differentiate=false",
      "autodiff=\"optimizer=lion clip-norm=1.0\" remat=\"policy=selective\"",
      "tensor-parallel=\"size=2 data=2 sequence-parallel=true\" "
      "zero=\"stage=1\" fuse-attention=true fuse-elementwise=true",
      "remat=\"policy=budget budget=1000000\" grad-accum=\"steps=4\" "
      "quantize=true quantize-options=\"block=128\" zero=\"stage=3 ranks=2\" "
      "offload=states+update unroll-accum=true",
      "zero=\"stage=2 ranks=4 bucket=1000\" release-gradients=true "
      "autodiff=\"clip-norm=0\"",
      "loss-scale=true loss-scale-options=\"initial=1024\" "
      "grad-accum=\"steps=2 groups=2\" offload=states",
      // Passes at their defaults are still run.
      "remat=\"policy=full\" tensor-parallel=\"size=2\" zero=\"ranks=1\"",
      "remat=\"policy=full\" offload-activations=\"prefetch=1\"",
      "offload-activations=\"what=all layers=0,2 min-bytes=4096 prefetch=0\" "
      "grad-accum=\"steps=2\" zero=\"stage=3 ranks=2\"",
  };
  for (const char *text : texts) {
    FailureOr<TrainStepOptions> first = parseTrainStepOptions(text, fail);
    ASSERT_TRUE(succeeded(first)) << text;
    std::string printed = printTrainStepOptions(*first);
    FailureOr<TrainStepOptions> second = parseTrainStepOptions(printed, fail);
    ASSERT_TRUE(succeeded(second)) << printed;
    EXPECT_TRUE(*first == *second) << text << " printed as " << printed;

    // The pipeline built from the typed options, the registered
    // train-step{...} of the printed text and the printed pipeline parsed
    // back hold the same passes with the same options.
    MLIRContext context;
    OpPassManager typed("builtin.module");
    ASSERT_TRUE(succeeded(buildTrainStepPipeline(typed, *first, fail)));
    OpPassManager registered("builtin.module");
    ASSERT_TRUE(
        succeeded(parsePassPipeline("train-step{" + printed + "}", registered)))
        << printed;
    FailureOr<std::string> pipeline = printTrainStepPipeline(*first, fail);
    ASSERT_TRUE(succeeded(pipeline));
    OpPassManager reparsed("builtin.module");
    ASSERT_TRUE(succeeded(parsePassPipeline(*pipeline, reparsed))) << *pipeline;
    EXPECT_EQ(passesOf(typed), passesOf(registered)) << text;
    EXPECT_EQ(passesOf(typed), passesOf(reparsed)) << *pipeline;
  }
}

TEST_F(PipelineOptionsTest, BadOptionsNameTheirPass) {
  std::string message;
  auto capture = [&](const Twine &text) {
    message = text.str();
    return failure();
  };
  EXPECT_TRUE(failed(parseTrainStepOptions("zero=\"stages=1\"", capture)));
  EXPECT_NE(message.find("train-step: bad options for train-zero "
                         "('stages=1')"),
            std::string::npos)
      << message;
  EXPECT_TRUE(
      failed(parseTrainStepOptions("quantize-options=\"block=8\"", capture)));
  EXPECT_EQ(message, "train-step: quantize-options needs quantize=true");
  FailureOr<TrainStepOptions> options =
      parseTrainStepOptions("differentiate=false fuse-attention=true", capture);
  ASSERT_TRUE(succeeded(options));
  EXPECT_TRUE(failed(getTrainStepPasses(*options, capture)));
  EXPECT_NE(message.find("fuse-attention rewrites the forward"),
            std::string::npos)
      << message;
}

TEST_F(PipelineOptionsTest, ABudgetMeasuresThePassesAfterIt) {
  FailureOr<TrainStepOptions> options = parseTrainStepOptions(
      "remat=\"policy=budget budget=1000\" grad-accum=\"steps=2\" "
      "zero=\"stage=1 ranks=2\" offload=states",
      fail);
  ASSERT_TRUE(succeeded(options));
  FailureOr<SmallVector<TrainStepPass>> passes =
      getTrainStepPasses(*options, fail);
  ASSERT_TRUE(succeeded(passes));
  auto remat = llvm::find_if(*passes, [](const TrainStepPass &pass) {
    return pass.argument == "train-remat";
  });
  ASSERT_NE(remat, passes->end());
  EXPECT_EQ(remat->text,
            "train-remat{policy=budget budget=1000 measure-after={"
            "train-grad-accum{steps=2},train-materialize-remat,"
            "train-materialize-layouts,train-zero{stage=1 ranks=2},"
            "train-offload-optimizer}}");
  // Built without the offload (the planner's compile), still measured
  // with it.
  FailureOr<SmallVector<TrainStepPass>> without =
      getTrainStepPasses(*options, fail, {/*offload=*/false, true});
  ASSERT_TRUE(succeeded(without));
  EXPECT_EQ(llvm::count_if(*without,
                           [](const TrainStepPass &pass) {
                             return pass.argument == "train-offload-optimizer";
                           }),
            0);
  EXPECT_EQ(llvm::find_if(*without,
                          [](const TrainStepPass &pass) {
                            return pass.argument == "train-remat";
                          })
                ->text,
            remat->text);
}

TEST_F(PipelineOptionsTest, PhaseTableRefusesOrdersNoPassCanRun) {
  auto order = [](ArrayRef<PhasedPass> passes) {
    std::string message;
    return failed(checkPhaseOrder(passes, message)) ? message : "";
  };
  // train-step's order passes; the orders each pass refuses do not.
  EXPECT_EQ(order({{"train-autodiff", {}},
                   {"train-remat", {}},
                   {"train-materialize-remat", {}},
                   {"train-zero", {"stage=3"}},
                   {"train-release-gradients", {}}}),
            "");
  EXPECT_EQ(order({{"train-remat", {}}, {"train-zero", {"stage=3"}}}),
            "after train-remat the step has train.remat regions not "
            "materialized, which train-zero cannot gather the parameters "
            "again for recompute at stage 3: run train-materialize-remat "
            "before train-zero");
  // A condition the pass's options do not meet: no refusal.
  EXPECT_EQ(order({{"train-remat", {}}, {"train-zero", {}}}), "");
  EXPECT_NE(order({{"train-release-gradients", {}}, {"train-zero", {}}})
                .find("run train-release-gradients after train-zero"),
            std::string::npos);
  EXPECT_NE(order({{"train-autodiff", {"hessian"}}, {"train-zero", {}}})
                .find("has a Hessian step"),
            std::string::npos);
  EXPECT_EQ(order({{"train-autodiff", {}}, {"train-zero", {}}}), "");
  // train-step refuses such a combination before any pass runs.
  std::string message;
  FailureOr<TrainStepOptions> sophia = parseTrainStepOptions(
      "autodiff=\"optimizer=sophia\" zero=\"ranks=2\"", fail);
  ASSERT_TRUE(succeeded(sophia));
  EXPECT_TRUE(failed(getTrainStepPasses(*sophia, [&](const Twine &text) {
    message = text.str();
    return failure();
  })));
  EXPECT_NE(message.find("train-step: after train-autodiff the step has a "
                         "Hessian step (optimizer=sophia), which train-zero "
                         "cannot partition"),
            std::string::npos)
      << message;
}

} // namespace
