//===- CudaState.cu - dropout, loss scaling and 8-bit state on CUDA -------===//
//
// The CUDA versions of the kernels whose per-element math lives in the
// support headers, compiled here for the device:
//  - dropout, its gradient and its mask: Philox-4x32-10 (Philox.h) at the
//    same stream positions as the CPU kernels, one thread per Philox block
//    of four positions, so a mask is the CPU's bit for bit;
//  - dynamic loss scaling (LossScaleUpdate.h): the finiteness of the
//    gradients in a device flag that unscale reads on the device; the scale's
//    state advanced on the host once per step;
//  - 8-bit optimizer state (DynamicMap.h, AdamW.h): one thread block per
//    quantization block; the block's maximum by a reduction whose result
//    does not depend on its order, the codes by quantizeToEntries (the
//    reference quantizer, which the CPU's MapQuantizer equals), so that the
//    codes and maxima are the CPU kernels'.
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.h"
#include "CudaKernels.h"

#include "trainmem/Support/AdamW.h"
#include "trainmem/Support/DynamicMap.h"
#include "trainmem/Support/ExactSum.h"
#include "trainmem/Support/LossScaleUpdate.h"
#include "trainmem/Support/Philox.h"
#include "trainmem/Support/Sample.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tmrt {
namespace cuda {

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

namespace {

/// The seed with the step's key added (train.dropout keyed by the step).
uint64_t dropoutSeed(tmrt_context *ctx, int64_t seed, int64_t key) {
  if (key >= 0)
    seed += scalarAt<int64_t>(ctx, key);
  return static_cast<uint64_t>(seed);
}

/// fn(i, keep) for the n elements whose element 0 is at stream position
/// `base`: one thread per Philox block (four positions, one call).
template <typename Fn>
void forEachKeep(tmrt_context *ctx, const char *kernel, int64_t n,
                 uint64_t seed, uint64_t offset, double rate, uint64_t base,
                 Fn fn) {
  if (n <= 0)
    return;
  uint32_t threshold = trainmem::dropoutKeepThreshold(rate);
  uint64_t firstBlock = base / 4;
  uint64_t endPosition = base + static_cast<uint64_t>(n);
  int64_t blocks = static_cast<int64_t>((endPosition + 3) / 4 - firstBlock);
  elementwise(ctx, kernel, blocks, [=] __device__(int64_t j) {
    uint64_t block = firstBlock + static_cast<uint64_t>(j);
    trainmem::PhiloxCounter words = trainmem::philox4x32_10(
        {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
         static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32)},
        {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
    for (uint64_t w = 0; w < 4; ++w) {
      uint64_t position = block * 4 + w;
      if (position >= base && position < endPosition)
        fn(static_cast<int64_t>(position - base), (words[w] >> 8) < threshold);
    }
  });
}

template <typename T>
void dropoutOf(tmrt_context *ctx, int64_t in, int64_t out, int64_t mask,
               int64_t n, double rate, uint64_t seed, int64_t offset,
               uint64_t base) {
  const T *x = ctx->at<T>(in);
  T *y = ctx->at<T>(out);
  uint8_t *keep = ctx->at<uint8_t>(mask);
  double scale = 1.0 / (1.0 - rate);
  forEachKeep(ctx, "dropout", n, seed, static_cast<uint64_t>(offset), rate,
              base, [=] __device__(int64_t i, bool k) {
                keep[i] = k;
                y[i] = T(k ? static_cast<float>(float(x[i]) * scale) : 0.0f);
              });
  ctx->touch(out, n * sizeof(T));
  ctx->touch(mask, n);
}

template <typename T>
void dropout_gradOf(tmrt_context *ctx, int64_t dy, int64_t mask, int64_t out,
                    int64_t n, double rate) {
  const T *g = ctx->at<T>(dy);
  const uint8_t *keep = ctx->at<uint8_t>(mask);
  T *y = ctx->at<T>(out);
  double scale = 1.0 / (1.0 - rate);
  elementwise(ctx, "dropout_grad", n, [=] __device__(int64_t i) {
    y[i] = T(keep[i] ? static_cast<float>(float(g[i]) * scale) : 0.0f);
  });
  ctx->touch(out, n * sizeof(T));
}

} // namespace

/// Calls `draw(first, count, at)` for each run of a draw's elements that
/// lie together in the whole tensor (see tmrt_dropout): all `n` from `base`
/// for a whole draw, each block of a rank's part at its place otherwise.
template <typename Fn>
void forEachRunOfPart(tmrt_context *ctx, int64_t n, uint64_t base,
                      int64_t block, int64_t parts, int64_t stride,
                      bool balanced, Fn draw) {
  if (block <= 0)
    return draw(int64_t(0), n, base);
  auto position = static_cast<uint64_t>((tmrt_rank(ctx) / stride) % parts);
  auto run = static_cast<int64_t>(
      trainmem::splitDrawRun(static_cast<uint64_t>(block), balanced));
  for (int64_t first = 0; first < n; first += run)
    draw(first, std::min(run, n - first),
         base + trainmem::splitDrawIndex(
                    static_cast<uint64_t>(first), static_cast<uint64_t>(block),
                    static_cast<uint64_t>(parts), position, balanced));
}

void dropout(tmrt_context *ctx, int64_t in, int64_t out, int64_t mask,
             int64_t n, double rate, int64_t seed, int64_t offset, int64_t key,
             int64_t first, int64_t part, int64_t part_elements,
             int64_t rank_elements, int64_t rank_stride, int64_t split_block,
             int64_t split_parts, int64_t split_stride,
             int64_t split_balanced) {
  uint64_t keyed = dropoutSeed(ctx, seed, key);
  uint64_t base =
      dropoutBase(ctx, first, part, part_elements, rank_elements, rank_stride);
  withFloatType(ctx, "dropout", {in, out}, [&](auto type) {
    using T = decltype(type);
    auto size = static_cast<int64_t>(sizeof(T));
    forEachRunOfPart(ctx, n, base, split_block, split_parts, split_stride,
                     split_balanced != 0,
                     [&](int64_t at, int64_t count, uint64_t position) {
                       dropoutOf<T>(ctx, in + at * size, out + at * size,
                                    mask + at, count, rate, keyed, offset,
                                    position);
                     });
  });
}

void dropout_mask(tmrt_context *ctx, int64_t mask, int64_t n, double rate,
                  int64_t seed, int64_t offset, int64_t key, int64_t first,
                  int64_t part, int64_t part_elements, int64_t rank_elements,
                  int64_t rank_stride, int64_t split_block, int64_t split_parts,
                  int64_t split_stride, int64_t split_balanced) {
  uint64_t keyed = dropoutSeed(ctx, seed, key);
  uint64_t base =
      dropoutBase(ctx, first, part, part_elements, rank_elements, rank_stride);
  forEachRunOfPart(ctx, n, base, split_block, split_parts, split_stride,
                   split_balanced != 0,
                   [&](int64_t at, int64_t count, uint64_t position) {
                     uint8_t *keep = ctx->at<uint8_t>(mask + at);
                     forEachKeep(
                         ctx, "dropout_mask", count, keyed,
                         static_cast<uint64_t>(offset), rate, position,
                         [=] __device__(int64_t i, bool k) { keep[i] = k; });
                   });
  ctx->touch(mask, n);
}

//===----------------------------------------------------------------------===//
// Dynamic loss scaling
//===----------------------------------------------------------------------===//

void loss_scale(tmrt_context *ctx, int64_t state, int64_t out, double initial) {
  const int64_t *s = ctx->at<int64_t>(state);
  float *y = ctx->at<float>(out);
  elementwise(ctx, "loss_scale", 1, [=] __device__(int64_t) {
    *y = static_cast<float>(trainmem::lossScale(initial, s[0]));
  });
  ctx->touch(out, 4);
}

void finite_begin(tmrt_context *ctx) {
  CudaState &state = stateOf(ctx);
  ctx->gradientsFinite = true;
  check(ctx, cudaMemsetAsync(state.nonFinite, 0, sizeof(int), state.stream),
        "clearing the finiteness flag");
}

template <typename T>
static void finiteCheckOf(tmrt_context *ctx, int64_t grad, int64_t n) {
  const T *g = ctx->at<T>(grad);
  int *flag = stateOf(ctx).nonFinite;
  elementwise(ctx, "finite_check", n, [=] __device__(int64_t i) {
    if (!isfinite(float(g[i])))
      *flag = 1;
  });
}

void finite_check(tmrt_context *ctx, int64_t grad, int64_t n) {
  withFloatType(ctx, "finite_check", {grad}, [&](auto type) {
    finiteCheckOf<decltype(type)>(ctx, grad, n);
  });
}

void finite_check_sum(tmrt_context *ctx, int64_t sum) {
  const int64_t *words = ctx->at<int64_t>(sum);
  int *flag = stateOf(ctx).nonFinite;
  elementwise(ctx, "finite_check_sum", 1, [=] __device__(int64_t) {
    int64_t copy[trainmem::kExactSumWords];
    for (int k = 0; k < trainmem::kExactSumWords; ++k)
      copy[k] = words[k];
    if (!trainmem::ExactSquareSum(copy).isFinite())
      *flag = 1;
  });
}

template <typename T>
static void unscaleOf(tmrt_context *ctx, int64_t grad, int64_t out, int64_t n,
                      int64_t state, double initial) {
  const T *g = ctx->at<T>(grad);
  const int64_t *s = ctx->at<int64_t>(state);
  const int *flag = stateOf(ctx).nonFinite;
  float *y = ctx->at<float>(out);
  elementwise(ctx, "unscale", n, [=] __device__(int64_t i) {
    double inverse = 1.0 / trainmem::lossScale(initial, s[0]);
    y[i] = *flag == 0
               ? static_cast<float>(static_cast<double>(float(g[i])) * inverse)
               : __int_as_float(0x7fc00000); // quiet NaN
  });
  ctx->touch(out, n * 4);
}

// The entry points of the float kernels above (FloatTypes.h): each
// dispatches on the element type its operands share.
#define TMRT_FLOAT_dropout_grad (dy, out)
#define TMRT_FLOAT_unscale (grad)
#define TMRT_KERNEL(name, parameters, arguments)                               \
  TMRT_FLOAT_ENTRY(name, parameters, arguments)
#include "trainmem-runtime/Kernels.def"

void loss_scale_update(tmrt_context *ctx, int64_t state, int64_t new_state,
                       int64_t growth_interval) {
  std::vector<int> flag;
  std::vector<int64_t> updated;
  if (!readBack(ctx, stateOf(ctx).nonFinite, 1, flag) ||
      !readBack(ctx, ctx->at<int64_t>(state), 3, updated))
    return;
  ctx->gradientsFinite = flag[0] == 0;
  trainmem::advanceLossScale(updated.data(), ctx->gradientsFinite,
                             growth_interval);
  writeArena(ctx, offsetOf(new_state), updated.data(), 24);
  ctx->touch(new_state, 24);
}

//===----------------------------------------------------------------------===//
// 8-bit optimizer state
//===----------------------------------------------------------------------===//

namespace {

/// A dynamic map's 256 entries, passed by value in a kernel's parameters.
struct DeviceMap {
  float entries[256];
  TRAINMEM_HD float operator[](unsigned i) const { return entries[i]; }
};

DeviceMap deviceMap(bool isSigned) {
  const trainmem::DynamicMap &map =
      isSigned ? trainmem::signedDynamicMap() : trainmem::unsignedDynamicMap();
  DeviceMap result;
  std::copy(map.begin(), map.end(), result.entries);
  return result;
}

constexpr int kBlockThreads = 256;

/// The largest of the block's threads' `value`s (std::max's meaning: a NaN
/// never wins); every thread gets it. Order does not matter to a maximum,
/// so this is the CPU's value.
__device__ float blockMaximum(float value) {
  __shared__ float partial[kBlockThreads];
  partial[threadIdx.x] = value;
  __syncthreads();
  for (unsigned half = kBlockThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half &&
        partial[threadIdx.x] < partial[threadIdx.x + half])
      partial[threadIdx.x] = partial[threadIdx.x + half];
    __syncthreads();
  }
  float result = partial[0];
  __syncthreads();
  return result;
}

/// One thread block per quantization block: fn(b, begin, end) for block b
/// of a tensor of n elements, [begin, end), run by every thread of the
/// block (kBlockThreads of them).
template <typename Fn>
__global__ void blockKernel(int64_t n, int64_t block, Fn fn) {
  int64_t b = blockIdx.x;
  int64_t begin = b * block, end = min(n, begin + block);
  fn(b, begin, end);
}

template <typename Fn>
void perBlock(tmrt_context *ctx, const char *kernel, int64_t n, int64_t block,
              Fn fn) {
  int64_t blocks = (n + block - 1) / block;
  if (blocks <= 0)
    return;
  if (blocks > 0x7fffffff)
    return ctx->fail(std::string(kernel) + ": " + std::to_string(blocks) +
                     " blocks exceed a CUDA grid");
  blockKernel<<<static_cast<unsigned>(blocks), kBlockThreads, 0,
                stateOf(ctx).stream>>>(n, block, fn);
  check(ctx, cudaGetLastError(), std::string("launching ") + kernel);
}

/// Quantizes the values value(i) of [begin, end) into codes and *absmax as
/// trainmem::quantizeBlockWith does (a block of zeros or NaNs: the zero
/// code and its maximum). Called by every thread of the block.
template <typename Value>
__device__ void quantizeBlockOnDevice(const DeviceMap &map, int64_t begin,
                                      int64_t end, Value value, uint8_t *codes,
                                      float *absmax) {
  float largest = 0.0f;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float y = fabsf(value(i));
    if (largest < y)
      largest = y;
  }
  float scale = blockMaximum(largest);
  uint8_t zero = trainmem::quantizeToEntries(map, 0.0f);
  float inverse = 1.0f / scale;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    codes[i] = scale > 0.0f
                   ? trainmem::quantizeToEntries(map, value(i) * inverse)
                   : zero;
  if (threadIdx.x == 0)
    *absmax = scale;
}

} // namespace

