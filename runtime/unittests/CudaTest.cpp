//===- CudaTest.cpp - the CUDA backend against the CPU backend ------------===//
//
// Host side (runs wherever the runtime is built with CUDA): the "cuda"
// table fills every kernel of Kernels.def and its hooks, and a context on
// a machine without a GPU is refused with a message that says so.
//
// Device side (skipped, with the reason, where no GPU answers): each kernel
// the backend has so far runs on a CUDA context and on a CPU context with
// the same inputs, in f32, bf16 and f16, and must give the same bytes (the
// per-element math is the same functions, built with -fmad=false) or, where
// the two sum in other orders (GEMMs, attention) or call libm's functions,
// agree within a stated tolerance; the arena's copies round-trip.
//
//===----------------------------------------------------------------------===//

#include "trainmem-runtime/Runtime.h"
#include "trainmem/Support/Float16.h"

#include "../lib/Backend.h"
#include "../lib/Context.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

struct ContextDeleter {
  void operator()(tmrt_context *ctx) const { tmrt_context_destroy(ctx); }
};
using ContextPtr = std::unique_ptr<tmrt_context, ContextDeleter>;

bool cudaBuilt() {
  return std::string(tmrt_backend_names()).find("cuda") != std::string::npos;
}

/// A CUDA context, or null with the reason in `why`.
ContextPtr cudaContext(std::string &why) {
  const char *error = nullptr;
  ContextPtr ctx(tmrt_context_create("cuda", 1, &error));
  if (!ctx)
    why = error ? error : "no reason given";
  return ctx;
}

#ifdef TMRT_HAVE_CUDA
TEST(Cuda, TheTableIsComplete) {
  const tmrt::Backend &table = tmrt::cudaBackend();
  EXPECT_STREQ(table.name, "cuda");
  EXPECT_FALSE(table.hostArena);
  EXPECT_NE(table.open, nullptr);
  EXPECT_NE(table.close, nullptr);
  EXPECT_NE(table.allocArena, nullptr);
  EXPECT_NE(table.readArena, nullptr);
  EXPECT_NE(table.pinHost, nullptr);
  EXPECT_NE(table.unpinHost, nullptr);
#define TMRT_KERNEL(name, parameters, arguments)                               \
  EXPECT_NE(table.name, nullptr) << #name;
#include "trainmem-runtime/Kernels.def"
}

// cuBLAS and NCCL are loaded at run time (dlopen): both load here and have
// every call the backend makes (a misspelt symbol would otherwise surface
// only on a GPU).
TEST(Cuda, ItsLibrariesLoadWithTheirCalls) {
  std::string report;
  EXPECT_TRUE(tmrt::cudaLibrariesLoad(report)) << report;
}
#endif

TEST(Cuda, NoDeviceIsAClearError) {
  if (!cudaBuilt())
    GTEST_SKIP() << "the runtime is built without CUDA";
  std::string why;
  ContextPtr ctx = cudaContext(why);
  if (ctx)
    GTEST_SKIP() << "a CUDA device answers here";
  EXPECT_EQ(why.rfind("cuda: ", 0), 0u) << why;
  EXPECT_NE(why.find("device"), std::string::npos) << why;
}

/// Runs `kernel` on `ctx` over an arena holding `input`, returns the arena.
std::vector<uint8_t> runOn(tmrt_context *ctx, const std::vector<uint8_t> &input,
                           const std::function<void(tmrt_context *)> &kernel) {
  EXPECT_EQ(tmrt_arena_alloc(ctx, input.size()), 0);
  EXPECT_EQ(tmrt_arena_write(ctx, 0, input.data(), input.size()), 0);
  kernel(ctx);
  std::vector<uint8_t> output(input.size());
  EXPECT_EQ(tmrt_arena_read(ctx, 0, output.data(), output.size()), 0);
  const char *error = tmrt_context_error(ctx);
  EXPECT_EQ(error, nullptr) << error;
  return output;
}

/// The `n` f32 values at byte `offset` of two arenas agree within 1e-6
/// relative (plus `absolute`): kernels whose libm calls (exp, cos, ...)
/// CUDA computes within an ulp of the host's.
void expectNearF32(const std::vector<uint8_t> &a, const std::vector<uint8_t> &b,
                   int64_t offset, int64_t n, double absolute) {
  for (int64_t i = 0; i < n; ++i) {
    float fa, fb;
    std::memcpy(&fa, a.data() + offset + i * 4, 4);
    std::memcpy(&fb, b.data() + offset + i * 4, 4);
    EXPECT_NEAR(fa, fb, 1e-6 * std::abs(fb) + absolute) << i;
  }
}

