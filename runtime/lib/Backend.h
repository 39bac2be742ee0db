//===- Backend.h - the backend and communicator tables ----------*- C++ -*-===//
//
// A backend is a table: where the arena lives (allocate, free, copy to and
// from the host) and one function per kernel of Kernels.def. The C entry
// points tmrt_<kernel> (Dispatch.cpp) call through the table of the context
// they are given, so a compiled step runs on whichever backend its context
// was created with. The CPU backend is one entry of the registry; a CUDA
// backend is another, filled in a file of its own, with nothing else to
// change.
//
// Collectives go through a second table, the communicator: how many
// processes take part and how they exchange bytes. One process ("single")
// and MPI ("mpi") are built; NCCL is another entry.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_RUNTIME_BACKEND_H
#define TRAINMEM_RUNTIME_BACKEND_H

#include "trainmem-runtime/Runtime.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tmrt {

struct Backend {
  /// The name tmrt_context_create selects it by.
  const char *name;
  /// Whether the arena is host memory (tmrt_arena_base gives its address).
  bool hostArena;
  /// The arena: one allocation per context, 64-byte aligned. allocArena
  /// returns null when the memory cannot be had.
  void *(*allocArena)(tmrt_context *ctx, uint64_t bytes);
  void (*freeArena)(tmrt_context *ctx, void *arena);
  /// Copies between the host and the arena (the arena may be device memory).
  void (*writeArena)(tmrt_context *ctx, uint64_t offset, const void *source,
                     uint64_t bytes);
  void (*readArena)(tmrt_context *ctx, uint64_t offset, void *destination,
                    uint64_t bytes);
  /// Copies within the arena; the regions may overlap.
  void (*copyArena)(tmrt_context *ctx, uint64_t from, uint64_t to,
                    uint64_t bytes);
  /// The kernels.
#define TMRT_KERNEL(name, parameters, arguments) void(*name) parameters;
#include "trainmem-runtime/Kernels.def"
  /// Called when a context is created on the backend and before it is
  /// destroyed (null: nothing to do): a device backend picks its device
  /// and makes its stream (tmrt_context::deviceState). `open` returns
  /// false with `error` set when the backend cannot run here (no device).
  bool (*open)(tmrt_context *ctx, std::string &error);
  void (*close)(tmrt_context *ctx);
  /// Waits until the kernels called so far have run (null: they run
  /// before they return); the kernel profile calls it after each.
  void (*synchronize)(tmrt_context *ctx);
  /// Pins the host arena (`bytes` at `memory`) for asynchronous copies,
  /// and unpins it before it is freed (null: nothing to do). pinHost
  /// returns false after failing the context.
  bool (*pinHost)(tmrt_context *ctx, void *memory, uint64_t bytes) = nullptr;
  void (*unpinHost)(tmrt_context *ctx, void *memory) = nullptr;
};

/// One message of a pipeline stage's exchange (tmrt_exchange_*): `bytes`
/// at `data` sent to, or received from, world rank `rank`, with `tag`.
struct Message {
  bool send;
  void *data;
  uint64_t bytes;
  int64_t rank;
  int64_t tag;
};

/// How the processes of a step talk: their number, this one's rank, and a
/// point-to-point exchange that the collectives' rings are built of
/// (cpu/Collectives.cpp), plus a broadcast and a barrier. Each returns
/// false after failing the context with a message naming the peer.
struct Communicator {
  const char *name;
  int64_t (*size)(tmrt_context *ctx);
  int64_t (*rank)(tmrt_context *ctx);
  /// Sends `sendBytes` at `send` to rank `to` while receiving `recvBytes`
  /// into `recv` from rank `from`.
  bool (*sendRecv)(tmrt_context *ctx, const void *send, uint64_t sendBytes,
                   int64_t to, void *recv, uint64_t recvBytes, int64_t from);
  bool (*broadcast)(tmrt_context *ctx, void *data, uint64_t bytes,
                    int64_t root);
  bool (*barrier)(tmrt_context *ctx);
  /// Starts every message of `messages` and returns when all have arrived
  /// and left (a pipeline stage's exchange).
  bool (*exchange)(tmrt_context *ctx, const Message *messages, size_t count);
  /// Ends every rank's process (a rank that fails must not leave the others
  /// waiting for it); one process has nothing to end.
  void (*abort)(tmrt_context *ctx, int code);
};

