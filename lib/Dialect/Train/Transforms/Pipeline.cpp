//===- Pipeline.cpp - train-pipeline ----------------------------*- C++ -*-===//
//
// Pipeline parallelism as IR: the step's layers cut into stages, one
// function per stage whose body is its schedule (the forward and backward
// of its chunks for every micro-batch, in GPipe's, 1F1B's or the
// interleaved order), the values that cross stages sent and received by
// train.pipeline_exchange between the units. Built from the step's rolled
// micro-batch loop unrolled (train-unroll-accum's copies, each op knowing
// its micro-batch), so that each stage's ops and sums are the one-rank
// step's, and each stage function is an ordinary step for the memory
// analysis: its peak holds the micro-batches its schedule keeps in flight.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Dialect/Train/Transforms/Pipeline.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Dialect/Train/Transforms/RegionUtils.h"
#include "trainmem/Dialect/Train/Transforms/StepPhases.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/AttrTypeSubElements.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

#include "trainmem/Debug/Debug.h"

#include <limits>
#include <map>

#define DEBUG_TYPE "train-pipeline"

namespace mlir {
namespace train {
#define GEN_PASS_DEF_TRAINPIPELINEPASS
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"

SmallVector<PipelineUnit> pipelineSchedule(PipelineSchedule schedule,
                                           int64_t stage, int64_t stages,
                                           int64_t virtualStages,
                                           int64_t microBatches) {
  SmallVector<PipelineUnit> units;
  int64_t p = stages, v = virtualStages, m = microBatches;
  if (schedule == PipelineSchedule::gpipe) {
    for (int64_t mb = 0; mb < m; ++mb)
      units.push_back({stage, false, mb});
    for (int64_t mb = 0; mb < m; ++mb)
      units.push_back({stage, true, mb});
    return units;
  }
  // 1F1B and its interleaved form (Megatron-LM's schedules.py order): the
  // i-th forward of a stage runs chunk (i / p) mod v of micro-batch
  // (i / (p v)) p + i mod p, its i-th backward the chunks in reverse.
  int64_t total = m * v;
  auto unitOf = [&](int64_t i, bool backward) {
    int64_t local = (i / p) % v;
    if (backward)
      local = v - 1 - local;
    int64_t mb = v == 1 ? i : (i / (p * v)) * p + i % p;
    return PipelineUnit{local * p + stage, backward, mb};
  };
  int64_t warmup = v == 1 ? std::min(p - stage - 1, m)
                          : std::min((p - stage - 1) * 2 + (v - 1) * p, total);
  for (int64_t i = 0; i < warmup; ++i)
    units.push_back(unitOf(i, false));
  for (int64_t i = 0; i < total - warmup; ++i) {
    units.push_back(unitOf(warmup + i, false));
    units.push_back(unitOf(i, true));
  }
  for (int64_t i = total - warmup; i < total; ++i)
    units.push_back(unitOf(i, true));
  return units;
}

namespace {

/// Where an op of the unrolled step runs: before the micro-batches (an op
/// on the inputs alone), in a unit of the schedule, or after them (the
/// update).
struct Placement {
  enum Kind { free, unit, post } kind = free;
  PipelineUnit where;
};

/// A value that crosses stages: made in unit `fromUnit` of stage `from`
/// (its index in that stage's order), first read in unit `toUnit` of stage
/// `to` (the post phase's index is the number of units). It is sent at the
/// exchange after the unit that makes it and received at exchange
/// `recvAt` of its reader (the one before `toUnit`, or an earlier one
/// where the stages would otherwise wait on each other).
struct Crossing {
  Value value;
  int64_t from, fromUnit, to, toUnit, tag;
  int64_t recvAt;
  int64_t sendAt() const { return fromUnit + 1; }
};

class PipelineBuilder {
public:
  PipelineBuilder(func::FuncOp step, int64_t stages, int64_t virtualStages,
                  PipelineSchedule schedule, ArrayRef<int64_t> split,
                  PipelineBalance balance, int64_t selectStage)
      : step(step), stages(stages), virtualStages(virtualStages),
        chunks(stages * virtualStages), schedule(schedule),
        split(split.begin(), split.end()), balance(balance),
        selectStage(selectStage) {}

  LogicalResult run(int64_t microBatchesAsked);

private:
  LogicalResult checkSupported(AccumulateOp loop);
  LogicalResult assignLayers(AccumulateOp loop);
  /// The layers of each chunk that `balance` gives.
  FailureOr<SmallVector<int64_t>> balancedCounts(AccumulateOp loop);
  LogicalResult unroll(AccumulateOp loop);
  LogicalResult placeOps();
  LogicalResult assignResults();
  LogicalResult findCrossings();
  /// The post ops (at any depth) stage `stage`'s results need, and the
  /// values they are made of.
  void sliceUpdate(int64_t stage, llvm::DenseSet<Operation *> &needed,
                   llvm::DenseSet<Value> &seen);
  LogicalResult placeExchanges();
  /// Whether every pair of stages issues its messages in one order.
  LogicalResult checkMessageOrder();
  FailureOr<func::FuncOp> buildStage(int64_t stage);
  class StageWriter;

  int64_t stageOf(int64_t chunk) const { return chunk % stages; }
  /// The values `op` reads from outside it (its operands and what its
  /// regions use from above).
  static SmallVector<Value> readsOf(Operation *op);
  /// The stage a value is made on, or -1 (an argument, a free op's).
  int64_t stageOfValue(Value value) const;
  /// The index of `unit` in `stage`'s order.
  int64_t indexOf(int64_t stage, PipelineUnit unit) const {
    return unitIndex[stage].lookup(key(unit));
  }
  static std::tuple<int64_t, int64_t, int64_t> key(PipelineUnit unit) {
    return {unit.chunk, unit.backward ? 1 : 0, unit.microBatch};
  }

