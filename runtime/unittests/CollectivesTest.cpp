//===- CollectivesTest.cpp - the runtime's ring collectives ---------------===//
//
// Each rank fills its buffers from its rank, runs every collective and
// checks the result against the sums computed here (small integers: exact
// in f32; and values whose sums round, added in rank order), the bytes it
// counted against the ring's (N-1) chunks of
// ceil(n / N) elements (the compiler's communication figures), and that a
// second run gives the same bits. Run alone it uses the "single"
// communicator (N = 1); under mpirun (test/Runtime/collectives-mpi.test,
// 2 and 4 ranks) the "mpi" one.
//
//===----------------------------------------------------------------------===//

#include "trainmem-runtime/Runtime.h"
#include "trainmem/Support/Float16.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

struct ContextDeleter {
  void operator()(tmrt_context *ctx) const { tmrt_context_destroy(ctx); }
};
using ContextPtr = std::unique_ptr<tmrt_context, ContextDeleter>;

/// A context on the communicator mpirun implies, with an arena.
ContextPtr makeContext(uint64_t arenaBytes) {
  const char *error = nullptr;
  ContextPtr ctx(tmrt_context_create("cpu", 1, &error));
  EXPECT_NE(ctx, nullptr) << (error ? error : "");
  if (!ctx)
    return ctx;
  if (std::getenv("OMPI_COMM_WORLD_SIZE"))
    EXPECT_EQ(tmrt_context_set_communicator(ctx.get(), "mpi", &error), 0)
        << (error ? error : "");
  EXPECT_EQ(tmrt_arena_alloc(ctx.get(), arenaBytes), 0);
  return ctx;
}

std::vector<float> read(tmrt_context *ctx, int64_t offset, int64_t n) {
  std::vector<float> values(n);
  EXPECT_EQ(tmrt_arena_read(ctx, offset, values.data(), n * 4), 0);
  return values;
}

void write(tmrt_context *ctx, int64_t offset, const std::vector<float> &v) {
  EXPECT_EQ(tmrt_arena_write(ctx, offset, v.data(), v.size() * 4), 0);
}

/// Rank r's element i.
float valueOf(int64_t rank, int64_t i) { return float(rank * 100 + i); }

TEST(Collectives, AllReduceSumsEveryRanksBuffer) {
  ContextPtr ctx = makeContext(1 << 16);
  ASSERT_NE(ctx, nullptr);
  int64_t size = tmrt_world_size(ctx.get()), rank = tmrt_rank(ctx.get());
  // 10 elements: uneven chunks on 4 ranks (3, 3, 3, 1).
  const int64_t n = 10;
  std::vector<float> mine(n);
  for (int64_t i = 0; i < n; ++i)
    mine[i] = valueOf(rank, i);
  for (int64_t average : {0, 1}) {
    for (bool inPlace : {true, false}) {
      write(ctx.get(), 0, mine);
      uint64_t before = tmrt_bytes_sent(ctx.get());
      tmrt_all_reduce(ctx.get(), 0, inPlace ? 0 : 4096, n, average,
                      tmrt_world_size(ctx.get()), 1);
      ASSERT_EQ(tmrt_context_error(ctx.get()), nullptr) << tmrt_context_error(ctx.get());
      std::vector<float> got = read(ctx.get(), inPlace ? 0 : 4096, n);
      for (int64_t i = 0; i < n; ++i) {
        double sum = 0;
        for (int64_t r = 0; r < size; ++r)
          sum += valueOf(r, i);
        EXPECT_EQ(got[i], float(average ? sum / size : sum)) << i;
      }
      // 2 (N - 1) chunks of ceil(n / N) elements.
      uint64_t chunk = (n + size - 1) / size;
      EXPECT_EQ(tmrt_bytes_sent(ctx.get()) - before,
                2 * uint64_t(size - 1) * chunk * 4);
    }
  }
  EXPECT_EQ(tmrt_bytes_sent(ctx.get()), tmrt_bytes_received(ctx.get()));
}

