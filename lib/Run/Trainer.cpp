//===- Trainer.cpp - the training loop of a run ---------------------------===//
//
// Trainer.h: the checks before the first step, the loop over the steps, the
// loss log, the checkpoints and the summary of a run.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Run/Trainer.h"
#include "trainmem/Run/Checkpoint.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

using namespace mlir;
using namespace mlir::train;

llvm::Expected<Fault> mlir::train::parseFault(StringRef text) {
  SmallVector<StringRef> parts;
  text.split(parts, ':');
  Fault fault;
  std::optional<Fault::Kind> kind;
  if (parts.size() == 3)
    kind = llvm::StringSwitch<std::optional<Fault::Kind>>(parts[0])
               .Case("kill", Fault::Kind::kill)
               .Case("hang", Fault::Kind::hang)
               .Case("term", Fault::Kind::term)
               .Default(std::nullopt);
  if (!kind || parts[1].getAsInteger(10, fault.rank) ||
      parts[2].getAsInteger(10, fault.step))
    return runError(("TRAINMEM_FAULT is kill:RANK:STEP, hang:RANK:STEP or "
                     "term:RANK:STEP, got '" +
                     text + "'")
                        .str());
  fault.kind = *kind;
  return fault;
}

std::vector<RunSummary::Window> RunSummary::lossWindows(size_t most) const {
  std::vector<Window> windows;
  size_t count = std::min(most, losses.size());
  for (size_t w = 0; w < count; ++w) {
    size_t begin = w * losses.size() / count;
    size_t end = (w + 1) * losses.size() / count;
    double sum = 0.0;
    for (size_t i = begin; i < end; ++i)
      sum += losses[i];
    windows.push_back({firstStep + static_cast<int64_t>(begin),
                       firstStep + static_cast<int64_t>(end) - 1,
                       sum / static_cast<double>(end - begin)});
  }
  return windows;
}

std::optional<RunSummary::Times> RunSummary::stepTimes() const {
  if (stepSeconds.empty())
    return std::nullopt;
  bool afterFirst = stepSeconds.size() > 1;
  std::vector<double> timed(stepSeconds.begin() + (afterFirst ? 1 : 0),
                            stepSeconds.end());
  std::sort(timed.begin(), timed.end());
  return Times{timed.front(), timed[timed.size() / 2], timed.size(),
               afterFirst};
}

/// Whether `path` (which need not exist) lies in directory `dir` or below
/// it, links resolved.
static bool isInDirectory(StringRef path, StringRef dir) {
  llvm::SmallString<256> realDir, parent;
  if (llvm::sys::fs::real_path(dir, realDir))
    return false;
  StringRef parentName = llvm::sys::path::parent_path(path);
  if (llvm::sys::fs::real_path(parentName.empty() ? "." : parentName, parent))
    return false;
  StringRef inside = parent;
  return inside == realDir ||
         (inside.starts_with(realDir) &&
          inside.drop_front(realDir.size()).starts_with("/"));
}

Trainer::Trainer(Session &session, TrainerOptions options, Corpus corpus)
    : session(session), options(std::move(options)), corpus(std::move(corpus)) {
  identity = {this->options.seed, this->corpus.size(),
              this->corpus.fingerprint()};
  summary.lastStep = this->options.steps;
}

llvm::Expected<std::unique_ptr<Trainer>>
Trainer::create(Session &session, TrainerOptions options) {
  // Byte-level data: the step's vocabulary must hold every byte, and the
  // text one sequence and its last target.
  if (session.getVocab() < 256)
    return runError("the step's vocabulary has " +
                    std::to_string(session.getVocab()) +
                    " tokens; byte-level data needs 256");
  llvm::Expected<Corpus> corpus = Corpus::load(options.dataFile);
  if (!corpus)
    return corpus.takeError();
  if (static_cast<int64_t>(corpus->size()) < session.getSeqLen() + 1)
    return runError("data '" + options.dataFile + "' has " +
                    std::to_string(corpus->size()) +
                    " bytes; one sequence of the step needs " +
                    std::to_string(session.getSeqLen() + 1));
  return std::unique_ptr<Trainer>(
      new Trainer(session, std::move(options), std::move(*corpus)));
}

