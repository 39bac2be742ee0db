//===- BackendTest.cpp - contexts, the backend table, dispatch ------------===//
//
// tmrt_context_create picks a backend from the registry by name; every
// kernel entry point calls through the context's table and counts the call;
// the arena is reached through the backend's copies. A test backend (the CPU
// table with one kernel replaced) shows that a compiled step's calls go
// wherever its context's table points.
//
//===----------------------------------------------------------------------===//

#include "trainmem-runtime/Runtime.h"

#include "../lib/Backend.h"
#include "../lib/Context.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

struct ContextDeleter {
  void operator()(tmrt_context *ctx) const { tmrt_context_destroy(ctx); }
};
using ContextPtr = std::unique_ptr<tmrt_context, ContextDeleter>;

TEST(Backend, RegistryNamesWhatIsBuilt) {
  const char *error = nullptr;
  ContextPtr cpu(tmrt_context_create("cpu", 1, &error));
  ASSERT_NE(cpu, nullptr) << (error ? error : "");
  EXPECT_STREQ(tmrt_context_backend(cpu.get()), "cpu");

  // cuda: built where the CUDA toolkit is (then a context needs a device,
  // CudaTest), a known name without it.
  std::string built = tmrt_backend_names();
  EXPECT_TRUE(built == "cpu" || built == "cpu, cuda") << built;
  if (built == "cpu") {
    error = nullptr;
    EXPECT_EQ(tmrt_context_create("cuda", 1, &error), nullptr);
    ASSERT_NE(error, nullptr);
    EXPECT_EQ(std::string(error),
              "backend 'cuda' is not built into this runtime (built: cpu)");
  }

  error = nullptr;
  EXPECT_EQ(tmrt_context_create("tpu", 1, &error), nullptr);
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(std::string(error), "unknown backend 'tpu' (built: " + built + ")");

  error = nullptr;
  EXPECT_EQ(tmrt_context_create(nullptr, 1, &error), nullptr);
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(std::string(error), "no backend named");
}

// A device is a cuda notion: the cpu backend takes the backend's choice
// (-1) only, and a negative number other than -1 is no device.
TEST(Backend, DevicesAreForBackendsThatHaveThem) {
  const char *error = nullptr;
  ContextPtr ctx(tmrt_context_create_on_device("cpu", -1, 1, &error));
  EXPECT_NE(ctx, nullptr) << (error ? error : "");
  error = nullptr;
  EXPECT_EQ(tmrt_context_create_on_device("cpu", 0, 1, &error), nullptr);
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(std::string(error), "backend 'cpu' has no devices to choose "
                                "(device 0 asked for; devices are for cuda)");
  error = nullptr;
  EXPECT_EQ(tmrt_context_create_on_device("cpu", -2, 1, &error), nullptr);
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(std::string(error), "device -2 is not a device number");
}

TEST(Backend, ArenaThroughTheBackend) {
  ContextPtr ctx(tmrt_context_create("cpu", 1, nullptr));
  ASSERT_NE(ctx, nullptr);
  std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f};
  // No arena yet: nothing to copy to.
  EXPECT_EQ(tmrt_arena_write(ctx.get(), 0, values.data(), 16), -1);
  ASSERT_EQ(tmrt_arena_alloc(ctx.get(), 256), 0);
  EXPECT_EQ(tmrt_arena_high_water(ctx.get()), 0u);
  ASSERT_EQ(tmrt_arena_write(ctx.get(), 64, values.data(), 16), 0);
  EXPECT_EQ(tmrt_arena_high_water(ctx.get()), 80u);
  std::vector<float> back(4);
  ASSERT_EQ(tmrt_arena_read(ctx.get(), 64, back.data(), 16), 0);
  EXPECT_EQ(back, values);
  // The CPU arena is host memory: its base is the same bytes.
  ASSERT_NE(tmrt_arena_base(ctx.get()), nullptr);
  EXPECT_EQ(std::memcmp(tmrt_arena_base(ctx.get()) + 64, values.data(), 16),
            0);
  // Ranges outside the arena are refused, also when offset + bytes wraps.
  EXPECT_EQ(tmrt_arena_write(ctx.get(), 250, values.data(), 16), -1);
  EXPECT_EQ(tmrt_arena_read(ctx.get(), 257, back.data(), 0), -1);
  EXPECT_EQ(tmrt_arena_read(ctx.get(), 16, back.data(), ~uint64_t(0)), -1);
}

