//===- Collectives.cpp - ring collectives over a communicator -------------===//
//
// The CPU backend's collectives, on f32, bf16 or f16 buffers in the (host)
// arena (16-bit ones travel in 16 bits, summed in f32 at each hop), built
// of the communicator's send-receive as rings (Patarasuk & Yuan 2009; what
// NCCL does on one ring): a reduce-scatter passes each chunk around the
// ring N-1 times, adding as it goes; an all-gather passes each rank's chunk
// on N-1 times; an all-reduce is the one then the other. Every rank sends
// (N-1) chunks per ring, the figure the compiler's communication analysis
// counts (ShardModels.cpp): a buffer that does not split evenly is split
// into N chunks of ceil(n / N) elements, the last padded with zeros on the
// wire, so that the bytes counted are the analysis's exactly.
//
// The order of the additions is fixed by N (chunk c is summed starting from
// rank c + 1, around the ring), so a run gives the same bits every time on
// the same number of ranks, whatever the MPI library's own algorithms.
//
// Every collective runs in a process group (Backend.h's Group: `size`
// ranks `stride` apart, an axis of the step's grid of ranks): its rings go
// around the group's members, and the bytes are counted per group.
//
//===----------------------------------------------------------------------===//

#include "Collectives.h"
#include "FloatTypes.h"

#include "../Backend.h"
#include "../Context.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <string>
#include <vector>

using namespace tmrt;

