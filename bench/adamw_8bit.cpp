//===- adamw_8bit.cpp - throughput of the fused 8-bit AdamW update --------===//
//
// Bytes moved per second by tmrt_adamw_8bit (reads p, g, m and v codes and
// block maxima; writes p, codes and maxima: 16 B per element plus 16 B per
// block) against a plain memcpy of as many bytes (a copy of B bytes moves
// 2B) on as many threads (each copies a contiguous part), and against the
// f32 tmrt_adamw (28 B per element), measured in one run. Reports the
// ratios and which vector code ran; the goal for the fused update is at
// least 0.5 of memcpy with AVX-512 VBMI and 0.3 with AVX2 (whose tables are
// read by scalar loads: 4 per element).
//
// Usage: trainmem-bench-adamw-8bit [elements=16777216] [threads=1]
//        [block=256] [rounds=5]
//
//===----------------------------------------------------------------------===//

#include "trainmem-runtime/Runtime.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace {

double seconds(const std::chrono::steady_clock::time_point &start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       start)
      .count();
}

/// Seconds `fn` takes.
template <typename Fn> double timed(Fn fn) {
  auto start = std::chrono::steady_clock::now();
  fn();
  return seconds(start);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t half = values.size() / 2;
  return values.size() % 2 ? values[half]
                           : (values[half - 1] + values[half]) / 2;
}

} // namespace

int main(int argc, char **argv) {
  int64_t n = argc > 1 ? std::atoll(argv[1]) : (1 << 24);
  int64_t threads = argc > 2 ? std::atoll(argv[2]) : 1;
  int64_t block = argc > 3 ? std::atoll(argv[3]) : 256;
  int repeats = argc > 4 ? std::atoi(argv[4]) : 5;
  if (n < 1 || threads < 1 || block < 1 || (block & (block - 1)) || repeats < 1) {
    std::fprintf(stderr, "usage: %s [elements>0] [threads>0] [block: a power "
                         "of two] [repeats>0]\n", argv[0]);
    return 1;
  }
  int64_t blocks = (n + block - 1) / block;
  auto align = [](int64_t bytes) { return (bytes + 63) / 64 * 64; };
  // Layout: p, g, m32, v32 (f32), m codes, v codes (u8), maxima, lr, step.
  int64_t p = 0, g = p + align(4 * n), m32 = g + align(4 * n),
          v32 = m32 + align(4 * n), mc = v32 + align(4 * n),
          vc = mc + align(n), ma = vc + align(n), va = ma + align(4 * blocks),
          lr = va + align(4 * blocks), step = lr + 64, end = step + 64;

  const char *error = nullptr;
  tmrt_context *ctx = tmrt_context_create("cpu", threads, &error);
  if (!ctx || tmrt_arena_alloc(ctx, end) != 0) {
    std::fprintf(stderr, "cannot create the context: %s\n",
                 error ? error : "arena allocation failed");
    return 1;
  }
  uint8_t *arena = tmrt_arena_base(ctx);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto *pf = reinterpret_cast<float *>(arena + p);
  auto *gf = reinterpret_cast<float *>(arena + g);
  for (int64_t i = 0; i < n; ++i) {
    pf[i] = 0.02f * normal(rng);
    gf[i] = 1e-3f * normal(rng);
  }
  std::memset(arena + m32, 0, 8 * n);
  *reinterpret_cast<float *>(arena + lr) = 1e-4f;
  *reinterpret_cast<int64_t *>(arena + step) = 10;
  // 8-bit state of the f32 state after one update.
  tmrt_adamw(ctx, p, g, m32, v32, lr, step, p, m32, v32, n, 0.9, 0.999, 1e-8,
             0.0);
  tmrt_quantize(ctx, m32, mc, ma, n, block, 1);
  tmrt_quantize(ctx, v32, vc, va, n, block, 0);

  // memcpy of half the fused update's bytes moved (each byte read and
  // written).
  double fusedBytes = 16.0 * n + 16.0 * blocks;
  size_t copyBytes = static_cast<size_t>(fusedBytes / 2);
  std::vector<uint8_t> from(copyBytes, 1), to(copyBytes, 0);
  auto fusedUpdate = [&] {
    tmrt_adamw_8bit(ctx, p, g, mc, ma, vc, va, lr, step, p, mc, ma, vc, va, n,
                    block, 0.9, 0.999, 1e-8, 0.01);
  };
  auto f32Update = [&] {
    tmrt_adamw(ctx, p, g, m32, v32, lr, step, p, m32, v32, n, 0.9, 0.999,
               1e-8, 0.01);
  };
  auto copyBytesOnThreads = [&] {
    std::vector<std::thread> copiers;
    size_t part = (copyBytes + threads - 1) / threads;
    for (int64_t t = 0; t < threads; ++t) {
      size_t begin = std::min(copyBytes, t * part),
             end = std::min(copyBytes, begin + part);
      copiers.emplace_back([&, begin, end] {
        std::memcpy(to.data() + begin, from.data() + begin, end - begin);
      });
    }
    for (std::thread &copier : copiers)
      copier.join();
  };
  // Rounds of all three, so that a slower spell of a shared machine slows
  // each of them: the best time of each, and the median of the rounds'
  // ratios.
  double fused = 1e30, adamw = 1e30, copy = 1e30;
  std::vector<double> roundRatios;
  for (int r = 0; r < repeats; ++r) {
    double fusedTime = timed(fusedUpdate), adamwTime = timed(f32Update),
           copyTime = timed(copyBytesOnThreads);
    fused = std::min(fused, fusedTime);
    adamw = std::min(adamw, adamwTime);
    copy = std::min(copy, copyTime);
    roundRatios.push_back((fusedBytes / fusedTime) /
                          (2.0 * copyBytes / copyTime));
  }
  if (const char *kernelError = tmrt_context_error(ctx)) {
    std::fprintf(stderr, "kernel error: %s\n", kernelError);
    return 1;
  }
  double fusedRate = fusedBytes / fused, copyRate = 2.0 * copyBytes / copy,
         adamwRate = 28.0 * n / adamw;
  const char *kernels = tmrt_state8_kernels(ctx);
  std::printf("elements %lld, block %lld, threads %lld, best of %d rounds, "
              "%s kernels\n",
              static_cast<long long>(n), static_cast<long long>(block),
              static_cast<long long>(threads), repeats, kernels);
  std::printf("  memcpy            %8.3f ms  %7.2f GB/s moved\n", copy * 1e3,
              copyRate / 1e9);
  std::printf("  adamw (f32)       %8.3f ms  %7.2f GB/s moved  %.2f ns/elem\n",
              adamw * 1e3, adamwRate / 1e9, adamw * 1e9 / n);
  std::printf("  adamw_8bit fused  %8.3f ms  %7.2f GB/s moved  %.2f ns/elem\n",
              fused * 1e3, fusedRate / 1e9, fused * 1e9 / n);
  const char *goal = std::strcmp(kernels, "avx512-vbmi") == 0 ? " (goal >= 0.5)"
                     : std::strcmp(kernels, "avx2") == 0      ? " (goal >= 0.3)"
                                                              : "";
  std::printf("ratio fused 8-bit / memcpy (bytes moved per second): %.3f "
              "best over best, %.3f median of rounds%s\n",
              fusedRate / copyRate, median(roundRatios), goal);
  std::printf("ratio fused 8-bit / f32 adamw (time per element): %.3f\n",
              fused / adamw);
  tmrt_context_destroy(ctx);
  return 0;
}