TEST(Collectives, AllReduceTakesTheMaximum) {
  ContextPtr ctx = makeContext(1 << 16);
  ASSERT_NE(ctx, nullptr);
  int64_t size = tmrt_world_size(ctx.get()), rank = tmrt_rank(ctx.get());
  // 10 elements, each rank's largest at a different place, negative ones
  // among them (the padding's zeros must not win).
  const int64_t n = 10;
  auto value = [](int64_t r, int64_t i) {
    return float((r * 7 + i * 3) % 11) - 20.0f;
  };
  std::vector<float> mine(n);
  for (int64_t i = 0; i < n; ++i)
    mine[i] = value(rank, i);
  write(ctx.get(), 0, mine);
  uint64_t before = tmrt_bytes_sent(ctx.get());
  tmrt_all_reduce(ctx.get(), 0, 0, n, TMRT_REDUCE_MAX, size, 1);
  ASSERT_EQ(tmrt_context_error(ctx.get()), nullptr)
      << tmrt_context_error(ctx.get());
  std::vector<float> got = read(ctx.get(), 0, n);
  for (int64_t i = 0; i < n; ++i) {
    float most = value(0, i);
    for (int64_t r = 1; r < size; ++r)
      most = std::max(most, value(r, i));
    EXPECT_EQ(got[i], most) << i;
  }
  // The same bytes as a sum's.
  uint64_t chunk = (n + size - 1) / size;
  EXPECT_EQ(tmrt_bytes_sent(ctx.get()) - before,
            2 * uint64_t(size - 1) * chunk * 4);
  // A reduction the runtime does not know is an error that names it.
  tmrt_all_reduce(ctx.get(), 0, 0, n, 7, size, 1);
  ASSERT_NE(tmrt_context_error(ctx.get()), nullptr);
  EXPECT_NE(std::string(tmrt_context_error(ctx.get())).find("reduction 7"),
            std::string::npos)
      << tmrt_context_error(ctx.get());
}

TEST(Collectives, ReduceScatterLeavesEachRankItsShard) {
  ContextPtr ctx = makeContext(1 << 16);
  ASSERT_NE(ctx, nullptr);
  int64_t size = tmrt_world_size(ctx.get()), rank = tmrt_rank(ctx.get());
  const int64_t shard = 3;
  std::vector<float> mine(shard * size);
  for (int64_t i = 0; i < shard * size; ++i)
    mine[i] = valueOf(rank, i);
  for (bool inPlace : {true, false}) {
    write(ctx.get(), 0, mine);
    uint64_t before = tmrt_bytes_sent(ctx.get());
    int64_t out = inPlace ? 0 : 8192;
    tmrt_reduce_scatter(ctx.get(), 0, out, shard, /*average=*/1, /*outer=*/1,
                        tmrt_world_size(ctx.get()), 1);
    ASSERT_EQ(tmrt_context_error(ctx.get()), nullptr) << tmrt_context_error(ctx.get());
    std::vector<float> got = read(ctx.get(), out, shard);
    for (int64_t i = 0; i < shard; ++i) {
      double sum = 0;
      for (int64_t r = 0; r < size; ++r)
        sum += valueOf(r, rank * shard + i);
      EXPECT_EQ(got[i], float(sum / size)) << i;
    }
    EXPECT_EQ(tmrt_bytes_sent(ctx.get()) - before,
              uint64_t(size - 1) * shard * 4);
  }
}