namespace {

int64_t mod(int64_t a, int64_t n) { return ((a % n) + n) % n; }

/// Elements [begin, begin + chunk) of a buffer of `n` floats at `data`, as
/// a chunk of exactly `chunk` floats (zeros past the end).
struct Chunks {
  int64_t n, chunk;
  int64_t begin(int64_t c) const { return std::min(c * chunk, n); }
  int64_t size(int64_t c) const {
    return std::max<int64_t>(0, std::min(chunk, n - c * chunk));
  }
};

/// One exchange in `group`: sends `chunk` elements of T (the first
/// `sendSize` from `send`, zeros after) to its member `to` while receiving
/// `chunk` from its member `from` into `incoming`.
template <typename T>
bool exchange(tmrt_context *ctx, const Group &group, const T *send,
              int64_t sendSize, std::vector<T> &outgoing, T *incoming,
              int64_t chunk, int64_t to, int64_t from) {
  const Communicator &comm = *ctx->communicator;
  // A whole chunk goes as it is; a short one (the buffer's end) padded.
  const T *wire = send;
  if (sendSize < chunk) {
    std::fill(outgoing.begin(), outgoing.end(), T(0.0f));
    if (sendSize > 0)
      std::memcpy(outgoing.data(), send, sendSize * sizeof(T));
    wire = outgoing.data();
  }
  uint64_t bytes = static_cast<uint64_t>(chunk) * sizeof(T);
  if (!comm.sendRecv(ctx, wire, bytes, group.member(to), incoming, bytes,
                     group.member(from)))
    return false;
  ctx->countTraffic(group.size, group.stride, bytes);
  return true;
}

/// The reduce-scatter of `n` elements of T at `in` in chunks of `chunk`:
/// leaves the sum (or mean) of every rank's chunk `rank` in `result`
/// (`chunk` values). `in` is only read. Each rank sends its chunk c to rank
/// c directly, one peer per exchange (step s: to rank + s, from rank - s),
/// N - 1 chunks out and N - 1 in, as many bytes as a ring sends; the owner
/// then adds the N contributions (or takes their maximum) in f32 in rank order:
/// (g0 + g1) + g2 ... — the order in which one process accumulating N
/// micro-batches adds them (train.accumulate), so that N ranks and one rank
/// with N micro-batches give the same bits. 16-bit contributions travel in
/// 16 bits and are summed in f32 (one rounding, at the end).
template <typename T, typename Sum>
bool reduceScatterInRankOrder(tmrt_context *ctx, const Group &group,
                              const T *in, int64_t n, int64_t chunk,
                              Reduction reduction, std::vector<Sum> &result) {
  int64_t size = group.size, rank = group.position;
  Chunks chunks{n, chunk};
  // Every rank's contribution to chunk `rank`, at contribution r · chunk.
  std::vector<T> contributions(static_cast<size_t>(size * chunk), T(0.0f));
  std::copy_n(in + chunks.begin(rank), chunks.size(rank),
              contributions.begin() + rank * chunk);
  std::vector<T> outgoing(chunk);
  for (int64_t step = 1; step < size; ++step) {
    int64_t to = mod(rank + step, size), from = mod(rank - step, size);
    if (!exchange(ctx, group, in + chunks.begin(to), chunks.size(to), outgoing,
                  contributions.data() + from * chunk, chunk, to, from))
      return false;
  }
  result.resize(chunk);
  for (int64_t i = 0; i < chunk; ++i)
    result[i] = static_cast<Sum>(contributions[i]);
  for (int64_t r = 1; r < size; ++r) {
    const T *part = contributions.data() + r * chunk;
    for (int64_t i = 0; i < chunk; ++i)
      result[i] = reduction == Reduction::Max
                      ? std::max(result[i], static_cast<Sum>(part[i]))
                      : result[i] + static_cast<Sum>(part[i]);
  }
  if (reduction == Reduction::Average)
    for (Sum &v : result)
      v = static_cast<Sum>(static_cast<double>(v) / size);
  return true;
}

/// The ring all-gather in `group`: chunk c of `out` (n elements, chunks of
/// `chunk`) comes from its member c; this rank's is there already.
template <typename T>
bool ringAllGather(tmrt_context *ctx, const Group &group, T *out, int64_t n,
                   int64_t chunk) {
  int64_t size = group.size, rank = group.position;
  Chunks chunks{n, chunk};
  std::vector<T> outgoing(chunk), incoming(chunk);
  for (int64_t step = 0; step + 1 < size; ++step) {
    int64_t sendChunk = mod(rank - step, size);
    int64_t recvChunk = mod(rank - step - 1, size);
    if (!exchange(ctx, group, out + chunks.begin(sendChunk),
                  chunks.size(sendChunk), outgoing, incoming.data(), chunk,
                  mod(rank + 1, size), mod(rank - 1, size)))
      return false;
    std::copy_n(incoming.begin(), chunks.size(recvChunk),
                out + chunks.begin(recvChunk));
  }
  return true;
}

/// Between a buffer split along an inner dimension, [outer][size][inner],
/// and the same shards as runs, [size][outer][inner]: `toRuns` reads the
/// first layout and writes the second, otherwise the reverse.
template <typename T>
void interleave(const T *from, T *to, int64_t inner, int64_t outer,
                int64_t size, bool toRuns) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t r = 0; r < size; ++r) {
      int64_t split = (o * size + r) * inner, run = (r * outer + o) * inner;
      std::copy_n(from + (toRuns ? split : run), inner,
                  to + (toRuns ? run : split));
    }
}

/// Calls fn(T{}) with the element type of `in` and `out`, which must agree.
template <typename Fn>
void withElementType(tmrt_context *ctx, const char *kernel, int64_t in,
                     int64_t out, Fn fn) {
  if (dtypeOf(in) != dtypeOf(out))
    return ctx->fail(std::string(kernel) + ": input " +
                     dtypeName(dtypeOf(in)) + " and result " +
                     dtypeName(dtypeOf(out)) + " differ");
  cpu::dispatchFloatType(ctx, kernel, dtypeOf(in), fn);
}

} // namespace

