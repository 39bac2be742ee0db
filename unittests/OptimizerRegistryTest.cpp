//===- OptimizerRegistryTest.cpp - every optimizer has every piece --------===//
//
// The optimizer registry (OptimizerRegistry.h) is the one place an
// optimizer is added; these tests fail naming the piece an entry lacks:
// its update ops (registered, OptimizerUpdateOpInterface, an evaluator
// kernel, a runtime lowering), a step built with it that verifies and runs
// on the evaluator, its 8-bit form through train-quantize-optimizer-state,
// and the passes' options (defaults filled in, options it does not read
// refused).
//
//===----------------------------------------------------------------------===//

#include "trainmem/Dialect/Train/Transforms/OptimizerRegistry.h"
#include "trainmem/Conversion/Passes.h"
#include "trainmem/Conversion/RuntimeLowering.h"
#include "trainmem/Dialect/Train/IR/ShardModels.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Evaluator/Evaluator.h"
#include "trainmem/Model/ModelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

using namespace mlir;
using namespace mlir::train;

namespace {

class OptimizerRegistryTest : public ::testing::Test {
protected:
  OptimizerRegistryTest() : context(makeRegistry()) {
    context.loadAllAvailableDialects();
    static bool registered = [] {
      registerTrainPasses();
      registerTrainConversionPasses();
      return true;
    }();
    (void)registered;
  }

  static DialectRegistry makeRegistry() {
    DialectRegistry registry;
    registry.insert<TrainDialect, func::FuncDialect, arith::ArithDialect,
                    shard::ShardDialect>();
    registerEvaluatorExternalModels(registry);
    registerRuntimeLoweringExternalModels(registry);
    registerShardExternalModels(registry);
    return registry;
  }

  /// What `op` (an update op of `info`, `what`) lacks, or "".
  std::string missingPiece(const OptimizerInfo &info, StringRef op,
                           StringRef what) {
    std::string prefix = "optimizer '" + info.name.str() + "': its " +
                         what.str() + " '" + op.str() + "' ";
    std::optional<RegisteredOperationName> name =
        RegisteredOperationName::lookup(op, &context);
    if (!name)
      return prefix + "is not an op of a loaded dialect";
    if (!name->hasInterface<OptimizerUpdateOpInterface>())
      return prefix + "does not implement OptimizerUpdateOpInterface";
    if (!name->hasInterface<EvaluableOpInterface>())
      return prefix + "has no evaluator kernel "
                      "(registerEvaluatorExternalModels)";
    if (!name->hasInterface<RuntimeLoweringOpInterface>())
      return prefix + "has no runtime lowering "
                      "(registerRuntimeLoweringExternalModels)";
    if (!name->hasTrait<NotDifferentiated>())
      return prefix + "is not marked NotDifferentiated";
    return "";
  }

  /// A tiny GPT's step with `info`'s optimizer (every state present:
  /// SGD with momentum), after `extra` passes.
  OwningOpRef<ModuleOp> buildStep(const OptimizerInfo &info, StringRef dtype,
                                  StringRef extra = "") {
    ModelConfig config = *getPreset("tiny");
    config.layers = 1;
    config.dtype = dtype.str();
    OwningOpRef<ModuleOp> module = buildModel(&context, config);
    std::string options = "optimizer=" + info.name.str();
    if (info.reads(OptimizerOption::momentum))
      options += " momentum=0.9";
    std::string pipeline = "train-autodiff{" + options + "}";
    if (!extra.empty())
      pipeline += "," + extra.str();
    PassManager pm(&context);
    if (failed(parsePassPipeline(pipeline, pm)) || failed(pm.run(*module)))
      return nullptr;
    return module;
  }

