//===- Kernels.cpp - CPU kernels of the runtime ---------------------------===//
//
// f32 kernels: GEMMs through OpenBLAS, everything else plain loops split over
// the context's threads. Reductions accumulate in double, like the reference
// evaluator, so the two agree to float rounding.
//
//===----------------------------------------------------------------------===//

#include "../Backend.h"
#include "../Context.h"
#include "Collectives.h"
#include "CpuFeatures.h"
#include "FloatTypes.h"
#include "Quantized.h"
#include "trainmem/Support/Activations.h"
#include "trainmem/Support/AdamW.h"
#include "trainmem/Support/Attention.h"
#include "trainmem/Support/ContextChunks.h"
#include "trainmem/Support/DynamicMap.h"
#include "trainmem/Support/FastExp.h"
#include "trainmem/Support/LossScaleUpdate.h"
#include "trainmem/Support/Philox.h"
#include "trainmem/Support/RingAttention.h"
#include "trainmem/Support/RowKernels.h"
#include "trainmem/Support/Sample.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

namespace {

/// Whether every gradient element is finite (8-bit updates skip otherwise):
/// an exponent of all ones is infinity or NaN. Branch-free within a chunk
/// (so it vectorizes), chunks over the threads.
bool allFinite(tmrt_context *ctx, const float *g, int64_t n) {
  std::atomic<bool> finite{true};
  ctx->pool.parallelFor(n, 1 << 16, [&](int64_t begin, int64_t end) {
    constexpr uint32_t kExponent = 0x7f800000u;
    uint32_t nonFinite = 0;
    for (int64_t i = begin; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, g + i, 4);
      nonFinite |= (bits & kExponent) == kExponent;
    }
    if (nonFinite)
      finite.store(false, std::memory_order_relaxed);
  });
  return finite.load();
}

/// allFinite for a gradient of any float type.
template <typename T>
bool allFiniteOf(tmrt_context *ctx, const T *g, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return allFinite(ctx, g, n);
  } else {
    std::atomic<bool> finite{true};
    ctx->pool.parallelFor(n, 1 << 16, [&](int64_t begin, int64_t end) {
      bool nonFinite = false;
      for (int64_t i = begin; i < end; ++i)
        nonFinite |= !std::isfinite(static_cast<float>(g[i]));
      if (nonFinite)
        finite.store(false, std::memory_order_relaxed);
    });
    return finite.load();
  }
}

constexpr int64_t kGrain = 16384; // elements per task for cheap loops

/// GEMM tiles of C, chosen by the shape alone: as large as 512 x 512 (each
/// tile is one single-threaded BLAS call, which packs its panels of A and
/// B: the fewer tiles, the less of that), halved along the longer side
/// until a GEMM has at least kGemmMinTasks tiles or they are 64 wide.
/// (Fixed tiles of 128 x 256 spent 12-14% of a small GPT's step packing.)
constexpr int64_t kGemmMaxTile = 512, kGemmMinTile = 64, kGemmMinTasks = 8;

void gemmTiles(int64_t m, int64_t n, int64_t batches, int64_t &tileRows,
               int64_t &tileCols) {
  tileRows = std::clamp<int64_t>(m, 1, kGemmMaxTile);
  tileCols = std::clamp<int64_t>(n, 1, kGemmMaxTile);
  auto tasks = [&] {
    return batches * ((m + tileRows - 1) / tileRows) *
           ((n + tileCols - 1) / tileCols);
  };
  while (tasks() < kGemmMinTasks) {
    if (tileRows >= tileCols && tileRows > kGemmMinTile)
      tileRows = (tileRows + 1) / 2;
    else if (tileCols > kGemmMinTile)
      tileCols = (tileCols + 1) / 2;
    else if (tileRows > kGemmMinTile)
      tileRows = (tileRows + 1) / 2;
    else
      break;
  }
}

using trainmem::rows::kReductionRows;

/// The block a kernel works with (trainmem::effectiveStateBlock: a block
/// larger than the tensor is cut to the smallest power of two that holds
/// it; same codes and absmax, per-block buffers the tensor's size).
int64_t effectiveBlock(int64_t block, int64_t n) {
  return trainmem::effectiveStateBlock(block, n);
}

/// Rows per task so that a task does about kGrain elements of work.
int64_t rowGrain(int64_t cols) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(cols, 1)); }

/// fn(i) for i in [begin, end), on a copy of fn: its captured pointers are
/// then locals the loop's stores cannot reach, and the loop vectorizes.
template <typename Fn> void elementLoop(int64_t begin, int64_t end, Fn fn) {
  for (int64_t i = begin; i < end; ++i)
    fn(i);
}

/// The same loop compiled for AVX2: 8 lanes where the baseline has 4. The
/// build contracts no multiply-add and AVX2 brings no FMA, so each element
/// gets the bits the baseline loop gives it.
template <typename Fn>
__attribute__((target("avx2"))) void elementLoopAvx2(int64_t begin,
                                                     int64_t end, Fn fn) {
  for (int64_t i = begin; i < end; ++i)
    fn(i);
}

template <typename Fn>
void elementwise(tmrt_context *ctx, int64_t n, Fn fn) {
  bool avx2 = tmrt::avx2Enabled();
  ctx->pool.parallelFor(n, kGrain, [&](int64_t begin, int64_t end) {
    if (avx2)
      elementLoopAvx2(begin, end, fn);
    else
      elementLoop(begin, end, fn);
  });
}

/// Keep decisions for elements [begin, end) of a tensor whose element 0
/// sits at position `base` of the stream: one Philox call per four positions
/// (position e is word e % 4 of block e / 4, as Philox.h defines).
template <typename Fn>
void forEachKeep(uint64_t seed, uint64_t offset, double rate, uint64_t base,
                 int64_t begin, int64_t end, Fn fn) {
  uint32_t threshold = trainmem::dropoutKeepThreshold(rate);
  trainmem::PhiloxKey key = {static_cast<uint32_t>(seed),
                             static_cast<uint32_t>(seed >> 32)};
  uint64_t firstPosition = base + static_cast<uint64_t>(begin);
  uint64_t endPosition = base + static_cast<uint64_t>(end);
  for (uint64_t block = firstPosition / 4; block * 4 < endPosition; ++block) {
    trainmem::PhiloxCounter words = trainmem::philox4x32_10(
        {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
         static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32)},
        key);
    for (uint64_t w = 0; w < 4; ++w) {
      uint64_t position = block * 4 + w;
      if (position >= firstPosition && position < endPosition)
        fn(static_cast<int64_t>(position - base), (words[w] >> 8) < threshold);
    }
  }
}

/// Splits [0, n) into tasks on multiples of 4 elements.
template <typename Fn>
void forEachKeepParallel(tmrt_context *ctx, int64_t n, uint64_t seed,
                         uint64_t offset, double rate, uint64_t base, Fn fn) {
  int64_t blocks = (n + 3) / 4;
  ctx->pool.parallelFor(blocks, kGrain / 4, [&](int64_t b0, int64_t b1) {
    forEachKeep(seed, offset, rate, base, b0 * 4, std::min(n, b1 * 4), fn);
  });
}

/// A draw on one rank's part (see tmrt_dropout): `fn(i, keep)` for each of
/// its `n` elements, each drawn at its element's place in the whole
/// tensor; one contiguous draw when `block` is 0.
template <typename Fn>
void forEachKeepOfPart(tmrt_context *ctx, int64_t n, uint64_t seed,
                       uint64_t offset, double rate, uint64_t base,
                       int64_t block, int64_t parts, int64_t stride,
                       bool balanced, Fn fn) {
  if (block <= 0)
    return forEachKeepParallel(ctx, n, seed, offset, rate, base, fn);
  auto position = static_cast<uint64_t>((tmrt_rank(ctx) / stride) % parts);
  auto run = static_cast<int64_t>(
      trainmem::splitDrawRun(static_cast<uint64_t>(block), balanced));
  for (int64_t first = 0; first < n; first += run) {
    uint64_t at = base + trainmem::splitDrawIndex(static_cast<uint64_t>(first),
                                                  static_cast<uint64_t>(block),
                                                  static_cast<uint64_t>(parts),
                                                  position, balanced);
    forEachKeepParallel(ctx, std::min(run, n - first), seed, offset, rate, at,
                        [&](int64_t i, bool k) { fn(first + i, k); });
  }
}

/// The stream position of a dropout's element 0 (see tmrt_dropout).
uint64_t dropoutBase(tmrt_context *ctx, int64_t first, int64_t part,
                     int64_t partElements, int64_t rankElements,
                     int64_t rankStride) {
  uint64_t index = part >= 0 ? static_cast<uint64_t>(*ctx->at<int64_t>(part))
                             : 0;
  uint64_t rank = static_cast<uint64_t>(tmrt_rank(ctx));
  return static_cast<uint64_t>(first) +
         (rank / static_cast<uint64_t>(rankStride)) *
             static_cast<uint64_t>(rankElements) +
         index * static_cast<uint64_t>(partElements);
}

/// out[i] = fn(in[i]) over tensors of T, computed in double and rounded
/// to f32, then to T.
template <typename T, typename Fn>
void unaryKernel(tmrt_context *ctx, int64_t in, int64_t out, int64_t n,
                 Fn fn) {
  const T *x = ctx->at<T>(in);
  T *y = ctx->at<T>(out);
  elementwise(ctx, n, [x, y, fn](int64_t i) {
    y[i] = static_cast<float>(fn(static_cast<double>(x[i])));
  });
  ctx->touch(out, n * sizeof(T));
}

/// out[i] = fn(a[i], b[i]) over tensors of T, computed in double.
template <typename T, typename Fn>
void binaryKernel(tmrt_context *ctx, int64_t a, int64_t b, int64_t out,
                  int64_t n, Fn fn) {
  const T *x = ctx->at<T>(a), *y = ctx->at<T>(b);
  T *z = ctx->at<T>(out);
  elementwise(ctx, n, [x, y, z, fn](int64_t i) {
    z[i] = static_cast<float>(
        fn(static_cast<double>(x[i]), static_cast<double>(y[i])));
  });
  ctx->touch(out, n * sizeof(T));
}

using tmrt::cpu::withFloatType;

/// A float tensor as f32: the buffer itself when it is f32, else a host
/// copy widened from 16 bits (for kernels whose vector code reads f32).
const float *widened(tmrt_context *ctx, int64_t ref, int64_t n,
                     std::vector<float> &copy) {
  int64_t dtype = tmrt::dtypeOf(ref);
  if (dtype == TMRT_DTYPE_F32)
    return ctx->at<float>(ref);
  copy.resize(n);
  if (dtype == TMRT_DTYPE_BF16) {
    const trainmem::BFloat16 *x = ctx->at<trainmem::BFloat16>(ref);
    elementwise(ctx, n, [&](int64_t i) { copy[i] = x[i]; });
  } else {
    const trainmem::Float16 *x = ctx->at<trainmem::Float16>(ref);
    elementwise(ctx, n, [&](int64_t i) { copy[i] = x[i]; });
  }
  return copy.data();
}

int64_t readId(tmrt_context *ctx, int64_t ids, int64_t index, int64_t bits) {
  return bits == 32 ? ctx->at<int32_t>(ids)[index]
                    : ctx->at<int64_t>(ids)[index];
}

} // namespace

//===----------------------------------------------------------------------===//
// The kernels (Kernels.def), reached through the table below
//===----------------------------------------------------------------------===//

namespace {

template <typename T>
void fillOf(tmrt_context *ctx, int64_t out, int64_t n, double value) {
  T *y = ctx->at<T>(out);
  elementwise(ctx, n, [&](int64_t i) { y[i] = static_cast<float>(value); });
  ctx->touch(out, n * sizeof(T));
}

void fill_i64(tmrt_context *ctx, int64_t out, int64_t n, int64_t value) {
  int64_t *y = ctx->at<int64_t>(out);
  std::fill(y, y + n, value);
  ctx->touch(out, n * 8);
}

void iota(tmrt_context *ctx, int64_t out, int64_t n, int64_t id_bits) {
  for (int64_t i = 0; i < n; ++i) {
    if (id_bits == 32)
      ctx->at<int32_t>(out)[i] = static_cast<int32_t>(i);
    else
      ctx->at<int64_t>(out)[i] = i;
  }
  ctx->touch(out, n * id_bits / 8);
}

void context_slice(tmrt_context *ctx, int64_t in, int64_t out, int64_t outer,
                   int64_t rows, int64_t inner, int64_t id_bits, int64_t parts,
                   int64_t stride, int64_t balanced) {
  if (!tmrt::checkSplit(ctx, "context_slice", parts, stride))
    return;
  trainmem::ContextChunks context{
      parts, tmrt::splitPosition(ctx, parts, stride), balanced != 0};
  int64_t mine = rows / parts, bytes = id_bits / 8;
  const char *x = ctx->at<char>(in);
  char *y = ctx->at<char>(out);
  // Runs of rows consecutive in the sequence, one copy each.
  int64_t run = context.localRun(mine);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t r = 0; r < mine; r += run)
      std::memcpy(y + (o * mine + r) * inner * bytes,
                  x + (o * rows + context.wholeRow(r, mine)) * inner * bytes,
                  run * inner * bytes);
  ctx->touch(out, outer * mine * inner * bytes);
}

template <typename T>
void copyOf(tmrt_context *ctx, int64_t in, int64_t out, int64_t n) {
  if (in != out)
    std::memmove(ctx->at<T>(out), ctx->at<T>(in), n * sizeof(T));
  ctx->touch(out, n * sizeof(T));
}

void transfer(tmrt_context *ctx, int64_t from, int64_t to, int64_t bytes) {
  tmrt::transferKernel(ctx, from, to, bytes);
}

// The CPU copies at the start (its cores would run the copy anyway): the
// wait has nothing left to do.
void transfer_start(tmrt_context *ctx, int64_t from, int64_t to,
                    int64_t bytes) {
  tmrt::transferKernel(ctx, from, to, bytes);
}

void transfer_wait(tmrt_context *, int64_t) {}

