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
// the whole checkpoint agrees with the step. A shard records the rank and
// layout that wrote it and each tensor's split dimension under its
// checksum; the reader checks them against the manifest and the step.
// Only regular files are read.
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

/// A run's initial weights (trainmem-import --weights writes them): a
/// checkpoint of step 0 that holds every parameter of `slots` whole, as
/// one rank holds it, and nothing else. std::nullopt when `dir` holds
/// another checkpoint (a run's, with its optimizer state, or a manifest of
/// shards); an error when it holds parameters only but not these.
llvm::Expected<std::optional<Checkpoint>>
readInitialWeights(StringRef dir, ArrayRef<TensorSlot> slots);

/// How a run's ranks hold its state: `ranks` processes, ZeRO `stage`
/// (flat shards, rank r the r-th), and tensor-parallel groups of
/// `tensorParts` ranks (rank r at position r mod tensorParts of its group
/// holds that part of each split tensor, along its #train.split).
struct CheckpointLayout {
  int64_t ranks = 1, rank = 0, stage = 0, tensorParts = 1;
  int64_t tensorPosition() const { return rank % tensorParts; }
  int64_t dataRank() const { return rank / tensorParts; }
};

/// Reads rank `layout.rank`'s part of the sharded checkpoint
/// `dir`/manifest names, after checking the stage and each shard's
/// checksum: its shard on the layout that wrote it; on another (other
/// ranks, or one: `ranks` = 1, another stage, another tensor-parallel
/// size), the shards joined into whole tensors (flat shards end to end,
/// tensor-parallel parts along their split dimension) and this rank's part
/// of them, padded as this run's shards are. 8-bit state of a split
/// parameter (blocks of each rank's part) resumes on its own layout only.
llvm::Expected<Checkpoint>
readShardedCheckpoint(StringRef dir, ArrayRef<TensorSlot> slots,
                      const CheckpointLayout &layout);

/// Reads one rank's checkpoint `dir`/checkpoint.bin for `layout`: as it is
/// on one rank (checked against `slots`), each tensor's part on several.
llvm::Expected<Checkpoint> readCheckpointFor(StringRef dir,
                                             ArrayRef<TensorSlot> slots,
                                             const CheckpointLayout &layout);

/// Writes the state tensors of `slots` (their bytes from `read`) as the
/// checkpoint `dir`/`name` of `step`, atomically, creating `dir`. With
/// `layout`, the file is that rank's shard and records the layout and each
/// tensor's split dimension, which the reader checks against the manifest.
llvm::Error writeCheckpoint(StringRef dir, int64_t step,
                            const RunIdentity &identity,
                            ArrayRef<TensorSlot> slots,
                            llvm::function_ref<Bytes(const TensorSlot &)> read,
                            StringRef name = "checkpoint.bin",
                            const CheckpointLayout *layout = nullptr);

/// Writes `data` as `dir`/`name` atomically: a temporary file, fsync,
/// rename over the old one, fsync of the directory.
llvm::Error writeAtomically(StringRef dir, StringRef name, StringRef data);

/// The file of rank `rank`'s shard in a step directory.
std::string shardFileName(int64_t rank, int64_t ranks);

/// Writes `dir`/manifest naming the shards of `layout.ranks` ranks that
/// `dir`/`stepName` holds (each read back for its size and checksum), the
/// layout and how each tensor is split.
llvm::Error writeManifest(StringRef dir, StringRef stepName,
                          const CheckpointLayout &layout, int64_t step,
                          ArrayRef<TensorSlot> slots);

/// A pipeline's checkpoint (trainmem-run --pipeline): each stage's
/// tensors, whole, in a file of its own in a directory of the step
/// (`stageFileName`), and `dir`/manifest naming the files with their sizes
/// and checksums ("trainmem pipeline checkpoint 1"), written by rank 0
/// after every stage's file.
std::string stageFileName(int64_t stage, int64_t stages);
llvm::Error writePipelineManifest(StringRef dir, StringRef stepName,
                                  int64_t stages, int64_t step);
/// Whether `dir`/manifest is a pipeline checkpoint's.
bool isPipelineCheckpoint(StringRef dir);
/// The tensors of `slots` from a pipeline checkpoint, on any layout: every
/// stage's file checked (size, checksum, one step) and their tensors joined
/// (a tensor two stages hold, tied embeddings, must be the same bytes).
/// With `partial` (a stage of a pipeline) the files may hold tensors
/// `slots` does not; without (one rank) they hold exactly these.
llvm::Expected<Checkpoint>
readPipelineCheckpoint(StringRef dir, ArrayRef<TensorSlot> slots, bool partial);

/// The tensors of `slots` (a pipeline stage's) from one rank's checkpoint
/// `dir`/checkpoint.bin, which holds them and the other stages'.
llvm::Expected<Checkpoint> readStageOfCheckpoint(StringRef dir,
                                                 ArrayRef<TensorSlot> slots);

/// Removes from `dir` every checkpoint but `keep`: one rank's
/// checkpoint.bin, a sharded one's manifest and step-K directories.
void removeOtherCheckpoints(StringRef dir, StringRef keep);

/// What `dir` holds of a run's state, in words ("a checkpoint of step 6",
/// "a sharded checkpoint of step 4 over 2 ranks"); none when it holds no
/// checkpoint (no checkpoint.bin and no manifest).
std::optional<std::string> describeCheckpoint(StringRef dir);

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