void quantize(tmrt_context *ctx, int64_t in, int64_t codes, int64_t absmax,
              int64_t n, int64_t block, int64_t is_signed) {
  block = trainmem::effectiveStateBlock(block, n);
  DeviceMap map = deviceMap(is_signed != 0);
  const float *x = ctx->at<float>(in);
  uint8_t *c = ctx->at<uint8_t>(codes);
  float *a = ctx->at<float>(absmax);
  perBlock(ctx, "quantize", n, block,
           [=] __device__(int64_t b, int64_t begin, int64_t end) {
             quantizeBlockOnDevice(
                 map, begin, end, [=](int64_t i) { return x[i]; }, c, a + b);
           });
  ctx->touch(codes, n);
  ctx->touch(absmax, ((n + block - 1) / block) * 4);
}

void dequantize(tmrt_context *ctx, int64_t codes, int64_t absmax, int64_t out,
                int64_t n, int64_t block, int64_t is_signed) {
  block = trainmem::effectiveStateBlock(block, n);
  DeviceMap map = deviceMap(is_signed != 0);
  const uint8_t *c = ctx->at<uint8_t>(codes);
  const float *a = ctx->at<float>(absmax);
  float *y = ctx->at<float>(out);
  elementwise(ctx, "dequantize", n, [=] __device__(int64_t i) {
    y[i] = trainmem::dequantizeValue(map, c[i], a[i / block]);
  });
  ctx->touch(out, n * 4);
}