void exchange_begin(tmrt_context *ctx) { ctx->pendingExchange.clear(); }
void exchange_send(tmrt_context *ctx, int64_t in, int64_t bytes, int64_t peer,
                   int64_t tag) {
  tmrt::noteExchange(ctx, true, in, bytes, peer, tag);
}
void exchange_recv(tmrt_context *ctx, int64_t out, int64_t bytes, int64_t peer,
                   int64_t tag) {
  tmrt::noteExchange(ctx, false, out, bytes, peer, tag);
}
// The arena's bytes go as they are: the process's communicator moves them.
void exchange_end(tmrt_context *ctx) {
  std::vector<tmrt::Message> messages;
  uint64_t sent = 0, received = 0;
  auto dataOf = [](tmrt_context *c, int64_t ref) -> void * {
    return c->bytesAt(ref);
  };
  if (!tmrt::takeExchange(ctx, dataOf, messages, sent, received) ||
      !ctx->communicator->exchange(ctx, messages.data(), messages.size()))
    return;
  ctx->bytesSent += sent;
  ctx->bytesReceived += received;
}

/// The strided offset of row `r` of a [d0, d1, d2, d3, d4] grid of rows
/// (strides s0..s4).
inline int64_t rowOffset(int64_t r, int64_t d1, int64_t d2, int64_t d3,
                         int64_t d4, int64_t s0, int64_t s1, int64_t s2,
                         int64_t s3, int64_t s4) {
  int64_t i4 = r % d4;
  r /= d4;
  int64_t i3 = r % d3;
  r /= d3;
  int64_t i2 = r % d2;
  r /= d2;
  return (r / d1) * s0 + (r % d1) * s1 + i2 * s2 + i3 * s3 + i4 * s4;
}

template <typename T>
void copy_stridedOf(tmrt_context *ctx, int64_t in, int64_t out, int64_t d0,
                       int64_t d1, int64_t d2, int64_t d3, int64_t d4,
                       int64_t d5, int64_t s0, int64_t s1, int64_t s2,
                       int64_t s3, int64_t s4, int64_t s5) {
  // A copy moves bits, by their width: i32 ids (whose references carry the
  // f32 code: a model's shifted labels) and every float pattern arrive as
  // they were.
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>;
  const Bits *x = reinterpret_cast<const Bits *>(ctx->at<T>(in));
  Bits *y = reinterpret_cast<Bits *>(ctx->at<T>(out));
  int64_t rows = d0 * d1 * d2 * d3 * d4;
  ctx->pool.parallelFor(rows, rowGrain(d5), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const Bits *src = x + rowOffset(r, d1, d2, d3, d4, s0, s1, s2, s3, s4);
      Bits *dst = y + r * d5;
      for (int64_t i5 = 0; i5 < d5; ++i5)
        dst[i5] = src[i5 * s5];
    }
  });
  ctx->touch(out, rows * d5 * sizeof(T));
}

template <typename T>
void place_stridedOf(tmrt_context *ctx, int64_t in, int64_t out, int64_t d0,
                     int64_t d1, int64_t d2, int64_t d3, int64_t d4, int64_t d5,
                     int64_t s0, int64_t s1, int64_t s2, int64_t s3, int64_t s4,
                     int64_t s5) {
  const T *x = ctx->at<T>(in);
  T *y = ctx->at<T>(out);
  int64_t rows = d0 * d1 * d2 * d3 * d4;
  ctx->pool.parallelFor(rows, rowGrain(d5), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      T *dst = y + rowOffset(r, d1, d2, d3, d4, s0, s1, s2, s3, s4);
      const T *src = x + r * d5;
      for (int64_t i5 = 0; i5 < d5; ++i5)
        dst[i5 * s5] = src[i5];
    }
  });
  int64_t last = (d0 - 1) * s0 + (d1 - 1) * s1 + (d2 - 1) * s2 + (d3 - 1) * s3 +
                 (d4 - 1) * s4 + (d5 - 1) * s5;
  ctx->touch(out, static_cast<uint64_t>(last + 1) * sizeof(T));
}

template <typename From, typename To>
void convertOf(tmrt_context *ctx, int64_t in, int64_t out, int64_t n) {
  const From *x = ctx->at<From>(in);
  To *y = ctx->at<To>(out);
  elementwise(ctx, n, [&](int64_t i) { y[i] = static_cast<float>(x[i]); });
  ctx->touch(out, n * sizeof(To));
}

void convert(tmrt_context *ctx, int64_t in, int64_t out, int64_t n) {
  withFloatType(ctx, "convert", {in}, [&](auto from) {
    withFloatType(ctx, "convert", {out}, [&](auto to) {
      convertOf<decltype(from), decltype(to)>(ctx, in, out, n);
    });
  });
}

void place_strided(tmrt_context *ctx, int64_t in, int64_t out, int64_t d0,
                   int64_t d1, int64_t d2, int64_t d3, int64_t d4, int64_t d5,
                   int64_t s0, int64_t s1, int64_t s2, int64_t s3, int64_t s4,
                   int64_t s5) {
  if (d0 * d1 * d2 * d3 * d4 * d5 == 0)
    return;
  withFloatType(ctx, "place_strided", {in, out}, [&](auto type) {
    place_stridedOf<decltype(type)>(ctx, in, out, d0, d1, d2, d3, d4, d5, s0,
                                    s1, s2, s3, s4, s5);
  });
}

template <typename T>
void matmulOf(tmrt_context *ctx, int64_t a, int64_t b, int64_t c, int64_t m,
                 int64_t n, int64_t k, int64_t a_rs, int64_t a_cs,
                 int64_t b_rs, int64_t b_cs, int64_t c0, int64_t c1,
                 int64_t c2, int64_t c3, int64_t a0, int64_t a1, int64_t a2,
                 int64_t a3, int64_t b0, int64_t b1, int64_t b2, int64_t b3) {
  const T *pa = ctx->at<T>(a);
  const T *pb = ctx->at<T>(b);
  T *pc = ctx->at<T>(c);
  // A BLAS matrix needs unit stride along one of its dimensions.
  auto layout = [](int64_t rs, int64_t cs, int64_t rows, int64_t cols,
                   CBLAS_TRANSPOSE &trans, int64_t &ld) {
    if (cs == 1 && rs >= std::max<int64_t>(cols, 1)) {
      trans = CblasNoTrans;
      ld = std::max<int64_t>(rs, 1);
      return true;
    }
    if (rs == 1 && cs >= std::max<int64_t>(rows, 1)) {
      trans = CblasTrans;
      ld = std::max<int64_t>(cs, 1);
      return true;
    }
    return false;
  };
  CBLAS_TRANSPOSE ta, tb;
  int64_t lda = 0, ldb = 0;
  bool blas = layout(a_rs, a_cs, m, k, ta, lda) &&
              layout(b_rs, b_cs, k, n, tb, ldb);
  bool sbgemm = std::is_same_v<T, trainmem::BFloat16> && blas &&
                ctx->bf16Gemm == tmrt::Bf16Gemm::sbgemm;
  int64_t batches = c0 * c1 * c2 * c3;
  // C is cut into tiles fixed by the shape alone, each computed by one
  // single-threaded BLAS call, and the tiles are spread over the pool. No
  // reduction crosses a tile, so every element's sum is formed the same way
  // whatever the thread count (OpenBLAS's own threads split by the thread
  // count, and on some CPUs their results differ bitwise between counts).
  int64_t tileRows, tileCols;
  gemmTiles(m, n, batches, tileRows, tileCols);
  int64_t rowTiles = (m + tileRows - 1) / tileRows;
  int64_t colTiles = (n + tileCols - 1) / tileCols;
  int64_t tilesPerBatch = rowTiles * colTiles;
  auto runTile = [&](int64_t task) {
    int64_t batch = task / tilesPerBatch, tile = task % tilesPerBatch;
    int64_t i3 = batch % c3, rest = batch / c3;
    int64_t i2 = rest % c2;
    rest /= c2;
    int64_t i1 = rest % c1, i0 = rest / c1;
    int64_t row0 = (tile / colTiles) * tileRows;
    int64_t col0 = (tile % colTiles) * tileCols;
    int64_t rows = std::min(tileRows, m - row0);
    int64_t cols = std::min(tileCols, n - col0);
    const T *ma = pa + i0 * a0 + i1 * a1 + i2 * a2 + i3 * a3 + row0 * a_rs;
    const T *mb = pb + i0 * b0 + i1 * b1 + i2 * b2 + i3 * b3 + col0 * b_cs;
    T *mc = pc + batch * m * n + row0 * n + col0;
    if constexpr (std::is_same_v<T, float>) {
      if (blas) {
        cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(rows),
                    static_cast<int>(cols), static_cast<int>(k), 1.0f, ma,
                    static_cast<int>(lda), mb, static_cast<int>(ldb), 0.0f,
                    mc, static_cast<int>(n));
        return;
      }
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          double acc = 0.0;
          for (int64_t p = 0; p < k; ++p)
            acc += static_cast<double>(ma[i * a_rs + p * a_cs]) *
                   mb[p * b_rs + j * b_cs];
          mc[i * n + j] = static_cast<float>(acc);
        }
    } else {
      // 16-bit operands: an f32 tile of C, rounded into C once.
      thread_local std::vector<float> wideA, wideB, wideC;
      wideC.resize(rows * cols);
      if (sbgemm) {
        // bf16 in, f32 out (AVX512_BF16 where the CPU has it).
        ctx->sbgemm(CblasRowMajor, ta, tb, static_cast<int>(rows),
                    static_cast<int>(cols), static_cast<int>(k), 1.0f,
                    reinterpret_cast<const uint16_t *>(ma),
                    static_cast<int>(lda),
                    reinterpret_cast<const uint16_t *>(mb),
                    static_cast<int>(ldb), 0.0f, wideC.data(),
                    static_cast<int>(std::max<int64_t>(cols, 1)));
      } else {
        // Tiles of A and B widened to row-major f32 (exact), then the f32
        // GEMM: the same sums on every CPU that the f32 path forms.
        wideA.resize(rows * k);
        wideB.resize(k * cols);
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t p = 0; p < k; ++p)
            wideA[i * k + p] = ma[i * a_rs + p * a_cs];
        for (int64_t p = 0; p < k; ++p)
          for (int64_t j = 0; j < cols; ++j)
            wideB[p * cols + j] = mb[p * b_rs + j * b_cs];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
                    static_cast<int>(rows), static_cast<int>(cols),
                    static_cast<int>(k), 1.0f, wideA.data(),
                    static_cast<int>(std::max<int64_t>(k, 1)), wideB.data(),
                    static_cast<int>(std::max<int64_t>(cols, 1)), 0.0f,
                    wideC.data(),
                    static_cast<int>(std::max<int64_t>(cols, 1)));
      }
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
          mc[i * n + j] = wideC[i * cols + j];
    }
  };
  if (m > 0 && n > 0)
    ctx->pool.parallelFor(batches * tilesPerBatch, 1,
                          [&](int64_t begin, int64_t end) {
                            for (int64_t task = begin; task < end; ++task)
                              runTile(task);
                          });
  if (sbgemm)
    ctx->sbgemmCalls.fetch_add(1, std::memory_order_relaxed);
  else if (!std::is_same_v<T, float>)
    ctx->widenedGemmCalls.fetch_add(1, std::memory_order_relaxed);
  ctx->touch(c, batches * m * n * sizeof(T));
}

template <typename T>
void addOf(tmrt_context *ctx, int64_t a, int64_t b, int64_t out,
              int64_t n) {
  binaryKernel<T>(ctx, a, b, out, n, [](double x, double y) { return x + y; });
}

template <typename T>
void mulOf(tmrt_context *ctx, int64_t a, int64_t b, int64_t out,
              int64_t n) {
  binaryKernel<T>(ctx, a, b, out, n, [](double x, double y) { return x * y; });
}

template <typename T>
void scaleOf(tmrt_context *ctx, int64_t in, int64_t out, int64_t n,
                double factor) {
  unaryKernel<T>(ctx, in, out, n, [&](double x) { return x * factor; });
}

template <typename T>
void bias_addOf(tmrt_context *ctx, int64_t in, int64_t bias, int64_t out,
                   int64_t n, int64_t bias_n) {
  const T *x = ctx->at<T>(in), *b = ctx->at<T>(bias);
  T *y = ctx->at<T>(out);
  // Row by row (no division per element: the rows' loops vectorize).
  int64_t rows = bias_n > 0 ? n / bias_n : 0;
  ctx->pool.parallelFor(rows, rowGrain(bias_n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T *xr = x + r * bias_n;
      T *yr = y + r * bias_n;
      for (int64_t c = 0; c < bias_n; ++c)
        yr[c] = xr[c] + b[c];
    }
  });
  ctx->touch(out, n * sizeof(T));
}

/// fn(row, c) for c in [0, cols) of each row, rows in parallel, each row's
/// loop on a copy of fn (vectorized; AVX2 where the CPU has it, with the
/// baseline's bits, as elementwise).
template <typename Fn>
void rowwise(tmrt_context *ctx, int64_t rows, int64_t cols, Fn fn) {
  bool avx2 = tmrt::avx2Enabled();
  ctx->pool.parallelFor(rows, rowGrain(cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      auto row = [fn, r](int64_t c) { fn(r, c); };
      if (avx2)
        elementLoopAvx2(0, cols, row);
      else
        elementLoop(0, cols, row);
    }
  });
}

template <typename T>
void bias_geluOf(tmrt_context *ctx, int64_t in, int64_t bias, int64_t out,
                 int64_t n, int64_t bias_n) {
  const T *x = ctx->at<T>(in), *b = ctx->at<T>(bias);
  T *y = ctx->at<T>(out);
  int64_t rows = bias_n > 0 ? n / bias_n : 0;
  rowwise(ctx, rows, bias_n, [x, b, y, bias_n](int64_t r, int64_t c) {
    int64_t i = r * bias_n + c;
    y[i] = trainmem::biasGelu(x[i], b[c]);
  });
  ctx->touch(out, n * sizeof(T));
}

template <typename T>
void bias_gelu_gradOf(tmrt_context *ctx, int64_t dy, int64_t x, int64_t bias,
                      int64_t out, int64_t n, int64_t bias_n) {
  const T *g = ctx->at<T>(dy), *v = ctx->at<T>(x), *b = ctx->at<T>(bias);
  T *z = ctx->at<T>(out);
  int64_t rows = bias_n > 0 ? n / bias_n : 0;
  rowwise(ctx, rows, bias_n, [g, v, b, z, bias_n](int64_t r, int64_t c) {
    int64_t i = r * bias_n + c;
    z[i] = trainmem::biasGeluGrad(g[i], v[i], b[c]);
  });
  ctx->touch(out, n * sizeof(T));
}

