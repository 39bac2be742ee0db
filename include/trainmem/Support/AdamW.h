//===- AdamW.h - the AdamW update of one element -----------------*- C++ -*-===//
//
// Header-only and free of LLVM: train.adamw, the fused 8-bit update, the
// reference evaluator and the runtime's kernels all update an element with
// this one function, so their results agree bit for bit.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_SUPPORT_ADAMW_H
#define TRAINMEM_SUPPORT_ADAMW_H

#include <cmath>
#include <cstdint>

namespace trainmem {

struct AdamWStep {
  double lr, beta1, beta2, epsilon, weightDecay;
  double correction1, correction2; // 1 - beta^t

  AdamWStep(double lr, double beta1, double beta2, double epsilon,
            double weightDecay, int64_t step)
      : lr(lr), beta1(beta1), beta2(beta2), epsilon(epsilon),
        weightDecay(weightDecay),
        correction1(1.0 - std::pow(beta1, static_cast<double>(step))),
        correction2(1.0 - std::pow(beta2, static_cast<double>(step))) {}

  /// m' = β1 m + (1-β1) g, v' = β2 v + (1-β2) g²,
  /// p' = p - lr (m'/c1 / (sqrt(v'/c2) + eps) + wd p), in double, stored f32.
  void apply(float param, float grad, float m, float v, float &newParam,
             float &newM, float &newV) const {
    double g = grad;
    double mi = beta1 * m + (1.0 - beta1) * g;
    double vi = beta2 * v + (1.0 - beta2) * g * g;
    double update = (mi / correction1) / (std::sqrt(vi / correction2) + epsilon) +
                    weightDecay * param;
    newM = static_cast<float>(mi);
    newV = static_cast<float>(vi);
    newParam = static_cast<float>(param - lr * update);
  }
};

/// SGD with momentum on one element (train.sgd with a buffer and the fused
/// 8-bit update): g' = g + wd p, b' = momentum b + g',
/// p' = p - lr (nesterov ? g' + momentum b' : b').
struct SGDMomentumStep {
  double lr, momentum, weightDecay;
  bool nesterov;

  void apply(float param, float grad, float buffer, float &newParam,
             float &newBuffer) const {
    double g = grad + weightDecay * param;
    double b = momentum * buffer + g;
    newBuffer = static_cast<float>(b);
    newParam = static_cast<float>(param - lr * (nesterov ? g + momentum * b : b));
  }
};

} // namespace trainmem

#endif // TRAINMEM_SUPPORT_ADAMW_H
