//===- OffloadActivations.cpp - train-offload-activations -----------------===//
//
// Moves the activations a step saves for its backward to host memory: each
// chosen tensor (a forward block's result that a backward block reads) is
// copied out by a train.transfer after the block that makes it, and copied
// back before the backward of the layer `prefetch` layers after it (or
// right before its first reader), where the backward then reads the copy.
// The memory analysis places the host copies in the host arena; nothing
// the step computes changes.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Analysis/MemoryAnalysis.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Dialect/Train/Transforms/RegionUtils.h"
#include "trainmem/Dialect/Train/Transforms/StepPhases.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringExtras.h"

#include "trainmem/Debug/Debug.h"

#define DEBUG_TYPE "train-offload-activations"

namespace mlir {
namespace train {
#define GEN_PASS_DEF_TRAINOFFLOADACTIVATIONSPASS
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"

namespace {

/// A saved activation chosen to go to host memory.
struct Offload {
  /// The forward block's result the backward reads.
  OpResult value;
  int64_t layer;
  uint64_t bytes;
};

/// The op of `block` that holds `op` (itself or an ancestor), or null.
Operation *ancestorIn(Block *block, Operation *op) {
  return block->findAncestorOpInBlock(*op);
}

bool isBackwardBlock(Operation *op) {
  auto block = dyn_cast_or_null<BlockOp>(op);
  return block && block.getBackward();
}

bool isForwardBlock(Operation *op) {
  auto block = dyn_cast_or_null<BlockOp>(op);
  return block && !block.getBackward() &&
         block.getKind() != BlockKind::optimizer;
}

struct TrainOffloadActivationsPass
    : impl::TrainOffloadActivationsPassBase<TrainOffloadActivationsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    func::FuncOp func = lookupStep(module, "", getArgument());
    if (!func || failed(checkStepPhases(func, getArgument())) ||
        failed(checkOptions(func)))
      return signalPassFailure();
    FunctionMemory memory(func);
    if (failed(memory.checkCounts(getArgument())))
      return signalPassFailure();
    FailureOr<SmallVector<Offload>> chosen = choose(func, memory);
    if (failed(chosen))
      return signalPassFailure();
    for (const Offload &offload : *chosen)
      move(offload);
  }

  /// The layers of the step's forward (the largest layer index, plus one).
  static int64_t countLayers(func::FuncOp func) {
    int64_t layers = 0;
    func.walk([&](BlockOp block) {
      if (IntegerAttr layer = block.getLayerAttr())
        layers = std::max(layers, layer.getInt() + 1);
    });
    return layers;
  }

  LogicalResult checkOptions(func::FuncOp func) {
    int64_t numLayers = countLayers(func);
    auto fail = [&]() {
      return func.emitError(getArgument()) << ": @" << func.getSymName();
    };
    if (numLayers == 0)
      return fail() << " has no layers (train.block with a layer index) to "
                       "offload activations of";
    if (prefetch < 0)
      return fail() << ": prefetch=" << static_cast<int64_t>(prefetch)
                    << " is negative: give 0 (each tensor back right before "
                       "its reader) up to "
                    << numLayers - 1;
    if (prefetch >= numLayers)
      return fail() << ": prefetch=" << static_cast<int64_t>(prefetch)
                    << " is not below its " << numLayers
                    << " layers: give at most " << numLayers - 1
                    << " (0: each tensor back right before its reader)";
    if (minBytes < 0)
      return fail() << ": min-bytes=" << static_cast<int64_t>(minBytes)
                    << " is negative";
    for (int64_t layer : layers)
      if (layer < 0 || layer >= numLayers)
        return fail() << ": layers= names layer " << layer
                      << ", which it does not have (layers 0 to "
                      << numLayers - 1 << ")";
    return success();
  }

