//===- CostReport.cpp - train-cost-report ---------------------------------===//

#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/ToolOutputFile.h"

#include "trainmem/Debug/Debug.h"

#define DEBUG_TYPE "train-cost-report"

namespace mlir {
namespace train {
#define GEN_PASS_DEF_TRAINCOSTREPORTPASS
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"

namespace {

struct Cost {
  uint64_t flops = 0;
  uint64_t bytesRead = 0;
  uint64_t bytesWritten = 0;

  /// Adds `op`'s cost; on a count past 64 bits returns what overflowed.
  std::optional<StringRef> add(CostOpInterface op) {
    flops = addCount(flops, op.getFlops());
    bytesRead = addCount(bytesRead, op.getBytesRead());
    bytesWritten = addCount(bytesWritten, op.getBytesWritten());
    if (flops == kCountOverflow)
      return StringRef("FLOPs");
    if (bytesRead == kCountOverflow)
      return StringRef("bytes read");
    if (bytesWritten == kCountOverflow)
      return StringRef("bytes written");
    return std::nullopt;
  }
  llvm::json::Object toJSON() const {
    return llvm::json::Object{{"flops", flops},
                              {"bytes_read", bytesRead},
                              {"bytes_written", bytesWritten}};
  }
};

struct FunctionCost {
  std::string name;
  uint64_t parameters = 0;
  uint64_t parameterBytes = 0;
  Cost total;
  // Keyed by block kind ("attention", ...) or "other" outside any block.
  llvm::StringMap<Cost> byKind;
  std::vector<std::string> kindOrder;
};

/// The kind of the innermost `train.block` around `op`, or "other".
static StringRef enclosingKind(Operation *op) {
  if (auto block = op->getParentOfType<BlockOp>())
    return stringifyBlockKind(block.getKind());
  return "other";
}

/// The cost of `func`, or an error at the first op where a count passes 64
/// bits (printing a wrapped count would be a silent wrong result).
static FailureOr<FunctionCost> costFunction(func::FuncOp func,
                                            uint64_t &numOps) {
  FunctionCost result;
  result.name = func.getSymName().str();
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
    if (!func.getArgAttr(i, kParamAttrName))
      continue;
    Type type = func.getArgument(i).getType();
    result.parameters = addCount(result.parameters, getNumElements(type));
    result.parameterBytes = addCount(result.parameterBytes, getTensorBytes(type));
  }
  if (result.parameterBytes == kCountOverflow)
    return emitError(func.getLoc(), "train-cost-report: the parameter bytes "
                                    "of @")
           << func.getSymName() << " overflow 64 bits";
  WalkResult walk = func.walk([&](CostOpInterface op) {
    ++numOps;
    StringRef kind = enclosingKind(op);
    if (!result.byKind.count(kind))
      result.kindOrder.push_back(kind.str());
    std::optional<StringRef> overflow = result.byKind[kind].add(op);
    if (!overflow)
      overflow = result.total.add(op);
    if (overflow) {
      emitError(op->getLoc(), "train-cost-report: the ")
          << *overflow << " of @" << func.getSymName()
          << " overflow 64 bits at this '" << op->getName() << "'";
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  return result;
}

static void printText(llvm::raw_ostream &os,
                      ArrayRef<FunctionCost> functions) {
  for (const FunctionCost &fn : functions) {
    os << "function @" << fn.name << "\n";
    os << llvm::formatv("  parameters      {0,16} ({1} bytes)\n",
                        fn.parameters, fn.parameterBytes);
    os << llvm::formatv("  flops           {0,16}\n", fn.total.flops);
    os << llvm::formatv("  bytes read      {0,16}\n", fn.total.bytesRead);
    os << llvm::formatv("  bytes written   {0,16}\n", fn.total.bytesWritten);
    for (const std::string &kind : fn.kindOrder) {
      const Cost &cost = fn.byKind.lookup(kind);
      os << llvm::formatv("  {0,-10} flops {1,16}  read {2,14}  written "
                          "{3,14}\n",
                          kind, cost.flops, cost.bytesRead,
                          cost.bytesWritten);
    }
  }
}

static llvm::json::Value toJSON(ArrayRef<FunctionCost> functions) {
  llvm::json::Array array;
  for (const FunctionCost &fn : functions) {
    llvm::json::Object byKind;
    for (const std::string &kind : fn.kindOrder)
      byKind[kind] = fn.byKind.lookup(kind).toJSON();
    llvm::json::Object object = fn.total.toJSON();
    object["function"] = fn.name;
    object["parameters"] = fn.parameters;
    object["parameter_bytes"] = fn.parameterBytes;
    object["by_kind"] = std::move(byKind);
    array.push_back(std::move(object));
  }
  return llvm::json::Object{{"functions", std::move(array)}};
}

struct TrainCostReportPass
    : public impl::TrainCostReportPassBase<TrainCostReportPass> {
  using Base::Base;

  void runOnOperation() override {
    uint64_t numOps = 0;
    SmallVector<FunctionCost> functions;
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      FailureOr<FunctionCost> cost = costFunction(func, numOps);
      if (failed(cost))
        return signalPassFailure();
      functions.push_back(std::move(*cost));
    }
    numOpsCosted += numOps;
    LLVM_DEBUG(llvm::dbgs() << "train-cost-report: " << functions.size()
                            << " functions, " << numOps << " ops costed\n");

    std::string errorMessage;
    std::unique_ptr<llvm::ToolOutputFile> file =
        openOutputFile(output, &errorMessage);
    if (!file) {
      emitError(getOperation().getLoc(), "train-cost-report: ") << errorMessage;
      return signalPassFailure();
    }
    if (format == ReportFormat::json)
      file->os() << llvm::formatv("{0:2}", toJSON(functions)) << "\n";
    else
      printText(file->os(), functions);
    file->keep();
    markAllAnalysesPreserved();
  }
};

} // namespace
} // namespace train
} // namespace mlir
