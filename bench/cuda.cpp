//===- cuda.cpp - the CUDA backend's kernels against the device's own ----===//
//
// Two measurements, each a ratio of two things timed in the same run on the
// same device (scripts/gpu-check.sh prints them in its table):
//
//  adamw8bit [elements=268435456] [block=256] [rounds=20]
//    Bytes per second of the fused 8-bit AdamW update (tmrt_adamw_8bit, in
//    place: reads p, g, the m and v codes and block maxima, writes p, the
//    codes and maxima: 16 B per element plus 16 B per block, as
//    trainmem-bench-adamw-8bit counts them) against a device-to-device copy
//    of as many bytes through the same context (tmrt_copy of 8 B per
//    element, which reads and writes 16). Goal: >= 0.8.
//
//  gemm [rounds=20]
//    bf16 GEMMs of gpt2-124m at seq 1024 x batch 8 (8192 tokens; QKV,
//    attention projection, MLP up and down, the head, and one weight
//    gradient): TFLOP/s of tmrt_matmul against the cublasGemmEx call it
//    makes, issued directly on a handle of the bench's own (cuBLAS's own
//    speed for the same call).
//
// Times are wall-clock over `rounds` calls after two warm-up calls, ended by
// a read-back that waits for the stream; the best of three such runs.
//
//===----------------------------------------------------------------------===//

#include "trainmem-runtime/Runtime.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

int fail(const std::string &message) {
  std::fprintf(stderr, "trainmem-bench-cuda: %s\n", message.c_str());
  return 1;
}

/// Seconds per call of `call`, `rounds` calls then `wait`; best of 3.
double secondsPerCall(int rounds, const std::function<void()> &call,
                      const std::function<void()> &wait) {
  call();
  call();
  wait();
  double best = 1e30;
  for (int run = 0; run < 3; ++run) {
    auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < rounds; ++r)
      call();
    wait();
    double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    best = std::min(best, s / rounds);
  }
  return best;
}

/// `bytes` rounded up to 256 (the arena offsets the benchmark lays out).
int64_t aligned(int64_t bytes) { return (bytes + 255) / 256 * 256; }

tmrt_context *cudaContext() {
  const char *error = nullptr;
  tmrt_context *ctx = tmrt_context_create("cuda", 1, &error);
  if (!ctx)
    std::fprintf(stderr, "trainmem-bench-cuda: %s\n",
                 error ? error : "no CUDA context");
  return ctx;
}

void waitFor(tmrt_context *ctx) {
  float sink;
  tmrt_arena_read(ctx, 0, &sink, 4);
}

int adamw8bit(int64_t n, int64_t block, int rounds) {
  tmrt_context *ctx = cudaContext();
  if (!ctx)
    return 1;
  int64_t blocks = (n + block - 1) / block;
  // p, g (f32), m and v codes, their maxima, lr, step; a copy's source and
  // destination of 8 B per element.
  int64_t p = 0, g = p + aligned(4 * n), mc = g + aligned(4 * n),
          vc = mc + aligned(n), ma = vc + aligned(n),
          va = ma + aligned(4 * blocks), lr = va + aligned(4 * blocks),
          step = lr + 256, src = step + 256, dst = src + aligned(8 * n),
          end = dst + aligned(8 * n);
  if (tmrt_arena_alloc(ctx, end) != 0) {
    int code = fail(tmrt_context_error(ctx) ? tmrt_context_error(ctx)
                                            : "cannot allocate the arena");
    tmrt_context_destroy(ctx);
    return code;
  }
  // Small random gradients and weights, zero state (quantized zeros).
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1e-2f);
  std::vector<float> values(n);
  for (float &v : values)
    v = normal(rng);
  tmrt_arena_write(ctx, p, values.data(), 4 * n);
  for (float &v : values)
    v = normal(rng);
  tmrt_arena_write(ctx, g, values.data(), 4 * n);
  tmrt_fill(ctx, ma, blocks, 0.0);
  tmrt_fill(ctx, va, blocks, 0.0);
  tmrt_fill(ctx, src, 2 * n, 1.0);
  float rate = 1e-3f;
  int64_t t = 10;
  tmrt_arena_write(ctx, lr, &rate, 4);
  tmrt_arena_write(ctx, step, &t, 8);
  double update = secondsPerCall(
      rounds,
      [&] {
        tmrt_adamw_8bit(ctx, p, g, mc, ma, vc, va, lr, step, p, mc, ma, vc, va,
                        n, block, 0.9, 0.999, 1e-8, 0.01);
      },
      [&] { waitFor(ctx); });
  double copy = secondsPerCall(
      rounds, [&] { tmrt_copy(ctx, src, dst, 2 * n); }, [&] { waitFor(ctx); });
  const char *error = tmrt_context_error(ctx);
  if (error) {
    int code = fail(error);
    tmrt_context_destroy(ctx);
    return code;
  }
  double updateBytes = 16.0 * n + 16.0 * blocks, copyBytes = 16.0 * n;
  double updateRate = updateBytes / update, copyRate = copyBytes / copy;
  std::printf("adamw_8bit elements %lld block %lld: %.3f ms, %.1f GB/s; "
              "device copy of 8 B/element: %.3f ms, %.1f GB/s; ratio %.3f "
              "(goal >= 0.8)\n",
              static_cast<long long>(n), static_cast<long long>(block),
              update * 1e3, updateRate / 1e9, copy * 1e3, copyRate / 1e9,
              updateRate / copyRate);
  tmrt_context_destroy(ctx);
  return 0;
}