/// A collective's process group: `size` ranks `stride` apart in the world,
/// the one this rank is in. An axis of a row-major grid of ranks is one: on
/// a (data, tensor) grid of d x t ranks the tensor groups are (t, 1), the
/// data groups (d, t); the whole world is (N, 1).
struct Group {
  int64_t size = 1, stride = 1;
  /// This rank's position in its group, and the group's first world rank.
  int64_t position = 0, base = 0;
  /// The world rank of the group's `i`-th member.
  int64_t member(int64_t i) const { return base + i * stride; }
};
/// Notes a message of the pipeline exchange begun (tmrt_exchange_send /
/// _recv), checking its size and tag; and takes the exchange's messages,
/// each peer resolved to its world rank, with the bytes it sends and
/// receives (false after failing the context: a peer outside the world).
/// `dataOf` gives a reference's memory.
void noteExchange(tmrt_context *ctx, bool send, int64_t ref, int64_t bytes,
                  int64_t peer, int64_t tag);
bool takeExchange(tmrt_context *ctx, void *(*dataOf)(tmrt_context *, int64_t),
                  std::vector<Message> &messages, uint64_t &sent,
                  uint64_t &received);

/// This rank's group (size, stride); false after failing the context
/// (naming `kernel`) when the world does not split into such groups.
bool groupOf(tmrt_context *ctx, const char *kernel, int64_t size,
             int64_t stride, Group &group);
/// A sharded collective's counts: `n` elements per shard in `outer` equal
/// blocks (a split along a dimension with `outer` elements before it; 1
/// for a split along the first); false after failing the context.
bool checkShards(tmrt_context *ctx, const char *kernel, int64_t n,
                 int64_t outer);

/// Whether a split over a process group has positive `parts` and group
/// `stride`; false after failing the context naming `kernel`.
bool checkSplit(tmrt_context *ctx, const char *kernel, int64_t parts,
                int64_t stride);
/// This rank's position among the `parts` parts of a split over its group
/// of ranks `stride` apart (a tensor-parallel rank's part of a table,
/// logits or a dropout mask): (rank / stride) mod parts.
int64_t splitPosition(tmrt_context *ctx, int64_t parts, int64_t stride);

/// How a collective combines the ranks' values.
enum class Reduction { Sum, Average, Max };
/// The reduction an all-reduce's `reduction` argument names
/// (TMRT_REDUCE_*); false after failing the context.
bool reductionOf(tmrt_context *ctx, const char *kernel, int64_t reduction,
                 Reduction &result);

/// The communicator named `name`, or null; `known` is true for a name the
/// runtime knows but was built without (mpi, without MPI).
const Communicator *lookupCommunicator(const char *name, bool &known);
const char *builtCommunicatorNames();
#ifdef TMRT_HAVE_MPI
/// OpenMPI (mpi/Mpi.cpp): MPI_COMM_WORLD, initialized on first use.
const Communicator &mpiCommunicator();
#endif

/// The backend named `name`, or null. `known` is true for a name
/// the runtime knows but was built without (cuda, without CUDA).
const Backend *lookupBackend(const char *name, bool &known);
/// The names of the backends built in, comma-separated ("cpu").
const char *builtBackendNames();

/// The CPU backend (cpu/Kernels.cpp).
const Backend &cpuBackend();
#ifdef TMRT_HAVE_CUDA
/// The CUDA backend (cuda/CudaBackend.cu), built with the CUDA toolkit.
const Backend &cudaBackend();
/// Whether cuBLAS and NCCL load (dlopen) and have every call the backend
/// makes; what was found or missing in `report`. Needs no device.
bool cudaLibrariesLoad(std::string &report);
#endif
/// Seconds a collective may make no progress before the rank gives up
/// (TMRT_MPI_TIMEOUT, default 30): the MPI communicator's and NCCL's.
double collectiveTimeoutSeconds();
/// One process: collectives leave the data as it is.
const Communicator &singleProcessCommunicator();

} // namespace tmrt

#endif // TRAINMEM_RUNTIME_BACKEND_H
