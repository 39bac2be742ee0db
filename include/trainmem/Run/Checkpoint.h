//===- Checkpoint.h - the checkpoint format of a run ------------*- C++ -*-===//
//
// A run's state on disk. One rank's checkpoint is `dir`/checkpoint.bin: a
// magic word, the step, the run's identity (seed, the data's size and
// checksum), then each state tensor (role, key, dtype, shape, bytes), and
// an FNV-1a checksum of all of it. A step partitioned over N ranks
// checkpoints as one such file per rank, `dir`/step-<K>/shard-<r>-of-<N>.bin,
// and `dir`/manifest, written last by rank 0 (ranks, stage, step, each
// tensor's shapes, and each shard's file, size and checksum), so that the
// manifest always names a complete set. Files are written atomically
// (temporary, fsync, rename, fsync of the directory); every field read is
// checked before it is used, and nothing of a run's state is touched until
// the whole checkpoint agrees with the step.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_RUN_CHECKPOINT_H
#define TRAINMEM_RUN_CHECKPOINT_H

#include "trainmem/Run/Step.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mlir {
namespace train {

/// The bytes of a tensor as the arena holds it (f32 values, i8 codes).
using Bytes = std::vector<uint8_t>;

/// FNV-1a of `data`: the checksum of checkpoints, manifests and corpora.
uint64_t fnv1a(StringRef data);

/// Parameters and optimizer state: what a checkpoint holds.
bool isState(const TensorSlot &slot);

/// Largest step a run or checkpoint may reach: far beyond any run, far
/// below where step arithmetic (step + 1, the Philox stream of the batch)
/// wraps.
constexpr uint64_t kMaxStep = uint64_t(1) << 53;

/// What a run trains on besides its state: resuming with other values
/// breaks the promise that a resumed run equals one that never stopped.
struct RunIdentity {
  int64_t seed = 0;
  uint64_t dataBytes = 0;
  uint64_t dataHash = 0;
};

/// A checkpoint read and checked completely against a step's slots.
struct Checkpoint {
  int64_t step = 0;
  std::optional<RunIdentity> identity; // absent in version 01
  /// By "role:key".
  std::map<std::string, Bytes> tensors;
};

/// Reads `dir`/`name` and checks every field and every tensor against
/// `slots`.
llvm::Expected<Checkpoint> readCheckpoint(StringRef dir,
                                          ArrayRef<TensorSlot> slots,
                                          StringRef name = "checkpoint.bin");

/// Reads rank `rank`'s part of the sharded checkpoint `dir`/manifest
/// names, after checking the stage and each shard's checksum: its shard on
/// as many ranks as wrote it; on another number of ranks (or one: `ranks`
/// = 1) or another stage, the shards joined into whole tensors and this
/// rank's part of them, padded as this run's shards are.
llvm::Expected<Checkpoint> readShardedCheckpoint(StringRef dir,
                                                 ArrayRef<TensorSlot> slots,
                                                 int64_t ranks, int64_t rank,
                                                 int64_t stage);

/// Writes the state tensors of `slots` (their bytes from `read`) as the
/// checkpoint `dir`/`name` of `step`, atomically, creating `dir`.
llvm::Error writeCheckpoint(StringRef dir, int64_t step,
                            const RunIdentity &identity,
                            ArrayRef<TensorSlot> slots,
                            llvm::function_ref<Bytes(const TensorSlot &)> read,
                            StringRef name = "checkpoint.bin");

/// The file of rank `rank`'s shard in a step directory.
std::string shardFileName(int64_t rank, int64_t ranks);

/// Writes `dir`/manifest naming the shards of `ranks` ranks that
/// `dir`/`stepName` holds (each read back for its size and checksum).
llvm::Error writeManifest(StringRef dir, StringRef stepName, int64_t ranks,
                          int64_t stage, int64_t step,
                          ArrayRef<TensorSlot> slots);

/// Removes from `dir` every checkpoint but `keep`: one rank's
/// checkpoint.bin, a sharded one's manifest and step-K directories.
void removeOtherCheckpoints(StringRef dir, StringRef keep);

/// Checks that a checkpoint can be written into `dir` (creating it), so
/// that a bad path is found before a run, not after it.
llvm::Error checkSaveDir(StringRef dir);

/// The file in a --save directory whose lock the saving run holds.
constexpr llvm::StringLiteral kSaveDirLockName = "trainmem-run.lock";

/// Takes the --save directory `dir` for this process until it ends (an
/// advisory lock on a file in it): a second run saving into the same
/// directory is refused at its start, with the holder's pid, instead of
/// the two overwriting each other's checkpoints. One process per run takes
/// it (rank 0 of several).
llvm::Error lockSaveDir(StringRef dir);

} // namespace train
} // namespace mlir

#endif // TRAINMEM_RUN_CHECKPOINT_H