namespace {

/// Where one state of a fused 8-bit update is: its codes and absmax, and
/// where their new values go (the same places: in place).
struct QuantizedStateRefs {
  int64_t codes, absmax, newCodes, newAbsmax;
};

/// The states of an update as a device lambda captures them.
template <int N> struct DeviceStates {
  const uint8_t *codes[N];
  const float *absmax[N];
  uint8_t *newCodes[N];
  float *newAbsmax[N];
  DeviceMap map[N];
  bool written[N];
};

/// A fused 8-bit update over Step's states (Step::kStateKinds, `states` in
/// that order), one thread block per quantization block, as the CPU's
/// blockwise8bit: each element's states dequantized on their maps,
/// update.applyStates, the written states requantized with the block's new
/// maxima; a state the update only reads is carried over to its new place,
/// and a gradient that is not finite leaves everything as it is. The
/// update is computed twice per element, for the block's maxima and then
/// for the codes (the same operations, the same bits): a block of any size
/// needs no shared memory beyond the maxima's. Thread t reads and writes
/// its own elements only; the maxima are written after every thread has
/// read the old ones. Every 8-bit optimizer runs through it.
template <typename T, typename Step>
void blockwise8bitOf(tmrt_context *ctx, const char *kernel, int64_t param,
                     int64_t grad,
                     const QuantizedStateRefs (&states)[Step::kStates],
                     int64_t new_param, int64_t n, int64_t block,
                     const Step &update) {
  constexpr int N = Step::kStates;
  const float *p = ctx->at<float>(param);
  const T *g = ctx->at<T>(grad);
  float *np = ctx->at<float>(new_param);
  int64_t blocks = (n + block - 1) / block;
  DeviceStates<N> d;
  for (int k = 0; k < N; ++k) {
    d.codes[k] = ctx->at<uint8_t>(states[k].codes);
    d.absmax[k] = ctx->at<float>(states[k].absmax);
    d.newCodes[k] = ctx->at<uint8_t>(states[k].newCodes);
    d.newAbsmax[k] = ctx->at<float>(states[k].newAbsmax);
    d.map[k] = deviceMap(Step::kStateKinds[k].isSigned);
    d.written[k] = Step::kStateKinds[k].written;
  }
  bool finite = allFinite(ctx, g, n);
  if (ctx->hasError)
    return;
  for (int k = 0; k < N; ++k)
    if (!finite || !d.written[k]) {
      if (states[k].newCodes != states[k].codes)
        copyArena(ctx, offsetOf(states[k].codes), offsetOf(states[k].newCodes),
                  n);
      if (states[k].newAbsmax != states[k].absmax)
        copyArena(ctx, offsetOf(states[k].absmax),
                  offsetOf(states[k].newAbsmax), blocks * 4);
    }
  if (finite) {
    perBlock(ctx, kernel, n, block,
             [=] __device__(int64_t b, int64_t begin, int64_t end) {
               float scale[N];
               for (int k = 0; k < N; ++k)
                 scale[k] = d.absmax[k][b];
               auto updated = [&](int64_t i, float &newParam, float *fresh) {
                 float old[N];
                 for (int k = 0; k < N; ++k) {
                   old[k] = trainmem::dequantizeValue(d.map[k], d.codes[k][i],
                                                      scale[k]);
                   fresh[k] = 0.0f;
                 }
                 update.applyStates(p[i], float(g[i]), old, newParam, fresh);
               };
               float largest[N] = {};
               for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
                 float newParam, fresh[N];
                 updated(i, newParam, fresh);
                 for (int k = 0; k < N; ++k)
                   if (largest[k] < fabsf(fresh[k]))
                     largest[k] = fabsf(fresh[k]);
               }
               float newScale[N];
               for (int k = 0; k < N; ++k)
                 newScale[k] = blockMaximum(largest[k]);
               for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
                 float newParam, fresh[N];
                 updated(i, newParam, fresh);
                 for (int k = 0; k < N; ++k) {
                   if (!d.written[k])
                     continue;
                   d.newCodes[k][i] =
                       newScale[k] > 0.0f
                           ? trainmem::quantizeToEntries(
                                 d.map[k], fresh[k] * (1.0f / newScale[k]))
                           : trainmem::quantizeToEntries(d.map[k], 0.0f);
                 }
                 np[i] = newParam;
               }
               __syncthreads();
               if (threadIdx.x == 0)
                 for (int k = 0; k < N; ++k)
                   if (d.written[k])
                     d.newAbsmax[k][b] = newScale[k];
             });
  } else {
    copyArena(ctx, offsetOf(param), offsetOf(new_param), n * 4);
    ctx->recordSkipped(param);
  }
  ctx->touch(new_param, n * 4);
  for (const QuantizedStateRefs &state : states) {
    ctx->touch(state.newCodes, n);
    ctx->touch(state.newAbsmax, blocks * 4);
  }
}