TEST(Cuda, ElementwiseKernelsGiveTheCpuBits) {
  std::string why;
  ContextPtr probe = cudaContext(why);
  if (!probe)
    GTEST_SKIP() << why;
  // Six tensors of n elements of one type at offsets 0 to 5 × slot: x, dy,
  // the result, the bias or gamma (its first `cols`), beta, and the
  // parameter gradients (gamma's at 0, beta's at cols).
  const int64_t n = 3 * 1000 + 7, cols = 37;
  for (int64_t dtype : {TMRT_DTYPE_F32, TMRT_DTYPE_BF16, TMRT_DTYPE_F16}) {
    int64_t size = dtype == TMRT_DTYPE_F32 ? 4 : 2;
    int64_t slot = ((n * size + 63) / 64) * 64;
    std::vector<uint8_t> input(6 * slot);
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (int64_t t = 0; t < 6; ++t)
      for (int64_t i = 0; i < n; ++i) {
        float v = normal(rng);
        uint8_t *at = input.data() + t * slot + i * size;
        if (dtype == TMRT_DTYPE_F32) {
          std::memcpy(at, &v, 4);
        } else {
          uint16_t bits = dtype == TMRT_DTYPE_BF16
                              ? trainmem::bf16BitsFromFloat(v)
                              : trainmem::f16BitsFromFloat(v);
          std::memcpy(at, &bits, 2);
        }
      }
    auto ref = [&](int64_t t) { return tmrt_tensor_ref(t * slot, dtype); };
    std::vector<std::pair<const char *, std::function<void(tmrt_context *)>>>
        kernels = {
            {"fill", [&](tmrt_context *c) { tmrt_fill(c, ref(2), n, 0.1); }},
            {"add",
             [&](tmrt_context *c) { tmrt_add(c, ref(0), ref(1), ref(2), n); }},
            {"mul",
             [&](tmrt_context *c) { tmrt_mul(c, ref(0), ref(1), ref(2), n); }},
            {"scale",
             [&](tmrt_context *c) { tmrt_scale(c, ref(0), ref(2), n, 0.3); }},
            {"bias_add",
             [&](tmrt_context *c) {
               tmrt_bias_add(c, ref(0), ref(3), ref(2), n - n % cols, cols);
             }},
            {"bias_gelu",
             [&](tmrt_context *c) {
               tmrt_bias_gelu(c, ref(0), ref(3), ref(2), n - n % cols, cols);
             }},
            {"bias_gelu_grad",
             [&](tmrt_context *c) {
               tmrt_bias_gelu_grad(c, ref(1), ref(0), ref(3), ref(2),
                                   n - n % cols, cols);
             }},
            {"copy", [&](tmrt_context *c) { tmrt_copy(c, ref(0), ref(2), n); }},
            {"layer_norm",
             [&](tmrt_context *c) {
               tmrt_layer_norm(c, ref(0), ref(3), ref(4), ref(2), n / cols,
                               cols, 1e-5);
             }},
            {"layer_norm_grad",
             [&](tmrt_context *c) {
               tmrt_layer_norm_grad(c, ref(1), ref(0), ref(3), ref(2), ref(5),
                                    tmrt_tensor_ref(5 * slot + cols * size,
                                                    dtype),
                                    n / cols, cols, 1e-5);
             }},
            {"rms_norm",
             [&](tmrt_context *c) {
               tmrt_rms_norm(c, ref(0), ref(3), ref(2), n / cols, cols, 1e-6,
                             1.0);
             }},
            {"rms_norm_grad",
             [&](tmrt_context *c) {
               tmrt_rms_norm_grad(c, ref(1), ref(0), ref(3), ref(2), ref(5),
                                  n / cols, cols, 1e-6, 1.0);
             }},
            {"softmax_grad",
             [&](tmrt_context *c) {
               tmrt_softmax_grad(c, ref(1), ref(0), ref(2), n / cols, cols);
             }},
            {"place_strided (columns of a wider row)",
             [&](tmrt_context *c) {
               // [n / cols, cols / 2] into the last half of each row.
               tmrt_fill(c, ref(2), n, 0.0);
               tmrt_place_strided(c, ref(0), ref(2) + cols / 2 * size, 1, 1, 1,
                                  1, n / cols, cols / 2, 0, 0, 0, 0, cols, 1);
             }},
            {"copy_strided (transpose)",
             [&](tmrt_context *c) {
               tmrt_copy_strided(c, ref(0), ref(2), 1, 1, 1, 1, cols, n / cols,
                                 0, 0, 0, 0, 1, cols);
             }},
            {"slice_rows (padded)",
             [&](tmrt_context *c) {
               tmrt_slice_rows(c, ref(0), ref(2), /*offset=*/70,
                               /*rows=*/20, /*available=*/n / cols, cols,
                               /*kind=*/0, /*padding=*/-3);
             }},
            {"sum_to (bias gradient)",
             [&](tmrt_context *c) {
               // [n / cols, cols] summed over rows into [cols].
               tmrt_sum_to(c, ref(0), ref(5), cols, 1, 1, 1, 1, n / cols,
                           cols, 0, 0, 0, 0, 0, 1);
             }},
        };
    // Every activation of Activations.def and its gradient.
#define TMRT_ACTIVATION_KERNEL(kernel, Name) TMRT_ACTIVATION(kernel, Name)
#define TMRT_ACTIVATION(kernel, Name)                                          \
  kernels.emplace_back(                                                        \
      #kernel, [&](tmrt_context *c) { tmrt_##kernel(c, ref(0), ref(2), n); }); \
  kernels.emplace_back(#kernel "_grad", [&](tmrt_context *c) {                 \
    tmrt_##kernel##_grad(c, ref(0), ref(1), ref(2), n);                        \
  });
#include "trainmem-runtime/Activations.def"
    for (auto &[name, kernel] : kernels) {
      SCOPED_TRACE(std::string(name) + " " + std::to_string(dtype));
      ContextPtr cpu(tmrt_context_create("cpu", 2, nullptr));
      ContextPtr gpu = cudaContext(why);
      ASSERT_NE(gpu, nullptr) << why;
      EXPECT_EQ(runOn(gpu.get(), input, kernel),
                runOn(cpu.get(), input, kernel));
    }
  }
}