  MLIRContext context;
};

TEST_F(OptimizerRegistryTest, EveryEntryHasItsPieces) {
  ASSERT_FALSE(getRegisteredOptimizers().empty());
  for (const OptimizerInfo &info : getRegisteredOptimizers()) {
    std::string name = "optimizer '" + info.name.str() + "'";
    EXPECT_FALSE(info.summary.empty()) << name << " has no summary";
    EXPECT_EQ(lookupOptimizer(info.name), &info)
        << name << " is not found by its name (a second entry of the name?)";
    EXPECT_NE(info.build, nullptr) << name << " has no update builder";
    EXPECT_FALSE(info.states.empty()) << name << " has no state";
    EXPECT_EQ(missingPiece(info, info.updateOp, "update op"), "");
    if (!info.update8bitOp.empty())
      EXPECT_EQ(missingPiece(info, info.update8bitOp, "8-bit update op"), "");
  }
  EXPECT_EQ(lookupOptimizer("none"), nullptr)
      << "'none' is the passes' word for no optimizer, not an entry";
}

/// A step with each optimizer: its updates are the entry's op, its state
/// arguments the entry's kinds in order, and one evaluated step moves every
/// parameter; the 8-bit form is the entry's 8-bit op and evaluates too.
TEST_F(OptimizerRegistryTest, EveryOptimizerBuildsRunsAndQuantizes) {
  for (const OptimizerInfo &info : getRegisteredOptimizers()) {
    for (StringRef dtype : {"f32", "bf16"}) {
      std::string where =
          "optimizer '" + info.name.str() + "', " + dtype.str() + ": ";
      OwningOpRef<ModuleOp> module = buildStep(info, dtype);
      ASSERT_TRUE(module) << where << "train-autodiff failed";
      ASSERT_TRUE(succeeded(verify(*module))) << where;
      auto step = module->lookupSymbol<func::FuncOp>("train_step");
      ASSERT_TRUE(step) << where << "no @train_step";
      unsigned updates = 0;
      std::set<std::string> built;
      step.walk([&](OptimizerUpdateOpInterface update) {
        built.insert(update->getName().getStringRef().str());
        ++updates;
      });
      EXPECT_EQ(built, std::set<std::string>{info.updateOp.str()})
          << where << "the updates built are not the entry's update op";
      EXPECT_GT(updates, 0u) << where << "no update built";
      // The state arguments of the first parameter: its master (bf16),
      // then the entry's kinds.
      std::vector<StateKind> kinds;
      StringRef first;
      for (unsigned i = 0; i < step.getNumArguments(); ++i)
        if (auto state =
                step.getArgAttrOfType<StateAttr>(i, kOptimizerStateAttrName)) {
          if (first.empty())
            first = state.getParam();
          if (state.getParam() == first && state.getKind() != StateKind::master)
            kinds.push_back(state.getKind());
        }
      std::vector<StateKind> expected;
      for (const OptimizerStateInfo &spec : info.states)
        expected.push_back(spec.kind);
      EXPECT_EQ(kinds, expected)
          << where << "state kinds differ from the entry";
      // An optimizer with a Hessian estimate gets the step that refreshes
      // it.
      EXPECT_EQ(static_cast<bool>(findHessianStep(step)), info.hessianStep)
          << where
          << (info.hessianStep ? "no Hessian step built"
                               : "a Hessian step built");

      // One step on the evaluator: finite loss, every weight moved.
      SmallVector<RefTensor> args;
      for (unsigned i = 0; i < step.getNumArguments(); ++i) {
        auto type = cast<RankedTensorType>(step.getArgument(i).getType());
        std::vector<int64_t> shape(type.getShape().begin(),
                                   type.getShape().end());
        int64_t n = type.getNumElements();
        if (isa<IntegerType>(type.getElementType())) {
          std::vector<int64_t> ids(n);
          for (int64_t j = 0; j < n; ++j)
            ids[j] = (j * 7 + 3) % 64;
          if (type.getRank() == 0)
            ids = {1}; // the step counter
          args.push_back(RefTensor::ofInts(shape, ids));
          continue;
        }
        std::vector<float> values(n);
        bool isState =
            static_cast<bool>(step.getArgAttr(i, kOptimizerStateAttrName));
        for (int64_t j = 0; j < n; ++j)
          values[j] = isState ? 0.0f : 0.02f * std::sin(0.37f * j + i);
        args.push_back(RefTensor::ofFloats(shape, values));
      }
      FailureOr<SmallVector<RefTensor>> results = evaluate(step, args);
      ASSERT_TRUE(succeeded(results)) << where << "the evaluator failed";
      EXPECT_TRUE(std::isfinite((*results)[0].scalarFloat())) << where;

      // Its 8-bit form.
      if (info.update8bitOp.empty())
        continue;
      OwningOpRef<ModuleOp> quantized =
          buildStep(info, dtype, "train-quantize-optimizer-state{min-size=0}");
      ASSERT_TRUE(quantized)
          << where << "train-quantize-optimizer-state failed";
      ASSERT_TRUE(succeeded(verify(*quantized))) << where;
      unsigned quantizedUpdates = 0;
      std::set<std::string> built8bit;
      quantized->lookupSymbol<func::FuncOp>("train_step")
          .walk([&](OptimizerUpdateOpInterface update) {
            built8bit.insert(update->getName().getStringRef().str());
            ++quantizedUpdates;
          });
      EXPECT_EQ(built8bit, std::set<std::string>{info.update8bitOp.str()})
          << where
          << "the 8-bit updates built are not the entry's 8-bit update op";
      EXPECT_EQ(quantizedUpdates, updates) << where;
      PassManager lower(&context);
      ASSERT_TRUE(
          succeeded(parsePassPipeline("convert-train-to-runtime", lower)));
      EXPECT_TRUE(succeeded(lower.run(*quantized)))
          << where << "the 8-bit step does not lower to the runtime";
    }
  }
}

/// Options not given take the optimizer's defaults, which the printed
/// pipeline then names; an option the optimizer does not read, or an
/// unknown optimizer, is a parse error naming it.
TEST_F(OptimizerRegistryTest, PassOptionsTakeTheEntrysDefaults) {
  for (const OptimizerInfo &info : getRegisteredOptimizers()) {
    OpPassManager pm("builtin.module");
    ASSERT_TRUE(succeeded(parsePassPipeline(
        "train-add-optimizer{optimizer=" + info.name.str() + "}", pm,
        llvm::errs())))
        << info.name.str();
    std::string printed;
    llvm::raw_string_ostream os(printed);
    pm.printAsTextualPipeline(os);
    std::string lr;
    llvm::raw_string_ostream(lr) << "lr=" << info.defaults.lr;
    EXPECT_NE(printed.find(lr), std::string::npos)
        << info.name.str() << ": " << printed;
    if (info.reads(OptimizerOption::beta2)) {
      std::string beta2;
      llvm::raw_string_ostream(beta2) << "beta2=" << info.defaults.beta2;
      EXPECT_NE(printed.find(beta2), std::string::npos)
          << info.name.str() << ": " << printed;
    }
  }
  // A printed pipeline parses again to the same pipeline, for every
  // optimizer (it names every option, those the optimizer does not read
  // at their defaults).
  for (const OptimizerInfo &info : getRegisteredOptimizers()) {
    for (StringRef pass : {"train-autodiff", "train-add-optimizer"}) {
      OpPassManager pm("builtin.module");
      ASSERT_TRUE(succeeded(parsePassPipeline(
          (pass + "{optimizer=" + info.name + "}").str(), pm, llvm::errs())));
      std::string printed;
      llvm::raw_string_ostream os(printed);
      pm.printAsTextualPipeline(os);
      OpPassManager again("builtin.module");
      std::string errors;
      llvm::raw_string_ostream errorStream(errors);
      // The printed text holds the anchor: parse it as a whole pipeline.
      ASSERT_TRUE(succeeded(parsePassPipeline(
          StringRef(printed).drop_front(strlen("builtin.module(")).drop_back(),
          again, errorStream)))
          << info.name.str() << ": " << printed << "\n"
          << errors;
      std::string reprinted;
      llvm::raw_string_ostream os2(reprinted);
      again.printAsTextualPipeline(os2);
      EXPECT_EQ(printed, reprinted) << info.name.str();
    }
  }
  // Lion reads no momentum, SGD no betas; adam is not an optimizer here.
  for (auto [text, expected] :
       {std::pair{"train-autodiff{optimizer=lion momentum=0.9}",
                  "train-autodiff: optimizer=lion has no option momentum "
                  "(it reads beta1, beta2, weight-decay)"},
        std::pair{"train-add-optimizer{optimizer=sgd beta2=0.9}",
                  "train-add-optimizer: optimizer=sgd has no option beta2 "
                  "(it reads momentum, weight-decay)"},
        std::pair{"train-autodiff{optimizer=adam}",
                  "train-autodiff: unknown optimizer 'adam' (expected "}}) {
    OpPassManager pm("builtin.module");
    std::string errors;
    llvm::raw_string_ostream os(errors);
    EXPECT_TRUE(failed(parsePassPipeline(text, pm, os))) << text;
    EXPECT_NE(errors.find(expected), std::string::npos)
        << text << " said: " << errors;
  }
}

} // namespace
