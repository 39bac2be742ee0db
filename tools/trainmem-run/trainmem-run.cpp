//===- trainmem-run.cpp - train a model step for real ---------------------===//
//
//   trainmem-run step.mlir --data FILE --steps N [--seed S] [--threads T]
//                [--save DIR] [--resume DIR] [--backend cpu|interpret]
//
// Compiles the step (train-autodiff when given a forward + loss, then
// convert-train-to-runtime and the LLVM lowering), JIT-compiles it, and
// trains on byte-level tokens of a text file. The work is the run library's
// (trainmem/Run/Session.h: corpus, state, checkpoints, backends); this file
// is its command line. Everything random (weights,
// batches) is a function of --seed and the step number only, so a run
// resumed from a checkpoint ends bit-identical to one that never stopped.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Run/Session.h"
#include "trainmem/Run/Step.h"
#include "trainmem/Support/ByteSize.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <csignal>
#include <thread>

using namespace mlir;
using namespace mlir::train;
namespace cl = llvm::cl;

static cl::OptionCategory category("trainmem-run options");
static cl::opt<std::string> inputFile(cl::Positional,
                                      cl::desc("<step or model .mlir>"),
                                      cl::Required, cl::cat(category));
static cl::opt<std::string> dataFile("data", cl::desc("Text file to train on"),
                                     cl::Required, cl::cat(category));
static cl::opt<long long> steps("steps",
                                cl::desc("Train until this step (from 0)"),
                                cl::Required, cl::cat(category));
static cl::opt<long long> seed("seed", cl::desc("Seed of weights and batches"),
                               cl::init(0), cl::cat(category));
// --threads is read before llvm::cl sees the command line: libLLVM already
// registers an option of that name.
static long long threads = 0;
static cl::opt<std::string> saveDir(
    "save",
    cl::desc("Write a checkpoint here at the end (and every --save-every "
             "steps, and on SIGINT/SIGTERM)"),
    cl::cat(category));
static cl::opt<long long> saveEvery(
    "save-every", cl::desc("Also checkpoint every K steps (needs --save)"),
    cl::init(0), cl::cat(category));
static cl::opt<bool> allowDataChange(
    "allow-data-change",
    cl::desc("Resume although --seed or --data differ from the checkpoint's "
             "(the run is then not bit-identical to one that never stopped)"),
    cl::cat(category));
static cl::opt<std::string> resumeDir("resume",
                                      cl::desc("Continue from this checkpoint"),
                                      cl::cat(category));
static cl::opt<std::string> backend("backend",
                                    cl::desc("A runtime backend (cpu, cuda), "
                                             "or interpret (reference "
                                             "evaluator)"),
                                    cl::init("cpu"), cl::cat(category));
static cl::opt<int64_t> device(
    "device",
    cl::desc("The GPU of --backend cuda (default: TMRT_CUDA_DEVICE, else the "
             "process's rank on its node under mpirun, else 0)"),
    cl::init(-1), cl::cat(category));
// The default recipe: AdamW at a constant 1e-3, gradients clipped at norm
// 1. lr 3e-3 (the earlier default) spikes on small GPTs, with or without
// warm-up and cosine decay (docs/Runtime.md has the runs); 1e-3 does not,
// and a constant rate keeps a resumed run's schedule whatever --steps it
// is given. A warm-up and cosine decay are an option away.
static cl::opt<std::string> autodiffOptions(
    "autodiff-options",
    cl::desc("train-autodiff options for a forward + loss input (default "
             "\"lr=1e-3 weight-decay=0.0 clip-norm=1.0\": AdamW at a constant "
             "1e-3, clipped at norm 1; a warm-up and cosine decay to step N: "
             "add \"warmup-steps=100 total-steps=N min-lr=1e-4\", and resume "
             "with the same N)"),
    cl::init("lr=1e-3 weight-decay=0.0 clip-norm=1.0"), cl::cat(category));
static cl::opt<std::string>
    lossLog("loss-log",
            cl::desc("Write 'step loss' lines to this file (appended to "
                     "when resuming)"),
            cl::cat(category));
static cl::opt<std::string> gradAccumOptions(
    "grad-accum",
    cl::desc("Accumulate gradients over micro-batches of the step's batch: "
             "train-grad-accum options, e.g. \"steps=4\""),
    cl::cat(category));
