//===- Remat.cpp - train-remat and train-materialize-remat ----------------===//

#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Dialect/Train/Transforms/RegionUtils.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

#include <map>

namespace mlir {
namespace train {
#define GEN_PASS_DEF_TRAINREMATPASS
#define GEN_PASS_DEF_TRAINMATERIALIZEREMATPASS
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"

namespace {

bool isBackwardOp(Operation *op) {
  for (auto block = op->getParentOfType<BlockOp>(); block;
       block = block->getParentOfType<BlockOp>())
    if (block.getBackward())
      return true;
  return false;
}

/// The outermost train.remat that contains `op`, if any.
RematOp outermostRemat(Operation *op) {
  RematOp outermost;
  for (auto remat = op->getParentOfType<RematOp>(); remat;
       remat = remat->getParentOfType<RematOp>())
    outermost = remat;
  return outermost;
}

/// The forward blocks of each layer, in program order.
struct Layer {
  BlockOp attention, mlp;
};

std::map<int64_t, Layer> collectLayers(func::FuncOp func) {
  std::map<int64_t, Layer> layers;
  for (Operation &op : func.front()) {
    auto block = dyn_cast<BlockOp>(op);
    if (!block || block.getBackward() || !block.getLayerAttr())
      continue;
    Layer &layer = layers[block.getLayerAttr().getInt()];
    if (block.getKind() == BlockKind::attention)
      layer.attention = block;
    else if (block.getKind() == BlockKind::mlp)
      layer.mlp = block;
  }
  return layers;
}

/// Top-level ops from `first` to `last` inclusive.
SmallVector<Operation *> opRange(Operation *first, Operation *last) {
  SmallVector<Operation *> ops;
  for (Operation *op = first; op; op = op->getNextNode()) {
    ops.push_back(op);
    if (op == last)
      break;
  }
  return ops;
}

/// The attention core of an attention block: QKᵀ, scale, softmax, dropout
/// and ·V, as the consecutive ops from the QKᵀ matmul to the ·V matmul.
FailureOr<SmallVector<Operation *>> attentionCore(BlockOp block) {
  SoftmaxOp softmax;
  block.getBody().walk([&](SoftmaxOp op) { softmax = op; });
  if (!softmax)
    return failure();
  Operation *first = softmax.getInput().getDefiningOp();
  while (first && !isa<MatmulOp>(first) && first->getNumOperands() == 1)
    first = first->getOperand(0).getDefiningOp();
  Operation *last = softmax;
  while (last && !isa<MatmulOp>(last)) {
    Operation *next = nullptr;
    for (Operation *user : last->getResult(0).getUsers())
      if (user->getBlock() == softmax->getBlock())
        next = user;
    last = next;
  }
  if (!first || !isa<MatmulOp>(first) || !last ||
      first->getBlock() != last->getBlock() || !first->isBeforeInBlock(last))
    return failure();
  return opRange(first, last);
}

LogicalResult parseRange(StringRef text, int64_t &begin, int64_t &end) {
  begin = 0;
  end = INT64_MAX;
  if (text.empty())
    return success();
  auto [a, b] = text.split(':');
  if ((!a.empty() && a.getAsInteger(10, begin)) ||
      (!b.empty() && b.getAsInteger(10, end)) || begin < 0 || end <= begin ||
      !text.contains(':'))
    return failure();
  return success();
}

struct TrainRematPass : public impl::TrainRematPassBase<TrainRematPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fail = [&](const Twine &message) {
      module.emitError("train-remat: ") << message;
      signalPassFailure();
    };
    if (policy != "full" && policy != "selective" && policy != "attention" &&
        policy != "mlp" && policy != "every")
      return fail("unknown policy '" + policy +
                  "' (expected full, selective, attention, mlp or every)");
    if (policy == "every" && every < 1)
      return fail("every must be >= 1, got " + Twine(every));
    if (policy == "every" && method != "uniform" && method != "block")
      return fail("unknown method '" + method +
                  "' (expected uniform or block)");
    int64_t begin, end;
    if (failed(parseRange(layers, begin, end)))
      return fail("bad layer range '" + layers + "' (expected A:B, A < B)");
    auto func = module.lookupSymbol<func::FuncOp>(function);
    if (!func || func.isExternal())
      return fail("no function @" + function + " (run train-autodiff first)");

    SmallVector<std::pair<int64_t, Layer>> selected;
    for (auto &[index, layer] : collectLayers(func))
      if (index >= begin && index < end)
        selected.push_back({index, layer});
    if (selected.empty())
      return fail("@" + function + " has no transformer layers" +
                  (layers.empty() ? "" : " in range " + layers) +
                  " (forward train.block attention/mlp with a layer index)");

    auto wholeLayer = [](Layer layer) {
      Operation *first = layer.attention ? layer.attention.getOperation()
                                         : layer.mlp.getOperation();
      Operation *last = layer.mlp ? layer.mlp.getOperation()
                                  : layer.attention.getOperation();
      return opRange(first, last);
    };
    auto wrap = [&](ArrayRef<Operation *> ops) {
      wrapInRemat(ops);
      ++numRegions;
    };

