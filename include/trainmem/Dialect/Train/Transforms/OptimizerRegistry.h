//===- OptimizerRegistry.h - the optimizers a step can get -------*- C++
//-*-===//
//
// One table of the optimizers train-autodiff, train-add-optimizer and
// train-step build: per optimizer its name, the options it reads and their
// defaults, its state per parameter (kind and element type), its update op
// and that op's 8-bit form. Adding an optimizer is its ops (with their
// evaluator kernels and runtime lowering), one entry here and its runtime
// kernels; the passes read the entry and the update op's
// OptimizerUpdateOpInterface, and OptimizerRegistryTest names the piece an
// entry lacks.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_DIALECT_TRAIN_TRANSFORMS_OPTIMIZERREGISTRY_H
#define TRAINMEM_DIALECT_TRAIN_TRANSFORMS_OPTIMIZERREGISTRY_H

#include "trainmem/Dialect/Train/IR/TrainInterfaces.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace mlir {
namespace train {

struct OptimizerOptions;

/// The options an optimizer may read beyond those every optimizer reads
/// (lr, min-lr, warmup-steps, total-steps, clip-norm, master-weights), as
/// the passes spell them.
enum class OptimizerOption {
  beta1,
  beta2,
  epsilon,
  weightDecay,
  momentum,
  rho,
  hessianInterval
};

/// The option's name in the passes (`beta1`, `eps`, `weight-decay`...).
llvm::StringRef getOptimizerOptionName(OptimizerOption option);

/// The values an option not given takes, per optimizer.
struct OptimizerDefaults {
  double lr = 3.0e-4;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1.0e-8;
  double weightDecay = 0.01;
};

/// The element type of a state tensor.
enum class StateElementType {
  /// Always f32 (Adam's moments).
  f32,
  /// The type of the tensor the update writes: f32 where a 16-bit
  /// parameter has a master copy, else the parameter's own (SGD's buffer).
  updated,
};

/// One state tensor per parameter.
struct OptimizerStateInfo {
  StateKind kind;
  StateElementType type;
  /// Whether the state exists under these options (SGD's buffer only with
  /// momentum > 0); null: always.
  bool (*presentWhen)(const OptimizerOptions &options) = nullptr;
};

/// What an update's builder gets for one parameter.
struct OptimizerUpdateOperands {
  /// The tensor updated: the parameter, or its f32 master copy.
  Value param;
  Value grad;
  /// The learning rate (tensor<f32>) and the step counter (tensor<i64>).
  Value lr, step;
  /// The tokens one step trains on (its tokens input's elements).
  int64_t batchTokens = 0;
  /// The state present (see presentWhen), in the entry's order.
  ValueRange state;
};

/// One optimizer.
struct OptimizerInfo {
  /// What `optimizer=` takes.
  llvm::StringRef name;
  /// One line: what it is and where it comes from.
  llvm::StringRef summary;
  OptimizerDefaults defaults;
  /// The options it reads beyond the common ones.
  llvm::ArrayRef<OptimizerOption> options;
  /// Its state per parameter, in argument order.
  llvm::ArrayRef<OptimizerStateInfo> states;
  /// The update op (`train.adamw`) and its fused 8-bit form ("" when it
  /// has none), as train-quantize-optimizer-state builds it through
  /// OptimizerUpdateOpInterface::buildBlockwise8bit.
  llvm::StringRef updateOp;
  llvm::StringRef update8bitOp;
  /// Builds the update of one parameter; its getStateUses() are the
  /// entry's present states in order.
  OptimizerUpdateOpInterface (*build)(OpBuilder &builder, Location loc,
                                      const OptimizerUpdateOperands &operands,
                                      const OptimizerOptions &options);
  /// Whether the step's state includes an estimate of the Hessian that a
  /// second function refreshes every hessian-interval steps (Sophia's h):
  /// train-autodiff builds that function (#train.hessian_step).
  bool hessianStep = false;
  /// Its name in the frameworks the planner exports to: DeepSpeed's
  /// optimizer `type` ("" where DeepSpeed has none) and Megatron-LM's
  /// `--optimizer` ("" where it has none).
  llvm::StringRef deepSpeedType = "";
  llvm::StringRef megatronName = "";

  /// Whether it reads `option`.
  bool reads(OptimizerOption option) const {
    return llvm::is_contained(options, option);
  }
};

/// Every registered optimizer, by name.
llvm::ArrayRef<OptimizerInfo> getRegisteredOptimizers();

/// The optimizer called `name`, or null.
const OptimizerInfo *lookupOptimizer(llvm::StringRef name);

/// "adamw, lion or sgd": the registered names, for diagnostics.
std::string listOptimizerNames();

} // namespace train
} // namespace mlir

#endif // TRAINMEM_DIALECT_TRAIN_TRANSFORMS_OPTIMIZERREGISTRY_H
