//===- CudaCommon.h - what the CUDA backend's files share -------*- C++ -*-===//
//
// The CUDA backend's context state (device, stream, cuBLAS, NCCL), its
// error checks, the element-wise launch, device scratch and read-back, for
// the files of runtime/lib/cuda: CudaBackend.cu (context, arena, table,
// element-wise, row, loss-head, GEMM and optimizer kernels), CudaState.cu
// (dropout, loss scaling, 8-bit state), CudaAttention.cu (the fused
// attention) and CudaCollectives.cu (NCCL). Compiled by nvcc only.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_RUNTIME_CUDA_CUDACOMMON_H
#define TRAINMEM_RUNTIME_CUDA_CUDACOMMON_H

#include "../Backend.h"
#include "../Context.h"
#include "../cpu/FloatTypes.h"

#include <cublas_api.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tmrt {
namespace cuda {

struct Nccl;

/// cuBLAS, loaded when a context opens (dlopen: the runtime does not link
/// it, so that processes that never make a CUDA context do not load it).
struct Cublas {
  void *library = nullptr;
  cublasStatus_t (*create)(cublasHandle_t *) = nullptr;
  cublasStatus_t (*destroy)(cublasHandle_t) = nullptr;
  cublasStatus_t (*setStream)(cublasHandle_t, cudaStream_t) = nullptr;
  cublasStatus_t (*gemmEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                           int, int, int, const void *, const void *,
                           cudaDataType, int, const void *, cudaDataType, int,
                           const void *, void *, cudaDataType, int,
                           cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
};

struct CudaState {
  int device = 0;
  cudaStream_t stream = nullptr;
  Cublas blas;
  cublasHandle_t handle = nullptr;
  /// TF32 for f32 GEMMs: off unless TMRT_CUDA_TF32=1 (then cuBLAS may
  /// round the inputs to 10-bit mantissas).
  bool tf32 = false;
  /// NCCL, loaded and its communicator made at the first collective on
  /// more than one rank (CudaCollectives.cu); null before.
  Nccl *nccl = nullptr;
  /// Device flag of finite_check: nonzero once a checked gradient held a
  /// non-finite value since finite_begin (read by unscale on the device
  /// and by loss_scale_update on the host).
  int *nonFinite = nullptr;
  /// The clip's exact sum of squares on the device (kExactSumWords words,
  /// trainmem/Support/ExactSum.h): clip_accumulate adds into it, so no
  /// gradient leaves the device; clip_finish reads its 192 bytes back.
  int64_t *clipWords = nullptr;
  /// Asynchronous copies between the arenas (tmrt_transfer_start): a side
  /// stream, made at the first, that waits for `ready` (recorded on the
  /// stream where a copy starts), and one event per destination, recorded
  /// after its copy, that tmrt_transfer_wait makes the stream wait for.
  cudaStream_t copyStream = nullptr;
  cudaEvent_t ready = nullptr;
  std::map<int64_t, cudaEvent_t> copies;
};

inline CudaState &stateOf(tmrt_context *ctx) {
  return *static_cast<CudaState *>(ctx->deviceState);
}

/// Fails the context with `what` and CUDA's message; false on failure.
inline bool check(tmrt_context *ctx, cudaError_t status,
                  const std::string &what) {
  if (status == cudaSuccess)
    return true;
  ctx->fail("cuda: " + what + ": " + cudaGetErrorString(status));
  return false;
}

using cpu::dispatchFloatType;
using cpu::withFloatType;

// The arena's copies (CudaBackend.cu).
void writeArena(tmrt_context *ctx, uint64_t offset, const void *source,
                uint64_t bytes);
void readArena(tmrt_context *ctx, uint64_t offset, void *destination,
               uint64_t bytes);
void copyArena(tmrt_context *ctx, uint64_t from, uint64_t to, uint64_t bytes);

template <typename Fn> __global__ void elementKernel(int64_t n, Fn fn) {
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride)
    fn(i);
}

/// fn(i) for i in [0, n) on the context's stream.
template <typename Fn>
void elementwise(tmrt_context *ctx, const char *kernel, int64_t n, Fn fn) {
  if (n <= 0)
    return;
  constexpr int kThreads = 256;
  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > 65536)
    blocks = 65536; // the grid-stride loop covers the rest
  elementKernel<<<static_cast<unsigned>(blocks), kThreads, 0,
                  stateOf(ctx).stream>>>(n, fn);
  check(ctx, cudaGetLastError(), std::string("launching ") + kernel);
}