TEST(Collectives, SixteenBitBuffersTravelInSixteenBits) {
  // bf16 and f16 all-reduce and all-gather: small integers (exact in both
  // formats, sums included), half the bytes of f32 on the wire.
  ContextPtr ctx = makeContext(1 << 16);
  ASSERT_NE(ctx, nullptr);
  int64_t size = tmrt_world_size(ctx.get()), rank = tmrt_rank(ctx.get());
  const int64_t n = 10;
  for (int64_t dtype : {int64_t(TMRT_DTYPE_BF16), int64_t(TMRT_DTYPE_F16)}) {
    auto encode = [&](float v) {
      return dtype == TMRT_DTYPE_BF16 ? trainmem::bf16BitsFromFloat(v)
                                      : trainmem::f16BitsFromFloat(v);
    };
    auto decode = [&](uint16_t bits) {
      return dtype == TMRT_DTYPE_BF16 ? trainmem::floatFromBF16Bits(bits)
                                      : trainmem::floatFromF16Bits(bits);
    };
    std::vector<uint16_t> mine(n);
    for (int64_t i = 0; i < n; ++i)
      mine[i] = encode(float(rank * 4 + i));
    ASSERT_EQ(tmrt_arena_write(ctx.get(), 0, mine.data(), n * 2), 0);
    uint64_t before = tmrt_bytes_sent(ctx.get());
    tmrt_all_reduce(ctx.get(), tmrt_tensor_ref(0, dtype),
                    tmrt_tensor_ref(4096, dtype), n, /*average=*/0,
                    tmrt_world_size(ctx.get()), 1);
    ASSERT_EQ(tmrt_context_error(ctx.get()), nullptr)
        << tmrt_context_error(ctx.get());
    std::vector<uint16_t> got(n);
    ASSERT_EQ(tmrt_arena_read(ctx.get(), 4096, got.data(), n * 2), 0);
    for (int64_t i = 0; i < n; ++i) {
      double sum = 0;
      for (int64_t r = 0; r < size; ++r)
        sum += r * 4 + i;
      EXPECT_EQ(decode(got[i]), float(sum)) << i;
    }
    uint64_t chunk = (n + size - 1) / size;
    EXPECT_EQ(tmrt_bytes_sent(ctx.get()) - before,
              2 * uint64_t(size - 1) * chunk * 2);
    // Gather: rank r's 3 elements land at 3 r.
    ASSERT_EQ(tmrt_arena_write(ctx.get(), 0, mine.data(), 3 * 2), 0);
    tmrt_all_gather(ctx.get(), tmrt_tensor_ref(0, dtype),
                    tmrt_tensor_ref(8192, dtype), 3, /*outer=*/1,
                    tmrt_world_size(ctx.get()), 1);
    ASSERT_EQ(tmrt_context_error(ctx.get()), nullptr);
    std::vector<uint16_t> all(3 * size);
    ASSERT_EQ(tmrt_arena_read(ctx.get(), 8192, all.data(), all.size() * 2), 0);
    for (int64_t r = 0; r < size; ++r)
      for (int64_t i = 0; i < 3; ++i)
        EXPECT_EQ(decode(all[r * 3 + i]), float(r * 4 + i));
  }
  // Input and result of different types are refused.
  tmrt_all_reduce(ctx.get(), tmrt_tensor_ref(0, TMRT_DTYPE_BF16),
                  tmrt_tensor_ref(4096, TMRT_DTYPE_F32), n, 0,
                  tmrt_world_size(ctx.get()), 1);
  ASSERT_NE(tmrt_context_error(ctx.get()), nullptr);
  EXPECT_EQ(std::string(tmrt_context_error(ctx.get())),
            "all_reduce: input bf16 and result f32 differ");
  tmrt_context_clear_error(ctx.get());
}

TEST(Collectives, AllGatherAndSliceAreInverse) {
  ContextPtr ctx = makeContext(1 << 16);
  ASSERT_NE(ctx, nullptr);
  int64_t size = tmrt_world_size(ctx.get()), rank = tmrt_rank(ctx.get());
  const int64_t shard = 5;
  std::vector<float> mine(shard);
  for (int64_t i = 0; i < shard; ++i)
    mine[i] = valueOf(rank, i);
  write(ctx.get(), 0, mine);
  tmrt_all_gather(ctx.get(), 0, 4096, shard, /*outer=*/1,
                  tmrt_world_size(ctx.get()), 1);
  ASSERT_EQ(tmrt_context_error(ctx.get()), nullptr) << tmrt_context_error(ctx.get());
  std::vector<float> all = read(ctx.get(), 4096, shard * size);
  for (int64_t r = 0; r < size; ++r)
    for (int64_t i = 0; i < shard; ++i)
      EXPECT_EQ(all[r * shard + i], valueOf(r, i));
  EXPECT_EQ(tmrt_bytes_sent(ctx.get()), uint64_t(size - 1) * shard * 4);
  // The local slice takes the rank's part back, sending nothing.
  tmrt_all_slice(ctx.get(), 4096, 8192, shard, /*outer=*/1,
                 tmrt_world_size(ctx.get()), 1);
  EXPECT_EQ(read(ctx.get(), 8192, shard), mine);
  EXPECT_EQ(tmrt_bytes_sent(ctx.get()), uint64_t(size - 1) * shard * 4);
}

