//===- Context.cpp - context, arena, threads ------------------------------===//

#include "Backend.h"
#include "Context.h"
#include "cpu/Quantized.h"

#include <algorithm>
#include <cblas.h>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <mutex>
#include <new>
#include <stdexcept>

using namespace tmrt;

const char *tmrt::dtypeName(int64_t dtype) {
  switch (dtype) {
  case TMRT_DTYPE_F32:
    return "f32";
  case TMRT_DTYPE_BF16:
    return "bf16";
  case TMRT_DTYPE_F16:
    return "f16";
  default:
    return "an unknown element type";
  }
}

tmrt::SbgemmFn tmrt::findSbgemm() {
  static const SbgemmFn found = reinterpret_cast<SbgemmFn>(
      dlsym(RTLD_DEFAULT, "cblas_sbgemm"));
  return found;
}

void tmrt_context::failDtype(int64_t ref, int64_t expected) {
  fail(std::string("a kernel read the ") + dtypeName(tmrt::dtypeOf(ref)) +
       " tensor at offset " + std::to_string(tmrt::offsetOf(ref)) + " as " +
       (expected == TMRT_DTYPE_F32 ? "f32 (or integers)"
                                   : dtypeName(expected)) +
       "; the compiler's lowering and the kernel disagree");
}

bool tmrt_context::kernelsReadHost() const { return backend->hostArena; }

void tmrt_context::failHostRef(int64_t ref) {
  fail(std::string("a kernel was given the host-memory tensor at offset ") +
       std::to_string(tmrt::offsetOf(ref)) +
       (hostArena ? std::string(", which the ") + backend->name +
                        " backend's kernels cannot read (they run on the "
                        "device; only tmrt_transfer moves host memory: run "
                        "the update on the device, train-offload-optimizer "
                        "what=states)"
                  : std::string(", but the context has no host arena "
                                "(tmrt_host_arena_alloc)")));
}

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

namespace {
/// A short pause in a polling loop (it frees the core's pipeline for the
/// sibling thread).
inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// Polls `ready` for up to `microseconds`; whether it became true.
template <typename Ready> bool spinFor(int64_t microseconds, Ready ready) {
  auto until = std::chrono::steady_clock::now() +
               std::chrono::microseconds(microseconds);
  for (unsigned i = 1;; ++i) {
    if (ready())
      return true;
    relax();
    if (i % 64 == 0 && std::chrono::steady_clock::now() >= until)
      return ready();
  }
}
} // namespace

void ThreadPool::runChunks(uint64_t generation,
                           const std::function<void(int64_t, int64_t)> *fn,
                           int64_t items, int64_t chunks) {
  uint64_t current = ticket.load(std::memory_order_acquire);
  while ((current >> 32) == (generation & 0xffffffffu) &&
         static_cast<int64_t>(current & 0xffffffffu) < chunks) {
    if (!ticket.compare_exchange_weak(current, current + 1,
                                      std::memory_order_acq_rel))
      continue;
    int64_t chunk = static_cast<int64_t>(current & 0xffffffffu);
    (*fn)(chunk * items / chunks, (chunk + 1) * items / chunks);
    if (completed.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) {
      // The caller may be asleep waiting for the last chunk.
      std::lock_guard<std::mutex> lock(mutex);
      done.notify_one();
    }
    current = ticket.load(std::memory_order_acquire);
  }
}