// Embedding and its gradient (ids repeated, so rows sum several
// positions) give the CPU's bytes; a bad id fails the context naming it.
TEST(Cuda, EmbeddingGivesTheCpuBits) {
  std::string why;
  ContextPtr probe = cudaContext(why);
  if (!probe)
    GTEST_SKIP() << why;
  const int64_t vocab = 11, hidden = 7, num = 40;
  std::vector<uint8_t> input(4096, 0);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < vocab * hidden; ++i) {
    float v = normal(rng);
    std::memcpy(input.data() + 4 * i, &v, 4); // table at 0
  }
  for (int64_t i = 0; i < num * hidden; ++i) {
    float v = normal(rng);
    std::memcpy(input.data() + 1024 + 4 * i, &v, 4); // dy at 1024
  }
  for (int64_t i = 0; i < num; ++i) {
    int32_t id = static_cast<int32_t>((i * 7) % vocab);
    std::memcpy(input.data() + 2304 + 4 * i, &id, 4); // ids at 2304
  }
  auto forward = [&](tmrt_context *c) {
    tmrt_embedding(c, 0, 2304, 2560, num, hidden, vocab, 32, 1, 1);
  };
  auto backward = [&](tmrt_context *c) {
    tmrt_embedding_grad(c, 1024, 2304, 2560, num, hidden, vocab, 32, 1, 1);
  };
  for (auto kernel : {std::function<void(tmrt_context *)>(forward),
                      std::function<void(tmrt_context *)>(backward)}) {
    ContextPtr cpu(tmrt_context_create("cpu", 1, nullptr));
    ContextPtr gpu = cudaContext(why);
    EXPECT_EQ(runOn(gpu.get(), input, kernel), runOn(cpu.get(), input, kernel));
  }
  int32_t badId = 99;
  std::memcpy(input.data() + 2304 + 4 * 5, &badId, 4);
  ContextPtr gpu = cudaContext(why);
  ASSERT_EQ(tmrt_arena_alloc(gpu.get(), input.size()), 0);
  ASSERT_EQ(tmrt_arena_write(gpu.get(), 0, input.data(), input.size()), 0);
  forward(gpu.get());
  const char *error = tmrt_context_error(gpu.get());
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(std::string(error),
            "token id 99 at position 5 is outside the table of 11 rows");
}

// Vocabulary parallelism's pieces on one GPU: the lookup and its gradient
// of a table split in 2 (rank 0 holds rows 0-5 of 12: the other ids look
// up zeros) give the CPU's bytes; the parallel cross-entropy's row maxima,
// sums, merged loss and gradients (exp, log: CUDA's) within 1e-6 relative
// of the CPU's, an ignored target among them.
TEST(Cuda, VocabularyPartsAgreeWithTheCpu) {
  std::string why;
  ContextPtr probe = cudaContext(why);
  if (!probe)
    GTEST_SKIP() << why;
  const int64_t rows = 8, vocab = 16, hidden = 4;
  // logits at 0, targets (i32) at 1024, max at 1280, sum_exp at 1536,
  // target_logit at 1792, dloss at 2048, d_sum_exp at 2304, d_target_logit
  // at 2560, dlogits at 3072, loss at 3584, count at 3592; the table
  // (6 x 4) at 4096, the lookup at 4352.
  std::vector<uint8_t> input(8192, 0);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int64_t i = 0; i < rows * vocab; ++i) {
    float v = normal(rng);
    std::memcpy(input.data() + 4 * i, &v, 4);
  }
  for (int64_t r = 0; r < rows; ++r) {
    int32_t t = r == 3 ? -100 : static_cast<int32_t>((r * 5) % vocab);
    std::memcpy(input.data() + 1024 + 4 * r, &t, 4);
  }
  float dloss = 0.125f;
  std::memcpy(input.data() + 2048, &dloss, 4);
  for (int64_t i = 0; i < 6 * hidden; ++i) {
    float v = normal(rng);
    std::memcpy(input.data() + 4096 + 4 * i, &v, 4);
  }
  auto loss = [&](tmrt_context *c) {
    tmrt_row_max(c, 0, 1280, rows, vocab);
    tmrt_cross_entropy_part(c, 0, 1024, 1280, 1536, 1792, rows, vocab, -100, 32,
                            1, 1);
    tmrt_cross_entropy_merge(c, 1536, 1792, 1280, 1024, 3584, 3592, rows, -100,
                             32);
    tmrt_cross_entropy_merge_grad(c, 2048, 1536, 1024, 2304, 2560, rows, -100,
                                  32);
    tmrt_cross_entropy_part_grad(c, 2304, 2560, 0, 1280, 1024, 3072, rows,
                                 vocab, -100, 32, 1, 1);
  };
  ContextPtr cpu(tmrt_context_create("cpu", 1, nullptr));
  ContextPtr gpu = cudaContext(why);
  std::vector<uint8_t> want = runOn(cpu.get(), input, loss);
  std::vector<uint8_t> got = runOn(gpu.get(), input, loss);
  for (int64_t offset : {1280, 1536, 1792, 2304, 2560}) // per row
    expectNearF32(got, want, offset, rows, 1e-30);
  expectNearF32(got, want, 3072, rows * vocab, 1e-30); // dlogits
  expectNearF32(got, want, 3584, 1, 0.0);              // loss
  EXPECT_EQ(std::memcmp(got.data() + 3592, want.data() + 3592, 8), 0);
  // The split lookup: ids 0-11 of a table of 12 rows in 2 parts.
  for (int64_t i = 0; i < rows; ++i) {
    int32_t id = static_cast<int32_t>((i * 7) % 12);
    std::memcpy(input.data() + 1024 + 4 * i, &id, 4);
  }
  auto lookup = [&](tmrt_context *c) {
    tmrt_embedding(c, 4096, 1024, 4352, rows, hidden, 6, 32, 2, 1);
    tmrt_embedding_grad(c, 4352, 1024, 4608, rows, hidden, 6, 32, 2, 1);
  };
  ContextPtr cpu2(tmrt_context_create("cpu", 1, nullptr));
  ContextPtr gpu2 = cudaContext(why);
  EXPECT_EQ(runOn(gpu2.get(), input, lookup), runOn(cpu2.get(), input, lookup));
}

