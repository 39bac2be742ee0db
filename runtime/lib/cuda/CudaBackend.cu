//===- CudaBackend.cu - the CUDA backend's table, arena and kernels -------===//
//
// The "cuda" entry of the backend registry (Backend.h): a context on it
// picks a device (TMRT_CUDA_DEVICE, default 0) and makes a stream; its arena
// is one cudaMalloc of the planned size, at the compiler's offsets, and the
// kernels run on the stream in program order. Host copies (batches,
// losses, checkpoints) go through writeArena/readArena and wait for the
// stream.
//
// The per-element math is the support headers' (Float16.h, FastExp.h,
// Activations.h: `__host__ __device__` under nvcc), the functions the CPU
// kernels and the reference evaluator call; built with -fmad=false, so a
// kernel here gives each element the bits the CPU kernel gives it. This
// file holds launches and indexing only.
//
// Every kernel of Kernels.def has a CUDA version: this file's, and those
// of CudaState.cu (dropout, loss scaling, 8-bit state), CudaAttention.cu
// and CudaCollectives.cu (NCCL). A context picks its device from
// TMRT_CUDA_DEVICE, else, under mpirun, from its rank on the node (one
// process per GPU), else device 0.
//===----------------------------------------------------------------------===//

#include "../Backend.h"
#include "../Context.h"
#include "../cpu/FloatTypes.h"

#include "trainmem/Support/Activations.h"
#include "trainmem/Support/AdamW.h"
#include "trainmem/Support/ContextChunks.h"
#include "trainmem/Support/ExactSum.h"
#include "trainmem/Support/Float16.h"
#include "trainmem/Support/RowKernels.h"

#include <cublas_api.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "CudaCommon.h"
#include "CudaKernels.h"

using namespace tmrt;

