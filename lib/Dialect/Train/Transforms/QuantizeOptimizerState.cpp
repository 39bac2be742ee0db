//===- QuantizeOptimizerState.cpp - train-quantize-optimizer-state --------===//
//
// AdamW's m and v and SGD's momentum buffer, arguments and results of the
// step, become block-wise 8-bit codes plus one f32 absmax per block, and
// the update becomes the fused train.adamw_8bit / train.sgd_8bit. The new values leave the optimizer block through
// exportEscapingValues; the f32 state results it no longer reads are pruned.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Dialect/Train/Transforms/RegionUtils.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/StringSet.h"

#include <numeric>

#include "trainmem/Debug/Debug.h"

#define DEBUG_TYPE "train-quantize-optimizer-state"

namespace mlir {
namespace train {
#define GEN_PASS_DEF_TRAINQUANTIZEOPTIMIZERSTATEPASS
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"

namespace {

/// One state tensor (m, v or a momentum buffer) of one update being
/// quantized.
struct QuantizedState {
  BlockArgument oldArg;
  StateAttr state;     // the f32 state's marker
  bool isSigned;       // m, momentum: signed map; v: unsigned
  Value codes, absmax; // the new arguments
  Value oldResult;     // the f32 state after the update
  Value newCodes, newAbsmax; // the fused update's results
  Type codesShardOf, absmaxShardOf; // full types, for a rank's shard
  Attribute space; // the f32 state's memory (train-offload-optimizer first)
};

/// `{train.optimizer_state = #train.state<...>}`, `train.shard_of =
/// shardOf` where the state is one rank's shard (train-zero ran first), and
/// `train.memory_space = space` where the f32 state was placed (the 8-bit
/// state stays where train-offload-optimizer put the f32 one).
DictionaryAttr stateAttrs(MLIRContext *ctx, StateAttr state,
                          Type shardOf = Type(), Attribute space = {}) {
  SmallVector<NamedAttribute, 3> attrs{
      NamedAttribute(StringAttr::get(ctx, kOptimizerStateAttrName), state)};
  if (shardOf)
    attrs.push_back(NamedAttribute(StringAttr::get(ctx, kShardOfAttrName),
                                   TypeAttr::get(shardOf)));
  if (space)
    attrs.push_back(
        NamedAttribute(StringAttr::get(ctx, kMemorySpaceAttrName), space));
  return DictionaryAttr::get(ctx, attrs);
}

/// `codes`/`absmax` read back as f32 of `type` (signed or unsigned map).
Value dequantize(OpBuilder &builder, Location loc, Type type, Value codes,
                 Value absmax, int64_t block, bool isSigned) {
  return DequantizeOp::create(builder, loc, type, codes, absmax,
                              builder.getI64IntegerAttr(block),
                              isSigned ? builder.getUnitAttr() : UnitAttr())
      .getResult();
}

struct TrainQuantizeOptimizerStatePass
    : impl::TrainQuantizeOptimizerStatePassBase<
          TrainQuantizeOptimizerStatePass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (block < 1 || (block & (block - 1)) != 0) {
      emitError(module.getLoc(), "train-quantize-optimizer-state: block must "
                                 "be a power of two, got ")
          << static_cast<int64_t>(block);
      return signalPassFailure();
    }
    if (minSize < 0) {
      emitError(module.getLoc(),
                "train-quantize-optimizer-state: min-size must be >= 0, got ")
          << static_cast<int64_t>(minSize);
      return signalPassFailure();
    }
    func::FuncOp func =
        lookupStep(module, function, "train-quantize-optimizer-state");
    if (!func)
      return signalPassFailure();
    if (failed(quantize(func)))
      return signalPassFailure();
  }