void ThreadPool::workerLoop(int) {
  uint64_t seen = 0;
  while (true) {
    auto next = [&] {
      return stopping.load(std::memory_order_acquire) ||
             published.load(std::memory_order_acquire) != seen;
    };
    if (!spinFor(kSpinMicroseconds, next)) {
      std::unique_lock<std::mutex> lock(mutex);
      wake.wait(lock, next);
    }
    const std::function<void(int64_t, int64_t)> *fn;
    int64_t items, chunks;
    uint64_t generation;
    {
      // A consistent task: the caller writes it under the lock.
      std::lock_guard<std::mutex> lock(mutex);
      if (stopping)
        return;
      generation = seen = published.load(std::memory_order_relaxed);
      fn = task;
      items = taskItems;
      chunks = taskChunks;
    }
    // `fn` is the task's only while a chunk of it can be claimed.
    runChunks(generation, fn, items, chunks);
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
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(mutex);
    generation = published.load(std::memory_order_relaxed) + 1;
    task = &fn;
    taskItems = n;
    taskChunks = chunks;
    completed.store(0, std::memory_order_relaxed);
    ticket.store((generation & 0xffffffffu) << 32, std::memory_order_release);
    published.store(generation, std::memory_order_release);
  }
  wake.notify_all();
  runChunks(generation, &fn, n, chunks);
  // Every chunk claimed: wait for the ones workers still run (fn must
  // outlive them), polling a little before sleeping.
  auto finished = [&] {
    return completed.load(std::memory_order_acquire) == chunks;
  };
  if (!spinFor(kSpinMicroseconds, finished)) {
    std::unique_lock<std::mutex> lock(mutex);
    done.wait(lock, finished);
  }
}

//===----------------------------------------------------------------------===//
// The registry of backends
//===----------------------------------------------------------------------===//

namespace {
/// A registry entry: a table of this runtime by name, `get` null for one it
/// was built without (the name is still known, for a precise error).
template <typename Table> struct Entry {
  const char *name;
  const Table &(*get)();
};

template <typename Table, size_t N>
const Table *lookupIn(const Entry<Table> (&entries)[N], const char *name,
                      bool &known) {
  known = false;
  for (const Entry<Table> &entry : entries)
    if (std::strcmp(entry.name, name) == 0) {
      known = true;
      return entry.get ? &entry.get() : nullptr;
    }
  return nullptr;
}

/// The built entries' names, comma-separated.
template <typename Table, size_t N>
std::string builtNames(const Entry<Table> (&entries)[N]) {
  std::string list;
  for (const Entry<Table> &entry : entries)
    if (entry.get)
      list += (list.empty() ? "" : ", ") + std::string(entry.name);
  return list;
}
} // namespace

static const Entry<Backend> kBackends[] = {
    {"cpu", &cpuBackend},
#ifdef TMRT_HAVE_CUDA
    {"cuda", &cudaBackend},
#else
    {"cuda", nullptr},
#endif
};

const Backend *tmrt::lookupBackend(const char *name, bool &known) {
  return lookupIn(kBackends, name, known);
}

const char *tmrt::builtBackendNames() {
  static const std::string names = builtNames(kBackends);
  return names.c_str();
}

static int64_t singleSize(tmrt_context *) { return 1; }
static int64_t singleRank(tmrt_context *) { return 0; }
// One rank has no peer but itself: an exchange is a copy.
static bool singleSendRecv(tmrt_context *ctx, const void *send,
                           uint64_t sendBytes, int64_t, void *recv,
                           uint64_t recvBytes, int64_t) {
  if (sendBytes != recvBytes) {
    ctx->fail("single: an exchange of " + std::to_string(sendBytes) +
              " bytes received as " + std::to_string(recvBytes));
    return false;
  }
  std::memmove(recv, send, sendBytes);
  return true;
}
static bool singleBroadcast(tmrt_context *, void *, uint64_t, int64_t) {
  return true;
}
static bool singleBarrier(tmrt_context *) { return true; }
// A pipeline's stages are processes: one process has no other stage.
static bool singleExchange(tmrt_context *ctx, const Message *messages,
                           size_t count) {
  if (count == 0)
    return true;
  ctx->fail("single: a pipeline stage exchanges tensors with rank " +
            std::to_string(messages[0].rank) +
            ", and one process has only rank 0: run one process per stage "
            "(mpirun -np <stages>)");
  return false;
}
static void singleAbort(tmrt_context *, int) {}

