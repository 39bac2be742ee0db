//===- CudaCollectives.cu - the collectives of Kernels.def through NCCL ---===//
//
// The CUDA backend's collectives, behind the same tmrt_ calls as the CPU's
// (cpu/Collectives.cpp) and with the same arithmetic:
//  - reductions in rank order: each rank sends chunk c of its buffer
//    straight to rank c (ncclSend/ncclRecv, all N - 1 exchanges in one NCCL
//    group), and the owner adds the N contributions on the device in f32 as
//    ((g0 + g1) + g2) + ... — the CPU ranks' order, and the order one
//    process adds N micro-batches in, so N GPUs give one GPU's bits;
//  - all-gathers by ncclAllGather (copies: no arithmetic to order);
//  - buffers that do not split evenly go as N chunks of ceil(n / N), the
//    last padded with zeros, so the bytes are the compiler's analysis's,
//    counted in the context as the CPU backend counts them.
// On one rank every collective is a copy or nothing, and NCCL is not
// loaded. On more, NCCL (libnccl.so.2, dlopen'd) makes its communicator at
// the first collective: rank 0's unique id goes to the others through the
// context's own communicator (MPI under mpirun), one process per GPU.
// A collective of a process group (Backend.h's Group: an axis of the
// step's grid of ranks) runs on the group's own communicator, split from
// the world's (ncclCommSplit, color: the group's first rank, key: the
// rank's position in it) when the group is first used; the world's group
// uses the world's.
//
// Failures: every NCCL call's result is checked, and each collective waits
// for its stream while polling ncclCommGetAsyncError, for at most
// TMRT_MPI_TIMEOUT seconds (default 30) without completing; an error or the
// timeout aborts the NCCL communicator and fails the context with a message
// naming the collective, and the run then ends every rank (tmrt_abort).
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.h"
#include "CudaKernels.h"