namespace tmrt {
namespace cuda {

/// Loads cuBLAS and finds its calls (no device needed).
bool loadCublas(Cublas &blas, std::string &error) {
  for (const char *name : {"libcublas.so.13", "libcublas.so"})
    if ((blas.library = dlopen(name, RTLD_NOW | RTLD_LOCAL)))
      break;
  if (!blas.library) {
    error = std::string("cuda: cuBLAS cannot be loaded (") + dlerror() + ")";
    return false;
  }
  auto find = [&](auto &fn, const char *symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(
        dlsym(blas.library, symbol));
    return fn != nullptr;
  };
  if (!find(blas.create, "cublasCreate_v2") ||
      !find(blas.destroy, "cublasDestroy_v2") ||
      !find(blas.setStream, "cublasSetStream_v2") ||
      !find(blas.gemmEx, "cublasGemmEx")) {
    error = "cuda: the cuBLAS loaded lacks cublasGemmEx or its handle calls";
    return false;
  }
  return true;
}

/// Loads cuBLAS and makes a handle on the state's stream.
bool openCublas(CudaState &state, std::string &error) {
  Cublas &blas = state.blas;
  if (!loadCublas(blas, error))
    return false;
  if (blas.create(&state.handle) != CUBLAS_STATUS_SUCCESS ||
      blas.setStream(state.handle, state.stream) != CUBLAS_STATUS_SUCCESS) {
    error = "cuda: cannot make a cuBLAS handle";
    return false;
  }
  const char *tf32 = std::getenv("TMRT_CUDA_TF32");
  state.tf32 = tf32 && std::string(tf32) == "1";
  return true;
}

//===----------------------------------------------------------------------===//
// Context, device, arena
//===----------------------------------------------------------------------===//

void synchronize(tmrt_context *ctx) {
  if (!ctx->deviceState)
    return;
  CudaState &state = stateOf(ctx);
  check(ctx, cudaStreamSynchronize(state.stream), "synchronize");
}

void close(tmrt_context *ctx) {
  if (!ctx->deviceState)
    return;
  CudaState &state = stateOf(ctx);
  cudaSetDevice(state.device);
  cudaStreamSynchronize(state.stream);
  closeNccl(state);
  if (state.handle)
    state.blas.destroy(state.handle);
  if (state.nonFinite)
    cudaFree(state.nonFinite);
  if (state.clipWords)
    cudaFree(state.clipWords);
  if (state.copyStream) {
    cudaStreamSynchronize(state.copyStream);
    cudaStreamDestroy(state.copyStream);
  }
  if (state.ready)
    cudaEventDestroy(state.ready);
  for (auto &entry : state.copies)
    cudaEventDestroy(entry.second);
  cudaStreamDestroy(state.stream);
  delete &state;
  ctx->deviceState = nullptr;
}

bool open(tmrt_context *ctx, std::string &error) {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    error = std::string("cuda: no CUDA device here (") +
            (status != cudaSuccess ? cudaGetErrorString(status)
                                   : "cudaGetDeviceCount found 0") +
            ")";
    return false;
  }
  int device = 0;
  const char *localRank = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (ctx->requestedDevice >= 0) {
    if (ctx->requestedDevice >= count) {
      error = "cuda: device " + std::to_string(ctx->requestedDevice) +
              " asked for; this machine has devices 0 to " +
              std::to_string(count - 1);
      return false;
    }
    device = static_cast<int>(ctx->requestedDevice);
  } else if (const char *text = std::getenv("TMRT_CUDA_DEVICE")) {
    char *end = nullptr;
    long value = std::strtol(text, &end, 10);
    if (!*text || *end || value < 0 || value >= count) {
      error = std::string("cuda: TMRT_CUDA_DEVICE is '") + text +
              "'; this machine has devices 0 to " + std::to_string(count - 1);
      return false;
    }
    device = static_cast<int>(value);
  } else if (localRank) {
    // Under mpirun: one process per GPU, by the rank on this node.
    device = static_cast<int>(std::strtol(localRank, nullptr, 10) % count);
  }
  auto *state = new CudaState;
  state->device = device;
  if ((status = cudaSetDevice(device)) != cudaSuccess ||
      (status = cudaStreamCreateWithFlags(&state->stream,
                                          cudaStreamNonBlocking)) !=
          cudaSuccess) {
    error = std::string("cuda: device ") + std::to_string(device) + ": " +
            cudaGetErrorString(status);
    delete state;
    return false;
  }
  ctx->deviceState = state;
  if ((status = cudaMalloc(&state->nonFinite, sizeof(int))) != cudaSuccess ||
      (status = cudaMemset(state->nonFinite, 0, sizeof(int))) != cudaSuccess ||
      (status = cudaMalloc(&state->clipWords, sizeof ctx->clipSum)) !=
          cudaSuccess ||
      (status = cudaMemset(state->clipWords, 0, sizeof ctx->clipSum)) !=
          cudaSuccess) {
    error = std::string("cuda: device ") + std::to_string(device) + ": " +
            cudaGetErrorString(status);
    close(ctx);
    return false;
  }
  if (!openCublas(*state, error)) {
    close(ctx);
    return false;
  }
  return true;
}

void *allocArena(tmrt_context *ctx, uint64_t bytes) {
  CudaState &state = stateOf(ctx);
  cudaSetDevice(state.device);
  uint64_t rounded = (bytes + 63) & ~uint64_t(63);
  void *memory = nullptr;
  if (rounded != 0 && cudaMalloc(&memory, rounded) == cudaSuccess)
    return memory;
  cudaGetLastError(); // clear the failed allocation's error
  size_t freeBytes = 0, totalBytes = 0;
  cudaMemGetInfo(&freeBytes, &totalBytes);
  ctx->fail("cuda: the planned arena of " + std::to_string(bytes) +
            " B does not fit on device " + std::to_string(state.device) +
            ": " + std::to_string(freeBytes) + " B free of " +
            std::to_string(totalBytes));
  return nullptr;
}

void freeArena(tmrt_context *ctx, void *arena) {
  cudaSetDevice(stateOf(ctx).device);
  cudaFree(arena);
}

void writeArena(tmrt_context *ctx, uint64_t offset, const void *source,
                uint64_t bytes) {
  CudaState &state = stateOf(ctx);
  if (check(ctx,
            cudaMemcpyAsync(ctx->arena + offset, source, bytes,
                            cudaMemcpyHostToDevice, state.stream),
            "copy to the arena"))
    check(ctx, cudaStreamSynchronize(state.stream), "copy to the arena");
}

void readArena(tmrt_context *ctx, uint64_t offset, void *destination,
               uint64_t bytes) {
  CudaState &state = stateOf(ctx);
  if (check(ctx,
            cudaMemcpyAsync(destination, ctx->arena + offset, bytes,
                            cudaMemcpyDeviceToHost, state.stream),
            "copy from the arena"))
    check(ctx, cudaStreamSynchronize(state.stream), "copy from the arena");
}

void copyArena(tmrt_context *ctx, uint64_t from, uint64_t to,
               uint64_t bytes) {
  if (from == to || bytes == 0)
    return;
  CudaState &state = stateOf(ctx);
  bool overlap = from < to + bytes && to < from + bytes;
  if (!overlap) {
    check(ctx,
          cudaMemcpyAsync(ctx->arena + to, ctx->arena + from, bytes,
                          cudaMemcpyDeviceToDevice, state.stream),
          "copy within the arena");
    return;
  }
  // Overlapping regions: through a scratch buffer (memmove's meaning).
  void *scratch = nullptr;
  if (!check(ctx, cudaMallocAsync(&scratch, bytes, state.stream),
             "scratch for an overlapping copy"))
    return;
  check(ctx,
        cudaMemcpyAsync(scratch, ctx->arena + from, bytes,
                        cudaMemcpyDeviceToDevice, state.stream),
        "copy within the arena");
  check(ctx,
        cudaMemcpyAsync(ctx->arena + to, scratch, bytes,
                        cudaMemcpyDeviceToDevice, state.stream),
        "copy within the arena");
  cudaFreeAsync(scratch, state.stream);
}

//===----------------------------------------------------------------------===//
// Element-wise kernels: each element computed as the CPU kernel computes it
// (runtime/lib/cpu/Kernels.cpp: in double or f32 as there, rounded to f32,
// then to T)
//===----------------------------------------------------------------------===//

// (The device lambdas live in function templates: nvcc allows none inside
// the generic lambdas that dispatch on the element type.)

template <typename T> void fillOf(tmrt_context *ctx, int64_t out, int64_t n,
                                  double value) {
  T *y = ctx->at<T>(out);
  float v = static_cast<float>(value);
  elementwise(ctx, "fill", n, [=] __device__(int64_t i) { y[i] = T(v); });
  ctx->touch(out, n * sizeof(T));
}

void fill_i64(tmrt_context *ctx, int64_t out, int64_t n, int64_t value) {
  int64_t *y = ctx->at<int64_t>(out);
  elementwise(ctx, "fill_i64", n, [=] __device__(int64_t i) { y[i] = value; });
  ctx->touch(out, n * 8);
}

void iota(tmrt_context *ctx, int64_t out, int64_t n, int64_t id_bits) {
  if (id_bits == 32) {
    int32_t *y = ctx->at<int32_t>(out);
    elementwise(ctx, "iota", n,
                [=] __device__(int64_t i) { y[i] = static_cast<int32_t>(i); });
  } else {
    int64_t *y = ctx->at<int64_t>(out);
    elementwise(ctx, "iota", n, [=] __device__(int64_t i) { y[i] = i; });
  }
  ctx->touch(out, n * id_bits / 8);
}

/// Where element `e` of a context-parallel rank's [outer, mine, inner]
/// rows is in the whole [outer, rows, inner].
__device__ inline int64_t contextSlicePlace(int64_t e, int64_t inner,
                                            int64_t mine, int64_t rows,
                                            trainmem::ContextChunks context) {
  int64_t c = e % inner, r = (e / inner) % mine, o = e / (inner * mine);
  return (o * rows + context.wholeRow(r, mine)) * inner + c;
}

/// A context-parallel rank's rows of ids: one thread per element written.
void context_slice(tmrt_context *ctx, int64_t in, int64_t out, int64_t outer,
                   int64_t rows, int64_t inner, int64_t id_bits, int64_t parts,
                   int64_t stride, int64_t balanced) {
  if (!checkSplit(ctx, "context_slice", parts, stride))
    return;
  trainmem::ContextChunks context{parts, splitPosition(ctx, parts, stride),
                                  balanced != 0};
  int64_t mine = rows / parts, n = outer * mine * inner;
  if (id_bits == 32) {
    const int32_t *x = ctx->at<int32_t>(in);
    int32_t *y = ctx->at<int32_t>(out);
    elementwise(ctx, "context_slice", n, [=] __device__(int64_t e) {
      y[e] = x[contextSlicePlace(e, inner, mine, rows, context)];
    });
  } else {
    const int64_t *x = ctx->at<int64_t>(in);
    int64_t *y = ctx->at<int64_t>(out);
    elementwise(ctx, "context_slice", n, [=] __device__(int64_t e) {
      y[e] = x[contextSlicePlace(e, inner, mine, rows, context)];
    });
  }
  ctx->touch(out, n * id_bits / 8);
}

// Between the arenas with the copies above (the host arena is host
// memory, the arena the device's; synchronous).
void transfer(tmrt_context *ctx, int64_t from, int64_t to, int64_t bytes) {
  tmrt::transferKernel(ctx, from, to, bytes);
}

/// The host arena is pinned (page-locked) so that a copy on the side
/// stream runs asynchronously and at the link's rate.
bool pinHost(tmrt_context *ctx, void *memory, uint64_t bytes) {
  cudaSetDevice(stateOf(ctx).device);
  return check(ctx, cudaHostRegister(memory, bytes, cudaHostRegisterDefault),
               "pinning the host arena");
}

void unpinHost(tmrt_context *ctx, void *memory) {
  cudaSetDevice(stateOf(ctx).device);
  cudaHostUnregister(memory);
}

// An asynchronous copy between the arenas on the side stream, after what
// the stream has queued so far; its destination's event marks the end.
// Within one arena it is the stream's own copy (nothing to overlap).
void transfer_start(tmrt_context *ctx, int64_t from, int64_t to,
                    int64_t bytes) {
  bool fromHost = isHostRef(from), toHost = isHostRef(to);
  if (bytes <= 0 || fromHost == toHost) {
    transfer(ctx, from, to, bytes);
    return;
  }
  if (!tmrt::checkTransferRefs(ctx, from, to))
    return;
  CudaState &state = stateOf(ctx);
  if (!state.copyStream &&
      (!check(
           ctx,
           cudaStreamCreateWithFlags(&state.copyStream, cudaStreamNonBlocking),
           "the copy stream") ||
       !check(ctx,
              cudaEventCreateWithFlags(&state.ready, cudaEventDisableTiming),
              "the copy stream's event")))
    return;
  cudaEvent_t &done = state.copies[locationOf(to)];
  if (!done &&
      !check(ctx, cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
             "a copy's event"))
    return;
  uint8_t *source =
      fromHost ? ctx->hostArena + offsetOf(from) : ctx->arena + offsetOf(from);
  uint8_t *destination =
      toHost ? ctx->hostArena + offsetOf(to) : ctx->arena + offsetOf(to);
  if (!check(ctx, cudaEventRecord(state.ready, state.stream),
             "starting a copy") ||
      !check(ctx, cudaStreamWaitEvent(state.copyStream, state.ready, 0),
             "starting a copy") ||
      !check(ctx,
             cudaMemcpyAsync(destination, source, static_cast<size_t>(bytes),
                             toHost ? cudaMemcpyDeviceToHost
                                    : cudaMemcpyHostToDevice,
                             state.copyStream),
             "an asynchronous copy") ||
      !check(ctx, cudaEventRecord(done, state.copyStream), "ending a copy"))
    return;
  tmrt::recordTransfer(ctx, from, to, static_cast<uint64_t>(bytes));
}

// The stream waits for the copy into `to` (the host does not).
void transfer_wait(tmrt_context *ctx, int64_t to) {
  CudaState &state = stateOf(ctx);
  auto it = state.copies.find(locationOf(to));
  if (it == state.copies.end()) {
    // A copy within one arena ran on the stream itself.
    return;
  }
  check(ctx, cudaStreamWaitEvent(state.stream, it->second, 0),
        "waiting for a copy");
}

void copy(tmrt_context *ctx, int64_t in, int64_t out, int64_t n) {
  withFloatType(ctx, "copy", {in, out}, [&](auto type) {
    using T = decltype(type);
    copyArena(ctx, offsetOf(in), offsetOf(out), n * sizeof(T));
    ctx->touch(out, n * sizeof(T));
  });
}

template <typename From, typename To>
void convertOf(tmrt_context *ctx, int64_t in, int64_t out, int64_t n) {
  const From *x = ctx->at<From>(in);
  To *y = ctx->at<To>(out);
  elementwise(ctx, "convert", n, [=] __device__(int64_t i) {
    y[i] = To(static_cast<float>(x[i]));
  });
  ctx->touch(out, n * sizeof(To));
}

void convert(tmrt_context *ctx, int64_t in, int64_t out, int64_t n) {
  withFloatType(ctx, "convert", {in}, [&](auto from) {
    withFloatType(ctx, "convert", {out}, [&](auto to) {
      convertOf<decltype(from), decltype(to)>(ctx, in, out, n);
    });
  });
}

/// out[i] = fn(a[i], b[i]) in double, rounded to f32, then to T.
template <typename T, typename Fn>
void binaryOf(tmrt_context *ctx, const char *kernel, int64_t a, int64_t b,
              int64_t out, int64_t n, Fn fn) {
  const T *x = ctx->at<T>(a), *y = ctx->at<T>(b);
  T *z = ctx->at<T>(out);
  elementwise(ctx, kernel, n, [=] __device__(int64_t i) {
    z[i] = T(static_cast<float>(fn(static_cast<double>(float(x[i])),
                                   static_cast<double>(float(y[i])))));
  });
  ctx->touch(out, n * sizeof(T));
}

template <typename Fn>
void binary(tmrt_context *ctx, const char *kernel, int64_t a, int64_t b,
            int64_t out, int64_t n, Fn fn) {
  withFloatType(ctx, kernel, {a, b, out}, [&](auto type) {
    binaryOf<decltype(type)>(ctx, kernel, a, b, out, n, fn);
  });
}

/// out[i] = fn(in[i]) in double, rounded to f32, then to T.
template <typename T, typename Fn>
void unaryOf(tmrt_context *ctx, const char *kernel, int64_t in, int64_t out,
             int64_t n, Fn fn) {
  const T *x = ctx->at<T>(in);
  T *y = ctx->at<T>(out);
  elementwise(ctx, kernel, n, [=] __device__(int64_t i) {
    y[i] = T(static_cast<float>(fn(static_cast<double>(float(x[i])))));
  });
  ctx->touch(out, n * sizeof(T));
}

template <typename Fn>
void unary(tmrt_context *ctx, const char *kernel, int64_t in, int64_t out,
           int64_t n, Fn fn) {
  withFloatType(ctx, kernel, {in, out}, [&](auto type) {
    unaryOf<decltype(type)>(ctx, kernel, in, out, n, fn);
  });
}

void add(tmrt_context *ctx, int64_t a, int64_t b, int64_t out, int64_t n) {
  binary(ctx, "add", a, b, out, n,
         [] __device__(double x, double y) { return x + y; });
}

void mul(tmrt_context *ctx, int64_t a, int64_t b, int64_t out, int64_t n) {
  binary(ctx, "mul", a, b, out, n,
         [] __device__(double x, double y) { return x * y; });
}

void scale(tmrt_context *ctx, int64_t in, int64_t out, int64_t n,
           double factor) {
  unary(ctx, "scale", in, out, n,
        [=] __device__(double x) { return x * factor; });
}

// The activations of Activations.def: out = Name::forward(in) and
// out = dy · Name::derivative(x), the very functions the CPU runs.
#define TMRT_ACTIVATION_KERNEL(kernel, Name) TMRT_ACTIVATION(kernel, Name)
#define TMRT_ACTIVATION(kernel, Name)                                          \
  void kernel(tmrt_context *ctx, int64_t in, int64_t out, int64_t n) {         \
    unary(ctx, #kernel, in, out, n,                                            \
          [] __device__(double x) { return trainmem::Name::forward(x); });     \
  }                                                                            \
  void kernel##_grad(tmrt_context *ctx, int64_t dy, int64_t x, int64_t out,    \
                     int64_t n) {                                              \
    binary(ctx, #kernel "_grad", dy, x, out, n,                                \
           [] __device__(double g, double v) {                                 \
             return g * trainmem::Name::derivative(v);                         \
           });                                                                 \
  }
