//===- CudaAttention.cu - the fused attention on CUDA ---------------------===//
//
// train.attention and its gradient on the device, with the index arithmetic
// and the dropout draw of trainmem/Support/Attention.h (the evaluator's and
// the CPU kernels'), exponentials by trainmem::fastExp as on the CPU. No
// score tensor is stored: the scores are recomputed where they are needed.
//
// The forward runs one thread per query row, over its visible keys in order
// with the softmax online (a running maximum and sum), the row's output
// summed in an f32 scratch row. The backward runs without atomics, so its
// sums have one order and the bits do not vary from run to run:
//  - one thread per query row for the row terms (dO · O, in double as on
//    the CPU) and then for dQ (over keys in order);
//  - one thread per key (of a key/value head) for dK and dV, over the query
//    heads that share it and their queries in order.
// The CPU kernels sum the same terms in 64 x 64 tiles through BLAS, so the
// two agree within float tolerance, not to the bit (CudaTest compares them
// with the evaluator). Tiled shared-memory versions are the next step, with
// a device to measure them on.
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.h"
#include "CudaKernels.h"

#include "trainmem/Support/Attention.h"
#include "trainmem/Support/FastExp.h"

#include <limits>

namespace tmrt {
namespace cuda {
namespace {

/// A fused attention's layout, strides, scale and dropout, by value.
struct Shape : trainmem::AttentionLayout {
  int64_t qs[4], ks[4], vs[4], gs[4];
  float scale;
  trainmem::AttentionDropout dropout;

