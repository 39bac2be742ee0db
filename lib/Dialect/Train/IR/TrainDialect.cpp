//===- TrainDialect.cpp - the train dialect -------------------------------===//

#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Conversion/RuntimeLowering.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"
#include "trainmem/Evaluator/Evaluator.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;
using namespace mlir::train;

#include "trainmem/Dialect/Train/IR/TrainDialect.cpp.inc"
#include "trainmem/Dialect/Train/IR/TrainEnums.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "trainmem/Dialect/Train/IR/TrainAttrs.cpp.inc"
#include "trainmem/Dialect/Train/IR/TrainInterfaces.cpp.inc"

namespace {
/// The models other libraries attach to a compute op (one with a cost):
/// its reference evaluation (the evaluator's) and its runtime calls
/// (convert-train-to-runtime's). Promised here, so that a context that
/// asks an op for one before its library registered the models fails
/// naming the interface, instead of seeing an op without it.
template <typename... OpTs> void promiseModels(TrainDialect &dialect) {
  auto promise = [&](auto op) {
    using OpT = decltype(op);
    if constexpr (OpT::template hasTrait<CostOpInterface::Trait>()) {
      dialect.declarePromisedInterface<EvaluableOpInterface, OpT>();
      dialect.declarePromisedInterface<RuntimeLoweringOpInterface, OpT>();
    }
  };
  (promise(OpTs()), ...);
}
} // namespace

void TrainDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "trainmem/Dialect/Train/IR/TrainOps.cpp.inc"
      >();
  promiseModels<
#define GET_OP_LIST
#include "trainmem/Dialect/Train/IR/TrainOps.cpp.inc"
      >(*this);
  addAttributes<
#define GET_ATTRDEF_LIST
#include "trainmem/Dialect/Train/IR/TrainAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

LogicalResult
HessianStepAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                        FlatSymbolRefAttr step, int64_t every) {
  if (!step)
    return emitError() << "a Hessian step names the step it refreshes";
  if (every < 1)
    return emitError() << "a Hessian step runs every k >= 1 steps, got "
                       << every;
  return success();
}

LogicalResult
PipelineStageAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                          int64_t stage, int64_t stages, int64_t microBatches,
                          PipelineSchedule schedule, int64_t virtualStages) {
  if (stages < 1 || stage < 0 || stage >= stages)
    return emitError() << "#train.pipeline: stage " << stage
                       << " is not one of " << stages << " stages";
  if (microBatches < 1)
    return emitError() << "#train.pipeline: micro_batches must be >= 1, got "
                       << microBatches;
  if (virtualStages < 1 ||
      (virtualStages > 1 && schedule != PipelineSchedule::interleaved))
    return emitError() << "#train.pipeline: virtual = " << virtualStages
                       << " with schedule "
                       << stringifyPipelineSchedule(schedule)
                       << " (more than one chunk per stage is the "
                          "interleaved schedule's)";
  return success();
}

LogicalResult ZeroAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               int64_t stage, int64_t ranks, int64_t bucket,
                               int64_t prefetch) {
  if (stage < 0 || stage > 3)
    return emitError() << "ZeRO stage must be 0, 1, 2 or 3, got " << stage;
  if (ranks < 1)
    return emitError() << "ZeRO needs at least one rank, got " << ranks;
  if (bucket < 1)
    return emitError() << "ZeRO's gradient bucket must be at least 1 byte, got "
                       << bucket;
  if (prefetch < 0)
    return emitError() << "ZeRO's prefetch must be >= 0, got " << prefetch;
  return success();
}

LogicalResult StateAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                StringRef param, StateKind kind,
                                StatePart part, QuantMap map, int64_t block) {
  if (param.empty())
    return emitError() << "#train.state needs the parameter's name";
  if (part == StatePart::value) {
    if (map != QuantMap::none || block != 0)
      return emitError() << "#train.state: a plain value has no map or block";
    return success();
  }
  if (map == QuantMap::none)
    return emitError() << "#train.state: 8-bit " << stringifyStatePart(part)
                       << " need a map";
  if (block < 1 || (block & (block - 1)) != 0)
    return emitError() << "#train.state: block must be a power of two, got "
                       << block;
  return success();
}

LogicalResult
TensorSplitAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                        int64_t dim, int64_t parts, FlatSymbolRefAttr grid,
                        int64_t axis, ContextOrder) {
  if (!grid)
    return emitError() << "#train.split: needs the grid it is split over";
  if (dim < 0 || parts < 1 || axis < 0)
    return emitError() << "#train.split: dim and axis must be >= 0 and parts "
                          ">= 1, got dim = "
                       << dim << ", parts = " << parts << ", axis = " << axis;
  return success();
}