TEST(Collectives, ShardsAlongAnInnerDimension) {
  // A [2, size * 3, 2] buffer split along dimension 1 (Megatron's sequence
  // parallelism on [b, s, h]): rank r's shard is [2, 3, 2], rows 3 r.. of
  // each of the 2 outer blocks. Gather, slice and reduce-scatter place it
  // there; the bytes are those of the flat shards.
  ContextPtr ctx = makeContext(1 << 16);
  ASSERT_NE(ctx, nullptr);
  int64_t size = tmrt_world_size(ctx.get()), rank = tmrt_rank(ctx.get());
  const int64_t outer = 2, inner = 3 * 2, shard = outer * inner;
  auto wholeAt = [&](int64_t o, int64_t r, int64_t i) {
    return (o * size + r) * inner + i;
  };
  std::vector<float> mine(shard);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i)
      mine[o * inner + i] = valueOf(rank, wholeAt(o, rank, i));
  write(ctx.get(), 0, mine);
  uint64_t before = tmrt_bytes_sent(ctx.get());
  tmrt_all_gather(ctx.get(), 0, 4096, shard, outer, size, 1);
  ASSERT_EQ(tmrt_context_error(ctx.get()), nullptr)
      << tmrt_context_error(ctx.get());
  std::vector<float> all = read(ctx.get(), 4096, shard * size);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t r = 0; r < size; ++r)
      for (int64_t i = 0; i < inner; ++i)
        EXPECT_EQ(all[wholeAt(o, r, i)], valueOf(r, wholeAt(o, r, i)));
  EXPECT_EQ(tmrt_bytes_sent(ctx.get()) - before,
            uint64_t(size - 1) * shard * 4);
  tmrt_all_slice(ctx.get(), 4096, 8192, shard, outer, size, 1);
  EXPECT_EQ(read(ctx.get(), 8192, shard), mine);
  // In place, as the memory plan ties a slice to its operand.
  tmrt_all_slice(ctx.get(), 4096, 4096, shard, outer, size, 1);
  EXPECT_EQ(read(ctx.get(), 4096, shard), mine);
  // Every rank's whole buffer summed, this rank's rows kept.
  std::vector<float> whole(shard * size);
  for (int64_t i = 0; i < shard * size; ++i)
    whole[i] = valueOf(rank, i);
  write(ctx.get(), 0, whole);
  tmrt_reduce_scatter(ctx.get(), 0, 12288, shard, /*average=*/0, outer, size,
                      1);
  ASSERT_EQ(tmrt_context_error(ctx.get()), nullptr)
      << tmrt_context_error(ctx.get());
  std::vector<float> got = read(ctx.get(), 12288, shard);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      float sum = 0.0f;
      for (int64_t r = 0; r < size; ++r)
        sum += valueOf(r, wholeAt(o, rank, i));
      EXPECT_EQ(got[o * inner + i], sum) << o << " " << i;
    }
  // A shard that is not `outer` equal blocks is refused.
  tmrt_all_gather(ctx.get(), 0, 4096, 5, outer, size, 1);
  ASSERT_NE(tmrt_context_error(ctx.get()), nullptr);
  EXPECT_EQ(std::string(tmrt_context_error(ctx.get())),
            "all_gather: 5 elements per shard do not form 2 equal blocks");
  tmrt_context_clear_error(ctx.get());
}

TEST(Collectives, BroadcastAndBarrier) {
  ContextPtr ctx = makeContext(1 << 12);
  ASSERT_NE(ctx, nullptr);
  int64_t size = tmrt_world_size(ctx.get()), rank = tmrt_rank(ctx.get());
  int64_t root = size - 1;
  std::vector<float> mine(4, float(rank));
  write(ctx.get(), 0, mine);
  tmrt_broadcast(ctx.get(), 0, 4, root);
  tmrt_barrier(ctx.get());
  ASSERT_EQ(tmrt_context_error(ctx.get()), nullptr) << tmrt_context_error(ctx.get());
  EXPECT_EQ(read(ctx.get(), 0, 4), std::vector<float>(4, float(root)));
  // A root that is no rank is the context's error, not a hang.
  tmrt_broadcast(ctx.get(), 0, 4, size);
  EXPECT_NE(tmrt_context_error(ctx.get()), nullptr);
}

TEST(Collectives, TheSameBitsEveryRun) {
  ContextPtr ctx = makeContext(1 << 16);
  ASSERT_NE(ctx, nullptr);
  int64_t rank = tmrt_rank(ctx.get());
  // Values whose sums round: the order of the additions shows.
  const int64_t n = 1000;
  std::vector<float> mine(n);
  for (int64_t i = 0; i < n; ++i)
    mine[i] = 1.0f / float(1 + i + 7 * rank) + 1e-3f * float(rank);
  write(ctx.get(), 0, mine);
  tmrt_all_reduce(ctx.get(), 0, 0, n, 1, tmrt_world_size(ctx.get()), 1);
  std::vector<float> first = read(ctx.get(), 0, n);
  write(ctx.get(), 0, mine);
  tmrt_all_reduce(ctx.get(), 0, 0, n, 1, tmrt_world_size(ctx.get()), 1);
  EXPECT_EQ(read(ctx.get(), 0, n), first);
  ASSERT_EQ(tmrt_context_error(ctx.get()), nullptr) << tmrt_context_error(ctx.get());
}

