//===- TestModels.h - the unit tests' models and context --------*- C++ -*-===//
//
// The unit tests build presets shrunk to a few kilobytes of weights and
// make them steps in a context that holds what a step needs on its way to
// the runtime; this is the one place that says how.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_UNITTESTS_TESTMODELS_H
#define TRAINMEM_UNITTESTS_TESTMODELS_H

#include "trainmem/Evaluator/Evaluator.h"
#include "trainmem/Model/ModelBuilder.h"
#include "trainmem/Run/Step.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/ADT/StringRef.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace mlir {
namespace train {

/// The sizes a test gives its model; `vocab` 0 keeps the preset's.
struct SmallShape {
  int64_t layers, hidden, heads, kvHeads, ffn, seq, batch;
  int64_t vocab = 0;
};

/// `preset`'s architecture at `shape`, in f32, without dropout.
inline ModelConfig smallModel(llvm::StringRef preset, const SmallShape &shape) {
  ModelConfig config = *getPreset(preset);
  config.layers = shape.layers;
  config.hidden = shape.hidden;
  config.heads = shape.heads;
  config.kvHeads = shape.kvHeads;
  config.ffn = shape.ffn;
  config.seq = shape.seq;
  config.batch = shape.batch;
  if (shape.vocab)
    config.vocab = shape.vocab;
  config.dropout = 0.0;
  config.dtype = "f32";
  return config;
}

/// Arguments for `step`, drawn from `seed`: token ids in [0, 256) (3 for
/// a scalar id), floats from N(0, stddev), non-negative for optimizer
/// state (Adam's second moment must be).
inline std::vector<RefTensor> randomStepInputs(func::FuncOp step, unsigned seed,
                                               float stddev) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> byte(0, 255);
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<RefTensor> args;
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    auto type = cast<RankedTensorType>(step.getArgument(i).getType());
    std::vector<int64_t> shape(type.getShape().begin(), type.getShape().end());
    if (isa<IntegerType>(type.getElementType())) {
      std::vector<int64_t> ids(type.getNumElements());
      for (int64_t &id : ids)
        id = type.getRank() == 0 ? 3 : byte(rng);
      args.push_back(RefTensor::ofInts(shape, ids));
      continue;
    }
    bool nonNegative =
        static_cast<bool>(step.getArgAttr(i, "train.optimizer_state"));
    std::vector<float> values(type.getNumElements());
    for (float &v : values)
      v = nonNegative ? std::abs(normal(rng)) : normal(rng);
    args.push_back(RefTensor::ofFloats(shape, values));
  }
  return args;
}

/// The results of `module`'s @train_step on the reference evaluator; none,
/// with a test failure, where it fails.
inline std::vector<RefTensor>
evaluateTrainStep(ModuleOp module, const std::vector<RefTensor> &args) {
  FailureOr<SmallVector<RefTensor>> results =
      evaluate(module.lookupSymbol<func::FuncOp>("train_step"), args);
  if (failed(results)) {
    ADD_FAILURE() << "the evaluator failed on the step";
    return {};
  }
  return std::vector<RefTensor>(results->begin(), results->end());
}

/// A test whose context holds every dialect and interface model a step
/// needs down to the runtime (registerRunDialects).
class StepTest : public ::testing::Test {
protected:
  StepTest() : context(runRegistry()) {}

  static DialectRegistry runRegistry() {
    DialectRegistry registry;
    registerRunDialects(registry);
    return registry;
  }

  /// `config`'s model run through `pipeline` (a pass pipeline's text); a
  /// test failure where the pipeline does not parse or a pass fails.
  OwningOpRef<ModuleOp> buildStep(const ModelConfig &config,
                                  llvm::StringRef pipeline) {
    OwningOpRef<ModuleOp> module = buildModel(&context, config);
    PassManager pm(&context);
    EXPECT_TRUE(succeeded(parsePassPipeline(pipeline, pm))) << pipeline.str();
    EXPECT_TRUE(succeeded(pm.run(*module))) << pipeline.str();
    return module;
  }

  MLIRContext context;
};

} // namespace train
} // namespace mlir

#endif // TRAINMEM_UNITTESTS_TESTMODELS_H
