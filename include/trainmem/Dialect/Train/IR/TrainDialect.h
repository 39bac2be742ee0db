//===- TrainDialect.h - the train dialect ------------------------*- C++ -*-===//

#ifndef TRAINMEM_DIALECT_TRAIN_IR_TRAINDIALECT_H
#define TRAINMEM_DIALECT_TRAIN_IR_TRAINDIALECT_H

#include "mlir/IR/Dialect.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/Mutex.h"

#include <string>

// The types of the dialect's discardable attributes.
#include "trainmem/Dialect/Train/IR/TrainAttrs.h"

#include "trainmem/Dialect/Train/IR/TrainDialect.h.inc"

#endif // TRAINMEM_DIALECT_TRAIN_IR_TRAINDIALECT_H
