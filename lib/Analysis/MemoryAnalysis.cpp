//===- MemoryAnalysis.cpp - live bytes of a training step -----------------===//
//
// Buffers: every tensor value that owns storage, merged with the values that
// alias it: views (transposes, reshapes of row-major values; Layout.h) alias
// their source, block results the
// values their block yields, clipped gradients the gradients they scale in
// place, optimizer results the state they update in place, and step results
// the argument holding the same state. A buffer is live from its first
// definition to its last use; at each op its inputs and outputs are live
// together. Nothing about model shapes is assumed: everything comes from
// the types and the uses in the IR.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Analysis/MemoryAnalysis.h"
#include "trainmem/Analysis/Layout.h"
#include "trainmem/Dialect/Train/IR/ShardModels.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"

#include "llvm/ADT/EquivalenceClasses.h"
#include "llvm/ADT/SetVector.h"

#include <functional>

#include <map>
#include <set>

using namespace mlir;
using namespace mlir::train;

StringRef mlir::train::stringifyMemoryCategory(MemoryCategory category) {
  switch (category) {
  case MemoryCategory::Weights:
    return "weights";
  case MemoryCategory::Gradients:
    return "gradients";
  case MemoryCategory::Optimizer:
    return "optimizer";
  case MemoryCategory::Activations:
    return "activations";
  case MemoryCategory::Temporaries:
    return "temporaries";
  case MemoryCategory::Gathered:
    return "gathered";
  }
  llvm_unreachable("unknown memory category");
}

namespace {

/// Union-find over the values' definition indices; the representative is
/// the value defined first (the smaller index).
bool isTensor(Value value) { return isa<RankedTensorType>(value.getType()); }

} // namespace

FunctionMemory::FunctionMemory(func::FuncOp func) : func(func) {
  if (func.isExternal())
    return;
  buildSchedule(func.front(), Phase::Forward);
  buildBuffers();
  classify();
  placeInMemory();
  addWorkspaces();
  computeLiveness();
  summarize();
}

void FunctionMemory::noteOverflow(Operation *op, StringRef quantity) {
  if (!overflow)
    overflow = Overflow{op ? op : func.getOperation(), quantity.str()};
}

uint64_t FunctionMemory::add(uint64_t a, uint64_t b, Operation *op,
                             StringRef quantity) {
  uint64_t sum = addCount(a, b);
  if (sum == kCountOverflow)
    noteOverflow(op, quantity);
  return sum;
}

LogicalResult FunctionMemory::checkCounts(StringRef passName) const {
  if (unmodeled)
    return emitError(unmodeled->op->getLoc())
           << passName << ": " << unmodeled->message;
  if (!overflow)
    return success();
  return emitError(overflow->op->getLoc())
         << passName << ": the " << overflow->quantity << " of @"
         << getFunction().getSymName() << " overflow 64 bits at this '"
         << overflow->op->getName() << "' (shapes too large to count)";
}

Operation *FunctionMemory::getPeakOp() const {
  return peakPoint == 0 ? nullptr : schedule[peakPoint - 1];
}

const Buffer *FunctionMemory::lookupBuffer(Value value) const {
  auto it = valueIndex.find(value);
  return it == valueIndex.end() ? nullptr : &buffers[bufferOfValue[it->second]];
}

void FunctionMemory::buildSchedule(Block &block, Phase phase) {
  // Ops outside any block take the phase of the block before them.
  for (Operation &op : block) {
    Phase opPhase = phase;
    if (auto blockOp = dyn_cast<BlockOp>(op))
      opPhase = blockOp.getBackward() ? Phase::Backward
                : blockOp.getKind() == BlockKind::optimizer
                    ? Phase::Optimizer
                    : Phase::Forward;
    schedule.push_back(&op);
    phases.push_back(opPhase);
    pointOf[&op] = schedule.size();
    if (isa<BlockOp>(op)) {
      buildSchedule(op.getRegion(0).front(), opPhase);
      if (block.getParentOp() == func ||
          isa<AccumulateOp>(block.getParentOp()))
        phase = opPhase;
    } else if (isa<RematOp, AccumulateOp>(op)) {
      // A loop summed in groups holds a group's sums next to the total:
      // one more set of accumulators that one iteration does not show.
      if (auto loop = dyn_cast<AccumulateOp>(op);
          loop && loop.getGroups().value_or(1) > 1 && !unmodeled)
        unmodeled = Unmodeled{
            &op, "a train.accumulate summed in groups is analyzed unrolled "
                 "(its groups' partial sums are ops then): run "
                 "train-unroll-accum first"};
      // A remat region runs in place in the phase around it; an
      // accumulation loop's iterations all look like its body, so one
      // iteration is the schedule.
      buildSchedule(op.getRegion(0).front(), opPhase);
    }
  }
}

