//===- Mpi.cpp - the MPI communicator -------------------------------------===//
//
// One rank per process under mpirun: MPI_COMM_WORLD, initialized on first
// use and finalized at exit. Errors come back as return codes
// (MPI_ERRORS_RETURN) and fail the context with a message naming the peer,
// instead of aborting in the MPI library.
//
//===----------------------------------------------------------------------===//

#include "../Backend.h"
#include "../Context.h"

#include <mpi.h>

#include <cstdlib>
#include <limits>
#include <mutex>
#include <string>

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

bool mpiSendRecv(tmrt_context *ctx, const void *send, uint64_t sendBytes,
                 int64_t to, void *recv, uint64_t recvBytes, int64_t from) {
  if (!ensureInitialized(ctx) || !fits(ctx, sendBytes) ||
      !fits(ctx, recvBytes))
    return false;
  int code = MPI_Sendrecv(send, static_cast<int>(sendBytes), MPI_BYTE,
                          static_cast<int>(to), 0, recv,
                          static_cast<int>(recvBytes), MPI_BYTE,
                          static_cast<int>(from), 0, MPI_COMM_WORLD,
                          MPI_STATUS_IGNORE);
  if (code != MPI_SUCCESS) {
    ctx->fail("mpi: rank " + std::to_string(mpiRank(ctx)) +
              " exchanging with ranks " + std::to_string(to) + " and " +
              std::to_string(from) + ": " + errorText(code));
    return false;
  }
  return true;
}

bool mpiBroadcast(tmrt_context *ctx, void *data, uint64_t bytes,
                  int64_t root) {
  if (!ensureInitialized(ctx) || !fits(ctx, bytes))
    return false;
  int code = MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE,
                       static_cast<int>(root), MPI_COMM_WORLD);
  if (code != MPI_SUCCESS) {
    ctx->fail("mpi: broadcast from rank " + std::to_string(root) + ": " +
              errorText(code));
    return false;
  }
  return true;
}

bool mpiBarrier(tmrt_context *ctx) {
  if (!ensureInitialized(ctx))
    return false;
  int code = MPI_Barrier(MPI_COMM_WORLD);
  if (code != MPI_SUCCESS) {
    ctx->fail("mpi: barrier: " + errorText(code));
    return false;
  }
  return true;
}

} // namespace

const Communicator &tmrt::mpiCommunicator() {
  static const Communicator communicator = {
      "mpi", mpiSize, mpiRank, mpiSendRecv, mpiBroadcast, mpiBarrier};
  return communicator;
}
