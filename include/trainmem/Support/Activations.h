//===- Activations.h - scalar activation formulas ----------------*- C++
//-*-===//
//
// The formulas of the activations and their derivatives, header-only and
// free of LLVM, so the reference evaluator and the runtime's kernels compute
// exactly the same thing. An activation of trainmem-runtime/Activations.def
// is a struct here with `forward(x)` and `derivative(x)` on doubles that
// hold f32 values (docs/WritingAPass.md, "A new activation").
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_SUPPORT_ACTIVATIONS_H
#define TRAINMEM_SUPPORT_ACTIVATIONS_H

#include "trainmem/Support/FastExp.h"

#include <cmath>

namespace trainmem {

constexpr double kGeluC = 0.7978845608028654; // sqrt(2 / pi)
constexpr double kGeluA = 0.044715;

// In f32, from fastExp: loops of them vectorize, and the evaluator and the
// kernels (which call these same functions) get the same bits. The forms
// avoid cancellation: 1 + tanh(u) = 2 sigmoid(2u) and 1 - sigmoid(z) =
// e^-z sigmoid(z), each a quotient of positive terms.

/// sigmoid(z) = 1 / (1 + e^-z) and 1 - sigmoid(z), in f32.
struct Sigmoid {
  float value, complement;
  TRAINMEM_HD explicit Sigmoid(float z) {
    float e = fastExp(-z);
    value = 1.0f / (1.0f + e);
    complement = e * value;
  }
};

/// GELU's tanh argument sqrt(2/pi) (x + 0.044715 x^3), doubled.
TRAINMEM_HD inline float geluArgument2(float x) {
  const float c2 = static_cast<float>(2.0 * kGeluC),
              a = static_cast<float>(kGeluA);
  return c2 * (x + a * (x * x * x));
}

/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as GPT-2 uses, which
/// is x sigmoid(2u).
TRAINMEM_HD inline float geluF(float x) {
  return x * Sigmoid(geluArgument2(x)).value;
}

/// d/dx of geluF: s + x s (1 - s) 2u', s = sigmoid(2u), u' = sqrt(2/pi)
/// (1 + 3 · 0.044715 x^2).
TRAINMEM_HD inline float geluDerivativeF(float x) {
  const float c2 = static_cast<float>(2.0 * kGeluC),
              a3 = static_cast<float>(3.0 * kGeluA);
  Sigmoid s(geluArgument2(x));
  return s.value + x * (s.value * s.complement) * (c2 * (1.0f + a3 * (x * x)));
}

/// x · sigmoid(x).
TRAINMEM_HD inline float siluF(float x) { return x * Sigmoid(x).value; }

/// d/dx of siluF: s (1 + x (1 - s)).
TRAINMEM_HD inline float siluDerivativeF(float x) {
  Sigmoid s(x);
  return s.value * (1.0f + x * s.complement);
}

/// 0.5 x (1 + erf(x / sqrt(2))), PyTorch's nn.GELU() (approximate='none'),
/// computed as PyTorch's CPU kernel computes it, in f32.
TRAINMEM_HD inline float geluExactF(float x) {
  const float r = 0.70710678118654752440f; // 1 / sqrt(2)
  return x * 0.5f * (1.0f + erff(x * r));
}

/// d/dx of geluExactF: Phi(x) + x phi(x).
TRAINMEM_HD inline float geluExactDerivativeF(float x) {
  const float r = 0.70710678118654752440f,
              c = 0.39894228040143267794f; // 1 / sqrt(2 pi)
  return 0.5f * (1.0f + erff(x * r)) + x * (c * expf(-0.5f * x * x));
}

/// The same on doubles that hold f32 values (the evaluator's tensors).
TRAINMEM_HD inline double gelu(double x) {
  return geluF(static_cast<float>(x));
}
TRAINMEM_HD inline double geluDerivative(double x) {
  return geluDerivativeF(static_cast<float>(x));
}
TRAINMEM_HD inline double geluExact(double x) {
  return geluExactF(static_cast<float>(x));
}
TRAINMEM_HD inline double geluExactDerivative(double x) {
  return geluExactDerivativeF(static_cast<float>(x));
}
TRAINMEM_HD inline double silu(double x) {
  return siluF(static_cast<float>(x));
}
TRAINMEM_HD inline double siluDerivative(double x) {
  return siluDerivativeF(static_cast<float>(x));
}

/// GELU's tanh approximation (train.gelu) and its exact erf form
/// (train.gelu {exact}): kernels of Activations.def without ops of their
/// own.
struct Gelu {
  TRAINMEM_HD static double forward(double x) { return gelu(x); }
  TRAINMEM_HD static double derivative(double x) { return geluDerivative(x); }
};
struct GeluExact {
  TRAINMEM_HD static double forward(double x) { return geluExact(x); }
  TRAINMEM_HD static double derivative(double x) {
    return geluExactDerivative(x);
  }
};

/// SiLU (swish), train.silu: x · sigmoid(x).
struct Silu {
  TRAINMEM_HD static double forward(double x) { return silu(x); }
  TRAINMEM_HD static double derivative(double x) { return siluDerivative(x); }
};

/// ReLU, train.relu: max(x, 0), NaN kept (PyTorch's relu); the derivative
/// is 1 where x > 0 or x is NaN, else 0 (PyTorch's threshold_backward, also
/// at 0).
struct Relu {
  TRAINMEM_HD static double forward(double x) {
    return x > 0.0 || x != x ? x : 0.0;
  }
  TRAINMEM_HD static double derivative(double x) {
    return x <= 0.0 ? 0.0 : 1.0;
  }
};

/// Squared ReLU (So et al. 2021, Primer; Persimmon's "relu2"), train.relu2:
/// relu(x)^2 in f32, derivative 2 relu(x).
struct Relu2 {
  TRAINMEM_HD static double forward(double x) {
    float r = static_cast<float>(Relu::forward(x));
    return static_cast<double>(r * r);
  }
  TRAINMEM_HD static double derivative(double x) {
    return 2.0 * Relu::forward(x);
  }
};

/// train.bias_gelu on one element: gelu(x + b), the sum rounded to T (as
/// train.bias_add stores it) first; and its gradient dy · gelu'(x + b).
/// T is float, BFloat16 or Float16; the result is f32, rounded to T by
/// the caller's store.
template <typename T> TRAINMEM_HD inline float biasGelu(T x, T b) {
  T sum(static_cast<float>(x) + static_cast<float>(b));
  return static_cast<float>(gelu(static_cast<double>(static_cast<float>(sum))));
}
template <typename T> TRAINMEM_HD inline float biasGeluGrad(T dy, T x, T b) {
  T sum(static_cast<float>(x) + static_cast<float>(b));
  return static_cast<float>(
      static_cast<double>(static_cast<float>(dy)) *
      geluDerivative(static_cast<double>(static_cast<float>(sum))));
}

} // namespace trainmem

#endif // TRAINMEM_SUPPORT_ACTIVATIONS_H
