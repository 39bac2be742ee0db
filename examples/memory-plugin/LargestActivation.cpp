//===- LargestActivation.cpp - a memory pass loaded as a plugin -----------===//
//
// An example of a memory pass written outside trainmem and loaded into
// trainmem-opt with --load-pass-plugin. It reads the memory analysis of the
// step and reports the activations the forward pass keeps for the backward
// pass, largest first, as remarks at the ops that make them: the tensors to
// look at first when deciding what to rematerialize.
//
// docs/WritingAPass.md walks through this file.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Analysis/MemoryAnalysis.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Tools/Plugins/PassPlugin.h"
#include "llvm/Config/llvm-config.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <vector>

using namespace mlir;
using namespace mlir::train;

namespace {

StringRef describe(SavedFor part) {
  switch (part) {
  case SavedFor::Attention:
    return "attention";
  case SavedFor::MLP:
    return "MLP";
  case SavedFor::Norm:
    return "norm";
  case SavedFor::Other:
    return "other";
  }
  return "other";
}

struct LargestActivationPass
    : PassWrapper<LargestActivationPass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(LargestActivationPass)

  LargestActivationPass() = default;
  LargestActivationPass(const LargestActivationPass &other)
      : PassWrapper(other) {}

  StringRef getArgument() const final { return "example-largest-activation"; }
  StringRef getDescription() const final {
    return "Report the largest activations the step saves for its backward "
           "pass (an example pass plugin)";
  }
  void getDependentDialects(DialectRegistry &registry) const override {
    registry.insert<TrainDialect>();
  }

  Option<unsigned> top{*this, "top",
                       llvm::cl::desc("How many activations to report"),
                       llvm::cl::init(1)};

  void runOnOperation() override {
    if (top == 0) {
      getOperation().emitError()
          << getArgument() << ": top must be at least 1";
      return signalPassFailure();
    }
    // The step is the function marked `train.step`; the same query every
    // trainmem pass uses, so the plugin agrees with them on which it is.
    Operation *step = findMarkedStep(getOperation(), getArgument());
    if (!step)
      return signalPassFailure();
    auto func = dyn_cast<func::FuncOp>(step);
    if (!func || !func->hasAttr(kStepAttrName)) {
      step->emitError() << getArgument()
                        << ": expects the tensor-level step (before "
                           "convert-train-to-runtime)";
      return signalPassFailure();
    }

    // The analysis is shared with the passes that run before and after this
    // one in the same pipeline: asking for it costs nothing when it is
    // still valid.
    const FunctionMemory *memory = getAnalysis<MemoryAnalysis>().lookup(func);
    if (!memory || failed(memory->checkCounts(getArgument())))
      return signalPassFailure();

    std::vector<const Buffer *> saved;
    for (const Buffer &buffer : memory->getBuffers())
      if (buffer.category == MemoryCategory::Activations)
        saved.push_back(&buffer);
    if (saved.empty()) {
      func.emitRemark() << "no saved activations";
      markAllAnalysesPreserved();
      return;
    }
    // Largest first; equal sizes in the analysis's order (program order).
    llvm::sort(saved, [](const Buffer *a, const Buffer *b) {
      if (a->bytes != b->bytes)
        return a->bytes > b->bytes;
      return a < b;
    });
    uint64_t total = 0;
    for (const Buffer *buffer : saved)
      total += buffer->bytes;

    unsigned count = std::min<size_t>(top, saved.size());
    for (unsigned i = 0; i < count; ++i) {
      const Buffer &buffer = *saved[i];
      Operation *maker = buffer.owner.getDefiningOp();
      Location loc = maker ? maker->getLoc() : func.getLoc();
      InFlightDiagnostic remark = emitRemark(loc);
      remark << "saved activation #" << (i + 1) << ": " << buffer.bytes
             << " B (" << buffer.owner.getType() << ")";
      if (maker)
        remark << " from '" << maker->getName() << "'";
      if (buffer.layer)
        remark << ", kept for the " << describe(buffer.savedFor)
               << " of layer " << *buffer.layer;
      remark << "; " << saved.size() << " saved activations hold " << total
             << " B";
    }
    markAllAnalysesPreserved();
  }
};

} // namespace

/// The entry point trainmem-opt looks up in the loaded library.
extern "C" LLVM_ATTRIBUTE_WEAK PassPluginLibraryInfo mlirGetPassPluginInfo() {
  return {MLIR_PLUGIN_API_VERSION, "TrainmemLargestActivation",
          LLVM_VERSION_STRING,
          []() { PassRegistration<LargestActivationPass>(); }};
}