LogicalResult
ContextSplitAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                         int64_t parts, FlatSymbolRefAttr grid, int64_t axis,
                         ContextOrder) {
  if (!grid)
    return emitError() << "#train.context: needs the grid it is cut over";
  if (parts < 1 || axis < 0)
    return emitError() << "#train.context: parts must be >= 1 and axis >= "
                          "0, got parts = "
                       << parts << ", axis = " << axis;
  return success();
}

StateAttr StateAttr::withPart(StatePart part, QuantMap map,
                              int64_t block) const {
  return StateAttr::get(getContext(), getParam(), getKind(), part, map, block);
}

std::string StateAttr::getKey() const {
  std::string key = (getParam() + "." + stringifyStateKind(getKind())).str();
  if (isQuantized())
    key += ("." + stringifyStatePart(getPart())).str();
  return key;
}

LogicalResult InitAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               InitKind kind, APFloat stdValue,
                               int64_t stream) {
  double std = stdValue.convertToDouble();
  if (stream < -1)
    return emitError() << "#train.init: stream must be >= 0, got " << stream;
  if (stream >= 0 && kind != InitKind::normal)
    return emitError() << "#train.init: only normal draws from a stream";
  if (kind == InitKind::normal && !(std > 0.0 && std::isfinite(std)))
    return emitError() << "#train.init: normal needs std > 0, got " << std;
  if (kind != InitKind::normal && std != 0.0)
    return emitError() << "#train.init: only normal takes a std";
  return success();
}

void TrainDialect::printCachedAttribute(Attribute attr, raw_ostream &os) {
  llvm::sys::SmartScopedLock<true> lock(printedAttributesMutex);
  auto [it, inserted] = printedAttributes.try_emplace(attr);
  if (inserted) {
    llvm::raw_string_ostream text(it->second);
    attr.print(text);
  }
  os << it->second;
}

//===----------------------------------------------------------------------===//
// Argument and result attributes of a step
//===----------------------------------------------------------------------===//

