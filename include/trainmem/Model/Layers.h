//===- Layers.h - the layers of a forward module ------------------*- C++
//-*-===//
//
// The transformer layers of a forward + loss module, as `train.block`
// regions with a layer index say them (trainmem-model and trainmem-import
// write them): whether they repeat one layer, and the module cut to its
// first layers, which the planner measures at small layer counts and
// extrapolates from.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_MODEL_LAYERS_H
#define TRAINMEM_MODEL_LAYERS_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"

#include <cstdint>
#include <string>

namespace mlir {
namespace train {

struct LayerStructure {
  /// Layers 0..layers-1, each one or more consecutive blocks.
  int64_t layers = 0;
  /// Every layer is layer 0 again: the same ops, attributes (but the
  /// layer index and dropout offsets), types and wiring, each reading the
  /// result of the block before it, with parameters of its own.
  bool uniform = false;
  /// Why not, naming the layer and op that differ.
  std::string why;
};

/// The layers of `module`'s forward function.
LayerStructure analyzeLayers(ModuleOp module);

/// Cuts `module` (uniform layers, analyzeLayers) to its first `layers`
/// layers: what read the last layer's result reads the last kept one's;
/// the dropped layers' parameters are no longer arguments; train.model's
/// `layers` says the new count.
LogicalResult truncateLayers(ModuleOp module, int64_t layers, std::string &why);

} // namespace train
} // namespace mlir

#endif // TRAINMEM_MODEL_LAYERS_H