  /// The entry-block argument `value` is, if it is marked optimizer state.
  FailureOr<BlockArgument> stateArgument(func::FuncOp func, Operation *op,
                                         Value value, StringRef which) {
    auto arg = dyn_cast<BlockArgument>(value);
    if (arg && arg.getOwner() == &func.front() &&
        func.getArgAttrOfType<StateAttr>(arg.getArgNumber(),
                                         kOptimizerStateAttrName))
      return arg;
    return op->emitError("train-quantize-optimizer-state: the update's ")
           << which << " is not an argument of @" << func.getName()
           << " marked " << kOptimizerStateAttrName
           << "; only state the step reads and returns can be stored in 8 "
              "bits";
  }

  /// One f32 state tensor of an update: what it is called in diagnostics,
  /// its value before and after, and its map.
  struct StateUse {
    std::string which;
    Value before, after;
    bool isSigned;
  };

  /// The f32 states of an update this pass can store in 8 bits (those of an
  /// update with an 8-bit form, e.g. AdamW's m and v, SGD's momentum
  /// buffer). Empty for updates without state or already 8-bit.
  static SmallVector<StateUse> statesOf(OptimizerUpdateOpInterface update) {
    SmallVector<StateUse> uses;
    Operation *op = update.getOperation();
    for (const OptimizerStateUse &use : update.getStateUses()) {
      if (use.part != StatePart::value)
        return {};
      std::string which = stringifyStateKind(use.kind).str();
      if (use.kind == StateKind::momentum)
        which = "momentum buffer";
      uses.push_back({which, op->getOperand(use.operandIndex),
                      op->getResult(use.resultIndex),
                      quantMapFor(use.kind) == QuantMap::signed_dynamic});
    }
    return uses;
  }

  /// The new arguments, gathered so that all go in one insertion (one per
  /// argument would rebuild, and the context keep, an array of all the
  /// arguments' attributes each time: quadratic in the model's size).
  struct Insertions {
    SmallVector<unsigned> at;
    SmallVector<Type> types;
    SmallVector<DictionaryAttr> attrs;
    SmallVector<Location> locs;
  };
  /// An update to fuse, its 8-bit states, and their insertions (2 per
  /// state: codes, absmax).
  struct Pending {
    OptimizerUpdateOpInterface update;
    SmallVector<QuantizedState> quantized;
    SmallVector<unsigned> insertions;
  };
  /// What quantize() builds, step by step.
  struct Quantization {
    func::FuncOp func;
    DenseSet<Value> seen;
    SmallVector<Pending> pending;
    Insertions inserts;
    SmallVector<unsigned> newPosition;
    SmallVector<QuantizedState> states;
    SmallVector<Operation *> replaced;
    DenseMap<Value, unsigned> stateOfResult; // f32 result -> states index
  };

  /// The updates whose f32 state is stored in 8 bits: those with such
  /// state, of at least min-size elements (the whole tensor's size, also
  /// where a rank holds a shard of its state: train-zero first).
  SmallVector<OptimizerUpdateOpInterface> selectUpdates(func::FuncOp func) {
    SmallVector<OptimizerUpdateOpInterface> updates;
    func.walk([&](OptimizerUpdateOpInterface update) {
      if (statesOf(update).empty())
        return;
      auto param = cast<RankedTensorType>(update.getUpdatedParam().getType());
      int64_t elements = param.getNumElements();
      if (auto state = dyn_cast<BlockArgument>(statesOf(update)[0].before))
        if (auto full = func.getArgAttrOfType<TypeAttr>(state.getArgNumber(),
                                                        kShardOfAttrName))
          elements = cast<RankedTensorType>(full.getValue()).getNumElements();
      LLVM_DEBUG(llvm::dbgs()
                 << "train-quantize-optimizer-state: '" << update->getName()
                 << "' at " << update->getLoc() << ": " << elements
                 << " elements, "
                 << (elements >= minSize ? "8-bit state" : "kept in f32")
                 << " (min-size " << minSize << ")\n");
      if (elements >= minSize)
        updates.push_back(update);
    });
    return updates;
  }