/// Device scratch on the context's stream, freed with it.
struct Scratch {
  tmrt_context *ctx;
  void *memory = nullptr;
  Scratch(tmrt_context *ctx, uint64_t bytes) : ctx(ctx) {
    if (!check(ctx,
               cudaMallocAsync(&memory, bytes ? bytes : 8, stateOf(ctx).stream),
               "scratch"))
      memory = nullptr;
  }
  ~Scratch() {
    if (memory)
      cudaFreeAsync(memory, stateOf(ctx).stream);
  }
  template <typename U> U *as() { return static_cast<U *>(memory); }
};

/// `count` doubles of host memory (a kernel's constant array argument,
/// e.g. ALiBi slopes) in device scratch for the kernels that follow on the
/// stream; null for a null `host`. The scratch outlives the kernels (freed
/// in stream order).
struct DeviceDoubles {
  Scratch scratch;
  const double *device = nullptr;
  DeviceDoubles(tmrt_context *ctx, const double *host, int64_t count)
      : scratch(ctx, host ? static_cast<uint64_t>(count) * sizeof(double)
                          : 0) {
    if (!host || !scratch.memory)
      return;
    if (check(ctx,
              cudaMemcpyAsync(scratch.memory, host, count * sizeof(double),
                              cudaMemcpyHostToDevice, stateOf(ctx).stream),
              "constant array"))
      device = scratch.as<const double>();
  }
  /// A host array that could not be placed: the kernel must not run.
  bool failed(const double *host) const { return host && !device; }
};

/// `count` values of U copied from device memory (waits for the stream).
template <typename U>
inline bool readBack(tmrt_context *ctx, const U *device, int64_t count,
                     std::vector<U> &host) {
  host.resize(count);
  if (count == 0)
    return true;
  CudaState &state = stateOf(ctx);
  return check(ctx,
               cudaMemcpyAsync(host.data(), device, count * sizeof(U),
                               cudaMemcpyDeviceToHost, state.stream),
               "reading back") &&
         check(ctx, cudaStreamSynchronize(state.stream), "reading back");
}

/// Whether every one of the `n` values is finite (a device flag read back).
template <typename T> bool allFinite(tmrt_context *ctx, const T *g, int64_t n) {
  Scratch flag(ctx, 4);
  int *nonFinite = flag.as<int>();
  if (!nonFinite ||
      !check(ctx, cudaMemsetAsync(nonFinite, 0, 4, stateOf(ctx).stream),
             "clearing a flag"))
    return false;
  elementwise(ctx, "finite check", n, [=] __device__(int64_t i) {
    if (!isfinite(float(g[i])))
      *nonFinite = 1;
  });
  std::vector<int> value;
  return readBack(ctx, nonFinite, 1, value) && value[0] == 0;
}

/// A scalar from the arena (waits for the stream).
template <typename U> U scalarAt(tmrt_context *ctx, int64_t ref) {
  std::vector<U> value;
  return readBack(ctx, ctx->at<U>(ref), 1, value) ? value[0] : U(0);
}

/// The stream position of a dropout's element 0, as tmrt_dropout defines
/// it (the part index read from the device, the context's rank).
inline uint64_t dropoutBase(tmrt_context *ctx, int64_t first, int64_t part,
                            int64_t partElements, int64_t rankElements,
                            int64_t rankStride) {
  uint64_t index =
      part >= 0 ? static_cast<uint64_t>(scalarAt<int64_t>(ctx, part)) : 0;
  uint64_t rank = static_cast<uint64_t>(tmrt_rank(ctx));
  return static_cast<uint64_t>(first) +
         (rank / static_cast<uint64_t>(rankStride)) *
             static_cast<uint64_t>(rankElements) +
         index * static_cast<uint64_t>(partElements);
}

} // namespace cuda
} // namespace tmrt

#endif // TRAINMEM_RUNTIME_CUDA_CUDACOMMON_H