namespace tmrt {
namespace cpu {

void all_reduce(tmrt_context *ctx, int64_t in, int64_t out, int64_t n,
                int64_t reduction, int64_t group_size, int64_t group_stride) {
  Group group;
  Reduction kind;
  if (n < 0)
    return ctx->fail("all_reduce: negative element count");
  if (!reductionOf(ctx, "all_reduce", reduction, kind) ||
      !groupOf(ctx, "all_reduce", group_size, group_stride, group))
    return;
  withElementType(ctx, "all_reduce", in, out, [&](auto type) {
    using T = decltype(type);
    int64_t chunk = (n + group.size - 1) / group.size;
    std::vector<float> mine;
    if (!reduceScatterInRankOrder(ctx, group, ctx->at<T>(in), n, chunk, kind,
                                  mine))
      return;
    // The reduced chunk into place (in may be out: its other chunks are
    // read no more), then the ring gathers the others'.
    T *result = ctx->at<T>(out);
    Chunks chunks{n, chunk};
    std::copy_n(mine.begin(), chunks.size(group.position),
                result + chunks.begin(group.position));
    if (!ringAllGather(ctx, group, result, n, chunk))
      return;
    ctx->touch(out, static_cast<uint64_t>(n) * sizeof(T));
  });
}

void all_reduce_i64(tmrt_context *ctx, int64_t in, int64_t out, int64_t n,
                    int64_t group_size, int64_t group_stride) {
  Group group;
  if (n < 0)
    return ctx->fail("all_reduce_i64: negative element count");
  if (!groupOf(ctx, "all_reduce_i64", group_size, group_stride, group))
    return;
  int64_t chunk = (n + group.size - 1) / group.size;
  std::vector<int64_t> mine;
  if (!reduceScatterInRankOrder(ctx, group, ctx->at<int64_t>(in), n, chunk,
                                Reduction::Sum, mine))
    return;
  int64_t *result = ctx->at<int64_t>(out);
  Chunks chunks{n, chunk};
  std::copy_n(mine.begin(), chunks.size(group.position),
              result + chunks.begin(group.position));
  if (!ringAllGather(ctx, group, result, n, chunk))
    return;
  ctx->touch(out, static_cast<uint64_t>(n) * sizeof(int64_t));
}

void reduce_scatter(tmrt_context *ctx, int64_t in, int64_t out, int64_t n,
                    int64_t average, int64_t outer, int64_t group_size,
                    int64_t group_stride) {
  Group group;
  if (!checkShards(ctx, "reduce_scatter", n, outer) ||
      !groupOf(ctx, "reduce_scatter", group_size, group_stride, group))
    return;
  withElementType(ctx, "reduce_scatter", in, out, [&](auto type) {
    using T = decltype(type);
    // A split along an inner dimension: each rank's shard gathered into
    // one run first (the flat case reads the buffer as it is).
    const T *buffer = ctx->at<T>(in);
    std::vector<T> packed;
    if (outer > 1) {
      packed.resize(static_cast<size_t>(n * group.size));
      interleave(buffer, packed.data(), n / outer, outer, group.size,
                 /*toRuns=*/true);
      buffer = packed.data();
    }
    std::vector<float> mine;
    if (!reduceScatterInRankOrder(
            ctx, group, buffer, n * group.size, n,
            average != 0 ? Reduction::Average : Reduction::Sum, mine))
      return;
    // In place (in == out) the shard lands at the start of the buffer.
    std::copy_n(mine.begin(), n, ctx->at<T>(out));
    ctx->touch(out, static_cast<uint64_t>(n) * sizeof(T));
  });
}

void all_gather(tmrt_context *ctx, int64_t in, int64_t out, int64_t n,
                int64_t outer, int64_t group_size, int64_t group_stride) {
  Group group;
  if (!checkShards(ctx, "all_gather", n, outer) ||
      !groupOf(ctx, "all_gather", group_size, group_stride, group))
    return;
  withElementType(ctx, "all_gather", in, out, [&](auto type) {
    using T = decltype(type);
    T *result = ctx->at<T>(out);
    // Shards along an inner dimension ring into one run each, then
    // interleave into place.
    std::vector<T> runs;
    T *ring = result;
    if (outer > 1) {
      runs.resize(static_cast<size_t>(n * group.size));
      ring = runs.data();
    }
    std::memmove(ring + group.position * n, ctx->at<T>(in), n * sizeof(T));
    if (!ringAllGather(ctx, group, ring, n * group.size, n))
      return;
    if (outer > 1)
      interleave(runs.data(), result, n / outer, outer, group.size,
                 /*toRuns=*/false);
    ctx->touch(out, static_cast<uint64_t>(n * group.size) * sizeof(T));
  });
}

void all_slice(tmrt_context *ctx, int64_t in, int64_t out, int64_t n,
               int64_t outer, int64_t group_size, int64_t group_stride) {
  Group group;
  if (!checkShards(ctx, "all_slice", n, outer) ||
      !groupOf(ctx, "all_slice", group_size, group_stride, group))
    return;
  // A copy: any 4-byte element (untagged f32 or i32 references) or 16-bit
  // float moves as bytes.
  withElementType(ctx, "all_slice", in, out, [&](auto type) {
    using T = decltype(type);
    int64_t inner = n / outer;
    // Block o of the shard comes from block o · size + position: at or
    // after where it goes, so forward moves are safe in place.
    for (int64_t o = 0; o < outer; ++o)
      std::memmove(ctx->at<T>(out) + o * inner,
                   ctx->at<T>(in) + (o * group.size + group.position) * inner,
                   inner * sizeof(T));
    ctx->touch(out, static_cast<uint64_t>(n) * sizeof(T));
  });
}

void broadcast(tmrt_context *ctx, int64_t buffer, int64_t n,
                   int64_t root) {
  int64_t size = ctx->communicator->size(ctx);
  if (n < 0 || root < 0 || root >= size)
    return ctx->fail("broadcast: root " + std::to_string(root) +
                     " is not a rank of " + std::to_string(size));
  uint64_t bytes = static_cast<uint64_t>(n) * sizeof(float);
  if (!ctx->communicator->broadcast(ctx, ctx->at<float>(buffer), bytes, root))
    return;
  // A broadcast tree sends the buffer once to each rank but the root.
  if (ctx->communicator->rank(ctx) == root)
    ctx->bytesSent += bytes * static_cast<uint64_t>(size - 1);
  else
    ctx->bytesReceived += bytes;
  ctx->touch(buffer, bytes);
}

void barrier(tmrt_context *ctx) { ctx->communicator->barrier(ctx); }

} // namespace cpu
} // namespace tmrt