SmallVector<Value> FunctionMemory::numberValues() {
  // Definition order: arguments first, then op results in program order.
  SmallVector<Value> values;
  auto define = [&](Value value) {
    valueIndex[value] = values.size();
    values.push_back(value);
  };
  for (BlockArgument arg : func.getArguments())
    if (isTensor(arg))
      define(arg);
  for (Operation *op : schedule) {
    // A loop's micro-batch arguments are written where the loop starts.
    if (auto loop = dyn_cast<AccumulateOp>(op))
      for (BlockArgument arg : loop.getBody().front().getArguments())
        define(arg);
    for (Value result : op->getResults())
      if (isTensor(result))
        define(result);
  }
  return values;
}

unsigned FunctionMemory::lastRead(Value value) const {
  unsigned last = 0;
  for (OpOperand &use : value.getUses()) {
    Operation *user = use.getOwner();
    last = std::max(last, pointOf.lookup(user));
    if (auto view = dyn_cast<ViewLikeOpInterface>(user);
        view && isAliasingView(user))
      last = std::max(last, lastRead(view.getViewDest()));
    else if (isa<YieldOp>(user))
      last = std::max(last, lastRead(user->getParentOp()->getResult(
                                use.getOperandNumber())));
  }
  return last;
}

/// The value whose memory `value` names: through aliasing views to their
/// source and through block results to what their blocks yield. An op that
/// writes over a view writes over that memory, which every other view of
/// it, and the value itself, still read.
static Value viewedMemory(Value value) {
  while (true) {
    Value resolved = resolveRegionResult(value);
    Operation *def = resolved.getDefiningOp();
    auto view = dyn_cast_or_null<ViewLikeOpInterface>(def);
    if (!view || !isAliasingView(def) || view.getViewDest() != resolved)
      return resolved;
    value = view.getViewSource();
  }
}

void FunctionMemory::findAliases(llvm::EquivalenceClasses<unsigned> &aliases,
                                 unsigned numValues) {
  for (unsigned i = 0; i < numValues; ++i)
    aliases.insert(i);
  auto aliasOf = [&](Value value) {
    return aliases.getLeaderValue(valueIndex.lookup(value));
  };
  llvm::DenseMap<std::pair<Attribute, Attribute>, Value> stateArgs;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (auto marker = getStateMarker(func.getArgAttrDict(i)))
      stateArgs[*marker] = func.getArgument(i);
  auto unite = [&](Value a, Value b) {
    auto ia = valueIndex.find(a), ib = valueIndex.find(b);
    if (ia != valueIndex.end() && ib != valueIndex.end())
      aliases.unionSets(ia->second, ib->second);
  };
  for (Operation *op : schedule) {
    if (auto view = dyn_cast<ViewLikeOpInterface>(op)) {
      if (isAliasingView(op))
        unite(view.getViewSource(), view.getViewDest());
    } else if (auto region = dyn_cast<TransparentRegionOpInterface>(op)) {
      for (auto [result, yielded] :
           llvm::zip(op->getResults(), region.getYieldedValues()))
        if (isTensor(result))
          unite(yielded, result);
    } else if (auto tied = dyn_cast<TiedOpInterface>(op)) {
      // Optimizer updates and clipping write their results over the
      // operands they are tied to, in place only where nothing reads the
      // old value after them; otherwise a result gets memory of its own.
      unsigned point = pointOf.lookup(op);
      for (OpResult result : op->getResults())
        if (std::optional<unsigned> operand =
                tied.getTiedResultOperandIndex(result.getResultNumber()))
          if (lastRead(viewedMemory(op->getOperand(*operand))) <= point)
            unite(op->getOperand(*operand), result);
    } else if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      // A step result that carries a state is written into that state's
      // argument, when nothing reads the argument after the result exists.
      for (auto [index, value] : llvm::enumerate(ret.getOperands()))
        if (auto marker = getStateMarker(func.getResultAttrDict(index))) {
          Value arg = stateArgs.lookup(*marker);
          if (!arg || !isTensor(value) || aliasOf(arg) == aliasOf(value))
            continue;
          // Where the value is really written: through block results to
          // the op that defines it.
          Operation *def = resolveRegionResult(value).getDefiningOp();
          unsigned written = def ? pointOf.lookup(def) : 0;
          if (lastRead(arg) <= written)
            unite(arg, value);
        }
    }
  }
}

unsigned FunctionMemory::readPoint(Value value, Operation *user) const {
  unsigned point = pointOf.lookup(user);
  // An asynchronous copy reads its input until its wait.
  if (auto transfer = dyn_cast<TransferOp>(user))
    if (Operation *wait = transfer.getWait())
      point = std::max(point, pointOf.lookup(wait));
  // A micro-batch loop sums each part where it is complete (after the op
  // of its body that makes it: train-unroll-accum places the sum there),
  // not at the body's end.
  if (isa<YieldOp>(user) && isa<AccumulateOp>(user->getParentOp()))
    if (Operation *def = value.getDefiningOp())
      if (Operation *made = user->getBlock()->findAncestorOpInBlock(*def))
        point = pointOf.lookup(made);
  // What a loop reads from outside (its inputs, sliced for each
  // micro-batch, and the values its body uses) is read again by every
  // iteration: live to the end of the body.
  for (Operation *loop = user; loop; loop = loop->getParentOp()) {
    auto accumulate = dyn_cast<AccumulateOp>(loop);
    if (!accumulate)
      continue;
    if (Operation *def = value.getDefiningOp();
        def && accumulate->isProperAncestor(def))
      break;
    if (auto arg = dyn_cast<BlockArgument>(value);
        arg && accumulate->isAncestor(arg.getOwner()->getParentOp()))
      break;
    point = std::max(
        point, pointOf.lookup(accumulate.getBody().front().getTerminator()));
  }
  return point;
}

