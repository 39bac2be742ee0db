//===- trainmem-opt.cpp - the trainmem optimizer driver -------------------===//

#include "trainmem/Conversion/Passes.h"
#include "trainmem/Dialect/Train/IR/ShardModels.h"
#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Dialect/Train/Transforms/Pipelines.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/CommandLine.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::train::TrainDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::tensor::TensorDialect,
                  mlir::LLVM::LLVMDialect, mlir::shard::ShardDialect>();
  // The train interfaces on upstream's shard collectives (train-zero).
  mlir::train::registerShardExternalModels(registry);
  // convert-to-llvm finds each dialect's lowering through these extensions.
  mlir::registerAllExtensions(registry);
  mlir::train::registerTrainPasses();
  mlir::train::registerTrainPipelines();
  mlir::train::registerTrainConversionPasses();
  mlir::registerTransformsPasses();
  mlir::registerConvertToLLVMPass();
  mlir::registerReconcileUnrealizedCastsPass();
  mlir::registerConvertFuncToLLVMPass();
  mlir::registerArithToLLVMConversionPass();
  auto [input, output] = mlir::registerAndParseCLIOptions(
      argc, argv, "trainmem optimizer driver\n", registry);
  // The IR is verified after parsing and after every pass (both on by
  // default): verifying it once more before printing it only costs time (a
  // quarter of a gpt3-175b step's compile time). With either check off, the
  // printer keeps its own.
  mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  if (config.shouldVerifyOnParsing() && config.shouldVerifyPasses()) {
    llvm::cl::Option *assumeVerified =
        llvm::cl::getRegisteredOptions().lookup("mlir-print-assume-verified");
    if (assumeVerified && assumeVerified->getNumOccurrences() == 0)
      assumeVerified->addOccurrence(0, "mlir-print-assume-verified", "true");
  }
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, input, output, registry));
}