// Softmax sums e^x in double with CUDA's exp, which may differ from
// libm's in the last place: within 1e-6 relative of the CPU's (f32).
TEST(Cuda, SoftmaxWithinAnUlpOfTheCpu) {
  std::string why;
  ContextPtr gpu = cudaContext(why);
  if (!gpu)
    GTEST_SKIP() << why;
  const int64_t rows = 64, cols = 64, n = rows * cols;
  std::vector<float> x(n);
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (float &v : x)
    v = normal(rng);
  std::vector<uint8_t> input(2 * n * 4);
  std::memcpy(input.data(), x.data(), n * 4);
  // Rows are (head, query) of 4 heads of 16 queries with ALiBi slopes, or
  // of one head without.
  const double slopes[4] = {0.5, 0.25, 0.125, 0.0625};
  for (int64_t causal : {0, 1})
  for (const double *alibi : {static_cast<const double *>(nullptr),
                              slopes}) {
    auto kernel = [&](tmrt_context *c) {
      tmrt_softmax(c, 0, n * 4, rows, cols, /*queries=*/cols / 4, causal,
                   /*heads=*/4, alibi);
    };
    ContextPtr cpu(tmrt_context_create("cpu", 1, nullptr));
    ContextPtr device = cudaContext(why);
    expectNearF32(runOn(device.get(), input, kernel),
                  runOn(cpu.get(), input, kernel), n * 4, n, 1e-30);
  }
}

// GEMMs through cuBLAS (TF32 off): another summation order than the CPU's
// OpenBLAS tiles, so within 1e-5 of C's largest magnitude in f32; plain,
// transposed operands and a batch of 3.
TEST(Cuda, MatmulThroughCublas) {
  std::string why;
  ContextPtr probe = cudaContext(why);
  if (!probe)
    GTEST_SKIP() << why;
  const int64_t m = 37, n = 29, k = 53, batches = 3;
  const int64_t aBytes = batches * m * k * 4, bBytes = batches * k * n * 4;
  std::vector<uint8_t> input(aBytes + bBytes + batches * m * n * 4);
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < (aBytes + bBytes) / 4; ++i) {
    float v = normal(rng);
    std::memcpy(input.data() + 4 * i, &v, 4);
  }
  for (bool transposeA : {false, true})
    for (bool transposeB : {false, true}) {
      SCOPED_TRACE(std::to_string(transposeA) + std::to_string(transposeB));
      auto kernel = [&](tmrt_context *c) {
        tmrt_matmul(c, 0, aBytes, aBytes + bBytes, m, n, k, transposeA ? 1 : k,
                    transposeA ? m : 1, transposeB ? 1 : n, transposeB ? k : 1,
                    batches, 1, 1, 1, m * k, 0, 0, 0, k * n, 0, 0, 0);
      };
      ContextPtr cpu(tmrt_context_create("cpu", 1, nullptr));
      ContextPtr gpu = cudaContext(why);
      std::vector<uint8_t> a = runOn(gpu.get(), input, kernel),
                           b = runOn(cpu.get(), input, kernel);
      float largest = 0.0f;
      std::vector<float> fa(batches * m * n), fb(batches * m * n);
      std::memcpy(fa.data(), a.data() + aBytes + bBytes, fa.size() * 4);
      std::memcpy(fb.data(), b.data() + aBytes + bBytes, fb.size() * 4);
      for (float v : fb)
        largest = std::max(largest, std::abs(v));
      for (size_t i = 0; i < fa.size(); ++i)
        EXPECT_NEAR(fa[i], fb[i], 1e-5f * largest) << i;
    }
}

