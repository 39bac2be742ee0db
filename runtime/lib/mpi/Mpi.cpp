//===- Mpi.cpp - the MPI communicator -------------------------------------===//
//
// One rank per process under mpirun: MPI_COMM_WORLD, initialized on first
// use and finalized at exit. Errors come back as return codes
// (MPI_ERRORS_RETURN) and fail the context with a message naming the peer,
// instead of aborting in the MPI library. Every exchange is nonblocking and
// watched: one that makes no progress for TMRT_MPI_TIMEOUT seconds (default
// 30: a rank that hangs, or waits on one that died without mpirun noticing)
// says which rank it waited for and aborts the job, so that no rank hangs.
//
//===----------------------------------------------------------------------===//

#include "../Backend.h"
#include "../Context.h"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace tmrt;

namespace {

/// MPI_Init once per process (or adopt an MPI the host program started).
bool ensureInitialized(tmrt_context *ctx) {
  static std::once_flag once;
  static bool ok = false;
  std::call_once(once, [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) !=
          MPI_SUCCESS)
        return;
      std::atexit([] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized)
          MPI_Finalize();
      });
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    ok = true;
  });
  if (!ok && ctx)
    ctx->fail("mpi: MPI_Init failed");
  return ok;
}

std::string errorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return "error " + std::to_string(code);
  return std::string(text, length);
}

int64_t mpiSize(tmrt_context *ctx) {
  if (!ensureInitialized(ctx))
    return 1;
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

int64_t mpiRank(tmrt_context *ctx) {
  if (!ensureInitialized(ctx))
    return 0;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

bool fits(tmrt_context *ctx, uint64_t bytes) {
  if (bytes <= static_cast<uint64_t>(std::numeric_limits<int>::max()))
    return true;
  ctx->fail("mpi: a message of " + std::to_string(bytes) +
            " bytes is larger than one MPI call sends");
  return false;
}

/// Seconds an exchange may make no progress (TMRT_MPI_TIMEOUT).
double timeoutSeconds() { return collectiveTimeoutSeconds(); }

/// Waits for `requests` (started by what `describe` says), polling so that
/// a peer that never answers ends the job with a message naming it instead
/// of a hang.
template <typename Describe>
bool waitWatched(tmrt_context *ctx, MPI_Request *requests, int count,
                 Describe describe) {
  using Clock = std::chrono::steady_clock;
  auto start = Clock::now();
  for (int polls = 0;; ++polls) {
    int done = 0;
    int code = MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE);
    if (code != MPI_SUCCESS) {
      ctx->fail("mpi: rank " + std::to_string(mpiRank(ctx)) + ", " +
                describe() + ": " + errorText(code));
      return false;
    }
    if (done)
      return true;
    double waited =
        std::chrono::duration<double>(Clock::now() - start).count();
    if (waited > timeoutSeconds()) {
      std::string message =
          "mpi: rank " + std::to_string(mpiRank(ctx)) + " waited " +
          std::to_string(static_cast<int>(waited)) + " s, " + describe() +
          ", without progress (TMRT_MPI_TIMEOUT=" +
          std::to_string(static_cast<int>(timeoutSeconds())) +
          "); aborting every rank";
      ctx->fail(message);
      std::fprintf(stderr, "trainmem runtime: %s\n", message.c_str());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
      return false;
    }
    // Spin briefly, then leave the cores to the ranks that compute.
    if (polls > 1000)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    else
      std::this_thread::yield();
  }
}

bool mpiSendRecv(tmrt_context *ctx, const void *send, uint64_t sendBytes,
                 int64_t to, void *recv, uint64_t recvBytes, int64_t from) {
  if (!ensureInitialized(ctx) || !fits(ctx, sendBytes) ||
      !fits(ctx, recvBytes))
    return false;
  MPI_Request requests[2];
  auto what = [&] {
    return "sending to rank " + std::to_string(to) +
           " and receiving from rank " + std::to_string(from);
  };
  int code = MPI_Irecv(recv, static_cast<int>(recvBytes), MPI_BYTE,
                       static_cast<int>(from), 0, MPI_COMM_WORLD,
                       &requests[0]);
  if (code == MPI_SUCCESS)
    code = MPI_Isend(send, static_cast<int>(sendBytes), MPI_BYTE,
                     static_cast<int>(to), 0, MPI_COMM_WORLD, &requests[1]);
  if (code != MPI_SUCCESS) {
    ctx->fail("mpi: rank " + std::to_string(mpiRank(ctx)) + ", " + what() +
              ": " + errorText(code));
    return false;
  }
  return waitWatched(ctx, requests, 2, what);
}

bool mpiBroadcast(tmrt_context *ctx, void *data, uint64_t bytes,
                  int64_t root) {
  if (!ensureInitialized(ctx) || !fits(ctx, bytes))
    return false;
  MPI_Request request;
  auto what = [&] { return "in a broadcast from rank " + std::to_string(root); };
  int code = MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE,
                        static_cast<int>(root), MPI_COMM_WORLD, &request);
  if (code != MPI_SUCCESS) {
    ctx->fail("mpi: " + what() + ": " + errorText(code));
    return false;
  }
  return waitWatched(ctx, &request, 1, what);
}