namespace {

/// Whether `name` is an attribute whose value names a tensor of the step's
/// state, which must be unique among the function's arguments (or results).
bool namesState(StringRef name) {
  return name == kParamAttrName || name == kOptimizerStateAttrName ||
         name == kInputAttrName;
}

/// Checks the value of a `train.*` argument or result attribute: a unit for
/// the markers of the loss and the gradient norm, a #train.state for
/// optimizer state, a #train.init for initializers, a name for the others.
LogicalResult verifyValue(Operation *op, StringRef where, unsigned index,
                          NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  auto fail = [&]() {
    return op->emitOpError() << where << " " << index << ": '" << name
                             << "' ";
  };
  if (name == kLossAttrName || name == kGradNormAttrName) {
    if (!isa<UnitAttr>(attr.getValue()))
      return fail() << "is a unit attribute, got " << attr.getValue();
    return success();
  }
  if (name == kOptimizerStateAttrName) {
    if (!isa<StateAttr>(attr.getValue()))
      return fail() << "must be a #train.state, got " << attr.getValue();
    return success();
  }
  if (name == kInitAttrName) {
    if (!isa<InitAttr>(attr.getValue()))
      return fail() << "must be a #train.init, got " << attr.getValue();
    return success();
  }
  if (name == kMemorySpaceAttrName) {
    if (!isa<SpaceAttr>(attr.getValue()))
      return fail() << "must be a #train.space, got " << attr.getValue();
    return success();
  }
  auto value = dyn_cast<StringAttr>(attr.getValue());
  if (!value || value.getValue().empty())
    return fail() << "must be a non-empty string naming the tensor, got "
                  << attr.getValue();
  return success();
}

/// Rejects two arguments (or two results) that carry the same state name:
/// a checkpoint or a runner keyed by that name would mix them up. Checked
/// once per function, at its first attribute-carrying index, so the cost is
/// linear in the number of arguments.
/// The first index of `all` (a function's argument or result attributes)
/// whose attributes name a state. Uniqued and immutable, `all` decides it,
/// so the last answer is kept: the verifier asks once per state attribute.
unsigned firstStateIndex(ArrayAttr all) {
  static thread_local ArrayAttr lastAll;
  static thread_local unsigned lastFirst = 0;
  if (all == lastAll)
    return lastFirst;
  unsigned first = all.size();
  for (auto [i, attrs] : llvm::enumerate(all))
    if (auto dict = dyn_cast_or_null<DictionaryAttr>(attrs))
      if (llvm::any_of(dict, [](NamedAttribute a) {
            return namesState(a.getName().getValue());
          })) {
        first = static_cast<unsigned>(i);
        break;
      }
  lastAll = all;
  lastFirst = first;
  return first;
}

LogicalResult verifyUnique(FunctionOpInterface func, bool results,
                           unsigned index) {
  ArrayAttr all = results ? func.getResAttrsAttr() : func.getArgAttrsAttr();
  if (all && firstStateIndex(all) < index)
    return success(); // an earlier index did the check
  unsigned count = results ? func.getNumResults() : func.getNumArguments();
  // Names and values are uniqued attributes: the pair of them is the key.
  llvm::DenseMap<std::pair<Attribute, Attribute>, unsigned> seen;
  StringRef where = results ? "result" : "argument";
  for (unsigned i = index; i < count; ++i) {
    DictionaryAttr attrs =
        results ? func.getResultAttrDict(i) : func.getArgAttrDict(i);
    if (!attrs)
      continue;
    for (NamedAttribute attr : attrs) {
      Attribute value = attr.getValue();
      if (!namesState(attr.getName().getValue()))
        continue;
      auto [it, inserted] = seen.try_emplace({attr.getName(), value}, i);
      if (!inserted)
        return func.emitOpError()
               << where << "s " << it->second << " and " << i
               << " are both " << attr.getName() << " = " << value
               << "; each state tensor needs a name of its own";
    }
  }
  return success();
}

/// `train.shard_of = T` on a 1-D tensor argument or result of a partitioned
/// step: a shard of T's elements (same element type) that, times the ranks,
/// covers all of them.
LogicalResult verifyShardOf(Operation *op, FunctionOpInterface func,
                            unsigned index, NamedAttribute attr,
                            bool results) {
  auto fail = [&]() {
    return op->emitOpError()
           << (results ? "result " : "argument ") << index << ": '"
           << kShardOfAttrName << "' ";
  };
  auto typeAttr = dyn_cast<TypeAttr>(attr.getValue());
  auto full = typeAttr ? dyn_cast<RankedTensorType>(typeAttr.getValue())
                       : RankedTensorType();
  if (!full || !full.hasStaticShape())
    return fail() << "is the static tensor type the value is a shard of, got "
                  << attr.getValue();
  if (!func)
    return fail() << "belongs on a function's arguments and results";
  auto zero = func->getAttrOfType<ZeroAttr>(kZeroAttrName);
  if (!zero)
    return fail() << "marks a shard, but the function is not partitioned "
                     "(no '"
                  << kZeroAttrName << "')";
  ArrayRef<Type> types =
      results ? func.getResultTypes() : func.getArgumentTypes();
  auto shard = dyn_cast<RankedTensorType>(types[index]);
  if (!shard || shard.getRank() != 1 || !shard.hasStaticShape() ||
      shard.getElementType() != full.getElementType())
    return fail() << "needs a 1-D static tensor of " << full.getElementType()
                  << ", got " << types[index];
  if (shard.getNumElements() * zero.getRanks() < full.getNumElements())
    return fail() << "shards of " << shard.getNumElements() << " elements on "
                  << zero.getRanks() << " ranks cannot hold the "
                  << full.getNumElements() << " elements of " << full;
  return success();
}

LogicalResult verifyStepAttribute(Operation *op, unsigned index,
                                  NamedAttribute attr, bool results) {
  StringRef name = attr.getName().getValue();
  if (name == kPlanOffsetAttrName) {
    auto offset = dyn_cast<IntegerAttr>(attr.getValue());
    if (results || !offset || offset.getInt() < 0)
      return op->emitOpError()
             << (results ? "result " : "argument ") << index << ": '"
             << name
             << "' is an argument's byte offset in the arena (an integer "
                ">= 0), got "
             << attr.getValue();
    return success();
  }
  // One interface lookup per attribute (the verifier asks for every
  // argument and result attribute of every function).
  if (name == kShardOfAttrName)
    return verifyShardOf(op, dyn_cast<FunctionOpInterface>(op), index, attr,
                         results);
  if (name == kTensorSplitAttrName) {
    auto split = dyn_cast<TensorSplitAttr>(attr.getValue());
    auto func = dyn_cast<FunctionOpInterface>(op);
    auto type = func && !results
                    ? dyn_cast<RankedTensorType>(func.getArgumentTypes()[index])
                    : RankedTensorType();
    // A ZeRO shard of the part (train-zero stage 3): the split names a
    // dimension of the part it is a shard of.
    if (type)
      if (auto full = func.getArgAttrOfType<TypeAttr>(index, kShardOfAttrName))
        type = dyn_cast<RankedTensorType>(full.getValue());
    if (!split || !type || split.getDim() >= type.getRank())
      return op->emitOpError()
             << (results ? "result " : "argument ") << index << ": '" << name
             << "' is a #train.split of a dimension of a tensor argument, "
                "got "
             << attr.getValue();
    return verifySplitGrid(op, split, kTensorSplitAttrName);
  }
  bool state = namesState(name);
  bool known = state || name == kLossAttrName || name == kGradNormAttrName ||
               name == kGradAttrName || name == kInitAttrName ||
               name == kMemorySpaceAttrName;
  if (!known)
    return success();
  if (results && (name == kInputAttrName || name == kInitAttrName))
    return op->emitOpError() << "result " << index << ": '" << name
                             << "' belongs on arguments";
  if (!results && (name == kLossAttrName || name == kGradNormAttrName ||
                   name == kGradAttrName))
    return op->emitOpError() << "argument " << index << ": '" << name
                             << "' belongs on results";
  if (failed(verifyValue(op, results ? "result" : "argument", index, attr)))
    return failure();
  if (!state)
    return success();
  if (auto func = dyn_cast<FunctionOpInterface>(op))
    return verifyUnique(func, results, index);
  return success();
}

} // namespace