// The optimizer block: clipping (the exact sum of squares, summed on the
// device: the same words) and AdamW give the CPU's bytes.
TEST(Cuda, ClippedAdamWGivesTheCpuBits) {
  std::string why;
  ContextPtr probe = cudaContext(why);
  if (!probe)
    GTEST_SKIP() << why;
  const int64_t n = 1000;
  // p, g, m, v at 0, 4n, 8n, 12n (f32); lr at 16n, step at 16n + 8;
  // clipped g at 16n + 64, norm at 20n + 64; new p, m, v after.
  std::vector<uint8_t> input(40 * n + 256, 0);
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < 4 * n; ++i) {
    float value = normal(rng);
    if (i >= 3 * n)
      value = std::abs(value); // v >= 0
    std::memcpy(input.data() + 4 * i, &value, 4);
  }
  float lr = 1e-3f;
  int64_t step = 7;
  std::memcpy(input.data() + 16 * n, &lr, 4);
  std::memcpy(input.data() + 16 * n + 8, &step, 8);
  int64_t clipped = 16 * n + 64, norm = 20 * n + 64, out = 20 * n + 128;
  auto kernel = [&](tmrt_context *c) {
    tmrt_clip_begin(c);
    tmrt_clip_accumulate(c, 4 * n, n);
    tmrt_clip_store_sum(c, 36 * n); // the exact sum's words, normalized
    tmrt_clip_finish(c, norm, 0.5);
    tmrt_clip_apply(c, 4 * n, clipped, n);
    tmrt_adamw(c, 0, clipped, 8 * n, 12 * n, 16 * n, 16 * n + 8, out,
               out + 4 * n, out + 8 * n, n, 0.9, 0.95, 1e-8, 0.1);
  };
  ContextPtr cpu(tmrt_context_create("cpu", 1, nullptr));
  ContextPtr gpu = cudaContext(why);
  EXPECT_EQ(runOn(gpu.get(), input, kernel), runOn(cpu.get(), input, kernel));
}

// RoPE's angles use pow, cos and sin in double (CUDA's against libm's):
// within 1e-6 relative of the CPU's, f32, forward and inverse.
TEST(Cuda, RopeWithinAnUlpOfTheCpu) {
  std::string why;
  ContextPtr probe = cudaContext(why);
  if (!probe)
    GTEST_SKIP() << why;
  const int64_t heads = 3, seq = 17, dim = 8, n = heads * seq * dim;
  std::vector<uint8_t> input(2 * n * 4);
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    float v = normal(rng);
    std::memcpy(input.data() + 4 * i, &v, 4);
  }
  for (int64_t inverse : {0, 1, 2, 3}) {
    // Bit 0: inverse, bit 1: halves.
    auto kernel = [&](tmrt_context *c) {
      tmrt_rope(c, 0, n * 4, 1, heads, seq, dim, 0, seq * dim, dim, 1, 10000.0,
                inverse & 1, inverse >> 1, 1, 1, 0);
    };
    ContextPtr cpu(tmrt_context_create("cpu", 1, nullptr));
    ContextPtr gpu = cudaContext(why);
    expectNearF32(runOn(gpu.get(), input, kernel),
                  runOn(cpu.get(), input, kernel), n * 4, n, 1e-7);
  }
}

// An arena larger than the device's free memory is refused when it is
// allocated (before any step), with the planned and the free bytes.
TEST(Cuda, AnArenaLargerThanTheDeviceIsRefused) {
  std::string why;
  ContextPtr ctx = cudaContext(why);
  if (!ctx)
    GTEST_SKIP() << why;
  const uint64_t petabyte = uint64_t(1) << 50;
  EXPECT_EQ(tmrt_arena_alloc(ctx.get(), petabyte), -1);
  const char *error = tmrt_context_error(ctx.get());
  ASSERT_NE(error, nullptr);
  EXPECT_NE(std::string(error).find("the planned arena of " +
                                    std::to_string(petabyte) +
                                    " B does not fit on device "),
            std::string::npos)
      << error;
  EXPECT_NE(std::string(error).find(" B free of "), std::string::npos) << error;
}

// Asynchronous copies (tmrt_transfer_start / tmrt_transfer_wait, the side
// stream and the pinned host arena): device -> host -> device round-trips
// the bytes, each crossing counted once.
TEST(Cuda, AsynchronousCopiesRoundTrip) {
  std::string why;
  ContextPtr ctx = cudaContext(why);
  if (!ctx)
    GTEST_SKIP() << why;
  const int64_t n = int64_t(1) << 16;
  ASSERT_EQ(tmrt_arena_alloc(ctx.get(), 2 * n), 0);
  ASSERT_EQ(tmrt_host_arena_alloc(ctx.get(), n), 0);
  std::vector<uint8_t> data(n);
  for (int64_t i = 0; i < n; ++i)
    data[i] = static_cast<uint8_t>(i * 7 + 3);
  ASSERT_EQ(tmrt_arena_write(ctx.get(), 0, data.data(), n), 0);
  const int64_t host = TMRT_HOST_MEMORY;
  tmrt_transfer_start(ctx.get(), 0, host, n);
  tmrt_transfer_wait(ctx.get(), host);
  tmrt_transfer_start(ctx.get(), host, n, n);
  tmrt_transfer_wait(ctx.get(), n);
  std::vector<uint8_t> back(n);
  ASSERT_EQ(tmrt_arena_read(ctx.get(), n, back.data(), n), 0);
  EXPECT_EQ(back, data);
  EXPECT_EQ(tmrt_transfer_bytes(ctx.get()), static_cast<uint64_t>(2 * n));
  EXPECT_EQ(tmrt_context_error(ctx.get()), nullptr);
}

/// `n` normal values (f32) into `bytes` at `offset` (|x| when `positive`).
void fillNormal(std::vector<uint8_t> &bytes, int64_t offset, int64_t n,
                unsigned seed, float sigma = 1.0f, bool positive = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  for (int64_t i = 0; i < n; ++i) {
    float v = normal(rng);
    if (positive)
      v = std::abs(v);
    std::memcpy(bytes.data() + offset + 4 * i, &v, 4);
  }
}

