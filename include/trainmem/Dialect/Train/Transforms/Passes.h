//===- Passes.h - passes of the train dialect --------------------*- C++ -*-===//

#ifndef TRAINMEM_DIALECT_TRAIN_TRANSFORMS_PASSES_H
#define TRAINMEM_DIALECT_TRAIN_TRANSFORMS_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"
#include "trainmem/Dialect/Train/IR/TrainAttrs.h"

#include <string>

namespace mlir {
namespace train {

/// The values of the passes' enum options (Passes.td).
enum class ReportFormat { text, json, svg };
enum class RematPolicy { full, selective, attention, mlp, every, custom, budget };
enum class RematMethod { uniform, block };
enum class AccumNormalize { tokens, mean };
enum class AccumUneven { pad, refuse };
enum class AccumDtype { f32, bf16, f16 };
/// How train-context-parallel's attention gets the group's keys and values.
enum class ContextExchange { allGather, ring };
/// How train-pipeline cuts the layers into chunks without `split`.
enum class PipelineBalance { uniform, flops, memory };

/// train-grad-accum's accumulate-dtype value for `dtype`.
inline llvm::StringRef accumDtypeName(AccumDtype dtype) {
  switch (dtype) {
  case AccumDtype::bf16:
    return "bf16";
  case AccumDtype::f16:
    return "f16";
  case AccumDtype::f32:
    break;
  }
  return "f32";
}
enum class ZeroAccumulate { microBatch, full };
enum class OffloadWhat { states, statesAndUpdate };
enum class OffloadGradients { device, host };

/// What train-offload-activations moves to host memory.
enum class OffloadActivationsWhat { checkpoints, all };

struct OptimizerInfo;

/// The optimizer a step gets (train-add-optimizer's options; train-autodiff
/// has the same and appends the optimizer after differentiating). The
/// passes fill what the user does not give from the optimizer's registry
/// entry (OptimizerRegistry.h); the values here are AdamW's.
struct OptimizerOptions {
  /// A registered optimizer's name, or "none" (train-autodiff: the step
  /// returns its gradients).
  std::string optimizer = "adamw";
  double lr = 3.0e-4;
  double minLr = 0.0;
  int64_t warmupSteps = 0;
  int64_t totalSteps = 0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1.0e-8;
  double weightDecay = 0.01;
  double momentum = 0.0;
  /// Sophia: the clipping scale and the steps between Hessian refreshes.
  double rho = 0.04;
  int64_t hessianInterval = 10;
  double clipNorm = 0.0;
  bool masterWeights = true;

  /// The options for `info` with its defaults.
  static OptimizerOptions defaultsOf(const OptimizerInfo &info);
};

/// Refuses options that would train nothing or train on nonsense, with an
/// error at `loc` naming `passName`. `allowNone`: optimizer=none is valid.
LogicalResult checkOptimizerOptions(const OptimizerOptions &options,
                                    Location loc, StringRef passName,
                                    bool allowNone);

/// Appends the optimizer to `step`, a step that returns its loss and one
/// gradient per parameter (`train.grad`): optimizer state arguments and
/// results, the learning rate, clipping and the updates in the
/// `train.block optimizer`. Errors name `passName`.
LogicalResult addOptimizer(func::FuncOp step, const OptimizerOptions &options,
                           StringRef passName);

/// The function of `step`'s module that refreshes its Hessian estimate
/// (#train.hessian_step naming it), or null.
func::FuncOp findHessianStep(func::FuncOp step);

/// Turns `func`, a differentiated copy of the forward whose loss reads
/// labels sampled from its logits and that returns its gradients, into the
/// Hessian step of @`stepName`: per parameter an f32 estimate h
/// (`#train.state<name, h>`) refreshed by `train.hessian_ema` with
/// `options.beta2`, returned with the sampled loss, and the function
/// marked `#train.hessian_step<@stepName, every = hessian-interval>`.
LogicalResult addHessianUpdate(func::FuncOp func,
                               const OptimizerOptions &options,
                               StringRef stepName, StringRef passName);

/// The rewrite of train-fuse-attention: decomposed attention (q·kᵀ, scale,
/// softmax, dropout, ·v) into train.attention.
void populateFuseAttentionPatterns(RewritePatternSet &patterns);

/// The rewrites of train-fuse-elementwise: gelu of a bias_add into
/// train.bias_gelu.
void populateFuseElementwisePatterns(RewritePatternSet &patterns);

#define GEN_PASS_DECL
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"

} // namespace train
} // namespace mlir

#endif // TRAINMEM_DIALECT_TRAIN_TRANSFORMS_PASSES_H