/// An activation of Activations.def: out = A::forward(in) and its gradient
/// out = dy · A::derivative(x), in double.
template <typename A>
void activation(tmrt_context *ctx, const char *kernel, int64_t in, int64_t out,
                int64_t n) {
  withFloatType(ctx, kernel, {in, out}, [&](auto type) {
    unaryKernel<decltype(type)>(ctx, in, out, n,
                                [](double x) { return A::forward(x); });
  });
}

template <typename A>
void activationGrad(tmrt_context *ctx, const char *kernel, int64_t dy,
                    int64_t x, int64_t out, int64_t n) {
  withFloatType(ctx, kernel, {dy, x, out}, [&](auto type) {
    binaryKernel<decltype(type)>(ctx, dy, x, out, n, [](double g, double v) {
      return g * A::derivative(v);
    });
  });
}

#define TMRT_ACTIVATION_KERNEL(kernel, Name) TMRT_ACTIVATION(kernel, Name)
#define TMRT_ACTIVATION(kernel, Name)                                          \
  void kernel(tmrt_context *ctx, int64_t in, int64_t out, int64_t n) {         \
    activation<trainmem::Name>(ctx, #kernel, in, out, n);                      \
  }                                                                            \
  void kernel##_grad(tmrt_context *ctx, int64_t dy, int64_t x, int64_t out,    \
                     int64_t n) {                                              \
    activationGrad<trainmem::Name>(ctx, #kernel "_grad", dy, x, out, n);       \
  }
#include "trainmem-runtime/Activations.def"

template <typename T>
void layer_normOf(tmrt_context *ctx, int64_t in, int64_t gamma,
                     int64_t beta, int64_t out, int64_t rows, int64_t cols,
                     double eps) {
  const T *x = ctx->at<T>(in), *g = ctx->at<T>(gamma),
              *b = ctx->at<T>(beta);
  T *y = ctx->at<T>(out);
  ctx->pool.parallelFor(rows, rowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      trainmem::rows::layerNorm(x + r * cols, g, b, y + r * cols, cols, eps);
  });
  ctx->touch(out, rows * cols * sizeof(T));
}

template <typename T>
void layer_norm_gradOf(tmrt_context *ctx, int64_t dy, int64_t x,
                          int64_t gamma, int64_t dx, int64_t dgamma,
                          int64_t dbeta, int64_t rows, int64_t cols,
                          double eps) {
  const T *gy = ctx->at<T>(dy), *xv = ctx->at<T>(x),
              *g = ctx->at<T>(gamma);
  T *gx = ctx->at<T>(dx);
  // Row-parallel input gradient; the parameter gradients are column sums,
  // accumulated per task of kReductionRows rows and then added in task
  // order (the same for every thread count).
  int64_t tasks = (rows + kReductionRows - 1) / kReductionRows;
  std::vector<double> partial(2 * cols * std::max<int64_t>(tasks, 1), 0.0);
  ctx->pool.parallelFor(tasks, 1, [&](int64_t tb, int64_t te) {
    for (int64_t task = tb; task < te; ++task) {
      double *pg = &partial[2 * cols * task], *pb = pg + cols;
      for (int64_t r = task * rows / tasks; r < (task + 1) * rows / tasks; ++r)
        trainmem::rows::layerNormGrad(gy + r * cols, xv + r * cols, g,
                                      gx + r * cols, pg, pb, cols, eps);
    }
  });
  T *gg = ctx->at<T>(dgamma), *gb = ctx->at<T>(dbeta);
  for (int64_t c = 0; c < cols; ++c) {
    double sg = 0.0, sb = 0.0;
    for (int64_t task = 0; task < tasks; ++task) {
      sg += partial[2 * cols * task + c];
      sb += partial[2 * cols * task + cols + c];
    }
    gg[c] = static_cast<float>(sg);
    gb[c] = static_cast<float>(sb);
  }
  ctx->touch(dx, rows * cols * sizeof(T));
  ctx->touch(dgamma, cols * sizeof(T));
  ctx->touch(dbeta, cols * sizeof(T));
}

template <typename T>
void rms_normOf(tmrt_context *ctx, int64_t in, int64_t gamma, int64_t out,
                   int64_t rows, int64_t cols, double eps, double gain_offset) {
  const T *x = ctx->at<T>(in), *g = ctx->at<T>(gamma);
  T *y = ctx->at<T>(out);
  ctx->pool.parallelFor(rows, rowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      trainmem::rows::rmsNorm(x + r * cols, g, y + r * cols, cols, eps,
                              gain_offset);
  });
  ctx->touch(out, rows * cols * sizeof(T));
}

template <typename T>
void rms_norm_gradOf(tmrt_context *ctx, int64_t dy, int64_t x,
                        int64_t gamma, int64_t dx, int64_t dgamma,
                        int64_t rows, int64_t cols, double eps,
                        double gain_offset) {
  const T *gy = ctx->at<T>(dy), *xv = ctx->at<T>(x),
              *g = ctx->at<T>(gamma);
  T *gx = ctx->at<T>(dx);
  int64_t tasks = (rows + kReductionRows - 1) / kReductionRows;
  std::vector<double> partial(cols * std::max<int64_t>(tasks, 1), 0.0);
  ctx->pool.parallelFor(tasks, 1, [&](int64_t tb, int64_t te) {
    for (int64_t task = tb; task < te; ++task) {
      double *pg = &partial[cols * task];
      for (int64_t r = task * rows / tasks; r < (task + 1) * rows / tasks; ++r)
        trainmem::rows::rmsNormGrad(gy + r * cols, xv + r * cols, g,
                                    gx + r * cols, pg, cols, eps,
                                    gain_offset);
    }
  });
  T *gg = ctx->at<T>(dgamma);
  for (int64_t c = 0; c < cols; ++c) {
    double sum = 0.0;
    for (int64_t task = 0; task < tasks; ++task)
      sum += partial[cols * task + c];
    gg[c] = static_cast<float>(sum);
  }
  ctx->touch(dx, rows * cols * sizeof(T));
  ctx->touch(dgamma, cols * sizeof(T));
}

template <typename T>
void softmaxOf(tmrt_context *ctx, int64_t in, int64_t out, int64_t rows,
               int64_t cols, int64_t queries, int64_t causal, int64_t heads,
               const double *alibi_slopes) {
  const T *x = ctx->at<T>(in);
  T *y = ctx->at<T>(out);
  ctx->pool.parallelFor(rows, rowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t query = r % queries;
      int64_t visible = causal ? query + 1 : cols;
      if (alibi_slopes)
        trainmem::rows::softmaxAlibi(x + r * cols, y + r * cols, cols,
                                     visible,
                                     alibi_slopes[(r / queries) % heads],
                                     query);
      else
        trainmem::rows::softmax(x + r * cols, y + r * cols, cols, visible);
    }
  });
  ctx->touch(out, rows * cols * sizeof(T));
}

template <typename T>
void softmax_gradOf(tmrt_context *ctx, int64_t dy, int64_t y, int64_t out,
                       int64_t rows, int64_t cols) {
  const T *g = ctx->at<T>(dy), *yv = ctx->at<T>(y);
  T *z = ctx->at<T>(out);
  ctx->pool.parallelFor(rows, rowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      trainmem::rows::softmaxGrad(g + r * cols, yv + r * cols, z + r * cols,
                                  cols);
  });
  ctx->touch(out, rows * cols * sizeof(T));
}

/// A fused attention's layout and dropout (trainmem/Support/Attention.h,
/// which the reference evaluator uses too), with the strides of q, k, v.
struct AttentionShape : trainmem::AttentionLayout {
  int64_t qs[4], ks[4], vs[4];
  double scale;
  trainmem::AttentionDropout dropout;
};

/// The kernel's view of the compiler's descriptor: the layout, q/k/v
/// strides, scale and dropout (its stream keyed by the step counter `key`
/// and placed by the micro-batch `part`, both references or -1).
AttentionShape attentionShape(tmrt_context *ctx, const tmrt_attention_shape &d,
                              int64_t key, int64_t part, double scale,
                              double rate) {
  AttentionShape a;
  static_cast<trainmem::AttentionLayout &>(a) = trainmem::AttentionLayout::of(
      d.batch, d.heads, d.kv_heads, d.queries, d.keys, d.dim, d.value_dim,
      d.transpose_output, d.causal);
  const int64_t strides[12] = {d.q0, d.q1, d.q2, d.q3, d.k0, d.k1,
                               d.k2, d.k3, d.v0, d.v1, d.v2, d.v3};
  for (int i = 0; i < 4; ++i) {
    a.qs[i] = strides[i];
    a.ks[i] = strides[4 + i];
    a.vs[i] = strides[8 + i];
  }
  a.scale = scale;
  if (d.context_parts > 1)
    a.context = {d.context_parts,
                 tmrt::splitPosition(ctx, d.context_parts, d.context_stride),
                 d.context_balanced != 0};
  if (rate > 0.0) {
    int64_t seed = d.seed;
    if (key >= 0)
      seed += *ctx->at<int64_t>(key);
    a.dropout = trainmem::AttentionDropout::make(
        rate, static_cast<uint64_t>(seed), static_cast<uint64_t>(d.offset),
        dropoutBase(ctx, d.first, part, d.part_elements, d.rank_elements,
                    d.rank_stride));
    if (d.split_block > 0) {
      a.dropout.splitBlock = static_cast<uint64_t>(d.split_block);
      a.dropout.splitParts = static_cast<uint64_t>(d.split_parts);
      a.dropout.splitPosition = static_cast<uint64_t>(
          tmrt::splitPosition(ctx, d.split_parts, d.split_stride));
    }
  }
  return a;
}

/// The fused attention in tiles (FlashAttention's algorithm, Dao et al.
/// 2022, and its second version's loop order, Dao 2023): scores of
/// kAttentionQueryTile queries by kAttentionKeyTile keys at a time, each
/// tile's products by cblas_sgemm on f32 copies of the operands, the
/// softmax online (a running row maximum and sum), exponentials by fastExp.
/// No score tensor exists beyond one tile per thread. Every sum has one
/// order that the shape alone fixes (tiles in key order, one task per
/// output tile), so the bits do not depend on the thread count.
constexpr int64_t kAttentionQueryTile = 64, kAttentionKeyTile = 64;

/// Rows [first, first + count) of a [rows, cols] operand with strides
/// `rowStride`, `colStride` (elements) as row-major f32.
template <typename T>
void packRows(const T *from, int64_t rowStride, int64_t colStride,
              int64_t first, int64_t count, int64_t cols, float *to) {
  for (int64_t r = 0; r < count; ++r) {
    const T *row = from + (first + r) * rowStride;
    for (int64_t c = 0; c < cols; ++c)
      to[r * cols + c] = static_cast<float>(row[c * colStride]);
  }
}

/// C[m, n] = alpha A B (+ C when accumulate), row-major f32 with leading
/// dimensions; A is [m, k] or, transposed, [k, m]; B [k, n] or [n, k].
void attentionGemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                   const float *A, int64_t lda, const float *B, int64_t ldb,
                   bool accumulate, float *C, int64_t ldc) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i)
        std::fill(C + i * ldc, C + i * ldc + n, 0.0f);
    return;
  }
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0f, A,
              static_cast<int>(lda), B, static_cast<int>(ldb),
              accumulate ? 1.0f : 0.0f, C, static_cast<int>(ldc));
}

/// to[0, n) = from (or += with Accumulate), converted to To.
template <bool Accumulate, typename To>
void store(To *to, const float *from, int64_t n) {
  for (int64_t x = 0; x < n; ++x) {
    if constexpr (Accumulate)
      to[x] += from[x];
    else
      to[x] = from[x];
  }
}

/// The online softmax of a ring attention, carried from block to block in
/// its workspace (trainmem/Support/RingAttention.h): each tile starts from
/// the state the blocks before left (fresh on the first) and, but after
/// the last block, leaves its own there instead of normalizing into the
/// output. The default is one pass over all keys.
struct AttentionCarry {
  float *acc = nullptr, *most = nullptr, *sum = nullptr;
  bool first = true, last = true;
};

