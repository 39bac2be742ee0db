//===- RowKernels.h - the row kernels' math, for the CPU and the GPU -*- C++
//-*-===//
//
// One row of the runtime's row kernels (layer and RMS norm and their
// gradients, softmax and its gradient, the cross-entropy head), written
// once: the CPU kernels (runtime/lib/cpu/Kernels.cpp) call these per row in
// their tasks, the CUDA kernels (runtime/lib/cuda) per thread, so the CPU
// tests exercise the sums the GPU forms, in the same order and precision
// (double, elements widened from T through f32; each result rounded to f32,
// then to T). The only differences left are libm's: exp, log and sqrt are
// the platform's (glibc's on the host, CUDA's on the device), each within
// an ulp of the exact value.
//
// T is float, trainmem::BFloat16 or trainmem::Float16 (Float16.h).
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_SUPPORT_ROWKERNELS_H
#define TRAINMEM_SUPPORT_ROWKERNELS_H

#include "trainmem/Support/HostDevice.h"

#include <cmath>
#include <cstdint>

namespace trainmem {
namespace rows {

/// Rows per task of a sum over rows (the norms' parameter gradients): fixed,
/// so that the partial sums, and the order they are added in, depend
/// neither on the thread count nor on the backend.
constexpr int64_t kReductionRows = 64;

/// An element as the kernels read it: widened to f32 (exactly).
template <typename T> TRAINMEM_HD inline float wide(const T &x) {
  return static_cast<float>(x);
}

/// A result as the kernels store it: rounded to f32, then to T.
template <typename T> TRAINMEM_HD inline T narrow(double x) {
  return T(static_cast<float>(x));
}

/// Mean and 1/sqrt(variance + eps) of a row (two passes, in double).
template <typename T>
TRAINMEM_HD inline void meanAndRstd(const T *x, int64_t cols, double eps,
                                    double &mean, double &rstd) {
  mean = 0.0;
  for (int64_t c = 0; c < cols; ++c)
    mean += wide(x[c]);
  mean /= cols;
  double var = 0.0;
  for (int64_t c = 0; c < cols; ++c)
    var += (wide(x[c]) - mean) * (wide(x[c]) - mean);
  rstd = 1.0 / sqrt(var / cols + eps);
}

/// y = (x - mean) / sqrt(var + eps) · gamma + beta.
template <typename T>
TRAINMEM_HD inline void layerNorm(const T *x, const T *gamma, const T *beta,
                                  T *y, int64_t cols, double eps) {
  double mean, rstd;
  meanAndRstd(x, cols, eps, mean, rstd);
  for (int64_t c = 0; c < cols; ++c)
    y[c] =
        narrow<T>((wide(x[c]) - mean) * rstd * wide(gamma[c]) + wide(beta[c]));
}

/// dx of one row, and the row's terms of dgamma and dbeta added into
/// `dgamma`, `dbeta` (double, the caller's partial sums): with x̂ = (x -
/// mean) rstd and d = dy · gamma, dx = rstd (d - mean(d) - x̂ mean(d x̂)).
template <typename T>
TRAINMEM_HD inline void layerNormGrad(const T *dy, const T *x, const T *gamma,
                                      T *dx, double *dgamma, double *dbeta,
                                      int64_t cols, double eps) {
  double mean, rstd;
  meanAndRstd(x, cols, eps, mean, rstd);
  double meanD = 0.0, meanDX = 0.0;
  for (int64_t c = 0; c < cols; ++c) {
    double xhat = (wide(x[c]) - mean) * rstd;
    double d = static_cast<double>(wide(dy[c])) * wide(gamma[c]);
    meanD += d;
    meanDX += d * xhat;
    dgamma[c] += wide(dy[c]) * xhat;
    dbeta[c] += wide(dy[c]);
  }
  meanD /= cols;
  meanDX /= cols;
  // x̂ and d again: the same expressions, the same values.
  for (int64_t c = 0; c < cols; ++c) {
    double xhat = (wide(x[c]) - mean) * rstd;
    double d = static_cast<double>(wide(dy[c])) * wide(gamma[c]);
    dx[c] = narrow<T>(rstd * (d - meanD - xhat * meanDX));
  }
}

/// 1 / sqrt(mean(x²) + eps).
template <typename T>
TRAINMEM_HD inline double inverseRms(const T *x, int64_t cols, double eps) {
  double ms = 0.0;
  for (int64_t c = 0; c < cols; ++c)
    ms += static_cast<double>(wide(x[c])) * wide(x[c]);
  return 1.0 / sqrt(ms / cols + eps);
}

/// An RMS norm's scale of column c: gamma + the gain offset, added in f32
/// (as Gemma's `1.0 + weight.float()`; 0 for every other norm).
template <typename T>
TRAINMEM_HD inline float rmsGain(const T *gamma, int64_t c,
                                 double gainOffset) {
  return static_cast<float>(wide(gamma[c])) + static_cast<float>(gainOffset);
}

/// y = x / rms(x) · (gamma + gainOffset).
template <typename T>
TRAINMEM_HD inline void rmsNorm(const T *x, const T *gamma, T *y, int64_t cols,
                                double eps, double gainOffset = 0.0) {
  double rrms = inverseRms(x, cols, eps);
  for (int64_t c = 0; c < cols; ++c)
    y[c] = narrow<T>(wide(x[c]) * rrms * rmsGain(gamma, c, gainOffset));
}

/// dx of one row, its dgamma terms added into `dgamma`.
template <typename T>
TRAINMEM_HD inline void rmsNormGrad(const T *dy, const T *x, const T *gamma,
                                    T *dx, double *dgamma, int64_t cols,
                                    double eps, double gainOffset = 0.0) {
  double rrms = inverseRms(x, cols, eps);
  double dot = 0.0;
  for (int64_t c = 0; c < cols; ++c) {
    dot += static_cast<double>(wide(dy[c])) * rmsGain(gamma, c, gainOffset) *
           wide(x[c]);
    dgamma[c] += static_cast<double>(wide(dy[c])) * wide(x[c]) * rrms;
  }
  for (int64_t c = 0; c < cols; ++c)
    dx[c] = narrow<T>(rrms * wide(dy[c]) * rmsGain(gamma, c, gainOffset) -
                      wide(x[c]) * rrms * rrms * rrms * dot / cols);
}

/// The largest of the first `n` values (double; -inf for none).
template <typename T> TRAINMEM_HD inline double rowMax(const T *x, int64_t n) {
  double most = -INFINITY;
  for (int64_t c = 0; c < n; ++c) {
    double v = wide(x[c]);
    most = most < v ? v : most; // std::max's choice
  }
  return most;
}

/// Softmax of the first `visible` values (the rest of the `cols` zero: a
/// causal row).
template <typename T>
TRAINMEM_HD inline void softmax(const T *x, T *y, int64_t cols,
                                int64_t visible) {
  double most = rowMax(x, visible);
  double sum = 0.0;
  for (int64_t c = 0; c < visible; ++c)
    sum += exp(wide(x[c]) - most);
  for (int64_t c = 0; c < visible; ++c)
    y[c] = narrow<T>(exp(wide(x[c]) - most) / sum);
  for (int64_t c = visible; c < cols; ++c)
    y[c] = T(0.0f);
}

/// The ALiBi bias of key `key` for query `query` with slope `slope`:
/// slope · (key - query), in double (train.softmax's alibi_slopes).
TRAINMEM_HD inline double alibiBias(double slope, int64_t query, int64_t key) {
  return slope * static_cast<double>(key - query);
}

/// softmax() of the row plus ALiBi's bias for query `query`.
template <typename T>
TRAINMEM_HD inline void softmaxAlibi(const T *x, T *y, int64_t cols,
                                     int64_t visible, double slope,
                                     int64_t query) {
  double most = -INFINITY;
  for (int64_t c = 0; c < visible; ++c) {
    double v = wide(x[c]) + alibiBias(slope, query, c);
    most = most < v ? v : most;
  }
  double sum = 0.0;
  for (int64_t c = 0; c < visible; ++c)
    sum += exp(wide(x[c]) + alibiBias(slope, query, c) - most);
  for (int64_t c = 0; c < visible; ++c)
    y[c] = narrow<T>(exp(wide(x[c]) + alibiBias(slope, query, c) - most) /
                     sum);
  for (int64_t c = visible; c < cols; ++c)
    y[c] = T(0.0f);
}

/// dx = y (dy - dy · y).
template <typename T>
TRAINMEM_HD inline void softmaxGrad(const T *dy, const T *y, T *dx,
                                    int64_t cols) {
  double dot = 0.0;
  for (int64_t c = 0; c < cols; ++c)
    dot += static_cast<double>(wide(dy[c])) * wide(y[c]);
  for (int64_t c = 0; c < cols; ++c)
    dx[c] = narrow<T>(wide(y[c]) * (wide(dy[c]) - dot));
}

/// The cross-entropy of a row of logits against target `t` (in range):
/// log-sum-exp minus the target's logit; with label smoothing ε, against
/// (1 - ε) onehot(t) + ε / vocab.
template <typename T>
TRAINMEM_HD inline double crossEntropy(const T *logits, int64_t vocab,
                                       int64_t t, double smoothing = 0.0) {
  double most = rowMax(logits, vocab);
  double z = 0.0, sum = 0.0;
  for (int64_t c = 0; c < vocab; ++c) {
    z += exp(wide(logits[c]) - most);
    sum += wide(logits[c]);
  }
  if (smoothing == 0.0)
    return most + log(z) - wide(logits[t]);
  return most + log(z) - (1.0 - smoothing) * wide(logits[t]) -
         smoothing * (sum / static_cast<double>(vocab));
}

/// The gradient of a row's cross-entropy, times `scale` (the loss's
/// gradient): scale (softmax - onehot(t)); with label smoothing ε,
/// scale (softmax - (1 - ε) onehot(t) - ε / vocab).
template <typename T>
TRAINMEM_HD inline void crossEntropyGrad(const T *logits, T *dx, int64_t vocab,
                                         int64_t t, double scale,
                                         double smoothing = 0.0) {
  double most = rowMax(logits, vocab);
  double z = 0.0;
  for (int64_t c = 0; c < vocab; ++c)
    z += exp(wide(logits[c]) - most);
  double logZ = log(z);
  double floor = smoothing / static_cast<double>(vocab);
  for (int64_t c = 0; c < vocab; ++c)
    dx[c] = narrow<T>(scale * (exp(wide(logits[c]) - most - logZ) -
                               ((c == t ? 1.0 - smoothing : 0.0) + floor)));
}

/// A vocabulary part's terms of a row's cross-entropy (Megatron's
/// parallel cross-entropy): the part's logits are columns [first, first +
/// n) of the whole row, `most` the whole row's maximum. Σ exp(logit -
/// most) over the part, and the target's logit when it is one of the
/// part's columns (0 otherwise).
template <typename T>
TRAINMEM_HD inline void crossEntropyPart(const T *logits, int64_t n,
                                         int64_t first, int64_t t, float most,
                                         float &sumExp, float &targetLogit) {
  double z = 0.0;
  for (int64_t c = 0; c < n; ++c)
    z += exp(wide(logits[c]) - static_cast<double>(most));
  sumExp = static_cast<float>(z);
  targetLogit = t >= first && t < first + n ? wide(logits[t - first]) : 0.0f;
}

/// The gradient of a part's terms: dSumExp · exp(logit - most) + (the
/// target's column) dTargetLogit.
template <typename T>
TRAINMEM_HD inline void
crossEntropyPartGrad(const T *logits, T *dx, int64_t n, int64_t first,
                     int64_t t, float most, float dSumExp, float dTargetLogit) {
  for (int64_t c = 0; c < n; ++c)
    dx[c] =
        narrow<T>(static_cast<double>(dSumExp) *
                      exp(wide(logits[c]) - static_cast<double>(most)) +
                  (first + c == t ? static_cast<double>(dTargetLogit) : 0.0));
}

/// A row's cross-entropy from its whole vocabulary's sums.
TRAINMEM_HD inline double crossEntropyMerge(float sumExp, float targetLogit,
                                            float most) {
  return static_cast<double>(most) + log(static_cast<double>(sumExp)) -
         static_cast<double>(targetLogit);
}

} // namespace rows
} // namespace trainmem

#endif // TRAINMEM_SUPPORT_ROWKERNELS_H