#include "trainmem-runtime/Activations.def"

template <typename T>
void bias_addOf(tmrt_context *ctx, int64_t in, int64_t bias, int64_t out,
                int64_t n, int64_t bias_n) {
  const T *x = ctx->at<T>(in), *b = ctx->at<T>(bias);
  T *y = ctx->at<T>(out);
  if (bias_n > 0)
    elementwise(ctx, "bias_add", n, [=] __device__(int64_t i) {
      y[i] = T(float(x[i]) + float(b[i % bias_n]));
    });
  ctx->touch(out, n * sizeof(T));
}

template <typename T>
void bias_geluOf(tmrt_context *ctx, int64_t in, int64_t bias, int64_t out,
                 int64_t n, int64_t bias_n) {
  const T *x = ctx->at<T>(in), *b = ctx->at<T>(bias);
  T *y = ctx->at<T>(out);
  if (bias_n > 0)
    elementwise(ctx, "bias_gelu", n, [=] __device__(int64_t i) {
      y[i] = T(trainmem::biasGelu(x[i], b[i % bias_n]));
    });
  ctx->touch(out, n * sizeof(T));
}

template <typename T>
void bias_gelu_gradOf(tmrt_context *ctx, int64_t dy, int64_t x, int64_t bias,
                      int64_t out, int64_t n, int64_t bias_n) {
  const T *g = ctx->at<T>(dy), *v = ctx->at<T>(x), *b = ctx->at<T>(bias);
  T *z = ctx->at<T>(out);
  if (bias_n > 0)
    elementwise(ctx, "bias_gelu_grad", n, [=] __device__(int64_t i) {
      z[i] = T(trainmem::biasGeluGrad(g[i], v[i], b[i % bias_n]));
    });
  ctx->touch(out, n * sizeof(T));
}

//===----------------------------------------------------------------------===//
// Row kernels: one thread per row (or per task of rows, or per output
// element), each row by the functions of trainmem/Support/RowKernels.h that
// the CPU kernels call, so that the sums are the CPU's. Correct first; the
// block-per-row versions come with a device to measure them on.
//===----------------------------------------------------------------------===//

using trainmem::rows::kReductionRows;

template <typename T>
void layer_normOf(tmrt_context *ctx, int64_t in, int64_t gamma, int64_t beta,
                  int64_t out, int64_t rows, int64_t cols, double eps) {
  const T *x = ctx->at<T>(in), *g = ctx->at<T>(gamma), *b = ctx->at<T>(beta);
  T *y = ctx->at<T>(out);
  elementwise(ctx, "layer_norm", rows, [=] __device__(int64_t r) {
    trainmem::rows::layerNorm(x + r * cols, g, b, y + r * cols, cols, eps);
  });
  ctx->touch(out, rows * cols * sizeof(T));
}

template <typename T>
void layer_norm_gradOf(tmrt_context *ctx, int64_t dy, int64_t x,
                       int64_t gamma, int64_t dx, int64_t dgamma,
                       int64_t dbeta, int64_t rows, int64_t cols,
                       double eps) {
  const T *gy = ctx->at<T>(dy), *xv = ctx->at<T>(x), *g = ctx->at<T>(gamma);
  T *gx = ctx->at<T>(dx);
  int64_t tasks = (rows + kReductionRows - 1) / kReductionRows;
  int64_t slots = tasks > 0 ? tasks : 1;
  Scratch scratch(ctx, 2 * cols * slots * sizeof(double));
  double *partial = scratch.as<double>();
  if (!partial)
    return;
  // One thread per task of rows, as the CPU's tasks: the input gradient of
  // its rows and its partial column sums, in the CPU's order (x̂ and the
  // gradient of x̂ computed again in the second pass: the same values).
  elementwise(ctx, "layer_norm_grad", tasks, [=] __device__(int64_t task) {
    double *pg = partial + 2 * cols * task, *pb = pg + cols;
    for (int64_t c = 0; c < cols; ++c)
      pg[c] = pb[c] = 0.0;
    for (int64_t r = task * rows / tasks; r < (task + 1) * rows / tasks; ++r)
      trainmem::rows::layerNormGrad(gy + r * cols, xv + r * cols, g,
                                    gx + r * cols, pg, pb, cols, eps);
  });
  // The parameter gradients: the tasks' partial sums added in task order.
  T *gg = ctx->at<T>(dgamma), *gb = ctx->at<T>(dbeta);
  elementwise(ctx, "layer_norm_grad", cols, [=] __device__(int64_t c) {
    double sg = 0.0, sb = 0.0;
    for (int64_t task = 0; task < tasks; ++task) {
      sg += partial[2 * cols * task + c];
      sb += partial[2 * cols * task + cols + c];
    }
    gg[c] = T(static_cast<float>(sg));
    gb[c] = T(static_cast<float>(sb));
  });
  ctx->touch(dx, rows * cols * sizeof(T));
  ctx->touch(dgamma, cols * sizeof(T));
  ctx->touch(dbeta, cols * sizeof(T));
}

void layer_norm_grad(tmrt_context *ctx, int64_t dy, int64_t x, int64_t gamma,
                     int64_t dx, int64_t dgamma, int64_t dbeta, int64_t rows,
                     int64_t cols, double eps) {
  withFloatType(ctx, "layer_norm_grad", {dy, x, gamma, dx, dgamma, dbeta},
                [&](auto type) {
                  layer_norm_gradOf<decltype(type)>(ctx, dy, x, gamma, dx,
                                                    dgamma, dbeta, rows, cols,
                                                    eps);
                });
}

template <typename T>
void rms_normOf(tmrt_context *ctx, int64_t in, int64_t gamma, int64_t out,
                int64_t rows, int64_t cols, double eps, double gain_offset) {
  const T *x = ctx->at<T>(in), *g = ctx->at<T>(gamma);
  T *y = ctx->at<T>(out);
  elementwise(ctx, "rms_norm", rows, [=] __device__(int64_t r) {
    trainmem::rows::rmsNorm(x + r * cols, g, y + r * cols, cols, eps,
                            gain_offset);
  });
  ctx->touch(out, rows * cols * sizeof(T));
}

template <typename T>
void rms_norm_gradOf(tmrt_context *ctx, int64_t dy, int64_t x, int64_t gamma,
                     int64_t dx, int64_t dgamma, int64_t rows, int64_t cols,
                     double eps, double gain_offset) {
  const T *gy = ctx->at<T>(dy), *xv = ctx->at<T>(x), *g = ctx->at<T>(gamma);
  T *gx = ctx->at<T>(dx);
  int64_t tasks = (rows + kReductionRows - 1) / kReductionRows;
  Scratch scratch(ctx, cols * (tasks > 0 ? tasks : 1) * sizeof(double));
  double *partial = scratch.as<double>();
  if (!partial)
    return;
  elementwise(ctx, "rms_norm_grad", tasks, [=] __device__(int64_t task) {
    double *pg = partial + cols * task;
    for (int64_t c = 0; c < cols; ++c)
      pg[c] = 0.0;
    for (int64_t r = task * rows / tasks; r < (task + 1) * rows / tasks; ++r)
      trainmem::rows::rmsNormGrad(gy + r * cols, xv + r * cols, g,
                                  gx + r * cols, pg, cols, eps, gain_offset);
  });
  T *gg = ctx->at<T>(dgamma);
  elementwise(ctx, "rms_norm_grad", cols, [=] __device__(int64_t c) {
    double sum = 0.0;
    for (int64_t task = 0; task < tasks; ++task)
      sum += partial[cols * task + c];
    gg[c] = T(static_cast<float>(sum));
  });
  ctx->touch(dx, rows * cols * sizeof(T));
  ctx->touch(dgamma, cols * sizeof(T));
}

void rms_norm_grad(tmrt_context *ctx, int64_t dy, int64_t x, int64_t gamma,
                   int64_t dx, int64_t dgamma, int64_t rows, int64_t cols,
                   double eps, double gain_offset) {
  withFloatType(ctx, "rms_norm_grad", {dy, x, gamma, dx, dgamma},
                [&](auto type) {
                  rms_norm_gradOf<decltype(type)>(ctx, dy, x, gamma, dx,
                                                  dgamma, rows, cols, eps,
                                                  gain_offset);
                });
}

/// Softmax in double (exp: CUDA's, within an ulp of libm's, so the bits
/// may differ from the CPU's in the last place).
template <typename T>
void softmaxOf(tmrt_context *ctx, int64_t in, int64_t out, int64_t rows,
               int64_t cols, int64_t queries, int64_t causal, int64_t heads,
               const double *slopes) {
  const T *x = ctx->at<T>(in);
  T *y = ctx->at<T>(out);
  elementwise(ctx, "softmax", rows, [=] __device__(int64_t r) {
    int64_t query = r % queries;
    int64_t visible = causal ? query + 1 : cols;
    if (slopes)
      trainmem::rows::softmaxAlibi(x + r * cols, y + r * cols, cols, visible,
                                   slopes[(r / queries) % heads], query);
    else
      trainmem::rows::softmax(x + r * cols, y + r * cols, cols, visible);
  });
  ctx->touch(out, rows * cols * sizeof(T));
}

