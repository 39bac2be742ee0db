//===- Context.h - runtime context internals --------------------*- C++ -*-===//

#ifndef TRAINMEM_RUNTIME_CONTEXT_H
#define TRAINMEM_RUNTIME_CONTEXT_H

#include "trainmem-runtime/Runtime.h"
#include "trainmem/Support/ExactSum.h"
#include "trainmem/Support/Float16.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tmrt {

/// A fixed pool of workers for data-parallel loops; the caller's thread
/// takes part, so a pool of one runs everything inline. A step makes
/// hundreds of short parallel calls, so idle workers spin a little before
/// they sleep (kSpinMicroseconds), and the caller waits for the chunks,
/// not for every worker to wake: a worker that comes late finds no chunk.
class ThreadPool {
public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  int size() const { return static_cast<int>(workers.size()) + 1; }
  /// Runs fn(begin, end) over [0, n) split into contiguous chunks of at
  /// least `grain` items.
  void parallelFor(int64_t n, int64_t grain,
                   const std::function<void(int64_t, int64_t)> &fn);

  /// How long an idle worker (or a caller waiting for the last chunk) polls
  /// before it sleeps.
  static constexpr int64_t kSpinMicroseconds = 100;

private:
  void workerLoop(int index);
  /// Claims and runs the chunks of task `generation` until none is left.
  void runChunks(uint64_t generation,
                 const std::function<void(int64_t, int64_t)> *fn, int64_t items,
                 int64_t chunks);
  void stop();
  std::vector<std::thread> workers;
  std::mutex mutex;
  std::condition_variable wake, done;
  /// The task, written under `mutex` with `published`.
  const std::function<void(int64_t, int64_t)> *task = nullptr;
  int64_t taskItems = 0, taskChunks = 0;
  /// The task's generation, which idle workers poll.
  std::atomic<uint64_t> published{0};
  /// generation << 32 | the next chunk: a chunk is claimed by a
  /// compare-and-swap that also checks the generation, so a worker that
  /// read an older task never runs a chunk of a newer one.
  std::atomic<uint64_t> ticket{0};
  std::atomic<int64_t> completed{0};
  std::atomic<bool> stopping{false};
};

struct Backend;
struct Communicator;

/// The element type a tensor reference carries (Runtime.h: TMRT_DTYPE_*):
/// what a kernel's view of a buffer reads and writes.
/// Integers, bytes and f32 are references without a type tag.
template <typename T> inline constexpr int64_t kDtypeOf = TMRT_DTYPE_F32;
template <> inline constexpr int64_t kDtypeOf<trainmem::BFloat16> = TMRT_DTYPE_BF16;
template <> inline constexpr int64_t kDtypeOf<trainmem::Float16> = TMRT_DTYPE_F16;

inline int64_t dtypeOf(int64_t ref) { return ref >> TMRT_DTYPE_SHIFT; }
/// The byte offset a reference names in its arena.
inline int64_t offsetOf(int64_t ref) { return ref & (TMRT_HOST_MEMORY - 1); }
/// A reference without its element type: where the buffer is (its offset,
/// with TMRT_HOST_MEMORY for the host arena).
inline int64_t locationOf(int64_t ref) {
  return ref & ((int64_t(1) << TMRT_DTYPE_SHIFT) - 1);
}
/// Whether a reference names the host arena (TMRT_HOST_MEMORY).
inline bool isHostRef(int64_t ref) { return (ref & TMRT_HOST_MEMORY) != 0; }
const char *dtypeName(int64_t dtype);

/// Copies `bytes` from reference `from` to `to`, each in either arena (the
/// backend's copies for its arena), and marks the destination written;
/// with `countTransfer`, bytes that cross between the arenas count as
/// transferred (tmrt_transfer_bytes). Ranges are the caller's to check.
void copyBetweenArenas(tmrt_context *ctx, int64_t from, int64_t to,
                       uint64_t bytes, bool countTransfer);