#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <dlfcn.h>
#include <map>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace tmrt {
namespace cuda {

/// NCCL's entry points (loaded, not linked) and this context's communicator.
struct Nccl {
  void *library = nullptr;
  ncclResult_t (*getUniqueId)(ncclUniqueId *) = nullptr;
  ncclResult_t (*commInitRank)(ncclComm_t *, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*commDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*commAbort)(ncclComm_t) = nullptr;
  ncclResult_t (*commGetAsyncError)(ncclComm_t, ncclResult_t *) = nullptr;
  ncclResult_t (*commSplit)(ncclComm_t, int, int, ncclComm_t *,
                            ncclConfig_t *) = nullptr;
  const char *(*getErrorString)(ncclResult_t) = nullptr;
  ncclResult_t (*groupStart)() = nullptr;
  ncclResult_t (*groupEnd)() = nullptr;
  ncclResult_t (*send)(const void *, size_t, ncclDataType_t, int, ncclComm_t,
                       cudaStream_t) = nullptr;
  ncclResult_t (*recv)(void *, size_t, ncclDataType_t, int, ncclComm_t,
                       cudaStream_t) = nullptr;
  ncclResult_t (*allGather)(const void *, void *, size_t, ncclDataType_t,
                            ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*broadcast)(const void *, void *, size_t, ncclDataType_t, int,
                            ncclComm_t, cudaStream_t) = nullptr;
  ncclComm_t comm = nullptr;
  /// The communicators of the process groups split from `comm`, by (size,
  /// stride).
  std::map<std::pair<int64_t, int64_t>, ncclComm_t> groups;
  bool broken = false;
};

void closeNccl(CudaState &state) {
  Nccl *nccl = state.nccl;
  if (!nccl)
    return;
  if (nccl->commAbort && nccl->commDestroy) {
    for (auto &[key, comm] : nccl->groups)
      (nccl->broken ? nccl->commAbort : nccl->commDestroy)(comm);
    if (nccl->comm)
      (nccl->broken ? nccl->commAbort : nccl->commDestroy)(nccl->comm);
  }
  delete nccl;
  state.nccl = nullptr;
}

namespace {

int64_t ranksOf(tmrt_context *ctx) { return ctx->communicator->size(ctx); }
int64_t rankOf(tmrt_context *ctx) { return ctx->communicator->rank(ctx); }
int64_t mod(int64_t a, int64_t n) { return ((a % n) + n) % n; }

/// Fails the context with NCCL's message for `result`; false on failure.
bool ok(tmrt_context *ctx, Nccl &nccl, ncclResult_t result,
        const char *collective) {
  if (result == ncclSuccess)
    return true;
  nccl.broken = true;
  ctx->fail(std::string("cuda: NCCL failed in ") + collective + " on rank " +
            std::to_string(rankOf(ctx)) + ": " + nccl.getErrorString(result));
  return false;
}

/// Loads NCCL into `nccl` and finds its calls; false with the reason.
bool loadInto(Nccl &nccl, std::string &error) {
  for (const char *name : {"libnccl.so.2", "libnccl.so"})
    if ((nccl.library = dlopen(name, RTLD_NOW | RTLD_LOCAL)))
      break;
  if (!nccl.library) {
    error = std::string("libnccl.so.2 cannot be loaded (") + dlerror() + ")";
    return false;
  }
  const char *missing = nullptr;
  auto find = [&](auto &fn, const char *symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(
        dlsym(nccl.library, symbol));
    if (!fn && !missing)
      missing = symbol;
  };
  find(nccl.getUniqueId, "ncclGetUniqueId");
  find(nccl.commInitRank, "ncclCommInitRank");
  find(nccl.commDestroy, "ncclCommDestroy");
  find(nccl.commAbort, "ncclCommAbort");
  find(nccl.commGetAsyncError, "ncclCommGetAsyncError");
  find(nccl.commSplit, "ncclCommSplit");
  find(nccl.getErrorString, "ncclGetErrorString");
  find(nccl.groupStart, "ncclGroupStart");
  find(nccl.groupEnd, "ncclGroupEnd");
  find(nccl.send, "ncclSend");
  find(nccl.recv, "ncclRecv");
  find(nccl.allGather, "ncclAllGather");
  find(nccl.broadcast, "ncclBroadcast");
  if (missing) {
    error = std::string("the NCCL loaded lacks ") + missing;
    return false;
  }
  return true;
}

/// Loads NCCL and makes the communicator of the context's ranks.
Nccl *ncclOf(tmrt_context *ctx, const char *collective) {
  CudaState &state = stateOf(ctx);
  if (state.nccl)
    return state.nccl->broken ? nullptr : state.nccl;
  auto *nccl = new Nccl;
  state.nccl = nccl;
  std::string why;
  if (!loadInto(*nccl, why)) {
    nccl->broken = true;
    ctx->fail(std::string("cuda: ") + collective + " on " +
              std::to_string(ranksOf(ctx)) + " ranks needs NCCL: " + why);
    return nullptr;
  }
  ncclUniqueId id{};
  if (rankOf(ctx) == 0 && !ok(ctx, *nccl, nccl->getUniqueId(&id), collective))
    return nullptr;
  if (!ctx->communicator->broadcast(ctx, &id, sizeof id, 0)) {
    nccl->broken = true;
    if (!ctx->hasError)
      ctx->fail("cuda: the NCCL id could not be broadcast to the ranks");
    return nullptr;
  }
  if (!ok(ctx, *nccl,
          nccl->commInitRank(&nccl->comm, static_cast<int>(ranksOf(ctx)), id,
                             static_cast<int>(rankOf(ctx))),
          collective))
    return nullptr;
  return nccl;
}

/// The communicator of `group`: the world's, or one split from it at the
/// group's first collective (every rank of the world calls this at the
/// same point of the step: they run one program).
ncclComm_t commOf(tmrt_context *ctx, Nccl &nccl, const Group &group,
                  const char *collective) {
  if (group.size == ranksOf(ctx))
    return nccl.comm;
  auto [it, inserted] =
      nccl.groups.try_emplace({group.size, group.stride}, nullptr);
  if (inserted && !ok(ctx, nccl,
                      nccl.commSplit(nccl.comm, static_cast<int>(group.base),
                                     static_cast<int>(group.position),
                                     &it->second, nullptr),
                      collective))
    return nullptr;
  return it->second;
}

/// Waits for the stream's collectives, watching NCCL's asynchronous error
/// and the time (TMRT_MPI_TIMEOUT seconds, default 30).
bool finish(tmrt_context *ctx, Nccl &nccl, ncclComm_t comm,
            const char *collective) {
  const double timeout = collectiveTimeoutSeconds();
  cudaStream_t stream = stateOf(ctx).stream;
  auto start = std::chrono::steady_clock::now();
  for (;;) {
    cudaError_t status = cudaStreamQuery(stream);
    if (status == cudaSuccess)
      return true;
    if (status != cudaErrorNotReady)
      return check(ctx, status, std::string("waiting for ") + collective);
    ncclResult_t async = ncclSuccess;
    if (!ok(ctx, nccl, nccl.commGetAsyncError(comm, &async), collective) ||
        !ok(ctx, nccl, async, collective))
      return false;
    std::chrono::duration<double> waited =
        std::chrono::steady_clock::now() - start;
    if (waited.count() > timeout) {
      nccl.broken = true;
      ctx->fail(std::string("cuda: ") + collective + " on rank " +
                std::to_string(rankOf(ctx)) + " made no progress for " +
                std::to_string(static_cast<int>(timeout)) +
                " s (TMRT_MPI_TIMEOUT): a rank failed or hangs");
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

/// Sum types: f32 for the float types, i64 for i64.
template <typename T>
using SumOf = std::conditional_t<std::is_same_v<T, int64_t>, int64_t, float>;

/// The reduce-scatter of `n` elements of T at `in` (chunks of `chunk`,
/// padded) in rank order into `mine` (`chunk` elements of T): each chunk
/// straight to its owner, then the N contributions added in order.
template <typename T>
bool reduceScatterInRankOrder(tmrt_context *ctx, const Group &group,
                              const T *in, int64_t n, int64_t chunk,
                              Reduction reduction, T *mine,
                              const char *collective) {
  int64_t size = group.size, rank = group.position;
  CudaState &state = stateOf(ctx);
  Scratch padded(ctx, static_cast<uint64_t>(size * chunk) * sizeof(T));
  Scratch parts(ctx, static_cast<uint64_t>(size * chunk) * sizeof(T));
  T *wire = padded.as<T>(), *contributions = parts.as<T>();
  if (!wire || !contributions)
    return false;
  // The buffer, zeros past its end, so that every chunk is whole.
  if (!check(ctx,
             cudaMemsetAsync(wire, 0, size * chunk * sizeof(T), state.stream),
             collective) ||
      !check(ctx,
             cudaMemcpyAsync(wire, in, n * sizeof(T), cudaMemcpyDeviceToDevice,
                             state.stream),
             collective) ||
      !check(ctx,
             cudaMemcpyAsync(contributions + rank * chunk, wire + rank * chunk,
                             chunk * sizeof(T), cudaMemcpyDeviceToDevice,
                             state.stream),
             collective))
    return false;
  if (size > 1) {
    Nccl *nccl = ncclOf(ctx, collective);
    ncclComm_t comm = nccl ? commOf(ctx, *nccl, group, collective) : nullptr;
    if (!comm)
      return false;
    uint64_t bytes = static_cast<uint64_t>(chunk) * sizeof(T);
    if (!ok(ctx, *nccl, nccl->groupStart(), collective))
      return false;
    for (int64_t step = 1; step < size; ++step) {
      int64_t to = mod(rank + step, size), from = mod(rank - step, size);
      if (!ok(ctx, *nccl,
              nccl->send(wire + to * chunk, bytes, ncclUint8,
                         static_cast<int>(to), comm, state.stream),
              collective) ||
          !ok(ctx, *nccl,
              nccl->recv(contributions + from * chunk, bytes, ncclUint8,
                         static_cast<int>(from), comm, state.stream),
              collective))
        return false;
    }
    if (!ok(ctx, *nccl, nccl->groupEnd(), collective) ||
        !finish(ctx, *nccl, comm, collective))
      return false;
    ctx->countTraffic(group.size, group.stride,
                      bytes * static_cast<uint64_t>(size - 1));
  }
  elementwise(ctx, collective, chunk, [=] __device__(int64_t i) {
    using Sum = SumOf<T>;
    Sum sum = static_cast<Sum>(contributions[i]);
    for (int64_t r = 1; r < size; ++r) {
      Sum next = static_cast<Sum>(contributions[r * chunk + i]);
      sum =
          reduction == Reduction::Max ? (next > sum ? next : sum) : sum + next;
    }
    if (reduction == Reduction::Average)
      sum = static_cast<Sum>(static_cast<double>(sum) / size);
    mine[i] = T(sum);
  });
  return !ctx->hasError;
}

/// The all-gather of `chunk` elements per rank from `mine` into `out`
/// (size · chunk elements).
template <typename T>
bool allGather(tmrt_context *ctx, const Group &group, const T *mine, T *out,
               int64_t chunk, const char *collective) {
  int64_t size = group.size;
  if (size == 1)
    return check(ctx,
                 cudaMemcpyAsync(out, mine, chunk * sizeof(T),
                                 cudaMemcpyDeviceToDevice, stateOf(ctx).stream),
                 collective);
  Nccl *nccl = ncclOf(ctx, collective);
  ncclComm_t comm = nccl ? commOf(ctx, *nccl, group, collective) : nullptr;
  if (!comm)
    return false;
  uint64_t bytes = static_cast<uint64_t>(chunk) * sizeof(T);
  if (!ok(ctx, *nccl,
          nccl->allGather(mine, out, bytes, ncclUint8, comm,
                          stateOf(ctx).stream),
          collective) ||
      !finish(ctx, *nccl, comm, collective))
    return false;
  ctx->countTraffic(group.size, group.stride,
                    bytes * static_cast<uint64_t>(size - 1));
  return true;
}

/// reduce, then gather: an all-reduce of `n` elements of T.
template <typename T>
void allReduceOf(tmrt_context *ctx, const Group &group, int64_t in, int64_t out,
                 int64_t n, Reduction reduction, const char *collective) {
  int64_t size = group.size;
  int64_t chunk = (n + size - 1) / size;
  Scratch reduced(ctx, static_cast<uint64_t>(chunk) * sizeof(T));
  Scratch gathered(ctx, static_cast<uint64_t>(size * chunk) * sizeof(T));
  if (!reduced.memory || !gathered.memory ||
      !reduceScatterInRankOrder(ctx, group, ctx->at<T>(in), n, chunk, reduction,
                                reduced.as<T>(), collective) ||
      !allGather(ctx, group, reduced.as<T>(), gathered.as<T>(), chunk,
                 collective))
    return;
  if (check(ctx,
            cudaMemcpyAsync(ctx->at<T>(out), gathered.as<T>(), n * sizeof(T),
                            cudaMemcpyDeviceToDevice, stateOf(ctx).stream),
            collective))
    ctx->touch(out, static_cast<uint64_t>(n) * sizeof(T));
}

/// Between a buffer split along an inner dimension, [outer][size][inner],
/// and the same shards as runs, [size][outer][inner] (`toRuns`: the first
/// into the second), one strided copy per rank; `from` and `to` must not
/// overlap.
template <typename T>
bool interleave(tmrt_context *ctx, const T *from, T *to, int64_t inner,
                int64_t outer, int64_t size, bool toRuns,
                const char *collective) {
  size_t width = static_cast<size_t>(inner) * sizeof(T);
  size_t splitPitch = width * static_cast<size_t>(size);
  for (int64_t r = 0; r < size; ++r) {
    const T *src = toRuns ? from + r * inner : from + r * outer * inner;
    T *dst = toRuns ? to + r * outer * inner : to + r * inner;
    if (!check(ctx,
               cudaMemcpy2DAsync(dst, toRuns ? width : splitPitch, src,
                                 toRuns ? splitPitch : width, width, outer,
                                 cudaMemcpyDeviceToDevice, stateOf(ctx).stream),
               collective))
      return false;
  }
  return true;
}

template <typename T>
void reduceScatterOf(tmrt_context *ctx, const Group &group, int64_t in,
                     int64_t out, int64_t n, int64_t outer, bool average) {
  int64_t size = group.size;
  const T *buffer = ctx->at<T>(in);
  // Shards along an inner dimension into one run each first.
  Scratch packed(ctx,
                 outer > 1 ? static_cast<uint64_t>(n * size) * sizeof(T) : 0);
  if (outer > 1) {
    if (!packed.memory ||
        !interleave(ctx, buffer, packed.as<T>(), n / outer, outer, size,
                    /*toRuns=*/true, "reduce_scatter"))
      return;
    buffer = packed.as<T>();
  }
  Scratch mine(ctx, static_cast<uint64_t>(n) * sizeof(T));
  if (!mine.memory ||
      !reduceScatterInRankOrder(ctx, group, buffer, n * size, n,
                                average ? Reduction::Average : Reduction::Sum,
                                mine.as<T>(), "reduce_scatter"))
    return;
  if (check(ctx,
            cudaMemcpyAsync(ctx->at<T>(out), mine.as<T>(), n * sizeof(T),
                            cudaMemcpyDeviceToDevice, stateOf(ctx).stream),
            "reduce_scatter"))
    ctx->touch(out, static_cast<uint64_t>(n) * sizeof(T));
}

template <typename T>
void allGatherOf(tmrt_context *ctx, const Group &group, int64_t in, int64_t out,
                 int64_t n, int64_t outer) {
  int64_t size = group.size;
  // This rank's shard through scratch (in may overlap out), then the rest;
  // shards along an inner dimension gather as runs and interleave.
  Scratch mine(ctx, static_cast<uint64_t>(n) * sizeof(T));
  Scratch runs(ctx,
               outer > 1 ? static_cast<uint64_t>(n * size) * sizeof(T) : 0);
  T *gathered = outer > 1 ? runs.as<T>() : ctx->at<T>(out);
  if (!mine.memory || !runs.memory ||
      !check(ctx,
             cudaMemcpyAsync(mine.as<T>(), ctx->at<T>(in), n * sizeof(T),
                             cudaMemcpyDeviceToDevice, stateOf(ctx).stream),
             "all_gather") ||
      !allGather(ctx, group, mine.as<T>(), gathered, n, "all_gather"))
    return;
  if (outer > 1 && !interleave(ctx, runs.as<T>(), ctx->at<T>(out), n / outer,
                               outer, size, /*toRuns=*/false, "all_gather"))
    return;
  ctx->touch(out, static_cast<uint64_t>(n * size) * sizeof(T));
}

} // namespace

bool loadNccl(std::string &report) {
  Nccl nccl;
  if (!loadInto(nccl, report))
    return false;
  report = "NCCL: every call the collectives make found";
  return true;
}

void all_reduce(tmrt_context *ctx, int64_t in, int64_t out, int64_t n,
                int64_t reduction, int64_t group_size, int64_t group_stride) {
  Group group;
  Reduction kind;
  if (n < 0)
    return ctx->fail("all_reduce: negative element count");
  if (!reductionOf(ctx, "all_reduce", reduction, kind) ||
      !groupOf(ctx, "all_reduce", group_size, group_stride, group))
    return;
  withFloatType(ctx, "all_reduce", {in, out}, [&](auto type) {
    allReduceOf<decltype(type)>(ctx, group, in, out, n, kind, "all_reduce");
  });
}

void all_reduce_i64(tmrt_context *ctx, int64_t in, int64_t out, int64_t n,
                    int64_t group_size, int64_t group_stride) {
  Group group;
  if (n < 0)
    return ctx->fail("all_reduce_i64: negative element count");
  if (!groupOf(ctx, "all_reduce_i64", group_size, group_stride, group))
    return;
  allReduceOf<int64_t>(ctx, group, in, out, n, Reduction::Sum,
                       "all_reduce_i64");
}

void reduce_scatter(tmrt_context *ctx, int64_t in, int64_t out, int64_t n,
                    int64_t average, int64_t outer, int64_t group_size,
                    int64_t group_stride) {
  Group group;
  if (!checkShards(ctx, "reduce_scatter", n, outer) ||
      !groupOf(ctx, "reduce_scatter", group_size, group_stride, group))
    return;
  withFloatType(ctx, "reduce_scatter", {in, out}, [&](auto type) {
    reduceScatterOf<decltype(type)>(ctx, group, in, out, n, outer,
                                    average != 0);
  });
}

void all_gather(tmrt_context *ctx, int64_t in, int64_t out, int64_t n,
                int64_t outer, int64_t group_size, int64_t group_stride) {
  Group group;
  if (!checkShards(ctx, "all_gather", n, outer) ||
      !groupOf(ctx, "all_gather", group_size, group_stride, group))
    return;
  withFloatType(ctx, "all_gather", {in, out}, [&](auto type) {
    allGatherOf<decltype(type)>(ctx, group, in, out, n, outer);
  });
}

void all_slice(tmrt_context *ctx, int64_t in, int64_t out, int64_t n,
               int64_t outer, int64_t group_size, int64_t group_stride) {
  Group group;
  if (!checkShards(ctx, "all_slice", n, outer) ||
      !groupOf(ctx, "all_slice", group_size, group_stride, group))
    return;
  withFloatType(ctx, "all_slice", {in, out}, [&](auto type) {
    using T = decltype(type);
    uint64_t bytes = static_cast<uint64_t>(n) * sizeof(T);
    uint64_t block = bytes / static_cast<uint64_t>(outer);
    // Block o of the shard from block o · size + position: at or after
    // where it goes, so block-by-block forward copies are safe in place.
    for (int64_t o = 0; o < outer; ++o)
      copyArena(ctx, offsetOf(in) + (o * group.size + group.position) * block,
                offsetOf(out) + o * block, block);
    ctx->touch(out, bytes);
  });
}

void broadcast(tmrt_context *ctx, int64_t buffer, int64_t n, int64_t root) {
  int64_t size = ranksOf(ctx);
  if (n < 0 || root < 0 || root >= size)
    return ctx->fail("broadcast: root " + std::to_string(root) +
                     " is not a rank of " + std::to_string(size));
  uint64_t bytes = static_cast<uint64_t>(n) * sizeof(float);
  if (size > 1) {
    Nccl *nccl = ncclOf(ctx, "broadcast");
    float *data = ctx->at<float>(buffer);
    if (!nccl ||
        !ok(ctx, *nccl,
            nccl->broadcast(data, data, bytes, ncclUint8,
                            static_cast<int>(root), nccl->comm,
                            stateOf(ctx).stream),
            "broadcast") ||
        !finish(ctx, *nccl, nccl->comm, "broadcast"))
      return;
    if (rankOf(ctx) == root)
      ctx->bytesSent += bytes * static_cast<uint64_t>(size - 1);
    else
      ctx->bytesReceived += bytes;
  }
  ctx->touch(buffer, bytes);
}

void exchange_begin(tmrt_context *ctx) { ctx->pendingExchange.clear(); }
void exchange_send(tmrt_context *ctx, int64_t in, int64_t bytes, int64_t peer,
                   int64_t tag) {
  noteExchange(ctx, true, in, bytes, peer, tag);
}
void exchange_recv(tmrt_context *ctx, int64_t out, int64_t bytes, int64_t peer,
                   int64_t tag) {
  noteExchange(ctx, false, out, bytes, peer, tag);
}
// One NCCL group of the exchange's sends and receives on the world's
// communicator (NCCL pairs a peer's sends and receives in the order they
// are issued, not by tag; train-pipeline issues them in one order per
// pair of stages on both sides, and checks it).
void exchange_end(tmrt_context *ctx) {
  std::vector<Message> messages;
  uint64_t sent = 0, received = 0;
  auto dataOf = [](tmrt_context *c, int64_t ref) -> void * {
    return c->bytesAt(ref);
  };
  if (!takeExchange(ctx, dataOf, messages, sent, received) || messages.empty())
    return;
  const char *what = "exchange_end";
  Nccl *nccl = ncclOf(ctx, what);
  if (!nccl)
    return;
  cudaStream_t stream = stateOf(ctx).stream;
  if (!ok(ctx, *nccl, nccl->groupStart(), what))
    return;
  for (const Message &m : messages) {
    ncclResult_t result =
        m.send ? nccl->send(m.data, m.bytes, ncclUint8,
                            static_cast<int>(m.rank), nccl->comm, stream)
               : nccl->recv(m.data, m.bytes, ncclUint8,
                            static_cast<int>(m.rank), nccl->comm, stream);
    if (!ok(ctx, *nccl, result, what))
      return;
  }
  if (!ok(ctx, *nccl, nccl->groupEnd(), what) ||
      !finish(ctx, *nccl, nccl->comm, what))
    return;
  ctx->bytesSent += sent;
  ctx->bytesReceived += received;
}

void barrier(tmrt_context *ctx) {
  // The device's work first, then the ranks meet on the host.
  if (check(ctx, cudaStreamSynchronize(stateOf(ctx).stream), "barrier"))
    ctx->communicator->barrier(ctx);
}

} // namespace cuda
} // namespace tmrt
