//===- QuantizeOptimizerState.cpp - train-quantize-optimizer-state --------===//
//
// AdamW's m and v, arguments and results of the step, become block-wise
// 8-bit codes plus one f32 absmax per block, and train.adamw becomes the
// fused train.adamw_8bit. The new values leave the optimizer block through
// exportEscapingValues; the f32 state results it no longer reads are pruned.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Dialect/Train/Transforms/RegionUtils.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/BitVector.h"

namespace mlir {
namespace train {
#define GEN_PASS_DEF_TRAINQUANTIZEOPTIMIZERSTATEPASS
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"

namespace {

/// One state tensor (m or v) of one AdamW update being quantized.
struct QuantizedState {
  BlockArgument oldArg;
  StringAttr name; // "<param>.m"
  bool isSigned;   // m: signed map; v: unsigned
  Value codes, absmax; // the new arguments
};

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
    auto func = module.lookupSymbol<func::FuncOp>(function);
    if (!func || func.isExternal()) {
      emitError(module.getLoc(), "train-quantize-optimizer-state: no function @")
          << function << " (run train-autodiff first)";
      return signalPassFailure();
    }
    if (failed(quantize(func)))
      return signalPassFailure();
  }

  /// The entry-block argument `value` is, if it is marked optimizer state.
  FailureOr<BlockArgument> stateArgument(func::FuncOp func, AdamWOp op,
                                         Value value, StringRef which) {
    auto arg = dyn_cast<BlockArgument>(value);
    if (arg && arg.getOwner() == &func.front() &&
        func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                          kOptimizerStateAttrName))
      return arg;
    return op.emitError("train-quantize-optimizer-state: the update's ")
           << which << " is not an argument of @" << func.getName()
           << " marked " << kOptimizerStateAttrName
           << "; only state the step reads and returns can be stored in 8 "
              "bits";
  }

  LogicalResult quantize(func::FuncOp func) {
    SmallVector<AdamWOp> updates;
    func.walk([&](AdamWOp op) {
      if (op.getParam().getType().getNumElements() >= minSize)
        updates.push_back(op);
    });
    if (updates.empty())
      return success();

    MLIRContext *ctx = func.getContext();
    Type i8 = IntegerType::get(ctx, 8);
    Type f32 = Float32Type::get(ctx);
    auto ret = cast<func::ReturnOp>(func.front().getTerminator());
    SmallVector<QuantizedState> states;
    SmallVector<std::pair<AdamWOp, AdamW8bitOp>> replaced;
    DenseMap<Value, std::tuple<StringAttr, Value, Value>> newState;
    DenseSet<Value> seen;

    for (AdamWOp op : updates) {
      FailureOr<BlockArgument> mArg = stateArgument(func, op, op.getM(), "m");
      if (failed(mArg))
        return failure();
      FailureOr<BlockArgument> vArg = stateArgument(func, op, op.getV(), "v");
      if (failed(vArg))
        return failure();
      if (!seen.insert(*mArg).second || !seen.insert(*vArg).second ||
          *mArg == *vArg)
        return op.emitError("train-quantize-optimizer-state: the update "
                            "shares its m or v with another update");

      auto paramType = op.getParam().getType();
      int64_t elements = paramType.getNumElements();
      auto codesType = RankedTensorType::get(paramType.getShape(), i8);
      auto absmaxType =
          RankedTensorType::get({(elements + block - 1) / block}, f32);

      // New arguments right after the f32 ones they replace.
      std::array<QuantizedState, 2> pair;
      for (auto [k, arg] : llvm::enumerate(std::array{*mArg, *vArg})) {
        auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                      kOptimizerStateAttrName);
        unsigned index = arg.getArgNumber() + 1;
        auto attrs = [&](StringRef suffix) {
          return DictionaryAttr::get(
              ctx, {NamedAttribute(
                       StringAttr::get(ctx, kOptimizerStateAttrName),
                       StringAttr::get(ctx, name.getValue() + suffix))});
        };
        if (failed(func.insertArgument(index, codesType, attrs(".codes"),
                                       arg.getLoc())) ||
            failed(func.insertArgument(index + 1, absmaxType,
                                       attrs(".absmax"), arg.getLoc())))
          return op.emitError("train-quantize-optimizer-state: cannot add "
                              "the 8-bit state arguments");
        pair[k] = {arg, name, k == 0, func.getArgument(index),
                   func.getArgument(index + 1)};
      }

      OpBuilder builder(op);
      auto fused = AdamW8bitOp::create(
          builder, op.getLoc(), paramType, codesType, absmaxType, codesType,
          absmaxType, op.getParam(), op.getGrad(), pair[0].codes,
          pair[0].absmax, pair[1].codes, pair[1].absmax, op.getLr(),
          op.getStep(), op.getBeta1Attr(), op.getBeta2Attr(),
          op.getEpsilonAttr(), op.getWeightDecayAttr(),
          builder.getI64IntegerAttr(block));
      op.getNewParam().replaceAllUsesWith(fused.getNewParam());
      replaced.push_back({op, fused});

      newState[op.getNewM()] = {pair[0].name, fused.getNewMCodes(),
                                fused.getNewMAbsmax()};
      newState[op.getNewV()] = {pair[1].name, fused.getNewVCodes(),
                                fused.getNewVAbsmax()};
      states.append(pair.begin(), pair.end());
      ++numQuantized;
    }

