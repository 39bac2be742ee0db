//===- Context.h - runtime context internals --------------------*- C++ -*-===//

#ifndef TRAINMEM_RUNTIME_CONTEXT_H
#define TRAINMEM_RUNTIME_CONTEXT_H

#include "trainmem-runtime/Runtime.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tmrt {

/// A fixed pool of workers for data-parallel loops; the caller's thread
/// takes part, so a pool of one runs everything inline.
class ThreadPool {
public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  int size() const { return static_cast<int>(workers.size()) + 1; }
  /// Runs fn(begin, end) over [0, n) split into contiguous chunks of at
  /// least `grain` items.
  void parallelFor(int64_t n, int64_t grain,
                   const std::function<void(int64_t, int64_t)> &fn);

private:
  void workerLoop(int index);
  void stop();
  std::vector<std::thread> workers;
  std::mutex mutex;
  std::condition_variable wake, done;
  const std::function<void(int64_t, int64_t)> *task = nullptr;
  int64_t taskItems = 0, taskChunks = 0;
  std::atomic<int64_t> nextChunk{0};
  int pending = 0;
  uint64_t generation = 0;
  bool stopping = false;
};

struct Backend;
struct Communicator;

} // namespace tmrt

struct tmrt_context {
  /// The tables the context's kernels and collectives go through.
  const tmrt::Backend *backend;
  const tmrt::Communicator *communicator;
  tmrt::ThreadPool pool;
  uint8_t *arena = nullptr;
  uint64_t arenaBytes = 0;
  std::atomic<uint64_t> highWater{0};
  std::atomic<uint64_t> kernelCalls{0};
  std::mutex errorMutex;
  std::string error;
  bool hasError = false;
  double clipSumSquares = 0.0;
  double clipScale = 1.0;
  /// Bytes this rank sent and received through collectives.
  std::atomic<uint64_t> bytesSent{0}, bytesReceived{0};

  tmrt_context(const tmrt::Backend &backend,
               const tmrt::Communicator &communicator, int threads)
      : backend(&backend), communicator(&communicator), pool(threads) {}

  template <typename T> T *at(int64_t offset) {
    return reinterpret_cast<T *>(arena + offset);
  }
  /// Records that [offset, offset + bytes) was written.
  void touch(int64_t offset, uint64_t bytes) {
    uint64_t end = static_cast<uint64_t>(offset) + bytes;
    uint64_t seen = highWater.load(std::memory_order_relaxed);
    while (end > seen &&
           !highWater.compare_exchange_weak(seen, end,
                                            std::memory_order_relaxed)) {
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