/// A new buffer for the memory `owner` names, not yet live anywhere.
Buffer FunctionMemory::newBuffer(Value owner, unsigned returnPoint) {
  Buffer buffer;
  buffer.owner = owner;
  buffer.bytes = getTensorBytes(owner.getType());
  // Live bytes are summed in signed 64 bits: a tensor that alone reaches
  // 2^62 bytes cannot be planned or summed.
  if (buffer.bytes >= (uint64_t(1) << 62)) {
    auto arg = dyn_cast<BlockArgument>(owner);
    noteOverflow(owner.getDefiningOp(),
                 arg ? "bytes of argument #" +
                           std::to_string(arg.getArgNumber())
                     : std::string("bytes of its result"));
  }
  buffer.firstPoint = returnPoint;
  buffer.lastPoint = 0;
  return buffer;
}

void FunctionMemory::buildBuffers() {
  SmallVector<Value> values = numberValues();
  // Values that name one memory, by definition number.
  llvm::EquivalenceClasses<unsigned> aliases;
  findAliases(aliases, values.size());
  // A block result is only a name for what the block yields: the memory is
  // written where the yielded value is defined.
  auto isBlockResult = [](Value value) {
    return isTransparentRegionOp(value.getDefiningOp());
  };
  unsigned returnPoint = schedule.size();
  bufferOfValue.assign(values.size(), 0);
  std::vector<unsigned> bufferOfRoot(values.size(), ~0u);
  for (auto [valueNumber, value] : llvm::enumerate(values)) {
    unsigned root = aliases.getLeaderValue(valueNumber);
    unsigned &index = bufferOfRoot[root];
    if (index == ~0u) {
      index = buffers.size();
      buffers.push_back(newBuffer(values[root], returnPoint));
    }
    bufferOfValue[valueNumber] = index;
    Buffer &buffer = buffers[index];
    if (!isBlockResult(value)) {
      Operation *def = value.getDefiningOp();
      if (auto arg = dyn_cast<BlockArgument>(value))
        if (arg.getOwner()->getParentOp() != func)
          def = arg.getOwner()->getParentOp();
      unsigned point = def ? pointOf.lookup(def) : 0;
      if (point < buffer.firstPoint) {
        buffer.firstPoint = point;
        buffer.owner = value;
      }
      buffer.lastPoint = std::max(buffer.lastPoint, point);
    }
    for (Operation *user : value.getUsers())
      buffer.lastPoint = std::max(buffer.lastPoint, readPoint(value, user));
    // Weights and optimizer state persist from step to step.
    if (auto arg = dyn_cast<BlockArgument>(value))
      if (arg.getOwner()->getParentOp() == func &&
          (func.getArgAttr(arg.getArgNumber(), kParamAttrName) ||
           func.getArgAttr(arg.getArgNumber(), kOptimizerStateAttrName)))
        buffer.lastPoint = returnPoint;
  }
}

SmallVector<Value> FunctionMemory::finalGradients() {
  SmallVector<Value> finals;
  for (Operation *op : schedule) {
    if (auto update = dyn_cast<OptimizerUpdateOpInterface>(op))
      finals.push_back(update.getGradient());
    else if (auto ret = dyn_cast<func::ReturnOp>(op))
      for (auto [index, value] : llvm::enumerate(ret.getOperands()))
        if (func.getResultAttr(index, kGradAttrName))
          finals.push_back(value);
  }
  return finals;
}

std::vector<bool>
FunctionMemory::gradientBuffers(ArrayRef<Value> finals) const {
  // Back from the final gradients through sums of partial gradients,
  // block results, in-place updates (a clipped gradient is the gradient it
  // was) and aliasing views.
  llvm::SetVector<Value> gradients;
  SmallVector<Value> worklist(finals.begin(), finals.end());
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    if (!gradients.insert(value))
      continue;
    Operation *def = value.getDefiningOp();
    if (!def)
      continue;
    if (def->hasTrait<SumsOperands>()) {
      llvm::append_range(worklist, def->getOperands());
    } else if (auto region = dyn_cast<TransparentRegionOpInterface>(def)) {
      worklist.push_back(region.getYieldedValue(
          cast<OpResult>(value).getResultNumber()));
    } else if (auto tied = dyn_cast<TiedOpInterface>(def)) {
      if (std::optional<unsigned> operand = tied.getTiedResultOperandIndex(
              cast<OpResult>(value).getResultNumber()))
        worklist.push_back(def->getOperand(*operand));
    } else if (auto view = dyn_cast<ViewLikeOpInterface>(def)) {
      if (isAliasingView(def))
        worklist.push_back(view.getViewSource());
    }
  }
  std::vector<bool> isGradient(buffers.size(), false);
  for (Value value : gradients)
    if (const Buffer *buffer = lookupBuffer(value))
      isGradient[buffer - buffers.data()] = true;
  return isGradient;
}