/// blockwise8bitOf for the gradient's element type.
template <typename Step>
void blockwise8bit(tmrt_context *ctx, const char *kernel, int64_t param,
                   int64_t grad,
                   const QuantizedStateRefs (&states)[Step::kStates],
                   int64_t new_param, int64_t n, int64_t block,
                   const Step &update) {
  block = trainmem::effectiveStateBlock(block, n);
  withFloatType(ctx, kernel, {grad}, [&](auto type) {
    blockwise8bitOf<decltype(type)>(ctx, kernel, param, grad, states, new_param,
                                    n, block, update);
  });
}

} // namespace

void adamw_8bit(tmrt_context *ctx, int64_t param, int64_t grad, int64_t m_codes,
                int64_t m_absmax, int64_t v_codes, int64_t v_absmax, int64_t lr,
                int64_t step, int64_t new_param, int64_t new_m_codes,
                int64_t new_m_absmax, int64_t new_v_codes, int64_t new_v_absmax,
                int64_t n, int64_t block, double beta1, double beta2,
                double eps, double weight_decay) {
  blockwise8bit(ctx, "adamw_8bit", param, grad,
                {{m_codes, m_absmax, new_m_codes, new_m_absmax},
                 {v_codes, v_absmax, new_v_codes, new_v_absmax}},
                new_param, n, block,
                trainmem::AdamWStep(scalarAt<float>(ctx, lr), beta1, beta2, eps,
                                    weight_decay,
                                    scalarAt<int64_t>(ctx, step)));
}

