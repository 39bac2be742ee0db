//===- DialectTest.cpp - every train op has what the passes need ----------===//
//
// The dialect-completeness check: iterating the registered train ops, every
// compute op (CostOpInterface) has a reference-evaluator model
// (EvaluableOpInterface), a runtime lowering (RuntimeLoweringOpInterface)
// and is either differentiable (DifferentiableOpInterface) or marked as
// never differentiated (the NotDifferentiated trait: gradient, optimizer
// and index ops); every other op is structure: a terminator or an op that
// holds one block. A new op missing one of these fails here, by name,
// instead of in the first pass or model that meets it. And the result
// types an op infers (InferTypeOpInterface, or the shapes of
// InferShapedTypeOpInterface: what train-grad-accum re-types a micro-batch
// with) are the types of every op of real steps.
//
//===----------------------------------------------------------------------===//

#include "TestModels.h"
#include "trainmem/Conversion/RuntimeLowering.h"
#include "trainmem/Dialect/Train/IR/ShardModels.h"
#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Dialect/Train/IR/TrainInterfaces.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/Transforms/Pipelines.h"
#include "trainmem/Evaluator/Evaluator.h"
#include "trainmem/Model/ModelBuilder.h"
#include "trainmem/Run/Step.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace mlir::train;

namespace {

TEST(Dialect, EveryOpHasItsModels) {
  DialectRegistry registry;
  registry.insert<TrainDialect, func::FuncDialect, arith::ArithDialect,
                  shard::ShardDialect>();
  registerEvaluatorExternalModels(registry);
  registerRuntimeLoweringExternalModels(registry);
  registerShardExternalModels(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();

  std::vector<std::string> missing;
  unsigned compute = 0, differentiable = 0, structure = 0;
  unsigned inferTypes = 0, inferShapes = 0;
  for (RegisteredOperationName name : context.getRegisteredOperations()) {
    if (name.getDialectNamespace() != TrainDialect::getDialectNamespace())
      continue;
    std::string op = name.getStringRef().str();
    if (name.hasInterface<InferTypeOpInterface>())
      ++inferTypes;
    else if (name.hasInterface<InferShapedTypeOpInterface>())
      ++inferShapes;
    if (!name.hasInterface<CostOpInterface>()) {
      // Structure: the regions the passes edit and their terminator.
      if (name.hasTrait<OpTrait::IsTerminator>() ||
          name.hasTrait<OpTrait::SingleBlock>())
        ++structure;
      else
        missing.push_back(op + ": neither a compute op (CostOpInterface) "
                               "nor structure (a terminator, one block)");
      continue;
    }
    ++compute;
    if (!name.hasInterface<EvaluableOpInterface>())
      missing.push_back(op + ": no EvaluableOpInterface model (the reference "
                             "evaluator, registerEvaluatorExternalModels)");
    if (!name.hasInterface<RuntimeLoweringOpInterface>())
      missing.push_back(op + ": no RuntimeLoweringOpInterface model "
                             "(registerRuntimeLoweringExternalModels)");
    bool vjp = name.hasInterface<DifferentiableOpInterface>();
    bool never = name.hasTrait<NotDifferentiated>();
    differentiable += vjp;
    if (vjp == never)
      missing.push_back(op + (vjp ? ": both differentiable and marked "
                                    "NotDifferentiated"
                                  : ": neither differentiable "
                                    "(DifferentiableOpInterface) nor marked "
                                    "NotDifferentiated (Train_NonDiffOp)"));
  }
  EXPECT_TRUE(missing.empty()) << llvm::join(missing, "\n");
  // The counts docs/Dialect.md states (a new op changes them on purpose).
  EXPECT_EQ(compute, 69u);
  EXPECT_EQ(differentiable, 28u);
  EXPECT_EQ(structure, 4u);
  // The ops whose result types (or shapes) follow from their operands
  // (docs/Dialect.md).
  EXPECT_EQ(inferTypes, 52u);
  EXPECT_EQ(inferShapes, 4u);
}

// The models other libraries attach are promised by the dialect: a context
// that has not registered them holds promises for every compute op (asking
// an op for one would fail naming the interface), which registering the
// models resolves.
TEST(Dialect, ItPromisesTheModelsOthersAttach) {
  DialectRegistry registry;
  registry.insert<TrainDialect>();
  MLIRContext context(registry);
  auto *dialect = context.getOrLoadDialect<TrainDialect>();
  TypeID add = TypeID::get<AddOp>(), block = TypeID::get<BlockOp>();
  EXPECT_TRUE(dialect->hasPromisedInterface(
      add, EvaluableOpInterface::getInterfaceID()));
  EXPECT_TRUE(dialect->hasPromisedInterface(
      add, RuntimeLoweringOpInterface::getInterfaceID()));
  // Structure (no cost) has no models to promise.
  EXPECT_FALSE(dialect->hasPromisedInterface(
      block, EvaluableOpInterface::getInterfaceID()));

  DialectRegistry models;
  registerEvaluatorExternalModels(models);
  registerRuntimeLoweringExternalModels(models);
  context.appendDialectRegistry(models);
  EXPECT_FALSE(dialect->hasPromisedInterface(
      add, EvaluableOpInterface::getInterfaceID()));
  EXPECT_FALSE(dialect->hasPromisedInterface(
      add, RuntimeLoweringOpInterface::getInterfaceID()));
}

/// The types `op` infers for its results, or their shapes; false when it
/// infers neither.
bool inferredMatch(Operation *op, std::string &why) {
  auto say = [&](StringRef what) {
    llvm::raw_string_ostream os(why);
    os << op->getName() << ": " << what << " differ from ";
    llvm::interleaveComma(op->getResultTypes(), os);
  };
  if (auto infer = dyn_cast<InferTypeOpInterface>(op)) {
    SmallVector<Type> types;
    if (failed(infer.inferReturnTypes(
            op->getContext(), op->getLoc(), op->getOperands(),
            op->getRawDictionaryAttrs(), op->getPropertiesStorage(),
            op->getRegions(), types)) ||
        TypeRange(types) != op->getResultTypes())
      say("inferred types");
    return true;
  }
  if (auto infer = dyn_cast<InferShapedTypeOpInterface>(op)) {
    SmallVector<ShapedTypeComponents> shapes;
    bool same = succeeded(infer.inferReturnTypeComponents(
                    op->getContext(), op->getLoc(), op->getOperands(),
                    op->getRawDictionaryAttrs(), op->getPropertiesStorage(),
                    op->getRegions(), shapes)) &&
                shapes.size() == op->getNumResults();
    for (auto [shape, type] : llvm::zip(shapes, op->getResultTypes()))
      same &= shape.getDims() == cast<ShapedType>(type).getShape();
    if (!same)
      say("inferred shapes");
    return true;
  }
  return false;
}

TEST(Dialect, InferredTypesAreTheStepsTypes) {
  DialectRegistry registry;
  registerRunDialects(registry);
  registerTrainPipelines();
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  ModelConfig config = smallModel("tiny", {1, 16, 2, 2, 32, 8, 4});
  config.dropout = 0.1;
  std::vector<std::string> wrong;
  llvm::StringSet<llvm::MallocAllocator> inferring;
  // f32 with every technique, bf16 (f32 masters), f16 with loss scaling,
  // SGD with momentum, Lion and Sophia (its Hessian step too) on 8-bit
  // state: the ops of each, forward, backward and optimizer.
  for (auto [dtypeName, pipelineText] :
       {std::pair{"f32", "train-step{remat=\"policy=selective\" "
                         "grad-accum=\"steps=2\" quantize=true}"},
        std::pair{"f32", "train-step{fuse-attention=true "
                         "fuse-elementwise=true}"},
        std::pair{"bf16", "train-step{grad-accum=\"steps=2\"}"},
        std::pair{"f16", "train-step{loss-scale=true}"},
        std::pair{"f32", "train-step{autodiff=\"optimizer=sgd "
                         "momentum=0.9 clip-norm=1.0\"}"},
        std::pair{"bf16", "train-step{autodiff=\"optimizer=lion\" "
                          "quantize=true}"},
        std::pair{"bf16", "train-step{autodiff=\"optimizer=sophia\" "
                          "quantize=true}"}}) {
    const char *pipeline = pipelineText;
    config.dtype = dtypeName;
    OwningOpRef<ModuleOp> module = buildModel(&context, config);
    ASSERT_TRUE(module);
    PassManager pm(&context);
    ASSERT_TRUE(succeeded(parsePassPipeline(pipeline, pm)));
    ASSERT_TRUE(succeeded(pm.run(*module))) << pipeline;
    module->walk([&](Operation *op) {
      std::string why;
      if (inferredMatch(op, why) && isa<TrainDialect>(op->getDialect()))
        inferring.insert(op->getName().getStringRef());
      if (!why.empty())
        wrong.push_back(std::string(pipeline) + ": " + why);
    });
  }
  EXPECT_TRUE(wrong.empty()) << llvm::join(wrong, "\n");
  // Of the 65 ops, 50 infer their result types (46) or shapes (4); these
  // steps use 34 of them. The 15 others are structure (accumulate, block,
  // remat, yield) or have results that are the op's choice: a cast's or a
  // quantization's element type, a reshape's or sum_to's shape, a table
  // gradient's, an iota's, a mask's, a slice's or a sample's.
  EXPECT_EQ(inferring.size(), 34u) << llvm::join(inferring.keys(), ", ");
}

} // namespace
