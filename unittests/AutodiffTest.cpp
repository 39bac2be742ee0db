//===- AutodiffTest.cpp - whole-model gradients vs finite differences -----===//
//
// train-autodiff{optimizer=none} turns a model's forward + loss into a step
// that returns the gradient of every parameter. Evaluated on the reference
// evaluator, those gradients must match central differences of the step's
// loss, (L(θ + h e) - L(θ - h e)) / 2h with h = 1e-2,
// within |fd - grad| <= 1e-3 + 5e-2 |fd| (the loss is an f32 value near 5.5,
// so its rounding noise divided by 2h is ~1e-4; the step is large enough
// that the O(h²) truncation of LayerNorm/softmax curvature stays below the
// bound at these weight scales).
//
//===----------------------------------------------------------------------===//

#include "TestModels.h"
#include "trainmem/Analysis/MemoryAnalysis.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Evaluator/Evaluator.h"
#include "trainmem/Model/ModelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <random>

using namespace mlir;
using namespace mlir::train;

namespace {

constexpr double kStep = 1e-2;
constexpr double kAbsTol = 1e-3;
constexpr double kRelTol = 5e-2;

class AutodiffTest : public ::testing::Test {
protected:
  AutodiffTest() {
    context.loadDialect<TrainDialect, func::FuncDialect, arith::ArithDialect>();
  }

  /// Random inputs for @forward: tokens, targets (some ignored), weights
  /// N(0, 0.2), norm gains 1 + N(0, 0.2), biases N(0, 0.2).
  std::vector<RefTensor> randomInputs(func::FuncOp forward, int64_t vocab) {
    std::normal_distribution<float> normal(0.0f, 0.2f);
    std::uniform_int_distribution<int64_t> token(0, vocab - 1);
    std::vector<RefTensor> args;
    for (unsigned i = 0; i < forward.getNumArguments(); ++i) {
      auto type = cast<RankedTensorType>(forward.getArgument(i).getType());
      std::vector<int64_t> shape(type.getShape().begin(),
                                 type.getShape().end());
      int64_t n = type.getNumElements();
      if (auto input =
              forward.getArgAttrOfType<StringAttr>(i, kInputAttrName)) {
        std::vector<int64_t> ids(n);
        for (int64_t j = 0; j < n; ++j)
          ids[j] = input.getValue() == "targets" && j % 5 == 3 ? -100
                                                               : token(rng);
        args.push_back(RefTensor::ofInts(shape, ids));
        continue;
      }
      StringRef name =
          forward.getArgAttrOfType<StringAttr>(i, kParamAttrName).getValue();
      bool isGain = type.getRank() == 1 &&
                    (name.contains("ln") || name.contains("norm")) &&
                    name.ends_with("weight");
      std::vector<float> values(n);
      for (float &v : values)
        v = (isGain ? 1.0f : 0.0f) + normal(rng);
      args.push_back(RefTensor::ofFloats(shape, values));
    }
    return args;
  }

  void checkGradients(const ModelConfig &config) {
    std::string why;
    ASSERT_TRUE(validateConfig(config, why)) << why;
    OwningOpRef<ModuleOp> forwardModule = buildModel(&context, config);
    OwningOpRef<ModuleOp> stepModule = forwardModule->clone();

    PassManager pm(&context);
    TrainAutodiffPassOptions options;
    options.optimizer = "none";
    pm.addPass(createTrainAutodiffPass(options));
    ASSERT_TRUE(succeeded(pm.run(*stepModule)));

    auto forward = forwardModule->lookupSymbol<func::FuncOp>("forward");
    auto step = stepModule->lookupSymbol<func::FuncOp>("train_step");
    ASSERT_TRUE(forward && step);

    std::vector<RefTensor> inputs = randomInputs(forward, config.vocab);
    std::vector<RefTensor> stepArgs = inputs;
    stepArgs.push_back(RefTensor::ofInts({}, {1})); // step counter
    FailureOr<SmallVector<RefTensor>> results = evaluate(step, stepArgs);
    ASSERT_TRUE(succeeded(results));

    // Without dropout the step's loss is the forward's; with it, the step
    // keys its masks by the step counter, so the differences below are
    // taken on the step's own loss.
    if (config.dropout == 0.0) {
      FailureOr<SmallVector<RefTensor>> loss = evaluate(forward, inputs);
      ASSERT_TRUE(succeeded(loss));
      EXPECT_EQ((*results)[0].scalarFloat(), (*loss)[0].scalarFloat());
    }

    // Results after the loss: one gradient per parameter, in order.
    unsigned resultIndex = 1;
    unsigned checked = 0;
    for (unsigned i = 0; i < forward.getNumArguments(); ++i) {
      auto name = forward.getArgAttrOfType<StringAttr>(i, kParamAttrName);
      if (!name)
        continue;
      ASSERT_EQ(step.getResultAttrOfType<StringAttr>(resultIndex, kGradAttrName),
                name);
      const RefTensor &grad = (*results)[resultIndex++];
      std::uniform_int_distribution<size_t> pick(0, grad.floats.size() - 1);
      for (int sample = 0; sample < 3; ++sample) {
        size_t e = pick(rng);
        std::vector<RefTensor> plus = stepArgs, minus = stepArgs;
        plus[i].floats[e] += kStep;
        minus[i].floats[e] -= kStep;
        double fd = ((*evaluate(step, plus))[0].scalarFloat() -
                     (*evaluate(step, minus))[0].scalarFloat()) /
                    (2 * kStep);
        EXPECT_NEAR(grad.floats[e], fd, kAbsTol + kRelTol * std::abs(fd))
            << name.getValue().str() << " element " << e;
        ++checked;
      }
    }
    EXPECT_GT(checked, 0u);
  }

  MLIRContext context;
  std::mt19937 rng{2024};
};

TEST_F(AutodiffTest, TinyGptGradientsMatchFiniteDifferences) {
  // The tiny preset as it is, with dropout on (its masks are fixed by seed
  // and offset, so the loss is a deterministic function of the weights).
  ModelConfig config = *getPreset("tiny");
  config.dropout = 0.1;
  checkGradients(config);
}

TEST_F(AutodiffTest, SmallLlamaGradientsMatchFiniteDifferences) {
  // RMSNorm, RoPE, SwiGLU, untied head and grouped-query attention.
  ModelConfig config = smallModel("llama2-70b", {2, 16, 4, 2, 24, 6, 2, 32});
  checkGradients(config);
}

} // namespace