// The host arena (train-offload-optimizer's memory): TMRT_HOST_MEMORY
// references and offsets name it; its copies, bounds and peak are its own;
// tmrt_transfer moves bytes between the arenas and counts them.
TEST(Backend, HostArenaApart) {
  ContextPtr ctx(tmrt_context_create("cpu", 1, nullptr));
  ASSERT_NE(ctx, nullptr);
  const int64_t host = TMRT_HOST_MEMORY;
  std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.5f};
  ASSERT_EQ(tmrt_arena_alloc(ctx.get(), 256), 0);
  // No host arena yet: copies are refused, a kernel given a host reference
  // fails the context with what is missing.
  EXPECT_EQ(tmrt_arena_write(ctx.get(), host | 64, values.data(), 16), -1);
  tmrt_transfer(ctx.get(), host | 64, 0, 16);
  ASSERT_NE(tmrt_context_error(ctx.get()), nullptr);
  EXPECT_NE(std::string(tmrt_context_error(ctx.get()))
                .find("the context has no host arena"),
            std::string::npos);
  tmrt_context_clear_error(ctx.get());

  EXPECT_EQ(tmrt_host_arena_alloc(ctx.get(), 0), -1);
  ASSERT_EQ(tmrt_host_arena_alloc(ctx.get(), 128), 0);
  EXPECT_EQ(tmrt_host_arena_alloc(ctx.get(), 128), -1); // once
  EXPECT_EQ(tmrt_host_arena_bytes(ctx.get()), 128u);
  ASSERT_EQ(tmrt_arena_write(ctx.get(), host | 64, values.data(), 16), 0);
  // Each arena's peak apart.
  EXPECT_EQ(tmrt_host_arena_high_water(ctx.get()), 80u);
  EXPECT_EQ(tmrt_arena_high_water(ctx.get()), 0u);
  std::vector<float> back(4);
  ASSERT_EQ(tmrt_arena_read(ctx.get(), host | 64, back.data(), 16), 0);
  EXPECT_EQ(back, values);
  // The host arena's bounds, not the arena's; an element type is no offset.
  EXPECT_EQ(tmrt_arena_write(ctx.get(), host | 120, values.data(), 16), -1);
  EXPECT_EQ(tmrt_arena_write(ctx.get(), 200, values.data(), 16), 0);
  EXPECT_EQ(tmrt_arena_write(ctx.get(), tmrt_tensor_ref(0, TMRT_DTYPE_BF16),
                             values.data(), 16),
            -1);

  // Host -> device by the host's copy (not the step's: not counted), then
  // by tmrt_transfer (counted), then a kernel on host references (the CPU
  // backend's kernels read either arena).
  ASSERT_EQ(tmrt_arena_copy(ctx.get(), host | 64, 0, 16), 0);
  EXPECT_EQ(tmrt_transfer_bytes(ctx.get()), 0u);
  tmrt_transfer(ctx.get(), host | 64, 128, 16);
  EXPECT_EQ(tmrt_transfer_bytes(ctx.get()), 16u);
  for (uint64_t offset : {uint64_t(0), uint64_t(128)}) {
    ASSERT_EQ(tmrt_arena_read(ctx.get(), offset, back.data(), 16), 0);
    EXPECT_EQ(back, values);
  }
  tmrt_add(ctx.get(), host | 64, 128, host | 0, 4);
  tmrt_transfer(ctx.get(), host | 0, 64, 16);
  EXPECT_EQ(tmrt_transfer_bytes(ctx.get()), 32u);
  ASSERT_EQ(tmrt_arena_read(ctx.get(), 64, back.data(), 16), 0);
  for (size_t i = 0; i < values.size(); ++i)
    EXPECT_EQ(back[i], 2 * values[i]);
  EXPECT_EQ(tmrt_context_error(ctx.get()), nullptr);
  EXPECT_EQ(tmrt_host_arena_high_water(ctx.get()), 80u);
  EXPECT_EQ(tmrt_arena_high_water(ctx.get()), 216u);
}