namespace {

/// Host values summed over the ranks in rank order, in T: every rank's
/// values around the ring, then ((v0 + v1) + v2) + ... on every rank.
template <typename T>
int hostSum(tmrt_context *ctx, T *values, int64_t n, const char *name) {
  const Communicator &comm = *ctx->communicator;
  int64_t size = comm.size(ctx), rank = comm.rank(ctx);
  if (n < 0) {
    ctx->fail(std::string(name) + ": negative count");
    return -1;
  }
  std::vector<T> all(static_cast<size_t>(size * n));
  std::copy_n(values, n, all.begin() + rank * n);
  uint64_t bytes = static_cast<uint64_t>(n) * sizeof(T);
  for (int64_t step = 0; step + 1 < size; ++step) {
    int64_t sendPart = mod(rank - step, size);
    int64_t recvPart = mod(rank - step - 1, size);
    if (!comm.sendRecv(ctx, all.data() + sendPart * n, bytes,
                       mod(rank + 1, size), all.data() + recvPart * n, bytes,
                       mod(rank - 1, size)))
      return -1;
  }
  for (int64_t i = 0; i < n; ++i) {
    T sum = all[i];
    for (int64_t r = 1; r < size; ++r)
      sum = sum + all[r * n + i];
    values[i] = sum;
  }
  return 0;
}

} // namespace

extern "C" int tmrt_host_sum_f64(tmrt_context *ctx, double *values, int64_t n) {
  return hostSum(ctx, values, n, "tmrt_host_sum_f64");
}

extern "C" int tmrt_host_sum_f32(tmrt_context *ctx, float *values, int64_t n) {
  return hostSum(ctx, values, n, "tmrt_host_sum_f32");
}
