//===- Debug.cpp - the tools' -debug and -debug-only ----------------------===//

#include "trainmem/Debug/Debug.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/Support/CommandLine.h"

#include <string>
#include <vector>

using namespace llvm;

namespace {

/// The types -debug-only named so far (each occurrence adds to them).
std::vector<std::string> &debugTypes() {
  static std::vector<std::string> types;
  return types;
}

void addDebugTypes(const std::string &value) {
  std::vector<std::string> &types = debugTypes();
  types.push_back(value);
  std::vector<const char *> names;
  for (const std::string &type : types)
    names.push_back(type.c_str());
  DebugFlag = true;
  setCurrentDebugTypes(names.data(), static_cast<unsigned>(names.size()));
}

} // namespace

void mlir::train::DebugRewriteListener::notifyMatchFailure(
    mlir::Location loc, function_ref<void(mlir::Diagnostic &)> reasonCallback) {
  mlir::Diagnostic reason(loc, mlir::DiagnosticSeverity::Remark);
  reasonCallback(reason);
  dbgs() << type << ": no match at " << loc << ": " << reason << "\n";
}

void mlir::train::DebugRewriteListener::notifyOperationReplaced(
    mlir::Operation *op, mlir::ValueRange replacement) {
  dbgs() << type << ": replaced '" << op->getName() << "' at " << op->getLoc();
  if (!replacement.empty())
    if (mlir::Operation *by = replacement.front().getDefiningOp())
      dbgs() << " by '" << by->getName() << "'";
  dbgs() << "\n";
}

mlir::LogicalResult
mlir::train::applyPatternsWithDebug(mlir::Operation *root,
                                    mlir::RewritePatternSet &&patterns,
                                    const char *debugType) {
  DebugRewriteListener listener(debugType);
  mlir::GreedyRewriteConfig config;
  if (DebugFlag && isCurrentDebugType(debugType, 1))
    config.setListener(&listener);
  return mlir::applyPatternsGreedily(root, std::move(patterns), config);
}

void mlir::train::registerDebugOptions() {
  auto &options = cl::getRegisteredOptions();
  if (options.count("debug") || options.count("debug-only"))
    return; // an LLVM built with assertions registers its own
  static cl::opt<bool, /*ExternalStorage=*/true> debug(
      "debug", cl::desc("Print every pass's debug output (LLVM_DEBUG)"),
      cl::location(DebugFlag), cl::Hidden);
  static cl::list<std::string> debugOnly(
      "debug-only",
      cl::desc("Print the debug output of these passes only (their flags: "
               "-debug-only=train-zero,train-remat)"),
      cl::CommaSeparated, cl::Hidden,
      cl::callback([](const std::string &type) { addDebugTypes(type); }));
  (void)debug;
  (void)debugOnly;
}
