//===- Activations.h - scalar activation formulas ----------------*- C++ -*-===//
//
// The formulas of GELU (tanh approximation) and SiLU and their derivatives,
// header-only and free of LLVM, so the reference evaluator and the runtime's
// kernels compute exactly the same thing.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_SUPPORT_ACTIVATIONS_H
#define TRAINMEM_SUPPORT_ACTIVATIONS_H

#include <cmath>

namespace trainmem {

constexpr double kGeluC = 0.7978845608028654; // sqrt(2 / pi)
constexpr double kGeluA = 0.044715;

/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as GPT-2 uses.
inline double gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(kGeluC * (x + kGeluA * x * x * x)));
}

inline double geluDerivative(double x) {
  double t = std::tanh(kGeluC * (x + kGeluA * x * x * x));
  return 0.5 * (1.0 + t) +
         0.5 * x * (1.0 - t * t) * kGeluC * (1.0 + 3.0 * kGeluA * x * x);
}

inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

/// x · sigmoid(x).
inline double silu(double x) { return x * sigmoid(x); }

inline double siluDerivative(double x) {
  double s = sigmoid(x);
  return s * (1.0 + x * (1.0 - s));
}

} // namespace trainmem

#endif // TRAINMEM_SUPPORT_ACTIVATIONS_H
