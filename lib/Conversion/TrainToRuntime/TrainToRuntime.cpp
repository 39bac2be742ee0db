//===- TrainToRuntime.cpp - convert-train-to-runtime ----------------------===//
//
// A dialect conversion: every compute op of the step is illegal, and the
// pattern (populateTrainToRuntimePatterns) replaces each by its runtime
// calls, which its RuntimeLoweringOpInterface model (RuntimeLowering.cpp)
// emits where the op stands, with the arena offsets of the static plan; its
// results become placeholders (ub.poison: the models read shapes and views
// through the IR as it was, which stays whole until the conversion ends).
// Then the region ops are inlined, so the calls follow program order (the
// order the memory analysis measured), and everything but the calls goes.
// Nothing is allocated at run time: the plan is the allocation. The step's
// body becomes the lowered function, taking the runtime context, split into
// parts of a bounded number of calls.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Analysis/Layout.h"
#include "trainmem/Analysis/MemoryAnalysis.h"
#include "trainmem/Analysis/MemoryPlan.h"
#include "trainmem/Conversion/Passes.h"
#include "trainmem/Conversion/RuntimeLowering.h"
#include "trainmem/Dialect/Train/IR/ShardModels.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/UB/IR/UBOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include "trainmem/Debug/Debug.h"

#define DEBUG_TYPE "convert-train-to-runtime"

namespace mlir {
namespace train {
#define GEN_PASS_DEF_CONVERTTRAINTORUNTIMEPASS
#include "trainmem/Conversion/Passes.h.inc"

namespace {

/// What can be lowered at all, checked over the schedule before the
/// conversion starts (the errors the models cannot give: an op with no
/// model, regions that must be materialized or unrolled first, element
/// types no kernel takes).
LogicalResult checkLowerable(Operation *op) {
  if (isa<BlockOp, YieldOp, func::ReturnOp>(op))
    return success();
  if (auto remat = dyn_cast<RematOp>(op))
    return remat.emitOpError("must be materialized before lowering (run "
                             "train-materialize-remat)");
  // A micro-batch loop lowers as a loop (prepareLoop checks it).
  if (isa<AccumulateOp>(op))
    return success();
  // Float tensors are f32, bf16 or f16; ids, counts and masks integers.
  for (Value value : llvm::concat<Value>(op->getOperands(), op->getResults()))
    if (auto type = dyn_cast<RankedTensorType>(value.getType()))
      if (!RuntimeCallBuilder::isRuntimeElementType(type.getElementType()))
        return op->emitOpError("has a ")
               << type.getElementType()
               << " tensor; the runtime's kernels take f32, bf16 and f16 "
                  "(and integer) tensors";
  if (!isa<RuntimeLoweringOpInterface>(op))
    return op->emitOpError("has no lowering to the trainmem runtime");
  return success();
}

/// An op with a runtime lowering: its calls, emitted where it stands by its
/// RuntimeLoweringOpInterface model, replace it; its results become
/// placeholders (no call reads them: the calls name arena offsets). A model
/// that fails has said why at the op; the op is still replaced, and the
/// pass fails after the conversion with the models' errors and no other.
struct RuntimeCallsPattern : public ConversionPattern {
  RuntimeCallsPattern(MLIRContext *context, RuntimeLoweringState &state)
      : ConversionPattern(MatchInterfaceOpTypeTag(),
                          TypeID::get<RuntimeLoweringOpInterface>(),
                          /*benefit=*/1, context),
        state(state) {}

  LogicalResult
  matchAndRewrite(Operation *op, ArrayRef<Value>,
                  ConversionPatternRewriter &rewriter) const override {
    Operation *before = op->getPrevNode();
    // Host memory with staging copies: the op's calls name the copies (its
    // operands and results at the host location: the in-place updated
    // state too); the state comes in before them, goes back after them.
    SmallVector<RuntimeLoweringState::StagingCopy> staging;
    if (state.stagingOf)
      staging = state.stagingOf(op);
    llvm::DenseMap<Value, int64_t> inCopy;
    for (const RuntimeLoweringState::StagingCopy &copy : staging)
      for (Value value :
           llvm::concat<Value>(op->getOperands(), op->getResults()))
        if (isa<RankedTensorType>(value.getType()) &&
            state.offsetOf(value) == copy.host)
          inCopy[value] = copy.device;
    RuntimeCallBuilder calls(rewriter, state.context, [&](Value value) {
      auto it = inCopy.find(value);
      return it != inCopy.end() ? it->second : state.offsetOf(value);
    });
    if (state.workspaceOf)
      calls.setWorkspace(state.workspaceOf(op));
    auto transfer = [&](bool in) {
      for (const RuntimeLoweringState::StagingCopy &copy : staging)
        if (in ? copy.in : copy.out)
          calls.emit(rt::transfer{.from = in ? copy.host : copy.device,
                                  .to = in ? copy.device : copy.host,
                                  .bytes = copy.bytes},
                     op->getLoc());
    };
    transfer(/*in=*/true);
    if (failed(cast<RuntimeLoweringOpInterface>(op).lowerToRuntime(calls)))
      state.failed = true;
    transfer(/*in=*/false);
    state.numCalls += calls.getNumCalls();
    // The op's calls, for cutting the step into parts in program order
    // later (the conversion visits ops in an order of its own).
    Operation *first =
        before ? before->getNextNode() : &op->getBlock()->front();
    if (first != op)
      state.callGroups.try_emplace(first, calls.getNumCalls());
    SmallVector<Value> placeholders;
    for (Type type : op->getResultTypes())
      placeholders.push_back(ub::PoisonOp::create(rewriter, op->getLoc(), type));
    rewriter.replaceOp(op, placeholders);
    return success();
  }