void sgd_8bit(tmrt_context *ctx, int64_t param, int64_t grad, int64_t codes,
              int64_t absmax, int64_t lr, int64_t new_param, int64_t new_codes,
              int64_t new_absmax, int64_t n, int64_t block, double momentum,
              double weight_decay, int64_t nesterov) {
  blockwise8bit(ctx, "sgd_8bit", param, grad,
                {{codes, absmax, new_codes, new_absmax}}, new_param, n, block,
                trainmem::SGDMomentumStep{scalarAt<float>(ctx, lr), momentum,
                                          weight_decay, nesterov != 0});
}

// The 8-bit kernels of Optimizers.def (the f32 ones: CudaBackend.cu).
#define TMRT_ONE_STATE_OPTIMIZER(kernel, Name, Step, parameters, arguments)    \
  void kernel##_8bit(tmrt_context *ctx, int64_t param, int64_t grad,           \
                     int64_t m_codes, int64_t m_absmax, int64_t lr,            \
                     int64_t new_param, int64_t new_m_codes,                   \
                     int64_t new_m_absmax, int64_t n, int64_t block,           \
                     TMRT_UNPAREN(parameters)) {                               \
    blockwise8bit(                                                             \
        ctx, #kernel "_8bit", param, grad,                                     \
        {{m_codes, m_absmax, new_m_codes, new_m_absmax}}, new_param, n, block, \
        trainmem::Step(scalarAt<float>(ctx, lr), TMRT_UNPAREN(arguments)));    \
  }
