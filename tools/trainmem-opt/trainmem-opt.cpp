//===- trainmem-opt.cpp - the trainmem optimizer driver -------------------===//

#include "trainmem/Conversion/Passes.h"
#include "trainmem/Debug/Debug.h"
#include "trainmem/Dialect/Train/IR/ShardModels.h"
#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Dialect/Train/Transforms/Pipelines.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/Transforms/Passes.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Tools/Plugins/PassPlugin.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <vector>

/// Loads the pass plugins named by --load-pass-plugin before the options
/// are parsed (their passes then work as flags too) and takes those options
/// out of `args`. MlirOptMain's own loading ignores a plugin it cannot load
/// ("Request ignored."); here a plugin that does not load is an error that
/// says why. A relative path names a file from the working directory (as
/// every other path argument does), not a library search.
static bool loadPassPlugins(std::vector<char *> &args) {
  std::vector<char *> kept;
  for (size_t i = 0; i < args.size(); ++i) {
    llvm::StringRef arg = args[i];
    std::string path;
    if (arg.consume_front("--load-pass-plugin") ||
        arg.consume_front("-load-pass-plugin")) {
      if (arg.consume_front("=")) {
        path = arg.str();
      } else if (arg.empty() && i + 1 < args.size()) {
        path = args[++i];
      } else {
        kept.push_back(args[i]);
        continue;
      }
    } else {
      kept.push_back(args[i]);
      continue;
    }
    if (path.empty()) {
      llvm::errs() << "trainmem-opt: error: --load-pass-plugin needs a file\n";
      return false;
    }
    if (!llvm::sys::fs::exists(path)) {
      llvm::errs() << "trainmem-opt: error: cannot load pass plugin '" << path
                   << "': no such file\n";
      return false;
    }
    llvm::SmallString<256> absolute(path);
    llvm::sys::fs::make_absolute(absolute);
    llvm::Expected<mlir::PassPlugin> plugin =
        mlir::PassPlugin::load(absolute.str().str());
    if (!plugin) {
      llvm::errs() << "trainmem-opt: error: cannot load pass plugin '" << path
                   << "': " << llvm::toString(plugin.takeError()) << "\n";
      return false;
    }
    plugin->registerPassRegistryCallbacks();
  }
  args = std::move(kept);
  return true;
}

/// Parses the pass options of the command line (-PASS=OPTIONS, and
/// --pass-pipeline=...) before MlirOptMain does: an option value it cannot
/// read gets the option parser's message and one line naming the pass,
/// then exit 1 (MlirOptMain follows the parser's message with an empty
/// "<unknown>:0: error:").
static bool checkPassOptions(llvm::ArrayRef<char *> args) {
  for (char *raw : args.drop_front()) {
    llvm::StringRef arg = raw;
    if (!arg.consume_front("-"))
      continue;
    arg.consume_front("-");
    auto [name, options] = arg.split('=');
    if (options.empty() && !arg.contains('='))
      continue;
    std::string pipeline;
    if (name == "pass-pipeline")
      pipeline = options.str();
    else if (mlir::PassInfo::lookup(name) || mlir::PassPipelineInfo::lookup(name))
      pipeline = ("builtin.module(" + name + "{" + options + "})").str();
    else
      continue;
    std::string errors;
    llvm::raw_string_ostream errorStream(errors);
    if (succeeded(mlir::parsePassPipeline(pipeline, errorStream)))
      continue;
    // The option parser printed what it could not read; the pipeline
    // parser's "failed to add" lines only repeat the options.
    llvm::SmallVector<llvm::StringRef> lines;
    llvm::StringRef(errors).split(lines, '\n', -1, /*KeepEmpty=*/false);
    std::string why;
    for (llvm::StringRef line : lines)
      if (!line.trim().empty() && !line.starts_with("failed to add"))
        why += (why.empty() ? "" : "; ") + line.trim().str();
    llvm::errs() << "trainmem-opt: error: cannot read the options of -"
                 << name << " ('" << options << "')"
                 << (why.empty() ? "" : ": " + why) << "\n";
    return false;
  }
  return true;
}

int main(int argc, char **argv) {
  std::vector<char *> args(argv, argv + argc);
  if (!loadPassPlugins(args))
    return 1;
  argc = static_cast<int>(args.size());
  args.push_back(nullptr);
  argv = args.data();
  mlir::DialectRegistry registry;
  registry.insert<mlir::train::TrainDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::tensor::TensorDialect,
                  mlir::LLVM::LLVMDialect, mlir::scf::SCFDialect,
                  mlir::shard::ShardDialect>();
  // The train interfaces on upstream's shard collectives (train-zero).
  mlir::train::registerShardExternalModels(registry);
  // convert-to-llvm finds each dialect's lowering through these extensions.
  mlir::registerAllExtensions(registry);
  mlir::train::registerTrainPasses();
  mlir::train::registerTrainPipelines();
  mlir::train::registerTrainConversionPasses();
  mlir::registerTransformsPasses();
  // Upstream's sharding-propagation and shard-partition, which see through
  // the train ops' ShardingInterface models.
  mlir::shard::registerShardPasses();
  mlir::registerSCFToControlFlowPass();
  mlir::registerConvertToLLVMPass();
  mlir::registerReconcileUnrealizedCastsPass();
  mlir::registerConvertFuncToLLVMPass();
  mlir::registerArithToLLVMConversionPass();
  mlir::train::registerDebugOptions();
  auto [input, output] = mlir::registerAndParseCLIOptions(
      argc, argv, "trainmem optimizer driver\n", registry);
  if (!checkPassOptions(llvm::ArrayRef<char *>(argv, argc)))
    return 1;
  // The IR is verified after parsing and after every pass (both on by
  // default): verifying it once more before printing it only costs time (a
  // quarter of a gpt3-175b step's compile time). With either check off, the
  // printer keeps its own.
  // A diagnostic names its op and points at its location; the generic
  // dump of the op that MLIR adds by default ("see current operation") is
  // the whole function for a remark or error on a step (1,646 lines for
  // gpt2-124m): off unless asked for (--mlir-print-op-on-diagnostic).
  if (llvm::cl::Option *printOp = llvm::cl::getRegisteredOptions().lookup(
          "mlir-print-op-on-diagnostic");
      printOp && printOp->getNumOccurrences() == 0)
    printOp->addOccurrence(0, "mlir-print-op-on-diagnostic", "false");
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