const Communicator &tmrt::singleProcessCommunicator() {
  static const Communicator communicator = {
      "single",        singleSize,    singleRank,     singleSendRecv,
      singleBroadcast, singleBarrier, singleExchange, singleAbort};
  return communicator;
}

static const Entry<Communicator> kCommunicators[] = {
    {"single", &singleProcessCommunicator},
#ifdef TMRT_HAVE_MPI
    {"mpi", &mpiCommunicator},
#else
    {"mpi", nullptr},
#endif
};

const Communicator *tmrt::lookupCommunicator(const char *name, bool &known) {
  return lookupIn(kCommunicators, name, known);
}

const char *tmrt::builtCommunicatorNames() {
  static const std::string names = builtNames(kCommunicators);
  return names.c_str();
}

/// Sets *error to a message kept until the calling thread's next failure.
static void setError(const char **error, std::string message) {
  static thread_local std::string kept;
  kept = std::move(message);
  if (error)
    *error = kept.c_str();
}

bool tmrt::checkShards(tmrt_context *ctx, const char *kernel, int64_t n,
                       int64_t outer) {
  if (n < 0 || outer < 1 || n % outer != 0) {
    ctx->fail(std::string(kernel) + ": " + std::to_string(n) +
              " elements per shard do not form " + std::to_string(outer) +
              " equal blocks");
    return false;
  }
  return true;
}

bool tmrt::checkSplit(tmrt_context *ctx, const char *kernel, int64_t parts,
                      int64_t stride) {
  if (parts >= 1 && stride >= 1)
    return true;
  ctx->fail(std::string(kernel) + ": split of " + std::to_string(parts) +
            " parts " + std::to_string(stride) + " ranks apart");
  return false;
}

int64_t tmrt::splitPosition(tmrt_context *ctx, int64_t parts, int64_t stride) {
  return (tmrt_rank(ctx) / stride) % parts;
}

bool tmrt::reductionOf(tmrt_context *ctx, const char *kernel, int64_t reduction,
                       Reduction &result) {
  switch (reduction) {
  case TMRT_REDUCE_SUM:
    result = Reduction::Sum;
    return true;
  case TMRT_REDUCE_AVERAGE:
    result = Reduction::Average;
    return true;
  case TMRT_REDUCE_MAX:
    result = Reduction::Max;
    return true;
  default:
    ctx->fail(std::string(kernel) + ": reduction " + std::to_string(reduction) +
              " is not sum (0), average (1) or max (2)");
    return false;
  }
}

void tmrt::noteExchange(tmrt_context *ctx, bool send, int64_t ref,
                        int64_t bytes, int64_t peer, int64_t tag) {
  if (bytes < 0 || tag < 0 || peer == 0) {
    ctx->fail(std::string("exchange_") + (send ? "send" : "recv") +
              ": a message of " + std::to_string(bytes) + " bytes, tag " +
              std::to_string(tag) + ", " + std::to_string(peer) +
              " ranks away (a stage exchanges with another rank)");
    return;
  }
  ctx->pendingExchange.push_back({send, ref, bytes, peer, tag});
}

bool tmrt::takeExchange(tmrt_context *ctx,
                        void *(*dataOf)(tmrt_context *, int64_t),
                        std::vector<Message> &messages, uint64_t &sent,
                        uint64_t &received) {
  int64_t rank = ctx->communicator->rank(ctx);
  int64_t world = ctx->communicator->size(ctx);
  messages.clear();
  sent = received = 0;
  std::vector<tmrt_context::PendingMessage> pending;
  pending.swap(ctx->pendingExchange);
  for (const tmrt_context::PendingMessage &m : pending) {
    int64_t peer = rank + m.peer;
    if (peer < 0 || peer >= world) {
      ctx->fail("exchange_end: rank " + std::to_string(rank) +
                " exchanges with rank " + std::to_string(peer) +
                ", outside the " + std::to_string(world) +
                " ranks: a pipeline of p stages runs on p times the ranks "
                "of one stage (mpirun -np)");
      return false;
    }
    messages.push_back({m.send, dataOf(ctx, m.ref),
                        static_cast<uint64_t>(m.bytes), peer, m.tag});
    (m.send ? sent : received) += static_cast<uint64_t>(m.bytes);
    if (!m.send)
      ctx->touch(m.ref, static_cast<uint64_t>(m.bytes));
  }
  return !ctx->hasError;
}