  /// What one update's 8-bit state is: its codes and absmax arguments,
  /// planned right after the f32 ones they replace.
  LogicalResult planUpdate(Quantization &q, OptimizerUpdateOpInterface update) {
    func::FuncOp func = q.func;
    MLIRContext *ctx = func.getContext();
    Type i8 = IntegerType::get(ctx, 8);
    Type f32 = Float32Type::get(ctx);
    Operation *op = update.getOperation();
    SmallVector<StateUse> uses = statesOf(update);
    SmallVector<BlockArgument> args;
    for (const StateUse &use : uses) {
      FailureOr<BlockArgument> arg =
          stateArgument(func, op, use.before, use.which);
      if (failed(arg))
        return failure();
      if (!q.seen.insert(*arg).second)
        return op->emitError("train-quantize-optimizer-state: the update "
                             "shares its state with another update");
      args.push_back(*arg);
    }
    auto paramType = cast<RankedTensorType>(update.getUpdatedParam().getType());
    int64_t elements = paramType.getNumElements();
    auto codesType = RankedTensorType::get(paramType.getShape(), i8);
    auto absmaxType =
        RankedTensorType::get({(elements + block - 1) / block}, f32);
    Pending &next = q.pending.emplace_back();
    next.update = update;
    for (auto [use, arg] : llvm::zip(uses, args)) {
      auto state = func.getArgAttrOfType<StateAttr>(arg.getArgNumber(),
                                                    kOptimizerStateAttrName);
      if (state.isQuantized())
        return op->emitError("train-quantize-optimizer-state: the update's ")
               << use.which << " is already 8-bit (" << state << ")";
      QuantMap map =
          use.isSigned ? QuantMap::signed_dynamic : QuantMap::unsigned_dynamic;
      // A rank's shard (train-zero first): its blocks are the whole
      // tensor's when the shard is whole blocks.
      Type codesShardOf, absmaxShardOf;
      if (auto full = func.getArgAttrOfType<TypeAttr>(arg.getArgNumber(),
                                                      kShardOfAttrName)) {
        auto fullType = cast<RankedTensorType>(full.getValue());
        if (elements % block != 0)
          return op->emitError("train-quantize-optimizer-state: the rank's ")
                 << use.which << " is a shard of " << elements
                 << " elements (train-zero), not whole blocks of "
                 << static_cast<int64_t>(block) << ": use a block that divides "
                 << elements
                 << ", or run train-quantize-optimizer-state before "
                    "train-zero (which shards the blocks whole)";
        codesShardOf = RankedTensorType::get(fullType.getShape(), i8);
        absmaxShardOf = RankedTensorType::get(
            {(fullType.getNumElements() + block - 1) / block}, f32);
      }
      unsigned index = arg.getArgNumber() + 1;
      Attribute space =
          func.getArgAttr(arg.getArgNumber(), kMemorySpaceAttrName);
      for (auto [type, part, shardOf] :
           {std::tuple{Type(codesType), StatePart::codes, codesShardOf},
            std::tuple{Type(absmaxType), StatePart::absmax, absmaxShardOf}}) {
        next.insertions.push_back(q.inserts.at.size());
        q.inserts.at.push_back(index);
        q.inserts.types.push_back(type);
        q.inserts.attrs.push_back(
            stateAttrs(ctx, state.withPart(part, map, block), shardOf, space));
        q.inserts.locs.push_back(arg.getLoc());
      }
      next.quantized.push_back({arg, state, use.isSigned, Value(), Value(),
                                use.after, Value(), Value(), codesShardOf,
                                absmaxShardOf, space});
    }
    return success();
  }