/// One task per (batch, head, tile of queries): the tile's output rows and
/// log-sum-exps are its own.
template <typename T>
void attentionTiles(tmrt_context *ctx, const AttentionShape &a, const T *Q,
                    const T *K, const T *V, T *O, float *L,
                    const AttentionCarry &carry = {}) {
  const int64_t BQ = kAttentionQueryTile, BK = kAttentionKeyTile;
  int64_t tiles = (a.queries + BQ - 1) / BQ;
  float keepScale = static_cast<float>(a.dropout.keepScale),
        scale = static_cast<float>(a.scale);
  ctx->pool.parallelFor(a.batch * a.heads * tiles, 1, [&](int64_t begin,
                                                          int64_t end) {
    std::vector<float> qt(BQ * a.dim), kh, vh, s(BQ * BK),
        o(BQ * a.valueDim), most(BQ), sum(BQ);
    std::vector<uint8_t> kept(BK);
    int64_t packedHead = -1; // b * kvHeads + kvh of kh and vh
    for (int64_t task = begin; task < end; ++task) {
      int64_t tile = task % tiles, bh = task / tiles;
      int64_t b = bh / a.heads, h = bh % a.heads, kvh = a.kvHead(h);
      int64_t q0 = tile * BQ, rows = std::min(BQ, a.queries - q0);
      if (packedHead != b * a.kvHeads + kvh) {
        packedHead = b * a.kvHeads + kvh;
        kh.resize(a.keys * a.dim);
        vh.resize(a.keys * a.valueDim);
        packRows(K + b * a.ks[0] + kvh * a.ks[1], a.ks[2], a.ks[3], 0,
                 a.keys, a.dim, kh.data());
        packRows(V + b * a.vs[0] + kvh * a.vs[1], a.vs[2], a.vs[3], 0,
                 a.keys, a.valueDim, vh.data());
      }
      packRows(Q + b * a.qs[0] + h * a.qs[1], a.qs[2], a.qs[3], q0, rows,
               a.dim, qt.data());
      if (carry.first) {
        std::fill(most.begin(), most.end(),
                  -std::numeric_limits<float>::infinity());
        std::fill(sum.begin(), sum.end(), 0.0f);
        std::fill(o.begin(), o.end(), 0.0f);
      } else {
        for (int64_t r = 0; r < rows; ++r) {
          int64_t row = a.row(b, h, q0 + r);
          most[r] = carry.most[row];
          sum[r] = carry.sum[row];
          std::copy_n(carry.acc + row * a.valueDim, a.valueDim,
                      o.data() + r * a.valueDim);
        }
      }
      // Key tiles inside runs of keys consecutive in the sequence (one run
      // but under context parallelism), each run up to the keys the tile's
      // last query sees in it.
      for (int64_t run = 0; run < a.keys; run += a.keyRun()) {
        int64_t keyEnd = run + a.visibleIn(q0 + rows - 1, run,
                                           std::min(a.keyRun(), a.keys - run));
        for (int64_t k0 = run; k0 < keyEnd; k0 += BK) {
          int64_t cols = std::min(BK, keyEnd - k0);
          attentionGemm(false, true, rows, cols, a.dim, qt.data(), a.dim,
                        kh.data() + k0 * a.dim, a.dim, false, s.data(), BK);
          for (int64_t r = 0; r < rows; ++r) {
            int64_t i = q0 + r;
            int64_t visible = a.visibleIn(i, k0, cols);
            float *sr = s.data() + r * BK;
            if (visible == 0) {
              std::fill(sr, sr + cols, 0.0f);
              continue;
            }
            float tileMost = -std::numeric_limits<float>::infinity();
            for (int64_t j = 0; j < visible; ++j) {
              sr[j] = sr[j] * scale + a.bias(h, i, k0 + j);
              tileMost = std::max(tileMost, sr[j]);
            }
            float newMost = std::max(most[r], tileMost);
            float rescale = trainmem::fastExp(most[r] - newMost);
            for (int64_t j = 0; j < visible; ++j)
              sr[j] -= newMost;
            trainmem::fastExpInPlace(sr, visible);
            float rowSum = 0.0f;
            for (int64_t j = 0; j < visible; ++j)
              rowSum += sr[j];
            std::fill(sr + visible, sr + cols, 0.0f);
            sum[r] = sum[r] * rescale + rowSum;
            most[r] = newMost;
            if (a.dropout.rate > 0.0) {
              a.dropout.keepRun(a.score(b, h, i, k0), visible, kept.data());
              for (int64_t j = 0; j < visible; ++j)
                sr[j] = kept[j] ? sr[j] * keepScale : 0.0f;
            }
            float *orow = o.data() + r * a.valueDim;
            for (int64_t d = 0; d < a.valueDim; ++d)
              orow[d] *= rescale;
          }
          attentionGemm(false, false, rows, a.valueDim, cols, s.data(), BK,
                        vh.data() + k0 * a.valueDim, a.valueDim, true, o.data(),
                        a.valueDim);
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        int64_t i = q0 + r;
        if (!carry.last) {
          int64_t row = a.row(b, h, i);
          carry.most[row] = most[r];
          carry.sum[row] = sum[r];
          std::copy_n(o.data() + r * a.valueDim, a.valueDim,
                      carry.acc + row * a.valueDim);
          continue;
        }
        // A row that sees no key (only possible for a ring's block, never
        // over all of them) has no output.
        float inverse = sum[r] > 0.0f ? 1.0f / sum[r] : 0.0f;
        T *oi = O + a.outRow(b, h, i);
        for (int64_t d = 0; d < a.valueDim; ++d)
          oi[d] = o[r * a.valueDim + d] * inverse;
        L[a.row(b, h, i)] = most[r] + std::log(sum[r]);
      }
    }
  });
}

template <typename T>
void attentionOf(tmrt_context *ctx, const AttentionShape &a, int64_t q,
                 int64_t k, int64_t v, int64_t out, int64_t lse) {
  attentionTiles<T>(ctx, a, ctx->at<T>(q), ctx->at<T>(k), ctx->at<T>(v),
                    ctx->at<T>(out), ctx->at<float>(lse));
  ctx->touch(out, a.batch * a.heads * a.queries * a.valueDim * sizeof(T));
  ctx->touch(lse, a.batch * a.heads * a.queries * sizeof(float));
}

/// One task per (batch, key/value head), in FlashAttention-2's order: key
/// tiles outside, the query heads that share the key/value head and their
/// query tiles inside; a key tile's dK and dV are done when its loop ends,
/// each query's dQ sums over key tiles in order. Scores and probabilities
/// are recomputed from Q, K and the log-sum-exp, one tile at a time.
/// With `Accumulate`, dQ, dK and dV (G, f32: a ring's sums) are added to,
/// not written.
template <typename T, typename G = T, bool Accumulate = false>
void attentionGradTiles(tmrt_context *ctx, const AttentionShape &a,
                        const int64_t gs[4], const T *dO, const T *Q,
                        const T *K, const T *V, const T *O, const float *L,
                        G *dQ, G *dK, G *dV) {
  const int64_t BQ = kAttentionQueryTile, BK = kAttentionKeyTile;
  const int64_t group = a.group(), D = a.dim, DV = a.valueDim;
  float keepScale = static_cast<float>(a.dropout.keepScale),
        scale = static_cast<float>(a.scale);
  bool dropout = a.dropout.rate > 0.0;
  ctx->pool.parallelFor(a.batch * a.kvHeads, 1, [&](int64_t begin,
                                                    int64_t end) {
    // The group's queries, output gradients, row terms and dQ, whole; one
    // tile of everything else.
    std::vector<float> kh(a.keys * D), vh(a.keys * DV),
        qg(group * a.queries * D), gg(group * a.queries * DV),
        rowDot(group * a.queries), rowLse(group * a.queries),
        dqg(group * a.queries * D), p(BQ * BK), ds(BQ * BK), dkt(BK * D),
        dvt(BK * DV);
    std::vector<uint8_t> kept(BQ * BK);
    for (int64_t task = begin; task < end; ++task) {
      int64_t b = task / a.kvHeads, kvh = task % a.kvHeads;
      packRows(K + b * a.ks[0] + kvh * a.ks[1], a.ks[2], a.ks[3], 0, a.keys,
               D, kh.data());
      packRows(V + b * a.vs[0] + kvh * a.vs[1], a.vs[2], a.vs[3], 0, a.keys,
               DV, vh.data());
      for (int64_t g = 0; g < group; ++g) {
        int64_t h = kvh * group + g;
        float *qgh = qg.data() + g * a.queries * D,
              *ggh = gg.data() + g * a.queries * DV;
        packRows(Q + b * a.qs[0] + h * a.qs[1], a.qs[2], a.qs[3], 0,
                 a.queries, D, qgh);
        // The output's gradient may be a view (a transpose's VJP).
        packRows(dO + b * gs[0] + h * gs[1], gs[2], gs[3], 0, a.queries, DV,
                 ggh);
        for (int64_t i = 0; i < a.queries; ++i) {
          const T *oi = O + a.outRow(b, h, i);
          double dot = 0.0;
          for (int64_t d = 0; d < DV; ++d)
            dot += static_cast<double>(ggh[i * DV + d]) *
                   static_cast<float>(oi[d]);
          rowDot[g * a.queries + i] = static_cast<float>(dot);
          rowLse[g * a.queries + i] = L[a.row(b, h, i)];
        }
      }
      std::fill(dqg.begin(), dqg.end(), 0.0f);
      // Key tiles inside runs of keys consecutive in the sequence.
      for (int64_t run = 0; run < a.keys; run += a.keyRun()) {
        int64_t runEnd = std::min(a.keys, run + a.keyRun());
        for (int64_t k0 = run; k0 < runEnd; k0 += BK) {
          int64_t cols = std::min(BK, runEnd - k0);
          std::fill(dkt.begin(), dkt.end(), 0.0f);
          std::fill(dvt.begin(), dvt.end(), 0.0f);
          const float *kt = kh.data() + k0 * D, *vt = vh.data() + k0 * DV;
          // Causal: query i sees keys up to i, so tiles of queries below k0
          // see none of these keys (under context parallelism the rows say).
          int64_t firstQuery = a.causal && a.context.isWhole() ? k0 : 0;
          for (int64_t g = 0; g < group; ++g) {
            int64_t h = kvh * group + g;
            for (int64_t q0 = firstQuery / BQ * BQ; q0 < a.queries; q0 += BQ) {
              int64_t rows = std::min(BQ, a.queries - q0);
              const float *qt = qg.data() + (g * a.queries + q0) * D;
              const float *gt = gg.data() + (g * a.queries + q0) * DV;
              // p = exp(scale · Q Kᵀ - lse), 0 where the key is not visible;
              // then the dropped-out probabilities into ds for dV.
              attentionGemm(false, true, rows, cols, D, qt, D, kt, D, false,
                            p.data(), BK);
              for (int64_t r = 0; r < rows; ++r) {
                int64_t i = q0 + r;
                int64_t visible = a.visibleIn(i, k0, cols);
                float *pr = p.data() + r * BK, *dr = ds.data() + r * BK;
                float rowL = rowLse[g * a.queries + i];
                for (int64_t j = 0; j < visible; ++j)
                  pr[j] = pr[j] * scale + a.bias(h, i, k0 + j) - rowL;
                trainmem::fastExpInPlace(pr, visible);
                std::fill(pr + visible, pr + cols, 0.0f);
                uint8_t *keptRow = kept.data() + r * BK;
                if (dropout) {
                  a.dropout.keepRun(a.score(b, h, i, k0), visible, keptRow);
                  std::fill(keptRow + visible, keptRow + cols, 0);
                  for (int64_t j = 0; j < cols; ++j)
                    dr[j] = keptRow[j] ? pr[j] * keepScale : 0.0f;
                }
              }
              // dV += P_keptᵀ dO.
              attentionGemm(true, false, cols, DV, rows,
                            dropout ? ds.data() : p.data(), BK, gt, DV, true,
                            dvt.data(), DV);
              // dP = dO Vᵀ; dS = p (dP_kept - rowDot) scale.
              attentionGemm(false, true, rows, cols, DV, gt, DV, vt, DV, false,
                            ds.data(), BK);
              for (int64_t r = 0; r < rows; ++r) {
                int64_t i = q0 + r;
                float *pr = p.data() + r * BK, *dr = ds.data() + r * BK;
                const uint8_t *keptRow = kept.data() + r * BK;
                float dot = rowDot[g * a.queries + i];
                for (int64_t j = 0; j < cols; ++j) {
                  float dp = dr[j];
                  if (dropout)
                    dp = keptRow[j] ? dp * keepScale : 0.0f;
                  dr[j] = pr[j] * (dp - dot) * scale;
                }
              }
              // dK += dSᵀ Q; dQ += dS K.
              attentionGemm(true, false, cols, D, rows, ds.data(), BK, qt, D,
                            true, dkt.data(), D);
              attentionGemm(false, false, rows, D, cols, ds.data(), BK, kt, D,
                            true, dqg.data() + (g * a.queries + q0) * D, D);
            }
          }
          G *dkh = dK + ((b * a.kvHeads + kvh) * a.keys + k0) * D;
          G *dvh = dV + ((b * a.kvHeads + kvh) * a.keys + k0) * DV;
          store<Accumulate>(dkh, dkt.data(), cols * D);
          store<Accumulate>(dvh, dvt.data(), cols * DV);
        }
      }
      for (int64_t g = 0; g < group; ++g) {
        int64_t h = kvh * group + g;
        for (int64_t i = 0; i < a.queries; ++i)
          store<Accumulate>(dQ + a.row(b, h, i) * D,
                            dqg.data() + (g * a.queries + i) * D, D);
      }
    }
  });
}

template <typename T>
void attentionGradOf(tmrt_context *ctx, const AttentionShape &a,
                     const int64_t gs[4], int64_t dout, int64_t q, int64_t k,
                     int64_t v, int64_t out, int64_t lse, int64_t dq,
                     int64_t dk, int64_t dv) {
  attentionGradTiles<T>(ctx, a, gs, ctx->at<T>(dout), ctx->at<T>(q),
                        ctx->at<T>(k), ctx->at<T>(v), ctx->at<T>(out),
                        ctx->at<float>(lse), ctx->at<T>(dq), ctx->at<T>(dk),
                        ctx->at<T>(dv));
  ctx->touch(dq, a.batch * a.heads * a.queries * a.dim * sizeof(T));
  ctx->touch(dk, a.batch * a.kvHeads * a.keys * a.dim * sizeof(T));
  ctx->touch(dv, a.batch * a.kvHeads * a.keys * a.valueDim * sizeof(T));
}

/// A ring attention's way around its group (trainmem/Support/
/// RingAttention.h): blocks go to the next member and come from the
/// previous one.
struct Ring {
  tmrt::Group group;
  uint8_t *workspace = nullptr;
  trainmem::RingAttentionWorkspace layout;

  /// The group, and the workspace at `ref` (touched: planned arena memory);
  /// false after failing the context.
  bool open(tmrt_context *ctx, const char *kernel, const AttentionShape &a,
            const tmrt_attention_shape &d, bool backward,
            int64_t elementBytes) {
    if (!tmrt::groupOf(ctx, kernel, d.context_parts, d.context_stride, group))
      return false;
    layout = trainmem::RingAttentionWorkspace::of(
        backward, a.batch, a.heads, a.kvHeads, a.queries, a.keys, a.dim,
        a.valueDim, elementBytes);
    workspace = ctx->bytesAt(d.workspace);
    ctx->touch(d.workspace, layout.bytes);
    return true;
  }
  /// The block (or sum) at `ring`'s place `block` of a step: the rank's
  /// own at step 0, the previous member's at step 1, ...
  int64_t blockAt(int64_t step) const {
    return ((group.position - step) % group.size + group.size) % group.size;
  }
  /// Sends `bytes` at `from` on while the previous member's arrive at `to`.
  bool pass(tmrt_context *ctx, const void *from, void *to,
            uint64_t bytes) const {
    int64_t next = (group.position + 1) % group.size,
            previous = (group.position + group.size - 1) % group.size;
    if (!ctx->communicator->sendRecv(ctx, from, bytes, group.member(next), to,
                                     bytes, group.member(previous)))
      return false;
    ctx->countTraffic(group.size, group.stride, bytes);
    return true;
  }
  template <typename E> E *at(uint64_t offset) const {
    return reinterpret_cast<E *>(workspace + offset);
  }
};

/// The rank's own K and V, row-major, into a ring's block `block`; the
/// shape's key strides then describe a block.
template <typename T>
void packOwnBlock(tmrt_context *ctx, AttentionShape &a, const Ring &ring,
                  const T *K, const T *V, int block) {
  T *bk = ring.at<T>(ring.layout.blocks[block]),
    *bv = ring.at<T>(ring.layout.blocks[block] + ring.layout.valueAt);
  ctx->pool.parallelFor(
      a.batch * a.kvHeads, 1, [&](int64_t begin, int64_t end) {
        for (int64_t bh = begin; bh < end; ++bh) {
          int64_t b = bh / a.kvHeads, h = bh % a.kvHeads;
          for (int64_t j = 0; j < a.keys; ++j) {
            for (int64_t d = 0; d < a.dim; ++d)
              bk[(bh * a.keys + j) * a.dim + d] =
                  K[b * a.ks[0] + h * a.ks[1] + j * a.ks[2] + d * a.ks[3]];
            for (int64_t d = 0; d < a.valueDim; ++d)
              bv[(bh * a.keys + j) * a.valueDim + d] =
                  V[b * a.vs[0] + h * a.vs[1] + j * a.vs[2] + d * a.vs[3]];
          }
        }
      });
  const int64_t ks[4] = {a.kvHeads * a.keys * a.dim, a.keys * a.dim, a.dim, 1},
                vs[4] = {a.kvHeads * a.keys * a.valueDim, a.keys * a.valueDim,
                         a.valueDim, 1};
  std::copy_n(ks, 4, a.ks);
  std::copy_n(vs, 4, a.vs);
}

/// Passes K and V of block `from` on into block `to`.
template <typename T>
bool passBlock(tmrt_context *ctx, const AttentionShape &a, const Ring &ring,
               int from, int to) {
  const trainmem::RingAttentionWorkspace &w = ring.layout;
  uint64_t kBytes =
               static_cast<uint64_t>(a.batch * a.kvHeads * a.keys * a.dim) *
               sizeof(T),
           vBytes = static_cast<uint64_t>(a.batch * a.kvHeads * a.keys *
                                          a.valueDim) *
                    sizeof(T);
  return ring.pass(ctx, ring.at<uint8_t>(w.blocks[from]),
                   ring.at<uint8_t>(w.blocks[to]), kBytes) &&
         ring.pass(ctx, ring.at<uint8_t>(w.blocks[from] + w.valueAt),
                   ring.at<uint8_t>(w.blocks[to] + w.valueAt), vBytes);
}

/// The ring forward: the online softmax over the blocks as they come
/// round, the rank's own first.
template <typename T>
void ringAttentionOf(tmrt_context *ctx, AttentionShape a,
                     const tmrt_attention_shape &d, int64_t q, int64_t k,
                     int64_t v, int64_t out, int64_t lse) {
  Ring ring;
  if (!ring.open(ctx, "attention", a, d, /*backward=*/false, sizeof(T)))
    return;
  const trainmem::RingAttentionWorkspace &w = ring.layout;
  packOwnBlock<T>(ctx, a, ring, ctx->at<T>(k), ctx->at<T>(v), 0);
  AttentionCarry carry{ring.at<float>(w.acc), ring.at<float>(w.most),
                       ring.at<float>(w.sum)};
  const T *Q = ctx->at<T>(q);
  T *O = ctx->at<T>(out);
  float *L = ctx->at<float>(lse);
  for (int64_t step = 0; step < ring.group.size; ++step) {
    int held = static_cast<int>(step % 2);
    a.keyBlock = ring.blockAt(step);
    carry.first = step == 0;
    carry.last = step + 1 == ring.group.size;
    attentionTiles<T>(ctx, a, Q, ring.at<T>(w.blocks[held]),
                      ring.at<T>(w.blocks[held] + w.valueAt), O, L, carry);
    if (!carry.last && !passBlock<T>(ctx, a, ring, held, 1 - held))
      return;
  }
  ctx->touch(out, a.batch * a.heads * a.queries * a.valueDim * sizeof(T));
  ctx->touch(lse, a.batch * a.heads * a.queries * sizeof(float));
}

/// The ring backward: K and V come round again, each block's dK and dV
/// sums travelling with it; after the last block one more pass brings
/// each sum to its owner.
template <typename T>
void ringAttentionGradOf(tmrt_context *ctx, AttentionShape a,
                         const tmrt_attention_shape &d, const int64_t gs[4],
                         int64_t dout, int64_t q, int64_t k, int64_t v,
                         int64_t out, int64_t lse, int64_t dq, int64_t dk,
                         int64_t dv) {
  Ring ring;
  if (!ring.open(ctx, "attention_grad", a, d, /*backward=*/true, sizeof(T)))
    return;
  const trainmem::RingAttentionWorkspace &w = ring.layout;
  const int64_t qElements = a.batch * a.heads * a.queries * a.dim,
                kElements = a.batch * a.kvHeads * a.keys * a.dim,
                vElements = a.batch * a.kvHeads * a.keys * a.valueDim;
  packOwnBlock<T>(ctx, a, ring, ctx->at<T>(k), ctx->at<T>(v), 0);
  float *dQsum = ring.at<float>(w.acc);
  std::fill_n(dQsum, qElements, 0.0f);
  auto gradK = [&](int slot) { return ring.at<float>(w.grads[slot]); };
  auto gradV = [&](int slot) {
    return ring.at<float>(w.grads[slot] + w.gradValueAt);
  };
  std::fill_n(gradK(0), kElements, 0.0f);
  std::fill_n(gradV(0), vElements, 0.0f);
  const T *dO = ctx->at<T>(dout), *Q = ctx->at<T>(q), *O = ctx->at<T>(out);
  const float *L = ctx->at<float>(lse);
  auto passSums = [&](int from, int to) {
    return ring.pass(ctx, gradK(from), gradK(to), kElements * sizeof(float)) &&
           ring.pass(ctx, gradV(from), gradV(to), vElements * sizeof(float));
  };
  int held = 0;
  for (int64_t step = 0; step < ring.group.size; ++step) {
    held = static_cast<int>(step % 2);
    a.keyBlock = ring.blockAt(step);
    attentionGradTiles<T, float, true>(ctx, a, gs, dO, Q,
                                       ring.at<T>(w.blocks[held]),
                                       ring.at<T>(w.blocks[held] + w.valueAt),
                                       O, L, dQsum, gradK(held), gradV(held));
    if (step + 1 < ring.group.size &&
        (!passBlock<T>(ctx, a, ring, held, 1 - held) ||
         !passSums(held, 1 - held)))
      return;
  }
  // The sums held are the next member's block's: they go home.
  if (ring.group.size > 1) {
    if (!passSums(held, 1 - held))
      return;
    held = 1 - held;
  }
  T *dQ = ctx->at<T>(dq), *dK = ctx->at<T>(dk), *dV = ctx->at<T>(dv);
  const float *sumK = gradK(held), *sumV = gradV(held);
  elementwise(ctx, qElements, [&](int64_t i) { dQ[i] = dQsum[i]; });
  elementwise(ctx, kElements, [&](int64_t i) { dK[i] = sumK[i]; });
  elementwise(ctx, vElements, [&](int64_t i) { dV[i] = sumV[i]; });
  ctx->touch(dq, qElements * sizeof(T));
  ctx->touch(dk, kElements * sizeof(T));
  ctx->touch(dv, vElements * sizeof(T));
}

void attention(tmrt_context *ctx, int64_t q, int64_t k, int64_t v, int64_t out,
               int64_t lse, int64_t key, int64_t part, double scale,
               double rate, const tmrt_attention_shape *shape,
               const double *alibi_slopes) {
  AttentionShape a = attentionShape(ctx, *shape, key, part, scale, rate);
  a.alibiSlopes = alibi_slopes;
  withFloatType(ctx, "attention", {q, k, v, out}, [&](auto type) {
    if (shape->context_ring)
      ringAttentionOf<decltype(type)>(ctx, a, *shape, q, k, v, out, lse);
    else
      attentionOf<decltype(type)>(ctx, a, q, k, v, out, lse);
  });
}

void attention_grad(tmrt_context *ctx, int64_t dout, int64_t q, int64_t k,
                    int64_t v, int64_t out, int64_t lse, int64_t dq, int64_t dk,
                    int64_t dv, int64_t key, int64_t part, double scale,
                    double rate, const tmrt_attention_shape *shape,
                    const double *alibi_slopes) {
  const int64_t gradStrides[4] = {shape->g0, shape->g1, shape->g2, shape->g3};
  AttentionShape a = attentionShape(ctx, *shape, key, part, scale, rate);
  a.alibiSlopes = alibi_slopes;
  withFloatType(
      ctx, "attention_grad", {dout, q, k, v, out, dq, dk, dv}, [&](auto type) {
        if (shape->context_ring)
          ringAttentionGradOf<decltype(type)>(ctx, a, *shape, gradStrides, dout,
                                              q, k, v, out, lse, dq, dk, dv);
        else
          attentionGradOf<decltype(type)>(ctx, a, gradStrides, dout, q, k, v,
                                          out, lse, dq, dk, dv);
      });
}

template <typename T>
void dropoutOf(tmrt_context *ctx, int64_t in, int64_t out, int64_t mask,
               int64_t n, double rate, int64_t seed, int64_t offset,
               int64_t key, int64_t first, int64_t part, int64_t part_elements,
               int64_t rank_elements, int64_t rank_stride, int64_t split_block,
               int64_t split_parts, int64_t split_stride,
               int64_t split_balanced) {
  if (key >= 0)
    seed += *ctx->at<int64_t>(key);
  const T *x = ctx->at<T>(in);
  T *y = ctx->at<T>(out);
  uint8_t *keep = ctx->at<uint8_t>(mask);
  double scale = 1.0 / (1.0 - rate);
  forEachKeepOfPart(
      ctx, n, static_cast<uint64_t>(seed), static_cast<uint64_t>(offset), rate,
      dropoutBase(ctx, first, part, part_elements, rank_elements, rank_stride),
      split_block, split_parts, split_stride, split_balanced != 0,
      [&](int64_t i, bool k) {
        keep[i] = k;
        y[i] = k ? static_cast<float>(x[i] * scale) : 0.0f;
      });
  ctx->touch(out, n * sizeof(T));
  ctx->touch(mask, n);
}

template <typename T>
void dropout_gradOf(tmrt_context *ctx, int64_t dy, int64_t mask,
                       int64_t out, int64_t n, double rate) {
  const T *g = ctx->at<T>(dy);
  const uint8_t *keep = ctx->at<uint8_t>(mask);
  T *y = ctx->at<T>(out);
  double scale = 1.0 / (1.0 - rate);
  elementwise(ctx, n, [&](int64_t i) {
    y[i] = keep[i] ? static_cast<float>(g[i] * scale) : 0.0f;
  });
  ctx->touch(out, n * sizeof(T));
}

void dropout_mask(tmrt_context *ctx, int64_t mask, int64_t n, double rate,
                  int64_t seed, int64_t offset, int64_t key, int64_t first,
                  int64_t part, int64_t part_elements, int64_t rank_elements,
                  int64_t rank_stride, int64_t split_block, int64_t split_parts,
                  int64_t split_stride, int64_t split_balanced) {
  if (key >= 0)
    seed += *ctx->at<int64_t>(key);
  uint8_t *keep = ctx->at<uint8_t>(mask);
  forEachKeepOfPart(
      ctx, n, static_cast<uint64_t>(seed), static_cast<uint64_t>(offset), rate,
      dropoutBase(ctx, first, part, part_elements, rank_elements, rank_stride),
      split_block, split_parts, split_stride, split_balanced != 0,
      [&](int64_t i, bool k) { keep[i] = k; });
  ctx->touch(mask, n);
}

template <typename T>
void ropeOf(tmrt_context *ctx, int64_t in, int64_t out, int64_t n0, int64_t n1,
            int64_t s, int64_t d, int64_t s0, int64_t s1, int64_t ss,
            int64_t sd, double theta, int64_t inverse, int64_t halves,
            int64_t context_parts, int64_t context_stride,
            int64_t context_balanced) {
  const T *x = ctx->at<T>(in);
  T *y = ctx->at<T>(out);
  double sign = inverse ? -1.0 : 1.0;
  int64_t rows = n0 * n1 * s;
  trainmem::ContextChunks context;
  if (context_parts > 1)
    context = {context_parts,
               tmrt::splitPosition(ctx, context_parts, context_stride),
               context_balanced != 0};
  // Pair i: elements (2i, 2i + 1), or (i, i + d/2).
  int64_t step = halves ? 1 : 2, partner = halves ? d / 2 : 1;
  ctx->pool.parallelFor(rows, rowGrain(d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t pos = r % s, rest = r / s;
      int64_t i1 = rest % n1, i0 = rest / n1;
      const T *xr = x + i0 * s0 + i1 * s1 + pos * ss;
      double at = static_cast<double>(context.wholeRow(pos, s));
      for (int64_t i = 0; i < d / 2; ++i) {
        double angle = sign * at * std::pow(theta, -2.0 * i / d);
        double c = std::cos(angle), sn = std::sin(angle);
        int64_t a = step * i, b = a + partner;
        double x0 = xr[a * sd], x1 = xr[b * sd];
        y[r * d + a] = static_cast<float>(x0 * c - x1 * sn);
        y[r * d + b] = static_cast<float>(x0 * sn + x1 * c);
      }
    }
  });
  ctx->touch(out, rows * d * sizeof(T));
}