/// The ranks must run the same step: a checksum of the step file and the
/// options that shape it, compared across them (in 16-bit parts, summed:
/// the largest differs from the mean wherever two ranks differ).
llvm::Error Trainer::checkRanksAgree() {
  if (session.getRanks() <= 1)
    return llvm::Error::success();
  auto file = llvm::MemoryBuffer::getFile(options.stepFile);
  std::string what = file ? (*file)->getBuffer().str() : std::string();
  for (const std::string &option : options.shapingOptions)
    what += "\n" + option;
  uint64_t hash = fnv1a(what);
  for (int part = 0; part < 4; ++part) {
    double mine = static_cast<double>((hash >> (16 * part)) & 0xffff);
    llvm::Expected<double> mean = session.meanOverRanks(mine);
    if (!mean)
      return mean.takeError();
    if (*mean != mine)
      return runError("rank " + std::to_string(session.getRank()) +
                      ": the ranks disagree on the step (the step file or "
                      "the options that shape it differ between ranks; "
                      "checksum " +
                      std::to_string(hash) + " here)");
  }
  return llvm::Error::success();
}

/// The checkpoint's state, after checking that it continues this run:
/// steps left to train, the same seed and data (unless allowed).
llvm::Error Trainer::resume() {
  const std::string &dir = options.resumeDir;
  // A sharded checkpoint (a manifest) on any number of ranks, or one
  // rank's checkpoint.
  const StepLayout &layout = session.getLayout();
  // Initial weights (trainmem-import --weights): the run starts at step 1
  // from them, with fresh optimizer state; no data has been read yet.
  llvm::Expected<std::optional<Checkpoint>> weights =
      readInitialWeights(dir, layout.arguments);
  if (!weights)
    return weights.takeError();
  if (*weights) {
    summary.firstStep = 1;
    return session.initialize(&**weights);
  }
  CheckpointLayout ranks = session.getCheckpointLayout();
  // A pipeline's checkpoint on any layout; one rank's on a pipeline's
  // stages, each its tensors.
  bool stages = session.getPipelineStages() > 1;
  llvm::Expected<Checkpoint> read =
      isPipelineCheckpoint(dir)
          ? readPipelineCheckpoint(dir, layout.arguments, stages)
      : llvm::sys::fs::exists(dir + "/manifest")
          ? readShardedCheckpoint(dir, layout.arguments, ranks)
      : stages ? readStageOfCheckpoint(dir, layout.arguments)
               : readCheckpointFor(dir, layout.arguments, ranks);
  if (!read)
    return read.takeError();
  const Checkpoint &checkpoint = *read;
  std::string steps = std::to_string(options.steps);
  if (checkpoint.step >= options.steps)
    return runError("the checkpoint in '" + dir + "' is at step " +
                    std::to_string(checkpoint.step) + " and --steps " + steps +
                    " asks to train until step " + steps +
                    ": nothing to train (--steps counts from 0, not from "
                    "the checkpoint)");
  if (checkpoint.identity && !options.allowDataChange) {
    const RunIdentity &saved = *checkpoint.identity;
    if (saved.seed != identity.seed)
      return runError("the checkpoint was trained with --seed " +
                      std::to_string(saved.seed) + ", this run has --seed " +
                      std::to_string(identity.seed) +
                      "; batches would differ from the run it continues "
                      "(--allow-data-change to resume anyway)");
    if (saved.dataBytes != identity.dataBytes ||
        saved.dataHash != identity.dataHash)
      return runError("the checkpoint was trained on other data (" +
                      std::to_string(saved.dataBytes) + " bytes) than '" +
                      options.dataFile + "' (" +
                      std::to_string(identity.dataBytes) +
                      " bytes, another checksum); --allow-data-change to "
                      "resume anyway");
  }
  session.restore(checkpoint);
  summary.firstStep = checkpoint.step + 1;
  return llvm::Error::success();
}

/// The loss log: never onto a file the run reads, nor into a checkpoint
/// directory (its manifest, shards and lock are the checkpoint's); a
/// resumed run continues the log of the run it continues.
llvm::Error Trainer::openLossLog() {
  const std::string &log = options.lossLog;
  if (log.empty())
    return llvm::Error::success();
  for (const std::string &input : {options.dataFile, options.stepFile}) {
    bool same = false;
    if (!llvm::sys::fs::equivalent(log, input, same) && same)
      return runError("--loss-log '" + log + "' is '" + input +
                      "', which this run reads or writes; give another file");
  }
  for (const std::string &dir : {options.resumeDir, options.saveDir})
    if (!dir.empty() && isInDirectory(log, dir))
      return runError("--loss-log '" + log +
                      "' is in the checkpoint "
                      "directory '" +
                      dir +
                      "', whose files the checkpoint owns; give a file "
                      "outside it");
  // Rank 0 writes the log; the others leave it alone.
  if (session.getRank() != 0)
    return llvm::Error::success();
  if (summary.firstStep > 1)
    if (llvm::Error error = truncateLossLog())
      return error;
  std::error_code ec;
  lossFile = std::make_unique<llvm::raw_fd_ostream>(
      log, ec,
      summary.firstStep == 1 ? llvm::sys::fs::OF_None
                             : llvm::sys::fs::OF_Append);
  if (ec)
    return runError("cannot write '" + log + "': " + ec.message());
  return llvm::Error::success();
}