  /// One insertion: the k-th new argument in order of position lands at
  /// its position plus the k inserted before it.
  LogicalResult insertArguments(Quantization &q) {
    const Insertions &in = q.inserts;
    SmallVector<unsigned> order(in.at.size());
    std::iota(order.begin(), order.end(), 0u);
    llvm::stable_sort(
        order, [&](unsigned a, unsigned b) { return in.at[a] < in.at[b]; });
    Insertions sorted;
    q.newPosition.assign(in.at.size(), 0);
    for (auto [rank, k] : llvm::enumerate(order)) {
      sorted.at.push_back(in.at[k]);
      sorted.types.push_back(in.types[k]);
      sorted.attrs.push_back(in.attrs[k]);
      sorted.locs.push_back(in.locs[k]);
      q.newPosition[k] = in.at[k] + static_cast<unsigned>(rank);
    }
    if (failed(q.func.insertArguments(sorted.at, sorted.types, sorted.attrs,
                                      sorted.locs)))
      return q.func.emitError("train-quantize-optimizer-state: cannot add the "
                              "8-bit state arguments");
    return success();
  }

  /// The update replaced by its 8-bit form, reading the new arguments.
  LogicalResult fuse(Quantization &q, Pending &next) {
    OptimizerUpdateOpInterface update = next.update;
    Operation *op = update.getOperation();
    SmallVector<QuantizedState> &quantized = next.quantized;
    for (auto [k, state] : llvm::enumerate(quantized)) {
      state.codes = q.func.getArgument(q.newPosition[next.insertions[2 * k]]);
      state.absmax =
          q.func.getArgument(q.newPosition[next.insertions[2 * k + 1]]);
    }
    OpBuilder builder(op);
    SmallVector<Value> codes, absmax;
    for (const QuantizedState &state : quantized) {
      codes.push_back(state.codes);
      absmax.push_back(state.absmax);
    }
    Operation *fused = update.buildBlockwise8bit(builder, codes, absmax, block);
    if (!fused)
      return op->emitError("train-quantize-optimizer-state: '")
             << op->getName() << "' has no 8-bit form";
    // An update that runs on the host (what=states+update) still does.
    if (Attribute space = op->getAttr(kMemorySpaceAttrName))
      fused->setAttr(kMemorySpaceAttrName, space);
    update.getNewParamValue().replaceAllUsesWith(fused->getResult(0));
    for (auto [k, state] : llvm::enumerate(quantized)) {
      state.newCodes = fused->getResult(1 + 2 * k);
      state.newAbsmax = fused->getResult(2 + 2 * k);
      q.stateOfResult[state.oldResult] = q.states.size();
      q.states.push_back(state);
    }
    q.replaced.push_back(op);
    ++numQuantized;
    return success();
  }

  /// Results carrying the f32 state out of the step carry codes and
  /// absmax; the values cross region boundaries directly until exported.
  void rewriteResults(Quantization &q) {
    func::FuncOp func = q.func;
    MLIRContext *ctx = func.getContext();
    auto ret = cast<func::ReturnOp>(func.front().getTerminator());
    SmallVector<Value> results;
    SmallVector<DictionaryAttr> resultAttrs;
    for (auto [r, operand] : llvm::enumerate(ret.getOperands())) {
      auto it = q.stateOfResult.find(resolveRegionResult(operand));
      if (it == q.stateOfResult.end()) {
        results.push_back(operand);
        resultAttrs.push_back(func.getResultAttrDict(r));
        continue;
      }
      const QuantizedState &state = q.states[it->second];
      QuantMap map = state.isSigned ? QuantMap::signed_dynamic
                                    : QuantMap::unsigned_dynamic;
      for (auto [value, part, shardOf] :
           {std::tuple{state.newCodes, StatePart::codes, state.codesShardOf},
            std::tuple{state.newAbsmax, StatePart::absmax,
                       state.absmaxShardOf}}) {
        results.push_back(value);
        resultAttrs.push_back(stateAttrs(
            ctx, state.state.withPart(part, map, block), shardOf, state.space));
      }
    }
    setStepResults(func, results, resultAttrs);
    exportEscapingValues(func);
    pruneUnusedResults(func);
  }