LogicalResult mlir::train::verifySplitGrid(Operation *op, TensorSplitAttr split,
                                           StringRef attrName) {
  auto grid =
      SymbolTable::lookupNearestSymbolFrom<shard::GridOp>(op, split.getGrid());
  if (!grid)
    return op->emitOpError("'") << attrName << "' names " << split.getGrid()
                                << ", which is not a shard.grid in scope";
  ArrayRef<int64_t> shape = grid.getShape();
  if (split.getAxis() >= static_cast<int64_t>(shape.size()) ||
      (!ShapedType::isDynamic(shape[split.getAxis()]) &&
       shape[split.getAxis()] != split.getParts()))
    return op->emitOpError("'") << attrName << "' " << split << " needs axis "
                                << split.getAxis() << " of " << split.getGrid()
                                << " to have " << split.getParts() << " ranks";
  return success();
}

/// `train.step` marks the function that is the step: a unit attribute on a
/// function (passes and runners find the step by it, and name it).
/// `train.hessian_step` marks a function (a step's Hessian step).
static LogicalResult verifyHessianStepMarker(Operation *op, Attribute value) {
  if (isa<HessianStepAttr>(value) && isa<FunctionOpInterface>(op))
    return success();
  return op->emitOpError() << "'" << kHessianStepAttrName
                           << "' is a #train.hessian_step on a function, got "
                           << value;
}