void softmax(tmrt_context *ctx, int64_t in, int64_t out, int64_t rows,
             int64_t cols, int64_t queries, int64_t causal, int64_t heads,
             const double *alibi_slopes) {
  DeviceDoubles slopes(ctx, alibi_slopes, heads);
  if (slopes.failed(alibi_slopes))
    return;
  withFloatType(ctx, "softmax", {in, out}, [&](auto type) {
    softmaxOf<decltype(type)>(ctx, in, out, rows, cols, queries, causal,
                              heads, slopes.device);
  });
}

template <typename T>
void softmax_gradOf(tmrt_context *ctx, int64_t dy, int64_t y, int64_t out,
                    int64_t rows, int64_t cols) {
  const T *g = ctx->at<T>(dy), *yv = ctx->at<T>(y);
  T *z = ctx->at<T>(out);
  elementwise(ctx, "softmax_grad", rows, [=] __device__(int64_t r) {
    trainmem::rows::softmaxGrad(g + r * cols, yv + r * cols, z + r * cols,
                                cols);
  });
  ctx->touch(out, rows * cols * sizeof(T));
}

/// A sum_to's input extents and output strides (captured by value).
struct SumDims {
  int64_t d[6], o[6];
};

/// One thread per output element: the inputs that sum into it, in the
/// CPU's order (input index order: the summed dimensions
/// lexicographically, the kept ones fixed by the output element).
template <typename T>
void sum_toOf(tmrt_context *ctx, int64_t in, int64_t out, int64_t out_n,
              int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t d4,
              int64_t d5, int64_t o0, int64_t o1, int64_t o2, int64_t o3,
              int64_t o4, int64_t o5) {
  const T *x = ctx->at<T>(in);
  T *y = ctx->at<T>(out);
  SumDims dims = {{d0, d1, d2, d3, d4, d5}, {o0, o1, o2, o3, o4, o5}};
  elementwise(ctx, "sum_to", out_n, [=] __device__(int64_t j) {
    // Row-major input strides; the kept dimensions' indices from j (a kept
    // dimension has a non-zero output stride; the output is row-major over
    // them).
    int64_t stride[6], fixed[6];
    int64_t s = 1;
    for (int k = 5; k >= 0; --k) {
      stride[k] = s;
      s *= dims.d[k];
    }
    for (int k = 0; k < 6; ++k)
      fixed[k] = dims.o[k] != 0 ? (j / dims.o[k]) % dims.d[k] : 0;
    // The summed dimensions' indices, counted like an odometer.
    int64_t idx[6] = {0, 0, 0, 0, 0, 0};
    double acc = 0.0;
    while (true) {
      int64_t at = 0;
      for (int k = 0; k < 6; ++k)
        at += (dims.o[k] != 0 ? fixed[k] : idx[k]) * stride[k];
      acc += float(x[at]);
      int k = 5;
      for (; k >= 0; --k) {
        if (dims.o[k] != 0)
          continue;
        if (++idx[k] < dims.d[k])
          break;
        idx[k] = 0;
      }
      if (k < 0)
        break;
    }
    y[j] = T(static_cast<float>(acc));
  });
  ctx->touch(out, out_n * sizeof(T));
}

void sum_to(tmrt_context *ctx, int64_t in, int64_t out, int64_t out_n,
            int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t d4,
            int64_t d5, int64_t o0, int64_t o1, int64_t o2, int64_t o3,
            int64_t o4, int64_t o5) {
  for (int64_t d : {d0, d1, d2, d3, d4, d5})
    if (d == 0) {
      // Nothing to sum: zeros, as the CPU kernel writes.
      return fill(ctx, out, out_n, 0.0);
    }
  withFloatType(ctx, "sum_to", {in, out}, [&](auto type) {
    sum_toOf<decltype(type)>(ctx, in, out, out_n, d0, d1, d2, d3, d4, d5, o0,
                             o1, o2, o3, o4, o5);
  });
}

//===----------------------------------------------------------------------===//
// Embedding, the loss head: bad ids are found on the device (the first bad
// position, by atomicMin) and reported after the kernel, as the CPU kernel
// reports them
//===----------------------------------------------------------------------===//

/// A device slot for the first bad position (UINT64_MAX: none).
struct FirstBad {
  Scratch scratch;
  explicit FirstBad(tmrt_context *ctx) : scratch(ctx, 8) {
    if (scratch.memory)
      check(ctx,
            cudaMemsetAsync(scratch.memory, 0xff, 8, stateOf(ctx).stream),
            "clearing a flag");
  }
  unsigned long long *slot() { return scratch.as<unsigned long long>(); }
  /// The first bad position, or -1.
  int64_t read(tmrt_context *ctx) {
    std::vector<unsigned long long> value;
    if (!slot() || !readBack(ctx, slot(), 1, value) ||
        value[0] == ~0ull)
      return -1;
    return static_cast<int64_t>(value[0]);
  }
};

__device__ inline int64_t idAt(const void *ids, int64_t i, int64_t bits) {
  return bits == 32 ? static_cast<const int32_t *>(ids)[i]
                    : static_cast<const int64_t *>(ids)[i];
}

const void *idsAt(tmrt_context *ctx, int64_t ids, int64_t bits) {
  return bits == 32 ? static_cast<const void *>(ctx->at<int32_t>(ids))
                    : static_cast<const void *>(ctx->at<int64_t>(ids));
}

/// The id at position `i` of `ids`, read from the device.
int64_t idOnDevice(tmrt_context *ctx, const void *ids, int64_t i,
                   int64_t bits) {
  if (bits == 32) {
    std::vector<int32_t> v;
    return readBack(ctx, static_cast<const int32_t *>(ids) + i, 1, v) ? v[0]
                                                                        : 0;
  }
  std::vector<int64_t> v;
  return readBack(ctx, static_cast<const int64_t *>(ids) + i, 1, v) ? v[0]
                                                                      : 0;
}

/// The first row (column) of this rank's part of a table (logits) split
/// into `parts` of `rows` along the group of ranks `stride` apart; false
/// after failing the context on a bad split.
bool partFirst(tmrt_context *ctx, const char *kernel, int64_t rows,
               int64_t parts, int64_t stride, int64_t &first) {
  if (!checkSplit(ctx, kernel, parts, stride))
    return false;
  first = splitPosition(ctx, parts, stride) * rows;
  return true;
}

template <typename T>
void embeddingOf(tmrt_context *ctx, int64_t table, int64_t ids, int64_t out,
                 int64_t num_ids, int64_t hidden, int64_t vocab,
                 int64_t id_bits, int64_t first, int64_t whole) {
  const T *t = ctx->at<T>(table);
  const void *idv = idsAt(ctx, ids, id_bits);
  T *y = ctx->at<T>(out);
  FirstBad bad(ctx);
  unsigned long long *badSlot = bad.slot();
  if (!badSlot)
    return;
  elementwise(ctx, "embedding", num_ids * hidden, [=] __device__(int64_t e) {
    int64_t i = e / hidden, h = e % hidden;
    int64_t id = idAt(idv, i, id_bits);
    if (id < 0 || id >= whole) {
      y[e] = T(0.0f);
      atomicMin(badSlot, static_cast<unsigned long long>(i));
      return;
    }
    y[e] = id >= first && id < first + vocab ? t[(id - first) * hidden + h]
                                             : T(0.0f);
  });
  if (int64_t i = bad.read(ctx); i >= 0)
    ctx->fail("token id " + std::to_string(idOnDevice(ctx, idv, i, id_bits)) +
              " at position " + std::to_string(i) +
              " is outside the table of " + std::to_string(whole) + " rows");
  ctx->touch(out, num_ids * hidden * sizeof(T));
}

void embedding(tmrt_context *ctx, int64_t table, int64_t ids, int64_t out,
               int64_t num_ids, int64_t hidden, int64_t vocab, int64_t id_bits,
               int64_t split_parts, int64_t split_stride) {
  int64_t first = 0;
  if (!partFirst(ctx, "embedding", vocab, split_parts, split_stride, first))
    return;
  withFloatType(ctx, "embedding", {table, out}, [&](auto type) {
    embeddingOf<decltype(type)>(ctx, table, ids, out, num_ids, hidden, vocab,
                                id_bits, first, vocab * split_parts);
  });
}

/// The table gradient: the ids are read back and each row's positions
/// listed in position order (on the host), then one thread per (row,
/// column) adds its positions' gradients in double in that order: the CPU
/// kernel's sums.
template <typename T>
void embedding_gradOf(tmrt_context *ctx, int64_t dy, int64_t ids, int64_t out,
                      int64_t num_ids, int64_t hidden, int64_t vocab,
                      int64_t id_bits, int64_t first, int64_t whole) {
  const T *g = ctx->at<T>(dy);
  T *y = ctx->at<T>(out);
  const void *idv = idsAt(ctx, ids, id_bits);
  std::vector<int64_t> host(num_ids);
  if (id_bits == 32) {
    std::vector<int32_t> narrow;
    if (!readBack(ctx, static_cast<const int32_t *>(idv), num_ids, narrow))
      return;
    host.assign(narrow.begin(), narrow.end());
  } else if (!readBack(ctx, static_cast<const int64_t *>(idv), num_ids,
                       host)) {
    return;
  }
  // Ids as rows of this rank's part (-1: another part's).
  for (int64_t i = 0; i < num_ids; ++i) {
    if (host[i] < 0 || host[i] >= whole) {
      ctx->fail("token id " + std::to_string(host[i]) + " at position " +
                std::to_string(i) + " is outside the table of " +
                std::to_string(whole) + " rows");
      host[i] = -1;
      continue;
    }
    host[i] =
        host[i] >= first && host[i] < first + vocab ? host[i] - first : -1;
  }
  std::vector<int64_t> begin(vocab + 1, 0), positions;
  for (int64_t i = 0; i < num_ids; ++i)
    if (host[i] >= 0)
      ++begin[host[i] + 1];
  for (int64_t v = 0; v < vocab; ++v)
    begin[v + 1] += begin[v];
  positions.resize(begin[vocab]);
  std::vector<int64_t> next(begin.begin(), begin.end() - 1);
  for (int64_t i = 0; i < num_ids; ++i)
    if (host[i] >= 0 && host[i] < vocab)
      positions[next[host[i]]++] = i;
  Scratch lists(ctx, (begin.size() + positions.size()) * sizeof(int64_t));
  int64_t *dBegin = lists.as<int64_t>();
  if (!dBegin)
    return;
  int64_t *dPositions = dBegin + begin.size();
  CudaState &state = stateOf(ctx);
  if (!check(ctx,
             cudaMemcpyAsync(dBegin, begin.data(),
                             begin.size() * sizeof(int64_t),
                             cudaMemcpyHostToDevice, state.stream),
             "embedding_grad lists") ||
      (!positions.empty() &&
       !check(ctx,
              cudaMemcpyAsync(dPositions, positions.data(),
                              positions.size() * sizeof(int64_t),
                              cudaMemcpyHostToDevice, state.stream),
              "embedding_grad lists")))
    return;
  elementwise(ctx, "embedding_grad", vocab * hidden,
              [=] __device__(int64_t e) {
                int64_t v = e / hidden, h = e % hidden;
                double acc = 0.0;
                for (int64_t p = dBegin[v]; p < dBegin[v + 1]; ++p)
                  acc += float(g[dPositions[p] * hidden + h]);
                y[e] = T(static_cast<float>(acc));
              });
  // The lists must outlive the kernel: wait before the scratch goes.
  check(ctx, cudaStreamSynchronize(state.stream), "embedding_grad");
  ctx->touch(out, vocab * hidden * sizeof(T));
}