// Dropout draws the CPU's Philox words at the same stream positions: the
// same mask, output and gradient bytes, keyed by the step and a part index
// read from the arena, in f32 and bf16.
TEST(Cuda, DropoutGivesTheCpuBits) {
  std::string why;
  ContextPtr probe = cudaContext(why);
  if (!probe)
    GTEST_SKIP() << why;
  const int64_t n = 4099; // not a multiple of the four words of a draw
  for (int64_t dtype : {TMRT_DTYPE_F32, TMRT_DTYPE_BF16}) {
    // x at 0, y at 1 slot, mask at 2, dy at 3, dx at 4, mask2 at 5; the
    // step key and the part index at 6 slots.
    int64_t slot = ((n * 4 + 63) / 64) * 64;
    std::vector<uint8_t> input(7 * slot, 0);
    fillNormal(input, 0, n, 3);
    fillNormal(input, 3 * slot, n, 4);
    if (dtype == TMRT_DTYPE_BF16)
      for (int64_t t : {0, 3})
        for (int64_t i = 0; i < n; ++i) {
          float v;
          std::memcpy(&v, input.data() + t * slot + 4 * i, 4);
          uint16_t bits = trainmem::bf16BitsFromFloat(v);
          std::memcpy(input.data() + t * slot + 2 * i, &bits, 2);
        }
    int64_t keyAndPart[2] = {11, 3};
    std::memcpy(input.data() + 6 * slot, keyAndPart, 16);
    auto ref = [&](int64_t t) { return tmrt_tensor_ref(t * slot, dtype); };
    auto kernel = [&](tmrt_context *c) {
      tmrt_dropout(c, ref(0), ref(1), 2 * slot, n, 0.3, 1234, 7, 6 * slot, 5,
                   6 * slot + 8, n, 0, 1, 0, 1, 1, 0);
      tmrt_dropout_grad(c, ref(3), 2 * slot, ref(4), n, 0.3);
      // One rank's part of a tensor-parallel draw: blocks of 5 of a tensor
      // 3 times wider.
      tmrt_dropout_mask(c, 5 * slot, n, 0.1, 99, 2, -1, 1, -1, 0, 0, 1, 5, 3, 1,
                        0);
      // A context-parallel rank's balanced chunks: 2 of 6, 4 elements each.
      tmrt_dropout_mask(c, 5 * slot + n, n, 0.1, 99, 2, -1, 1, -1, 0, 0, 1, 8,
                        3, 1, 1);
    };
    ContextPtr cpu(tmrt_context_create("cpu", 1, nullptr));
    ContextPtr gpu = cudaContext(why);
    EXPECT_EQ(runOn(gpu.get(), input, kernel), runOn(cpu.get(), input, kernel))
        << tmrt::dtypeName(dtype);
  }
}

// Loss scaling: the scale, the finiteness of the checked gradients (a
// device flag), unscaling (NaN everywhere once one value was not finite)
// and the state's update give the CPU's bytes, for a clean and an
// overflowing step.
TEST(Cuda, LossScalingGivesTheCpuBits) {
  std::string why;
  ContextPtr probe = cudaContext(why);
  if (!probe)
    GTEST_SKIP() << why;
  const int64_t n = 1000;
  for (bool overflow : {false, true}) {
    // g1 at 0, g2 at 4n (f32), unscaled at 8n and 12n, state at 16n, new
    // state at 16n + 32, scale at 16n + 64.
    std::vector<uint8_t> input(16 * n + 128, 0);
    fillNormal(input, 0, 2 * n, 8, 1000.0f);
    if (overflow) {
      float inf = std::numeric_limits<float>::infinity();
      std::memcpy(input.data() + 4 * n + 4 * 17, &inf, 4);
    }
    int64_t state[3] = {3, 1999, 0};
    std::memcpy(input.data() + 16 * n, state, 24);
    auto kernel = [&](tmrt_context *c) {
      tmrt_loss_scale(c, 16 * n, 16 * n + 64, 65536.0);
      tmrt_finite_begin(c);
      tmrt_finite_check(c, 0, n);
      tmrt_finite_check(c, 4 * n, n);
      tmrt_unscale(c, 0, 8 * n, n, 16 * n, 65536.0);
      tmrt_unscale(c, 4 * n, 12 * n, n, 16 * n, 65536.0);
      tmrt_loss_scale_update(c, 16 * n, 16 * n + 32, 2000);
    };
    ContextPtr cpu(tmrt_context_create("cpu", 1, nullptr));
    ContextPtr gpu = cudaContext(why);
    EXPECT_EQ(runOn(gpu.get(), input, kernel), runOn(cpu.get(), input, kernel))
        << (overflow ? "overflowing step" : "clean step");
  }
}