static cl::opt<bool> fuseAttention(
    "fuse-attention",
    cl::desc("Fuse each attention into train.attention (train-fuse-attention "
             "on the forward): no score tensor kept"),
    cl::cat(category));
static cl::opt<bool> fuseElementwise(
    "fuse-elementwise",
    cl::desc("Fuse element-wise chains (bias + GELU into train.bias_gelu: "
             "train-fuse-elementwise on the forward); the same bits"),
    cl::cat(category));
static cl::opt<std::string> offloadOptimizer(
    "offload-optimizer",
    cl::desc("Keep the optimizer state in host memory, its own arena "
             "(train-offload-optimizer): states (updates on the device, the "
             "state copied in and back) or states+update (updates on the "
             "host, cpu backend)"),
    cl::cat(category));
static cl::opt<std::string>
    rematOptions("remat",
                 cl::desc("Recompute activations: train-remat options, e.g. "
                          "\"policy=selective\""),
                 cl::cat(category));

static cl::opt<std::string> quantizeOptions(
    "quantize-optimizer-state", cl::ValueOptional,
    cl::desc("Keep AdamW's m and v in 8 bits: train-quantize-optimizer-state "
             "options, e.g. \"block=256 min-size=4096\" (empty: defaults)"),
    cl::cat(category));

static cl::opt<std::string> lossScaleOptions(
    "loss-scale", cl::ValueOptional,
    cl::desc("Dynamic loss scaling for f16 steps: train-loss-scale options, "
             "e.g. \"initial=1024 growth-interval=100\" (empty: GradScaler's "
             "defaults, 2^16 and 2000)"),
    cl::cat(category));

static cl::opt<std::string> zeroOptions(
    "zero",
    cl::desc("Partition the step over the processes mpirun starts: "
             "train-zero options without ranks, e.g. \"stage=1\" (ranks: "
             "the process count)"),
    cl::cat(category));

/// Set by SIGINT/SIGTERM; the loop checkpoints at the next step boundary
/// and exits non-zero.
static volatile std::sig_atomic_t stopSignal = 0;
static void onStopSignal(int signal) { stopSignal = signal; }

static int fail(const llvm::Twine &message) {
  // One write: the ranks of a run share stderr, and a line written in
  // pieces interleaves with theirs.
  llvm::errs() << ("trainmem-run: error: " + message + "\n").str();
  return 1;
}

/// Whether `path` (which need not exist) lies in directory `dir` or below
/// it, links resolved.
static bool isInDirectory(llvm::StringRef path, llvm::StringRef dir) {
  llvm::SmallString<256> realDir, parent;
  if (llvm::sys::fs::real_path(dir, realDir))
    return false;
  llvm::StringRef parentName = llvm::sys::path::parent_path(path);
  if (llvm::sys::fs::real_path(parentName.empty() ? "." : parentName, parent))
    return false;
  llvm::StringRef inside = parent;
  return inside == realDir ||
         (inside.starts_with(realDir) &&
          inside.drop_front(realDir.size()).starts_with("/"));
}

//===----------------------------------------------------------------------===//
// main
//===----------------------------------------------------------------------===//

/// Seconds as a progress line shows them: 42s, 3m05s, 2h07m.
static std::string duration(double seconds) {
  long long s = std::llround(std::max(0.0, seconds));
  char text[32];
  if (s < 60)
    snprintf(text, sizeof text, "%llds", s);
  else if (s < 3600)
    snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
  else
    snprintf(text, sizeof text, "%lldh%02lldm", s / 3600, s / 60 % 60);
  return text;
}