/// A --save directory that holds a checkpoint this run does not continue
/// would have it replaced at the first save: the steps it trained are
/// lost unless the user says so (--overwrite).
llvm::Error Trainer::checkSaveKeepsState() const {
  if (options.overwrite)
    return llvm::Error::success();
  std::optional<std::string> held = describeCheckpoint(options.saveDir);
  if (!held)
    return llvm::Error::success();
  bool resumed = false;
  if (!options.resumeDir.empty() &&
      !llvm::sys::fs::equivalent(options.resumeDir, options.saveDir,
                                 resumed) &&
      resumed)
    return llvm::Error::success();
  return runError("--save directory '" + options.saveDir + "' holds " +
                  *held +
                  ", which this run does not resume from: saving would "
                  "replace it; --resume " +
                  options.saveDir + " to continue it, --overwrite to "
                  "replace it, or save elsewhere");
}

/// A resumed run continues the log of the run it continues: the steps
/// that run logged past the checkpoint (it was killed before saving them)
/// are trained again, and their lines go, so that each step is logged once.
/// The log is rewritten atomically (writeAtomically).
llvm::Error Trainer::truncateLossLog() {
  const std::string &log = options.lossLog;
  llvm::sys::fs::file_status status;
  if (llvm::sys::fs::status(log, status) ||
      status.type() != llvm::sys::fs::file_type::regular_file)
    return llvm::Error::success();
  auto buffer = llvm::MemoryBuffer::getFile(log, /*IsText=*/true);
  if (!buffer)
    return runError("cannot read the loss log '" + log +
                    "': " + buffer.getError().message());
  SmallVector<StringRef> lines;
  (*buffer)->getBuffer().split(lines, '\n', -1, /*KeepEmpty=*/false);
  std::string kept;
  bool dropped = false;
  for (StringRef line : lines) {
    int64_t step = 0;
    if (!line.split(' ').first.getAsInteger(10, step) &&
        step >= summary.firstStep) {
      dropped = true;
      continue;
    }
    kept += line.str() + "\n";
  }
  if (!dropped)
    return llvm::Error::success();
  StringRef parent = llvm::sys::path::parent_path(log);
  if (llvm::Error error =
          writeAtomically(parent.empty() ? "." : parent,
                          llvm::sys::path::filename(log), kept))
    return runError("cannot rewrite the loss log '" + log +
                    "': " + llvm::toString(std::move(error)));
  return llvm::Error::success();
}

llvm::Error Trainer::prepare() {
  if (llvm::Error error = checkRanksAgree())
    return error;
  if (!options.resumeDir.empty()) {
    if (llvm::Error failure = resume())
      return failure;
  } else if (llvm::Error failure = session.initialize()) {
    return failure;
  }
  // Where the run writes is checked before the first step; one run saves
  // into a directory at a time (rank 0 holds it for the run).
  if (!options.saveDir.empty()) {
    if (llvm::Error failure = checkSaveKeepsState())
      return failure;
    if (llvm::Error failure = checkSaveDir(options.saveDir))
      return failure;
    if (session.getRank() == 0)
      if (llvm::Error failure = lockSaveDir(options.saveDir))
        return failure;
  }
  return openLossLog();
}

llvm::Error Trainer::save(int64_t step) {
  if (options.saveDir.empty())
    return llvm::Error::success();
  return session.save(options.saveDir, step, identity);
}

/// A log that cannot be written (a full disk) stops the run at this step,
/// its state saved as a stop by signal saves it.
llvm::Error Trainer::logLoss(int64_t step, float loss) {
  bool leader = session.getRank() == 0;
  std::string logError;
  if (lossFile && leader) {
    *lossFile << step << " " << llvm::format("%.6f", loss) << "\n";
    lossFile->flush();
    if (lossFile->has_error()) {
      logError = "cannot write the loss log '" + options.lossLog +
                 "' at step " + std::to_string(step) + ": " +
                 lossFile->error().message();
      lossFile->clear_error();
    }
  }
  llvm::Expected<bool> logFailed = session.anyRank(!logError.empty());
  if (!logFailed)
    return logFailed.takeError();
  if (!*logFailed)
    return llvm::Error::success();
  std::string message =
      leader ? logError : "rank 0 could not write the loss log";
  if (options.saveDir.empty())
    return runError(message + "; stopping (no --save given, nothing saved)");
  if (llvm::Error failure = session.save(options.saveDir, step, identity))
    return runError(message + "; and " + llvm::toString(std::move(failure)));
  return runError(message + "; stopping with a checkpoint of step " +
                  std::to_string(step) + " in '" + options.saveDir + "'");
}