bool tmrt::groupOf(tmrt_context *ctx, const char *kernel, int64_t size,
                   int64_t stride, Group &group) {
  int64_t world = ctx->communicator->size(ctx);
  if (size < 1 || stride < 1 || world % size != 0 || world % stride != 0 ||
      (world / stride) % size != 0) {
    ctx->fail(std::string(kernel) + ": a group of " + std::to_string(size) +
              " ranks " + std::to_string(stride) +
              " apart does not split the " + std::to_string(world) +
              " ranks of the communicator (a grid axis of the step's that "
              "the processes do not match: run as many as it has ranks)");
    return false;
  }
  int64_t rank = ctx->communicator->rank(ctx);
  group.size = size;
  group.stride = stride;
  group.position = (rank / stride) % size;
  group.base = rank - group.position * stride;
  return true;
}

double tmrt::collectiveTimeoutSeconds() {
  static const double seconds = [] {
    const char *text = std::getenv("TMRT_MPI_TIMEOUT");
    char *end = nullptr;
    double value = text ? std::strtod(text, &end) : 0.0;
    return text && end != text && value > 0.0 ? value : 30.0;
  }();
  return seconds;
}

void tmrt::copyBetweenArenas(tmrt_context *ctx, int64_t from, int64_t to,
                             uint64_t bytes, bool countTransfer) {
  bool fromHost = isHostRef(from), toHost = isHostRef(to);
  uint64_t fromOffset = static_cast<uint64_t>(offsetOf(from));
  uint64_t toOffset = static_cast<uint64_t>(offsetOf(to));
  if (fromHost && toHost)
    std::memmove(ctx->hostArena + toOffset, ctx->hostArena + fromOffset, bytes);
  else if (fromHost)
    ctx->backend->writeArena(ctx, toOffset, ctx->hostArena + fromOffset, bytes);
  else if (toHost)
    ctx->backend->readArena(ctx, fromOffset, ctx->hostArena + toOffset, bytes);
  else
    ctx->backend->copyArena(ctx, fromOffset, toOffset, bytes);
  ctx->touch(to, bytes);
  if (countTransfer && fromHost != toHost)
    ctx->transferBytes += bytes;
}

bool tmrt::checkTransferRefs(tmrt_context *ctx, int64_t from, int64_t to) {
  for (int64_t ref : {from, to})
    if (isHostRef(ref) && !ctx->hostArena) {
      ctx->failHostRef(ref);
      return false;
    }
  return true;
}

void tmrt::transferKernel(tmrt_context *ctx, int64_t from, int64_t to,
                          int64_t bytes) {
  if (bytes <= 0 || !checkTransferRefs(ctx, from, to))
    return;
  copyBetweenArenas(ctx, from, to, static_cast<uint64_t>(bytes),
                    /*countTransfer=*/false);
  recordTransfer(ctx, from, to, static_cast<uint64_t>(bytes));
}