int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  std::vector<char *> args;
  for (int i = 0; i < argc; ++i) {
    StringRef arg = argv[i];
    std::optional<StringRef> value;
    if ((arg == "--threads" || arg == "-threads") && i + 1 < argc)
      value = argv[++i];
    else if (arg.consume_front("--threads=") || arg.consume_front("-threads="))
      value = arg;
    if (value) {
      // More than kMaxThreads is a typo, not a machine (the runtime's limit).
      constexpr long long kMaxThreads = 1024;
      if (value->getAsInteger(10, threads) || threads < 1 ||
          threads > kMaxThreads)
        return fail("--threads must be an integer from 1 to " +
                    llvm::Twine(kMaxThreads) + ", got '" + *value + "'");
      continue;
    }
    args.push_back(argv[i]);
  }
  // --help lists --threads with the others: libLLVM's option of that name
  // (which never sees the value, read above) is shown with this meaning.
  if (cl::Option *llvmThreads = cl::getRegisteredOptions().lookup("threads")) {
    llvmThreads->setDescription("CPU threads, 1 to 1024 (default: all cores)");
    llvmThreads->setValueStr("int");
    llvmThreads->addCategory(category);
  }
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(static_cast<int>(args.size()), args.data(),
                              "trainmem-run: trains a compiled step\n");
  {
    std::string error;
    if (!Session::checkBackend(backend, error))
      return fail(error);
  }
  if (device.getNumOccurrences() && device < 0)
    return fail("--device must be a device number (0 or more), got " +
                llvm::Twine(device.getValue()));
  if (device >= 0 && backend != "cuda")
    return fail("--device chooses the GPU of --backend cuda; the backend is " +
                backend);
  if (steps < 0 || static_cast<uint64_t>(steps) > kMaxStep)
    return fail("--steps must be from 0 to 2^53, got " + llvm::Twine(steps.getValue()));
  // An empty path given is a mistake, not "no file".
  for (cl::opt<std::string> *path : {&saveDir, &resumeDir, &lossLog})
    if (path->getNumOccurrences() && path->empty())
      return fail("--" + path->ArgStr + " needs a path, got an empty one");
  if (saveEvery < 0)
    return fail("--save-every must be >= 0 (0: only at the end)");
  if (saveEvery > 0 && saveDir.empty())
    return fail("--save-every needs --save DIR");

  DialectRegistry registry;
  registerRunDialects(registry);
  MLIRContext context(registry);
  context.printOpOnDiagnostic(false);
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  OwningOpRef<ModuleOp> module =
      parseSourceFile<ModuleOp>(inputFile, sourceMgr, &context);
  if (!module)
    return 1;
  std::optional<StringRef> quantize;
  if (quantizeOptions.getNumOccurrences())
    quantize = StringRef(quantizeOptions);
  std::optional<StringRef> lossScale;
  if (lossScaleOptions.getNumOccurrences())
    lossScale = StringRef(lossScaleOptions);
  // One rank per process under mpirun: the world's size is the ranks.
  int64_t worldSize = 1, worldRank = 0;
  if (const char *size = std::getenv("OMPI_COMM_WORLD_SIZE"))
    if (StringRef(size).getAsInteger(10, worldSize) || worldSize < 1)
      return fail("OMPI_COMM_WORLD_SIZE is '" + llvm::Twine(size) +
                  "', not a process count");
  if (const char *rankText = std::getenv("OMPI_COMM_WORLD_RANK"))
    if (StringRef(rankText).getAsInteger(10, worldRank))
      return fail("OMPI_COMM_WORLD_RANK is '" + llvm::Twine(rankText) + "'");
  std::string zero;
  if (zeroOptions.getNumOccurrences()) {
    if (StringRef(zeroOptions).contains("ranks"))
      return fail("--zero takes train-zero's options but ranks: the ranks "
                  "are the processes mpirun starts (" +
                  llvm::Twine(worldSize) + " here)");
    zero = "ranks=" + std::to_string(worldSize) + " " + zeroOptions;
  }
  if (!offloadOptimizer.empty() && offloadOptimizer != "states" &&
      offloadOptimizer != "states+update")
    return fail("--offload-optimizer is states or states+update, got '" +
                llvm::Twine(offloadOptimizer) + "'");
  if (failed(prepareStep(*module, autodiffOptions, rematOptions,
                         gradAccumOptions, quantize, zero, lossScale,
                         fuseAttention, fuseElementwise, offloadOptimizer)))
    return 1;

  SessionOptions options;
  options.backend = backend;
  options.device = device;
  options.threads =
      threads > 0 ? threads
                  : std::max<int64_t>(1, std::thread::hardware_concurrency());
  options.seed = seed;
  if (std::getenv("OMPI_COMM_WORLD_SIZE"))
    options.communicator = "mpi";
  std::string error;
  std::unique_ptr<Session> session =
      Session::create(std::move(module), options, error);
  if (!session)
    return error.empty() ? 1 : fail(error);
  const StepLayout &layout = session->getLayout();
  int64_t batchSize = session->getBatchSize(), seqLen = session->getSeqLen();

  // Byte-level data: the step's vocabulary must hold every byte, and the
  // text one sequence and its last target.
  if (session->getVocab() < 256)
    return fail("the step's vocabulary has " +
                std::to_string(session->getVocab()) +
                " tokens; byte-level data needs 256");
  std::optional<Corpus> corpus = Corpus::load(dataFile, error);
  if (!corpus)
    return fail(error);
  RunIdentity identity{seed, corpus->size(), corpus->fingerprint()};
  if (static_cast<int64_t>(corpus->size()) < seqLen + 1)
    return fail("data '" + dataFile + "' has " +
                std::to_string(corpus->size()) +
                " bytes; one sequence of the step needs " +
                std::to_string(seqLen + 1));

  if (!session->start(error))
    return fail(error);
  // From here every rank runs the step; one that fails ends the others,
  // which would wait for it in a collective.
  auto train = [&]() -> int {
  // The ranks must run the same step: a checksum of the step file and the
  // options that shape it, compared across them (in 16-bit parts, summed:
  // the largest differs from the mean wherever two ranks differ).
  if (session->getRanks() > 1) {
    auto file = llvm::MemoryBuffer::getFile(inputFile);
    std::string what = file ? (*file)->getBuffer().str() : std::string();
    for (const std::string &option :
         {std::string(autodiffOptions), std::string(rematOptions),
          std::string(gradAccumOptions), std::string(quantizeOptions),
          std::string(zeroOptions), std::string(lossScaleOptions),
          std::string(fuseAttention ? "fuse-attention" : ""),
          std::string(fuseElementwise ? "fuse-elementwise" : ""),
          std::string(offloadOptimizer)})
      what += "\n" + option;
    uint64_t hash = fnv1a(what);
    for (int part = 0; part < 4; ++part) {
      double mine = static_cast<double>((hash >> (16 * part)) & 0xffff);
      double sum = mine;
      if (!session->meanOverRanks(sum, error))
        return fail(error);
      if (sum != mine)
        return fail("rank " + llvm::Twine(session->getRank()) +
                    ": the ranks disagree on the step (the step file or "
                    "the options that shape it differ between ranks; "
                    "checksum " + llvm::Twine(hash) + " here)");
    }
  }

  // Initial state, or the checkpoint's.
  int64_t firstStep = 1;
  if (!resumeDir.empty()) {
    Checkpoint checkpoint;
    // A sharded checkpoint (a manifest) on any number of ranks, or one
    // rank's checkpoint.
    bool sharded = llvm::sys::fs::exists(resumeDir + "/manifest");
    bool read = sharded
                    ? readShardedCheckpoint(resumeDir, layout.arguments,
                                            session->getRanks(),
                                            session->getRank(),
                                            session->getZeroStage(),
                                            checkpoint, error)
                    : readCheckpoint(resumeDir, layout.arguments, checkpoint,
                                     error);
    if (!read)
      return fail(error);
    if (checkpoint.step >= steps)
      return fail("the checkpoint in '" + resumeDir + "' is at step " +
                  llvm::Twine(checkpoint.step) + " and --steps " +
                  llvm::Twine(steps.getValue()) + " asks to train until step " +
                  llvm::Twine(steps.getValue()) +
                  ": nothing to train (--steps counts from 0, not from the "
                  "checkpoint)");
    if (checkpoint.identity && !allowDataChange) {
      const RunIdentity &saved = *checkpoint.identity;
      if (saved.seed != identity.seed)
        return fail("the checkpoint was trained with --seed " +
                    llvm::Twine(saved.seed) + ", this run has --seed " +
                    llvm::Twine(identity.seed) +
                    "; batches would differ from the run it continues "
                    "(--allow-data-change to resume anyway)");
      if (saved.dataBytes != identity.dataBytes ||
          saved.dataHash != identity.dataHash)
        return fail("the checkpoint was trained on other data (" +
                    llvm::Twine(saved.dataBytes) + " bytes) than '" +
                    dataFile + "' (" + llvm::Twine(identity.dataBytes) +
                    " bytes, another checksum); --allow-data-change to "
                    "resume anyway");
    }
    session->restore(checkpoint);
    firstStep = checkpoint.step + 1;
  } else if (!session->initialize(error)) {
    return fail(error);
  }

  bool terminal = llvm::sys::Process::StandardErrIsDisplayed();
  // Where the run writes is checked before the first step.
  if (!saveDir.empty() && !checkSaveDir(saveDir, error))
    return fail(error);
  // One run saves into a directory at a time (rank 0 holds it for the run).
  if (!saveDir.empty() && session->getRank() == 0 &&
      !lockSaveDir(saveDir, error))
    return fail(error);
  std::unique_ptr<llvm::raw_fd_ostream> lossFile;
  if (!lossLog.empty()) {
    // Never onto a file the run reads.
    std::vector<std::string> inputs = {dataFile, inputFile};
    for (const std::string &input : inputs) {
      bool same = false;
      if (!llvm::sys::fs::equivalent(lossLog, input, same) && same)
        return fail("--loss-log '" + lossLog + "' is '" + input +
                    "', which this run reads or writes; give another file");
    }
    // Nor into a checkpoint directory: its manifest, shards and lock are
    // the checkpoint's.
    for (const std::string &dir : {resumeDir.getValue(), saveDir.getValue()})
      if (!dir.empty() && isInDirectory(lossLog, dir))
        return fail("--loss-log '" + lossLog + "' is in the checkpoint "
                    "directory '" + dir +
                    "', whose files the checkpoint owns; give a file "
                    "outside it");
    // A resumed run continues the log of the run it continues.
    std::error_code ec;
    lossFile = std::make_unique<llvm::raw_fd_ostream>(
        lossLog, ec,
        resumeDir.empty() ? llvm::sys::fs::OF_None : llvm::sys::fs::OF_Append);
    if (ec)
      return fail("cannot write '" + lossLog + "': " + ec.message());
  }
  struct sigaction action = {};
  action.sa_handler = onStopSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  // Past a file-size limit a write fails (EFBIG) and the save says so; the
  // signal's default would kill the run with a stack dump instead.
  std::signal(SIGXFSZ, SIG_IGN);
  int64_t ranks = session->getRanks(), rank = session->getRank();
  bool leader = rank == 0;
  {
    // One write per line: the ranks share stderr.
    std::string line;
    llvm::raw_string_ostream os(line);
    if (ranks > 1)
      os << "trainmem-run: rank " << rank << " of " << ranks << ": ";
    else
      os << "trainmem-run: ";
    os << backend << " backend, " << options.threads << " threads, arena plan "
       << layout.arenaBytes << " B (" << trainmem::formatByteSize(layout.arenaBytes) << ")";
    if (layout.hostArenaBytes)
      os << ", host arena plan " << layout.hostArenaBytes << " B ("
         << trainmem::formatByteSize(layout.hostArenaBytes) << ")";
    os << ", steps " << firstStep << ".." << steps << "\n";
    llvm::errs() << line;
  }
  if (leader)
    for (const std::string &line : session->describeGemms16())
      llvm::errs() << "trainmem-run: " << line << "\n";

  struct Fault {
    bool kill;
    int64_t rank, step;
  };
  std::optional<Fault> fault;
  if (const char *text = std::getenv("TRAINMEM_FAULT")) {
    SmallVector<StringRef> parts;
    StringRef(text).split(parts, ':');
    Fault f{};
    if (parts.size() != 3 || !(parts[0] == "kill" || parts[0] == "hang") ||
        parts[1].getAsInteger(10, f.rank) || parts[2].getAsInteger(10, f.step))
      return fail("TRAINMEM_FAULT is kill:RANK:STEP or hang:RANK:STEP, got '" +
                  llvm::Twine(text) + "'");
    f.kill = parts[0] == "kill";
    fault = f;
  }
  std::vector<int64_t> tokens, targets;
  double firstLoss = NAN, lastLoss = NAN;
  std::vector<float> losses;
  auto start = std::chrono::steady_clock::now();
  std::vector<double> stepSeconds;
  for (int64_t step = firstStep; step <= steps; ++step) {
    auto stepStart = std::chrono::steady_clock::now();
    // Fault injection for the failure tests (TRAINMEM_FAULT=kill:R:S or
    // hang:R:S): rank R dies by SIGKILL, or stops answering, at step S.
    if (fault && fault->rank == rank && fault->step == step) {
      if (fault->kill)
        std::raise(SIGKILL);
      for (;;)
        std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    // Rank r trains on rows [r x batch, (r + 1) x batch) of the global
    // batch.
    corpus->batch(seed, step, batchSize, seqLen, tokens, targets,
                  rank * batchSize);
    float rankLoss;
    std::optional<LossScaleState> scaleBefore = session->getLossScale();
    if (!session->runStep(step, tokens, targets, rankLoss, error))
      return error.empty() ? 1 : fail(error);
    // Dynamic loss scaling: every skipped step and every change of scale.
    if (std::optional<LossScaleState> scaleAfter = session->getLossScale();
        scaleAfter && scaleBefore && leader) {
      if (scaleAfter->skippedSteps != scaleBefore->skippedSteps)
        llvm::errs() << "trainmem-run: step " << step
                     << ": gradients not finite, update skipped, loss scale "
                     << llvm::format("%.10g", scaleBefore->scale) << " -> "
                     << llvm::format("%.10g", scaleAfter->scale) << "\n";
      else if (scaleAfter->scale != scaleBefore->scale)
        llvm::errs() << "trainmem-run: step " << step << ": loss scale "
                     << llvm::format("%.10g", scaleBefore->scale) << " -> "
                     << llvm::format("%.10g", scaleAfter->scale) << " after " << scaleBefore->cleanSteps + 1
                     << " clean steps\n";
    }
    // The global batch's loss: the mean of the ranks' (equal batches).
    float loss = rankLoss;
    if (!session->meanLossOverRanks(loss, error))
      return fail(error);
    stepSeconds.push_back(std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - stepStart)
                              .count());
    if (std::isnan(firstLoss))
      firstLoss = loss;
    lastLoss = loss;
    losses.push_back(loss);
    // A log that cannot be written (a full disk) stops the run at this
    // step, its state saved as a stop by signal saves it.
    std::string logError;
    if (lossFile && leader) {
      *lossFile << step << " " << llvm::format("%.6f", loss) << "\n";
      lossFile->flush();
      if (lossFile->has_error()) {
        logError = "cannot write the loss log '" + lossLog + "' at step " +
                   std::to_string(step) + ": " + lossFile->error().message();
        lossFile->clear_error();
      }
    }
    bool logFailed = !logError.empty();
    if (!session->anyRank(logFailed, error))
      return fail(error);
    if (logFailed) {
      std::string message =
          leader ? logError : "rank 0 could not write the loss log";
      if (!saveDir.empty() && !session->save(saveDir, step, identity, error))
        return fail(message + "; and " + error);
      return fail(message + (saveDir.empty()
                                 ? "; stopping (no --save given, nothing saved)"
                                 : "; stopping with a checkpoint of step " +
                                       std::to_string(step) + " in '" +
                                       saveDir + "'"));
    }
    double seconds = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    double tokensPerSecond = (step - firstStep + 1) * batchSize * ranks *
                             seqLen / std::max(seconds, 1e-9);
    std::optional<uint64_t> measured = session->getMeasuredPeak();
    // The time left, at the mean pace of the steps so far; the time taken
    // once the last step is done.
    int64_t stepsDone = step - firstStep + 1, stepsLeft = steps - step;
    std::string eta = stepsLeft > 0
                          ? "ETA " + duration(seconds / stepsDone * stepsLeft)
                          : "done in " + duration(seconds);
    std::string line = llvm::formatv(
        "step {0}/{1}  loss {2:F4}  {3:F0} tok/s  arena plan {4} measured {5}"
        "  {6}",
        step, steps.getValue(), loss, tokensPerSecond,
        trainmem::formatByteSize(layout.arenaBytes), measured ? trainmem::formatByteSize(*measured) : "-",
        eta);
    if (!leader) {
      // Only rank 0 reports progress.
    } else if (terminal) {
      int width = 24, filled = static_cast<int>(
                                  width * (step - firstStep + 1) /
                                  std::max<int64_t>(1, steps - firstStep + 1));
      llvm::errs() << "\r[" << std::string(filled, '#')
                   << std::string(width - filled, '.') << "] " << line
                   << "\x1b[K";
      if (step == steps)
        llvm::errs() << "\n";
    } else if (step == firstStep || step == steps || step % 10 == 0) {
      llvm::errs() << line << "\n";
    }
    bool periodic = saveEvery > 0 && step % saveEvery == 0 && step != steps;
    if (!saveDir.empty() && (periodic || stopSignal) &&
        !session->save(saveDir, step, identity, error))
      return fail(error);
    if (stopSignal) {
      if (terminal)
        llvm::errs() << "\n";
      llvm::errs() << "trainmem-run: stopped by signal " << int(stopSignal)
                   << " after step " << step
                   << (saveDir.empty() ? "; no --save given, nothing saved"
                                       : "; checkpoint saved in '" + saveDir +
                                             "'")
                   << "\n";
      return 128 + stopSignal;
    }
  }

  if (!saveDir.empty() &&
      !session->save(saveDir, std::max<int64_t>(steps, firstStep - 1),
                     identity, error))
    return fail(error);
  if (std::optional<uint64_t> measured = session->getMeasuredPeak();
      measured && ranks > 1) {
    // Every rank's own figures, on stderr, one line each.
    uint64_t stepsRun = std::max<int64_t>(1, steps - firstStep + 1);
    llvm::errs() << llvm::formatv(
        "trainmem-run: rank {0}: arena planned {1} B, measured peak {2} B; "
        "sent {3} B, received {4} B: {5} B per step (analysis {6} B)\n",
        rank, layout.arenaBytes, *measured, session->getBytesSent(),
        session->getBytesReceived(), session->getBytesSent() / stepsRun,
        session->getPlannedBytesSent());
  }
  if (!leader)
    return 0;
  if (firstStep <= steps) {
    llvm::outs() << llvm::formatv(
        "loss: first {0:F4} (step {1}), last {2:F4} (step {3})\n", firstLoss,
        firstStep, lastLoss, steps.getValue());
    // The curve as the mean loss of up to ten equal windows of steps.
    size_t windows = std::min<size_t>(10, losses.size());
    llvm::outs() << "loss curve (mean per window):";
    for (size_t w = 0; w < windows; ++w) {
      size_t begin = w * losses.size() / windows;
      size_t end = (w + 1) * losses.size() / windows;
      double sum = 0.0;
      for (size_t i = begin; i < end; ++i)
        sum += losses[i];
      llvm::outs() << llvm::formatv("  {0}-{1}: {2:F3}", firstStep + begin,
                                    firstStep + end - 1, sum / (end - begin));
    }
    llvm::outs() << "\n";
    // Step times (batch in, step, state back, loss out), the first step
    // apart when there are others: it also pays for first touches.
    std::vector<double> timed(stepSeconds.begin() +
                                  (stepSeconds.size() > 1 ? 1 : 0),
                              stepSeconds.end());
    std::sort(timed.begin(), timed.end());
    llvm::outs() << llvm::formatv(
        "step time: best {0:F6} s, median {1:F6} s over {2} steps{3}\n",
        timed.front(), timed[timed.size() / 2], timed.size(),
        stepSeconds.size() > 1 ? " (after the first)" : "");
  }
  if (std::optional<uint64_t> measured = session->getMeasuredPeak())
    llvm::outs() << "arena: planned " << layout.arenaBytes
                 << " B, measured peak " << *measured << " B\n";
  if (std::optional<uint64_t> measured = session->getMeasuredHostPeak()) {
    uint64_t stepsRun = std::max<int64_t>(1, steps - firstStep + 1);
    llvm::outs() << "host arena: planned " << layout.hostArenaBytes
                 << " B, measured peak " << *measured << " B; staging copies "
                 << session->getTransferBytes() / stepsRun
                 << " B per step between the arenas";
    if (layout.hostOps)
      llvm::outs() << " (" << layout.hostOps
                   << " ops run in host memory, reading the gradients and "
                      "writing the weights in the arena in place)";
    llvm::outs() << "\n";
  }
  if (std::optional<LossScaleState> scale = session->getLossScale();
      scale && leader)
    llvm::outs() << "loss scale: " << llvm::format("%.10g", scale->scale)
                 << ", "
                 << scale->skippedSteps << " steps skipped in all, "
                 << scale->cleanSteps << " clean steps since the last change\n";
  return 0;
  };
  int code = train();
  if (code != 0) {
    llvm::errs().flush();
    session->abortRanks(code);
  }
  return code;
}