  RuntimeLoweringState &state;
};

} // namespace

void populateTrainToRuntimePatterns(RewritePatternSet &patterns,
                                    RuntimeLoweringState &state) {
  MLIRContext *context = patterns.getContext();
  patterns.add<RuntimeCallsPattern>(context, state);
}

namespace {

/// The markers of an argument or result the runner reads, typed as the
/// step has them: what the tensor is (train.param, train.optimizer_state,
/// train.input, train.grad with their names or #train.state, train.loss,
/// train.grad_norm) and how it starts (train.init).
constexpr StringLiteral kSlotMarkers[] = {
    kParamAttrName, kOptimizerStateAttrName, kInputAttrName,
    kGradAttrName,  kLossAttrName,           kGradNormAttrName,
    kInitAttrName,  kTensorSplitAttrName};

/// The step the pass lowers: the marked step or `function`, a function
/// with a body that takes and returns ranked tensors, not lowered already;
/// null after an error.
func::FuncOp findTensorStep(ModuleOp module, StringRef function) {
  Operation *symbol = function.empty()
                          ? findMarkedStep(module, "convert-train-to-runtime")
                          : module.lookupSymbol(function);
  if (function.empty() && !symbol)
    return {};
  std::string name =
      symbol ? SymbolTable::getSymbolName(symbol).str() : function.str();
  if (isLoweredStep(symbol)) {
    emitError(symbol->getLoc(), "convert-train-to-runtime: @")
        << name
        << " is already lowered (it takes the runtime's arena, not "
           "tensors); run this pass once, on the tensor-level step";
    return {};
  }
  auto step = dyn_cast_or_null<func::FuncOp>(symbol);
  if (!step || step.isExternal()) {
    emitError(module.getLoc(), "convert-train-to-runtime: no function @")
        << name << " with a body";
    return {};
  }
  for (auto [what, types] : {std::pair{"argument", step.getArgumentTypes()},
                             std::pair{"result", step.getResultTypes()}})
    for (auto [index, type] : llvm::enumerate(types))
      if (!isa<RankedTensorType>(type)) {
        emitError(step.getLoc(), "convert-train-to-runtime: ")
            << what << " " << index << " of @" << name << " is " << type
            << "; a tensor-level step takes and returns ranked "
            << "tensors";
        return {};
      }
  // A (data, tensor) grid with several data ranks needs train-zero to
  // average the gradients over them.
  for (unsigned i = 0, e = step.getNumArguments(); i < e; ++i) {
    auto split =
        step.getArgAttrOfType<TensorSplitAttr>(i, kTensorSplitAttrName);
    if (!split || step->hasAttr(kZeroAttrName))
      continue;
    auto grid = SymbolTable::lookupNearestSymbolFrom<shard::GridOp>(
        step, split.getGrid());
    if (grid && grid.getShape().size() == 2 && grid.getShape()[0] != 1) {
      emitError(step.getLoc(), "convert-train-to-runtime: @")
          << name << " is split on " << split.getGrid() << " of "
          << grid.getShape()[0] << " data ranks, but no train-zero averages "
          << "its gradients over them (run train-zero ranks="
          << grid.getShape()[0] << ")";
      return {};
    }
    break;
  }
  return step;
}

/// Where a function sharing a lowered step's state (its Hessian step) may
/// put what: its parameters and state where the step's lowering put them,
/// its other buffers around all of the step's state (which lives from step
/// to step).
struct SharedState {
  SmallVector<std::pair<unsigned, uint64_t>> pins;
  SmallVector<std::pair<uint64_t, uint64_t>> reserved;
};

/// A Hessian step's parameters and state live where its step's lowering
/// put them: (buffer, offset) for each, from the lowered step's slots; an
/// error when the step is not lowered yet or lacks one of them.
FailureOr<SharedState> sharedStatePins(func::FuncOp func,
                                       const FunctionMemory &memory) {
  SharedState shared;
  SmallVector<std::pair<unsigned, uint64_t>> &pins = shared.pins;
  auto hessian = func->getAttrOfType<HessianStepAttr>(kHessianStepAttrName);
  if (!hessian)
    return shared;
  Operation *step =
      SymbolTable::lookupNearestSymbolFrom(func, hessian.getStep());
  if (!step || !isLoweredStep(step))
    return emitError(func.getLoc(), "convert-train-to-runtime: @")
           << func.getSymName() << " refreshes the state of "
           << hessian.getStep()
           << ", which must be lowered first (its parameters and estimates "
              "live at that step's offsets)";
  auto slots = step->getAttrOfType<ArrayAttr>(kArgumentSlotsAttrName);
  // The step's parameters and state by their markers' values (a name, a
  // #train.state), read once.
  DenseMap<Attribute, uint64_t> offsetOf;
  for (Attribute slot : slots) {
    auto entry = cast<DictionaryAttr>(slot);
    Attribute key = entry.get(getSlotEntryName(kParamAttrName));
    if (!key)
      key = entry.get(getSlotEntryName(kOptimizerStateAttrName));
    if (!key)
      continue;
    if (auto at = entry.getAs<IntegerAttr>("offset"))
      offsetOf[key] = at.getInt();
    if (entry.get(getSlotEntryName(kMemorySpaceAttrName)))
      continue; // host memory: not in the device arena
    auto offset = entry.getAs<IntegerAttr>("offset");
    auto bytes = entry.getAs<IntegerAttr>("bytes");
    if (offset && bytes)
      shared.reserved.push_back({static_cast<uint64_t>(offset.getInt()),
                                 static_cast<uint64_t>(bytes.getInt())});
  }
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto marker = getStateMarker(func.getArgAttrDict(i));
    if (!marker)
      continue;
    Attribute key = marker->second;
    auto offset = offsetOf.find(key);
    if (offset == offsetOf.end())
      return emitError(func.getLoc(), "convert-train-to-runtime: argument ")
             << i << " of @" << func.getSymName() << " (" << key
             << ") is not an argument of " << hessian.getStep();
    const Buffer *buffer = memory.lookupBuffer(func.getArgument(i));
    if (buffer)
      pins.push_back(
          {static_cast<unsigned>(buffer - memory.getBuffers().data()),
           offset->second});
  }
  return shared;
}

/// The plan train-plan-arena wrote into the step, checked against the IR
/// as it is now; without one, planned here. Its offsets must stay below
/// bit 55, which a location keeps for the host arena (TMRT_HOST_MEMORY),
/// the bits above for the element type.
FailureOr<MemoryPlan> arenaPlan(func::FuncOp step,
                                const FunctionMemory &memory) {
  std::optional<MemoryPlan> plan;
  if (MemoryPlan::hasPlanInIR(step)) {
    FailureOr<MemoryPlan> written =
        MemoryPlan::readFromIR(memory, "convert-train-to-runtime");
    if (failed(written))
      return failure();
    plan = std::move(*written);
  } else {
    FailureOr<SharedState> shared = sharedStatePins(step, memory);
    if (failed(shared))
      return failure();
    plan.emplace(memory, shared->pins, shared->reserved);
  }
  for (auto [what, bytes] :
       {std::pair{"arena", plan->getArenaBytes()},
        std::pair{"host arena", plan->getHostArenaBytes()}})
    if (bytes >= static_cast<uint64_t>(RuntimeCallBuilder::kHostMemoryBit))
      return emitError(step.getLoc(), "convert-train-to-runtime: the ")
             << what << " plan of @" << step.getSymName() << " needs " << bytes
             << " B; the runtime's offsets are below 2^55 B";
  return std::move(*plan);
}

/// Where the host finds an argument or result of the step: its typed
/// markers, offset, bytes, shape (and a shard's whole shape), element type
/// and memory space. `inheritedSplit`: the #train.split of the parameter
/// whose optimizer state (shaped as it: master weights, moments) the
/// argument is, for the runner to start and checkpoint it by.
DictionaryAttr describeSlot(Value value, DictionaryAttr attrs,
                            const FunctionMemory &memory,
                            const MemoryPlan &plan,
                            TensorSplitAttr inheritedSplit = {}) {
  MLIRContext *context = value.getContext();
  Builder builder(context);
  const Buffer *buffer = memory.lookupBuffer(value);
  auto type = cast<RankedTensorType>(value.getType());
  NamedAttrList entry;
  // What the runner needs to know of the tensor: typed, as the step marks
  // it (without the dialect's prefix: the entry is the lowered step's).
  if (attrs)
    for (StringRef name : kSlotMarkers)
      if (Attribute typed = attrs.get(name))
        entry.append(getSlotEntryName(name), typed);
  if (inheritedSplit && !entry.get(getSlotEntryName(kTensorSplitAttrName)))
    entry.append(getSlotEntryName(kTensorSplitAttrName), inheritedSplit);
  entry.append("offset",
               builder.getI64IntegerAttr(static_cast<int64_t>(
                   plan.getOffset(buffer - memory.getBuffers().data()))));
  entry.append("bytes", builder.getI64IntegerAttr(
                            static_cast<int64_t>(getTensorBytes(type))));
  entry.append("shape", builder.getDenseI64ArrayAttr(type.getShape()));
  // A rank's shard: the whole tensor's shape, to start it from.
  if (auto full = attrs ? attrs.getAs<TypeAttr>(kShardOfAttrName) : TypeAttr())
    entry.append("full_shape",
                 builder.getDenseI64ArrayAttr(
                     cast<RankedTensorType>(full.getValue()).getShape()));
  entry.append("element_type", TypeAttr::get(type.getElementType()));
  // A tensor in host memory: its offset is in the host arena.
  if (buffer->host)
    entry.append(getSlotEntryName(kMemorySpaceAttrName),
                 SpaceAttr::get(context, MemorySpace::host));
  return entry.getDictionary(context);
}

/// Staging copies (updates on the device whose state lives in host memory
/// read and write device copies), and the count of ops that run in host
/// memory.
uint64_t setUpStaging(RuntimeLoweringState &state, const FunctionMemory &memory,
                      const MemoryPlan &plan) {
  uint64_t hostOps = 0;
  if (memory.getStaging().empty() && memory.getHostBytes() == 0)
    return hostOps;
  state.stagingOf = [&state, &memory, &plan](Operation *op) {
    SmallVector<RuntimeLoweringState::StagingCopy> copies;
    auto add = [&](const FunctionMemory::Staging &copy) {
      Value staged = copy.update->getOperand(copy.operand);
      copies.push_back({state.offsetOf(staged),
                        static_cast<int64_t>(plan.getOffset(copy.buffer)),
                        static_cast<int64_t>(getTensorBytes(staged.getType())),
                        /*in=*/copy.update == op, /*out=*/copy.last == op});
    };
    for (unsigned i = 0; i < op->getNumOperands(); ++i)
      if (const FunctionMemory::Staging *copy = memory.lookupStaging(op, i))
        add(*copy);
    for (unsigned index : memory.getStagingReadBy(op))
      add(memory.getStaging()[index]);
    return copies;
  };
  for (Operation *op : memory.getSchedule()) {
    if (auto space = op->getAttrOfType<SpaceAttr>(kMemorySpaceAttrName))
      hostOps += space.getSpace() == MemorySpace::host;
    // A loop's sums kept in host memory: each added there.
    if (auto loop = dyn_cast<AccumulateOp>(op))
      if (std::optional<ArrayRef<bool>> host = loop.getHostSums())
        hostOps += llvm::count(*host, true);
  }
  return hostOps;
}

/// The regions of `block` run in place: their bodies inlined, outermost
/// first, the calls are in program order; then only the calls, their
/// constants and the loops stay (no placeholder, yield or return).
void inlineRegions(Block &block) {
  SmallVector<Operation *> regionOps;
  for (Operation &op : block)
    if (isa<TransparentRegionOpInterface>(op))
      regionOps.push_back(&op);
  while (!regionOps.empty()) {
    Operation *regionOp = regionOps.pop_back_val();
    Block &body = regionOp->getRegion(0).front();
    for (Operation &op : body)
      if (isa<TransparentRegionOpInterface>(op))
        regionOps.push_back(&op);
    regionOp->getBlock()->getOperations().splice(regionOp->getIterator(),
                                                 body.getOperations());
    regionOp->dropAllUses();
    regionOp->erase();
  }
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block)))
    if (isa<ub::PoisonOp, YieldOp, func::ReturnOp>(op)) {
      op.dropAllUses();
      op.erase();
    }
}