void FunctionMemory::findBackwardReaders(
    std::vector<Operation *> &lastBackwardUser,
    std::vector<bool> &readByNormGrad) const {
  lastBackwardUser.assign(buffers.size(), nullptr);
  readByNormGrad.assign(buffers.size(), false);
  // Over the schedule in order: each backward reader is later than the
  // last one seen (ops outside the schedule are in no phase's backward).
  for (auto [position, user] : llvm::enumerate(schedule)) {
    if (phases[position] != Phase::Backward || isa<YieldOp>(user))
      continue;
    auto normGrad = dyn_cast<NormGradOpInterface>(user);
    for (OpOperand &use : user->getOpOperands()) {
      auto it = valueIndex.find(use.get());
      if (it == valueIndex.end())
        continue;
      unsigned index = bufferOfValue[it->second];
      lastBackwardUser[index] = user;
      // A norm's backward reads its input: that is what the norm keeps.
      if (normGrad && &use == &normGrad.getNormInputOperand())
        readByNormGrad[index] = true;
    }
  }
  // An activation moved to host memory (train-offload-activations) is
  // saved for what reads its copy back: the host copy is the activation.
  for (Operation *op : schedule) {
    auto reload = dyn_cast<TransferOp>(op);
    if (!reload || reload.toHost())
      continue;
    const Buffer *copy = lookupBuffer(reload.getResult());
    const Buffer *host = lookupBuffer(reload.getInput());
    if (!copy || !host)
      continue;
    unsigned from = copy - buffers.data(), to = host - buffers.data();
    lastBackwardUser[to] = lastBackwardUser[from];
    readByNormGrad[to] = readByNormGrad[from];
  }
}

bool FunctionMemory::isGathered(unsigned index) {
  Operation *def = buffers[index].owner.getDefiningOp();
  if (!def)
    return false;
  // A parameter gathered from the ranks' shards (a collective whose
  // operand is a parameter argument).
  if (isa<CommunicationOpInterface>(def) &&
      llvm::any_of(def->getOperands(), [&](Value operand) {
        auto param = dyn_cast<BlockArgument>(operand);
        return param && param.getOwner()->getParentOp() == func &&
               func.getArgAttr(param.getArgNumber(), kParamAttrName);
      }))
    return true;
  // ... and what is made of it alone (its padding sliced off): the
  // gathered parameter still.
  if (def->getNumOperands() == 1) {
    const Buffer *source = lookupBuffer(def->getOperand(0));
    if (source && static_cast<size_t>(source - buffers.data()) < index &&
        source->category == MemoryCategory::Gathered)
      return true;
  }
  return false;
}

void FunctionMemory::classifyActivation(Buffer &buffer, Operation *reader,
                                        bool readByNorm) {
  buffer.category = MemoryCategory::Activations;
  // Data arguments (tokens, the step counter) exist whatever the layers
  // do: no layer saves them.
  if (!buffer.owner.getDefiningOp())
    return;
  auto block = reader->getParentOfType<BlockOp>();
  if (!block)
    return;
  if (IntegerAttr layer = block.getLayerAttr())
    buffer.layer = layer.getInt();
  if (readByNorm)
    buffer.savedFor = SavedFor::Norm;
  else if (block.getKind() == BlockKind::attention)
    buffer.savedFor = SavedFor::Attention;
  else if (block.getKind() == BlockKind::mlp)
    buffer.savedFor = SavedFor::MLP;
}

/// How many times `op` runs per step: the product of the micro-batch
/// loops around it.
static uint64_t tripsOf(Operation *op) {
  uint64_t trips = 1;
  for (Operation *parent = op->getParentOp(); parent;
       parent = parent->getParentOp())
    if (auto loop = dyn_cast<AccumulateOp>(parent))
      trips =
          mulCount(trips, static_cast<uint64_t>(loop.getStepsAttr().getInt()));
  return trips;
}

/// A copy back to the device of what the step moved to host memory: the
/// device holds it from there to its last reader only (a temporary).
static bool isReload(Operation *op) {
  auto transfer = dyn_cast_or_null<TransferOp>(op);
  return transfer && !transfer.toHost();
}

Phase FunctionMemory::definingPhase(Value value) const {
  Operation *def = value.getDefiningOp();
  // What a pipeline stage receives is of the phase that first reads it (an
  // activation from the stage before, a gradient from the one after).
  if (isa_and_nonnull<PipelineExchangeOp>(def)) {
    Operation *first = nullptr;
    for (Operation *user : value.getUsers())
      if (getPoint(user) && (!first || getPoint(user) < getPoint(first)))
        first = user;
    if (first)
      return getPhase(first);
  }
  return getPhase(def);
}

