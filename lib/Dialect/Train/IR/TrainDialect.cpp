//===- TrainDialect.cpp - the train dialect -------------------------------===//

#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"

using namespace mlir;
using namespace mlir::train;

#include "trainmem/Dialect/Train/IR/TrainDialect.cpp.inc"
#include "trainmem/Dialect/Train/IR/TrainEnums.cpp.inc"
#include "trainmem/Dialect/Train/IR/TrainInterfaces.cpp.inc"

void TrainDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "trainmem/Dialect/Train/IR/TrainOps.cpp.inc"
      >();
}