  __device__ int64_t qAt(int64_t b, int64_t h, int64_t i) const {
    return b * qs[0] + h * qs[1] + i * qs[2];
  }
  __device__ int64_t kAt(int64_t b, int64_t kvh, int64_t j) const {
    return b * ks[0] + kvh * ks[1] + j * ks[2];
  }
  __device__ int64_t vAt(int64_t b, int64_t kvh, int64_t j) const {
    return b * vs[0] + kvh * vs[1] + j * vs[2];
  }
  __device__ int64_t gAt(int64_t b, int64_t h, int64_t i) const {
    return b * gs[0] + h * gs[1] + i * gs[2];
  }
  /// scale · q_i · k_j, summed in f32 in the order of d, plus the ALiBi bias
  /// (alibiSlopes: device memory).
  template <typename T>
  __device__ float scaledDot(const T *Q, const T *K, int64_t b, int64_t h,
                             int64_t i, int64_t j) const {
    const T *qi = Q + qAt(b, h, i);
    const T *kj = K + kAt(b, kvHead(h), j);
    float dot = 0.0f;
    for (int64_t d = 0; d < dim; ++d)
      dot += float(qi[d * qs[3]]) * float(kj[d * ks[3]]);
    return dot * scale + bias(h, i, j);
  }
};

/// The kernel's view of the compiler's descriptor, with the strides of the
/// output's gradient; the dropout's stream keyed by `key` and placed by
/// `part` (references or -1).
Shape shapeOf(tmrt_context *ctx, const tmrt_attention_shape &d, int64_t key,
              int64_t part, double scale, double rate) {
  Shape a;
  static_cast<trainmem::AttentionLayout &>(a) = trainmem::AttentionLayout::of(
      d.batch, d.heads, d.kv_heads, d.queries, d.keys, d.dim, d.value_dim,
      d.transpose_output, d.causal);
  const int64_t strides[16] = {d.q0, d.q1, d.q2, d.q3, d.k0, d.k1, d.k2, d.k3,
                               d.v0, d.v1, d.v2, d.v3, d.g0, d.g1, d.g2, d.g3};
  for (int i = 0; i < 4; ++i) {
    a.qs[i] = strides[i];
    a.ks[i] = strides[4 + i];
    a.vs[i] = strides[8 + i];
    a.gs[i] = strides[12 + i];
  }
  a.scale = static_cast<float>(scale);
  if (d.context_parts > 1)
    a.context = {d.context_parts,
                 splitPosition(ctx, d.context_parts, d.context_stride),
                 d.context_balanced != 0};
  if (rate > 0.0) {
    int64_t seed = d.seed;
    if (key >= 0)
      seed += scalarAt<int64_t>(ctx, key);
    a.dropout = trainmem::AttentionDropout::make(
        rate, static_cast<uint64_t>(seed), static_cast<uint64_t>(d.offset),
        dropoutBase(ctx, d.first, part, d.part_elements, d.rank_elements,
                    d.rank_stride));
    if (d.split_block > 0) {
      a.dropout.splitBlock = static_cast<uint64_t>(d.split_block);
      a.dropout.splitParts = static_cast<uint64_t>(d.split_parts);
      a.dropout.splitPosition = static_cast<uint64_t>(
          splitPosition(ctx, d.split_parts, d.split_stride));
    }
  }
  return a;
}

/// The ring form of context parallelism (train.attention `ring`) passes
/// blocks between ranks inside the kernel: built for the CPU backend's
/// communicator only.
bool checkNotRing(tmrt_context *ctx, const char *kernel,
                  const tmrt_attention_shape &d) {
  if (!d.context_ring)
    return true;
  ctx->fail(std::string(kernel) +
            ": the ring form of context parallelism (train-context-parallel "
            "exchange=ring) runs on the cpu backend; on cuda compile with "
            "exchange=all-gather");
  return false;
}

bool checkShape(tmrt_context *ctx, const char *kernel, const Shape &a) {
  if (a.kvHeads <= 0 || a.heads % a.kvHeads != 0 || a.batch < 0 ||
      a.queries < 0 || a.keys < 0 || a.dim < 0 || a.valueDim < 0) {
    ctx->fail(std::string(kernel) + ": heads " + std::to_string(a.heads) +
              " over key/value heads " + std::to_string(a.kvHeads) +
              " or a negative extent");
    return false;
  }
  return true;
}

template <typename T>
void attentionOf(tmrt_context *ctx, const Shape &a, int64_t q, int64_t k,
                 int64_t v, int64_t out, int64_t lse) {
  const T *Q = ctx->at<T>(q), *K = ctx->at<T>(k), *V = ctx->at<T>(v);
  T *O = ctx->at<T>(out);
  float *L = ctx->at<float>(lse);
  int64_t rows = a.batch * a.heads * a.queries;
  Scratch accumulators(ctx, static_cast<uint64_t>(rows * a.valueDim) * 4);
  float *acc = accumulators.as<float>();
  if (!acc)
    return;
  elementwise(ctx, "attention", rows, [=] __device__(int64_t row) {
    int64_t i = row % a.queries, bh = row / a.queries;
    int64_t b = bh / a.heads, h = bh % a.heads, kvh = a.kvHead(h);
    float *o = acc + row * a.valueDim;
    for (int64_t d = 0; d < a.valueDim; ++d)
      o[d] = 0.0f;
    float most = -INFINITY, sum = 0.0f;
    float keepScale = static_cast<float>(a.dropout.keepScale);
    for (int64_t j = 0; j < a.keyEnd(i); ++j) {
      if (!a.visible(i, j))
        continue;
      float s = a.scaledDot(Q, K, b, h, i, j);
      float newMost = most < s ? s : most;
      float rescale = trainmem::fastExp(most - newMost);
      float e = trainmem::fastExp(s - newMost);
      sum = sum * rescale + e;
      most = newMost;
      float weight = a.dropout.keep(a.score(b, h, i, j))
                         ? (a.dropout.rate > 0.0 ? e * keepScale : e)
                         : 0.0f;
      const T *vj = V + a.vAt(b, kvh, j);
      for (int64_t d = 0; d < a.valueDim; ++d)
        o[d] = o[d] * rescale + weight * float(vj[d * a.vs[3]]);
    }
    float inverse = 1.0f / sum;
    T *oi = O + a.outRow(b, h, i);
    for (int64_t d = 0; d < a.valueDim; ++d)
      oi[d] = T(o[d] * inverse);
    L[a.row(b, h, i)] = most + logf(sum);
  });
  ctx->touch(out, rows * a.valueDim * sizeof(T));
  ctx->touch(lse, rows * sizeof(float));
}

/// p_ij = exp(score - lse_i), 0 for a key query i does not see.
template <typename T>
__device__ float probability(const Shape &a, const T *Q, const T *K,
                             const float *L, int64_t b, int64_t h, int64_t i,
                             int64_t j) {
  if (!a.visible(i, j))
    return 0.0f;
  return trainmem::fastExp(a.scaledDot(Q, K, b, h, i, j) - L[a.row(b, h, i)]);
}

/// dP_ij after dropout: (dO_i · v_j), scaled where kept, 0 where dropped.
template <typename T>
__device__ float probabilityGradient(const Shape &a, const T *dO, const T *V,
                                     int64_t b, int64_t h, int64_t i, int64_t j,
                                     bool kept) {
  const T *gi = dO + a.gAt(b, h, i);
  const T *vj = V + a.vAt(b, a.kvHead(h), j);
  float dp = 0.0f;
  for (int64_t d = 0; d < a.valueDim; ++d)
    dp += float(gi[d * a.gs[3]]) * float(vj[d * a.vs[3]]);
  if (a.dropout.rate > 0.0)
    dp = kept ? dp * static_cast<float>(a.dropout.keepScale) : 0.0f;
  return dp;
}

template <typename T>
void attentionGradOf(tmrt_context *ctx, const Shape &a, int64_t dout, int64_t q,
                     int64_t k, int64_t v, int64_t out, int64_t lse, int64_t dq,
                     int64_t dk, int64_t dv) {
  const T *dO = ctx->at<T>(dout), *Q = ctx->at<T>(q), *K = ctx->at<T>(k),
          *V = ctx->at<T>(v), *O = ctx->at<T>(out);
  const float *L = ctx->at<float>(lse);
  T *dQ = ctx->at<T>(dq), *dK = ctx->at<T>(dk), *dV = ctx->at<T>(dv);
  int64_t rows = a.batch * a.heads * a.queries;
  int64_t keyRows = a.batch * a.kvHeads * a.keys;
  Scratch dots(ctx, static_cast<uint64_t>(rows) * 4);
  Scratch sums(ctx, static_cast<uint64_t>(std::max(
                        rows * a.dim, keyRows * (a.dim + a.valueDim))) *
                        4);
  float *rowDot = dots.as<float>(), *acc = sums.as<float>();
  if (!rowDot || !acc)
    return;
  // Row terms: dO_i · O_i in double.
  elementwise(ctx, "attention_grad", rows, [=] __device__(int64_t row) {
    int64_t i = row % a.queries, bh = row / a.queries;
    int64_t b = bh / a.heads, h = bh % a.heads;
    const T *gi = dO + a.gAt(b, h, i);
    const T *oi = O + a.outRow(b, h, i);
    double dot = 0.0;
    for (int64_t d = 0; d < a.valueDim; ++d)
      dot += static_cast<double>(float(gi[d * a.gs[3]])) * float(oi[d]);
    rowDot[row] = static_cast<float>(dot);
  });
  // dQ_i = Σ_j dS_ij k_j, keys in order.
  elementwise(ctx, "attention_grad", rows, [=] __device__(int64_t row) {
    int64_t i = row % a.queries, bh = row / a.queries;
    int64_t b = bh / a.heads, h = bh % a.heads, kvh = a.kvHead(h);
    float *g = acc + row * a.dim;
    for (int64_t d = 0; d < a.dim; ++d)
      g[d] = 0.0f;
    for (int64_t j = 0; j < a.keyEnd(i); ++j) {
      if (!a.visible(i, j))
        continue;
      float p = probability(a, Q, K, L, b, h, i, j);
      bool kept = a.dropout.keep(a.score(b, h, i, j));
      float dp = probabilityGradient(a, dO, V, b, h, i, j, kept);
      float ds = p * (dp - rowDot[row]) * a.scale;
      const T *kj = K + a.kAt(b, kvh, j);
      for (int64_t d = 0; d < a.dim; ++d)
        g[d] += ds * float(kj[d * a.ks[3]]);
    }
    T *dqi = dQ + a.row(b, h, i) * a.dim;
    for (int64_t d = 0; d < a.dim; ++d)
      dqi[d] = T(g[d]);
  });
  // dK_j = Σ dS_ij q_i, dV_j = Σ p_kept,ij dO_i: the group's heads, then
  // queries, in order.
  elementwise(ctx, "attention_grad", keyRows, [=] __device__(int64_t keyRow) {
    int64_t j = keyRow % a.keys, bk = keyRow / a.keys;
    int64_t b = bk / a.kvHeads, kvh = bk % a.kvHeads;
    float *gk = acc + keyRow * (a.dim + a.valueDim), *gv = gk + a.dim;
    for (int64_t d = 0; d < a.dim + a.valueDim; ++d)
      gk[d] = 0.0f;
    int64_t group = a.group();
    float keepScale = static_cast<float>(a.dropout.keepScale);
    for (int64_t g = 0; g < group; ++g) {
      int64_t h = kvh * group + g;
      for (int64_t i = a.causal && a.context.isWhole() ? j : 0; i < a.queries;
           ++i) {
        if (!a.visible(i, j))
          continue;
        float p = probability(a, Q, K, L, b, h, i, j);
        bool kept = a.dropout.keep(a.score(b, h, i, j));
        float pKept = a.dropout.rate > 0.0 ? (kept ? p * keepScale : 0.0f) : p;
        float dp = probabilityGradient(a, dO, V, b, h, i, j, kept);
        float ds =
            p * (dp - rowDot[(b * a.heads + h) * a.queries + i]) * a.scale;
        const T *qi = Q + a.qAt(b, h, i);
        const T *gi = dO + a.gAt(b, h, i);
        for (int64_t d = 0; d < a.dim; ++d)
          gk[d] += ds * float(qi[d * a.qs[3]]);
        for (int64_t d = 0; d < a.valueDim; ++d)
          gv[d] += pKept * float(gi[d * a.gs[3]]);
      }
    }
    T *dkj = dK + keyRow * a.dim;
    T *dvj = dV + keyRow * a.valueDim;
    for (int64_t d = 0; d < a.dim; ++d)
      dkj[d] = T(gk[d]);
    for (int64_t d = 0; d < a.valueDim; ++d)
      dvj[d] = T(gv[d]);
  });
  ctx->touch(dq, rows * a.dim * sizeof(T));
  ctx->touch(dk, keyRows * a.dim * sizeof(T));
  ctx->touch(dv, keyRows * a.valueDim * sizeof(T));
}

} // namespace

void attention(tmrt_context *ctx, int64_t q, int64_t k, int64_t v, int64_t out,
               int64_t lse, int64_t key, int64_t part, double scale,
               double rate, const tmrt_attention_shape *shape,
               const double *alibi_slopes) {
  Shape a = shapeOf(ctx, *shape, key, part, scale, rate);
  if (!checkNotRing(ctx, "attention", *shape) ||
      !checkShape(ctx, "attention", a))
    return;
  DeviceDoubles slopes(ctx, alibi_slopes, shape->heads);
  if (slopes.failed(alibi_slopes))
    return;
  a.alibiSlopes = slopes.device;
  withFloatType(ctx, "attention", {q, k, v, out}, [&](auto type) {
    attentionOf<decltype(type)>(ctx, a, q, k, v, out, lse);
  });
}

void attention_grad(tmrt_context *ctx, int64_t dout, int64_t q, int64_t k,
                    int64_t v, int64_t out, int64_t lse, int64_t dq, int64_t dk,
                    int64_t dv, int64_t key, int64_t part, double scale,
                    double rate, const tmrt_attention_shape *shape,
                    const double *alibi_slopes) {
  Shape a = shapeOf(ctx, *shape, key, part, scale, rate);
  if (!checkNotRing(ctx, "attention_grad", *shape) ||
      !checkShape(ctx, "attention_grad", a))
    return;
  DeviceDoubles slopes(ctx, alibi_slopes, shape->heads);
  if (slopes.failed(alibi_slopes))
    return;
  a.alibiSlopes = slopes.device;
  withFloatType(ctx, "attention_grad", {dout, q, k, v, out, dq, dk, dv},
                [&](auto type) {
                  attentionGradOf<decltype(type)>(ctx, a, dout, q, k, v, out,
                                                  lse, dq, dk, dv);
                });
}

} // namespace cuda
} // namespace tmrt
