//===- RegionBranchTest.cpp - train.block and train.remat as region ops ---===//
//
// train.block and train.remat implement RegionBranchOpInterface (the parent
// enters the body once; the yield gives the results), so upstream analyses
// see through them: sparse constant propagation knows that a constant
// yielded through a block and a remat is that constant outside.
// train.accumulate does not (its results are sums of what its body yields,
// not the yielded values).
//
//===----------------------------------------------------------------------===//

#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"

#include "mlir/Analysis/DataFlow/ConstantPropagationAnalysis.h"
#include "mlir/Analysis/DataFlow/DeadCodeAnalysis.h"
#include "mlir/Analysis/DataFlowFramework.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace mlir::train;

namespace {

constexpr const char *kModule = R"mlir(
func.func @f(%x: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  %b = train.block head -> tensor<2xf32> {
    %c = arith.constant dense<1.5> : tensor<2xf32>
    train.yield %c : tensor<2xf32>
  }
  %r = train.remat -> tensor<2xf32> {
    train.yield %b : tensor<2xf32>
  }
  %s = train.block head -> tensor<2xf32> {
    train.yield %x : tensor<2xf32>
  }
  return %r, %s : tensor<2xf32>, tensor<2xf32>
}
)mlir";

class RegionBranchTest : public ::testing::Test {
protected:
  RegionBranchTest() {
    context.loadDialect<TrainDialect, func::FuncDialect, arith::ArithDialect>();
    module = parseSourceString<ModuleOp>(kModule, &context);
  }
  MLIRContext context;
  OwningOpRef<ModuleOp> module;
};

TEST_F(RegionBranchTest, SuccessorsOfATransparentRegion) {
  ASSERT_TRUE(module);
  auto func = module->lookupSymbol<func::FuncOp>("f");
  ASSERT_TRUE(func);
  auto block = cast<BlockOp>(&func.front().front());
  auto branch = dyn_cast<RegionBranchOpInterface>(block.getOperation());
  ASSERT_TRUE(branch);
  SmallVector<RegionSuccessor> fromParent, fromBody;
  branch.getSuccessorRegions(RegionBranchPoint::parent(), fromParent);
  ASSERT_EQ(fromParent.size(), 1u);
  EXPECT_EQ(fromParent[0].getSuccessor(), &block.getBody());
  auto yield = cast<RegionBranchTerminatorOpInterface>(
      block.getBody().front().getTerminator());
  branch.getSuccessorRegions(RegionBranchPoint(yield), fromBody);
  ASSERT_EQ(fromBody.size(), 1u);
  EXPECT_TRUE(fromBody[0].isParent());
  EXPECT_EQ(fromBody[0].getSuccessorInputs().size(), 1u);
  EXPECT_FALSE(branch.isRepetitiveRegion(0));
  // The accumulation loop is not a forwarding region.
  std::optional<RegisteredOperationName> accumulate =
      RegisteredOperationName::lookup(AccumulateOp::getOperationName(),
                                      &context);
  ASSERT_TRUE(accumulate);
  EXPECT_FALSE(accumulate->hasInterface<RegionBranchOpInterface>());
}

TEST_F(RegionBranchTest, ConstantPropagationSeesThroughBlocksAndRemat) {
  ASSERT_TRUE(module);
  DataFlowSolver solver;
  solver.load<dataflow::DeadCodeAnalysis>();
  solver.load<dataflow::SparseConstantPropagation>();
  ASSERT_TRUE(succeeded(solver.initializeAndRun(module->getOperation())));
  auto func = module->lookupSymbol<func::FuncOp>("f");
  auto ret = cast<func::ReturnOp>(func.front().getTerminator());
  auto constantOf = [&](Value value) -> Attribute {
    auto *lattice =
        solver.lookupState<dataflow::Lattice<dataflow::ConstantValue>>(value);
    if (!lattice || lattice->getValue().isUninitialized())
      return {};
    return lattice->getValue().getConstantValue();
  };
  // The remat's result is the block's, which is the constant.
  auto constant = dyn_cast_or_null<DenseElementsAttr>(constantOf(ret.getOperand(0)));
  ASSERT_TRUE(constant);
  EXPECT_EQ(constant.getSplatValue<APFloat>().convertToDouble(), 1.5);
  // The other block yields an argument: not a constant.
  EXPECT_FALSE(constantOf(ret.getOperand(1)));
}

} // namespace