// 8-bit state: quantize, dequantize, the fused 8-bit AdamW (f32 and bf16
// gradients, in place), 8-bit SGD, Lion and Sophia give the CPU's codes and
// maxima bit for bit, for a tensor that is not a whole number of blocks, at
// blocks of 256 and 2048; a non-finite gradient carries the state over
// unchanged. With them Lion's and Sophia's f32 updates, Sophia's Hessian
// refresh and labels sampled from 50 rows of 100 logits (the device's expf
// could move a label whose uniform number falls within an ulp of a
// boundary; none of these does on the CPU's).
TEST(Cuda, EightBitStateGivesTheCpuBits) {
  std::string why;
  ContextPtr probe = cudaContext(why);
  if (!probe)
    GTEST_SKIP() << why;
  const int64_t n = 5000;
  for (int64_t block : {256, 2048}) {
    for (bool finite : {true, false}) {
      int64_t blocks = (n + block - 1) / block;
      // p at 0, g at 4n, m and v (f32) at 8n and 12n; m codes at 16n, v
      // codes at 17n, m absmax at 18n, v absmax at 18n + 4 blocks; lr and
      // step after; the dequantized m at 20n; the SGD buffer's codes and
      // absmax at 24n and 25n; a bf16 gradient at 26n; a second p at 27n.
      std::vector<uint8_t> input(40 * n + 4096, 0);
      // Lion's and Sophia's f32 p, m, h at 28n, 29n, 30n; logits at 31n,
      // labels at 35n.
      std::memcpy(input.data() + 28 * n, input.data(), 4 * n);
      fillNormal(input, 29 * n, n, 33, 0.01f);
      fillNormal(input, 30 * n, n, 34, 1e-4f, true);
      fillNormal(input, 31 * n, n, 35, 2.0f);
      fillNormal(input, 0, 2 * n, 30);
      fillNormal(input, 8 * n, n, 31, 0.01f);
      fillNormal(input, 12 * n, n, 32, 1e-4f, true);
      std::memcpy(input.data() + 27 * n, input.data(), 4 * n);
      for (int64_t i = 0; i < n; ++i) {
        float v;
        std::memcpy(&v, input.data() + 4 * n + 4 * i, 4);
        uint16_t bits = trainmem::bf16BitsFromFloat(v);
        std::memcpy(input.data() + 26 * n + 2 * i, &bits, 2);
      }
      if (!finite) {
        float nan = std::numeric_limits<float>::quiet_NaN();
        std::memcpy(input.data() + 4 * n + 4 * (n - 1), &nan, 4);
      }
      int64_t mc = 16 * n, vc = 17 * n, ma = 18 * n, va = 18 * n + 4 * blocks;
      int64_t lr = 19 * n, step = 19 * n + 8;
      float rate = 1e-3f;
      int64_t t = 5;
      std::memcpy(input.data() + lr, &rate, 4);
      std::memcpy(input.data() + step, &t, 8);
      int64_t bf16Grad = tmrt_tensor_ref(26 * n, TMRT_DTYPE_BF16);
      auto kernel = [&](tmrt_context *c) {
        tmrt_quantize(c, 8 * n, mc, ma, n, block, 1);
        tmrt_quantize(c, 12 * n, vc, va, n, block, 0);
        tmrt_dequantize(c, mc, ma, 20 * n, n, block, 1);
        // In place, as the step runs it; then again from a bf16 gradient.
        tmrt_adamw_8bit(c, 0, 4 * n, mc, ma, vc, va, lr, step, 0, mc, ma, vc,
                        va, n, block, 0.9, 0.999, 1e-8, 0.01);
        tmrt_adamw_8bit(c, 0, bf16Grad, mc, ma, vc, va, lr, step, 0, mc, ma, vc,
                        va, n, block, 0.9, 0.999, 1e-8, 0.01);
        tmrt_quantize(c, 8 * n, 24 * n, 25 * n, n, block, 1);
        tmrt_sgd_8bit(c, 27 * n, 4 * n, 24 * n, 25 * n, lr, 27 * n, 24 * n,
                      25 * n, n, block, 0.9, 0.01, 1);
        tmrt_lion_8bit(c, 27 * n, 4 * n, 24 * n, 25 * n, lr, 27 * n, 24 * n,
                       25 * n, n, block, 0.9, 0.99, 0.0);
        tmrt_sophia_8bit(c, 27 * n, bf16Grad, mc, ma, vc, va, lr, 27 * n, mc,
                         ma, vc, va, n, block, 512, 0.965, 0.04, 1e-15, 0.1);
        tmrt_lion(c, 28 * n, 4 * n, 29 * n, lr, 28 * n, 29 * n, n, 0.9, 0.99,
                  0.1);
        tmrt_sophia(c, 28 * n, 4 * n, 29 * n, 30 * n, lr, 28 * n, 29 * n,
                    30 * n, n, 512, 0.965, 0.04, 1e-15, 0.1);
        tmrt_hessian_ema(c, 30 * n, bf16Grad, 30 * n, n, 0.99);
        tmrt_sample(c, 31 * n, step, 35 * n, 50, 100, 3, 5, 32);
      };
      ContextPtr cpu(tmrt_context_create("cpu", 1, nullptr));
      ContextPtr gpu = cudaContext(why);
      EXPECT_EQ(runOn(gpu.get(), input, kernel),
                runOn(cpu.get(), input, kernel))
          << "block " << block << (finite ? "" : ", a NaN gradient");
    }
  }
}

