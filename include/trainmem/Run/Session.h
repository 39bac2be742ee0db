//===- Session.h - a training run on one backend -----------------*- C++
//-*-===//
//
// What trainmem-run is made of, as a library its tests and other drivers
// reuse: the byte-level corpus, the run's state (parameters and optimizer
// state, initialized from #train.init or restored from a checkpoint,
// Checkpoint.h), and a Session that runs a compiled step on a backend
// and copies state the step could not update in place back to its slot.
//
// Backends: "interpret" runs the tensor-level step on the reference
// evaluator; every other name is a runtime backend (tmrt_context_create:
// "cpu", "cuda" when built), on which the lowered step runs JIT-compiled.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_RUN_SESSION_H
#define TRAINMEM_RUN_SESSION_H

#include "trainmem/Run/Checkpoint.h"
#include "trainmem/Run/Step.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mlir {
namespace train {

//===----------------------------------------------------------------------===//
// Data
//===----------------------------------------------------------------------===//

/// Text trained on byte by byte: token = byte, target = the next byte.
class Corpus {
public:
  explicit Corpus(std::string bytes);
  /// Reads a regular file of at most 16 GiB; an error names the file.
  static llvm::Expected<Corpus> load(StringRef path);

  uint64_t size() const { return bytes.size(); }
  /// FNV-1a of the bytes: tells a checkpoint which data it was trained on.
  uint64_t fingerprint() const { return hash; }
  /// tokens[b][s] = bytes[start_b + s], targets = the next byte, with
  /// start_b drawn from (seed, step, firstRow + b): rows [firstRow,
  /// firstRow + batchSize) of the step's global batch, so that a rank's
  /// part of it does not depend on how many ranks share it. Needs size() >
  /// seqLen.
  void batch(uint64_t seed, int64_t step, int64_t batchSize, int64_t seqLen,
             std::vector<int64_t> &tokens, std::vector<int64_t> &targets,
             int64_t firstRow = 0) const;

private:
  std::string bytes;
  uint64_t hash;
};

/// Initial values of a parameter (the `index`-th of the step) from its
/// #train.init, drawn from the Philox stream of `seed`.
std::vector<float> initialValues(const TensorSlot &slot, unsigned index,
                                 uint64_t seed);

//===----------------------------------------------------------------------===//
// Session
//===----------------------------------------------------------------------===//

class State;

struct SessionOptions {
  /// "interpret" or a runtime backend ("cpu").
  std::string backend = "cpu";
  /// The backend's device (cuda), or -1 for the backend's choice.
  int64_t device = -1;
  int64_t threads = 1;
  /// Seeds the initial weights.
  int64_t seed = 0;
  /// How the ranks of a partitioned step talk: "single" (one process) or
  /// "mpi" (one rank per process under mpirun).
  std::string communicator = "single";
};

/// Where dynamic loss scaling stands (train-loss-scale).
struct LossScaleState {
  double scale;
  int64_t cleanSteps;
  int64_t skippedSteps;
};

class Session {
public:
  ~Session();

  /// Whether `backend` can run here; otherwise an error that names the
  /// backends that can.
  static llvm::Error checkBackend(StringRef backend);

  /// Takes a module whose step prepareStep made ready, lowers it and
  /// checks that it is one this library trains (f32 parameters and state
  /// or 8-bit codes, every parameter with a #train.init, an optimizer,
  /// tokens/targets/step inputs and a loss). Errors are runError's (empty
  /// when diagnostics were emitted already). Nothing is allocated yet.
  static llvm::Expected<std::unique_ptr<Session>>
  create(OwningOpRef<ModuleOp> module, const SessionOptions &options);

  /// Creates the backend's context, allocates the arena and JIT-compiles
  /// the step (runtime backends).
  llvm::Error start();

  /// Sets the state as the parameters' #train.init says, or as `weights`
  /// holds them (whole, by "param:key": readInitialWeights), optimizer
  /// state zero, master weights equal to the parameters.
  llvm::Error initialize(const Checkpoint *weights = nullptr);
  /// Sets the state from a checkpoint read for this step.
  void restore(const Checkpoint &checkpoint);

  /// Runs training step `step` on one batch; its loss.
  llvm::Expected<float> runStep(int64_t step, ArrayRef<int64_t> tokens,
                                ArrayRef<int64_t> targets);
  /// The steps between runs of the step's Hessian step (Sophia's refresh
  /// of its estimate), 0 without one.
  int64_t getHessianInterval() const {
    return layout.hessian ? layout.hessian->every : 0;
  }
  /// Runs the Hessian step on `tokens` (its labels are drawn from the
  /// model, keyed by `step`); the loss on those labels.
  llvm::Expected<float> runHessianStep(int64_t step, ArrayRef<int64_t> tokens);

  /// Writes the state as a checkpoint of `step`, atomically (temporary
  /// file, fsync, rename, fsync of the directory).
  llvm::Error save(StringRef dir, int64_t step,
                   const RunIdentity &identity) const;

  /// A state tensor (param or optimizer_state slot) as it is now.
  Bytes readState(const TensorSlot &slot) const;