// The sums are added in rank order, ((v0 + v1) + v2) + ..., in f32: the
// order in which one process adds N micro-batches, computed here from
// every rank's values. Values whose sums round, so another order shows.
TEST(Collectives, SumsInRankOrder) {
  ContextPtr ctx = makeContext(1 << 16);
  ASSERT_NE(ctx, nullptr);
  int64_t size = tmrt_world_size(ctx.get()), rank = tmrt_rank(ctx.get());
  const int64_t n = 1000;
  auto value = [](int64_t r, int64_t i) {
    return 1.0f / float(1 + i + 7 * r) + (r % 2 ? 3e3f : -1e-3f);
  };
  std::vector<float> mine(n);
  for (int64_t i = 0; i < n; ++i)
    mine[i] = value(rank, i);
  write(ctx.get(), 0, mine);
  tmrt_all_reduce(ctx.get(), 0, 0, n, /*average=*/0, tmrt_world_size(ctx.get()),
                  1);
  ASSERT_EQ(tmrt_context_error(ctx.get()), nullptr);
  std::vector<float> got = read(ctx.get(), 0, n);
  for (int64_t i = 0; i < n; ++i) {
    float sum = value(0, i);
    for (int64_t r = 1; r < size; ++r)
      sum = sum + value(r, i);
    ASSERT_EQ(got[i], sum) << i;
  }
  // The host sum (the ranks' losses) in the same order.
  float loss = value(rank, 5);
  ASSERT_EQ(tmrt_host_sum_f32(ctx.get(), &loss, 1), 0);
  float expected = value(0, 5);
  for (int64_t r = 1; r < size; ++r)
    expected = expected + value(r, 5);
  EXPECT_EQ(loss, expected);
}

// i64 buffers (exact sums of squares) add exactly, over uneven chunks, with
// the ring's bytes.
TEST(Collectives, IntegersAddExactly) {
  ContextPtr ctx = makeContext(1 << 16);
  ASSERT_NE(ctx, nullptr);
  int64_t size = tmrt_world_size(ctx.get()), rank = tmrt_rank(ctx.get());
  const int64_t n = 24;
  std::vector<int64_t> mine(n);
  for (int64_t i = 0; i < n; ++i)
    mine[i] = (int64_t(1) << 40) * (rank + 1) + i * 1000003 + rank;
  ASSERT_EQ(tmrt_arena_write(ctx.get(), 0, mine.data(), n * 8), 0);
  uint64_t before = tmrt_bytes_sent(ctx.get());
  tmrt_all_reduce_i64(ctx.get(), 0, 0, n, tmrt_world_size(ctx.get()), 1);
  ASSERT_EQ(tmrt_context_error(ctx.get()), nullptr);
  std::vector<int64_t> got(n);
  ASSERT_EQ(tmrt_arena_read(ctx.get(), 0, got.data(), n * 8), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t sum = 0;
    for (int64_t r = 0; r < size; ++r)
      sum += (int64_t(1) << 40) * (r + 1) + i * 1000003 + r;
    EXPECT_EQ(got[i], sum) << i;
  }
  uint64_t chunk = (n + size - 1) / size;
  EXPECT_EQ(tmrt_bytes_sent(ctx.get()) - before,
            2 * uint64_t(size - 1) * chunk * 8);
}

/// Every (size, stride) that splits `world` ranks into groups of ranks
/// `stride` apart: the axes and axis products of row-major grids.
std::vector<std::pair<int64_t, int64_t>> groupsOf(int64_t world) {
  std::vector<std::pair<int64_t, int64_t>> groups;
  for (int64_t stride = 1; stride <= world; ++stride)
    for (int64_t size = 1; size * stride <= world; ++size)
      if (world % (size * stride) == 0)
        groups.push_back({size, stride});
  return groups;
}