/// The step's block as calls in program order, returning nothing.
void flattenConverted(Block &entry, Location loc) {
  inlineRegions(entry);
  OpBuilder atEnd = OpBuilder::atBlockEnd(&entry);
  func::ReturnOp::create(atEnd, loc);
}

/// Parts: LLVM's code generation takes time superlinear in the size of one
/// function (a step of 256 unrolled micro-batches took minutes to
/// JIT-compile as one), so the calls go into functions of about
/// callsPerPart calls each, which the step calls in turn, after its own
/// calls. An op's calls stay together: a part starts at the first op whose
/// calls come when the part before holds callsPerPart calls or more.
SmallVector<func::FuncOp> splitIntoParts(func::FuncOp lowered, StringRef name,
                                         const RuntimeLoweringState &state) {
  Location loc = lowered.getLoc();
  Block &body = lowered.front();
  Operation *terminator = body.getTerminator();
  SmallVector<Operation *> partStarts;
  uint64_t callsSoFar = 0, partStart = 0;
  for (Operation &op : body) {
    auto group = state.callGroups.find(&op);
    if (group == state.callGroups.end())
      continue;
    if (callsSoFar - partStart >= state.callsPerPart) {
      partStarts.push_back(&op);
      partStart = callsSoFar;
    }
    callsSoFar += group->second;
  }
  SmallVector<func::FuncOp> parts;
  for (auto [index, start] : llvm::enumerate(partStarts)) {
    Operation *end =
        index + 1 < partStarts.size() ? partStarts[index + 1] : terminator;
    OpBuilder partBuilder(lowered);
    auto part = func::FuncOp::create(
        partBuilder, loc, (name + ".part" + Twine(parts.size())).str(),
        lowered.getFunctionType());
    part.setPrivate();
    parts.push_back(part);
    Block *partEntry = part.addEntryBlock();
    partEntry->getOperations().splice(partEntry->end(), body.getOperations(),
                                      start->getIterator(), end->getIterator());
    // The function's arguments (the context; a loop's index) are the
    // part's.
    for (auto [arg, partArg] :
         llvm::zip(body.getArguments(), partEntry->getArguments()))
      arg.replaceUsesWithIf(partArg, [&](OpOperand &use) {
        return partEntry->getParentOp()->isAncestor(use.getOwner());
      });
    OpBuilder partEnd = OpBuilder::atBlockEnd(partEntry);
    func::ReturnOp::create(partEnd, loc);
  }
  OpBuilder callParts(terminator);
  for (func::FuncOp part : parts)
    func::CallOp::create(callParts, loc, part, body.getArguments());
  return parts;
}