  /// The saved activations the options choose, in program order.
  FailureOr<SmallVector<Offload>> choose(func::FuncOp func,
                                         const FunctionMemory &memory) {
    bool recomputes = false;
    func.walk([&](Operation *op) {
      if (op->hasAttr(kRecomputeAttrName)) {
        recomputes = true;
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (what == OffloadActivationsWhat::checkpoints && !recomputes)
      return func.emitError(getArgument())
             << ": @" << func.getSymName()
             << " recomputes nothing, so it has no checkpoints "
                "(what=checkpoints "
                "offloads what a recompute reads): run train-remat and "
                "train-materialize-remat first, or offload every saved "
                "tensor with what=all";
    // The values through which the backward reads each buffer.
    llvm::DenseMap<const Buffer *, llvm::SmallPtrSet<Value, 2>> readVia;
    for (Operation *op : memory.getSchedule()) {
      if (memory.getPhase(op) != Phase::Backward)
        continue;
      for (Value operand : op->getOperands())
        if (const Buffer *buffer = memory.lookupBuffer(operand))
          readVia[buffer].insert(operand);
    }
    SmallVector<Offload> chosen;
    func.walk([&](BlockOp block) {
      if (!isForwardBlock(block))
        return;
      for (OpResult result : block->getResults()) {
        const Buffer *buffer = memory.lookupBuffer(result);
        if (!buffer || buffer->host ||
            buffer->category != MemoryCategory::Activations || !buffer->layer ||
            buffer->bytes < static_cast<uint64_t>(minBytes))
          continue;
        if (!layers.empty() && !llvm::is_contained(layers, *buffer->layer))
          continue;
        // The backward reads it through this result, or through views it
        // makes of it (which then view the copy); a view the forward made
        // would keep the device tensor.
        auto via = readVia.find(buffer);
        if (via == readVia.end() || !via->second.contains(result) ||
            llvm::any_of(via->second, [&](Value read) {
              Operation *def = read.getDefiningOp();
              return read != result &&
                     (!def || memory.getPhase(def) != Phase::Backward);
            }))
          continue;
        if (what == OffloadActivationsWhat::checkpoints &&
            llvm::none_of(result.getUsers(), [](Operation *user) {
              return user->hasAttr(kRecomputeAttrName);
            }))
          continue;
        chosen.push_back({result, *buffer->layer, buffer->bytes});
      }
    });
    if (chosen.empty()) {
      SmallVector<std::string> names;
      for (int64_t layer : layers)
        names.push_back(std::to_string(layer));
      return func.emitError(getArgument())
             << ": @" << func.getSymName()
             << " saves no activation these options choose (what="
             << (what == OffloadActivationsWhat::all ? "all" : "checkpoints")
             << ", min-bytes=" << static_cast<int64_t>(minBytes)
             << (names.empty() ? "" : ", layers=" + llvm::join(names, ","))
             << ")";
    }
    return chosen;
  }

  /// The first backward block (an op of the producer's block) that reads
  /// `offload`, or null.
  static Operation *firstReaderOf(const Offload &offload) {
    Block *level = offload.value.getOwner()->getBlock();
    Operation *firstReader = nullptr;
    for (Operation *user : offload.value.getUsers()) {
      Operation *top = ancestorIn(level, user);
      if (!top || !isBackwardBlock(top))
        continue;
      if (!firstReader || top->isBeforeInBlock(firstReader))
        firstReader = top;
    }
    return firstReader;
  }

  /// Where an asynchronous copy out of `offload` has finished: after the
  /// first forward block after its producer (the copy overlaps it), else
  /// at once.
  static Operation *copiedOutAfter(const Offload &offload,
                                   Operation *transfer) {
    for (Operation *op = transfer->getNextNode(); op; op = op->getNextNode()) {
      if (isForwardBlock(op))
        return op;
      if (isBackwardBlock(op))
        break;
    }
    return transfer;
  }

  /// Where the copy of `offload` comes back: before the backward of layer
  /// layer + prefetch (the backward's first block where that layer has
  /// none), and never after its first reader. Only blocks after the one
  /// that makes it count: a step unrolled over micro-batches repeats the
  /// forward and the backward.
  Operation *reloadPoint(const Offload &offload) {
    Operation *producer = offload.value.getOwner();
    Block *level = producer->getBlock();
    Operation *firstReader = firstReaderOf(offload);
    if (prefetch == 0 || !firstReader)
      return firstReader;
    Operation *target = nullptr, *firstBackward = nullptr;
    for (Operation &op :
         llvm::make_range(std::next(producer->getIterator()), level->end())) {
      if (!isBackwardBlock(&op))
        continue;
      if (!firstBackward)
        firstBackward = &op;
      IntegerAttr layer = cast<BlockOp>(op).getLayerAttr();
      if (layer && layer.getInt() == offload.layer + prefetch) {
        target = &op;
        break;
      }
    }
    if (!target)
      target = firstBackward;
    if (!target || firstReader->isBeforeInBlock(target))
      return firstReader;
    return target;
  }

  void move(const Offload &offload) {
    Operation *producer = offload.value.getOwner();
    Block *level = producer->getBlock();
    Operation *reload = reloadPoint(offload);
    if (!reload)
      return;
    OpBuilder builder(producer->getContext());
    Location loc = offload.value.getLoc();
    builder.setInsertionPointAfter(producer);
    auto out = TransferOp::create(
        builder, loc, offload.value,
        SpaceAttr::get(builder.getContext(), MemorySpace::host));
    builder.setInsertionPoint(reload);
    auto back = TransferOp::create(
        builder, loc, out.getResult(),
        SpaceAttr::get(builder.getContext(), MemorySpace::device));
    Value saved = offload.value;
    saved.replaceUsesWithIf(back.getResult(), [&](OpOperand &use) {
      Operation *top = ancestorIn(level, use.getOwner());
      return top && top != out && isBackwardBlock(top);
    });
    if (async) {
      // Out: finished after the next forward block; back: right before
      // its first reader.
      builder.setInsertionPointAfter(copiedOutAfter(offload, out));
      TransferWaitOp::create(builder, loc, out.getResult());
      Operation *reader = nullptr;
      for (Operation *user : back.getResult().getUsers())
        if (Operation *top = ancestorIn(level, user);
            top && (!reader || top->isBeforeInBlock(reader)))
          reader = top;
      if (reader)
        builder.setInsertionPoint(reader);
      else
        builder.setInsertionPointAfter(back);
      TransferWaitOp::create(builder, loc, back.getResult());
    }
    LLVM_DEBUG(llvm::dbgs()
               << DEBUG_TYPE << ": layer " << offload.layer << ", "
               << offload.bytes << " B to host after '" << producer->getName()
               << "', back before '" << reload->getName() << "' ("
               << (isa<BlockOp>(reload) && cast<BlockOp>(reload).getLayerAttr()
                       ? "layer " +
                             std::to_string(
                                 cast<BlockOp>(reload).getLayerAttr().getInt())
                       : std::string("its reader"))
               << ")\n");
  }
};

} // namespace
} // namespace train
} // namespace mlir