void embedding_grad(tmrt_context *ctx, int64_t dy, int64_t ids, int64_t out,
                    int64_t num_ids, int64_t hidden, int64_t vocab,
                    int64_t id_bits, int64_t split_parts,
                    int64_t split_stride) {
  int64_t first = 0;
  if (!partFirst(ctx, "embedding_grad", vocab, split_parts, split_stride,
                 first))
    return;
  withFloatType(ctx, "embedding_grad", {dy, out}, [&](auto type) {
    embedding_gradOf<decltype(type)>(ctx, dy, ids, out, num_ids, hidden, vocab,
                                     id_bits, first, vocab * split_parts);
  });
}

/// Cross-entropy: each row's loss in double (exp and log: CUDA's, within
/// an ulp of libm's), then one thread adds the rows' losses in row order.
template <typename T>
void cross_entropyOf(tmrt_context *ctx, int64_t logits, int64_t targets,
                     int64_t loss_sum, int64_t count, int64_t rows,
                     int64_t vocab, int64_t ignore_index, int64_t id_bits,
                     double label_smoothing) {
  const T *l = ctx->at<T>(logits);
  const void *tv = idsAt(ctx, targets, id_bits);
  Scratch rowLoss(ctx, (rows > 0 ? rows : 1) * (sizeof(double) + 1));
  double *loss = rowLoss.as<double>();
  FirstBad bad(ctx);
  unsigned long long *badSlot = bad.slot();
  if (!loss || !badSlot)
    return;
  uint8_t *valid = reinterpret_cast<uint8_t *>(loss + (rows > 0 ? rows : 1));
  elementwise(ctx, "cross_entropy", rows, [=] __device__(int64_t r) {
    loss[r] = 0.0;
    valid[r] = 0;
    int64_t t = idAt(tv, r, id_bits);
    if (t == ignore_index)
      return;
    if (t < 0 || t >= vocab) {
      atomicMin(badSlot, static_cast<unsigned long long>(r));
      return;
    }
    loss[r] =
        trainmem::rows::crossEntropy(l + r * vocab, vocab, t, label_smoothing);
    valid[r] = 1;
  });
  float *sumOut = ctx->at<float>(loss_sum);
  int64_t *countOut = ctx->at<int64_t>(count);
  elementwise(ctx, "cross_entropy", 1, [=] __device__(int64_t) {
    double sum = 0.0;
    int64_t n = 0;
    for (int64_t r = 0; r < rows; ++r) {
      sum += loss[r];
      n += valid[r];
    }
    *sumOut = static_cast<float>(sum);
    *countOut = n;
  });
  if (int64_t r = bad.read(ctx); r >= 0)
    ctx->fail("target " + std::to_string(idOnDevice(ctx, tv, r, id_bits)) +
              " at position " + std::to_string(r) +
              " is outside the vocabulary of " + std::to_string(vocab));
  ctx->touch(loss_sum, 4);
  ctx->touch(count, 8);
}

template <typename T>
void cross_entropy_gradOf(tmrt_context *ctx, int64_t dloss, int64_t logits,
                          int64_t targets, int64_t out, int64_t rows,
                          int64_t vocab, int64_t ignore_index,
                          int64_t id_bits, double label_smoothing) {
  const float *dl = ctx->at<float>(dloss);
  const T *l = ctx->at<T>(logits);
  const void *tv = idsAt(ctx, targets, id_bits);
  T *y = ctx->at<T>(out);
  elementwise(ctx, "cross_entropy_grad", rows, [=] __device__(int64_t r) {
    double g = *dl;
    int64_t t = idAt(tv, r, id_bits);
    T *yr = y + r * vocab;
    if (t == ignore_index || t < 0 || t >= vocab) {
      for (int64_t c = 0; c < vocab; ++c)
        yr[c] = T(0.0f);
      return;
    }
    trainmem::rows::crossEntropyGrad(l + r * vocab, yr, vocab, t, g,
                                     label_smoothing);
  });
  ctx->touch(out, rows * vocab * sizeof(T));
}

template <typename T>
void row_maxOf(tmrt_context *ctx, int64_t in, int64_t out, int64_t rows,
               int64_t cols) {
  const T *x = ctx->at<T>(in);
  float *y = ctx->at<float>(out);
  elementwise(ctx, "row_max", rows, [=] __device__(int64_t r) {
    y[r] = static_cast<float>(trainmem::rows::rowMax(x + r * cols, cols));
  });
  ctx->touch(out, rows * 4);
}

/// Vocabulary-parallel cross-entropy: one thread per row, the CPU's row
/// math (RowKernels.h).
template <typename T>
void cross_entropy_partOf(tmrt_context *ctx, int64_t logits, int64_t targets,
                          int64_t max, int64_t sum_exp, int64_t target_logit,
                          int64_t rows, int64_t vocab, int64_t ignore_index,
                          int64_t id_bits, int64_t first, int64_t whole) {
  const T *l = ctx->at<T>(logits);
  const void *tv = idsAt(ctx, targets, id_bits);
  const float *most = ctx->at<float>(max);
  float *se = ctx->at<float>(sum_exp), *tl = ctx->at<float>(target_logit);
  FirstBad bad(ctx);
  unsigned long long *badSlot = bad.slot();
  if (!badSlot)
    return;
  elementwise(ctx, "cross_entropy_part", rows, [=] __device__(int64_t r) {
    int64_t t = idAt(tv, r, id_bits);
    bool ignored = t == ignore_index;
    if (!ignored && (t < 0 || t >= whole))
      atomicMin(badSlot, static_cast<unsigned long long>(r));
    trainmem::rows::crossEntropyPart(l + r * vocab, vocab, first,
                                     ignored ? -1 : t, most[r], se[r], tl[r]);
  });
  if (int64_t r = bad.read(ctx); r >= 0)
    ctx->fail("target " + std::to_string(idOnDevice(ctx, tv, r, id_bits)) +
              " at position " + std::to_string(r) +
              " is outside the vocabulary of " + std::to_string(whole));
  ctx->touch(sum_exp, rows * 4);
  ctx->touch(target_logit, rows * 4);
}

void cross_entropy_part(tmrt_context *ctx, int64_t logits, int64_t targets,
                        int64_t max, int64_t sum_exp, int64_t target_logit,
                        int64_t rows, int64_t vocab, int64_t ignore_index,
                        int64_t id_bits, int64_t split_parts,
                        int64_t split_stride) {
  int64_t first = 0;
  if (!partFirst(ctx, "cross_entropy_part", vocab, split_parts, split_stride,
                 first))
    return;
  withFloatType(ctx, "cross_entropy_part", {logits}, [&](auto type) {
    cross_entropy_partOf<decltype(type)>(
        ctx, logits, targets, max, sum_exp, target_logit, rows, vocab,
        ignore_index, id_bits, first, vocab * split_parts);
  });
}

template <typename T>
void cross_entropy_part_gradOf(tmrt_context *ctx, int64_t d_sum_exp,
                               int64_t d_target_logit, int64_t logits,
                               int64_t max, int64_t targets, int64_t out,
                               int64_t rows, int64_t vocab,
                               int64_t ignore_index, int64_t id_bits,
                               int64_t first) {
  const float *dse = ctx->at<float>(d_sum_exp);
  const float *dtl = ctx->at<float>(d_target_logit);
  const float *most = ctx->at<float>(max);
  const T *l = ctx->at<T>(logits);
  const void *tv = idsAt(ctx, targets, id_bits);
  T *y = ctx->at<T>(out);
  elementwise(ctx, "cross_entropy_part_grad", rows, [=] __device__(int64_t r) {
    int64_t t = idAt(tv, r, id_bits);
    T *yr = y + r * vocab;
    if (t == ignore_index) {
      for (int64_t c = 0; c < vocab; ++c)
        yr[c] = T(0.0f);
      return;
    }
    trainmem::rows::crossEntropyPartGrad(l + r * vocab, yr, vocab, first, t,
                                         most[r], dse[r], dtl[r]);
  });
  ctx->touch(out, rows * vocab * sizeof(T));
}

void cross_entropy_part_grad(tmrt_context *ctx, int64_t d_sum_exp,
                             int64_t d_target_logit, int64_t logits,
                             int64_t max, int64_t targets, int64_t out,
                             int64_t rows, int64_t vocab, int64_t ignore_index,
                             int64_t id_bits, int64_t split_parts,
                             int64_t split_stride) {
  int64_t first = 0;
  if (!partFirst(ctx, "cross_entropy_part_grad", vocab, split_parts,
                 split_stride, first))
    return;
  withFloatType(ctx, "cross_entropy_part_grad", {logits, out}, [&](auto type) {
    cross_entropy_part_gradOf<decltype(type)>(
        ctx, d_sum_exp, d_target_logit, logits, max, targets, out, rows, vocab,
        ignore_index, id_bits, first);
  });
}