// A backend whose kernels run on a device cannot read host memory: a host
// reference given to one of its kernels fails the context, naming the way
// out (tmrt_transfer moves host memory; run the update on the device).
TEST(Backend, DeviceKernelsRefuseHostReferences) {
  tmrt::Backend device = tmrt::cpuBackend();
  device.name = "device-like";
  device.hostArena = false;
  auto ctx = std::make_unique<tmrt_context>(
      device, tmrt::singleProcessCommunicator(), 1);
  ASSERT_EQ(tmrt_arena_alloc(ctx.get(), 256), 0);
  ASSERT_EQ(tmrt_host_arena_alloc(ctx.get(), 256), 0);
  tmrt_fill(ctx.get(), 0, 4, 1.0);
  tmrt_transfer(ctx.get(), 0, TMRT_HOST_MEMORY | 64, 16);
  EXPECT_EQ(tmrt_context_error(ctx.get()), nullptr);
  EXPECT_EQ(tmrt_transfer_bytes(ctx.get()), 16u);
  tmrt_add(ctx.get(), TMRT_HOST_MEMORY | 64, 0, 64, 4);
  ASSERT_NE(tmrt_context_error(ctx.get()), nullptr);
  EXPECT_NE(std::string(tmrt_context_error(ctx.get()))
                .find("which the device-like backend's kernels cannot read"),
            std::string::npos);
  tmrt_context_destroy(ctx.release());
}

TEST(Backend, EntryPointsCountAndDispatch) {
  ContextPtr ctx(tmrt_context_create("cpu", 2, nullptr));
  ASSERT_NE(ctx, nullptr);
  ASSERT_EQ(tmrt_arena_alloc(ctx.get(), 1024), 0);
  tmrt_fill(ctx.get(), 0, 8, 2.0);
  tmrt_fill(ctx.get(), 64, 8, 3.0);
  tmrt_add(ctx.get(), 0, 64, 128, 8);
  EXPECT_EQ(tmrt_kernel_calls(ctx.get()), 3u);
  float sum[8];
  ASSERT_EQ(tmrt_arena_read(ctx.get(), 128, sum, sizeof(sum)), 0);
  for (float value : sum)
    EXPECT_EQ(value, 5.0f);

  // One process: the all-reduce leaves the data and still counts.
  EXPECT_EQ(tmrt_world_size(ctx.get()), 1);
  EXPECT_EQ(tmrt_rank(ctx.get()), 0);
  tmrt_all_reduce(ctx.get(), 128, 128, 8, /*average=*/0, 1, 1);
  EXPECT_EQ(tmrt_kernel_calls(ctx.get()), 4u);
  EXPECT_EQ(tmrt_bytes_sent(ctx.get()), 0u);
  ASSERT_EQ(tmrt_arena_read(ctx.get(), 128, sum, sizeof(sum)), 0);
  for (float value : sum)
    EXPECT_EQ(value, 5.0f);
}

// A backend is a table: one with another `add` gets the calls a compiled
// step makes to tmrt_add on its contexts, and only those.
int recordedAdds = 0;
void recordingAdd(tmrt_context *ctx, int64_t a, int64_t b, int64_t out,
                  int64_t n) {
  ++recordedAdds;
  tmrt::cpuBackend().add(ctx, a, b, out, n);
}

TEST(Backend, AnotherTableGetsTheCalls) {
  tmrt::Backend recording = tmrt::cpuBackend();
  recording.name = "recording";
  recording.add = recordingAdd;
  auto ctx = std::make_unique<tmrt_context>(
      recording, tmrt::singleProcessCommunicator(), 1);
  ASSERT_EQ(tmrt_arena_alloc(ctx.get(), 256), 0);
  recordedAdds = 0;
  tmrt_fill(ctx.get(), 0, 4, 1.0);
  tmrt_add(ctx.get(), 0, 0, 64, 4);
  tmrt_add(ctx.get(), 64, 0, 64, 4);
  EXPECT_EQ(recordedAdds, 2);
  EXPECT_STREQ(tmrt_context_backend(ctx.get()), "recording");
  float out[4];
  ASSERT_EQ(tmrt_arena_read(ctx.get(), 64, out, sizeof(out)), 0);
  for (float value : out)
    EXPECT_EQ(value, 3.0f);

  ContextPtr cpu(tmrt_context_create("cpu", 1, nullptr));
  ASSERT_NE(cpu, nullptr);
  ASSERT_EQ(tmrt_arena_alloc(cpu.get(), 256), 0);
  tmrt_add(cpu.get(), 0, 0, 64, 4);
  EXPECT_EQ(recordedAdds, 2);
  tmrt_context_destroy(ctx.release());
}

} // namespace