/// tmrt_transfer on any backend: copyBetweenArenas counting what crosses,
/// after checking that a host reference has a host arena to name.
void transferKernel(tmrt_context *ctx, int64_t from, int64_t to, int64_t bytes);
/// What a transfer between the arenas checks before it copies (each host
/// reference has a host arena); false after failing the context.
bool checkTransferRefs(tmrt_context *ctx, int64_t from, int64_t to);
/// What a transfer records after it copies: `to` written, the bytes that
/// cross counted, and which host tensor a device staging place holds.
void recordTransfer(tmrt_context *ctx, int64_t from, int64_t to,
                    uint64_t bytes);

/// How bf16 GEMMs run (TMRT_BF16_GEMM): `widen` converts tiles to f32 and
/// calls cblas_sgemm, which forms the same sums on every CPU as the f32
/// path; `sbgemm` calls OpenBLAS's cblas_sbgemm, which uses AVX512_BF16
/// where the CPU has it and then sums in another order.
enum class Bf16Gemm { widen, sbgemm };

/// OpenBLAS's cblas_sbgemm (bf16 A and B, f32 C), found in the process at
/// run time: Debian's OpenBLAS 0.3.21 declares it in cblas.h but is built
/// without BUILD_BFLOAT16 and so lacks it; another OpenBLAS may have it.
using SbgemmFn = void (*)(int order, int transA, int transB, int m, int n,
                          int k, float alpha, const uint16_t *a, int lda,
                          const uint16_t *b, int ldb, float beta, float *c,
                          int ldc);
SbgemmFn findSbgemm();

} // namespace tmrt

struct tmrt_context {
  /// The tables the context's kernels and collectives go through.
  const tmrt::Backend *backend;
  const tmrt::Communicator *communicator;
  /// A device backend's own state (its device and stream), from its open.
  void *deviceState = nullptr;
  /// The device tmrt_context_create_on_device asked for, or -1 (the
  /// backend's choice); read by the backend's open.
  int64_t requestedDevice = -1;
  tmrt::ThreadPool pool;
  uint8_t *arena = nullptr;
  uint64_t arenaBytes = 0;
  std::atomic<uint64_t> highWater{0};
  /// The host arena (TMRT_HOST_MEMORY references): host memory on every
  /// backend, planned apart from the arena; its peak measured apart.
  uint8_t *hostArena = nullptr;
  uint64_t hostArenaBytes = 0;
  std::atomic<uint64_t> hostHighWater{0};
  /// Bytes tmrt_transfer moved between the arenas.
  std::atomic<uint64_t> transferBytes{0};
  std::atomic<uint64_t> kernelCalls{0};
  /// Each kernel's calls and seconds (Kernels.def's order) while profiling
  /// (tmrt_profile_enable); empty when not.
  struct KernelTime {
    uint64_t calls = 0;
    double seconds = 0;
  };
  std::vector<KernelTime> profile;
  /// The seconds of each call since tmrt_profile_step_begin, by its number,
  /// summed over the steps, and the next call's number.
  std::vector<double> callSeconds;
  size_t nextCall = 0;
  std::mutex errorMutex;
  std::string error;
  bool hasError = false;
  /// Whether every gradient finite_check saw since finite_begin was finite.
  bool gradientsFinite = true;
  /// Updates skipped for a non-finite gradient: the count, and the first
  /// kMaxSkippedKept parameters' locations (offsets, with TMRT_HOST_MEMORY
  /// for one in the host arena; kernels run one at a time).
  static constexpr size_t kMaxSkippedKept = 64;
  uint64_t skippedUpdates = 0;
  std::vector<int64_t> skippedParams;
  void recordSkipped(int64_t paramRef) {
    ++skippedUpdates;
    int64_t location = tmrt::locationOf(paramRef);
    // An update on a staging copy names the host tensor it came from.
    for (const auto &[copy, host] : staged)
      if (copy == location)
        location = host;
    if (skippedParams.size() < kMaxSkippedKept)
      skippedParams.push_back(location);
  }
  /// The staging copies tmrt_transfer has brought in and not yet sent
  /// back: (device location, host location).
  std::vector<std::pair<int64_t, int64_t>> staged;
  /// The messages of the pipeline exchange begun and not yet ended: sends
  /// (true) and receives, by reference, bytes, peer (ranks from this one)
  /// and tag.
  struct PendingMessage {
    bool send;
    int64_t ref, bytes, peer, tag;
  };
  std::vector<PendingMessage> pendingExchange;
  /// The clip's sum of squares, exact (trainmem/Support/ExactSum.h).
  int64_t clipSum[trainmem::kExactSumWords] = {};
  double clipScale = 1.0;
  tmrt::Bf16Gemm bf16Gemm = tmrt::Bf16Gemm::widen;
  tmrt::SbgemmFn sbgemm = nullptr;
  /// 16-bit GEMMs by path.
  std::atomic<uint64_t> sbgemmCalls{0}, widenedGemmCalls{0};
  /// Bytes this rank sent and received through collectives.
  std::atomic<uint64_t> bytesSent{0}, bytesReceived{0};
  /// Bytes this rank sent per process group, by (size, stride) (collectives
  /// run one at a time, on the step's thread).
  std::map<std::pair<int64_t, int64_t>, uint64_t> groupBytesSent;
  /// Counts `bytes` sent (and as many received) in the group (size,
  /// stride).
  void countTraffic(int64_t groupSize, int64_t groupStride, uint64_t bytes) {
    bytesSent += bytes;
    bytesReceived += bytes;
    groupBytesSent[{groupSize, groupStride}] += bytes;
  }

