//===- AdamW.h - the optimizer updates of one element -----------*- C++ -*-===//
//
// Header-only and free of LLVM: train.adamw, train.lion, train.sophia,
// train.hessian_ema, train.sgd, their fused 8-bit updates, the reference
// evaluator and the runtime's kernels all update an element with these
// functions, so their results agree bit for bit.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_SUPPORT_ADAMW_H
#define TRAINMEM_SUPPORT_ADAMW_H

#include "trainmem/Support/HostDevice.h"

#include <cmath>
#include <cstdint>

namespace trainmem {

/// How a fused 8-bit update keeps one of its states: block-wise on the
/// signed dynamic map (a momentum) or the unsigned one (a second moment, a
/// Hessian estimate), and whether the update writes it or only reads it
/// (Sophia's h, which its Hessian step refreshes). Each step below lists
/// its states (kStateKinds, in the ops' operand order) and updates them as
/// an array (applyStates), so one block loop per executor serves every
/// optimizer (blockwise8bit in the evaluator and in the CPU and CUDA
/// backends).
struct QuantizedStateKind {
  bool isSigned;
  bool written;
};

struct AdamWStep {
  float beta1, oneMinusBeta1, beta2, oneMinusBeta2;
  /// lr sqrt(1-β2^t) / (1-β1^t), eps sqrt(1-β2^t) and 1 - lr wd: the bias
  /// corrections folded into the step size and epsilon as in Kingma & Ba
  /// (2015, end of section 2), worked out in double once per tensor.
  float stepSize, epsilonHat, decay;

  AdamWStep(double lr, double beta1, double beta2, double epsilon,
            double weightDecay, int64_t step)
      : beta1(static_cast<float>(beta1)),
        oneMinusBeta1(static_cast<float>(1.0 - beta1)),
        beta2(static_cast<float>(beta2)),
        oneMinusBeta2(static_cast<float>(1.0 - beta2)) {
    double correction1 = 1.0 - std::pow(beta1, static_cast<double>(step));
    double correction2 = 1.0 - std::pow(beta2, static_cast<double>(step));
    stepSize = static_cast<float>(lr * std::sqrt(correction2) / correction1);
    epsilonHat = static_cast<float>(epsilon * std::sqrt(correction2));
    decay = static_cast<float>(1.0 - lr * weightDecay);
  }

  /// m' = β1 m + (1-β1) g, v' = β2 v + (1-β2) g²,
  /// p' = (1 - lr wd) p - stepSize m' / (sqrt(v') + epsilonHat), which is
  /// p - lr (m'/c1 / (sqrt(v'/c2) + eps) + wd p) with c = 1 - β^t. In f32,
  /// one operation at a time (the build contracts no multiply-add), so
  /// vector kernels that do the same operations get the same bits.
  TRAINMEM_HD void apply(float param, float grad, float m, float v,
                         float &newParam, float &newM, float &newV) const {
    float mi = beta1 * m + oneMinusBeta1 * grad;
    float vi = beta2 * v + oneMinusBeta2 * (grad * grad);
    float denominator = sqrtf(vi) + epsilonHat;
    newM = mi;
    newV = vi;
    newParam = param * decay - stepSize * (mi / denominator);
  }

  static constexpr int kStates = 2;
  static constexpr QuantizedStateKind kStateKinds[kStates] = {{true, true},
                                                              {false, true}};
  TRAINMEM_HD void applyStates(float param, float grad, const float *state,
                               float &newParam, float *newState) const {
    apply(param, grad, state[0], state[1], newParam, newState[0], newState[1]);
  }
};

/// The learning rate at `step` (train.lr_schedule): linear warm-up to
/// `peak` over `warmupSteps`, then a cosine decay to `minimum` at
/// `totalSteps`, `minimum` after; computed in double. The evaluator and
/// every runtime backend call this.
TRAINMEM_HD inline double scheduledLearningRate(double peak, double minimum,
                                                int64_t warmupSteps,
                                                int64_t totalSteps,
                                                int64_t step) {
  double t = static_cast<double>(step);
  double warmup = static_cast<double>(warmupSteps);
  double total = static_cast<double>(totalSteps);
  if (warmup > 0 && t <= warmup)
    return peak * t / warmup;
  if (t >= total)
    return minimum;
  return minimum + 0.5 * (peak - minimum) *
                       (1.0 + cos(M_PI * (t - warmup) / (total - warmup)));
}

/// SGD with momentum on one element (train.sgd with a buffer and the fused
/// 8-bit update): g' = g + wd p, b' = momentum b + g',
/// p' = p - lr (nesterov ? g' + momentum b' : b').
struct SGDMomentumStep {
  double lr, momentum, weightDecay;
  bool nesterov;

