//===- TrainAttrs.h - attributes of the train dialect -----------*- C++ -*-===//

#ifndef TRAINMEM_DIALECT_TRAIN_IR_TRAINATTRS_H
#define TRAINMEM_DIALECT_TRAIN_IR_TRAINATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectImplementation.h"

#include "trainmem/Dialect/Train/IR/TrainEnums.h.inc"

#include <string>

#define GET_ATTRDEF_CLASSES
#include "trainmem/Dialect/Train/IR/TrainAttrs.h.inc"

#endif // TRAINMEM_DIALECT_TRAIN_IR_TRAINATTRS_H
