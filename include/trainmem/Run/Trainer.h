//===- Trainer.h - the training loop of a run -------------------*- C++ -*-===//
//
// What trainmem-run does between parsing its command line and printing: a
// Trainer takes a started Session and trains it on a corpus, step after
// step. Before the first step it checks that the ranks run the same step
// (a checksum of the step and the options that shape it), resumes from a
// checkpoint (checking that it continues this run: its step, seed and
// data) or initializes the state, takes the --save directory and opens
// the loss log. Each step draws the rank's rows of the global batch, runs,
// averages the loss over the ranks, logs it and checkpoints as asked;
// after the last it saves, and its summary says how the loss and the step
// times went. Errors are llvm::Error (runError): one whose message is
// empty was reported already (diagnostics).
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_RUN_TRAINER_H
#define TRAINMEM_RUN_TRAINER_H

#include "trainmem/Run/Session.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <csignal>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mlir {
namespace train {

/// Fault injection for the failure tests: rank `rank` dies by SIGKILL
/// (kill), stops answering (hang) or is sent SIGTERM (term: it goes on to
/// the step boundary, as a signal from outside) at step `step`.
struct Fault {
  enum class Kind { kill, hang, term };
  Kind kind = Kind::hang;
  int64_t rank = 0, step = 0;
};

/// Reads TRAINMEM_FAULT's value: kill:RANK:STEP, hang:RANK:STEP or
/// term:RANK:STEP.
llvm::Expected<Fault> parseFault(StringRef text);

struct TrainerOptions {
  /// Train until this step (from 0).
  int64_t steps = 0;
  /// Seeds the batches (the session's options seed the weights).
  int64_t seed = 0;
  /// The text trained on, byte by byte.
  std::string dataFile;
  /// The step's file: the ranks compare a checksum of it and of
  /// `shapingOptions` (the options that shape the step), and the loss log
  /// is never written onto it.
  std::string stepFile;
  std::vector<std::string> shapingOptions;
  /// Where to checkpoint at the end (and every `saveEvery` steps, and
  /// when `*stopSignal` is set); empty: nowhere.
  std::string saveDir;
  int64_t saveEvery = 0;
  /// The checkpoint to continue from; empty: initial state.
  std::string resumeDir;
  /// Resume although the seed or the data differ from the checkpoint's.
  bool allowDataChange = false;
  /// Save into `saveDir` although it holds a checkpoint this run does not
  /// resume from (it is replaced at the first save).
  bool overwrite = false;
  /// "step loss" lines, appended to when resuming; empty: none.
  std::string lossLog;
  std::optional<Fault> fault;
  /// Set (by a signal handler) to stop after the step running, with a
  /// checkpoint when `saveDir` is set.
  const volatile std::sig_atomic_t *stopSignal = nullptr;
};

/// What a step did, for the progress line.
struct StepReport {
  int64_t step = 0;
  /// The global batch's loss (the mean of the ranks').
  float loss = 0;
  /// Since the run's first step began, and the tokens per second of all
  /// ranks over that time.
  double seconds = 0;
  double tokensPerSecond = 0;
  /// Dynamic loss scaling before and after the step (none without it).
  std::optional<LossScaleState> scaleBefore, scaleAfter;
};

/// How a run went, step by step.
struct RunSummary {
  int64_t firstStep = 1, lastStep = 0;
  std::vector<float> losses;
  std::vector<double> stepSeconds;

  /// The mean loss of up to `most` equal windows of steps.
  struct Window {
    int64_t first, last;
    double mean;
  };
  std::vector<Window> lossWindows(size_t most = 10) const;
  /// The best and median step times (batch in, step, state back, loss
  /// out), the first step apart when there are others: it also pays for
  /// first touches.
  struct Times {
    double best, median;
    size_t steps;
    bool afterFirst;
  };
  std::optional<Times> stepTimes() const;
};

/// How a run of steps ended without an error.
struct RunEnd {
  /// The signal that stopped it after step `lastStep`; none when every
  /// step ran.
  std::optional<int> stopSignal;
  int64_t lastStep = 0;
};

class Trainer {
public:
  /// Loads the corpus and checks it and the step's vocabulary against the
  /// session (created, not necessarily started).
  static llvm::Expected<std::unique_ptr<Trainer>>
  create(Session &session, TrainerOptions options);

  /// After the session started: the ranks agree on the step; the state is
  /// the checkpoint's or initial; the save directory is checked and taken;
  /// the loss log is opened.
  llvm::Error prepare();

  /// Trains steps getFirstStep()..steps, then saves. After each step,
  /// `onRan` is called as soon as this rank ran it (its loss the rank's,
  /// the loss scales set: what it prints comes before any rank moves on to
  /// the next collective), and `onStep` once the ranks' losses are
  /// averaged and logged. A stop signal ends the run after its step
  /// (checkpointed).
  llvm::Expected<RunEnd> run(function_ref<void(const StepReport &)> onRan,
                             function_ref<void(const StepReport &)> onStep);

  int64_t getFirstStep() const { return summary.firstStep; }
  const RunSummary &getSummary() const { return summary; }

private:
  Trainer(Session &session, TrainerOptions options, Corpus corpus);
  llvm::Error checkRanksAgree();
  llvm::Error resume();
  llvm::Error openLossLog();
  llvm::Error checkSaveKeepsState() const;
  llvm::Error truncateLossLog();
  llvm::Expected<int> agreeOnStop();
  /// Writes the step's loss line; on a write error, saves and fails.
  llvm::Error logLoss(int64_t step, float loss);
  llvm::Error save(int64_t step);

  Session &session;
  TrainerOptions options;
  Corpus corpus;
  RunIdentity identity;
  std::unique_ptr<llvm::raw_fd_ostream> lossFile;
  RunSummary summary;
};

} // namespace train
} // namespace mlir

#endif // TRAINMEM_RUN_TRAINER_H