template <typename T>
void embeddingOf(tmrt_context *ctx, int64_t table, int64_t ids, int64_t out,
                 int64_t num_ids, int64_t hidden, int64_t vocab,
                 int64_t id_bits, int64_t split_parts, int64_t split_stride) {
  const T *t = ctx->at<T>(table);
  T *y = ctx->at<T>(out);
  int64_t first = tmrt::splitPosition(ctx, split_parts, split_stride) * vocab;
  int64_t whole = vocab * split_parts;
  for (int64_t i = 0; i < num_ids; ++i) {
    int64_t id = readId(ctx, ids, i, id_bits);
    if (id < 0 || id >= whole) {
      ctx->fail("token id " + std::to_string(id) + " at position " +
                std::to_string(i) + " is outside the table of " +
                std::to_string(whole) + " rows");
      std::fill(y + i * hidden, y + (i + 1) * hidden, 0.0f);
      continue;
    }
    if (id < first || id >= first + vocab) {
      std::fill(y + i * hidden, y + (i + 1) * hidden, 0.0f);
      continue;
    }
    std::memcpy(y + i * hidden, t + (id - first) * hidden, hidden * sizeof(T));
  }
  ctx->touch(out, num_ids * hidden * sizeof(T));
}

void embedding(tmrt_context *ctx, int64_t table, int64_t ids, int64_t out,
               int64_t num_ids, int64_t hidden, int64_t vocab, int64_t id_bits,
               int64_t split_parts, int64_t split_stride) {
  if (!tmrt::checkSplit(ctx, "embedding", split_parts, split_stride))
    return;
  withFloatType(ctx, "embedding", {table, out}, [&](auto type) {
    embeddingOf<decltype(type)>(ctx, table, ids, out, num_ids, hidden, vocab,
                                id_bits, split_parts, split_stride);
  });
}