/// Each rolled loop of `entry` (its body's calls, after the conversion)
/// becomes two functions next to `before`: @<name>.loop<k>.body, of the
/// context and the loop's index, cut into parts as the step is, and
/// @<name>.loop<k>, of the context, which runs it for each index (an
/// scf.for) and carries its steps (kLoopStepsAttrName); the step calls the
/// latter where the loop stood. Returns the functions made.
SmallVector<func::FuncOp> outlineLoops(Block &entry, func::FuncOp before,
                                       StringRef name, Value context,
                                       const RuntimeLoweringState &state) {
  SmallVector<func::FuncOp> made;
  auto ptrType = LLVM::LLVMPointerType::get(before.getContext());
  unsigned loops = 0;
  for (auto loop : llvm::make_early_inc_range(entry.getOps<AccumulateOp>())) {
    Location loc = loop.getLoc();
    Block &body = loop.getBody().front();
    inlineRegions(body);
    Value index = body.getArguments().back();
    std::string loopName = (name + ".loop" + Twine(loops++)).str();
    OpBuilder builder(before);
    auto bodyFunc = func::FuncOp::create(
        builder, loc, loopName + ".body",
        builder.getFunctionType({ptrType, builder.getI64Type()}, {}));
    bodyFunc.setPrivate();
    Block *bodyEntry = bodyFunc.addEntryBlock();
    bodyEntry->getOperations().splice(bodyEntry->end(), body.getOperations());
    context.replaceUsesWithIf(bodyEntry->getArgument(0), [&](OpOperand &use) {
      return bodyFunc->isAncestor(use.getOwner());
    });
    index.replaceAllUsesWith(bodyEntry->getArgument(1));
    OpBuilder atBodyEnd = OpBuilder::atBlockEnd(bodyEntry);
    func::ReturnOp::create(atBodyEnd, loc);
    auto loopFunc = func::FuncOp::create(
        builder, loc, loopName, builder.getFunctionType({ptrType}, {}));
    loopFunc.setPrivate();
    int64_t steps = loop.getStepsAttr().getInt();
    loopFunc->setAttr(kLoopStepsAttrName, builder.getI64IntegerAttr(steps));
    Block *loopEntry = loopFunc.addEntryBlock();
    OpBuilder atLoop = OpBuilder::atBlockEnd(loopEntry);
    auto bound = [&](int64_t value) -> Value {
      return arith::ConstantOp::create(atLoop, loc,
                                       atLoop.getI64IntegerAttr(value));
    };
    Value lower = bound(0), upper = bound(steps), step = bound(1);
    scf::ForOp::create(
        atLoop, loc, lower, upper, step, ValueRange{},
        [&](OpBuilder &inner, Location innerLoc, Value iv, ValueRange) {
          func::CallOp::create(inner, innerLoc, bodyFunc,
                               ValueRange{loopEntry->getArgument(0), iv});
          scf::YieldOp::create(inner, innerLoc);
        });
    func::ReturnOp::create(atLoop, loc);
    OpBuilder atStep(loop);
    func::CallOp::create(atStep, loc, loopFunc, ValueRange{context});
    loop->dropAllUses();
    loop.erase();
    made.push_back(bodyFunc);
    made.push_back(loopFunc);
    SmallVector<func::FuncOp> parts =
        splitIntoParts(bodyFunc, bodyFunc.getSymName(), state);
    made.append(parts.begin(), parts.end());
  }
  return made;
}