    // Results carrying m or v out of the step carry codes and absmax; the
    // values cross region boundaries directly until exported below.
    SmallVector<Value> results;
    SmallVector<Type> resultTypes;
    SmallVector<DictionaryAttr> resultAttrs;
    for (auto [r, operand] : llvm::enumerate(ret.getOperands())) {
      auto it = newState.find(resolveRegionResult(operand));
      if (it == newState.end()) {
        results.push_back(operand);
        resultTypes.push_back(operand.getType());
        resultAttrs.push_back(func.getResultAttrDict(r));
        continue;
      }
      auto [name, codes, absmax] = it->second;
      for (auto [value, suffix] :
           {std::pair{codes, ".codes"}, std::pair{absmax, ".absmax"}}) {
        results.push_back(value);
        resultTypes.push_back(value.getType());
        resultAttrs.push_back(DictionaryAttr::get(
            ctx, {NamedAttribute(StringAttr::get(ctx, kOptimizerStateAttrName),
                                 StringAttr::get(ctx, name.getValue() +
                                                          suffix))}));
      }
    }
    ret->setOperands(results);
    func.setType(FunctionType::get(ctx, func.getArgumentTypes(), resultTypes));
    func.setAllResultAttrs(resultAttrs);
    exportEscapingValues(func);
    pruneUnusedResults(func);

    // Anything else reading the f32 values reads them dequantized.
    for (auto [op, fused] : replaced) {
      std::array<std::tuple<Value, Value, Value, bool>, 2> outs = {
          std::tuple{op.getNewM(), fused.getNewMCodes(),
                     fused.getNewMAbsmax(), true},
          std::tuple{op.getNewV(), fused.getNewVCodes(),
                     fused.getNewVAbsmax(), false}};
      for (auto [old, codes, absmax, isSigned] : outs) {
        if (old.use_empty())
          continue;
        OpBuilder builder(fused->getContext());
        builder.setInsertionPointAfter(fused);
        auto dequantized = DequantizeOp::create(
            builder, fused.getLoc(), old.getType(), codes, absmax,
            builder.getI64IntegerAttr(block),
            isSigned ? builder.getUnitAttr() : UnitAttr());
        old.replaceAllUsesWith(dequantized.getResult());
      }
      op.erase();
    }
    llvm::BitVector dropArgs(func.getNumArguments());
    for (QuantizedState &state : states) {
      if (!state.oldArg.use_empty()) {
        OpBuilder builder = OpBuilder::atBlockBegin(&func.front());
        auto dequantized = DequantizeOp::create(
            builder, state.oldArg.getLoc(), state.oldArg.getType(),
            state.codes, state.absmax, builder.getI64IntegerAttr(block),
            state.isSigned ? builder.getUnitAttr() : UnitAttr());
        state.oldArg.replaceAllUsesWith(dequantized.getResult());
      }
      dropArgs.set(state.oldArg.getArgNumber());
    }
    if (failed(func.eraseArguments(dropArgs)))
      return func.emitError("train-quantize-optimizer-state: cannot remove "
                            "the f32 state arguments");
    return success();
  }
};

} // namespace
} // namespace train
} // namespace mlir