void FunctionMemory::classify() {
  // Gradients: what flows into an optimizer's gradient operand or out as a
  // step's gradient result, through sums of partial gradients.
  SmallVector<Value> finals = finalGradients();
  std::vector<bool> isGradient = gradientBuffers(finals);
  // Per buffer: its last backward reader, and whether a norm keeps it.
  std::vector<Operation *> lastBackwardUser;
  std::vector<bool> readByNormGrad;
  findBackwardReaders(lastBackwardUser, readByNormGrad);

  for (auto [index, buffer] : llvm::enumerate(buffers)) {
    auto arg = dyn_cast<BlockArgument>(buffer.owner);
    if (arg && arg.getOwner()->getParentOp() != func)
      arg = BlockArgument();
    Operation *def = buffer.owner.getDefiningOp();
    if (arg && func.getArgAttr(arg.getArgNumber(), kParamAttrName))
      buffer.category = MemoryCategory::Weights;
    else if (arg &&
             func.getArgAttr(arg.getArgNumber(), kOptimizerStateAttrName))
      buffer.category = MemoryCategory::Optimizer;
    else if (isGradient[index])
      buffer.category = MemoryCategory::Gradients;
    else if (isGathered(index))
      buffer.category = MemoryCategory::Gathered;
    else if ((def && definingPhase(buffer.owner) != Phase::Forward) ||
             !lastBackwardUser[index] || isReload(def))
      buffer.category = MemoryCategory::Temporaries;
    else
      classifyActivation(buffer, lastBackwardUser[index],
                         readByNormGrad[index]);
  }

  // The complete gradients' bytes on the device: placeInMemory takes out
  // those kept on the host (a loop's host_sums).
  llvm::DenseSet<unsigned> finalBuffers;
  for (Value value : finals)
    if (const Buffer *buffer = lookupBuffer(value))
      if (finalBuffers.insert(buffer - buffers.data()).second) {
        finalGradientBuffers.push_back(buffer - buffers.data());
        uint64_t &gradientBytes =
            totals[static_cast<unsigned>(MemoryCategory::Gradients)];
        gradientBytes = add(gradientBytes, buffer->bytes,
                            value.getDefiningOp(), "gradient bytes");
      }
}

SmallVector<std::pair<int64_t, int64_t>>
FunctionMemory::getUnitsLiveAt(unsigned point) const {
  std::set<std::pair<int64_t, int64_t>> units;
  Block &body = func::FuncOp(func).getBody().front();
  for (const Buffer &buffer : buffers) {
    if (buffer.category != MemoryCategory::Activations || buffer.host ||
        buffer.firstPoint > point || buffer.lastPoint < point)
      continue;
    Operation *def = buffer.owner.getDefiningOp();
    Operation *top = def ? body.findAncestorOpInBlock(*def) : nullptr;
    auto microBatch =
        top ? top->getAttrOfType<IntegerAttr>(kMicroBatchAttrName) : nullptr;
    if (!microBatch)
      continue;
    auto chunk = top->getAttrOfType<IntegerAttr>(kChunkAttrName);
    units.insert({chunk ? chunk.getInt() : 0, microBatch.getInt()});
  }
  return SmallVector<std::pair<int64_t, int64_t>>(units.begin(), units.end());
}

uint64_t FunctionMemory::getHostBytes() const {
  uint64_t bytes = 0;
  for (uint64_t b : hostTotals)
    bytes = addCount(bytes, b);
  return bytes;
}

static bool runsOnHost(Operation *op) {
  auto space = op->getAttrOfType<SpaceAttr>(kMemorySpaceAttrName);
  return space && space.getSpace() == MemorySpace::host;
}

bool FunctionMemory::markHostBuffers() {
  auto isHostArg = [&](Value value) {
    auto arg = dyn_cast<BlockArgument>(value);
    if (!arg || arg.getOwner()->getParentOp() != func)
      return false;
    auto space = func.getArgAttrOfType<SpaceAttr>(arg.getArgNumber(),
                                                  kMemorySpaceAttrName);
    return space && space.getSpace() == MemorySpace::host;
  };
  // A micro-batch loop's sums kept on the host (host_sums).
  auto isHostSum = [](Value value) {
    auto result = dyn_cast<OpResult>(value);
    auto loop = result ? dyn_cast<AccumulateOp>(result.getOwner()) : nullptr;
    std::optional<ArrayRef<bool>> host =
        loop ? loop.getHostSums() : std::nullopt;
    return host && (*host)[result.getResultNumber()];
  };
  // What an op on the host makes lives there (the updates', clipping's
  // and unscaling's results), but for the cast of a refreshed 16-bit
  // weight, which writes the device's weight.
  auto madeOnHost = [](Operation *def) {
    return def && runsOnHost(def) && !isa<CastOp>(def);
  };
  bool any = false;
  for (Buffer &buffer : buffers) {
    Operation *def = buffer.owner.getDefiningOp();
    auto transfer = dyn_cast_or_null<TransferOp>(def);
    if (isHostArg(buffer.owner) || (transfer && transfer.toHost()) ||
        madeOnHost(def) || isHostSum(buffer.owner)) {
      buffer.host = true;
      any = true;
    }
  }
  return any;
}

