//===- Layers.cpp - the layers of a forward module
//-------------------------===//

#include "trainmem/Model/Layers.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/raw_ostream.h"

#include <vector>

using namespace mlir;
using namespace mlir::train;

namespace {

/// The forward function: the module's function with a body.
func::FuncOp forwardOf(ModuleOp module) {
  for (auto func : module.getOps<func::FuncOp>())
    if (!func.isExternal())
      return func;
  return {};
}

/// The layer blocks of `func`'s body by layer (0, 1, ... in order, each
/// layer's blocks consecutive); false with `why` otherwise.
bool collectLayers(func::FuncOp func, SmallVector<SmallVector<BlockOp>> &layers,
                   std::string &why) {
  bool ended = false; // a block of no layer came after the layers
  for (auto block : func.getBody().front().getOps<BlockOp>()) {
    if (!block.getLayer()) {
      ended = !layers.empty();
      continue;
    }
    int64_t layer = static_cast<int64_t>(*block.getLayer());
    int64_t current = static_cast<int64_t>(layers.size()) - 1;
    if (layer == current && !ended) {
      layers.back().push_back(block);
      continue;
    }
    if (layer != current + 1 || ended) {
      why = "the blocks of layer " + std::to_string(layer) +
            " do not follow layer " + std::to_string(current) + "'s";
      return false;
    }
    layers.emplace_back();
    layers.back().push_back(block);
  }
  return true;
}

/// One line per op of a layer: its name, attributes (but the layer index
/// and dropout offsets), operands (the layer's own values by position,
/// parameters by type, the block before's results as `in`) and result
/// types. Records which parameters the layer reads in `params`.
std::vector<std::string> signature(ArrayRef<BlockOp> blocks, func::FuncOp func,
                                   llvm::DenseMap<Value, int64_t> &params,
                                   int64_t layer, std::string &shared) {
  std::vector<std::string> lines;
  llvm::DenseMap<Value, int64_t> local;
  Operation *before = blocks.front()->getPrevNode();
  auto name = [&](Value value) -> std::string {
    if (auto it = local.find(value); it != local.end())
      return "v" + std::to_string(it->second);
    std::string text;
    llvm::raw_string_ostream os(text);
    if (auto arg = dyn_cast<BlockArgument>(value);
        arg && arg.getOwner() == &func.getBody().front()) {
      bool param = static_cast<bool>(
          func.getArgAttr(arg.getArgNumber(), kParamAttrName));
      os << (param ? "param:" : "input:") << value.getType();
      if (param) {
        auto [it, inserted] = params.try_emplace(value, layer);
        if (!inserted && it->second != layer && shared.empty())
          shared = "layers " + std::to_string(it->second) + " and " +
                   std::to_string(layer) + " share parameter '" +
                   func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                     kParamAttrName)
                       .getValue()
                       .str() +
                   "'";
      }
    } else if (value.getDefiningOp() && value.getDefiningOp() == before) {
      os << "in" << cast<OpResult>(value).getResultNumber();
    } else {
      os << "outer:" << value.getAsOpaquePointer();
    }
    return text;
  };
  for (BlockOp block : blocks)
    block->walk<WalkOrder::PreOrder>([&](Operation *op) {
      std::string line;
      llvm::raw_string_ostream os(line);
      os << op->getName() << "(";
      for (Value operand : op->getOperands())
        os << name(operand) << ",";
      os << ")";
      for (NamedAttribute attr : op->getAttrs())
        if (attr.getName() != "layer" && attr.getName() != "offset")
          os << " " << attr.getName().getValue() << "=" << attr.getValue();
      os << " :";
      for (Type type : op->getResultTypes())
        os << " " << type;
      for (Region &region : op->getRegions())
        for (Block &inner : region)
          for (BlockArgument arg : inner.getArguments())
            local.try_emplace(arg, static_cast<int64_t>(local.size()));
      for (Value result : op->getResults())
        local.try_emplace(result, static_cast<int64_t>(local.size()));
      lines.push_back(std::move(line));
    });
  return lines;
}

} // namespace

LayerStructure mlir::train::analyzeLayers(ModuleOp module) {
  LayerStructure out;
  func::FuncOp func = forwardOf(module);
  if (!func) {
    out.why = "the module has no function with a body";
    return out;
  }
  SmallVector<SmallVector<BlockOp>> layers;
  if (!collectLayers(func, layers, out.why)) {
    out.layers = static_cast<int64_t>(layers.size());
    return out;
  }
  out.layers = static_cast<int64_t>(layers.size());
  if (layers.empty()) {
    out.why = "it has no train.block with a layer index";
    return out;
  }
  llvm::DenseMap<Value, int64_t> params;
  std::string shared;
  std::vector<std::string> first =
      signature(layers.front(), func, params, 0, shared);
  for (int64_t l = 1; l < out.layers; ++l) {
    std::vector<std::string> other =
        signature(layers[l], func, params, l, shared);
    if (!shared.empty()) {
      out.why = shared;
      return out;
    }
    if (other == first)
      continue;
    size_t at = 0;
    while (at < first.size() && at < other.size() && first[at] == other[at])
      ++at;
    std::string op =
        at < other.size()   ? other[at].substr(0, other[at].find('('))
        : at < first.size() ? first[at].substr(0, first[at].find('('))
                            : "";
    out.why = "layer " + std::to_string(l) +
              " differs from layer 0 at its op #" + std::to_string(at) +
              (op.empty() ? "" : " ('" + op + "')");
    return out;
  }
  out.uniform = true;
  return out;
}

LogicalResult mlir::train::truncateLayers(ModuleOp module, int64_t keep,
                                          std::string &why) {
  func::FuncOp func = forwardOf(module);
  SmallVector<SmallVector<BlockOp>> layers;
  if (!func || !collectLayers(func, layers, why))
    return failure();
  int64_t count = static_cast<int64_t>(layers.size());
  if (keep < 1 || keep > count) {
    why = "cannot keep " + std::to_string(keep) + " of " +
          std::to_string(count) + " layers";
    return failure();
  }
  if (keep == count)
    return success();
  BlockOp lastKept = layers[keep - 1].back(), last = layers.back().back();
  if (lastKept->getResultTypes() != last->getResultTypes()) {
    why = "layer " + std::to_string(keep - 1) +
          "'s result is not of the last layer's type";
    return failure();
  }
  for (auto [from, to] : llvm::zip(last->getResults(), lastKept->getResults()))
    from.replaceAllUsesWith(to);
  for (int64_t l = count - 1; l >= keep; --l)
    for (BlockOp block : llvm::reverse(layers[l]))
      block->erase();
  llvm::BitVector dead(func.getNumArguments());
  for (BlockArgument arg : func.getArguments())
    if (arg.use_empty() && func.getArgAttr(arg.getArgNumber(), kParamAttrName))
      dead.set(arg.getArgNumber());
  if (failed(func.eraseArguments(dead))) {
    why = "cannot drop the parameters of the dropped layers";
    return failure();
  }
  if (auto model = module->getAttrOfType<DictionaryAttr>(kModelAttrName)) {
    NamedAttrList entries(model);
    if (entries.get("layers"))
      entries.set(
          "layers",
          IntegerAttr::get(IntegerType::get(module.getContext(), 64), keep));
    module->setAttr(kModelAttrName, entries.getDictionary(module.getContext()));
  }
  return success();
}
