//===- Context.cpp - context, arena, threads ------------------------------===//

#include "Context.h"

#include <cblas.h>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <stdexcept>

using namespace tmrt;

/// More threads than any machine of this kind has cores by far; a larger
/// count is a typo, not a request.
static constexpr int64_t kMaxThreads = 1024;

ThreadPool::ThreadPool(int threads) {
  try {
    for (int i = 1; i < threads; ++i)
      workers.emplace_back([this, i] { workerLoop(i); });
  } catch (...) {
    // The destructor does not run for a half-built pool: join the workers
    // that did start before passing the error on.
    stop();
    throw;
  }
}

ThreadPool::~ThreadPool() { stop(); }

void ThreadPool::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
  }
  wake.notify_all();
  for (std::thread &worker : workers)
    worker.join();
  workers.clear();
}

void ThreadPool::workerLoop(int) {
  uint64_t seen = 0;
  while (true) {
    const std::function<void(int64_t, int64_t)> *fn;
    int64_t items, chunks;
    {
      std::unique_lock<std::mutex> lock(mutex);
      wake.wait(lock, [&] { return stopping || generation != seen; });
      if (stopping)
        return;
      seen = generation;
      fn = task;
      items = taskItems;
      chunks = taskChunks;
    }
    for (int64_t chunk; (chunk = nextChunk.fetch_add(1)) < chunks;)
      (*fn)(chunk * items / chunks, (chunk + 1) * items / chunks);
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (--pending == 0)
        done.notify_one();
    }
  }
}

void ThreadPool::parallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)> &fn) {
  if (n <= 0)
    return;
  int64_t chunks = std::min<int64_t>(size(), (n + grain - 1) / grain);
  if (chunks <= 1 || workers.empty()) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    task = &fn;
    taskItems = n;
    taskChunks = chunks;
    nextChunk.store(0);
    pending = static_cast<int>(workers.size());
    ++generation;
  }
  wake.notify_all();
  for (int64_t chunk; (chunk = nextChunk.fetch_add(1)) < chunks;)
    fn(chunk * n / chunks, (chunk + 1) * n / chunks);
  std::unique_lock<std::mutex> lock(mutex);
  done.wait(lock, [&] { return pending == 0; });
}

extern "C" {

tmrt_context *tmrt_context_create(const char *backend, int64_t threads,
                                  const char **error) {
  if (std::strcmp(backend, "cpu") != 0) {
    if (error)
      *error = std::strcmp(backend, "cuda") == 0
                   ? "backend 'cuda' is not built into this runtime"
                   : "unknown backend (expected 'cpu' or 'cuda')";
    return nullptr;
  }
  if (threads < 1 || threads > kMaxThreads) {
    if (error)
      *error = "thread count out of range (expected 1 to 1024)";
    return nullptr;
  }
  // BLAS runs single-threaded inside the context's own tasks (see
  // tmrt_matmul); this is set once per process, never per call.
  static std::once_flag blasThreads;
  std::call_once(blasThreads, [] { openblas_set_num_threads(1); });
  try {
    return new tmrt_context(static_cast<int>(threads));
  } catch (const std::exception &e) {
    // Threads the system refuses to start (std::system_error) or memory.
    static thread_local std::string message;
    message = std::string("cannot start ") + std::to_string(threads) +
              " threads: " + e.what();
    if (error)
      *error = message.c_str();
    return nullptr;
  }
}

void tmrt_context_destroy(tmrt_context *ctx) {
  if (!ctx)
    return;
  std::free(ctx->arena);
  delete ctx;
}

const char *tmrt_context_error(tmrt_context *ctx) {
  std::lock_guard<std::mutex> lock(ctx->errorMutex);
  return ctx->hasError ? ctx->error.c_str() : nullptr;
}

void tmrt_context_clear_error(tmrt_context *ctx) {
  std::lock_guard<std::mutex> lock(ctx->errorMutex);
  ctx->hasError = false;
  ctx->error.clear();
}

int32_t tmrt_arena_alloc(tmrt_context *ctx, uint64_t bytes) {
  if (ctx->arena)
    return -1;
  // 64-byte aligned, as the plan's offsets are.
  uint64_t rounded = (bytes + 63) & ~uint64_t(63);
  void *memory = nullptr;
  if (rounded == 0 || posix_memalign(&memory, 64, rounded) != 0)
    return -1;
  ctx->arena = static_cast<uint8_t *>(memory);
  ctx->arenaBytes = bytes;
  return 0;
}

uint8_t *tmrt_arena_base(tmrt_context *ctx) { return ctx->arena; }
uint64_t tmrt_arena_bytes(tmrt_context *ctx) { return ctx->arenaBytes; }
uint64_t tmrt_arena_high_water(tmrt_context *ctx) {
  return ctx->highWater.load();
}
void tmrt_arena_touch(tmrt_context *ctx, uint64_t offset, uint64_t bytes) {
  ctx->touch(static_cast<int64_t>(offset), bytes);
}
uint64_t tmrt_kernel_calls(tmrt_context *ctx) { return ctx->kernelCalls.load(); }

int64_t tmrt_world_size(tmrt_context *) { return 1; }
void tmrt_all_reduce_sum_f32(tmrt_context *ctx, int64_t, int64_t) {
  ++ctx->kernelCalls;
}

} // extern "C"