  func::FuncOp step;
  int64_t stages, virtualStages, chunks;
  PipelineSchedule schedule;
  SmallVector<int64_t> split;
  PipelineBalance balance;
  /// The one stage to build (-1: all).
  int64_t selectStage;
  int64_t microBatches = 0, layers = 0;
  /// The chunk of each layer.
  SmallVector<int64_t> chunkOfLayer;
  /// Each stage's units in its schedule's order, and their indices.
  SmallVector<SmallVector<PipelineUnit>> order;
  SmallVector<llvm::DenseMap<std::tuple<int64_t, int64_t, int64_t>, int64_t>>
      unitIndex;
  /// The micro-batch of each op the unrolling made; where every top-level
  /// op runs; the ops of each unit in program order.
  llvm::DenseMap<Operation *, int64_t> microBatchOf;
  llvm::DenseMap<Operation *, Placement> placement;
  std::map<std::tuple<int64_t, int64_t, int64_t>, SmallVector<Operation *>>
      unitOps;
  SmallVector<Operation *> postOps;
  func::ReturnOp ret;
  /// The stages each returned value belongs to.
  SmallVector<SmallVector<int64_t>> resultStages;
  /// The step's arguments each stage's units read.
  SmallVector<llvm::DenseSet<unsigned>> argumentsRead;
  SmallVector<Crossing> crossings;
  /// Each stage's slice of the post ops (sliceUpdate): the ops its results
  /// need and the values they are made of.
  struct UpdateSlice {
    llvm::DenseSet<Operation *> needed;
    llvm::DenseSet<Value> seen;
  };
  SmallVector<UpdateSlice> updateSlices;
  /// The clip every stage clips by the global norm, if any.
  ClipGradNormOp clip;
  /// A tensor-parallel step's grid (data, tensor), which gains the
  /// pipeline's axis between the two; null otherwise.
  FlatSymbolRefAttr tensorGrid;
  /// How each gradient the clip reads is split (its parameter's split;
  /// null: whole).
  SmallVector<TensorSplitAttr> clipSplits;
  /// The squared norms each stage sends the others: one per grid axis its
  /// split gradients lie on, then one of its whole gradients (countWords,
  /// once the ops are placed).
  SmallVector<int64_t> normWords;
  int64_t countWords(int64_t stage) const;
  /// Its gradients and their splits.
  void stageGradients(int64_t stage, SmallVectorImpl<Value> &grads,
                      SmallVectorImpl<TensorSplitAttr> &splits) const;
  LogicalResult moveTensorAxis();
  void findClipSplits();
};

SmallVector<Value> PipelineBuilder::readsOf(Operation *op) {
  llvm::SetVector<Value> reads;
  reads.insert(op->operand_begin(), op->operand_end());
  getUsedValuesDefinedAbove(op->getRegions(), reads);
  return reads.takeVector();
}

int64_t PipelineBuilder::stageOfValue(Value value) const {
  Operation *def = value.getDefiningOp();
  if (!def)
    return -1;
  auto it = placement.find(def);
  if (it == placement.end() || it->second.kind != Placement::unit)
    return -1;
  return stageOf(it->second.where.chunk);
}

LogicalResult PipelineBuilder::checkSupported(AccumulateOp loop) {
  auto refuse = [&](Operation *at, const Twine &what) {
    return at->emitError("train-pipeline: ")
           << what << " with pipeline stages is not built yet "
           << "(docs/Pipeline.md, \"Not built yet\")";
  };
  if (step->hasAttr(kZeroAttrName))
    return refuse(step, "train-zero's partition (run train-pipeline before "
                        "it on the step)");
  for (unsigned i = 0, e = step.getNumArguments(); i < e; ++i) {
    if (auto split =
            step.getArgAttrOfType<TensorSplitAttr>(i, kTensorSplitAttrName))
      tensorGrid = split.getGrid();
    if (auto state =
            step.getArgAttrOfType<StateAttr>(i, kOptimizerStateAttrName);
        state && state.getKind() == StateKind::loss_scale)
      return refuse(step, "dynamic loss scaling");
  }
  if (getContextSplit(step))
    return refuse(step, "context parallelism");
  if (loop.getGroups() && *loop.getGroups() > 1)
    return refuse(loop, "a loop summed in groups");
  if (loop.getHostSums())
    return refuse(loop, "gradients summed in host memory");
  WalkResult result = step.walk([&](Operation *op) {
    if (isa<TransferOp>(op) || op->hasAttr(kMemorySpaceAttrName)) {
      (void)refuse(op, "offloading");
      return WalkResult::interrupt();
    }
    if (isa<OptimizerUpdateOpInterface>(op) && loop->isAncestor(op)) {
      (void)refuse(op, "an update inside the micro-batch loop "
                       "(train-release-gradients)");
      return WalkResult::interrupt();
    }
    if (auto found = dyn_cast<ClipGradNormOp>(op)) {
      // A tensor-parallel step's clip sums its split gradients' norms over
      // the group: each stage builds its own such norms.
      if (!found.getSquaredNorms().empty() && !tensorGrid) {
        (void)refuse(op, "a clip of sharded gradients");
        return WalkResult::interrupt();
      }
      clip = found;
    }
    return WalkResult::advance();
  });
  return failure(result.wasInterrupted());
}

LogicalResult PipelineBuilder::assignLayers(AccumulateOp loop) {
  loop.getBody().walk([&](BlockOp block) {
    if (IntegerAttr layer = block.getLayerAttr())
      layers = std::max(layers, layer.getInt() + 1);
  });
  if (layers == 0)
    return loop.emitOpError("train-pipeline: the step has no layers (no "
                            "train.block with a layer index) to cut into "
                            "stages");
  SmallVector<int64_t> counts;
  if (split.empty() && balance != PipelineBalance::uniform) {
    FailureOr<SmallVector<int64_t>> balanced = balancedCounts(loop);
    if (failed(balanced))
      return failure();
    counts = std::move(*balanced);
  } else if (split.empty()) {
    if (layers % chunks != 0)
      return loop.emitOpError("train-pipeline: ")
             << layers << " layers do not divide into " << stages
             << " stages x " << virtualStages
             << " chunks: give the layers of each chunk with split=, or cut "
                "them by cost with balance=flops or balance=memory";
    counts.assign(chunks, layers / chunks);
  } else {
    if (static_cast<int64_t>(split.size()) != chunks)
      return loop.emitOpError("train-pipeline: split= gives ")
             << split.size() << " chunks, the pipeline has " << chunks
             << " (stages x virtual)";
    int64_t sum = 0;
    for (int64_t count : split) {
      if (count < 1)
        return loop.emitOpError("train-pipeline: split= gives a chunk ")
               << count << " layers: each holds at least one";
      sum += count;
    }
    if (sum != layers)
      return loop.emitOpError("train-pipeline: split= gives ")
             << sum << " layers, the step has " << layers;
    counts = split;
  }
  for (auto [chunk, count] : llvm::enumerate(counts))
    for (int64_t i = 0; i < count; ++i)
      chunkOfLayer.push_back(chunk);
  return success();
}

/// The bytes of the state a parameter argument brings: its weight, its
/// gradient (f32 sums, train-grad-accum's) and its optimizer state.
static uint64_t stateBytesOf(func::FuncOp step, BlockArgument param) {
  auto name =
      step.getArgAttrOfType<StringAttr>(param.getArgNumber(), kParamAttrName);
  uint64_t bytes = addCount(getTensorBytes(param.getType()),
                            mulCount(getNumElements(param.getType()), 4));
  for (unsigned i = 0, e = step.getNumArguments(); i < e; ++i)
    if (auto state =
            step.getArgAttrOfType<StateAttr>(i, kOptimizerStateAttrName);
        state && name && state.getParam() == name.getValue())
      bytes = addCount(bytes, getTensorBytes(step.getArgument(i).getType()));
  return bytes;
}

/// Each layer's cost for `balance`, and the ends' (the embedding's on the
/// first chunk, the head's on the last): FLOPs in `state`, or the state
/// bytes and the saved bytes per micro-batch (a forward block's results a
/// backward reads).
struct LayerCosts {
  SmallVector<double> state, saved;
  double firstState = 0, firstSaved = 0, lastState = 0, lastSaved = 0;
};

static LayerCosts layerCostsOf(func::FuncOp step, Block &body, int64_t layers,
                               PipelineBalance balance) {
  LayerCosts costs;
  costs.state.assign(layers, 0.0);
  costs.saved.assign(layers, 0.0);
  for (BlockOp block : body.getOps<BlockOp>()) {
    double *stateOf = nullptr, *savedOf = nullptr;
    if (IntegerAttr layer = block.getLayerAttr()) {
      stateOf = &costs.state[layer.getInt()];
      savedOf = &costs.saved[layer.getInt()];
    } else if (block.getKind() == BlockKind::embedding) {
      stateOf = &costs.firstState;
      savedOf = &costs.firstSaved;
    } else if (block.getKind() == BlockKind::head) {
      stateOf = &costs.lastState;
      savedOf = &costs.lastSaved;
    } else {
      continue;
    }
    if (balance == PipelineBalance::flops) {
      block.walk([&](CostOpInterface cost) {
        *stateOf += static_cast<double>(cost.getFlops());
      });
      continue;
    }
    if (block.getBackward())
      continue;
    llvm::SetVector<Value> params;
    getUsedValuesDefinedAbove(block.getBody(), params);
    for (Value value : params)
      if (auto arg = dyn_cast<BlockArgument>(value);
          arg && arg.getOwner()->getParentOp() == step &&
          step.getArgAttr(arg.getArgNumber(), kParamAttrName))
        *stateOf += static_cast<double>(stateBytesOf(step, arg));
    for (Value result : block->getResults())
      if (llvm::any_of(result.getUsers(), [](Operation *user) {
            auto reader = user->getParentOfType<BlockOp>();
            auto top = dyn_cast<BlockOp>(user);
            return (top && top.getBackward()) ||
                   (reader && reader.getBackward());
          }))
        *savedOf += static_cast<double>(getTensorBytes(result.getType()));
  }
  return costs;
}

/// The counts of `layers` consecutive layers in `chunks` chunks (each at
/// least one) whose most expensive chunk is cheapest, `costOf(chunk,
/// begin, end)` a chunk's cost: best[c][j] over the first j layers in c + 1
/// chunks.
static SmallVector<int64_t>
cheapestCut(int64_t layers, int64_t chunks,
            function_ref<double(int64_t, int64_t, int64_t)> costOf) {
  constexpr double kNone = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(chunks,
                                        std::vector<double>(layers + 1, kNone));
  std::vector<std::vector<int64_t>> from(chunks,
                                         std::vector<int64_t>(layers + 1, -1));
  for (int64_t j = 1; j <= layers; ++j)
    best[0][j] = costOf(0, 0, j);
  for (int64_t c = 1; c < chunks; ++c)
    for (int64_t j = c + 1; j <= layers; ++j)
      for (int64_t i = c; i < j; ++i) {
        double cost = std::max(best[c - 1][i], costOf(c, i, j));
        if (cost < best[c][j]) {
          best[c][j] = cost;
          from[c][j] = i;
        }
      }
  SmallVector<int64_t> counts(chunks);
  for (int64_t c = chunks - 1, j = layers; c >= 0; --c) {
    int64_t i = c == 0 ? 0 : from[c][j];
    counts[c] = j - i;
    j = i;
  }
  return counts;
}

FailureOr<SmallVector<int64_t>>
PipelineBuilder::balancedCounts(AccumulateOp loop) {
  if (balance == PipelineBalance::memory && virtualStages > 1)
    return loop.emitOpError("train-pipeline: balance=memory cuts one chunk "
                            "per stage (virtual=1); with interleaving give "
                            "split= or balance=flops");
  if (layers < chunks)
    return loop.emitOpError("train-pipeline: ")
           << layers << " layers cannot fill " << chunks
           << " chunks (stages x virtual) of at least one layer";
  LayerCosts costs =
      layerCostsOf(step, loop.getBody().front(), layers, balance);
  // A chunk's cost: its layers', the ends', the saved bytes times the
  // micro-batches its stage keeps in flight (1F1B min(p - k, m), GPipe m).
  auto inFlight = [&](int64_t chunk) -> double {
    int64_t k = stageOf(chunk);
    return schedule == PipelineSchedule::gpipe
               ? microBatches
               : std::min(stages - k, microBatches);
  };
  auto costOf = [&](int64_t chunk, int64_t begin, int64_t end) {
    double cost = 0;
    double flight = balance == PipelineBalance::memory ? inFlight(chunk) : 0;
    for (int64_t l = begin; l < end; ++l)
      cost += costs.state[l] + flight * costs.saved[l];
    if (chunk == 0)
      cost += costs.firstState + flight * costs.firstSaved;
    if (chunk == chunks - 1)
      cost += costs.lastState + flight * costs.lastSaved;
    return cost;
  };
  SmallVector<int64_t> counts = cheapestCut(layers, chunks, costOf);
  LLVM_DEBUG({
    llvm::dbgs() << "train-pipeline: balance="
                 << (balance == PipelineBalance::flops ? "flops" : "memory")
                 << " cuts the layers";
    for (int64_t count : counts)
      llvm::dbgs() << " " << count;
    llvm::dbgs() << "\n";
  });
  return counts;
}

LogicalResult PipelineBuilder::unroll(AccumulateOp loop) {
  Block *body = loop->getBlock();
  for (Operation &op : llvm::make_range(body->begin(), loop->getIterator()))
    placement[&op] = Placement{};
  Operation *after = loop->getNextNode();
  if (failed(unrollAccumulate(loop, [&](int64_t microBatch, Operation *op) {
        microBatchOf[op] = microBatch;
      })))
    return failure();
  for (Operation &op : llvm::make_range(after->getIterator(), body->end())) {
    if (auto found = dyn_cast<func::ReturnOp>(op))
      ret = found;
    else
      postOps.push_back(&op);
  }
  return success();
}

LogicalResult PipelineBuilder::placeOps() {
  for (Operation &op : step.getBody().front()) {
    auto mb = microBatchOf.find(&op);
    if (mb == microBatchOf.end())
      continue;
    Placement place;
    if (auto block = dyn_cast<BlockOp>(op)) {
      int64_t chunk;
      switch (block.getKind()) {
      case BlockKind::embedding:
        chunk = 0;
        break;
      case BlockKind::head:
        chunk = chunks - 1;
        break;
      case BlockKind::attention:
      case BlockKind::mlp:
        chunk = chunkOfLayer[block.getLayerAttr().getInt()];
        break;
      case BlockKind::optimizer:
        return block.emitOpError("train-pipeline: an optimizer block inside "
                                 "the micro-batch loop");
      }
      place = {Placement::unit, {chunk, block.getBackward(), mb->second}};
    } else {
      // Anything else runs where its latest input is made (a sum with its
      // part), or, made of the inputs alone, wherever it is read.
      for (Value read : readsOf(&op))
        if (Operation *def = read.getDefiningOp())
          if (auto it = placement.find(def);
              it != placement.end() && it->second.kind == Placement::unit)
            place = it->second;
    }
    placement[&op] = place;
    if (place.kind == Placement::unit)
      unitOps[key(place.where)].push_back(&op);
  }
  for (Operation *op : postOps)
    placement[op] = Placement{Placement::post, {}};
  return success();
}

LogicalResult PipelineBuilder::assignResults() {
  argumentsRead.resize(stages);
  // The step's arguments a unit reads, directly or through ops made of
  // arguments alone (a replicated parameter's train.grad_all_reduce under
  // sequence parallelism), which each stage that reads them runs itself.
  auto noteArguments = [&](Operation *op, int64_t stage) {
    SmallVector<Value> worklist = readsOf(op);
    llvm::DenseSet<Value> visited;
    while (!worklist.empty()) {
      Value read = worklist.pop_back_val();
      if (!visited.insert(read).second)
        continue;
      if (auto arg = dyn_cast<BlockArgument>(read)) {
        if (arg.getOwner()->getParentOp() == step)
          argumentsRead[stage].insert(arg.getArgNumber());
        continue;
      }
      Operation *def = read.getDefiningOp();
      if (def && def->getParentOp() == step &&
          placement.lookup(def).kind == Placement::free)
        llvm::append_range(worklist, readsOf(def));
    }
  };
  for (auto &[unitKey, ops] : unitOps)
    for (Operation *op : ops)
      noteArguments(op, stageOf(std::get<0>(unitKey)));
  // A parameter's stages: those whose layers read it.
  llvm::StringMap<SmallVector<int64_t>> paramStages;
  for (unsigned i = 0, e = step.getNumArguments(); i < e; ++i)
    if (auto name = step.getArgAttrOfType<StringAttr>(i, kParamAttrName))
      for (int64_t stage = 0; stage < stages; ++stage)
        if (argumentsRead[stage].contains(i))
          paramStages[name.getValue()].push_back(stage);
  SmallVector<int64_t> all;
  for (int64_t stage = 0; stage < stages; ++stage)
    all.push_back(stage);
  for (unsigned i = 0, e = ret.getNumOperands(); i < e; ++i) {
    StringRef param;
    if (auto name = step.getResultAttrOfType<StringAttr>(i, kParamAttrName))
      param = name.getValue();
    else if (auto state = step.getResultAttrOfType<StateAttr>(
                 i, kOptimizerStateAttrName))
      param = state.getParam();
    if (!param.empty()) {
      auto it = paramStages.find(param);
      // A parameter no layer reads stays with the first stage.
      resultStages.push_back(it == paramStages.end() ? SmallVector<int64_t>{0}
                                                     : it->second);
    } else if (step.getResultAttr(i, kLossAttrName)) {
      resultStages.push_back({stages - 1});
    } else if (step.getResultAttr(i, kGradNormAttrName)) {
      resultStages.push_back(all);
    } else {
      return ret.emitOpError("train-pipeline: result ")
             << i << " of @" << step.getSymName()
             << " is none of a parameter, its optimizer state, the loss "
                "and the gradient norm: no stage owns it";
    }
  }
  return success();
}

void PipelineBuilder::sliceUpdate(int64_t stage,
                                  llvm::DenseSet<Operation *> &needed,
                                  llvm::DenseSet<Value> &seen) {
  SmallVector<Value> worklist;
  for (auto [index, owners] : llvm::enumerate(resultStages))
    if (llvm::is_contained(owners, stage))
      worklist.push_back(ret.getOperand(index));
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    if (!seen.insert(value).second)
      continue;
    Operation *def = value.getDefiningOp();
    if (!def)
      continue;
    Operation *top = step.getBody().front().findAncestorOpInBlock(*def);
    if (!top || placement.lookup(top).kind != Placement::post)
      continue;
    needed.insert(def);
    // A block's result is what it yields there.
    if (auto block = dyn_cast<BlockOp>(def)) {
      worklist.push_back(block.getBody().front().getTerminator()->getOperand(
          cast<OpResult>(value).getResultNumber()));
      continue;
    }
    // A clipped gradient is its gradient clipped: each stage clips those
    // it updates (and reads the stages' squared norms, not their
    // gradients).
    if (auto clipOp = dyn_cast<ClipGradNormOp>(def)) {
      if (auto result = dyn_cast<OpResult>(value);
          result && result.getResultNumber() < clipOp.getGrads().size())
        worklist.push_back(clipOp.getGrads()[result.getResultNumber()]);
      continue;
    }
    for (Value read : readsOf(def))
      worklist.push_back(read);
  }
}

LogicalResult PipelineBuilder::findCrossings() {
  // The first unit of each stage that reads a value made on another.
  llvm::MapVector<std::pair<Value, int64_t>, int64_t> reads;
  auto note = [&](Value value, int64_t stage, int64_t index) {
    int64_t from = stageOfValue(value);
    if (from < 0 || from == stage)
      return;
    auto [it, inserted] = reads.insert({{value, stage}, index});
    if (!inserted)
      it->second = std::min(it->second, index);
  };
  for (int64_t stage = 0; stage < stages; ++stage)
    for (auto [index, unit] : llvm::enumerate(order[stage]))
      for (Operation *op : unitOps[key(unit)])
        for (Value read : readsOf(op))
          note(read, stage, index);
  // What each stage's update reads: its results' slices (kept for the
  // stage's writer).
  updateSlices.resize(stages);
  for (int64_t stage = 0; stage < stages; ++stage) {
    UpdateSlice &slice = updateSlices[stage];
    sliceUpdate(stage, slice.needed, slice.seen);
    for (Value value : slice.seen)
      note(value, stage, order[stage].size());
  }
  // Every gradient the clip reads is made by one stage's backward, which
  // counts it in its squared norm.
  if (clip)
    for (auto [index, grad] : llvm::enumerate(clip.getGrads()))
      if (stageOfValue(grad) < 0)
        return clip.emitOpError("train-pipeline: gradient ")
               << index
               << " is not made by a stage's backward: no stage "
                  "would count it in the global norm";
  for (auto [index, entry] : llvm::enumerate(reads)) {
    auto [value, to] = entry.first;
    Operation *def = value.getDefiningOp();
    int64_t from = stageOfValue(value);
    int64_t fromUnit = indexOf(from, placement.lookup(def).where);
    crossings.push_back({value, from, fromUnit, to, entry.second,
                         int64_t(index), entry.second});
  }
  return success();
}

/// An exchange sending `sends` to `sendPeers` and receiving `recvTypes`
/// from `recvPeers`, with their tags.
static PipelineExchangeOp
createExchange(OpBuilder &builder, Location loc, ValueRange sends,
               ArrayRef<int64_t> sendPeers, ArrayRef<int64_t> sendTags,
               TypeRange recvTypes, ArrayRef<int64_t> recvPeers,
               ArrayRef<int64_t> recvTags) {
  return PipelineExchangeOp::create(builder, loc, recvTypes, sends,
                                    builder.getDenseI64ArrayAttr(sendPeers),
                                    builder.getDenseI64ArrayAttr(sendTags),
                                    builder.getDenseI64ArrayAttr(recvPeers),
                                    builder.getDenseI64ArrayAttr(recvTags));
}

LogicalResult PipelineBuilder::checkMessageOrder() {
  // NCCL pairs a peer's sends and receives by the order they are issued,
  // not by tag: between two stages the sender's order (its exchange, then
  // the receiver's, then the tag) must be the receiver's (its exchange,
  // then the sender's, then the tag). Exchanges that complete hold no
  // message sent earlier and received later than another (that would wait
  // on each other), so the two orders agree; checked here.
  std::map<std::pair<int64_t, int64_t>, SmallVector<const Crossing *>> pairs;
  for (const Crossing &crossing : crossings)
    pairs[{crossing.from, crossing.to}].push_back(&crossing);
  for (auto &[pair, list] : pairs) {
    SmallVector<const Crossing *> sent(list), received(list);
    llvm::stable_sort(sent, [](const Crossing *a, const Crossing *b) {
      return std::make_tuple(a->sendAt(), a->recvAt, a->tag) <
             std::make_tuple(b->sendAt(), b->recvAt, b->tag);
    });
    llvm::stable_sort(received, [](const Crossing *a, const Crossing *b) {
      return std::make_tuple(a->recvAt, a->sendAt(), a->tag) <
             std::make_tuple(b->recvAt, b->sendAt(), b->tag);
    });
    if (sent != received)
      return step.emitError("train-pipeline: stage ")
             << pair.first << " sends its tensors for stage " << pair.second
             << " in another order than that stage receives them (NCCL "
                "pairs them by order); use another schedule or split=";
  }
  return success();
}

LogicalResult PipelineBuilder::placeExchanges() {
  // An exchange starts its sends and receives together and ends when every
  // one has met its peer's (as NCCL's grouped send/recv and MPI's waitall
  // do): a stage moves past exchange i when each peer has reached the
  // exchange that holds the other end. Where the stages would wait on each
  // other (the interleaved schedule's forward sends crossing between a
  // stage and the one before it), the receiver takes the tensor at the
  // exchange it waits at, earlier than it reads it (Megatron's
  // send-forward-receive-forward): the received tensor lives from there,
  // which the stage's memory analysis counts.
  auto last = [&](int64_t stage) {
    return static_cast<int64_t>(order[stage].size()) + 1;
  };
  while (true) {
    SmallVector<int64_t> at(stages, 0);
    // The crossings each stage sends and receives at each exchange.
    SmallVector<SmallVector<SmallVector<Crossing *>>> sends(stages),
        recvs(stages);
    for (int64_t stage = 0; stage < stages; ++stage) {
      sends[stage].resize(last(stage));
      recvs[stage].resize(last(stage));
    }
    for (Crossing &crossing : crossings) {
      sends[crossing.from][crossing.sendAt()].push_back(&crossing);
      recvs[crossing.to][crossing.recvAt].push_back(&crossing);
    }
    bool done = false;
    while (!done) {
      bool moved = false;
      done = true;
      for (int64_t stage = 0; stage < stages; ++stage) {
        while (at[stage] < last(stage)) {
          int64_t here = at[stage];
          bool complete = true;
          for (Crossing *c : sends[stage][here])
            complete &= at[c->to] >= c->recvAt;
          for (Crossing *c : recvs[stage][here])
            complete &= at[c->from] >= c->sendAt();
          if (!complete)
            break;
          ++at[stage];
          moved = true;
        }
        done &= at[stage] == last(stage);
      }
      if (!moved)
        break;
    }
    if (done)
      return checkMessageOrder();
    // A send waiting for a receiver that is stuck earlier: the receiver
    // takes it where it waits.
    Crossing *hoisted = nullptr;
    for (int64_t stage = 0; stage < stages && !hoisted; ++stage)
      if (at[stage] < last(stage))
        for (Crossing *c : sends[stage][at[stage]])
          if (at[c->to] < c->recvAt) {
            hoisted = c;
            break;
          }
    if (hoisted) {
      LLVM_DEBUG(llvm::dbgs()
                 << "train-pipeline: stage " << hoisted->to << " receives tag "
                 << hoisted->tag << " at exchange " << at[hoisted->to]
                 << " instead of " << hoisted->recvAt << "\n");
      hoisted->recvAt = at[hoisted->to];
      continue;
    }
    // Only receives wait: a value that flows back against the schedule.
    for (int64_t stage = 0; stage < stages; ++stage) {
      if (at[stage] == last(stage))
        continue;
      InFlightDiagnostic diag =
          step.emitError("train-pipeline: the stages' exchanges deadlock "
                         "(a cycle between stages): stage ")
          << stage << " waits before ";
      if (at[stage] < static_cast<int64_t>(order[stage].size())) {
        PipelineUnit unit = order[stage][at[stage]];
        diag << (unit.backward ? "the backward" : "the forward") << " of chunk "
             << unit.chunk << ", micro-batch " << unit.microBatch;
      } else {
        diag << "its update";
      }
      diag << " for a value its peer makes later in its own schedule";
      return diag;
    }
    return failure();
  }
}

/// Writes one stage's function: its units in schedule order with the
/// exchanges between them, then its part of the update.
class PipelineBuilder::StageWriter {
public:
  StageWriter(PipelineBuilder &pipeline, int64_t stage)
      : p(pipeline), stage(stage), builder(pipeline.step),
        needed(pipeline.updateSlices[stage].needed),
        seen(pipeline.updateSlices[stage].seen) {}

