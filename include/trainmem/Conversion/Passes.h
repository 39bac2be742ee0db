//===- Passes.h - conversion passes of trainmem ------------------*- C++ -*-===//

#ifndef TRAINMEM_CONVERSION_PASSES_H
#define TRAINMEM_CONVERSION_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir {
namespace train {

/// Attributes of a step lowered by convert-train-to-runtime: the arena's
/// planned size, and where the host finds each argument and result.
constexpr llvm::StringLiteral kArenaBytesAttrName = "tmrt.arena_bytes";
constexpr llvm::StringLiteral kArgumentSlotsAttrName = "tmrt.arguments";
constexpr llvm::StringLiteral kResultSlotsAttrName = "tmrt.results";

/// Whether `op` (a func.func or llvm.func) is a step that
/// convert-train-to-runtime already lowered.
inline bool isLoweredStep(Operation *op) {
  return op && op->hasAttr(kArenaBytesAttrName);
}

#define GEN_PASS_DECL
#include "trainmem/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "trainmem/Conversion/Passes.h.inc"

} // namespace train
} // namespace mlir

#endif // TRAINMEM_CONVERSION_PASSES_H