  TRAINMEM_HD void apply(float param, float grad, float buffer, float &newParam,
                         float &newBuffer) const {
    double g = grad + weightDecay * param;
    double b = momentum * buffer + g;
    newBuffer = static_cast<float>(b);
    newParam = static_cast<float>(param - lr * (nesterov ? g + momentum * b : b));
  }

  static constexpr int kStates = 1;
  static constexpr QuantizedStateKind kStateKinds[kStates] = {{true, true}};
  TRAINMEM_HD void applyStates(float param, float grad, const float *state,
                               float &newParam, float *newState) const {
    apply(param, grad, state[0], newParam, newState[0]);
  }
};

/// Lion on one element (train.lion and its fused 8-bit form; Chen et al.
/// 2023): c = β1 m + (1-β1) g, p' = (1 - lr wd) p - lr sign(c),
/// m' = β2 m + (1-β2) g, in f32 one operation at a time (sign(0) = 0),
/// the decay factor worked out in double once per tensor.
struct LionStep {
  float beta1, oneMinusBeta1, beta2, oneMinusBeta2, lr, decay;

  LionStep(double lr, double beta1, double beta2, double weightDecay)
      : beta1(static_cast<float>(beta1)),
        oneMinusBeta1(static_cast<float>(1.0 - beta1)),
        beta2(static_cast<float>(beta2)),
        oneMinusBeta2(static_cast<float>(1.0 - beta2)),
        lr(static_cast<float>(lr)),
        decay(static_cast<float>(1.0 - lr * weightDecay)) {}

  TRAINMEM_HD void apply(float param, float grad, float m, float &newParam,
                         float &newM) const {
    float c = beta1 * m + oneMinusBeta1 * grad;
    float sign = c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : 0.0f);
    newM = beta2 * m + oneMinusBeta2 * grad;
    newParam = param * decay - lr * sign;
  }

  static constexpr int kStates = 1;
  static constexpr QuantizedStateKind kStateKinds[kStates] = {{true, true}};
  TRAINMEM_HD void applyStates(float param, float grad, const float *state,
                               float &newParam, float *newState) const {
    apply(param, grad, state[0], newParam, newState[0]);
  }
};

/// SophiaG on one element (train.sophia and its fused 8-bit form; Liu et
/// al. 2023): m' = β1 m + (1-β1) g,
/// p' = (1 - lr wd) p - lr sign(m') min(|m'| / (ρ batch h + eps), 1), in
/// f32 one operation at a time, ρ batch and the decay factor in double once
/// per tensor.
struct SophiaStep {
  float beta1, oneMinusBeta1, lr, decay, rhoBatch, epsilon;

  SophiaStep(double lr, double beta1, double rho, int64_t batch, double epsilon,
             double weightDecay)
      : beta1(static_cast<float>(beta1)),
        oneMinusBeta1(static_cast<float>(1.0 - beta1)),
        lr(static_cast<float>(lr)),
        decay(static_cast<float>(1.0 - lr * weightDecay)),
        rhoBatch(static_cast<float>(rho * static_cast<double>(batch))),
        epsilon(static_cast<float>(epsilon)) {}

  TRAINMEM_HD void apply(float param, float grad, float m, float h,
                         float &newParam, float &newM) const {
    float mi = beta1 * m + oneMinusBeta1 * grad;
    float magnitude = mi < 0.0f ? -mi : mi;
    float ratio = magnitude / (rhoBatch * h + epsilon);
    if (!(ratio < 1.0f))
      ratio = 1.0f;
    float sign = mi > 0.0f ? 1.0f : (mi < 0.0f ? -1.0f : 0.0f);
    newM = mi;
    newParam = param * decay - lr * (sign * ratio);
  }

  /// m written, h read.
  static constexpr int kStates = 2;
  static constexpr QuantizedStateKind kStateKinds[kStates] = {{true, true},
                                                              {false, false}};
  TRAINMEM_HD void applyStates(float param, float grad, const float *state,
                               float &newParam, float *newState) const {
    apply(param, grad, state[0], state[1], newParam, newState[0]);
  }
};

/// Sophia's Hessian estimate refreshed from a sampled gradient
/// (train.hessian_ema): h' = β2 h + (1-β2) g², in f32.
struct HessianEMAStep {
  float beta2, oneMinusBeta2;

  explicit HessianEMAStep(double beta2)
      : beta2(static_cast<float>(beta2)),
        oneMinusBeta2(static_cast<float>(1.0 - beta2)) {}

  TRAINMEM_HD float apply(float h, float grad) const {
    return beta2 * h + oneMinusBeta2 * (grad * grad);
  }
};

} // namespace trainmem

#endif // TRAINMEM_SUPPORT_ADAMW_H
