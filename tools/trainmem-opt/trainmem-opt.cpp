//===- trainmem-opt.cpp - the trainmem optimizer driver -------------------===//

#include "trainmem/Conversion/Passes.h"
#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::train::TrainDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::tensor::TensorDialect,
                  mlir::LLVM::LLVMDialect>();
  // convert-to-llvm finds each dialect's lowering through these extensions.
  mlir::registerAllExtensions(registry);
  mlir::train::registerTrainPasses();
  mlir::train::registerTrainConversionPasses();
  mlir::registerTransformsPasses();
  mlir::registerConvertToLLVMPass();
  mlir::registerReconcileUnrealizedCastsPass();
  mlir::registerConvertFuncToLLVMPass();
  mlir::registerArithToLLVMConversionPass();
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "trainmem optimizer driver\n", registry));
}