  const StepLayout &getLayout() const { return layout; }
  StringRef getBackend() const { return options.backend; }
  int64_t getThreads() const { return options.threads; }
  int64_t getBatchSize() const { return batchSize; }
  int64_t getSeqLen() const { return seqLen; }
  /// Classes of the step's cross-entropy (or the model's `vocab`).
  int64_t getVocab() const { return vocab; }
  /// The highest arena byte written so far (runtime backends).
  std::optional<uint64_t> getMeasuredPeak() const;
  /// The same of the host arena (a step with host memory,
  /// train-offload-optimizer), and the bytes moved between the two arenas
  /// so far (the staging copies of what=states).
  std::optional<uint64_t> getMeasuredHostPeak() const;
  uint64_t getTransferBytes() const;
  /// The ranks the step runs on (1 unless train-zero partitioned it), and
  /// this process's (after start).
  int64_t getRanks() const { return ranks; }
  int64_t getRank() const { return rank; }
  /// Tensor parallelism (train-tensor-parallel): the ranks of a group (1
  /// without), the rank's position in its group and its data-parallel
  /// index (the rows of the global batch it trains on). The grid is row
  /// major, data x tensor.
  int64_t getTensorParts() const { return tensorParts; }
  /// How this run's ranks hold its state, for its checkpoints: the ranks
  /// of a context group (the grid's last axis) hold the same state, one
  /// rank of the layout.
  CheckpointLayout getCheckpointLayout() const {
    return {ranks / contextParts, rank / contextParts, zeroStage, tensorParts};
  }
  /// The grid is row major, data x pipeline x tensor x context
  /// (Megatron's: a tensor group's ranks consecutive).
  int64_t getTensorPosition() const {
    return (rank / contextParts) % tensorParts;
  }
  /// Context parallelism (train-context-parallel): the ranks of a context
  /// group, which train on the same rows, each on its positions (1
  /// without).
  int64_t getContextParts() const { return contextParts; }
  int64_t getDataRank() const {
    return rank / (tensorParts * contextParts * pipelineStages);
  }
  /// Pipeline parallelism (train-pipeline): the stages (1 without) and this
  /// rank's; the ranks of a pipeline train on the same rows.
  int64_t getPipelineStages() const { return pipelineStages; }
  int64_t getPipelineStage() const { return pipelineStage; }
  /// The mean of `value` over the ranks, in rank order (every rank gets
  /// it); `value` itself on one rank.
  llvm::Expected<double> meanOverRanks(double value) const;
  /// The mean of the ranks' losses: summed in f32 in rank order, as one
  /// process sums its micro-batches' (so that N ranks print the loss of one
  /// rank running N micro-batches, to the bit, for a power-of-two N).
  llvm::Expected<float> meanLossOverRanks(float loss) const;
  /// Whether `flag` is set on any rank (one rank's failure that all must
  /// act on); an error when the ranks cannot communicate.
  llvm::Expected<bool> anyRank(bool flag) const;
  /// Ends every rank's process (a rank that failed, so that no other waits
  /// for it); nothing on one rank.
  void abortRanks(int code) const;
  /// A loss-scaled step's scale now, its clean steps since the scale last
  /// changed and the steps it skipped (train-loss-scale's state); none for
  /// a step without loss scaling.
  std::optional<LossScaleState> getLossScale() const;
  /// How the runtime runs the step's 16-bit GEMMs, one line per 16-bit
  /// element type the step's weights have ("bf16 GEMMs: cblas_sbgemm");
  /// empty for an f32 step or the interpreter.
  std::vector<std::string> describeGemms16() const;
  /// Bytes this rank has sent and received through the step's collectives.
  uint64_t getBytesSent() const;
  uint64_t getBytesReceived() const;
  /// What the step's collectives send per rank and step, as the compiler's
  /// communication analysis counts it (0 for a step given lowered).
  uint64_t getPlannedBytesSent() const { return plannedBytesSent; }

  /// One kernel's calls and seconds in the runtime's profile.
  struct KernelTime {
    std::string kernel;
    uint64_t calls = 0;
    double seconds = 0;
  };
  /// Starts the runtime's kernel profile anew (a no-op for the
  /// interpreter, which runs no kernels); false where there is none.
  bool startProfile();
  /// The kernels called since startProfile, most seconds first.
  std::vector<KernelTime> getProfile() const;
  /// The seconds of each kernel call of the step since startProfile, by
  /// its place in the step's program order, summed over the steps run.
  std::vector<double> getProfileByCall() const;
  /// The location of each kernel call of the lowered step, in program
  /// order (the op each was lowered from: an index into
  /// getProfileByCall()'s list).
  std::vector<Location> getKernelCallLocations() const {
    return callLocations;
  }

private:
  Session() = default;
  llvm::Error checkSlots();
  llvm::Error checkHessianSlots() const;
  void copyStateBack(ArrayRef<TensorSlot> results);

  SessionOptions options;
  StepLayout layout;
  OwningOpRef<ModuleOp> lowered;
  /// The tensor-level step, for the interpreter.
  OwningOpRef<ModuleOp> tensorStep;
  func::FuncOp stepFunc;
  /// The tensor-level Hessian step, for the interpreter.
  func::FuncOp hessianFunc;
  double lossScaleInitial = 1.0;
  int64_t batchSize = 0, seqLen = 0, vocab = 0;
  /// The ranks the step runs on (and the ZeRO stage): train-zero's, the
  /// lowered step's, or its collectives' grid's.
  void readRanks(Operation *marked, func::FuncOp stepFunc);
  int64_t ranks = 1, rank = 0, zeroStage = 0, tensorParts = 1, contextParts = 1;
  int64_t pipelineStages = 1, pipelineStage = 0;
  uint64_t plannedBytesSent = 0;
  const TensorSlot *tokensSlot = nullptr, *targetsSlot = nullptr,
                   *stepSlot = nullptr, *lossSlot = nullptr;
  tmrt_context *ctx = nullptr;
  std::vector<Location> callLocations;
  std::unique_ptr<JitStep> jit;
  std::unique_ptr<State> state;
};

} // namespace train
} // namespace mlir

#endif // TRAINMEM_RUN_SESSION_H