bool mpiBarrier(tmrt_context *ctx) {
  if (!ensureInitialized(ctx))
    return false;
  MPI_Request request;
  int code = MPI_Ibarrier(MPI_COMM_WORLD, &request);
  if (code != MPI_SUCCESS) {
    ctx->fail("mpi: barrier: " + errorText(code));
    return false;
  }
  return waitWatched(ctx, &request, 1,
                     [] { return std::string("in a barrier"); });
}

/// A pipeline stage's exchange: every message tagged (one past its tag:
/// the collectives' exchanges use tag 0), started together, watched.
bool mpiExchange(tmrt_context *ctx, const Message *messages, size_t count) {
  if (!ensureInitialized(ctx))
    return false;
  void *value = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &found);
  int64_t tagBound = found ? *static_cast<int *>(value) : 32767;
  std::vector<MPI_Request> requests(count);
  std::string peers;
  for (size_t i = 0; i < count; ++i) {
    const Message &message = messages[i];
    if (!fits(ctx, message.bytes))
      return false;
    if (message.tag + 1 > tagBound) {
      ctx->fail("mpi: a pipeline exchange's tag " +
                std::to_string(message.tag) + " is above this MPI's bound " +
                std::to_string(tagBound) + " (MPI_TAG_UB)");
      return false;
    }
    int code = message.send
                   ? MPI_Isend(message.data, static_cast<int>(message.bytes),
                               MPI_BYTE, static_cast<int>(message.rank),
                               static_cast<int>(message.tag + 1),
                               MPI_COMM_WORLD, &requests[i])
                   : MPI_Irecv(message.data, static_cast<int>(message.bytes),
                               MPI_BYTE, static_cast<int>(message.rank),
                               static_cast<int>(message.tag + 1),
                               MPI_COMM_WORLD, &requests[i]);
    if (code != MPI_SUCCESS) {
      ctx->fail("mpi: rank " + std::to_string(mpiRank(ctx)) +
                ", in a pipeline exchange with rank " +
                std::to_string(message.rank) + ": " + errorText(code));
      return false;
    }
    std::string peer = std::to_string(message.rank);
    if (peers.find(" " + peer + ",") == std::string::npos)
      peers += " " + peer + ",";
  }
  if (!peers.empty())
    peers.pop_back();
  return waitWatched(ctx, requests.data(), static_cast<int>(count), [&] {
    return "in a pipeline exchange with rank(s)" + peers;
  });
}

void mpiAbort(tmrt_context *ctx, int code) {
  if (ensureInitialized(ctx))
    MPI_Abort(MPI_COMM_WORLD, code);
}

} // namespace

const Communicator &tmrt::mpiCommunicator() {
  static const Communicator communicator = {
      "mpi",        mpiSize,    mpiRank,     mpiSendRecv,
      mpiBroadcast, mpiBarrier, mpiExchange, mpiAbort};
  return communicator;
}