void cross_entropy_merge(tmrt_context *ctx, int64_t sum_exp,
                         int64_t target_logit, int64_t max, int64_t targets,
                         int64_t loss_sum, int64_t count, int64_t rows,
                         int64_t ignore_index, int64_t id_bits) {
  const float *se = ctx->at<float>(sum_exp);
  const float *tl = ctx->at<float>(target_logit);
  const float *most = ctx->at<float>(max);
  const void *tv = idsAt(ctx, targets, id_bits);
  float *sumOut = ctx->at<float>(loss_sum);
  int64_t *countOut = ctx->at<int64_t>(count);
  // One thread adds the rows in order, in double: the CPU's sum.
  elementwise(ctx, "cross_entropy_merge", 1, [=] __device__(int64_t) {
    double sum = 0.0;
    int64_t n = 0;
    for (int64_t r = 0; r < rows; ++r) {
      if (idAt(tv, r, id_bits) == ignore_index)
        continue;
      sum += trainmem::rows::crossEntropyMerge(se[r], tl[r], most[r]);
      ++n;
    }
    *sumOut = static_cast<float>(sum);
    *countOut = n;
  });
  ctx->touch(loss_sum, 4);
  ctx->touch(count, 8);
}

void cross_entropy_merge_grad(tmrt_context *ctx, int64_t dloss, int64_t sum_exp,
                              int64_t targets, int64_t d_sum_exp,
                              int64_t d_target_logit, int64_t rows,
                              int64_t ignore_index, int64_t id_bits) {
  const float *dl = ctx->at<float>(dloss);
  const float *se = ctx->at<float>(sum_exp);
  const void *tv = idsAt(ctx, targets, id_bits);
  float *dse = ctx->at<float>(d_sum_exp), *dtl = ctx->at<float>(d_target_logit);
  elementwise(ctx, "cross_entropy_merge_grad", rows, [=] __device__(int64_t r) {
    double g = *dl;
    bool valid = idAt(tv, r, id_bits) != ignore_index;
    dse[r] = valid ? static_cast<float>(g / static_cast<double>(se[r])) : 0.0f;
    dtl[r] = valid ? static_cast<float>(-g) : 0.0f;
  });
  ctx->touch(d_sum_exp, rows * 4);
  ctx->touch(d_target_logit, rows * 4);
}

void mean_loss(tmrt_context *ctx, int64_t loss_sum, int64_t count,
               int64_t out, int64_t weight, double scale) {
  const float *sumIn = ctx->at<float>(loss_sum);
  const int64_t *countIn = ctx->at<int64_t>(count);
  const float *weightIn = weight >= 0 ? ctx->at<float>(weight) : nullptr;
  float *y = ctx->at<float>(out);
  elementwise(ctx, "mean_loss", 1, [=] __device__(int64_t) {
    double s = scale;
    if (weightIn)
      s *= *weightIn;
    double sum = *sumIn;
    int64_t n = *countIn;
    *y = static_cast<float>(s * sum /
                            static_cast<double>(n > 1 ? n : int64_t(1)));
  });
  ctx->touch(out, 4);
}

//===----------------------------------------------------------------------===//
// GEMMs through cuBLAS (f32 with TF32 off unless asked, bf16/f16 in with
// f32 compute, C rounded once), one call per batch
//===----------------------------------------------------------------------===//

template <typename T> constexpr cudaDataType cudaTypeOf() {
  if constexpr (std::is_same_v<T, float>)
    return CUDA_R_32F;
  else if constexpr (std::is_same_v<T, trainmem::BFloat16>)
    return CUDA_R_16BF;
  else
    return CUDA_R_16F;
}

template <typename T>
void matmulOf(tmrt_context *ctx, int64_t a, int64_t b, int64_t c, int64_t m,
              int64_t n, int64_t k, int64_t a_rs, int64_t a_cs, int64_t b_rs,
              int64_t b_cs, int64_t c0, int64_t c1, int64_t c2, int64_t c3,
              int64_t a0, int64_t a1, int64_t a2, int64_t a3, int64_t b0,
              int64_t b1, int64_t b2, int64_t b3) {
  const T *pa = ctx->at<T>(a), *pb = ctx->at<T>(b);
  T *pc = ctx->at<T>(c);
  CudaState &state = stateOf(ctx);
  // Row-major C = A B is column-major Cᵀ = Bᵀ Aᵀ. A matrix stored with
  // unit column stride (row-major, leading dimension its row stride) is
  // its transpose in column-major terms: no transpose asked; one with
  // unit row stride needs the transpose.
  auto layout = [](int64_t rs, int64_t cs, int64_t rows, int64_t cols,
                   cublasOperation_t &op, int64_t &ld) {
    if (cs == 1 && rs >= (cols > 1 ? cols : 1)) {
      op = CUBLAS_OP_N;
      ld = rs > 1 ? rs : 1;
      return true;
    }
    if (rs == 1 && cs >= (rows > 1 ? rows : 1)) {
      op = CUBLAS_OP_T;
      ld = cs > 1 ? cs : 1;
      return true;
    }
    return false;
  };
  cublasOperation_t opA, opB;
  int64_t lda = 0, ldb = 0;
  bool blas = layout(a_rs, a_cs, m, k, opA, lda) &&
              layout(b_rs, b_cs, k, n, opB, ldb) && m <= INT32_MAX &&
              n <= INT32_MAX && k <= INT32_MAX && lda <= INT32_MAX &&
              ldb <= INT32_MAX;
  cublasComputeType_t compute =
      std::is_same_v<T, float> && state.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                             : CUBLAS_COMPUTE_32F;
  const float one = 1.0f, zero = 0.0f;
  for (int64_t i0 = 0; i0 < c0; ++i0)
    for (int64_t i1 = 0; i1 < c1; ++i1)
      for (int64_t i2 = 0; i2 < c2; ++i2)
        for (int64_t i3 = 0; i3 < c3; ++i3) {
          int64_t batch = ((i0 * c1 + i1) * c2 + i2) * c3 + i3;
          const T *ma = pa + i0 * a0 + i1 * a1 + i2 * a2 + i3 * a3;
          const T *mb = pb + i0 * b0 + i1 * b1 + i2 * b2 + i3 * b3;
          T *mc = pc + batch * m * n;
          if (m == 0 || n == 0)
            continue;
          if (blas && k > 0) {
            cublasStatus_t status = state.blas.gemmEx(
                state.handle, opB, opA, static_cast<int>(n),
                static_cast<int>(m), static_cast<int>(k), &one, mb,
                cudaTypeOf<T>(), static_cast<int>(ldb), ma, cudaTypeOf<T>(),
                static_cast<int>(lda), &zero, mc, cudaTypeOf<T>(),
                static_cast<int>(n), compute, CUBLAS_GEMM_DEFAULT);
            if (status != CUBLAS_STATUS_SUCCESS)
              return ctx->fail("cuda: cublasGemmEx failed with status " +
                               std::to_string(static_cast<int>(status)) +
                               " (" + std::to_string(m) + " x " +
                               std::to_string(n) + " x " + std::to_string(k) +
                               ")");
            continue;
          }
          // Operands BLAS cannot take (neither stride unit) or k = 0: one
          // thread per element of C, the sum in double, as the CPU's
          // fallback.
          elementwise(ctx, "matmul", m * n, [=] __device__(int64_t e) {
            int64_t i = e / n, j = e % n;
            double acc = 0.0;
            for (int64_t p = 0; p < k; ++p)
              acc += static_cast<double>(float(ma[i * a_rs + p * a_cs])) *
                     float(mb[p * b_rs + j * b_cs]);
            mc[e] = T(static_cast<float>(acc));
          });
        }
  ctx->touch(c, c0 * c1 * c2 * c3 * m * n * sizeof(T));
}

//===----------------------------------------------------------------------===//
// The optimizer block: schedule, clipping, AdamW and SGD. A tensor whose
// gradient is not finite keeps its state, as on the CPU (the check is a
// device flag read back).
//===----------------------------------------------------------------------===//

void lr_schedule(tmrt_context *ctx, int64_t step, int64_t out, double peak_lr,
                 double min_lr, int64_t warmup_steps, int64_t total_steps) {
  const int64_t *stepIn = ctx->at<int64_t>(step);
  float *y = ctx->at<float>(out);
  elementwise(ctx, "lr_schedule", 1, [=] __device__(int64_t) {
    *y = static_cast<float>(trainmem::scheduledLearningRate(
        peak_lr, min_lr, warmup_steps, total_steps, *stepIn));
  });
  ctx->touch(out, 4);
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
  if (!allFinite(ctx, g, n)) {
    if (ctx->hasError)
      return;
    copyArena(ctx, offsetOf(param), offsetOf(new_param), n * 4);
    copyArena(ctx, offsetOf(m), offsetOf(new_m), n * 4);
    copyArena(ctx, offsetOf(v), offsetOf(new_v), n * 4);
    ctx->recordSkipped(param);
  } else {
    // The step's constants in double on the host, as the CPU kernel.
    const trainmem::AdamWStep update(scalarAt<float>(ctx, lr), beta1, beta2,
                                     eps, weight_decay,
                                     scalarAt<int64_t>(ctx, step));
    elementwise(ctx, "adamw", n, [=] __device__(int64_t i) {
      float newParam, newM, newV;
      update.apply(p[i], float(g[i]), mv[i], vv[i], newParam, newM, newV);
      np[i] = newParam;
      nm[i] = newM;
      nv[i] = newV;
    });
  }
  ctx->touch(new_param, n * 4);
  ctx->touch(new_m, n * 4);
  ctx->touch(new_v, n * 4);
}