LogicalResult TrainDialect::verifyOperationAttribute(Operation *op,
                                                     NamedAttribute attr) {
  // The arena plan (train-plan-arena).
  if (attr.getName() == kPlanOffsetsAttrName) {
    auto offsets = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!offsets || offsets.size() != static_cast<int64_t>(op->getNumResults()))
      return op->emitOpError()
             << "'" << kPlanOffsetsAttrName
             << "' holds one arena offset per result (array<i64>, "
             << op->getNumResults() << " values), got " << attr.getValue();
    for (auto [result, offset] :
         llvm::zip(op->getResults(), offsets.asArrayRef()))
      if (isa<RankedTensorType>(result.getType()) ? offset < 0 : offset != -1)
        return op->emitOpError()
               << "'" << kPlanOffsetsAttrName << "': result "
               << result.getResultNumber() << " has offset " << offset
               << " (a tensor's is >= 0, any other result's -1)";
    return success();
  }
  if (attr.getName() == kPlanArgumentOffsetsAttrName) {
    auto offsets = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    auto loop = dyn_cast<AccumulateOp>(op);
    if (!offsets || !loop ||
        offsets.size() !=
            static_cast<int64_t>(loop.getBody().front().getNumArguments()))
      return op->emitOpError()
             << "'" << kPlanArgumentOffsetsAttrName
             << "' is on a train.accumulate one arena offset per argument of "
                "its body (array<i64>), got "
             << attr.getValue();
    for (auto [arg, offset] : llvm::zip(loop.getBody().front().getArguments(),
                                        offsets.asArrayRef()))
      if (isa<RankedTensorType>(arg.getType()) ? offset < 0 : offset != -1)
        return op->emitOpError()
               << "'" << kPlanArgumentOffsetsAttrName << "': argument "
               << arg.getArgNumber() << " has offset " << offset
               << " (a tensor's is >= 0, any other argument's -1)";
    return success();
  }
  if (attr.getName() == kPlanStagingOffsetsAttrName) {
    auto offsets = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!offsets || !isa<OptimizerUpdateOpInterface>(op) ||
        offsets.size() != static_cast<int64_t>(op->getNumOperands()) ||
        llvm::any_of(offsets.asArrayRef(),
                     [](int64_t offset) { return offset < -1; }))
      return op->emitOpError()
             << "'" << kPlanStagingOffsetsAttrName
             << "' is on an optimizer update one device offset per operand "
                "(array<i64>, "
             << op->getNumOperands() << " values, -1 for none), got "
             << attr.getValue();
    return success();
  }
  if (attr.getName() == kPlanWorkspaceOffsetAttrName) {
    auto offset = dyn_cast<IntegerAttr>(attr.getValue());
    if (!offset || offset.getInt() < 0 || !isa<WorkspaceOpInterface>(op))
      return op->emitOpError()
             << "'" << kPlanWorkspaceOffsetAttrName
             << "' is on an op with a workspace its arena offset (i64 >= 0), "
                "got "
             << attr.getValue();
    return success();
  }
  // Where an optimizer update runs (train-offload-optimizer), or the ops
  // between host-summed gradients and the updates (gradients=host).
  if (attr.getName() == kMemorySpaceAttrName) {
    if (!isa<SpaceAttr>(attr.getValue()) ||
        !isa<OptimizerUpdateOpInterface, CastOp, ClipGradNormOp,
             UnscaleGradientsOp>(op))
      return op->emitOpError()
             << "'" << kMemorySpaceAttrName
             << "' on an op is a #train.space on an optimizer update, the "
                "cast of its refreshed weight, or the clipping or unscaling "
                "of the gradients they read (where it runs), got "
             << attr.getValue();
    return success();
  }
  if (attr.getName() == kHessianStepAttrName)
    return verifyHessianStepMarker(op, attr.getValue());
  if (attr.getName() == kZeroAttrName) {
    if (!isa<ZeroAttr>(attr.getValue()) || !isa<FunctionOpInterface>(op))
      return op->emitOpError()
             << "'" << kZeroAttrName
             << "' is a #train.zero on the step, got " << attr.getValue();
    return success();
  }
  if (attr.getName() == kPipelineStageAttrName) {
    if (!isa<PipelineStageAttr>(attr.getValue()) ||
        !isa<FunctionOpInterface>(op))
      return op->emitOpError()
             << "'" << kPipelineStageAttrName
             << "' is a #train.pipeline on a stage function, got "
             << attr.getValue();
    return success();
  }
  if (attr.getName() == kMicroBatchAttrName ||
      attr.getName() == kChunkAttrName) {
    auto index = dyn_cast<IntegerAttr>(attr.getValue());
    if (!index || index.getInt() < 0)
      return op->emitOpError()
             << "'" << attr.getName().getValue()
             << "' is an index (an integer >= 0), got " << attr.getValue();
    return success();
  }
  if (attr.getName() == kPlanArenaBytesAttrName ||
      attr.getName() == kPlanHostArenaBytesAttrName) {
    auto bytes = dyn_cast<IntegerAttr>(attr.getValue());
    if (!bytes || bytes.getInt() < 0 || !isa<FunctionOpInterface>(op))
      return op->emitOpError()
             << "'" << attr.getName().getValue()
             << "' is the arena's size on the step (an integer >= 0), got "
             << attr.getValue();
    return success();
  }
  if (attr.getName() != kStepAttrName)
    return success();
  if (!isa<UnitAttr>(attr.getValue()))
    return op->emitOpError() << "'" << kStepAttrName
                             << "' is a unit attribute, got "
                             << attr.getValue();
  if (!isa<FunctionOpInterface>(op))
    return op->emitOpError() << "'" << kStepAttrName
                             << "' marks a function (the step), not a '"
                             << op->getName() << "'";
  return success();
}

LogicalResult TrainDialect::verifyRegionArgAttribute(Operation *op, unsigned,
                                                     unsigned argIndex,
                                                     NamedAttribute attr) {
  return verifyStepAttribute(op, argIndex, attr, /*results=*/false);
}

LogicalResult TrainDialect::verifyRegionResultAttribute(Operation *op,
                                                        unsigned,
                                                        unsigned resultIndex,
                                                        NamedAttribute attr) {
  return verifyStepAttribute(op, resultIndex, attr, /*results=*/true);
}