  /// Anything else reading the f32 values reads them dequantized; the
  /// replaced updates and the f32 arguments go.
  LogicalResult dropFloatState(Quantization &q) {
    func::FuncOp func = q.func;
    for (QuantizedState &state : q.states) {
      if (state.oldResult.use_empty())
        continue;
      OpBuilder builder(func.getContext());
      builder.setInsertionPointAfter(state.newCodes.getDefiningOp());
      state.oldResult.replaceAllUsesWith(
          dequantize(builder, state.newCodes.getLoc(),
                     state.oldResult.getType(), state.newCodes,
                     state.newAbsmax, block, state.isSigned));
    }
    for (Operation *op : q.replaced)
      op->erase();
    llvm::BitVector dropArgs(func.getNumArguments());
    for (QuantizedState &state : q.states) {
      if (!state.oldArg.use_empty()) {
        OpBuilder builder = OpBuilder::atBlockBegin(&func.front());
        state.oldArg.replaceAllUsesWith(dequantize(
            builder, state.oldArg.getLoc(), state.oldArg.getType(),
            state.codes, state.absmax, block, state.isSigned));
      }
      dropArgs.set(state.oldArg.getArgNumber());
    }
    if (failed(func.eraseArguments(dropArgs)))
      return func.emitError("train-quantize-optimizer-state: cannot remove "
                            "the f32 state arguments");
    return success();
  }

  /// First what each update's 8-bit state is, then every new argument in
  /// one insertion, then the fused updates, the results, and the f32 state
  /// gone.
  LogicalResult quantize(func::FuncOp func) {
    SmallVector<OptimizerUpdateOpInterface> updates = selectUpdates(func);
    if (updates.empty())
      return success();
    Quantization q;
    q.func = func;
    for (OptimizerUpdateOpInterface update : updates)
      if (failed(planUpdate(q, update)))
        return failure();
    if (failed(insertArguments(q)))
      return failure();
    for (Pending &next : q.pending)
      if (failed(fuse(q, next)))
        return failure();
    rewriteResults(q);
    if (failed(dropFloatState(q)))
      return failure();
    return followInHessianStep(func, q);
  }

  /// The step's Hessian step (Sophia) refreshes the estimates h the step
  /// now keeps in 8 bits: it reads and returns them in 8 bits too, each
  /// dequantized right before its refresh and quantized right after (one
  /// tensor in f32 at a time), on the same map and blocks.
  LogicalResult followInHessianStep(func::FuncOp step, const Quantization &q) {
    func::FuncOp hessian = findHessianStep(step);
    if (!hessian)
      return success();
    llvm::StringSet<> quantizedH;
    for (const QuantizedState &state : q.states)
      if (state.state.getKind() == StateKind::h) {
        if (state.codesShardOf)
          return step.emitError("train-quantize-optimizer-state: the Hessian "
                                "step of a partitioned step cannot follow "
                                "its 8-bit estimates");
        quantizedH.insert(state.state.getParam());
      }
    if (quantizedH.empty())
      return success();
    FailureOr<SmallVector<BlockArgument>> oldArgs =
        encodeHessianArguments(hessian, quantizedH);
    if (failed(oldArgs))
      return failure();
    encodeHessianResults(hessian, quantizedH);
    llvm::BitVector dropArgs(hessian.getNumArguments());
    for (BlockArgument arg : *oldArgs)
      dropArgs.set(arg.getArgNumber());
    if (failed(hessian.eraseArguments(dropArgs)))
      return hessian.emitError("train-quantize-optimizer-state: cannot remove "
                               "the f32 estimates");
    return success();
  }

