//===- TrainUtils.cpp - queries on train IR shared by passes --------------===//

#include "trainmem/Dialect/Train/IR/TrainUtils.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"

#include "mlir/Dialect/Utils/IndexingUtils.h"
#include "mlir/IR/SymbolTable.h"

using namespace mlir;
using namespace mlir::train;

bool mlir::train::isRowMajor(ArrayRef<int64_t> shape,
                             ArrayRef<int64_t> strides) {
  SmallVector<int64_t> expected = computeSuffixProduct(shape);
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != 1 && strides[i] != expected[i])
      return false;
  return true;
}

bool mlir::train::isTransparentRegionOp(Operation *op) {
  return isa_and_nonnull<TransparentRegionOpInterface>(op);
}

Value mlir::train::resolveRegionResult(Value value) {
  while (auto region = value.getDefiningOp<TransparentRegionOpInterface>())
    value = region.getYieldedValue(cast<OpResult>(value).getResultNumber());
  return value;
}

bool mlir::train::hasMarkedStep(ModuleOp module) {
  return llvm::any_of(module.getOps(), [](Operation &op) {
    return op.hasAttr(kStepAttrName) || isLoweredStep(&op);
  });
}

Operation *mlir::train::findMarkedStep(ModuleOp module, StringRef passName) {
  Operation *found = nullptr;
  for (Operation &op : module.getOps()) {
    if (!op.hasAttr(kStepAttrName) && !isLoweredStep(&op))
      continue;
    if (found) {
      emitError(op.getLoc())
          << passName << ": @" << SymbolTable::getSymbolName(found).getValue()
          << " and @" << SymbolTable::getSymbolName(&op).getValue()
          << " are both marked " << kStepAttrName
          << "; give the pass function=NAME";
      return nullptr;
    }
    found = &op;
  }
  if (!found)
    emitError(module.getLoc())
        << passName << ": no function marked " << kStepAttrName
        << " (run train-autodiff first)";
  return found;
}

bool mlir::train::isTensorParallel(FunctionOpInterface func) {
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
    if (func.getArgAttr(i, kTensorSplitAttrName))
      return true;
  return false;
}