/// An optimizer of Optimizers.def on f32 state: `update.apply(p, g, m,
/// newParam, newM)` per element, or the parameter and the state carried
/// over when a gradient is not finite.
template <typename T, typename Step>
void oneStateOf(tmrt_context *ctx, const char *kernel, int64_t param,
                int64_t grad, int64_t m, int64_t new_param, int64_t new_m,
                int64_t n, const Step &update) {
  const float *p = ctx->at<float>(param), *mv = ctx->at<float>(m);
  const T *g = ctx->at<T>(grad);
  float *np = ctx->at<float>(new_param), *nm = ctx->at<float>(new_m);
  if (!allFinite(ctx, g, n)) {
    if (ctx->hasError)
      return;
    copyArena(ctx, offsetOf(param), offsetOf(new_param), n * 4);
    copyArena(ctx, offsetOf(m), offsetOf(new_m), n * 4);
    ctx->recordSkipped(param);
  } else {
    elementwise(ctx, kernel, n, [=] __device__(int64_t i) {
      float newParam, newM;
      update.apply(p[i], float(g[i]), mv[i], newParam, newM);
      np[i] = newParam;
      nm[i] = newM;
    });
  }
  ctx->touch(new_param, n * 4);
  ctx->touch(new_m, n * 4);
}

// The f32 kernels of Optimizers.def (the 8-bit ones: CudaState.cu); the
// step's scalars (a decay factor in double) on the host, as the CPU's.
#define TMRT_ONE_STATE_OPTIMIZER(kernel, Name, Step, parameters, arguments)    \
  void kernel(tmrt_context *ctx, int64_t param, int64_t grad, int64_t m,       \
              int64_t lr, int64_t new_param, int64_t new_m, int64_t n,         \
              TMRT_UNPAREN(parameters)) {                                      \
    withFloatType(ctx, #kernel, {grad}, [&](auto type) {                       \
      oneStateOf<decltype(type)>(                                              \
          ctx, #kernel, param, grad, m, new_param, new_m, n,                   \
          trainmem::Step(scalarAt<float>(ctx, lr), TMRT_UNPAREN(arguments)));  \
    });                                                                        \
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
    copyArena(ctx, offsetOf(h), offsetOf(new_h), n * 4);
  if (!allFinite(ctx, g, n)) {
    if (ctx->hasError)
      return;
    copyArena(ctx, offsetOf(param), offsetOf(new_param), n * 4);
    copyArena(ctx, offsetOf(m), offsetOf(new_m), n * 4);
    ctx->recordSkipped(param);
  } else {
    const trainmem::SophiaStep update(scalarAt<float>(ctx, lr), beta1, rho,
                                      batch, eps, weight_decay);
    elementwise(ctx, "sophia", n, [=] __device__(int64_t i) {
      float newParam, newM;
      update.apply(p[i], float(g[i]), mv[i], hv[i], newParam, newM);
      np[i] = newParam;
      nm[i] = newM;
    });
  }
  ctx->touch(new_param, n * 4);
  ctx->touch(new_m, n * 4);
  ctx->touch(new_h, n * 4);
}

template <typename T>
void hessian_emaOf(tmrt_context *ctx, int64_t h, int64_t grad, int64_t new_h,
                   int64_t n, double beta2) {
  const float *hv = ctx->at<float>(h);
  const T *g = ctx->at<T>(grad);
  float *nh = ctx->at<float>(new_h);
  if (!allFinite(ctx, g, n)) {
    if (ctx->hasError)
      return;
    copyArena(ctx, offsetOf(h), offsetOf(new_h), n * 4);
    ctx->recordSkipped(h);
  } else {
    const trainmem::HessianEMAStep update(beta2);
    elementwise(ctx, "hessian_ema", n, [=] __device__(int64_t i) {
      nh[i] = update.apply(hv[i], float(g[i]));
    });
  }
  ctx->touch(new_h, n * 4);
}

template <typename T>
void sgdOf(tmrt_context *ctx, int64_t param, int64_t grad, int64_t lr,
           int64_t buffer, int64_t new_param, int64_t new_buffer, int64_t n,
           double momentum, double weight_decay, int64_t nesterov) {
  const float *p = ctx->at<float>(param);
  const T *g = ctx->at<T>(grad);
  const float *b = buffer >= 0 ? ctx->at<float>(buffer) : nullptr;
  float *np = ctx->at<float>(new_param);
  float *nb = buffer >= 0 ? ctx->at<float>(new_buffer) : nullptr;
  if (!allFinite(ctx, g, n)) {
    if (ctx->hasError)
      return;
    copyArena(ctx, offsetOf(param), offsetOf(new_param), n * 4);
    if (nb)
      copyArena(ctx, offsetOf(buffer), offsetOf(new_buffer), n * 4);
    ctx->recordSkipped(param);
  } else {
    double rate = scalarAt<float>(ctx, lr);
    trainmem::SGDMomentumStep update{rate, momentum, weight_decay,
                                     nesterov != 0};
    elementwise(ctx, "sgd", n, [=] __device__(int64_t i) {
      if (b) {
        float newParam, newBuffer;
        update.apply(p[i], float(g[i]), b[i], newParam, newBuffer);
        np[i] = newParam;
        nb[i] = newBuffer;
      } else {
        np[i] = static_cast<float>(p[i] -
                                   rate * (float(g[i]) + weight_decay * p[i]));
      }
    });
  }
  ctx->touch(new_param, n * 4);
  if (nb)
    ctx->touch(new_buffer, n * 4);
}

// Clipping: the exact sum of squares (ExactSum.h) on the device. Each
// thread adds its elements' squares into words of its own, normalizes them
// and adds them to the context's words by atomic integer additions: exact,
// so the sum does not depend on the threads or the order, and it is the
// CPU's. Only the 24 words are read back, by clip_finish.

template <typename T>
__global__ void clipAccumulateKernel(const T *g, int64_t n, int64_t *total) {
  int64_t words[trainmem::kExactSumWords] = {};
  trainmem::ExactSquareSum sum(words);
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride)
    sum.addSquare(float(g[i]));
  sum.normalize();
  for (int k = 0; k < trainmem::kExactSumWords; ++k)
    if (words[k] != 0)
      atomicAdd(reinterpret_cast<unsigned long long *>(total + k),
                static_cast<unsigned long long>(words[k]));
}

void clip_begin(tmrt_context *ctx) {
  trainmem::ExactSquareSum(ctx->clipSum).clear();
  CudaState &state = stateOf(ctx);
  check(ctx,
        cudaMemsetAsync(state.clipWords, 0, sizeof ctx->clipSum, state.stream),
        "clearing the clip's sum");
}

template <typename T>
void clipAccumulateOf(tmrt_context *ctx, int64_t grad, int64_t n) {
  if (n <= 0)
    return;
  constexpr int kThreads = 256;
  int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 1024);
  CudaState &state = stateOf(ctx);
  clipAccumulateKernel<<<static_cast<unsigned>(blocks), kThreads, 0,
                         state.stream>>>(ctx->at<T>(grad), n, state.clipWords);
  check(ctx, cudaGetLastError(), "launching clip_accumulate");
}

void clip_accumulate(tmrt_context *ctx, int64_t grad, int64_t n) {
  withFloatType(ctx, "clip_accumulate", {grad}, [&](auto type) {
    clipAccumulateOf<decltype(type)>(ctx, grad, n);
  });
}

/// The context's words normalized (limbs below 2^32, as the CPU keeps
/// them), so that stored sums are the CPU's words.
void normalizeClipWords(tmrt_context *ctx) {
  int64_t *words = stateOf(ctx).clipWords;
  elementwise(ctx, "clip sum", 1, [=] __device__(int64_t) {
    trainmem::ExactSquareSum(words).normalize();
  });
}

void clip_store_sum(tmrt_context *ctx, int64_t out) {
  normalizeClipWords(ctx);
  CudaState &state = stateOf(ctx);
  check(ctx,
        cudaMemcpyAsync(ctx->at<int64_t>(out), state.clipWords,
                        sizeof ctx->clipSum, cudaMemcpyDeviceToDevice,
                        state.stream),
        "storing the clip's sum");
  ctx->touch(out, sizeof ctx->clipSum);
}

void clip_load_sum(tmrt_context *ctx, int64_t sum) {
  CudaState &state = stateOf(ctx);
  check(ctx,
        cudaMemcpyAsync(state.clipWords, ctx->at<int64_t>(sum),
                        sizeof ctx->clipSum, cudaMemcpyDeviceToDevice,
                        state.stream),
        "loading the clip's sum");
}

void clip_merge_sum(tmrt_context *ctx, int64_t sum) {
  int64_t *words = stateOf(ctx).clipWords;
  const int64_t *other = ctx->at<int64_t>(sum);
  elementwise(ctx, "clip sum", 1, [=] __device__(int64_t) {
    trainmem::ExactSquareSum(words).merge(other);
  });
}

void clip_finish(tmrt_context *ctx, int64_t norm, double max_norm) {
  std::vector<int64_t> words;
  if (!readBack(ctx, stateOf(ctx).clipWords, trainmem::kExactSumWords, words))
    return;
  std::copy(words.begin(), words.end(), ctx->clipSum);
  double value = std::sqrt(trainmem::ExactSquareSum(ctx->clipSum).value());
  ctx->clipScale = std::min(1.0, max_norm / (value + 1e-6));
  float norm32 = static_cast<float>(value);
  writeArena(ctx, offsetOf(norm), &norm32, 4);
  ctx->touch(norm, 4);
}

template <typename T>
void clip_applyOf(tmrt_context *ctx, int64_t grad, int64_t out, int64_t n) {
  const T *g = ctx->at<T>(grad);
  T *y = ctx->at<T>(out);
  double scale = ctx->clipScale;
  elementwise(ctx, "clip_apply", n, [=] __device__(int64_t i) {
    y[i] = T(static_cast<float>(float(g[i]) * scale));
  });
  ctx->touch(out, n * sizeof(T));
}

//===----------------------------------------------------------------------===//
// Data movement: strided copies, micro-batch slices, counting targets
//===----------------------------------------------------------------------===//