// Process groups: a collective of the group of `size` ranks `stride` apart
// reduces, gathers and scatters among those ranks only, and counts its
// bytes in the group (the axes of a 2 x 2 grid under mpirun -np 4: (2, 1)
// the tensor axis, (2, 2) the data axis, (4, 1) both).
TEST(Collectives, GroupsReduceAndGatherAmongTheirRanks) {
  ContextPtr ctx = makeContext(1 << 16);
  ASSERT_NE(ctx, nullptr);
  int64_t world = tmrt_world_size(ctx.get()), rank = tmrt_rank(ctx.get());
  const int64_t n = 10, shard = 3;
  for (auto [size, stride] : groupsOf(world)) {
    SCOPED_TRACE("group of " + std::to_string(size) + " ranks " +
                 std::to_string(stride) + " apart");
    int64_t position = (rank / stride) % size;
    int64_t base = rank - position * stride;
    std::vector<float> mine(n);
    for (int64_t i = 0; i < n; ++i)
      mine[i] = valueOf(rank, i);
    write(ctx.get(), 0, mine);
    uint64_t before = tmrt_group_bytes_sent(ctx.get(), size, stride);
    tmrt_all_reduce(ctx.get(), 0, 4096, n, /*average=*/0, size, stride);
    ASSERT_EQ(tmrt_context_error(ctx.get()), nullptr)
        << tmrt_context_error(ctx.get());
    std::vector<float> got = read(ctx.get(), 4096, n);
    for (int64_t i = 0; i < n; ++i) {
      float sum = 0.0f;
      for (int64_t p = 0; p < size; ++p)
        sum += valueOf(base + p * stride, i);
      EXPECT_EQ(got[i], sum) << i;
    }
    uint64_t chunk = (n + size - 1) / size;
    EXPECT_EQ(tmrt_group_bytes_sent(ctx.get(), size, stride) - before,
              2 * uint64_t(size - 1) * chunk * 4);
    // The gather puts member p's shard at p; the slice takes this rank's
    // back; the reduce-scatter leaves this rank its part of the sums.
    tmrt_all_gather(ctx.get(), 0, 8192, shard, /*outer=*/1, size, stride);
    std::vector<float> all = read(ctx.get(), 8192, shard * size);
    for (int64_t p = 0; p < size; ++p)
      for (int64_t i = 0; i < shard; ++i)
        EXPECT_EQ(all[p * shard + i], valueOf(base + p * stride, i));
    tmrt_all_slice(ctx.get(), 8192, 12288, shard, /*outer=*/1, size, stride);
    EXPECT_EQ(read(ctx.get(), 12288, shard),
              std::vector<float>(mine.begin(), mine.begin() + shard));
    write(ctx.get(), 0, mine);
    // One element per member: the group's shards lie in the n written.
    tmrt_reduce_scatter(ctx.get(), 0, 16384, 1, /*average=*/0, /*outer=*/1,
                        size, stride);
    std::vector<float> part = read(ctx.get(), 16384, 1);
    for (int64_t i = 0; i < 1; ++i) {
      float sum = 0.0f;
      for (int64_t p = 0; p < size; ++p)
        sum += valueOf(base + p * stride, position + i);
      EXPECT_EQ(part[i], sum) << i;
    }
    ASSERT_EQ(tmrt_context_error(ctx.get()), nullptr)
        << tmrt_context_error(ctx.get());
  }
}

TEST(Collectives, AGroupThatDoesNotSplitTheWorldFails) {
  ContextPtr ctx = makeContext(1 << 12);
  ASSERT_NE(ctx, nullptr);
  int64_t world = tmrt_world_size(ctx.get());
  tmrt_all_reduce(ctx.get(), 0, 0, 4, 0, world + 1, 1);
  ASSERT_NE(tmrt_context_error(ctx.get()), nullptr);
  EXPECT_EQ(std::string(tmrt_context_error(ctx.get())),
            "all_reduce: a group of " + std::to_string(world + 1) +
                " ranks 1 apart does not split the " + std::to_string(world) +
                " ranks of the communicator (a grid axis of the step's that "
                "the processes do not match: run as many as it has ranks)");
}

TEST(Collectives, CommunicatorsByName) {
  ContextPtr ctx = makeContext(64);
  ASSERT_NE(ctx, nullptr);
  const char *error = nullptr;
  EXPECT_EQ(tmrt_context_set_communicator(ctx.get(), "nccl", &error), -1);
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(std::string(error),
            std::string("unknown communicator 'nccl' (built: ") +
                tmrt_communicator_names() + ")");
  EXPECT_EQ(tmrt_context_set_communicator(ctx.get(), "single", &error), 0);
  EXPECT_STREQ(tmrt_communicator_name(ctx.get()), "single");
}

} // namespace