struct GemmShape {
  const char *name;
  int64_t m, n, k;
  bool transA; // A stored [k, m] (a weight gradient's Xᵀ)
};

int gemm(int rounds) {
  const int64_t tokens = 8192, h = 768, vocab = 50257;
  const GemmShape shapes[] = {
      {"qkv", tokens, 3 * h, h, false},
      {"attn proj", tokens, h, h, false},
      {"mlp up", tokens, 4 * h, h, false},
      {"mlp down", tokens, h, 4 * h, false},
      {"head", tokens, vocab, h, false},
      {"dW mlp up", h, 4 * h, tokens, true},
  };
  tmrt_context *ctx = cudaContext();
  if (!ctx)
    return 1;
  int64_t most = 0;
  for (const GemmShape &s : shapes)
    most = std::max(most, 2 * (s.m * s.k + s.k * s.n + s.m * s.n) + 1024);
  if (tmrt_arena_alloc(ctx, most) != 0) {
    int code = fail(tmrt_context_error(ctx) ? tmrt_context_error(ctx)
                                            : "cannot allocate the arena");
    tmrt_context_destroy(ctx);
    return code;
  }
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    tmrt_context_destroy(ctx);
    return fail("cannot make a cuBLAS handle");
  }
  void *a = nullptr, *b = nullptr, *c = nullptr;
  cudaMalloc(&a, 2 * 8192 * 3072);
  cudaMalloc(&b, 2 * 8192 * vocab);
  cudaMalloc(&c, 2 * 8192 * vocab);
  // Constant nonzero operands on both sides (bf16 0x3c3c = 0.0115; the
  // runtime's are 0.01).
  cudaMemset(a, 0x3c, 2 * 8192 * 3072);
  cudaMemset(b, 0x3c, 2 * 8192 * vocab);
  std::printf("%-10s %6s %6s %6s  %14s  %14s  %s\n", "bf16 GEMM", "m", "n", "k",
              "tmrt TFLOP/s", "cuBLAS TFLOP/s", "ratio");
  for (const GemmShape &s : shapes) {
    int64_t ra = 0, rb = aligned(2 * s.m * s.k),
            rc = rb + aligned(2 * s.k * s.n);
    int64_t A = tmrt_tensor_ref(ra, TMRT_DTYPE_BF16),
            B = tmrt_tensor_ref(rb, TMRT_DTYPE_BF16),
            C = tmrt_tensor_ref(rc, TMRT_DTYPE_BF16);
    tmrt_fill(ctx, A, s.m * s.k, 0.01);
    tmrt_fill(ctx, B, s.k * s.n, 0.01);
    // Row-major A [m, k] (or Aᵀ stored [k, m]) times B [k, n].
    int64_t aRs = s.transA ? 1 : s.k, aCs = s.transA ? s.m : 1;
    double ours = secondsPerCall(
        rounds,
        [&] {
          tmrt_matmul(ctx, A, B, C, s.m, s.n, s.k, aRs, aCs, s.n, 1, 1, 1, 1, 1,
                      0, 0, 0, 0, 0, 0, 0, 0);
        },
        [&] { waitFor(ctx); });
    // The call tmrt_matmul makes: column-major Cᵀ = Bᵀ Aᵀ.
    const float one = 1.0f, zero = 0.0f;
    cublasOperation_t opA = s.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    int lda = static_cast<int>(s.transA ? s.m : s.k);
    double theirs = secondsPerCall(
        rounds,
        [&] {
          cublasGemmEx(handle, CUBLAS_OP_N, opA, static_cast<int>(s.n),
                       static_cast<int>(s.m), static_cast<int>(s.k), &one, b,
                       CUDA_R_16BF, static_cast<int>(s.n), a, CUDA_R_16BF, lda,
                       &zero, c, CUDA_R_16BF, static_cast<int>(s.n),
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        },
        [&] { cudaDeviceSynchronize(); });
    double flops = 2.0 * s.m * s.n * s.k;
    std::printf("%-10s %6lld %6lld %6lld  %14.1f  %14.1f  %.3f\n", s.name,
                static_cast<long long>(s.m), static_cast<long long>(s.n),
                static_cast<long long>(s.k), flops / ours / 1e12,
                flops / theirs / 1e12, theirs / ours);
  }
  const char *error = tmrt_context_error(ctx);
  int code = error ? fail(error) : 0;
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  cublasDestroy(handle);
  tmrt_context_destroy(ctx);
  return code;
}

} // namespace

int main(int argc, char **argv) {
  std::string what = argc > 1 ? argv[1] : "";
  if (what == "adamw8bit") {
    int64_t n = argc > 2 ? std::atoll(argv[2]) : (int64_t(1) << 28);
    int64_t block = argc > 3 ? std::atoll(argv[3]) : 256;
    int rounds = argc > 4 ? std::atoi(argv[4]) : 20;
    if (n < 1 || block < 1 || (block & (block - 1)) || rounds < 1)
      return fail("usage: adamw8bit [elements>0] [block: a power of two] "
                  "[rounds>0]");
    return adamw8bit(n, block, rounds);
  }
  if (what == "gemm") {
    int rounds = argc > 2 ? std::atoi(argv[2]) : 20;
    if (rounds < 1)
      return fail("usage: gemm [rounds>0]");
    return gemm(rounds);
  }
  return fail("usage: trainmem-bench-cuda adamw8bit [elements] [block] "
              "[rounds] | gemm [rounds]");
}