  FailureOr<func::FuncOp> write();

private:
  func::FuncOp createFunction();
  /// Makes `value`, which `reader` reads, available: mapped already, or
  /// made of the inputs alone (cloned here); an error where this stage
  /// makes it later.
  LogicalResult ensure(Value value, Operation *reader);
  LogicalResult ensureReads(Operation *op);
  /// The exchange before unit `index`: what the unit before it made for
  /// other stages, and what this one reads from them.
  void exchangeBefore(int64_t index);
  LogicalResult writeUnits();
  /// Clipping: this stage's exact squared norm of the gradients it makes,
  /// exchanged with every other stage's (`words`, which its clip sums).
  void exchangeNorms();
  /// Clones post op `op` (for a block, the part of it this stage needs).
  LogicalResult clonePost(Operation *op);
  LogicalResult cloneBlock(BlockOp block);
  LogicalResult writeUpdate();

  PipelineBuilder &p;
  int64_t stage;
  OpBuilder builder;
  IRMapping mapping;
  func::FuncOp func;
  /// The step's results this stage returns.
  SmallVector<unsigned> results;
  /// The post ops this stage needs and the values they make.
  const llvm::DenseSet<Operation *> &needed;
  const llvm::DenseSet<Value> &seen;
  SmallVector<Value> words;
};

func::FuncOp PipelineBuilder::StageWriter::createFunction() {
  // Every argument first; the ones the stage does not read go at the end.
  SmallVector<Type> resultTypes;
  for (auto [index, owners] : llvm::enumerate(p.resultStages))
    if (llvm::is_contained(owners, stage)) {
      results.push_back(index);
      resultTypes.push_back(p.ret.getOperand(index).getType());
    }
  func::FuncOp step = p.step;
  auto created = func::FuncOp::create(
      builder, step.getLoc(),
      (step.getSymName() + ".stage" + Twine(stage)).str(),
      builder.getFunctionType(step.getArgumentTypes(), resultTypes));
  for (unsigned i = 0, e = step.getNumArguments(); i < e; ++i)
    created.setArgAttrs(i, step.getArgAttrDict(i));
  for (auto [index, result] : llvm::enumerate(results))
    created.setResultAttrs(index, step.getResultAttrDict(result));
  for (NamedAttribute attr : step->getDiscardableAttrs())
    if (attr.getName() != kStepAttrName)
      created->setAttr(attr.getName(), attr.getValue());
  created->setAttr(kPipelineStageAttrName,
                   PipelineStageAttr::get(step.getContext(), stage, p.stages,
                                          p.microBatches, p.schedule,
                                          p.virtualStages));
  Block *entry = created.addEntryBlock();
  builder.setInsertionPointToEnd(entry);
  for (auto [from, to] : llvm::zip(step.getArguments(), entry->getArguments()))
    mapping.map(from, to);
  return created;
}

LogicalResult PipelineBuilder::StageWriter::ensure(Value value,
                                                   Operation *reader) {
  if (mapping.contains(value))
    return success();
  Operation *def = value.getDefiningOp();
  Operation *top =
      def ? p.step.getBody().front().findAncestorOpInBlock(*def) : nullptr;
  if (!top || p.placement.lookup(top).kind != Placement::free) {
    PipelineUnit unit = p.placement.lookup(top).where;
    return reader->emitError("train-pipeline: stage ")
           << stage << " reads a value its "
           << (unit.backward ? "backward" : "forward") << " of chunk "
           << unit.chunk << ", micro-batch " << unit.microBatch
           << " makes later in its schedule";
  }
  if (failed(ensureReads(top)))
    return failure();
  builder.clone(*top, mapping);
  return success();
}

LogicalResult PipelineBuilder::StageWriter::ensureReads(Operation *op) {
  for (Value read : readsOf(op))
    if (failed(ensure(read, op)))
      return failure();
  return success();
}

void PipelineBuilder::StageWriter::exchangeBefore(int64_t index) {
  // Sends in the order their receivers take them, receives in the order
  // their senders send them (checkMessageOrder: one order per pair).
  SmallVector<const Crossing *> out, in;
  for (const Crossing &c : p.crossings) {
    if (c.from == stage && c.sendAt() == index)
      out.push_back(&c);
    if (c.to == stage && c.recvAt == index)
      in.push_back(&c);
  }
  llvm::stable_sort(out, [](const Crossing *a, const Crossing *b) {
    return std::make_pair(a->recvAt, a->tag) <
           std::make_pair(b->recvAt, b->tag);
  });
  llvm::stable_sort(in, [](const Crossing *a, const Crossing *b) {
    return std::make_pair(a->sendAt(), a->tag) <
           std::make_pair(b->sendAt(), b->tag);
  });
  SmallVector<Value> sends, received;
  SmallVector<int64_t> sendPeers, sendTags, recvPeers, recvTags;
  SmallVector<Type> recvTypes;
  for (const Crossing *c : out) {
    sends.push_back(mapping.lookup(c->value));
    sendPeers.push_back(c->to);
    sendTags.push_back(c->tag);
  }
  for (const Crossing *c : in) {
    received.push_back(c->value);
    recvTypes.push_back(c->value.getType());
    recvPeers.push_back(c->from);
    recvTags.push_back(c->tag);
  }
  if (sends.empty() && received.empty())
    return;
  auto exchange = createExchange(builder, p.step.getLoc(), sends, sendPeers,
                                 sendTags, recvTypes, recvPeers, recvTags);
  for (auto [value, result] : llvm::zip(received, exchange.getReceived()))
    mapping.map(value, result);
}

LogicalResult PipelineBuilder::StageWriter::writeUnits() {
  for (auto [index, unit] : llvm::enumerate(p.order[stage])) {
    exchangeBefore(index);
    for (Operation *op : p.unitOps[key(unit)]) {
      if (failed(ensureReads(op)))
        return failure();
      Operation *copy = builder.clone(*op, mapping);
      copy->setAttr(kMicroBatchAttrName,
                    builder.getI64IntegerAttr(unit.microBatch));
      if (p.virtualStages > 1)
        copy->setAttr(kChunkAttrName, builder.getI64IntegerAttr(unit.chunk));
    }
  }
  exchangeBefore(p.order[stage].size());
  return success();
}

void PipelineBuilder::stageGradients(
    int64_t stage, SmallVectorImpl<Value> &grads,
    SmallVectorImpl<TensorSplitAttr> &splits) const {
  ClipGradNormOp op = clip;
  for (auto [grad, split] : llvm::zip(op.getGrads(), clipSplits))
    if (stageOfValue(grad) == stage) {
      grads.push_back(grad);
      splits.push_back(split);
    }
}

int64_t PipelineBuilder::countWords(int64_t stage) const {
  SmallVector<Value> grads;
  SmallVector<TensorSplitAttr> splits;
  stageGradients(stage, grads, splits);
  llvm::SmallDenseSet<std::pair<Attribute, int64_t>> axes;
  bool whole = false;
  for (TensorSplitAttr split : splits) {
    if (split)
      axes.insert({split.getGrid(), split.getAxis()});
    else
      whole = true;
  }
  return static_cast<int64_t>(axes.size()) + (whole ? 1 : 0);
}

void PipelineBuilder::StageWriter::exchangeNorms() {
  ClipGradNormOp clip = p.clip;
  SmallVector<Value> grads, own;
  SmallVector<TensorSplitAttr> splits;
  p.stageGradients(stage, grads, splits);
  for (Value grad : grads)
    own.push_back(mapping.lookup(grad));
  // The stage's words: one squared norm, or (tensor parallelism) one per
  // axis its split gradients lie on, summed over its group, and one of its
  // whole gradients.
  SmallVector<Value> mine = buildSplitSquaredNorms(builder, clip.getLoc(), own,
                                                   splits, /*withWhole=*/true);
  assert(static_cast<int64_t>(mine.size()) == p.normWords[stage] &&
         "a stage's words as countWords counts them");
  llvm::append_range(words, mine);
  // Tags per ordered pair of stages and word, after the crossings'.
  int64_t most = *llvm::max_element(p.normWords);
  auto tagOf = [&](int64_t from, int64_t to, int64_t word) {
    return static_cast<int64_t>(p.crossings.size()) +
           (from * p.stages + to) * most + word;
  };
  SmallVector<Value> sends;
  SmallVector<int64_t> sendPeers, sendTags, recvPeers, recvTags;
  SmallVector<Type> types;
  for (int64_t peer = 0; peer < p.stages; ++peer) {
    if (peer == stage)
      continue;
    for (auto [word, norm] : llvm::enumerate(mine)) {
      sends.push_back(norm);
      sendPeers.push_back(peer);
      sendTags.push_back(tagOf(stage, peer, word));
    }
    for (int64_t word = 0, e = p.normWords[peer]; word < e; ++word) {
      types.push_back(mine.front().getType());
      recvPeers.push_back(peer);
      recvTags.push_back(tagOf(peer, stage, word));
    }
  }
  if (sendPeers.empty())
    return;
  auto exchange = createExchange(builder, clip.getLoc(), sends, sendPeers,
                                 sendTags, types, recvPeers, recvTags);
  llvm::append_range(words, exchange.getReceived());
}

LogicalResult PipelineBuilder::StageWriter::clonePost(Operation *op) {
  if (auto block = dyn_cast<BlockOp>(op))
    return cloneBlock(block);
  auto clipOp = dyn_cast<ClipGradNormOp>(op);
  if (!clipOp) {
    if (failed(ensureReads(op)))
      return failure();
    builder.clone(*op, mapping);
    return success();
  }
  // The gradients this stage updates, clipped by the stages' words.
  SmallVector<Value> grads;
  SmallVector<unsigned> kept;
  for (auto [index, grad] : llvm::enumerate(clipOp.getGrads())) {
    if (!seen.contains(clipOp.getResult(index)))
      continue;
    if (failed(ensure(grad, op)))
      return failure();
    grads.push_back(mapping.lookup(grad));
    kept.push_back(index);
  }
  auto copy = ClipGradNormOp::create(builder, clipOp.getLoc(), grads, words,
                                     clipOp.getMaxNormAttr());
  for (auto [index, from] : llvm::enumerate(kept))
    mapping.map(clipOp.getClipped()[from], copy.getClipped()[index]);
  mapping.map(clipOp.getNorm(), copy.getNorm());
  return success();
}

LogicalResult PipelineBuilder::StageWriter::cloneBlock(BlockOp block) {
  Operation *yield = block.getBody().front().getTerminator();
  SmallVector<unsigned> kept;
  SmallVector<Type> types;
  for (OpResult result : block->getResults())
    if (seen.contains(result)) {
      kept.push_back(result.getResultNumber());
      types.push_back(result.getType());
    }
  auto copy =
      BlockOp::create(builder, block.getLoc(), types, block.getKindAttr(),
                      block.getLayerAttr(), block.getBackwardAttr());
  copy->setDiscardableAttrs(block->getDiscardableAttrDictionary());
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToEnd(&copy.getBody().emplaceBlock());
  for (Operation &inner : block.getBody().front().without_terminator())
    if (needed.contains(&inner) && failed(clonePost(&inner)))
      return failure();
  SmallVector<Value> yielded;
  for (unsigned index : kept)
    yielded.push_back(mapping.lookup(yield->getOperand(index)));
  YieldOp::create(builder, yield->getLoc(), yielded);
  for (auto [index, from] : llvm::enumerate(kept))
    mapping.map(block->getResult(from), copy->getResult(index));
  return success();
}

LogicalResult PipelineBuilder::StageWriter::writeUpdate() {
  if (p.clip && needed.contains(p.clip.getOperation()))
    exchangeNorms();
  for (Operation *op : p.postOps)
    if (needed.contains(op) && failed(clonePost(op)))
      return failure();
  SmallVector<Value> returned;
  for (unsigned result : results) {
    Value value = p.ret.getOperand(result);
    if (failed(ensure(value, p.ret)))
      return failure();
    returned.push_back(mapping.lookup(value));
  }
  func::ReturnOp::create(builder, p.ret.getLoc(), returned);
  return success();
}

FailureOr<func::FuncOp> PipelineBuilder::StageWriter::write() {
  func = createFunction();
  if (failed(writeUnits()) || failed(writeUpdate()))
    return failure();
  // The arguments this stage never reads go, but the inputs: every stage
  // is a step a runner feeds the batch and the step counter.
  llvm::BitVector unused(func.getNumArguments());
  for (BlockArgument arg : func.getArguments())
    if (arg.use_empty() && !func.getArgAttr(arg.getArgNumber(), kInputAttrName))
      unused.set(arg.getArgNumber());
  if (failed(func.eraseArguments(unused)))
    return failure();
  return func;
}

FailureOr<func::FuncOp> PipelineBuilder::buildStage(int64_t stage) {
  return StageWriter(*this, stage).write();
}

/// How each gradient the clip reads is split: its parameter's split (after
/// moveTensorAxis).
void PipelineBuilder::findClipSplits() {
  if (!clip)
    return;
  clipSplits.assign(clip.getGrads().size(), TensorSplitAttr());
  for (auto [index, clipped] : llvm::enumerate(clip.getClipped()))
    for (Operation *user : clipped.getUsers())
      if (auto update = dyn_cast<OptimizerUpdateOpInterface>(user);
          update && update.getGradient() == clipped)
        clipSplits[index] = getTensorSplit(step, update.getUpdatedParam());
}

/// A tensor-parallel step: its grid (data, tensor) gains the pipeline's
/// axis between the two, (data, pipeline, tensor), Megatron's layout: a
/// tensor group's ranks are consecutive (one node's), a stage's peer is a
/// group's size away (rank = (data x stages + stage) x tensor + position).
/// The splits and collectives on the grid's tensor axis move one axis on.
LogicalResult PipelineBuilder::moveTensorAxis() {
  if (!tensorGrid)
    return success();
  auto module = step->getParentOfType<ModuleOp>();
  auto grid =
      SymbolTable::lookupNearestSymbolFrom<shard::GridOp>(step, tensorGrid);
  if (!grid || grid.getShape().size() != 2)
    return step.emitError("train-pipeline: the tensor-parallel grid ")
           << tensorGrid
           << " is not a (data, tensor) grid of two axes: stages of "
              "tensor-parallel steps take one cut by train-tensor-parallel "
              "alone";
  SmallVector<int64_t> shape(grid.getShape());
  shape.insert(shape.begin() + 1, stages);
  grid.setShape(shape);
  MLIRContext *context = step.getContext();
  AttrTypeReplacer replacer;
  replacer.addReplacement(
      [&](TensorSplitAttr split) -> std::optional<Attribute> {
        if (split.getGrid() != tensorGrid || split.getAxis() < 1)
          return split;
        return TensorSplitAttr::get(context, split.getDim(), split.getParts(),
                                    split.getGrid(), split.getAxis() + 1,
                                    split.getOrder());
      });
  replacer.recursivelyReplaceElementsIn(module, /*replaceAttrs=*/true,
                                        /*replaceLocs=*/false,
                                        /*replaceTypes=*/false);
  // The collectives on the grid (shard's and train's: a `grid` and its
  // `grid_axes`).
  module.walk([&](Operation *op) {
    auto ref = op->getAttrOfType<FlatSymbolRefAttr>("grid");
    auto axes = op->getAttrOfType<DenseI16ArrayAttr>("grid_axes");
    if (!ref || ref != tensorGrid || !axes)
      return;
    SmallVector<int16_t> moved;
    for (int16_t axis : axes.asArrayRef())
      moved.push_back(axis >= 1 ? axis + 1 : axis);
    op->setAttr("grid_axes", DenseI16ArrayAttr::get(context, moved));
  });
  return success();
}

LogicalResult PipelineBuilder::run(int64_t microBatchesAsked) {
  SmallVector<AccumulateOp> loops;
  step.walk([&](AccumulateOp loop) { loops.push_back(loop); });
  if (loops.size() != 1 || loops.front()->getParentOp() != step)
    return step.emitError("train-pipeline: @")
           << step.getSymName()
           << " needs its batch split into micro-batches by one "
              "train.accumulate (train-grad-accum{steps=m}), found "
           << loops.size();
  AccumulateOp loop = loops.front();
  microBatches = loop.getStepsAttr().getInt();
  if (microBatchesAsked != 0 && microBatchesAsked != microBatches)
    return loop.emitOpError("train-pipeline: micro-batches=")
           << microBatchesAsked << " but the step's loop runs " << microBatches
           << " (train-grad-accum{steps=...})";
  if (schedule != PipelineSchedule::gpipe && microBatches < stages)
    return loop.emitOpError("train-pipeline: ")
           << (schedule == PipelineSchedule::interleaved ? "the interleaved"
                                                         : "1F1B")
           << " schedule needs at least as many micro-batches as stages ("
           << microBatches << " < " << stages
           << "): more micro-batches (train-grad-accum{steps=...}), fewer "
              "stages, or schedule=gpipe";
  if (schedule == PipelineSchedule::interleaved && microBatches % stages != 0)
    return loop.emitOpError("train-pipeline: the interleaved schedule runs "
                            "micro-batches in groups of the stages: ")
           << microBatches << " is not a multiple of " << stages;
  if (failed(checkSupported(loop)) || failed(assignLayers(loop)) ||
      failed(moveTensorAxis()))
    return failure();
  findClipSplits();
  order.resize(stages);
  unitIndex.resize(stages);
  for (int64_t stage = 0; stage < stages; ++stage) {
    order[stage] =
        pipelineSchedule(schedule, stage, stages, virtualStages, microBatches);
    for (auto [index, unit] : llvm::enumerate(order[stage]))
      unitIndex[stage][key(unit)] = index;
  }
  if (failed(unroll(loop)) || failed(placeOps()) || failed(assignResults()) ||
      failed(findCrossings()) || failed(placeExchanges()))
    return failure();
  if (clip)
    for (int64_t stage = 0; stage < stages; ++stage)
      normWords.push_back(countWords(stage));
  LLVM_DEBUG(llvm::dbgs() << "train-pipeline: @" << step.getSymName() << ": "
                          << layers << " layers in " << chunks << " chunks, "
                          << microBatches << " micro-batches, "
                          << crossings.size() << " crossing values\n");
  // Each normal parameter draws its initial values from the stream of its
  // place among the whole step's parameters.
  unsigned paramIndex = 0;
  for (unsigned i = 0, e = step.getNumArguments(); i < e; ++i) {
    if (!step.getArgAttr(i, kParamAttrName))
      continue;
    unsigned index = paramIndex++;
    auto init = step.getArgAttrOfType<InitAttr>(i, kInitAttrName);
    if (init && init.getKind() == InitKind::normal && init.getStream() < 0)
      step.setArgAttr(i, kInitAttrName,
                      InitAttr::get(step.getContext(), init.getKind(),
                                    init.getStd(), index));
  }
  SymbolTable symbols(step->getParentOfType<ModuleOp>());
  for (int64_t stage = 0; stage < stages; ++stage) {
    if (selectStage >= 0 && stage != selectStage)
      continue;
    FailureOr<func::FuncOp> built = buildStage(stage);
    if (failed(built))
      return failure();
    if (selectStage >= 0)
      (*built)->setAttr(kStepAttrName, UnitAttr::get(step.getContext()));
    symbols.insert(*built, step->getIterator());
  }
  step.erase();
  return success();
}

struct TrainPipelinePass
    : public impl::TrainPipelinePassBase<TrainPipelinePass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (stages < 1 || virtualStages < 1 || microBatches < 0) {
      module.emitError("train-pipeline: stages and virtual must be >= 1 and "
                       "micro-batches >= 0, got stages=")
          << static_cast<int64_t>(stages)
          << ", virtual=" << static_cast<int64_t>(virtualStages)
          << ", micro-batches=" << static_cast<int64_t>(microBatches);
      return signalPassFailure();
    }
    if (virtualStages > 1 && schedule != PipelineSchedule::interleaved) {
      module.emitError("train-pipeline: virtual=")
          << static_cast<int64_t>(virtualStages)
          << " chunks per stage are the interleaved schedule's "
             "(schedule=interleaved)";
      return signalPassFailure();
    }
    if (selectStage >= stages) {
      module.emitError("train-pipeline: select-stage=")
          << static_cast<int64_t>(selectStage) << " is not one of "
          << static_cast<int64_t>(stages) << " stages";
      return signalPassFailure();
    }
    func::FuncOp step = lookupStep(module, function, getArgument());
    if (!step || failed(checkStepPhases(step, getArgument())))
      return signalPassFailure();
    if (stages == 1 && virtualStages == 1)
      return;
    PipelineBuilder builder(step, stages, virtualStages, schedule, split,
                            balance, selectStage);
    if (failed(builder.run(microBatches)))
      return signalPassFailure();
  }
};

} // namespace
} // namespace train
} // namespace mlir