template <typename T>
void embedding_gradOf(tmrt_context *ctx, int64_t dy, int64_t ids, int64_t out,
                      int64_t num_ids, int64_t hidden, int64_t vocab,
                      int64_t id_bits, int64_t split_parts,
                      int64_t split_stride) {
  const T *g = ctx->at<T>(dy);
  T *y = ctx->at<T>(out);
  int64_t first = tmrt::splitPosition(ctx, split_parts, split_stride) * vocab;
  int64_t whole = vocab * split_parts;
  // Accumulate in double per table row, in position order (deterministic).
  std::vector<double> acc(vocab * hidden, 0.0);
  for (int64_t i = 0; i < num_ids; ++i) {
    int64_t id = readId(ctx, ids, i, id_bits);
    if (id < 0 || id >= whole) {
      ctx->fail("token id " + std::to_string(id) + " at position " +
                std::to_string(i) + " is outside the table of " +
                std::to_string(whole) + " rows");
      continue;
    }
    if (id < first || id >= first + vocab)
      continue;
    for (int64_t h = 0; h < hidden; ++h)
      acc[(id - first) * hidden + h] += g[i * hidden + h];
  }
  for (int64_t i = 0; i < vocab * hidden; ++i)
    y[i] = static_cast<float>(acc[i]);
  ctx->touch(out, vocab * hidden * sizeof(T));
}

void embedding_grad(tmrt_context *ctx, int64_t dy, int64_t ids, int64_t out,
                    int64_t num_ids, int64_t hidden, int64_t vocab,
                    int64_t id_bits, int64_t split_parts,
                    int64_t split_stride) {
  if (!tmrt::checkSplit(ctx, "embedding_grad", split_parts, split_stride))
    return;
  withFloatType(ctx, "embedding_grad", {dy, out}, [&](auto type) {
    embedding_gradOf<decltype(type)>(ctx, dy, ids, out, num_ids, hidden, vocab,
                                     id_bits, split_parts, split_stride);
  });
}

template <typename T>
void sum_toOf(tmrt_context *ctx, int64_t in, int64_t out, int64_t out_n,
                 int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t d4,
                 int64_t d5, int64_t o0, int64_t o1, int64_t o2, int64_t o3,
                 int64_t o4, int64_t o5) {
  const T *x = ctx->at<T>(in);
  std::vector<double> acc(out_n, 0.0);
  int64_t index = 0;
  for (int64_t i0 = 0; i0 < d0; ++i0)
    for (int64_t i1 = 0; i1 < d1; ++i1)
      for (int64_t i2 = 0; i2 < d2; ++i2)
        for (int64_t i3 = 0; i3 < d3; ++i3)
          for (int64_t i4 = 0; i4 < d4; ++i4) {
            int64_t base = i0 * o0 + i1 * o1 + i2 * o2 + i3 * o3 + i4 * o4;
            for (int64_t i5 = 0; i5 < d5; ++i5)
              acc[base + i5 * o5] += x[index++];
          }
  T *y = ctx->at<T>(out);
  for (int64_t i = 0; i < out_n; ++i)
    y[i] = static_cast<float>(acc[i]);
  ctx->touch(out, out_n * sizeof(T));
}

template <typename T>
void cross_entropyOf(tmrt_context *ctx, int64_t logits, int64_t targets,
                        int64_t loss_sum, int64_t count, int64_t rows,
                        int64_t vocab, int64_t ignore_index, int64_t id_bits,
                        double label_smoothing) {
  const T *l = ctx->at<T>(logits);
  std::vector<double> rowLoss(rows, 0.0);
  std::vector<uint8_t> valid(rows, 0);
  ctx->pool.parallelFor(rows, rowGrain(vocab), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t t = readId(ctx, targets, r, id_bits);
      if (t == ignore_index)
        continue;
      if (t < 0 || t >= vocab) {
        ctx->fail("target " + std::to_string(t) + " at position " +
                  std::to_string(r) + " is outside the vocabulary of " +
                  std::to_string(vocab));
        continue;
      }
      rowLoss[r] = trainmem::rows::crossEntropy(l + r * vocab, vocab, t,
                                                 label_smoothing);
      valid[r] = 1;
    }
  });
  double sum = 0.0;
  int64_t n = 0;
  for (int64_t r = 0; r < rows; ++r) {
    sum += rowLoss[r];
    n += valid[r];
  }
  *ctx->at<float>(loss_sum) = static_cast<float>(sum);
  *ctx->at<int64_t>(count) = n;
  ctx->touch(loss_sum, 4);
  ctx->touch(count, 8);
}

template <typename T>
void cross_entropy_gradOf(tmrt_context *ctx, int64_t dloss,
                             int64_t logits, int64_t targets, int64_t out,
                             int64_t rows, int64_t vocab, int64_t ignore_index,
                             int64_t id_bits, double label_smoothing) {
  double g = *ctx->at<float>(dloss);
  const T *l = ctx->at<T>(logits);
  T *y = ctx->at<T>(out);
  ctx->pool.parallelFor(rows, rowGrain(vocab), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t t = readId(ctx, targets, r, id_bits);
      T *yr = y + r * vocab;
      if (t == ignore_index || t < 0 || t >= vocab) {
        std::fill(yr, yr + vocab, 0.0f);
        continue;
      }
      trainmem::rows::crossEntropyGrad(l + r * vocab, yr, vocab, t, g,
                                       label_smoothing);
    }
  });
  ctx->touch(out, rows * vocab * sizeof(T));
}

template <typename T>
void row_maxOf(tmrt_context *ctx, int64_t in, int64_t out, int64_t rows,
               int64_t cols) {
  const T *x = ctx->at<T>(in);
  float *y = ctx->at<float>(out);
  ctx->pool.parallelFor(rows, rowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      y[r] = static_cast<float>(trainmem::rows::rowMax(x + r * cols, cols));
  });
  ctx->touch(out, rows * 4);
}

template <typename T>
void cross_entropy_partOf(tmrt_context *ctx, int64_t logits, int64_t targets,
                          int64_t max, int64_t sum_exp, int64_t target_logit,
                          int64_t rows, int64_t vocab, int64_t ignore_index,
                          int64_t id_bits, int64_t split_parts,
                          int64_t split_stride) {
  const T *l = ctx->at<T>(logits);
  const float *most = ctx->at<float>(max);
  float *se = ctx->at<float>(sum_exp), *tl = ctx->at<float>(target_logit);
  int64_t first = tmrt::splitPosition(ctx, split_parts, split_stride) * vocab;
  int64_t whole = vocab * split_parts;
  std::vector<int64_t> bad(rows, -1);
  ctx->pool.parallelFor(rows, rowGrain(vocab), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t t = readId(ctx, targets, r, id_bits);
      bool ignored = t == ignore_index;
      if (!ignored && (t < 0 || t >= whole))
        bad[r] = t;
      trainmem::rows::crossEntropyPart(l + r * vocab, vocab, first,
                                       ignored ? -1 : t, most[r], se[r], tl[r]);
    }
  });
  for (int64_t r = 0; r < rows; ++r)
    if (bad[r] != -1) {
      ctx->fail("target " + std::to_string(bad[r]) + " at position " +
                std::to_string(r) + " is outside the vocabulary of " +
                std::to_string(whole));
      break;
    }
  ctx->touch(sum_exp, rows * 4);
  ctx->touch(target_logit, rows * 4);
}

void cross_entropy_part(tmrt_context *ctx, int64_t logits, int64_t targets,
                        int64_t max, int64_t sum_exp, int64_t target_logit,
                        int64_t rows, int64_t vocab, int64_t ignore_index,
                        int64_t id_bits, int64_t split_parts,
                        int64_t split_stride) {
  if (!tmrt::checkSplit(ctx, "cross_entropy_part", split_parts, split_stride))
    return;
  withFloatType(ctx, "cross_entropy_part", {logits}, [&](auto type) {
    cross_entropy_partOf<decltype(type)>(
        ctx, logits, targets, max, sum_exp, target_logit, rows, vocab,
        ignore_index, id_bits, split_parts, split_stride);
  });
}

template <typename T>
void cross_entropy_part_gradOf(tmrt_context *ctx, int64_t d_sum_exp,
                               int64_t d_target_logit, int64_t logits,
                               int64_t max, int64_t targets, int64_t out,
                               int64_t rows, int64_t vocab,
                               int64_t ignore_index, int64_t id_bits,
                               int64_t split_parts, int64_t split_stride) {
  const float *dse = ctx->at<float>(d_sum_exp);
  const float *dtl = ctx->at<float>(d_target_logit);
  const float *most = ctx->at<float>(max);
  const T *l = ctx->at<T>(logits);
  T *y = ctx->at<T>(out);
  int64_t first = tmrt::splitPosition(ctx, split_parts, split_stride) * vocab;
  ctx->pool.parallelFor(rows, rowGrain(vocab), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t t = readId(ctx, targets, r, id_bits);
      T *yr = y + r * vocab;
      if (t == ignore_index) {
        std::fill(yr, yr + vocab, 0.0f);
        continue;
      }
      trainmem::rows::crossEntropyPartGrad(l + r * vocab, yr, vocab, first, t,
                                           most[r], dse[r], dtl[r]);
    }
  });
  ctx->touch(out, rows * vocab * sizeof(T));
}

void cross_entropy_part_grad(tmrt_context *ctx, int64_t d_sum_exp,
                             int64_t d_target_logit, int64_t logits,
                             int64_t max, int64_t targets, int64_t out,
                             int64_t rows, int64_t vocab, int64_t ignore_index,
                             int64_t id_bits, int64_t split_parts,
                             int64_t split_stride) {
  if (!tmrt::checkSplit(ctx, "cross_entropy_part_grad", split_parts,
                        split_stride))
    return;
  withFloatType(ctx, "cross_entropy_part_grad", {logits, out}, [&](auto type) {
    cross_entropy_part_gradOf<decltype(type)>(
        ctx, d_sum_exp, d_target_logit, logits, max, targets, out, rows, vocab,
        ignore_index, id_bits, split_parts, split_stride);
  });
}

void cross_entropy_merge(tmrt_context *ctx, int64_t sum_exp,
                         int64_t target_logit, int64_t max, int64_t targets,
                         int64_t loss_sum, int64_t count, int64_t rows,
                         int64_t ignore_index, int64_t id_bits) {
  const float *se = ctx->at<float>(sum_exp);
  const float *tl = ctx->at<float>(target_logit);
  const float *most = ctx->at<float>(max);
  // Rows in order, in double: one thread, as cross_entropy adds its rows.
  double sum = 0.0;
  int64_t n = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (readId(ctx, targets, r, id_bits) == ignore_index)
      continue;
    sum += trainmem::rows::crossEntropyMerge(se[r], tl[r], most[r]);
    ++n;
  }
  *ctx->at<float>(loss_sum) = static_cast<float>(sum);
  *ctx->at<int64_t>(count) = n;
  ctx->touch(loss_sum, 4);
  ctx->touch(count, 8);
}

void cross_entropy_merge_grad(tmrt_context *ctx, int64_t dloss, int64_t sum_exp,
                              int64_t targets, int64_t d_sum_exp,
                              int64_t d_target_logit, int64_t rows,
                              int64_t ignore_index, int64_t id_bits) {
  double g = *ctx->at<float>(dloss);
  const float *se = ctx->at<float>(sum_exp);
  float *dse = ctx->at<float>(d_sum_exp);
  float *dtl = ctx->at<float>(d_target_logit);
  for (int64_t r = 0; r < rows; ++r) {
    bool valid = readId(ctx, targets, r, id_bits) != ignore_index;
    dse[r] = valid ? static_cast<float>(g / static_cast<double>(se[r])) : 0.0f;
    dtl[r] = valid ? static_cast<float>(-g) : 0.0f;
  }
  ctx->touch(d_sum_exp, rows * 4);
  ctx->touch(d_target_logit, rows * 4);
}

void mean_loss(tmrt_context *ctx, int64_t loss_sum, int64_t count,
                    int64_t out, int64_t weight, double scale) {
  if (weight >= 0)
    scale *= *ctx->at<float>(weight);
  double sum = *ctx->at<float>(loss_sum);
  int64_t n = *ctx->at<int64_t>(count);
  *ctx->at<float>(out) = static_cast<float>(
      scale * sum / static_cast<double>(std::max<int64_t>(n, 1)));
  ctx->touch(out, 4);
}

void count_valid(tmrt_context *ctx, int64_t targets, int64_t out,
                      int64_t n, int64_t ignore_index, int64_t id_bits) {
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i)
    count += readId(ctx, targets, i, id_bits) != ignore_index;
  *ctx->at<int64_t>(out) = count;
  ctx->touch(out, 8);
}