/// copy_strided's extents and input strides, place_strided's extents and
/// output strides (captured by value).
struct Strides6 {
  int64_t d[6], s[6];
  /// The strided offset of row-major element `e`.
  __device__ int64_t at(int64_t e) const {
    int64_t at = 0;
    for (int k = 5; k >= 0; --k) {
      at += (e % d[k]) * s[k];
      e /= d[k];
    }
    return at;
  }
};

template <typename T>
void copy_stridedOf(tmrt_context *ctx, int64_t in, int64_t out,
                    Strides6 shape) {
  // A copy moves bits, by their width: i32 ids (whose references carry the
  // f32 code: a model's shifted labels) and every float pattern arrive as
  // they were.
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>;
  const Bits *x = reinterpret_cast<const Bits *>(ctx->at<T>(in));
  Bits *y = reinterpret_cast<Bits *>(ctx->at<T>(out));
  int64_t total = 1;
  for (int64_t d : shape.d)
    total *= d;
  elementwise(ctx, "copy_strided", total,
              [=] __device__(int64_t e) { y[e] = x[shape.at(e)]; });
  ctx->touch(out, total * sizeof(T));
}

void copy_strided(tmrt_context *ctx, int64_t in, int64_t out, int64_t d0,
                  int64_t d1, int64_t d2, int64_t d3, int64_t d4, int64_t d5,
                  int64_t s0, int64_t s1, int64_t s2, int64_t s3, int64_t s4,
                  int64_t s5) {
  Strides6 shape = {{d0, d1, d2, d3, d4, d5}, {s0, s1, s2, s3, s4, s5}};
  for (int64_t d : shape.d)
    if (d == 0)
      return;
  withFloatType(ctx, "copy_strided", {in, out}, [&](auto type) {
    copy_stridedOf<decltype(type)>(ctx, in, out, shape);
  });
}

template <typename T>
void place_stridedOf(tmrt_context *ctx, int64_t in, int64_t out,
                     Strides6 shape) {
  const T *x = ctx->at<T>(in);
  T *y = ctx->at<T>(out);
  int64_t total = 1, last = 0;
  for (int k = 0; k < 6; ++k) {
    total *= shape.d[k];
    last += (shape.d[k] - 1) * shape.s[k];
  }
  elementwise(ctx, "place_strided", total,
              [=] __device__(int64_t e) { y[shape.at(e)] = x[e]; });
  ctx->touch(out, static_cast<uint64_t>(last + 1) * sizeof(T));
}

void place_strided(tmrt_context *ctx, int64_t in, int64_t out, int64_t d0,
                   int64_t d1, int64_t d2, int64_t d3, int64_t d4, int64_t d5,
                   int64_t s0, int64_t s1, int64_t s2, int64_t s3, int64_t s4,
                   int64_t s5) {
  Strides6 shape = {{d0, d1, d2, d3, d4, d5}, {s0, s1, s2, s3, s4, s5}};
  for (int64_t d : shape.d)
    if (d == 0)
      return;
  withFloatType(ctx, "place_strided", {in, out}, [&](auto type) {
    place_stridedOf<decltype(type)>(ctx, in, out, shape);
  });
}

template <typename U>
void padWith(tmrt_context *ctx, U *y, int64_t from, int64_t to, U value) {
  elementwise(ctx, "slice_rows", to - from,
              [=] __device__(int64_t i) { y[from + i] = value; });
}

void slice_rows(tmrt_context *ctx, int64_t in, int64_t out, int64_t offset,
                int64_t rows, int64_t available, int64_t row_elems,
                int64_t kind, int64_t padding) {
  // kind: 0 a float tensor (its reference says which), 32 or 64 integers.
  int64_t dtype = dtypeOf(in);
  if (dtypeOf(out) != dtype || (kind != 0 && dtype != TMRT_DTYPE_F32))
    return ctx->fail("slice_rows: input and result of different element "
                     "types");
  int64_t size = kind == 64 ? 8 : kind == 32 || dtype == TMRT_DTYPE_F32 ? 4 : 2;
  int64_t copied = std::max<int64_t>(0, std::min(rows, available - offset));
  if (copied > 0)
    copyArena(ctx, offsetOf(in) + offset * row_elems * size, offsetOf(out),
              copied * row_elems * size);
  int64_t from = copied * row_elems, to = rows * row_elems;
  if (to > from) {
    if (kind == 32)
      padWith(ctx, ctx->at<int32_t>(out), from, to,
              static_cast<int32_t>(padding));
    else if (kind == 64)
      padWith(ctx, ctx->at<int64_t>(out), from, to, padding);
    else if (dtype == TMRT_DTYPE_BF16)
      padWith(ctx, ctx->at<trainmem::BFloat16>(out), from, to,
              trainmem::BFloat16(static_cast<float>(padding)));
    else if (dtype == TMRT_DTYPE_F16)
      padWith(ctx, ctx->at<trainmem::Float16>(out), from, to,
              trainmem::Float16(static_cast<float>(padding)));
    else
      padWith(ctx, ctx->at<float>(out), from, to,
              static_cast<float>(padding));
  }
  ctx->touch(out, rows * row_elems * size);
}

void count_valid(tmrt_context *ctx, int64_t targets, int64_t out, int64_t n,
                 int64_t ignore_index, int64_t id_bits) {
  const void *tv = idsAt(ctx, targets, id_bits);
  int64_t *y = ctx->at<int64_t>(out);
  elementwise(ctx, "count_valid", 1, [=] __device__(int64_t) {
    int64_t count = 0;
    for (int64_t i = 0; i < n; ++i)
      count += idAt(tv, i, id_bits) != ignore_index;
    *y = count;
  });
  ctx->touch(out, 8);
}

/// Rotary position embedding, as the CPU kernel (pow, cos and sin in
/// double: CUDA's, within an ulp of libm's).
template <typename T>
void ropeOf(tmrt_context *ctx, int64_t in, int64_t out, int64_t n0, int64_t n1,
            int64_t s, int64_t d, int64_t s0, int64_t s1, int64_t ss,
            int64_t sd, double theta, int64_t inverse, int64_t halves,
            int64_t context_parts, int64_t context_stride,
            int64_t context_balanced) {
  const T *x = ctx->at<T>(in);
  T *y = ctx->at<T>(out);
  double sign = inverse ? -1.0 : 1.0;
  int64_t rows = n0 * n1 * s, half = d / 2;
  trainmem::ContextChunks context;
  if (context_parts > 1)
    context = {context_parts, splitPosition(ctx, context_parts, context_stride),
               context_balanced != 0};
  // Pair i: elements (2i, 2i + 1), or (i, i + d/2).
  int64_t step = halves ? 1 : 2, partner = halves ? half : 1;
  elementwise(ctx, "rope", rows * half, [=] __device__(int64_t e) {
    int64_t r = e / half, i = e % half;
    int64_t pos = r % s, rest = r / s;
    int64_t i1 = rest % n1, i0 = rest / n1;
    const T *xr = x + i0 * s0 + i1 * s1 + pos * ss;
    double at = static_cast<double>(context.wholeRow(pos, s));
    double angle = sign * at * pow(theta, -2.0 * i / d);
    double c = cos(angle), sn = sin(angle);
    int64_t a = step * i, b = a + partner;
    double x0 = float(xr[a * sd]), x1 = float(xr[b * sd]);
    y[r * d + a] = T(static_cast<float>(x0 * c - x1 * sn));
    y[r * d + b] = T(static_cast<float>(x0 * sn + x1 * c));
  });
  ctx->touch(out, rows * d * sizeof(T));
}

// The entry points of the float kernels above (FloatTypes.h): each
// dispatches on the element type its operands share.
#define TMRT_FLOAT_fill (out)
#define TMRT_FLOAT_bias_add (in, bias, out)
#define TMRT_FLOAT_bias_gelu (in, bias, out)
#define TMRT_FLOAT_bias_gelu_grad (dy, x, bias, out)
#define TMRT_FLOAT_layer_norm (in, gamma, beta, out)
#define TMRT_FLOAT_rms_norm (in, gamma, out)
#define TMRT_FLOAT_softmax_grad (dy, y, out)
#define TMRT_FLOAT_cross_entropy (logits)
#define TMRT_FLOAT_cross_entropy_grad (logits, out)
#define TMRT_FLOAT_row_max (in)
#define TMRT_FLOAT_matmul (a, b, c)
#define TMRT_FLOAT_adamw (grad)
#define TMRT_FLOAT_sophia (grad)
#define TMRT_FLOAT_hessian_ema (grad)
#define TMRT_FLOAT_sgd (grad)
#define TMRT_FLOAT_clip_apply (grad, out)
#define TMRT_FLOAT_rope (in, out)
#define TMRT_KERNEL(name, parameters, arguments)                               \
  TMRT_FLOAT_ENTRY(name, parameters, arguments)
#include "trainmem-runtime/Kernels.def"

//===----------------------------------------------------------------------===//
// The table
//===----------------------------------------------------------------------===//

// Every kernel of Kernels.def, in its order: one that has no CUDA version
// fails to link (CudaKernels.h declares them all).
Backend makeTable() {
  Backend table = {
      "cuda",     /*hostArena=*/false, allocArena, freeArena,
      writeArena, readArena,           copyArena,
#define TMRT_KERNEL(name, parameters, arguments) name,
#include "trainmem-runtime/Kernels.def"
  };
  table.open = open;
  table.close = close;
  table.synchronize = synchronize;
  table.pinHost = pinHost;
  table.unpinHost = unpinHost;
  return table;
}

} // namespace cuda
} // namespace tmrt

bool tmrt::cudaLibrariesLoad(std::string &report) {
  cuda::Cublas blas;
  std::string error;
  bool ok = cuda::loadCublas(blas, error);
  report = ok ? "cuBLAS: cublasGemmEx and its handle calls found" : error;
  std::string ncclReport;
  ok = cuda::loadNccl(ncclReport) && ok;
  report += "; " + ncclReport;
  return ok;
}

const Backend &tmrt::cudaBackend() {
  static const Backend backend = cuda::makeTable();
  return backend;
}