  tmrt_context(const tmrt::Backend &backend,
               const tmrt::Communicator &communicator, int threads)
      : backend(&backend), communicator(&communicator), pool(threads) {}

  /// The buffer a tensor reference names, as T. A reference of another
  /// element type than T's fails the context (a kernel read as f32 what the
  /// compiler laid out as bf16), and the kernel reads the bytes as T.
  template <typename T> T *at(int64_t ref) {
    if (tmrt::dtypeOf(ref) != tmrt::kDtypeOf<T>)
      failDtype(ref, tmrt::kDtypeOf<T>);
    return reinterpret_cast<T *>(bytesAt(ref));
  }
  /// The first byte of the buffer `ref` names, in its arena. A device
  /// backend's kernels cannot read the host arena: a host reference given
  /// to one fails the context (and names the arena's own offset instead).
  uint8_t *bytesAt(int64_t ref) {
    if (!tmrt::isHostRef(ref))
      return arena + tmrt::offsetOf(ref);
    if (!hostArena || !kernelsReadHost()) {
      failHostRef(ref);
      return arena;
    }
    return hostArena + tmrt::offsetOf(ref);
  }
  bool kernelsReadHost() const;
  void failDtype(int64_t ref, int64_t expected);
  void failHostRef(int64_t ref);
  /// Records that [offset, offset + bytes) of the buffer `ref` names was
  /// written (in the arena it names).
  void touch(int64_t ref, uint64_t bytes) {
    uint64_t end = static_cast<uint64_t>(tmrt::offsetOf(ref)) + bytes;
    std::atomic<uint64_t> &mark =
        tmrt::isHostRef(ref) ? hostHighWater : highWater;
    uint64_t seen = mark.load(std::memory_order_relaxed);
    while (end > seen &&
           !mark.compare_exchange_weak(seen, end, std::memory_order_relaxed)) {
    }
  }
  void fail(const std::string &message) {
    std::lock_guard<std::mutex> lock(errorMutex);
    if (!hasError) {
      error = message;
      hasError = true;
    }
  }
};

#endif // TRAINMEM_RUNTIME_CONTEXT_H