    if (policy == "full") {
      for (auto &[index, layer] : selected)
        wrap(wholeLayer(layer));
    } else if (policy == "attention" || policy == "mlp") {
      for (auto &[index, layer] : selected) {
        BlockOp block = policy == "attention" ? layer.attention : layer.mlp;
        if (block)
          wrap({block});
      }
    } else if (policy == "selective") {
      for (auto &[index, layer] : selected) {
        if (!layer.attention)
          continue;
        FailureOr<SmallVector<Operation *>> core =
            attentionCore(layer.attention);
        if (failed(core)) {
          layer.attention.emitError("train-remat: the attention block of "
                                    "layer ")
              << index << " has no attention core (matmul, softmax, matmul)";
          return signalPassFailure();
        }
        wrap(*core);
      }
    } else if (method == "uniform") {
      for (size_t chunk = 0; chunk < selected.size(); chunk += every) {
        size_t last = std::min(selected.size(), chunk + every) - 1;
        wrap(opRange(wholeLayer(selected[chunk].second).front(),
                     wholeLayer(selected[last].second).back()));
      }
    } else {
      for (size_t i = 0; i < selected.size() && i < static_cast<size_t>(every);
           ++i)
        wrap(wholeLayer(selected[i].second));
    }
  }
};

struct TrainMaterializeRematPass
    : public impl::TrainMaterializeRematPassBase<TrainMaterializeRematPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>(function);
    if (!func || func.isExternal()) {
      module.emitError("train-materialize-remat: no function @") << function;
      return signalPassFailure();
    }
    FailureOr<unsigned> cloned = materializeRemat(func);
    if (failed(cloned))
      return signalPassFailure();
    numRecomputed += *cloned;
  }
};

} // namespace

FailureOr<unsigned> materializeRemat(func::FuncOp func) {
  // Program order of every op.
  llvm::DenseMap<Operation *, unsigned> order;
  func.walk<WalkOrder::PreOrder>(
      [&](Operation *op) { order[op] = order.size(); });

  // For each region: the backward operands that read a value it defines
  // and does not pass on to the forward after it.
  struct Need {
    OpOperand *use;
    Value value;
  };
  llvm::MapVector<Operation *, SmallVector<Need>> needs;
  auto passedOn = [](Value value, RematOp remat) {
    // A value the region's forward successors read stays: it is what the
    // recompute starts from, not what it produces.
    SmallVector<Value> worklist{value};
    while (!worklist.empty()) {
      Value v = worklist.pop_back_val();
      for (OpOperand &use : v.getUses()) {
        Operation *user = use.getOwner();
        if (auto yield = dyn_cast<YieldOp>(user)) {
          worklist.push_back(
              yield->getParentOp()->getResult(use.getOperandNumber()));
          continue;
        }
        if (!remat->isAncestor(user) && !isBackwardOp(user))
          return true;
      }
    }
    return false;
  };
  func.walk([&](Operation *op) {
    if (!isBackwardOp(op))
      return;
    for (OpOperand &use : op->getOpOperands()) {
      Value value = resolveRegionResult(use.get());
      Operation *def = value.getDefiningOp();
      if (!def)
        continue;
      RematOp remat = outermostRemat(def);
      if (remat && !passedOn(value, remat))
        needs[remat].push_back({&use, value});
    }
  });

  unsigned cloned = 0;
  for (auto &[remat, uses] : needs) {
    // The ops inside the region that compute what the backward needs.
    llvm::SetVector<Operation *> slice;
    SmallVector<Value> worklist;
    for (const Need &need : uses)
      worklist.push_back(need.value);
    while (!worklist.empty()) {
      Value value = resolveRegionResult(worklist.pop_back_val());
      Operation *def = value.getDefiningOp();
      if (!def || !remat->isAncestor(def) || !slice.insert(def))
        continue;
      for (Value operand : def->getOperands())
        worklist.push_back(operand);
    }
    SmallVector<Operation *> ordered(slice.begin(), slice.end());
    llvm::sort(ordered, [&](Operation *a, Operation *b) {
      return order.lookup(a) < order.lookup(b);
    });

    // Cloned once, before the first backward op that needs any of it.
    Operation *first = uses.front().use->getOwner();
    for (const Need &need : uses)
      if (order.lookup(need.use->getOwner()) < order.lookup(first))
        first = need.use->getOwner();
    OpBuilder builder(first);
    IRMapping mapping;
    for (Operation *op : ordered) {
      for (Value operand : op->getOperands()) {
        Value source = resolveRegionResult(operand);
        mapping.map(operand, mapping.lookupOrDefault(source));
      }
      Operation *clone = builder.clone(*op, mapping);
      clone->setAttr(kRecomputeAttrName, builder.getUnitAttr());
      ++cloned;
    }
    for (const Need &need : uses)
      need.use->set(mapping.lookup(need.value));
  }

  // The regions have done their job.
  SmallVector<Operation *> remats;
  func.walk([&](RematOp remat) { remats.push_back(remat); });
  for (Operation *remat : remats)
    inlineRegionOp(remat);
  pruneUnusedResults(func);
  exportEscapingValues(func);
  return cloned;
}

} // namespace train
} // namespace mlir