// The fused attention and its gradient against the CPU's tiled kernels
// (which sum in other orders): causal, grouped-query heads (4 over 2),
// value width 8 != key width 16, dropout 0.2, 70 positions across the
// CPU's 64-tile edge, ALiBi slopes; f32 within 1e-5 of each result's
// largest magnitude.
TEST(Cuda, AttentionMatchesTheCpu) {
  std::string why;
  ContextPtr probe = cudaContext(why);
  if (!probe)
    GTEST_SKIP() << why;
  const int64_t B = 2, H = 4, KVH = 2, S = 70, D = 16, DV = 8;
  const int64_t nq = B * H * S * D, nk = B * KVH * S * D, nv = B * KVH * S * DV,
                no = B * H * S * DV, nl = B * H * S;
  // q, k, v, out, lse, dout, dq, dk, dv (f32), consecutive.
  const int64_t q = 0, k = q + 4 * nq, v = k + 4 * nk, out = v + 4 * nv,
                lse = out + 4 * no, dout = lse + 4 * nl, dq = dout + 4 * no,
                dk = dq + 4 * nq, dv = dk + 4 * nk, end = dv + 4 * nv;
  std::vector<uint8_t> input(end, 0);
  fillNormal(input, q, nq, 40);
  fillNormal(input, k, nk, 41);
  fillNormal(input, v, nv, 42);
  fillNormal(input, dout, no, 43);
  const double slopes[H] = {0.25, 0.0625, 0.015625, 0.00390625};
  tmrt_attention_shape shape = {};
  shape.batch = B, shape.heads = H, shape.kv_heads = KVH, shape.queries = S,
  shape.keys = S, shape.dim = D, shape.value_dim = DV;
  shape.q0 = H * S * D, shape.q1 = S * D, shape.q2 = D, shape.q3 = 1;
  shape.k0 = KVH * S * D, shape.k1 = S * D, shape.k2 = D, shape.k3 = 1;
  shape.v0 = KVH * S * DV, shape.v1 = S * DV, shape.v2 = DV, shape.v3 = 1;
  shape.g0 = H * S * DV, shape.g1 = S * DV, shape.g2 = DV, shape.g3 = 1;
  shape.causal = 1, shape.seed = 77, shape.offset = 3, shape.rank_stride = 1;
  shape.split_parts = 1, shape.split_stride = 1;
  auto kernel = [&](tmrt_context *c) {
    tmrt_attention(c, q, k, v, out, lse, /*key=*/-1, /*part=*/-1, 0.25, 0.2,
                   &shape, slopes);
    tmrt_attention_grad(c, dout, q, k, v, out, lse, dq, dk, dv, /*key=*/-1,
                        /*part=*/-1, 0.25, 0.2, &shape, slopes);
  };
  ContextPtr cpu(tmrt_context_create("cpu", 1, nullptr));
  ContextPtr gpu = cudaContext(why);
  std::vector<uint8_t> a = runOn(gpu.get(), input, kernel),
                       b = runOn(cpu.get(), input, kernel);
  for (auto [offset, count] :
       {std::pair{out, no}, {lse, nl}, {dq, nq}, {dk, nk}, {dv, nv}}) {
    float largest = 0.0f;
    for (int64_t i = 0; i < count; ++i) {
      float x;
      std::memcpy(&x, b.data() + offset + 4 * i, 4);
      largest = std::max(largest, std::abs(x));
    }
    expectNearF32(a, b, offset, count, 1e-5 * largest);
  }
}

// On one rank every collective is a copy (or nothing): the CPU's bytes,
// f32 and bf16, with an uneven all-reduce, an exact i64 one and shards
// along an inner dimension.
TEST(Cuda, CollectivesOnOneRankGiveTheCpuBits) {
  std::string why;
  ContextPtr probe = cudaContext(why);
  if (!probe)
    GTEST_SKIP() << why;
  const int64_t n = 1001;
  std::vector<uint8_t> input(16 * n + 256, 0);
  fillNormal(input, 0, n, 50);
  for (int64_t i = 0; i < n; ++i) {
    int64_t word = (i * 7919) << 20;
    std::memcpy(input.data() + 8 * n + 8 * i, &word, 8);
  }
  auto kernel = [&](tmrt_context *c) {
    tmrt_all_reduce(c, 0, 4 * n, n, 1, tmrt_world_size(c), 1);
    tmrt_reduce_scatter(c, 0, 4 * n + 4 * 4, n - 8, 0, 1, tmrt_world_size(c),
                        1);
    tmrt_all_gather(c, 0, 4 * n, n, 1, tmrt_world_size(c), 1);
    tmrt_all_slice(c, 4 * n, 0, n / 2, 1, tmrt_world_size(c), 1);
    // Shards along an inner dimension (3 blocks of 333), through the
    // strided copies.
    tmrt_all_gather(c, 0, 4 * n, 999, 3, tmrt_world_size(c), 1);
    tmrt_reduce_scatter(c, 4 * n, 0, 999, 0, 3, tmrt_world_size(c), 1);
    tmrt_all_slice(c, 0, 4 * n, 999, 3, tmrt_world_size(c), 1);
    tmrt_all_reduce_i64(c, 8 * n, 8 * n, n, tmrt_world_size(c), 1);
    tmrt_broadcast(c, 0, n, 0);
    tmrt_barrier(c);
    int64_t half = tmrt_tensor_ref(12 * n, TMRT_DTYPE_BF16);
    tmrt_convert(c, 0, half, n);
    tmrt_all_reduce(c, half, half, n, 0, tmrt_world_size(c), 1);
  };
  ContextPtr cpu(tmrt_context_create("cpu", 1, nullptr));
  ContextPtr gpu = cudaContext(why);
  EXPECT_EQ(runOn(gpu.get(), input, kernel), runOn(cpu.get(), input, kernel));
}

} // namespace