/// Declarations of the runtime functions `ops` call, at the top of
/// `module`.
void declareRuntimeFunctions(ModuleOp module, ArrayRef<func::FuncOp> ops) {
  OpBuilder builder = OpBuilder::atBlockBegin(module.getBody());
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
  for (func::FuncOp op : ops)
    op.walk(declare);
}

/// Collects the ops a builder inserts.
struct InsertedOps : public OpBuilder::Listener {
  void notifyOperationInserted(Operation *op, OpBuilder::InsertPoint) override {
    ops.insert(op);
    if (!first)
      first = op;
  }
  llvm::DenseSet<Operation *> ops;
  /// The first op inserted since it was last cleared.
  Operation *first = nullptr;
};

/// A rolled micro-batch loop (train.accumulate) is lowered as a loop, its
/// calls compiled once whatever its steps. Before the conversion this
/// appends the loop's index (an i64 argument) to its body and emits, in
/// the body, the calls each iteration makes besides its ops': first the
/// body's arguments where the plan put them (the micro-batch's rows of
/// each input from row index * rows, by tmrt_slice_rows; the index, which
/// the body's draws read; the micro-batch's share of the rows), then each
/// part summed into its accumulator where the part is complete (after the
/// op of the body that makes it: where the memory analysis reads it, and
/// train-unroll-accum sums it), copied at index 0 and added after. The
/// copy and the add are both called every iteration, the one that does not
/// apply on 0 elements: one call site each, so a run's kernel calls map to
/// their sites. The calls are train-unroll-accum's, at the same offsets,
/// so the loop computes what the unrolled step computes, to the bit.
/// Returns the index, or failure after an error at the loop.
FailureOr<BlockArgument> prepareLoop(AccumulateOp loop,
                                     RuntimeLoweringState &state,
                                     InsertedOps &inserted) {
  if (loop->getParentOfType<AccumulateOp>())
    return loop.emitOpError("inside another micro-batch loop cannot be "
                            "lowered as a loop (run train-unroll-accum)");
  if (loop.getGroups().value_or(1) > 1)
    return loop.emitOpError("summed in groups is lowered unrolled only "
                            "(run train-unroll-accum)");
  Block &body = loop.getBody().front();
  auto yield = cast<YieldOp>(body.getTerminator());
  for (auto [index, part] : llvm::enumerate(yield.getValues()))
    if (part.getType() != loop.getResult(index).getType())
      return loop.emitOpError("part ")
             << index << " is " << part.getType() << ", its sum "
             << loop.getResult(index).getType()
             << ": run train-plan-arena first (it casts the parts in the "
                "body to their sums' type)";
  BlockArgument indexArg = loop.getIndexArgument();
  BlockArgument shareArg = loop.getShareArgument();
  Location loc = loop.getLoc();
  OpBuilder builder(loop.getContext(), &inserted);
  builder.setInsertionPointToStart(&body);
  RuntimeCallBuilder calls(builder, state.context, state.offsetOf);
  // A group of calls, for cutting the body into parts.
  auto group = [&](llvm::function_ref<void()> emit) {
    inserted.first = nullptr;
    uint64_t before = calls.getNumCalls();
    emit();
    state.callGroups.try_emplace(inserted.first, calls.getNumCalls() - before);
  };
  Value iv = body.addArgument(builder.getI64Type(), loc);
  auto constant = [&](int64_t value) -> Value {
    return arith::ConstantOp::create(builder, loc,
                                     builder.getI64IntegerAttr(value));
  };
  int64_t micro = loop.getMicroBatchRows();
  int64_t rows =
      cast<RankedTensorType>(loop.getInputs().front().getType()).getDimSize(0);
  group([&] {
    Value first = arith::MulIOp::create(builder, loc, iv, constant(micro));
    for (auto [index, input] : llvm::enumerate(loop.getInputs())) {
      BlockArgument arg = body.getArgument(index);
      auto type = cast<RankedTensorType>(arg.getType());
      int64_t kind = isa<FloatType>(type.getElementType())
                         ? 0
                         : type.getElementTypeBitWidth();
      calls.emit(rt::slice_rows{.in = calls.offset(input),
                                .out = calls.offset(arg),
                                .offset = RuntimeValue{first},
                                .rows = micro,
                                .available = rows,
                                .row_elems = micro ? calls.elements(arg) / micro
                                                   : int64_t(0),
                                .kind = kind,
                                .padding = loop.getPadding()[index]},
                 loc);
    }
    if (indexArg)
      calls.emit(rt::fill_i64{.out = calls.offset(indexArg),
                              .n = 1,
                              .value = RuntimeValue{iv}},
                 loc);
    if (shareArg) {
      // AccumulateOp::getShare: the real rows (none past the batch) over
      // the batch's, in f64, rounded to the f32 the argument holds.
      Value real = arith::SubIOp::create(builder, loc, constant(rows), first);
      real = arith::MinSIOp::create(builder, loc, real, constant(micro));
      real = arith::MaxSIOp::create(builder, loc, real, constant(0));
      Type f64 = builder.getF64Type();
      Value share = arith::DivFOp::create(
          builder, loc, arith::SIToFPOp::create(builder, loc, f64, real),
          arith::ConstantOp::create(builder, loc,
                                    builder.getF64FloatAttr(double(rows))));
      share =
          arith::TruncFOp::create(builder, loc, builder.getF32Type(), share);
      share = arith::ExtFOp::create(builder, loc, f64, share);
      calls.emit(rt::fill{.out = calls.offset(shareArg),
                          .n = 1,
                          .value = RuntimeValue{share}},
                 loc);
    }
  });
  llvm::DenseMap<Operation *, Operation *> lastAfter;
  for (auto [index, part] : llvm::enumerate(yield.getValues())) {
    Operation *anchor = nullptr;
    if (Operation *def = part.getDefiningOp())
      anchor = body.findAncestorOpInBlock(*def);
    if (anchor) {
      Operation *last = lastAfter.lookup(anchor);
      builder.setInsertionPointAfter(last ? last : anchor);
    } else {
      builder.setInsertionPoint(yield);
    }
    Value sum = loop.getResult(index);
    group([&] {
      Value isFirst = arith::CmpIOp::create(
          builder, loc, arith::CmpIPredicate::eq, iv, constant(0));
      Value n = constant(calls.elements(part)), none = constant(0);
      Value copied = arith::SelectOp::create(builder, loc, isFirst, n, none);
      Value added = arith::SelectOp::create(builder, loc, isFirst, none, n);
      calls.emit(rt::convert{.in = calls.offset(part),
                             .out = calls.offset(sum),
                             .n = RuntimeValue{copied}},
                 loc);
      calls.emit(rt::add{.a = calls.offset(sum),
                         .b = calls.offset(part),
                         .out = calls.offset(sum),
                         .n = RuntimeValue{added}},
                 loc);
    });
    if (anchor)
      lastAfter[anchor] = &*std::prev(builder.getInsertionPoint());
  }
  return cast<BlockArgument>(iv);
}