#include "trainmem-runtime/Optimizers.def"

void sophia_8bit(tmrt_context *ctx, int64_t param, int64_t grad,
                 int64_t m_codes, int64_t m_absmax, int64_t h_codes,
                 int64_t h_absmax, int64_t lr, int64_t new_param,
                 int64_t new_m_codes, int64_t new_m_absmax, int64_t new_h_codes,
                 int64_t new_h_absmax, int64_t n, int64_t block, int64_t batch,
                 double beta1, double rho, double eps, double weight_decay) {
  blockwise8bit(ctx, "sophia_8bit", param, grad,
                {{m_codes, m_absmax, new_m_codes, new_m_absmax},
                 {h_codes, h_absmax, new_h_codes, new_h_absmax}},
                new_param, n, block,
                trainmem::SophiaStep(scalarAt<float>(ctx, lr), beta1, rho,
                                     batch, eps, weight_decay));
}

// One thread per row: the same scalar draw as the CPU's (Sample.h); the
// device's expf may round differently from the host's, which moves a
// label only where the uniform number falls within an ulp of a boundary.
template <typename T>
void sampleOf(tmrt_context *ctx, int64_t logits, uint64_t stream,
              int64_t labels, int64_t rows, int64_t classes, int64_t offset,
              int64_t id_bits) {
  const T *x = ctx->at<T>(logits);
  int32_t *out32 = ctx->at<int32_t>(labels);
  int64_t *out64 = ctx->at<int64_t>(labels);
  uint64_t streamOffset = static_cast<uint64_t>(offset);
  elementwise(ctx, "sample", rows, [=] __device__(int64_t r) {
    const T *row = x + r * classes;
    int64_t label = trainmem::sampleClass(
        [=](int64_t j) { return float(row[j]); }, classes,
        trainmem::philoxWord(stream, streamOffset, static_cast<uint64_t>(r)));
    if (id_bits == 32)
      out32[r] = static_cast<int32_t>(label);
    else
      out64[r] = label;
  });
}

void sample(tmrt_context *ctx, int64_t logits, int64_t key, int64_t labels,
            int64_t rows, int64_t classes, int64_t seed, int64_t offset,
            int64_t id_bits) {
  uint64_t stream = static_cast<uint64_t>(seed);
  if (key >= 0)
    stream += static_cast<uint64_t>(scalarAt<int64_t>(ctx, key));
  withFloatType(ctx, "sample", {logits}, [&](auto type) {
    sampleOf<decltype(type)>(ctx, logits, stream, labels, rows, classes, offset,
                             id_bits);
  });
  ctx->touch(labels, rows * id_bits / 8);
}

} // namespace cuda
} // namespace tmrt