/// An update on the host: the gradient goes there, the new parameter comes
/// back (its device copy: a 16-bit weight where the step casts one from
/// it).
void FunctionMemory::countHostUpdate(OptimizerUpdateOpInterface update) {
  Operation *op = update.getOperation();
  // A gradient summed on the host (host_sums) is there already: its parts
  // crossed, counted with the loop.
  if (const Buffer *grad = lookupBuffer(update.getGradient());
      grad && !grad->host)
    hostDeviceBytes =
        add(hostDeviceBytes, grad->bytes, op, "host-device bytes");
  Value newParam = update.getNewParamValue();
  uint64_t back = 0;
  for (Operation *user : newParam.getUsers())
    if (isa<CastOp>(user) && user->getNumResults() == 1)
      if (const Buffer *cast = lookupBuffer(user->getResult(0)))
        back = std::max(back, cast->bytes);
  if (back == 0)
    if (const Buffer *param = lookupBuffer(newParam))
      back = param->bytes;
  hostDeviceBytes = add(hostDeviceBytes, back, op, "host-device bytes");
}

/// The device copy of a host operand of an update that runs on the device:
/// it lives from the update to the last device op after it that reads the
/// update's in-place results (through the yields of the regions around
/// it); those ops read the copy.
Buffer FunctionMemory::stageHostOperand(OpOperand &operand,
                                        const Buffer &buffer,
                                        unsigned bufferIndex) {
  Operation *op = operand.getOwner();
  unsigned point = getPoint(op);
  Buffer copy = buffer;
  copy.host = false;
  // Counted with the temporaries (the most live at once).
  copy.category = MemoryCategory::Temporaries;
  copy.firstPoint = copy.lastPoint = point;
  unsigned index = staging.size();
  Operation *last = op;
  SmallVector<Value> values;
  for (Value result : op->getResults())
    if (lookupBuffer(result) == &buffer)
      values.push_back(result);
  while (!values.empty()) {
    Value value = values.pop_back_val();
    for (OpOperand &use : value.getUses()) {
      Operation *user = use.getOwner();
      if (isa<YieldOp>(user)) {
        Operation *parent = user->getParentOp();
        if (parent && use.getOperandNumber() < parent->getNumResults())
          values.push_back(parent->getResult(use.getOperandNumber()));
        continue;
      }
      // The step's return hands the state back where it lives.
      if (user->hasTrait<OpTrait::IsTerminator>() || !pointOf.count(user) ||
          runsOnHost(user) || getPoint(user) <= point)
        continue;
      auto &readers = stagingReaders[user];
      if (llvm::is_contained(readers, index))
        continue;
      readers.push_back(index);
      if (getPoint(user) > copy.lastPoint) {
        copy.lastPoint = getPoint(user);
        last = user;
      }
    }
  }
  stagingIndex[{op, operand.getOperandNumber()}] = index;
  staging.push_back({op, operand.getOperandNumber(), bufferIndex, last});
  return copy;
}

/// Host memory: buffers of arguments marked #train.space<host> (the
/// optimizer state train-offload-optimizer moved) and of the results of
/// updates that run there. An update that runs on the device with host
/// state holds a device copy of its state while it runs (a staging
/// buffer): the state comes in before it and goes back after the last
/// device op that reads what it updated in place (the cast of the
/// refreshed 16-bit weight from the master), which reads the copy too.
void FunctionMemory::placeInMemory() {
  if (!markHostBuffers())
    return;
  for (unsigned index : finalGradientBuffers)
    if (buffers[index].host)
      totals[static_cast<unsigned>(MemoryCategory::Gradients)] -=
          buffers[index].bytes;
  std::vector<Buffer> copies;
  for (Operation *op : schedule) {
    // A tensor moved out or back (train-offload-activations) crosses once
    // per execution: each iteration of the micro-batch loops around it.
    if (auto transfer = dyn_cast<TransferOp>(op))
      if (const Buffer *moved = lookupBuffer(transfer.getResult())) {
        uint64_t bytes = mulCount(moved->bytes, tripsOf(op));
        hostDeviceBytes = add(hostDeviceBytes, bytes, op, "host-device bytes");
        activationTransferBytes =
            add(activationTransferBytes, bytes, op, "host-device bytes");
      }
    // Each micro-batch's part of a sum kept on the host crosses there, in
    // the sum's type (the part is cast to it on the device), every
    // iteration.
    if (auto loop = dyn_cast<AccumulateOp>(op))
      if (std::optional<ArrayRef<bool>> host = loop.getHostSums())
        for (auto [sum, onHost] : llvm::zip(loop.getResults(), *host))
          if (onHost)
            hostDeviceBytes =
                add(hostDeviceBytes,
                    mulCount(getTensorBytes(sum.getType()),
                             mulCount(static_cast<uint64_t>(
                                          loop.getStepsAttr().getInt()),
                                      tripsOf(op))),
                    op, "host-device bytes");
    auto update = dyn_cast<OptimizerUpdateOpInterface>(op);
    if (!update)
      continue;
    if (runsOnHost(op)) {
      countHostUpdate(update);
      continue;
    }
    // On the device with state on the host: each host operand comes in
    // and goes back, and lives on the device while the update runs.
    for (OpOperand &operand : op->getOpOperands()) {
      const Buffer *buffer = lookupBuffer(operand.get());
      if (!buffer || !buffer->host)
        continue;
      hostDeviceBytes =
          add(hostDeviceBytes, 2 * buffer->bytes, op, "host-device bytes");
      copies.push_back(stageHostOperand(
          operand, *buffer,
          static_cast<unsigned>(buffers.size() + copies.size())));
    }
  }
  buffers.insert(buffers.end(), copies.begin(), copies.end());
}