struct ConvertTrainToRuntimePass
    : public impl::ConvertTrainToRuntimePassBase<ConvertTrainToRuntimePass> {
  using Base::Base;

  void getDependentDialects(DialectRegistry &registry) const override {
    Base::getDependentDialects(registry);
    registerRuntimeLoweringExternalModels(registry);
  }

  void runOnOperation() override;
  /// Replaces every op of `step` by its runtime calls, which take the
  /// runtime context, a new argument of the entry block (the tensor
  /// arguments go, unused by then); the regions' bodies then run in place.
  LogicalResult convertOps(func::FuncOp step, const FunctionMemory &memory,
                           RuntimeLoweringState &state);
  /// The step's attributes for the runner: arena sizes, host ops, slots,
  /// ranks.
  void describeLowered(func::FuncOp lowered, func::FuncOp step,
                       const MemoryPlan &plan, uint64_t hostOps,
                       ArrayRef<Attribute> arguments,
                       ArrayRef<Attribute> results);
};

LogicalResult
ConvertTrainToRuntimePass::convertOps(func::FuncOp step,
                                      const FunctionMemory &memory,
                                      RuntimeLoweringState &state) {
  // Everything the schedule holds must have a lowering.
  for (Operation *op : memory.getSchedule())
    if (failed(checkLowerable(op)))
      return failure();
  // The micro-batch loops' own calls, emitted first.
  InsertedOps inserted;
  SmallVector<AccumulateOp> loops;
  step.walk([&](AccumulateOp loop) { loops.push_back(loop); });
  for (AccumulateOp loop : loops)
    if (failed(prepareLoop(loop, state, inserted)))
      return failure();
  // Illegal: the step's ops but its regions' structure (transparent region
  // ops, their yields, the return, which flattenConverted removes; the
  // loops, which outlineLoops makes functions of) and the loops' calls.
  llvm::DenseSet<Operation *> computeOps;
  step.walk([&](Operation *op) {
    if (!isa<func::FuncOp, func::ReturnOp, YieldOp,
             TransparentRegionOpInterface, AccumulateOp>(op) &&
        !inserted.ops.contains(op))
      computeOps.insert(op);
  });
  ConversionTarget target(getContext());
  target.markUnknownOpDynamicallyLegal(
      [&](Operation *op) { return !computeOps.contains(op); });
  RewritePatternSet patterns(&getContext());
  populateTrainToRuntimePatterns(patterns, state);
  if (failed(applyPartialConversion(step, target, std::move(patterns))) ||
      state.failed)
    return failure();
  numCalls += state.numCalls;
  return success();
}