void tmrt::recordTransfer(tmrt_context *ctx, int64_t from, int64_t to,
                          uint64_t bytes) {
  ctx->touch(to, bytes);
  if (isHostRef(from) != isHostRef(to))
    ctx->transferBytes += bytes;
  // Which host tensor each staging copy holds (an update skipped on a copy
  // is reported by the tensor's own location).
  int64_t source = locationOf(from), destination = locationOf(to);
  auto &staged = ctx->staged;
  if (isHostRef(source) && !isHostRef(destination)) {
    // A device place holds one copy at a time (activations brought back
    // each step reuse theirs: the list stays as long as the places).
    auto same =
        std::find_if(staged.begin(), staged.end(), [&](const auto &entry) {
          return entry.first == destination;
        });
    if (same != staged.end())
      same->second = source;
    else
      staged.emplace_back(destination, source);
  } else if (!isHostRef(source) && isHostRef(destination)) {
    for (size_t i = 0; i < staged.size(); ++i)
      if (staged[i].first == source) {
        staged.erase(staged.begin() + i);
        break;
      }
  }
}

extern "C" {

tmrt_context *tmrt_context_create(const char *backendName, int64_t threads,
                                  const char **error) {
  return tmrt_context_create_on_device(backendName, -1, threads, error);
}

tmrt_context *tmrt_context_create_on_device(const char *backendName,
                                            int64_t device, int64_t threads,
                                            const char **error) {
  if (!backendName) {
    setError(error, "no backend named");
    return nullptr;
  }
  bool known = false;
  const Backend *backend = lookupBackend(backendName, known);
  if (!backend) {
    setError(error,
             known ? std::string("backend '") + backendName +
                         "' is not built into this runtime (built: " +
                         builtBackendNames() + ")"
                   : std::string("unknown backend '") + backendName +
                         "' (built: " + builtBackendNames() + ")");
    return nullptr;
  }
  if (device < -1 || (device >= 0 && !backend->open)) {
    setError(error, device < -1 ? "device " + std::to_string(device) +
                                      " is not a device number"
                                : std::string("backend '") + backendName +
                                      "' has no devices to choose (device " +
                                      std::to_string(device) +
                                      " asked for; devices are for cuda)");
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
  tmrt::Bf16Gemm bf16Gemm = tmrt::Bf16Gemm::widen;
  if (const char *path = std::getenv("TMRT_BF16_GEMM")) {
    if (!std::strcmp(path, "sbgemm")) {
      if (!tmrt::findSbgemm()) {
        setError(error, "TMRT_BF16_GEMM=sbgemm, but this process's OpenBLAS "
                        "has no cblas_sbgemm (Debian's is built without "
                        "BUILD_BFLOAT16); unset it to widen bf16 tiles to "
                        "f32");
        return nullptr;
      }
      bf16Gemm = tmrt::Bf16Gemm::sbgemm;
    } else if (std::strcmp(path, "widen") != 0) {
      setError(error, std::string("TMRT_BF16_GEMM is '") + path +
                          "'; expected widen or sbgemm");
      return nullptr;
    }
  }
  try {
    auto *ctx = new tmrt_context(*backend, singleProcessCommunicator(),
                                 static_cast<int>(threads));
    ctx->bf16Gemm = bf16Gemm;
    ctx->requestedDevice = device;
    ctx->sbgemm = tmrt::findSbgemm();
    std::string message;
    if (backend->open && !backend->open(ctx, message)) {
      delete ctx;
      setError(error, message);
      return nullptr;
    }
    return ctx;
  } catch (const std::exception &e) {
    // Threads the system refuses to start (std::system_error) or memory.
    setError(error, std::string("cannot start ") + std::to_string(threads) +
                        " threads: " + e.what());
    return nullptr;
  }
}

void tmrt_context_destroy(tmrt_context *ctx) {
  if (!ctx)
    return;
  if (ctx->arena)
    ctx->backend->freeArena(ctx, ctx->arena);
  if (ctx->hostArena && ctx->backend->unpinHost)
    ctx->backend->unpinHost(ctx, ctx->hostArena);
  std::free(ctx->hostArena);
  if (ctx->backend->close)
    ctx->backend->close(ctx);
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
  void *memory = ctx->backend->allocArena(ctx, bytes);
  if (!memory)
    return -1;
  ctx->arena = static_cast<uint8_t *>(memory);
  ctx->arenaBytes = bytes;
  return 0;
}

uint8_t *tmrt_arena_base(tmrt_context *ctx) {
  return ctx->backend->hostArena ? ctx->arena : nullptr;
}
uint64_t tmrt_arena_bytes(tmrt_context *ctx) { return ctx->arenaBytes; }
uint64_t tmrt_arena_high_water(tmrt_context *ctx) {
  return ctx->highWater.load();
}
void tmrt_arena_touch(tmrt_context *ctx, uint64_t offset, uint64_t bytes) {
  ctx->touch(static_cast<int64_t>(offset), bytes);
}
uint64_t tmrt_kernel_calls(tmrt_context *ctx) { return ctx->kernelCalls.load(); }
uint64_t tmrt_skipped_updates(tmrt_context *ctx) {
  return ctx->skippedUpdates;
}
int64_t tmrt_skipped_update_param(tmrt_context *ctx, uint64_t i) {
  return i < ctx->skippedParams.size() ? ctx->skippedParams[i] : -1;
}
void tmrt_clear_skipped_updates(tmrt_context *ctx) {
  ctx->skippedUpdates = 0;
  ctx->skippedParams.clear();
}
const char *tmrt_bf16_gemm(tmrt_context *ctx) {
  if (ctx->bf16Gemm == tmrt::Bf16Gemm::sbgemm)
    return "cblas_sbgemm";
  return ctx->sbgemm ? "bf16 tiles widened to f32, cblas_sgemm"
                     : "bf16 tiles widened to f32, cblas_sgemm (this "
                       "OpenBLAS has no cblas_sbgemm)";
}
const char *tmrt_state8_kernels(tmrt_context *) {
  return tmrt::statePathName(tmrt::statePath());
}
uint64_t tmrt_gemm16_calls(tmrt_context *ctx, int32_t sbgemm) {
  return sbgemm ? ctx->sbgemmCalls.load() : ctx->widenedGemmCalls.load();
}

/// Whether [offset, offset + bytes) lies in the arena `ref` names.
static bool inArena(tmrt_context *ctx, uint64_t ref, uint64_t bytes) {
  bool host = tmrt::isHostRef(static_cast<int64_t>(ref));
  uint8_t *base = host ? ctx->hostArena : ctx->arena;
  uint64_t size = host ? ctx->hostArenaBytes : ctx->arenaBytes;
  uint64_t offset =
      static_cast<uint64_t>(tmrt::offsetOf(static_cast<int64_t>(ref)));
  // A reference with bits above the host bit (an element type) is no
  // arena offset.
  if (ref >> TMRT_DTYPE_SHIFT)
    return false;
  return base && offset <= size && bytes <= size - offset;
}

int32_t tmrt_host_arena_alloc(tmrt_context *ctx, uint64_t bytes) {
  if (ctx->hostArena || bytes == 0 ||
      bytes >= static_cast<uint64_t>(TMRT_HOST_MEMORY))
    return -1;
  // 64-byte aligned, as the plan's offsets are.
  uint64_t rounded = (bytes + 63) & ~uint64_t(63);
  void *memory = nullptr;
  if (posix_memalign(&memory, 64, rounded) != 0)
    return -1;
  // A device backend pins it, so that its copies run asynchronously.
  if (ctx->backend->pinHost && !ctx->backend->pinHost(ctx, memory, rounded)) {
    std::free(memory);
    return -1;
  }
  ctx->hostArena = static_cast<uint8_t *>(memory);
  ctx->hostArenaBytes = bytes;
  return 0;
}
uint64_t tmrt_host_arena_bytes(tmrt_context *ctx) {
  return ctx->hostArenaBytes;
}
uint64_t tmrt_host_arena_high_water(tmrt_context *ctx) {
  return ctx->hostHighWater.load();
}
uint64_t tmrt_transfer_bytes(tmrt_context *ctx) {
  return ctx->transferBytes.load();
}

int32_t tmrt_arena_write(tmrt_context *ctx, uint64_t offset,
                         const void *source, uint64_t bytes) {
  if (!inArena(ctx, offset, bytes))
    return -1;
  int64_t ref = static_cast<int64_t>(offset);
  // The host arena as the device's queued copies leave it (an
  // asynchronous copy ends at its wait, which the stream has passed).
  if (tmrt::isHostRef(ref) && ctx->backend->synchronize)
    ctx->backend->synchronize(ctx);
  if (tmrt::isHostRef(ref))
    std::memcpy(ctx->hostArena + tmrt::offsetOf(ref), source, bytes);
  else
    ctx->backend->writeArena(ctx, offset, source, bytes);
  ctx->touch(ref, bytes);
  return 0;
}

int32_t tmrt_arena_read(tmrt_context *ctx, uint64_t offset, void *destination,
                        uint64_t bytes) {
  if (!inArena(ctx, offset, bytes))
    return -1;
  int64_t ref = static_cast<int64_t>(offset);
  if (tmrt::isHostRef(ref) && ctx->backend->synchronize)
    ctx->backend->synchronize(ctx);
  if (tmrt::isHostRef(ref))
    std::memcpy(destination, ctx->hostArena + tmrt::offsetOf(ref), bytes);
  else
    ctx->backend->readArena(ctx, offset, destination, bytes);
  return 0;
}

int32_t tmrt_arena_copy(tmrt_context *ctx, uint64_t from, uint64_t to,
                        uint64_t bytes) {
  if (!inArena(ctx, from, bytes) || !inArena(ctx, to, bytes))
    return -1;
  tmrt::copyBetweenArenas(ctx, static_cast<int64_t>(from),
                          static_cast<int64_t>(to), bytes,
                          /*countTransfer=*/false);
  return 0;
}

const char *tmrt_context_backend(tmrt_context *ctx) {
  return ctx->backend->name;
}

int32_t tmrt_backend_status(const char *name) {
  if (!name)
    return -1;
  bool known = false;
  if (lookupBackend(name, known))
    return 1;
  return known ? 0 : -1;
}

const char *tmrt_backend_names(void) { return builtBackendNames(); }

int64_t tmrt_world_size(tmrt_context *ctx) {
  return ctx->communicator->size(ctx);
}
int64_t tmrt_rank(tmrt_context *ctx) { return ctx->communicator->rank(ctx); }

int tmrt_context_set_communicator(tmrt_context *ctx, const char *name,
                                  const char **error) {
  bool known = false;
  const Communicator *communicator =
      name ? lookupCommunicator(name, known) : nullptr;
  if (!communicator) {
    std::string shown = name ? name : "(null)";
    setError(error, known ? "communicator '" + shown +
                                "' is not built into this runtime (built: " +
                                builtCommunicatorNames() + ")"
                          : "unknown communicator '" + shown + "' (built: " +
                                builtCommunicatorNames() + ")");
    return -1;
  }
  ctx->communicator = communicator;
  return 0;
}

const char *tmrt_communicator_name(tmrt_context *ctx) {
  return ctx->communicator->name;
}
const char *tmrt_communicator_names(void) { return builtCommunicatorNames(); }

uint64_t tmrt_bytes_sent(tmrt_context *ctx) { return ctx->bytesSent.load(); }

uint64_t tmrt_group_bytes_sent(tmrt_context *ctx, int64_t group_size,
                               int64_t group_stride) {
  auto it = ctx->groupBytesSent.find({group_size, group_stride});
  return it == ctx->groupBytesSent.end() ? 0 : it->second;
}

void tmrt_abort(tmrt_context *ctx, int code) {
  ctx->communicator->abort(ctx, code);
}
uint64_t tmrt_bytes_received(tmrt_context *ctx) {
  return ctx->bytesReceived.load();
}

} // extern "C"
