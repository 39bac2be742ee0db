//===- TestDialect.cpp - an op defined only by the tests ------------------===//

#include "TestDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace trainmem_test;

#include "TestDialect.cpp.inc"

void TestDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "TestOps.cpp.inc"
      >();
}

LogicalResult SquareOp::buildVJP(OpBuilder &builder, ValueRange resultGrads,
                                 SmallVectorImpl<Value> &operandGrads) {
  if (!resultGrads[0]) {
    operandGrads.push_back(Value());
    return success();
  }
  // d(x²)/dx · dy = 2 · x · dy, from the train dialect's ops.
  Value product =
      train::MulOp::create(builder, getLoc(), getInput(), resultGrads[0]);
  operandGrads.push_back(train::ScaleOp::create(
      builder, getLoc(), product, builder.getF64FloatAttr(2.0)));
  return success();
}

uint64_t SquareOp::getFlops() {
  return train::getNumElements(getInput().getType());
}

#define GET_OP_CLASSES
#include "TestOps.cpp.inc"