void slice_rows(tmrt_context *ctx, int64_t in, int64_t out,
                     int64_t offset, int64_t rows, int64_t available,
                     int64_t row_elems, int64_t kind, int64_t padding) {
  // kind: 0 a float tensor (its reference says which), 32 or 64 integers.
  int64_t dtype = tmrt::dtypeOf(in);
  if (tmrt::dtypeOf(out) != dtype || (kind != 0 && dtype != TMRT_DTYPE_F32)) {
    ctx->fail("slice_rows: input and result of different element types");
    return;
  }
  int64_t size = kind == 64 ? 8 : kind == 32 || dtype == TMRT_DTYPE_F32 ? 4 : 2;
  int64_t copied = std::max<int64_t>(0, std::min(rows, available - offset));
  std::memcpy(ctx->bytesAt(out), ctx->bytesAt(in) + offset * row_elems * size,
              copied * row_elems * size);
  for (int64_t i = copied * row_elems; i < rows * row_elems; ++i) {
    if (kind == 32)
      ctx->at<int32_t>(out)[i] = static_cast<int32_t>(padding);
    else if (kind == 64)
      ctx->at<int64_t>(out)[i] = padding;
    else if (dtype == TMRT_DTYPE_BF16)
      ctx->at<trainmem::BFloat16>(out)[i] = static_cast<float>(padding);
    else if (dtype == TMRT_DTYPE_F16)
      ctx->at<trainmem::Float16>(out)[i] = static_cast<float>(padding);
    else
      ctx->at<float>(out)[i] = static_cast<float>(padding);
  }
  ctx->touch(out, rows * row_elems * size);
}

template <typename T>
void adamwOf(tmrt_context *ctx, int64_t param, int64_t grad, int64_t m,
                int64_t v, int64_t lr, int64_t step, int64_t new_param,
                int64_t new_m, int64_t new_v, int64_t n, double beta1,
                double beta2, double eps, double weight_decay) {
  const float *p = ctx->at<float>(param), *mv = ctx->at<float>(m),
              *vv = ctx->at<float>(v);
  const T *g = ctx->at<T>(grad);
  float *np = ctx->at<float>(new_param), *nm = ctx->at<float>(new_m),
        *nv = ctx->at<float>(new_v);
  if (!allFiniteOf(ctx, g, n)) {
    // Skip this tensor's step: carry everything over unchanged.
    std::memmove(np, p, n * 4);
    std::memmove(nm, mv, n * 4);
    std::memmove(nv, vv, n * 4);
    ctx->recordSkipped(param);
    ctx->touch(new_param, n * 4);
    ctx->touch(new_m, n * 4);
    ctx->touch(new_v, n * 4);
    return;
  }
  const trainmem::AdamWStep update(*ctx->at<float>(lr), beta1, beta2, eps,
                                   weight_decay, *ctx->at<int64_t>(step));
  ctx->pool.parallelFor(n, kGrain, [&](int64_t begin, int64_t end) {
    const trainmem::AdamWStep step = update;
    // Element i reads and writes index i only, so vectors are safe also
    // when the outputs are the inputs (in place), which the vectorizer's
    // overlap check would otherwise refuse; other overlaps do not happen
    // (the memory plan keeps an op's inputs and outputs apart).
#pragma clang loop vectorize(assume_safety)
    for (int64_t i = begin; i < end; ++i)
      step.apply(p[i], g[i], mv[i], vv[i], np[i], nm[i], nv[i]);
  });
  ctx->touch(new_param, n * 4);
  ctx->touch(new_m, n * 4);
  ctx->touch(new_v, n * 4);
}

void quantize(tmrt_context *ctx, int64_t in, int64_t codes,
                   int64_t absmax, int64_t n, int64_t block,
                   int64_t is_signed) {
  block = effectiveBlock(block, n);
  const trainmem::DynamicMap &map = is_signed ? trainmem::signedDynamicMap()
                                              : trainmem::unsignedDynamicMap();
  int64_t blocks = (n + block - 1) / block;
  const float *x = ctx->at<float>(in);
  uint8_t *c = ctx->at<uint8_t>(codes);
  float *a = ctx->at<float>(absmax);
  ctx->pool.parallelFor(blocks, std::max<int64_t>(1, kGrain / block),
                        [&](int64_t b0, int64_t b1) {
                          tmrt::quantizeBlocks(map, x, n, block, c, a, b0, b1);
                        });
  ctx->touch(codes, n);
  ctx->touch(absmax, blocks * 4);
}

void dequantize(tmrt_context *ctx, int64_t codes, int64_t absmax,
                     int64_t out, int64_t n, int64_t block,
                     int64_t is_signed) {
  block = effectiveBlock(block, n);
  const trainmem::DynamicMap &map = is_signed ? trainmem::signedDynamicMap()
                                              : trainmem::unsignedDynamicMap();
  const uint8_t *c = ctx->at<uint8_t>(codes);
  const float *a = ctx->at<float>(absmax);
  float *y = ctx->at<float>(out);
  ctx->pool.parallelFor(n, kGrain, [&](int64_t begin, int64_t end) {
    tmrt::dequantizeRange(map, c, a, block, y, begin, end);
  });
  ctx->touch(out, n * 4);
}

/// Where one state of a fused 8-bit update is: its codes and absmax, and
/// where their new values go (the same places: in place).
struct QuantizedStateRefs {
  int64_t codes, absmax, newCodes, newAbsmax;
};

/// A fused 8-bit update over Step's states (Step::kStateKinds, `states` in
/// that order): per block, each element's states dequantized on their maps,
/// step.applyStates, the written states requantized block by block (never
/// the whole tensor in f32); a state the update only reads is carried over
/// to its new place. A gradient that is not finite leaves the parameter
/// and every state as they are. Every 8-bit optimizer runs through it (and
/// AdamW where the CPU has no vector code for it: adamW8bitBlocks).
template <typename Step>
void blockwise8bit(tmrt_context *ctx, int64_t param, int64_t grad,
                   const QuantizedStateRefs (&states)[Step::kStates],
                   int64_t new_param, int64_t n, int64_t block,
                   const Step &step) {
  constexpr int kStates = Step::kStates;
  block = effectiveBlock(block, n);
  // A 16-bit gradient is widened once into host memory.
  std::vector<float> wideGrad;
  const float *p = ctx->at<float>(param), *g = widened(ctx, grad, n, wideGrad);
  float *np = ctx->at<float>(new_param);
  int64_t blocks = (n + block - 1) / block;
  const trainmem::DynamicMap *maps[kStates];
  const uint8_t *codes[kStates];
  const float *absmax[kStates];
  uint8_t *newCodes[kStates];
  float *newAbsmax[kStates];
  for (int k = 0; k < kStates; ++k) {
    maps[k] = Step::kStateKinds[k].isSigned ? &trainmem::signedDynamicMap()
                                            : &trainmem::unsignedDynamicMap();
    codes[k] = ctx->at<uint8_t>(states[k].codes);
    absmax[k] = ctx->at<float>(states[k].absmax);
    newCodes[k] = ctx->at<uint8_t>(states[k].newCodes);
    newAbsmax[k] = ctx->at<float>(states[k].newAbsmax);
  }
  bool finite = allFinite(ctx, g, n);
  for (int k = 0; k < kStates; ++k)
    if (!finite || !Step::kStateKinds[k].written) {
      std::memmove(newCodes[k], codes[k], n);
      std::memmove(newAbsmax[k], absmax[k], blocks * 4);
    }
  if (finite) {
    ctx->pool.parallelFor(
        blocks, std::max<int64_t>(1, kGrain / block),
        [&](int64_t b0, int64_t b1) {
          std::vector<float> fresh(kStates * block);
          for (int64_t b = b0; b < b1; ++b) {
            int64_t begin = b * block, end = std::min(n, begin + block);
            for (int64_t i = begin; i < end; ++i) {
              float old[kStates], updated[kStates] = {};
              for (int k = 0; k < kStates; ++k)
                old[k] = trainmem::dequantizeValue(*maps[k], codes[k][i],
                                                   absmax[k][b]);
              step.applyStates(p[i], g[i], old, np[i], updated);
              for (int k = 0; k < kStates; ++k)
                fresh[k * block + (i - begin)] = updated[k];
            }
            for (int k = 0; k < kStates; ++k)
              if (Step::kStateKinds[k].written)
                tmrt::quantizeBlocks(*maps[k], fresh.data() + k * block,
                                     end - begin, block, newCodes[k] + begin,
                                     newAbsmax[k] + b, 0, 1);
          }
        });
  } else {
    std::memmove(np, p, n * 4);
    ctx->recordSkipped(param);
  }
  ctx->touch(new_param, n * 4);
  for (const QuantizedStateRefs &state : states) {
    ctx->touch(state.newCodes, n);
    ctx->touch(state.newAbsmax, blocks * 4);
  }
}

/// AdamW on the vector code where the CPU has it (Quantized.h), else on
/// the block loop every 8-bit update shares.
void adamw_8bit(tmrt_context *ctx, int64_t param, int64_t grad,
                     int64_t m_codes, int64_t m_absmax, int64_t v_codes,
                     int64_t v_absmax, int64_t lr, int64_t step,
                     int64_t new_param, int64_t new_m_codes,
                     int64_t new_m_absmax, int64_t new_v_codes,
                     int64_t new_v_absmax, int64_t n, int64_t block,
                     double beta1, double beta2, double eps,
                     double weight_decay) {
  const trainmem::AdamWStep update(*ctx->at<float>(lr), beta1, beta2, eps,
                                   weight_decay, *ctx->at<int64_t>(step));
  if (!tmrt::hasVectorAdamW8bit())
    return blockwise8bit(ctx, param, grad,
                         {{m_codes, m_absmax, new_m_codes, new_m_absmax},
                          {v_codes, v_absmax, new_v_codes, new_v_absmax}},
                         new_param, n, block, update);
  block = effectiveBlock(block, n);
  // A 16-bit gradient is widened once into host memory for the vector code.
  std::vector<float> wideGrad;
  const float *p = ctx->at<float>(param),
              *g = widened(ctx, grad, n, wideGrad);
  const uint8_t *mc = ctx->at<uint8_t>(m_codes), *vc = ctx->at<uint8_t>(v_codes);
  const float *ma = ctx->at<float>(m_absmax), *va = ctx->at<float>(v_absmax);
  float *np = ctx->at<float>(new_param);
  uint8_t *nmc = ctx->at<uint8_t>(new_m_codes),
          *nvc = ctx->at<uint8_t>(new_v_codes);
  float *nma = ctx->at<float>(new_m_absmax),
        *nva = ctx->at<float>(new_v_absmax);
  int64_t blocks = (n + block - 1) / block;
  if (allFinite(ctx, g, n)) {
    const trainmem::DynamicMap &mMap = trainmem::signedDynamicMap();
    const trainmem::DynamicMap &vMap = trainmem::unsignedDynamicMap();
    // One block of state in f32 at a time, never the whole tensor.
    tmrt::AdamW8bitBlock work{p,   g,   mc,  ma, vc,      va,    np,    nmc,
                              nma, nvc, nva, n,  block, &update, &mMap, &vMap};
    ctx->pool.parallelFor(blocks, std::max<int64_t>(1, kGrain / block),
                          [&](int64_t b0, int64_t b1) {
                            tmrt::adamW8bitBlocks(work, b0, b1);
                          });
  } else {
    // Skip this tensor's step: carry everything over unchanged.
    std::memmove(np, p, n * 4);
    std::memmove(nmc, mc, n);
    std::memmove(nvc, vc, n);
    std::memmove(nma, ma, blocks * 4);
    std::memmove(nva, va, blocks * 4);
    ctx->recordSkipped(param);
  }
  ctx->touch(new_param, n * 4);
  ctx->touch(new_m_codes, n);
  ctx->touch(new_v_codes, n);
  ctx->touch(new_m_absmax, blocks * 4);
  ctx->touch(new_v_absmax, blocks * 4);
}

void sgd_8bit(tmrt_context *ctx, int64_t param, int64_t grad, int64_t codes,
              int64_t absmax, int64_t lr, int64_t new_param, int64_t new_codes,
              int64_t new_absmax, int64_t n, int64_t block, double momentum,
              double weight_decay, int64_t nesterov) {
  blockwise8bit(ctx, param, grad, {{codes, absmax, new_codes, new_absmax}},
                new_param, n, block,
                trainmem::SGDMomentumStep{*ctx->at<float>(lr), momentum,
                                          weight_decay, nesterov != 0});
}

template <typename T>
void sgdOf(tmrt_context *ctx, int64_t param, int64_t grad, int64_t lr,
              int64_t buffer, int64_t new_param, int64_t new_buffer,
              int64_t n, double momentum, double weight_decay,
              int64_t nesterov) {
  const float *p = ctx->at<float>(param);
  const T *g = ctx->at<T>(grad);
  const float *b = buffer >= 0 ? ctx->at<float>(buffer) : nullptr;
  float *np = ctx->at<float>(new_param);
  float *nb = buffer >= 0 ? ctx->at<float>(new_buffer) : nullptr;
  if (!allFiniteOf(ctx, g, n)) {
    std::memmove(np, p, n * 4);
    if (nb)
      std::memmove(nb, b, n * 4);
    ctx->recordSkipped(param);
    ctx->touch(new_param, n * 4);
    if (nb)
      ctx->touch(new_buffer, n * 4);
    return;
  }
  double rate = *ctx->at<float>(lr);
  trainmem::SGDMomentumStep update{rate, momentum, weight_decay,
                                   nesterov != 0};
  elementwise(ctx, n, [&](int64_t i) {
    if (b)
      update.apply(p[i], g[i], b[i], np[i], nb[i]);
    else
      np[i] = static_cast<float>(p[i] - rate * (g[i] + weight_decay * p[i]));
  });
  ctx->touch(new_param, n * 4);
  if (nb)
    ctx->touch(new_buffer, n * 4);
}

/// An optimizer of Optimizers.def on f32 state: `update.apply(p, g, m,
/// newParam, newM)` per element, or the parameter and the state carried
/// over when a gradient is not finite.
template <typename T, typename Step>
void oneStateOf(tmrt_context *ctx, int64_t param, int64_t grad, int64_t m,
                int64_t new_param, int64_t new_m, int64_t n,
                const Step &update) {
  const float *p = ctx->at<float>(param), *mv = ctx->at<float>(m);
  const T *g = ctx->at<T>(grad);
  float *np = ctx->at<float>(new_param), *nm = ctx->at<float>(new_m);
  if (!allFiniteOf(ctx, g, n)) {
    std::memmove(np, p, n * 4);
    std::memmove(nm, mv, n * 4);
    ctx->recordSkipped(param);
  } else {
    elementwise(ctx, n, [&](int64_t i) {
      update.apply(p[i], g[i], mv[i], np[i], nm[i]);
    });
  }
  ctx->touch(new_param, n * 4);
  ctx->touch(new_m, n * 4);
}

