//===- TestDialect.h - an op defined only by the tests ----------*- C++ -*-===//

#ifndef TRAINMEM_UNITTESTS_TESTDIALECT_H
#define TRAINMEM_UNITTESTS_TESTDIALECT_H

#include "trainmem/Dialect/Train/IR/TrainOps.h"

#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "TestDialect.h.inc"

#define GET_OP_CLASSES
#include "TestOps.h.inc"

#endif // TRAINMEM_UNITTESTS_TESTDIALECT_H
