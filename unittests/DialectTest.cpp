//===- DialectTest.cpp - every train op has what the passes need ----------===//
//
// The dialect-completeness check: iterating the registered train ops, every
// compute op (CostOpInterface) has a reference-evaluator model
// (EvaluableOpInterface), a runtime lowering (RuntimeLoweringOpInterface)
// and is either differentiable (DifferentiableOpInterface) or marked as
// never differentiated (the NotDifferentiated trait: gradient, optimizer
// and index ops); every other op is structure: a terminator or an op that
// holds one block. A new op missing one of these fails here, by name,
// instead of in the first pass or model that meets it.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Conversion/RuntimeLowering.h"
#include "trainmem/Dialect/Train/IR/ShardModels.h"
#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Dialect/Train/IR/TrainInterfaces.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Evaluator/Evaluator.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringExtras.h"

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
  for (RegisteredOperationName name : context.getRegisteredOperations()) {
    if (name.getDialectNamespace() != TrainDialect::getDialectNamespace())
      continue;
    std::string op = name.getStringRef().str();
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
  EXPECT_EQ(compute, 46u);
  EXPECT_EQ(differentiable, 20u);
  EXPECT_EQ(structure, 4u);
}

} // namespace