#define TMRT_ONE_STATE_OPTIMIZER(kernel, Name, Step, parameters, arguments)    \
  void kernel(tmrt_context *ctx, int64_t param, int64_t grad, int64_t m,       \
              int64_t lr, int64_t new_param, int64_t new_m, int64_t n,         \
              TMRT_UNPAREN(parameters)) {                                      \
    const trainmem::Step update(*ctx->at<float>(lr), TMRT_UNPAREN(arguments)); \
    withFloatType(ctx, #kernel, {grad}, [&](auto type) {                       \
      oneStateOf<decltype(type)>(ctx, param, grad, m, new_param, new_m, n,     \
                                 update);                                      \
    });                                                                        \
  }                                                                            \
  void kernel##_8bit(tmrt_context *ctx, int64_t param, int64_t grad,           \
                     int64_t m_codes, int64_t m_absmax, int64_t lr,            \
                     int64_t new_param, int64_t new_m_codes,                   \
                     int64_t new_m_absmax, int64_t n, int64_t block,           \
                     TMRT_UNPAREN(parameters)) {                               \
    blockwise8bit(                                                             \
        ctx, param, grad, {{m_codes, m_absmax, new_m_codes, new_m_absmax}},    \
        new_param, n, block,                                                   \
        trainmem::Step(*ctx->at<float>(lr), TMRT_UNPAREN(arguments)));         \
  }
#include "trainmem-runtime/Optimizers.def"

template <typename T>
void sophiaOf(tmrt_context *ctx, int64_t param, int64_t grad, int64_t m,
              int64_t h, int64_t lr, int64_t new_param, int64_t new_m,
              int64_t new_h, int64_t n, int64_t batch, double beta1, double rho,
              double eps, double weight_decay) {
  const float *p = ctx->at<float>(param), *mv = ctx->at<float>(m),
              *hv = ctx->at<float>(h);
  const T *g = ctx->at<T>(grad);
  float *np = ctx->at<float>(new_param), *nm = ctx->at<float>(new_m);
  if (new_h != h)
    std::memmove(ctx->at<float>(new_h), hv, n * 4);
  if (!allFiniteOf(ctx, g, n)) {
    std::memmove(np, p, n * 4);
    std::memmove(nm, mv, n * 4);
    ctx->recordSkipped(param);
  } else {
    const trainmem::SophiaStep update(*ctx->at<float>(lr), beta1, rho, batch,
                                      eps, weight_decay);
    elementwise(ctx, n, [&](int64_t i) {
      update.apply(p[i], g[i], mv[i], hv[i], np[i], nm[i]);
    });
  }
  ctx->touch(new_param, n * 4);
  ctx->touch(new_m, n * 4);
  ctx->touch(new_h, n * 4);
}

void sophia_8bit(tmrt_context *ctx, int64_t param, int64_t grad,
                 int64_t m_codes, int64_t m_absmax, int64_t h_codes,
                 int64_t h_absmax, int64_t lr, int64_t new_param,
                 int64_t new_m_codes, int64_t new_m_absmax, int64_t new_h_codes,
                 int64_t new_h_absmax, int64_t n, int64_t block, int64_t batch,
                 double beta1, double rho, double eps, double weight_decay) {
  blockwise8bit(ctx, param, grad,
                {{m_codes, m_absmax, new_m_codes, new_m_absmax},
                 {h_codes, h_absmax, new_h_codes, new_h_absmax}},
                new_param, n, block,
                trainmem::SophiaStep(*ctx->at<float>(lr), beta1, rho, batch,
                                     eps, weight_decay));
}

void hessian_ema(tmrt_context *ctx, int64_t h, int64_t grad, int64_t new_h,
                 int64_t n, double beta2) {
  withFloatType(ctx, "hessian_ema", {grad}, [&](auto type) {
    using T = decltype(type);
    const float *hv = ctx->at<float>(h);
    const T *g = ctx->at<T>(grad);
    float *nh = ctx->at<float>(new_h);
    if (!allFiniteOf(ctx, g, n)) {
      std::memmove(nh, hv, n * 4);
      ctx->recordSkipped(h);
    } else {
      const trainmem::HessianEMAStep update(beta2);
      elementwise(ctx, n,
                  [&](int64_t i) { nh[i] = update.apply(hv[i], g[i]); });
    }
  });
  ctx->touch(new_h, n * 4);
}

void sample(tmrt_context *ctx, int64_t logits, int64_t key, int64_t labels,
            int64_t rows, int64_t classes, int64_t seed, int64_t offset,
            int64_t id_bits) {
  uint64_t stream = static_cast<uint64_t>(seed);
  if (key >= 0)
    stream += static_cast<uint64_t>(*ctx->at<int64_t>(key));
  withFloatType(ctx, "sample", {logits}, [&](auto type) {
    using T = decltype(type);
    const T *x = ctx->at<T>(logits);
    ctx->pool.parallelFor(rows, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T *row = x + r * classes;
        int64_t label = trainmem::sampleClass(
            [&](int64_t j) { return static_cast<float>(row[j]); }, classes,
            trainmem::philoxWord(stream, static_cast<uint64_t>(offset),
                                 static_cast<uint64_t>(r)));
        if (id_bits == 32)
          ctx->at<int32_t>(labels)[r] = static_cast<int32_t>(label);
        else
          ctx->at<int64_t>(labels)[r] = label;
      }
    });
  });
  ctx->touch(labels, rows * id_bits / 8);
}

void clip_begin(tmrt_context *ctx) {
  trainmem::ExactSquareSum(ctx->clipSum).clear();
}

void clip_accumulate(tmrt_context *ctx, int64_t grad, int64_t n) {
  withFloatType(ctx, "clip_accumulate", {grad}, [&](auto type) {
    using T = decltype(type);
    const T *g = ctx->at<T>(grad);
    // Chunks summed apart and merged: exact sums, so the bits do not
    // depend on the chunks or the threads.
    std::mutex merging;
    ctx->pool.parallelFor(n, 1 << 15, [&](int64_t begin, int64_t end) {
      int64_t words[trainmem::kExactSumWords] = {};
      trainmem::ExactSquareSum(words).addSquares(g + begin, end - begin);
      std::lock_guard<std::mutex> lock(merging);
      trainmem::ExactSquareSum(ctx->clipSum).merge(words);
    });
  });
}

void clip_store_sum(tmrt_context *ctx, int64_t out) {
  std::memcpy(ctx->at<int64_t>(out), ctx->clipSum, sizeof ctx->clipSum);
  ctx->touch(out, sizeof ctx->clipSum);
}

void clip_load_sum(tmrt_context *ctx, int64_t sum) {
  std::memcpy(ctx->clipSum, ctx->at<int64_t>(sum), sizeof ctx->clipSum);
}

void clip_merge_sum(tmrt_context *ctx, int64_t sum) {
  trainmem::ExactSquareSum(ctx->clipSum).merge(ctx->at<int64_t>(sum));
}

void clip_finish(tmrt_context *ctx, int64_t norm, double max_norm) {
  double value = std::sqrt(trainmem::ExactSquareSum(ctx->clipSum).value());
  ctx->clipScale = std::min(1.0, max_norm / (value + 1e-6));
  *ctx->at<float>(norm) = static_cast<float>(value);
  ctx->touch(norm, 4);
}

template <typename T>
void clip_applyOf(tmrt_context *ctx, int64_t grad, int64_t out,
                     int64_t n) {
  const T *g = ctx->at<T>(grad);
  T *y = ctx->at<T>(out);
  double scale = ctx->clipScale;
  elementwise(ctx, n, [&](int64_t i) {
    y[i] = static_cast<float>(g[i] * scale);
  });
  ctx->touch(out, n * sizeof(T));
}

// The entry points of the float kernels above (FloatTypes.h): each
// dispatches on the element type its operands share.
#define TMRT_FLOAT_fill (out)
#define TMRT_FLOAT_copy (in, out)
#define TMRT_FLOAT_copy_strided (in, out)
#define TMRT_FLOAT_matmul (a, b, c)
#define TMRT_FLOAT_add (a, b, out)
#define TMRT_FLOAT_mul (a, b, out)
#define TMRT_FLOAT_scale (in, out)
#define TMRT_FLOAT_bias_add (in, bias, out)
#define TMRT_FLOAT_bias_gelu (in, bias, out)
#define TMRT_FLOAT_bias_gelu_grad (dy, x, bias, out)
#define TMRT_FLOAT_layer_norm (in, gamma, beta, out)
#define TMRT_FLOAT_layer_norm_grad (dy, x, gamma, dx, dgamma, dbeta)
#define TMRT_FLOAT_rms_norm (in, gamma, out)
#define TMRT_FLOAT_rms_norm_grad (dy, x, gamma, dx, dgamma)
#define TMRT_FLOAT_softmax (in, out)
#define TMRT_FLOAT_softmax_grad (dy, y, out)
#define TMRT_FLOAT_dropout (in, out)
#define TMRT_FLOAT_dropout_grad (dy, out)
#define TMRT_FLOAT_rope (in, out)
#define TMRT_FLOAT_sum_to (in, out)
#define TMRT_FLOAT_cross_entropy (logits)
#define TMRT_FLOAT_cross_entropy_grad (logits, out)
#define TMRT_FLOAT_row_max (in)
#define TMRT_FLOAT_adamw (grad)
#define TMRT_FLOAT_sgd (grad)
#define TMRT_FLOAT_sophia (grad)
#define TMRT_FLOAT_clip_apply (grad, out)
#define TMRT_KERNEL(name, parameters, arguments)                               \
  TMRT_FLOAT_ENTRY(name, parameters, arguments)
#include "trainmem-runtime/Kernels.def"

/// The scale of the step's loss, from its state (in double).
double lossScaleOf(tmrt_context *ctx, int64_t state, double initial) {
  return trainmem::lossScale(initial, ctx->at<int64_t>(state)[0]);
}

void loss_scale(tmrt_context *ctx, int64_t state, int64_t out,
                double initial) {
  *ctx->at<float>(out) = static_cast<float>(lossScaleOf(ctx, state, initial));
  ctx->touch(out, 4);
}

void finite_begin(tmrt_context *ctx) { ctx->gradientsFinite = true; }

void finite_check(tmrt_context *ctx, int64_t grad, int64_t n) {
  withFloatType(ctx, "finite_check", {grad}, [&](auto type) {
    using T = decltype(type);
    if (!allFiniteOf(ctx, ctx->at<T>(grad), n))
      ctx->gradientsFinite = false;
  });
}

void finite_check_sum(tmrt_context *ctx, int64_t sum) {
  int64_t words[trainmem::kExactSumWords];
  std::memcpy(words, ctx->at<int64_t>(sum), sizeof words);
  if (!trainmem::ExactSquareSum(words).isFinite())
    ctx->gradientsFinite = false;
}

void unscale(tmrt_context *ctx, int64_t grad, int64_t out, int64_t n,
             int64_t state, double initial) {
  double inverse = 1.0 / lossScaleOf(ctx, state, initial);
  bool finite = ctx->gradientsFinite;
  float *y = ctx->at<float>(out);
  withFloatType(ctx, "unscale", {grad}, [&](auto type) {
    using T = decltype(type);
    const T *g = ctx->at<T>(grad);
    elementwise(ctx, n, [&](int64_t i) {
      y[i] = finite ? static_cast<float>(static_cast<double>(g[i]) * inverse)
                    : std::numeric_limits<float>::quiet_NaN();
    });
  });
  ctx->touch(out, n * 4);
}

void loss_scale_update(tmrt_context *ctx, int64_t state, int64_t new_state,
                       int64_t growth_interval) {
  int64_t updated[3];
  std::copy_n(ctx->at<int64_t>(state), 3, updated);
  trainmem::advanceLossScale(updated, ctx->gradientsFinite, growth_interval);
  std::copy_n(updated, 3, ctx->at<int64_t>(new_state));
  ctx->touch(new_state, 24);
}

void lr_schedule(tmrt_context *ctx, int64_t step, int64_t out,
                      double peak_lr, double min_lr, int64_t warmup_steps,
                      int64_t total_steps) {
  *ctx->at<float>(out) = static_cast<float>(trainmem::scheduledLearningRate(
      peak_lr, min_lr, warmup_steps, total_steps, *ctx->at<int64_t>(step)));
  ctx->touch(out, 4);
}

// Collectives: rings over the context's communicator (Collectives.cpp).
using tmrt::cpu::all_gather;
using tmrt::cpu::all_reduce;
using tmrt::cpu::all_reduce_i64;
using tmrt::cpu::all_slice;
using tmrt::cpu::barrier;
using tmrt::cpu::broadcast;
using tmrt::cpu::reduce_scatter;

} // namespace

//===----------------------------------------------------------------------===//
// The table
//===----------------------------------------------------------------------===//

static void *allocArena(tmrt_context *, uint64_t bytes) {
  // 64-byte aligned, as the plan's offsets are.
  uint64_t rounded = (bytes + 63) & ~uint64_t(63);
  void *memory = nullptr;
  if (rounded == 0 || posix_memalign(&memory, 64, rounded) != 0)
    return nullptr;
  return memory;
}

static void freeArena(tmrt_context *, void *arena) { std::free(arena); }

static void writeArena(tmrt_context *ctx, uint64_t offset, const void *source,
                       uint64_t bytes) {
  std::memcpy(ctx->arena + offset, source, bytes);
}

static void readArena(tmrt_context *ctx, uint64_t offset, void *destination,
                      uint64_t bytes) {
  std::memcpy(destination, ctx->arena + offset, bytes);
}

static void copyArena(tmrt_context *ctx, uint64_t from, uint64_t to,
                      uint64_t bytes) {
  std::memmove(ctx->arena + to, ctx->arena + from, bytes);
}

const tmrt::Backend &tmrt::cpuBackend() {
  static const Backend backend = {
      "cpu",      /*hostArena=*/true, allocArena, freeArena,
      writeArena, readArena,          copyArena,
#define TMRT_KERNEL(name, parameters, arguments) name,
#include "trainmem-runtime/Kernels.def"
      /*open=*/nullptr, /*close=*/nullptr, /*synchronize=*/nullptr,
  };
  return backend;
}
