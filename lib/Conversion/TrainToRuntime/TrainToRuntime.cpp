//===- TrainToRuntime.cpp - convert-train-to-runtime ----------------------===//
//
// Walks the step in program order (the order the memory analysis measured)
// and emits each op's runtime calls through its RuntimeLoweringOpInterface
// model (RuntimeLowering.cpp), with arena offsets from the static plan. Nothing is allocated at run time: the plan is the allocation.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Analysis/Layout.h"
#include "trainmem/Analysis/MemoryAnalysis.h"
#include "trainmem/Analysis/MemoryPlan.h"
#include "trainmem/Conversion/Passes.h"
#include "trainmem/Conversion/RuntimeLowering.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

namespace mlir {
namespace train {
#define GEN_PASS_DEF_CONVERTTRAINTORUNTIMEPASS
#include "trainmem/Conversion/Passes.h.inc"

namespace {

/// Lowers one op of the schedule: region ops only name their values; the
/// rest go through their RuntimeLoweringOpInterface model.
LogicalResult lowerOp(Operation *op, RuntimeCallBuilder &builder) {
  if (isa<BlockOp, YieldOp>(op))
    return success();
  if (auto remat = dyn_cast<RematOp>(op))
    return remat.emitOpError("must be materialized before lowering (run "
                             "train-materialize-remat)");
  if (auto accumulate = dyn_cast<AccumulateOp>(op))
    return accumulate.emitOpError("must be unrolled before lowering (run "
                                  "train-unroll-accum)");
  // Float tensors are f32, bf16 or f16; ids, counts and masks integers.
  for (Value value : llvm::concat<Value>(op->getOperands(), op->getResults()))
    if (auto type = dyn_cast<RankedTensorType>(value.getType()))
      if (!RuntimeCallBuilder::isRuntimeElementType(type.getElementType()))
        return op->emitOpError("has a ")
               << type.getElementType()
               << " tensor; the runtime's kernels take f32, bf16 and f16 "
                  "(and integer) tensors";
  if (auto lowerable = dyn_cast<RuntimeLoweringOpInterface>(op))
    return lowerable.lowerToRuntime(builder);
  return op->emitOpError("has no lowering to the trainmem runtime");
}

/// The role and key of argument/result `index` from its markers.
std::pair<StringRef, std::string> roleOf(DictionaryAttr attrs) {
  if (!attrs)
    return {"", ""};
  if (auto state = attrs.getAs<StateAttr>(kOptimizerStateAttrName))
    return {"optimizer_state", state.getKey()};
  for (StringRef name : {kParamAttrName, kInputAttrName, kGradAttrName})
    if (auto value = attrs.getAs<StringAttr>(name))
      return {name.drop_front(strlen("train.")), value.getValue().str()};
  if (attrs.get(kLossAttrName))
    return {"loss", ""};
  if (attrs.get(kGradNormAttrName))
    return {"grad_norm", ""};
  return {"", ""};
}

StringRef dtypeName(Type elementType) {
  if (elementType.isF32())
    return "f32";
  if (elementType.isBF16())
    return "bf16";
  if (elementType.isF16())
    return "f16";
  if (elementType.isInteger(32))
    return "i32";
  if (elementType.isInteger(64))
    return "i64";
  if (elementType.isInteger(8))
    return "i8";
  if (elementType.isInteger(1))
    return "i1";
  return "unknown";
}

struct ConvertTrainToRuntimePass
    : public impl::ConvertTrainToRuntimePassBase<ConvertTrainToRuntimePass> {
  using Base::Base;

  void getDependentDialects(DialectRegistry &registry) const override {
    Base::getDependentDialects(registry);
    registerRuntimeLoweringExternalModels(registry);
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    Operation *symbol = nullptr;
    if (function.empty()) {
      symbol = findMarkedStep(module, "convert-train-to-runtime");
      if (!symbol)
        return signalPassFailure();
    } else {
      symbol = module.lookupSymbol(function);
    }
    std::string name =
        symbol ? SymbolTable::getSymbolName(symbol).str() : function;
    if (isLoweredStep(symbol)) {
      emitError(symbol->getLoc(), "convert-train-to-runtime: @")
          << name
          << " is already lowered (it takes the runtime's arena, not "
             "tensors); run this pass once, on the tensor-level step";
      return signalPassFailure();
    }
    auto step = dyn_cast_or_null<func::FuncOp>(symbol);
    if (!step || step.isExternal()) {
      emitError(module.getLoc(), "convert-train-to-runtime: no function @")
          << name << " with a body";
      return signalPassFailure();
    }
    for (auto [what, types] :
         {std::pair{"argument", step.getArgumentTypes()},
          std::pair{"result", step.getResultTypes()}})
      for (auto [index, type] : llvm::enumerate(types))
        if (!isa<RankedTensorType>(type)) {
          emitError(step.getLoc(), "convert-train-to-runtime: ")
              << what << " " << index << " of @" << name << " is "
              << type << "; a tensor-level step takes and returns ranked "
              << "tensors";
          return signalPassFailure();
        }
    const FunctionMemory *analyzed = getAnalysis<MemoryAnalysis>().lookup(step);
    if (!analyzed) {
      emitError(step.getLoc(), "convert-train-to-runtime: no memory analysis "
                               "of @")
          << name;
      return signalPassFailure();
    }
    const FunctionMemory &memory = *analyzed;
    if (failed(memory.checkCounts("convert-train-to-runtime")))
      return signalPassFailure();
    // The plan train-plan-arena wrote into the step, checked against the IR
    // as it is now; without one, planned here.
    std::optional<MemoryPlan> plan;
    if (MemoryPlan::hasPlanInIR(step)) {
      FailureOr<MemoryPlan> written =
          MemoryPlan::readFromIR(memory, "convert-train-to-runtime");
      if (failed(written))
        return signalPassFailure();
      plan = std::move(*written);
    } else {
      plan.emplace(memory);
    }
    MLIRContext *context = &getContext();
    OpBuilder builder(context);

    // Where the host finds each argument and result.
    auto describe = [&](Value value, DictionaryAttr attrs) {
      auto [role, key] = roleOf(attrs);
      const Buffer *buffer = memory.lookupBuffer(value);
      auto type = cast<RankedTensorType>(value.getType());
      NamedAttrList entry;
      entry.append("role", builder.getStringAttr(role));
      entry.append("key", builder.getStringAttr(key));
      // What the runner needs to start the tensor: typed, not a name.
      if (attrs)
        for (StringRef name : {kOptimizerStateAttrName, kInitAttrName})
          if (Attribute typed = attrs.get(name))
            entry.append(name.drop_front(strlen("train.")), typed);
      entry.append("offset",
                   builder.getI64IntegerAttr(static_cast<int64_t>(plan->getOffset(
                       buffer - memory.getBuffers().data()))));
      entry.append("bytes", builder.getI64IntegerAttr(
                                static_cast<int64_t>(getTensorBytes(type))));
      entry.append("shape", builder.getDenseI64ArrayAttr(type.getShape()));
      // A rank's shard: the whole tensor's shape, to start it from.
      if (auto full = attrs ? attrs.getAs<TypeAttr>(kShardOfAttrName)
                            : TypeAttr())
        entry.append("full_shape",
                     builder.getDenseI64ArrayAttr(
                         cast<RankedTensorType>(full.getValue()).getShape()));
      entry.append("dtype",
                   builder.getStringAttr(dtypeName(type.getElementType())));
      return entry.getDictionary(context);
    };
    SmallVector<Attribute> arguments, results;
    for (unsigned i = 0; i < step.getNumArguments(); ++i)
      arguments.push_back(
          describe(step.getArgument(i), step.getArgAttrDict(i)));
    auto ret = cast<func::ReturnOp>(step.front().getTerminator());
    for (auto [i, value] : llvm::enumerate(ret.getOperands()))
      results.push_back(describe(value, step.getResultAttrDict(i)));

    // The lowered step, built next to the original and swapped in.
    builder.setInsertionPoint(step);
    auto ptrType = LLVM::LLVMPointerType::get(context);
    auto lowered = func::FuncOp::create(
        builder, step.getLoc(), name + ".lowered",
        builder.getFunctionType({ptrType}, {}));
    Block *entry = lowered.addEntryBlock();
    builder.setInsertionPointToEnd(entry);
    RuntimeCallBuilder lowering(
        builder, lowered.getArgument(0), [&](Value value) {
          const Buffer *buffer = memory.lookupBuffer(value);
          assert(buffer && "every tensor has a buffer");
          return static_cast<int64_t>(
              plan->getOffset(buffer - memory.getBuffers().data()));
        });
    // The calls go into parts of at most kCallsPerPart calls, each a
    // function the step calls in turn: LLVM's code generation takes time
    // superlinear in the size of one function (a step of 256 unrolled
    // micro-batches took minutes to JIT-compile as one).
    constexpr uint64_t kCallsPerPart = 256;
    SmallVector<func::FuncOp> parts;
    OpBuilder stepBuilder(context);
    stepBuilder.setInsertionPointToEnd(entry);
    uint64_t partStart = 0;
    auto erasePartial = [&] {
      lowered.erase();
      for (func::FuncOp part : parts)
        part.erase();
    };
    for (Operation *op : memory.getSchedule()) {
      if (isa<func::ReturnOp>(op))
        continue;
      if (lowering.getNumCalls() - partStart >= kCallsPerPart) {
        if (!parts.empty())
          func::ReturnOp::create(builder, step.getLoc());
        OpBuilder partBuilder(lowered);
        auto part = func::FuncOp::create(
            partBuilder, step.getLoc(),
            (name + ".part" + Twine(parts.size())).str(),
            partBuilder.getFunctionType({ptrType}, {}));
        part.setPrivate();
        parts.push_back(part);
        func::CallOp::create(stepBuilder, step.getLoc(), part,
                             ValueRange{lowered.getArgument(0)});
        Block *partEntry = part.addEntryBlock();
        builder.setInsertionPointToEnd(partEntry);
        lowering.setContext(partEntry->getArgument(0));
        partStart = lowering.getNumCalls();
      }
      if (failed(lowerOp(op, lowering))) {
        erasePartial();
        return signalPassFailure();
      }
    }
    if (!parts.empty())
      func::ReturnOp::create(builder, step.getLoc());
    func::ReturnOp::create(stepBuilder, step.getLoc());
    numCalls += lowering.getNumCalls();

    lowered->setAttr(kArenaBytesAttrName,
                     builder.getI64IntegerAttr(
                         static_cast<int64_t>(plan->getArenaBytes())));
    lowered->setAttr(kArgumentSlotsAttrName, builder.getArrayAttr(arguments));
    lowered->setAttr(kResultSlotsAttrName, builder.getArrayAttr(results));
    if (auto zero = step->getAttrOfType<ZeroAttr>(kZeroAttrName))
      lowered->setAttr(kLoweredRanksAttrName,
                       builder.getI64IntegerAttr(zero.getRanks()));
    step.erase();
    // The collectives are runtime calls now: their grids go (a grid still
    // named by another op stays).
    for (auto grid : llvm::make_early_inc_range(
             module.getBody()->getOps<shard::GridOp>()))
      if (SymbolTable::symbolKnownUseEmpty(grid, module))
        grid.erase();
    lowered.setSymName(name);

    // Declarations of the runtime functions the step calls.
    builder.setInsertionPointToStart(module.getBody());
    llvm::StringSet<> declared;
    auto declare = [&](func::CallOp call) {
      StringRef callee = call.getCallee();
      if (!declared.insert(callee).second || module.lookupSymbol(callee))
        return;
      auto decl = func::FuncOp::create(
          builder, module.getLoc(), callee,
          builder.getFunctionType(call.getOperandTypes(), {}));
      decl.setPrivate();
    };
    lowered.walk(declare);
    for (func::FuncOp part : parts)
      part.walk(declare);
  }
};

} // namespace
} // namespace train
} // namespace mlir