void FunctionMemory::addWorkspaces() {
  for (Operation *op : schedule) {
    auto user = dyn_cast<WorkspaceOpInterface>(op);
    if (!user || op->getNumResults() == 0)
      continue;
    uint64_t bytes = user.getWorkspaceBytes();
    if (bytes == 0)
      continue;
    if (bytes == kCountOverflow)
      noteOverflow(op, "workspace bytes");
    Buffer workspace;
    workspace.owner = op->getResult(0);
    workspace.bytes = bytes;
    workspace.firstPoint = workspace.lastPoint = getPoint(op);
    workspace.category = MemoryCategory::Temporaries;
    workspaceIndex[op] = buffers.size();
    buffers.push_back(workspace);
  }
}

ArrayRef<unsigned> FunctionMemory::getStagingReadBy(Operation *op) const {
  auto it = stagingReaders.find(op);
  return it == stagingReaders.end() ? ArrayRef<unsigned>() : it->second;
}

const FunctionMemory::Staging *
FunctionMemory::lookupStaging(Operation *update, unsigned operand) const {
  auto it = stagingIndex.find({update, operand});
  return it == stagingIndex.end() ? nullptr : &staging[it->second];
}

void FunctionMemory::computeLiveness() {
  unsigned numPoints = schedule.size() + 1;
  // Every sum below is at most the sum of all buffers: when that fits in
  // signed 64 bits, none of them overflows.
  uint64_t allBytes = 0;
  for (const Buffer &buffer : buffers) {
    allBytes = addCount(allBytes, buffer.bytes);
    if (allBytes > uint64_t(INT64_MAX)) {
      noteOverflow(buffer.owner.getDefiningOp(), "live bytes");
      return;
    }
  }
  std::vector<int64_t> delta(numPoints + 1, 0);
  for (const Buffer &buffer : buffers) {
    if (buffer.host)
      continue;
    delta[buffer.firstPoint] += static_cast<int64_t>(buffer.bytes);
    delta[buffer.lastPoint + 1] -= static_cast<int64_t>(buffer.bytes);
  }
  liveBytes.assign(numPoints, 0);
  int64_t live = 0;
  for (unsigned point = 0; point < numPoints; ++point) {
    live += delta[point];
    liveBytes[point] = static_cast<uint64_t>(live);
    if (liveBytes[point] > peakBytes) {
      peakBytes = liveBytes[point];
      peakPoint = point;
    }
  }
  for (const Buffer &buffer : buffers)
    if (!buffer.host && buffer.firstPoint <= peakPoint &&
        peakPoint <= buffer.lastPoint)
      atPeak[static_cast<unsigned>(buffer.category)] += buffer.bytes;

  // The most temporary (and gathered) bytes live at once.
  for (MemoryCategory category :
       {MemoryCategory::Temporaries, MemoryCategory::Gathered,
        MemoryCategory::Gradients}) {
    std::vector<int64_t> categoryDelta(numPoints + 1, 0);
    for (const Buffer &buffer : buffers)
      if (buffer.category == category && !buffer.host) {
        categoryDelta[buffer.firstPoint] += static_cast<int64_t>(buffer.bytes);
        categoryDelta[buffer.lastPoint + 1] -=
            static_cast<int64_t>(buffer.bytes);
      }
    int64_t live = 0, most = 0;
    for (unsigned point = 0; point < numPoints; ++point) {
      live += categoryDelta[point];
      most = std::max(most, live);
    }
    if (category == MemoryCategory::Gradients)
      mostLiveGradients = static_cast<uint64_t>(most);
    else
      totals[static_cast<unsigned>(category)] = static_cast<uint64_t>(most);
  }
}