/// A signal to any rank stops every rank at this step boundary: the
/// ranks agree on it (a sum over them each step), so that all of them
/// save (a collective save) and end; the signal is the signalled ranks'
/// (their mean, where two ranks got different ones). 0: go on.
llvm::Expected<int> Trainer::agreeOnStop() {
  int mine = options.stopSignal ? static_cast<int>(*options.stopSignal) : 0;
  llvm::Expected<bool> any = session.anyRank(mine != 0);
  if (!any)
    return any.takeError();
  if (!*any || session.getRanks() <= 1)
    return *any ? mine : 0;
  llvm::Expected<double> signalled = session.meanOverRanks(mine != 0);
  if (!signalled)
    return signalled.takeError();
  llvm::Expected<double> signals = session.meanOverRanks(mine);
  if (!signals)
    return signals.takeError();
  return mine ? mine : static_cast<int>(std::lround(*signals / *signalled));
}

llvm::Expected<RunEnd>
Trainer::run(function_ref<void(const StepReport &)> onRan,
             function_ref<void(const StepReport &)> onStep) {
  int64_t batchSize = session.getBatchSize(), seqLen = session.getSeqLen();
  int64_t ranks = session.getRanks(), rank = session.getRank();
  std::vector<int64_t> tokens, targets;
  auto start = std::chrono::steady_clock::now();
  auto secondsSince = [](std::chrono::steady_clock::time_point since) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         since)
        .count();
  };
  for (int64_t step = summary.firstStep; step <= options.steps; ++step) {
    auto stepStart = std::chrono::steady_clock::now();
    if (options.fault && options.fault->rank == rank &&
        options.fault->step == step) {
      if (options.fault->kind == Fault::Kind::kill)
        std::raise(SIGKILL);
      if (options.fault->kind == Fault::Kind::term)
        std::raise(SIGTERM);
      else
        for (;;)
          std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    // Rank r trains on rows [d x batch, (d + 1) x batch) of the global
    // batch, d its data-parallel index (r without tensor parallelism; the
    // ranks of a tensor-parallel group train on the same rows).
    corpus.batch(options.seed, step, batchSize, seqLen, tokens, targets,
                 session.getDataRank() * batchSize);
    StepReport report;
    report.step = step;
    report.scaleBefore = session.getLossScale();
    llvm::Expected<float> rankLoss = session.runStep(step, tokens, targets);
    if (!rankLoss)
      return rankLoss.takeError();
    report.scaleAfter = session.getLossScale();
    report.loss = *rankLoss;
    // The Hessian estimate (Sophia's) is refreshed after every k-th step,
    // on that step's tokens, before a checkpoint of it is written.
    if (int64_t every = session.getHessianInterval();
        every > 0 && step % every == 0)
      if (llvm::Expected<float> sampled = session.runHessianStep(step, tokens);
          !sampled)
        return sampled.takeError();
    onRan(report);
    // The global batch's loss: the mean of the ranks' (equal batches).
    llvm::Expected<float> loss = session.meanLossOverRanks(report.loss);
    if (!loss)
      return loss.takeError();
    report.loss = *loss;
    summary.stepSeconds.push_back(secondsSince(stepStart));
    summary.losses.push_back(report.loss);
    if (llvm::Error failure = logLoss(step, report.loss))
      return std::move(failure);
    report.seconds = secondsSince(start);
    // The data-parallel ranks' batches (a tensor-parallel group trains on
    // one).
    report.tokensPerSecond =
        (step - summary.firstStep + 1) * batchSize *
        (ranks / (session.getTensorParts() * session.getContextParts() *
                  session.getPipelineStages())) *
        seqLen / std::max(report.seconds, 1e-9);
    onStep(report);
    llvm::Expected<int> stop = agreeOnStop();
    if (!stop)
      return stop.takeError();
    bool periodic = options.saveEvery > 0 && step % options.saveEvery == 0 &&
                    step != options.steps;
    if (periodic || *stop)
      if (llvm::Error failure = save(step))
        return std::move(failure);
    if (*stop)
      return RunEnd{*stop, step};
  }
  int64_t last = std::max<int64_t>(options.steps, summary.firstStep - 1);
  if (llvm::Error failure = save(last))
    return std::move(failure);
  return RunEnd{std::nullopt, last};
}
