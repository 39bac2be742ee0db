//===- Passes.h - conversion passes of trainmem ------------------*- C++ -*-===//

#ifndef TRAINMEM_CONVERSION_PASSES_H
#define TRAINMEM_CONVERSION_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"

namespace mlir {
namespace train {

#define GEN_PASS_DECL
#include "trainmem/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "trainmem/Conversion/Passes.h.inc"

} // namespace train
} // namespace mlir

#endif // TRAINMEM_CONVERSION_PASSES_H