  /// The Hessian step's f32 estimates that the step keeps in 8 bits become
  /// codes and block maxima arguments, dequantized right before their use;
  /// the f32 arguments, unused now, are returned for removal.
  FailureOr<SmallVector<BlockArgument>>
  encodeHessianArguments(func::FuncOp hessian,
                         const llvm::StringSet<> &quantizedH) {
    MLIRContext *ctx = hessian.getContext();
    Type i8 = IntegerType::get(ctx, 8), f32 = Float32Type::get(ctx);
    Insertions inserts;
    SmallVector<BlockArgument> oldArgs;
    for (BlockArgument arg : hessian.getArguments()) {
      auto state = hessian.getArgAttrOfType<StateAttr>(arg.getArgNumber(),
                                                       kOptimizerStateAttrName);
      if (!state || state.getKind() != StateKind::h ||
          !quantizedH.contains(state.getParam()))
        continue;
      auto type = cast<RankedTensorType>(arg.getType());
      int64_t elements = type.getNumElements();
      for (auto [elementType, part, shape] :
           {std::tuple{i8, StatePart::codes,
                       SmallVector<int64_t>(type.getShape())},
            std::tuple{f32, StatePart::absmax,
                       SmallVector<int64_t>{(elements + block - 1) / block}}}) {
        inserts.at.push_back(arg.getArgNumber() + 1);
        inserts.types.push_back(RankedTensorType::get(shape, elementType));
        inserts.attrs.push_back(stateAttrs(
            ctx, state.withPart(part, QuantMap::unsigned_dynamic, block)));
        inserts.locs.push_back(arg.getLoc());
      }
      oldArgs.push_back(arg);
    }
    if (failed(hessian.insertArguments(inserts.at, inserts.types, inserts.attrs,
                                       inserts.locs)))
      return hessian.emitError("train-quantize-optimizer-state: cannot add "
                               "the 8-bit state arguments");
    // Each old argument is followed by its codes and absmax now.
    for (BlockArgument arg : oldArgs) {
      Value codes = hessian.getArgument(arg.getArgNumber() + 1);
      Value absmax = hessian.getArgument(arg.getArgNumber() + 2);
      for (OpOperand &use : llvm::make_early_inc_range(arg.getUses())) {
        OpBuilder builder(use.getOwner());
        use.set(dequantize(builder, arg.getLoc(), arg.getType(), codes, absmax,
                           block, /*isSigned=*/false));
      }
    }
    return oldArgs;
  }

  /// Its refreshed estimates leave it quantized (one tensor at a time).
  void encodeHessianResults(func::FuncOp hessian,
                            const llvm::StringSet<> &quantizedH) {
    MLIRContext *ctx = hessian.getContext();
    Type i8 = IntegerType::get(ctx, 8), f32 = Float32Type::get(ctx);
    auto ret = cast<func::ReturnOp>(hessian.front().getTerminator());
    SmallVector<Value> results;
    SmallVector<DictionaryAttr> resultAttrs;
    for (auto [r, operand] : llvm::enumerate(ret.getOperands())) {
      auto state =
          hessian.getResultAttrOfType<StateAttr>(r, kOptimizerStateAttrName);
      if (!state || state.getKind() != StateKind::h ||
          !quantizedH.contains(state.getParam())) {
        results.push_back(operand);
        resultAttrs.push_back(hessian.getResultAttrDict(r));
        continue;
      }
      Value refreshed = resolveRegionResult(operand);
      OpBuilder builder(ctx);
      builder.setInsertionPointAfterValue(refreshed);
      auto type = cast<RankedTensorType>(refreshed.getType());
      int64_t elements = type.getNumElements();
      auto encode = QuantizeOp::create(
          builder, refreshed.getLoc(),
          RankedTensorType::get(type.getShape(), i8),
          RankedTensorType::get({(elements + block - 1) / block}, f32),
          refreshed, builder.getI64IntegerAttr(block), UnitAttr());
      for (auto [value, part] :
           {std::pair{encode.getCodes(), StatePart::codes},
            std::pair{encode.getAbsmax(), StatePart::absmax}}) {
        results.push_back(value);
        resultAttrs.push_back(stateAttrs(
            ctx, state.withPart(part, QuantMap::unsigned_dynamic, block)));
      }
    }
    setStepResults(hessian, results, resultAttrs);
    exportEscapingValues(hessian);
    pruneUnusedResults(hessian);
  }
};

} // namespace
} // namespace train
} // namespace mlir
