//===- ThreadCountTest.cpp - kernels give the same bits on any threads ----===//
//
// The kernels whose work is split over threads (GEMMs, the column sums of
// the norm gradients) run on contexts of 1 to 4 threads, and every result
// must equal the one-thread result bit for bit. The shapes are those for
// which OpenBLAS's own threading gave other bits per thread count on an AVX2
// CPU; test/Runtime/thread-count.test runs this again with OpenBLAS's
// Haswell kernels and the runtime's scalar paths.
//
//===----------------------------------------------------------------------===//

#include "trainmem-runtime/Runtime.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace {

struct Context {
  /// A context with an arena of `bytes` bytes of zeros; on failure a test
  /// failure and ok() false (the callers then return no result).
  explicit Context(int threads, uint64_t bytes) {
    const char *error = nullptr;
    ctx = tmrt_context_create("cpu", threads, &error);
    if (!ctx) {
      ADD_FAILURE() << "no context: " << (error ? error : "");
      return;
    }
    if (tmrt_arena_alloc(ctx, bytes) != 0) {
      ADD_FAILURE() << "no arena of " << bytes << " B";
      tmrt_context_destroy(ctx);
      ctx = nullptr;
      return;
    }
    std::memset(tmrt_arena_base(ctx), 0, bytes);
  }
  bool ok() const { return ctx != nullptr; }
  ~Context() { tmrt_context_destroy(ctx); }
  float *at(int64_t offset) {
    return reinterpret_cast<float *>(tmrt_arena_base(ctx) + offset);
  }
  tmrt_context *ctx = nullptr;
};

std::vector<float> randomValues(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(n);
  for (float &v : values)
    v = uniform(rng);
  return values;
}

struct GemmShape {
  int64_t batch, m, n, k;
  bool transposeB;
};

class GemmThreadsTest : public ::testing::TestWithParam<GemmShape> {};

/// C = A · B (or A · Bᵀ) on `threads` threads; returns C.
std::vector<float> gemm(const GemmShape &s, int threads) {
  int64_t aElems = s.batch * s.m * s.k, bElems = s.batch * s.k * s.n,
          cElems = s.batch * s.m * s.n;
  int64_t a = 0, b = aElems * 4, c = b + bElems * 4;
  Context context(threads, static_cast<uint64_t>(c + cElems * 4));
  if (!context.ok())
    return {};
  std::vector<float> av = randomValues(aElems, 1), bv = randomValues(bElems, 2);
  std::memcpy(context.at(a), av.data(), aElems * 4);
  std::memcpy(context.at(b), bv.data(), bElems * 4);
  // B is [k, n] row-major, or [n, k] read transposed.
  int64_t bRs = s.transposeB ? 1 : s.n, bCs = s.transposeB ? s.k : 1;
  tmrt_matmul(context.ctx, a, b, c, s.m, s.n, s.k, s.k, 1, bRs, bCs, s.batch,
              1, 1, 1, s.m * s.k, 0, 0, 0, s.k * s.n, 0, 0, 0);
  EXPECT_EQ(tmrt_context_error(context.ctx), nullptr);
  return std::vector<float>(context.at(c), context.at(c) + cElems);
}

TEST_P(GemmThreadsTest, SameBitsOnOneToFourThreads) {
  std::vector<float> one = gemm(GetParam(), 1);
  ASSERT_FALSE(one.empty());
  for (int threads = 2; threads <= 4; ++threads) {
    std::vector<float> many = gemm(GetParam(), threads);
    ASSERT_EQ(one.size(), many.size());
    EXPECT_EQ(std::memcmp(one.data(), many.data(), one.size() * 4), 0)
        << threads << " threads give other bits than one";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemmThreadsTest,
    ::testing::Values(GemmShape{1, 48, 48, 48, false},
                      GemmShape{1, 256, 192, 64, false},
                      GemmShape{1, 512, 768, 768, false},
                      GemmShape{1, 512, 3072, 768, true},
                      GemmShape{1, 512, 768, 3072, false},
                      GemmShape{8, 128, 128, 64, true},
                      GemmShape{3, 200, 130, 70, false}));

/// The norm gradients' parameter gradients are column sums over rows.
TEST(NormGradThreadsTest, SameBitsOnOneToFourThreads) {
  const int64_t rows = 1000, cols = 96;
  auto run = [&](int threads, bool rms) {
    int64_t n = rows * cols;
    int64_t dy = 0, x = n * 4, gamma = 2 * n * 4, dx = gamma + cols * 4,
            dgamma = dx + n * 4, dbeta = dgamma + cols * 4;
    Context context(threads, static_cast<uint64_t>(dbeta + cols * 4));
    if (!context.ok())
      return std::vector<float>();
    std::vector<float> dyv = randomValues(n, 3), xv = randomValues(n, 4),
                       gv = randomValues(cols, 5);
    std::memcpy(context.at(dy), dyv.data(), n * 4);
    std::memcpy(context.at(x), xv.data(), n * 4);
    std::memcpy(context.at(gamma), gv.data(), cols * 4);
    if (rms)
      tmrt_rms_norm_grad(context.ctx, dy, x, gamma, dx, dgamma, rows, cols,
                         1e-5, 0.0);
    else
      tmrt_layer_norm_grad(context.ctx, dy, x, gamma, dx, dgamma, dbeta, rows,
                           cols, 1e-5);
    return std::vector<float>(context.at(dx), context.at(dbeta) + cols);
  };
  for (bool rms : {false, true}) {
    std::vector<float> one = run(1, rms);
    ASSERT_FALSE(one.empty());
    for (int threads = 2; threads <= 4; ++threads) {
      std::vector<float> other = run(threads, rms);
      ASSERT_EQ(other.size(), one.size());
      EXPECT_EQ(std::memcmp(one.data(), other.data(), one.size() * 4), 0)
          << (rms ? "rms" : "layer") << " norm grad on " << threads
          << " threads";
    }
  }
}

TEST(ContextTest, RefusesThreadCountsOutOfRange) {
  for (int64_t threads : {int64_t(0), int64_t(-3), int64_t(100000),
                          int64_t(1) << 40}) {
    const char *error = nullptr;
    EXPECT_EQ(tmrt_context_create("cpu", threads, &error), nullptr);
    ASSERT_NE(error, nullptr);
    EXPECT_NE(std::strstr(error, "thread count"), nullptr) << error;
  }
}

} // namespace