void ConvertTrainToRuntimePass::describeLowered(func::FuncOp lowered,
                                                func::FuncOp step,
                                                const MemoryPlan &plan,
                                                uint64_t hostOps,
                                                ArrayRef<Attribute> arguments,
                                                ArrayRef<Attribute> results) {
  Builder builder(&getContext());
  lowered->setAttr(
      kArenaBytesAttrName,
      builder.getI64IntegerAttr(static_cast<int64_t>(plan.getArenaBytes())));
  if (plan.getHostArenaBytes())
    lowered->setAttr(kHostArenaBytesAttrName,
                     builder.getI64IntegerAttr(
                         static_cast<int64_t>(plan.getHostArenaBytes())));
  if (hostOps)
    lowered->setAttr(kHostOpsAttrName,
                     builder.getI64IntegerAttr(static_cast<int64_t>(hostOps)));
  lowered->setAttr(kArgumentSlotsAttrName, builder.getArrayAttr(arguments));
  lowered->setAttr(kResultSlotsAttrName, builder.getArrayAttr(results));
  // A Hessian step stays one (the runner calls it apart from the step).
  if (Attribute hessian = step->getAttr(kHessianStepAttrName))
    lowered->setAttr(kHessianStepAttrName, hessian);
  // The ranks it runs on: its collectives' grid's (train-zero's data
  // ranks, times the tensor-parallel groups' on a (data, tensor) grid, or
  // a pipeline's stages).
  int64_t ranks = 0;
  if (auto zero = step->getAttrOfType<ZeroAttr>(kZeroAttrName))
    ranks = zero.getRanks();
  if (auto pipeline =
          step->getAttrOfType<PipelineStageAttr>(kPipelineStageAttrName))
    ranks = std::max<int64_t>(ranks, 1) * pipeline.getStages();
  step.walk([&](Operation *op) {
    if (std::optional<ProcessGroup> group = getProcessGroup(op))
      ranks = std::max(ranks, group->gridRanks);
  });
  if (ranks > 0)
    lowered->setAttr(kLoweredRanksAttrName, builder.getI64IntegerAttr(ranks));
}