void FunctionMemory::summarize() {
  std::map<int64_t, LayerActivations> byLayer;
  for (const Buffer &buffer : buffers) {
    if (buffer.host) {
      hostTotals[static_cast<unsigned>(buffer.category)] += buffer.bytes;
      if (buffer.category == MemoryCategory::Activations && buffer.layer) {
        LayerActivations &layer = byLayer[*buffer.layer];
        layer.index = *buffer.layer;
        layer.host += buffer.bytes;
      }
      continue;
    }
    switch (buffer.category) {
    case MemoryCategory::Weights:
    case MemoryCategory::Optimizer:
    case MemoryCategory::Activations:
      totals[static_cast<unsigned>(buffer.category)] +=
          buffer.bytes; // bounded by the live-bytes check
      break;
    case MemoryCategory::Gradients:
    case MemoryCategory::Temporaries:
    case MemoryCategory::Gathered:
      break; // Counted in classify() and computeLiveness().
    }
    if (buffer.category != MemoryCategory::Activations || !buffer.layer)
      continue;
    LayerActivations &layer = byLayer[*buffer.layer];
    layer.index = *buffer.layer;
    switch (buffer.savedFor) {
    case SavedFor::Attention:
      layer.attention += buffer.bytes;
      break;
    case SavedFor::MLP:
      layer.mlp += buffer.bytes;
      break;
    case SavedFor::Norm:
      layer.norm += buffer.bytes;
      break;
    case SavedFor::Other:
      break;
    }
  }
  for (auto &[index, layer] : byLayer)
    layers.push_back(layer);

  // Parameters: whole tensors, also where a rank keeps a shard of one.
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (func.getArgAttr(i, kParamAttrName)) {
      Type type = func.getArgument(i).getType();
      if (auto full = func.getArgAttrOfType<TypeAttr>(i, kShardOfAttrName))
        type = full.getValue();
      parameters = add(parameters, getNumElements(type), nullptr,
                       "parameters");
    }

  static constexpr StringLiteral kPhaseFlops[] = {
      "forward FLOPs", "backward FLOPs", "optimizer FLOPs"};
  for (Operation *op : schedule)
    if (auto cost = dyn_cast<CostOpInterface>(op)) {
      if (op->hasAttr(kRecomputeAttrName)) {
        recomputeFlops =
            add(recomputeFlops, cost.getFlops(), op, "recompute FLOPs");
      } else {
        // What an op redoes of its forward (a fused attention's backward
        // recomputing its scores) is recompute too.
        uint64_t redone = std::min(cost.getRecomputeFlops(), cost.getFlops());
        recomputeFlops = add(recomputeFlops, redone, op, "recompute FLOPs");
        unsigned phase = static_cast<unsigned>(getPhase(op));
        flops[phase] = add(flops[phase], cost.getFlops() - redone, op,
                           kPhaseFlops[phase]);
      }
    }
}

MemoryAnalysis::MemoryAnalysis(Operation *op) {
  if (auto func = dyn_cast<func::FuncOp>(op)) {
    functions.emplace_back(func);
    return;
  }
  op->walk([&](func::FuncOp func) {
    if (!func.isExternal())
      functions.emplace_back(func);
  });
}

const FunctionMemory *MemoryAnalysis::lookup(func::FuncOp func) const {
  for (const FunctionMemory &memory : functions)
    if (memory.getFunction() == func)
      return &memory;
  return nullptr;
}

/// The axis `collective` runs over, as the report names it (see
/// CollectiveTraffic): its group against the tensor axis's, the one
/// `tensor` (a #train.split of the function, if any) names.
static std::string axisOf(Operation *collective, TensorSplitAttr tensor,
                          ContextSplitAttr context) {
  std::optional<ProcessGroup> group = getProcessGroup(collective);
  // A context-parallel step's group (train-context-parallel).
  if (context && group) {
    std::optional<ProcessGroup> contextGroup =
        getProcessGroup(collective, context.getGrid(),
                        {static_cast<int16_t>(context.getAxis())});
    if (contextGroup && contextGroup->size == group->size &&
        contextGroup->stride == group->stride &&
        contextGroup->gridRanks == group->gridRanks)
      return "context";
  }
  std::optional<ProcessGroup> tensorGroup;
  if (tensor) {
    int16_t axis = static_cast<int16_t>(tensor.getAxis());
    tensorGroup = getProcessGroup(collective, tensor.getGrid(), {axis});
  }
  if (!group || !tensorGroup || tensorGroup->size == 1)
    return "data";
  if (group->size == tensorGroup->size && group->stride == tensorGroup->stride)
    return "tensor";
  if (group->size == group->gridRanks)
    return "data+tensor";
  return "data";
}

std::map<TrafficKey, CollectiveTraffic>
mlir::train::collectiveTrafficOf(func::FuncOp func) {
  TensorSplitAttr tensor;
  for (unsigned i = 0; i < func.getNumArguments() && !tensor; ++i)
    tensor = func.getArgAttrOfType<TensorSplitAttr>(i, kTensorSplitAttrName);
  ContextSplitAttr context = getContextSplit(func);
  std::map<TrafficKey, CollectiveTraffic> traffic;
  func.walk([&](CommunicationOpInterface collective) {
    // An op that does not communicate in this form (an attention that
    // does not pass its blocks around a ring).
    if (collective.getCollectiveKind().empty())
      return;
    uint64_t times = 1;
    for (Operation *parent = collective->getParentOp(); parent;
         parent = parent->getParentOp())
      if (auto loop = dyn_cast<AccumulateOp>(parent))
        times = mulCount(times, loop.getStepsAttr().getInt());
    CollectiveTraffic &t = traffic[{axisOf(collective, tensor, context),
                                    collective.getCollectiveKind().str()}];
    t.ops = addCount(t.ops, times);
    t.elements =
        addCount(t.elements, mulCount(collective.getElementsSent(), times));
    t.bytes = addCount(t.bytes, mulCount(collective.getBytesSent(), times));
  });
  return traffic;
}