namespace {
// The pool's parallel loops: many short calls back to back (workers come
// late, find no chunk, or spin into the next call), each with its own
// function object that dies when the call returns: every item runs exactly
// once, on 2 to 4 threads (more threads than this machine's cores too).
TEST(ThreadPool, EveryItemOnceAcrossManyShortCalls) {
  for (int threads : {2, 3, 4}) {
    tmrt::ThreadPool pool(threads);
    std::vector<std::atomic<int>> counts(64);
    uint64_t seed = 12345;
    for (int call = 0; call < 20000; ++call) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      int64_t n = 1 + static_cast<int64_t>((seed >> 33) % 64);
      int64_t grain = 1 + static_cast<int64_t>((seed >> 20) % 3);
      for (auto &count : counts)
        count.store(0, std::memory_order_relaxed);
      {
        auto local = std::make_unique<int>(call);
        pool.parallelFor(n, grain,
                         [&, local = local.get()](int64_t begin, int64_t end) {
                           ASSERT_EQ(*local, call);
                           for (int64_t i = begin; i < end; ++i)
                             counts[i].fetch_add(1, std::memory_order_relaxed);
                         });
      }
      for (int64_t i = 0; i < 64; ++i)
        ASSERT_EQ(counts[i].load(), i < n ? 1 : 0)
            << "item " << i << " of call " << call << " (n " << n << ", "
            << threads << " threads)";
    }
  }
}
} // namespace

// A rank's part of a split vocabulary (rank 0 of 2 holds rows 0-2 of 6):
// another rank's id looks up zeros, an id or target outside the whole
// vocabulary fails the context naming it, and so does a split of no parts.
TEST(Backend, VocabularyPartsNameWhatIsOutside) {
  ContextPtr ctx(tmrt_context_create("cpu", 1, nullptr));
  ASSERT_NE(ctx, nullptr);
  ASSERT_EQ(tmrt_arena_alloc(ctx.get(), 1024), 0);
  // Table [3, 2] at 0 (ones), ids at 64, lookups at 128.
  std::vector<float> table(6, 1.0f);
  ASSERT_EQ(tmrt_arena_write(ctx.get(), 0, table.data(), 24), 0);
  std::vector<int32_t> ids = {1, 4};
  ASSERT_EQ(tmrt_arena_write(ctx.get(), 64, ids.data(), 8), 0);
  tmrt_embedding(ctx.get(), 0, 64, 128, 2, 2, 3, 32, 2, 1);
  ASSERT_EQ(tmrt_context_error(ctx.get()), nullptr);
  std::vector<float> got(4);
  ASSERT_EQ(tmrt_arena_read(ctx.get(), 128, got.data(), 16), 0);
  EXPECT_EQ(got, (std::vector<float>{1.0f, 1.0f, 0.0f, 0.0f}));
  ids = {1, 7};
  ASSERT_EQ(tmrt_arena_write(ctx.get(), 64, ids.data(), 8), 0);
  tmrt_embedding(ctx.get(), 0, 64, 128, 2, 2, 3, 32, 2, 1);
  ASSERT_NE(tmrt_context_error(ctx.get()), nullptr);
  EXPECT_EQ(std::string(tmrt_context_error(ctx.get())),
            "token id 7 at position 1 is outside the table of 6 rows");

  ContextPtr loss(tmrt_context_create("cpu", 1, nullptr));
  ASSERT_EQ(tmrt_arena_alloc(loss.get(), 1024), 0);
  // Logits [2, 3] at 0, targets at 64, maxima at 128, sums at 192 and 256.
  ASSERT_EQ(tmrt_arena_write(loss.get(), 0, table.data(), 24), 0);
  std::vector<int32_t> targets = {2, 9};
  ASSERT_EQ(tmrt_arena_write(loss.get(), 64, targets.data(), 8), 0);
  tmrt_cross_entropy_part(loss.get(), 0, 64, 128, 192, 256, 2, 3, -100, 32, 2,
                          1);
  ASSERT_NE(tmrt_context_error(loss.get()), nullptr);
  EXPECT_EQ(std::string(tmrt_context_error(loss.get())),
            "target 9 at position 1 is outside the vocabulary of 6");

  ContextPtr parts(tmrt_context_create("cpu", 1, nullptr));
  ASSERT_EQ(tmrt_arena_alloc(parts.get(), 1024), 0);
  tmrt_cross_entropy_part(parts.get(), 0, 64, 128, 192, 256, 2, 3, -100, 32, 0,
                          1);
  ASSERT_NE(tmrt_context_error(parts.get()), nullptr);
  EXPECT_NE(
      std::string(tmrt_context_error(parts.get())).find("split of 0 parts"),
      std::string::npos);
}