void ConvertTrainToRuntimePass::runOnOperation() {
  ModuleOp module = getOperation();
  func::FuncOp step = findTensorStep(module, function);
  if (!step)
    return signalPassFailure();
  std::string name = step.getSymName().str();
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
  FailureOr<MemoryPlan> plan = arenaPlan(step, memory);
  if (failed(plan))
    return signalPassFailure();

  SmallVector<Attribute> arguments, results;
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    // State of a split parameter, shaped as its part (not 8-bit blocks).
    TensorSplitAttr inherited;
    if (auto state =
            step.getArgAttrOfType<StateAttr>(i, kOptimizerStateAttrName);
        state && state.getPart() == StatePart::value)
      inherited = getTensorSplit(step, step.getArgument(i));
    arguments.push_back(describeSlot(
        step.getArgument(i), step.getArgAttrDict(i), memory, *plan, inherited));
  }
  auto ret = cast<func::ReturnOp>(step.front().getTerminator());
  for (auto [i, value] : llvm::enumerate(ret.getOperands()))
    results.push_back(
        describeSlot(value, step.getResultAttrDict(i), memory, *plan));

  auto ptrType = LLVM::LLVMPointerType::get(&getContext());
  Block &entry = step.front();
  unsigned numTensorArgs = entry.getNumArguments();
  RuntimeLoweringState state;
  state.context = entry.addArgument(ptrType, step.getLoc());
  state.offsetOf = [&](Value value) {
    const Buffer *buffer = memory.lookupBuffer(value);
    assert(buffer && "every tensor has a buffer");
    return static_cast<int64_t>(
               plan->getOffset(buffer - memory.getBuffers().data())) |
           (buffer->host ? RuntimeCallBuilder::kHostMemoryBit : 0);
  };
  state.workspaceOf = [&](Operation *op) -> int64_t {
    std::optional<unsigned> workspace = memory.lookupWorkspace(op);
    return workspace ? static_cast<int64_t>(plan->getOffset(*workspace)) : -1;
  };
  uint64_t hostOps = setUpStaging(state, memory, *plan);
  if (failed(convertOps(step, memory, state)))
    return signalPassFailure();
  flattenConverted(entry, step.getLoc());
  SmallVector<func::FuncOp> loopFunctions =
      outlineLoops(entry, step, name, state.context, state);
  entry.eraseArguments(0, numTensorArgs);

  // The lowered step takes the body, built next to the original and
  // swapped in.
  OpBuilder builder(step);
  auto lowered = func::FuncOp::create(builder, step.getLoc(), name + ".lowered",
                                      builder.getFunctionType({ptrType}, {}));
  lowered.getBody().takeBody(step.getBody());
  SmallVector<func::FuncOp> parts = splitIntoParts(lowered, name, state);
  LLVM_DEBUG(llvm::dbgs() << "convert-train-to-runtime: @" << name << ": arena "
                          << plan->getArenaBytes() << " B, host arena "
                          << plan->getHostArenaBytes() << " B, " << hostOps
                          << " ops on the host, " << parts.size() << " parts, "
                          << loopFunctions.size() << " loop bodies\n");
  describeLowered(lowered, step, *plan, hostOps, arguments, results);
  step.erase();
  // The collectives are runtime calls now: their grids go (a grid still
  // named by another op stays; the slots' #train.split name theirs, which
  // the runner reads as dimensions, not as a symbol).
  for (auto grid :
       llvm::make_early_inc_range(module.getBody()->getOps<shard::GridOp>())) {
    std::optional<SymbolTable::UseRange> uses =
        SymbolTable::getSymbolUses(grid, module);
    if (uses && llvm::all_of(*uses, [&](const SymbolTable::SymbolUse &use) {
          return use.getUser() == lowered.getOperation();
        }))
      grid.erase();
  }
  lowered.setSymName(name);
  parts.insert(parts.begin(), lowered);
  parts.append(loopFunctions.begin(), loopFunctions.end());
  declareRuntimeFunctions(module, parts);
}

} // namespace
} // namespace train
} // namespace mlir
