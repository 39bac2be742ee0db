//===- trainmem-run.cpp - train a model step for real ---------------------===//
//
//   trainmem-run step.mlir --data FILE --steps N [--seed S] [--threads T]
//                [--save DIR] [--resume DIR] [--backend cpu|interpret]
//
// Compiles the step (train-autodiff when given a forward + loss, then
// convert-train-to-runtime and the LLVM lowering), JIT-compiles it, and
// trains on byte-level tokens of a text file. The work is the run library's
// (trainmem/Run/Session.h: corpus, state, checkpoints, backends;
// trainmem/Run/Trainer.h: the training loop, resume checks, the ranks'
// checksum); this file is its command line and what it prints. Everything
// random (weights,
// batches) is a function of --seed and the step number only, so a run
// resumed from a checkpoint ends bit-identical to one that never stopped.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Debug/Debug.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"
#include "trainmem/Run/Session.h"
#include "trainmem/Run/Step.h"
#include "trainmem/Run/Trainer.h"
#include "trainmem/Support/ByteSize.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
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
static cl::opt<bool> overwrite(
    "overwrite",
    cl::desc("Save into a --save directory that holds a checkpoint this run "
             "does not --resume from (it is replaced)"),
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
    cl::init(kDefaultRecipe.str()), cl::cat(category));
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
static cl::opt<bool> unrollAccum(
    "unroll-accum",
    cl::desc("Unroll the micro-batch loop of --grad-accum into the step "
             "(train-unroll-accum) instead of running it as a loop: the same "
             "numbers and memory, compiled in time that grows with the "
             "micro-batches"),
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
static cl::opt<bool> releaseGradients(
    "release-gradients",
    cl::desc("Run each parameter's update as soon as its gradient is "
             "complete in the backward (train-release-gradients): the "
             "gradients never all live at once; the same bits"),
    cl::cat(category));
static cl::opt<std::string> offloadOptimizer(
    "offload-optimizer",
    cl::desc("Keep the optimizer state in host memory, its own arena "
             "(train-offload-optimizer): states (updates on the device, the "
             "state copied in and back) or states+update (updates on the "
             "host, cpu backend), then its options: \"states+update "
             "gradients=host\" sums the micro-batches there too"),
    cl::cat(category));
static cl::opt<std::string> offloadActivationsOptions(
    "offload-activations", cl::ValueOptional,
    cl::desc("Keep saved activations in host memory between the forward and "
             "the backward, its own arena (train-offload-activations "
             "options, e.g. \"what=all prefetch=1\"; empty: the "
             "checkpoints of --remat); the same bits"),
    cl::cat(category));
static cl::opt<std::string>
    rematOptions("remat",
                 cl::desc("Recompute activations: train-remat options, e.g. "
                          "\"policy=selective\""),
                 cl::cat(category));

static cl::opt<std::string> quantizeOptions(
    "quantize-optimizer-state", cl::ValueOptional,
    cl::desc("Keep the optimizer's state in 8 bits (AdamW's m and v, "
             "SGD's momentum, Lion's m, Sophia's m and h): "
             "train-quantize-optimizer-state options, e.g. \"block=256 "
             "min-size=4096\" (empty: defaults)"),
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

static cl::opt<std::string> contextParallelOptions(
    "context-parallel",
    cl::desc("Cut every sequence over the processes mpirun starts, "
             "attention over the group's gathered keys "
             "(train-context-parallel options, e.g. \"size=2\"; with "
             "--fuse-attention)"),
    cl::cat(category));

static cl::opt<std::string> pipelineOptions(
    "pipeline",
    cl::desc("Cut the step into pipeline stages, one per process mpirun "
             "starts (train-pipeline options, e.g. \"stages=2 "
             "micro-batches=4 schedule=1f1b\"; stages: the process count)"),
    cl::cat(category));

static cl::opt<std::string> tensorParallelOptions(
    "tensor-parallel",
    cl::desc("Split the model's attention and MLPs over the processes "
             "mpirun starts (train-tensor-parallel options, e.g. "
             "\"size=2\"; size: the process count)"),
    cl::cat(category));

static cl::opt<bool> profile(
    "profile",
    cl::desc("Time each runtime kernel over the steps after the first (all "
             "of one) and print the time per step by kernel"),
    cl::init(false), cl::cat(category));

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

/// fail() for the steps of main that return a LogicalResult.
static LogicalResult refuse(const llvm::Twine &message) {
  fail(message);
  return failure();
}

/// Prints an error of the run library (nothing for one that diagnostics
/// reported already) and returns the exit status 1.
static int fail(llvm::Error error) {
  std::string message = llvm::toString(std::move(error));
  return message.empty() ? 1 : fail(message);
}

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

/// Takes --threads out of the command line (libLLVM registers an option
/// of that name) into `threads`; fails on a value out of range.
static LogicalResult takeThreads(int argc, char **argv,
                                 std::vector<char *> &args) {
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
          threads > kMaxThreads) {
        return refuse("--threads must be an integer from 1 to " +
                      llvm::Twine(kMaxThreads) + ", got '" + *value + "'");
      }
      continue;
    }
    args.push_back(argv[i]);
  }
  return success();
}

/// The checks of options that need nothing but themselves.
static LogicalResult checkOptions() {
  if (llvm::Error error = Session::checkBackend(backend))
    return refuse(llvm::toString(std::move(error)));
  if (device.getNumOccurrences() && device < 0)
    return refuse("--device must be a device number (0 or more), got " +
                  llvm::Twine(device.getValue()));
  if (device >= 0 && backend != "cuda")
    return refuse(
        "--device chooses the GPU of --backend cuda; the backend is " +
        backend);
  if (steps < 0 || static_cast<uint64_t>(steps) > kMaxStep)
    return refuse("--steps must be from 0 to 2^53, got " +
                  llvm::Twine(steps.getValue()));
  // An empty path given is a mistake, not "no file".
  for (cl::opt<std::string> *path : {&saveDir, &resumeDir, &lossLog})
    if (path->getNumOccurrences() && path->empty())
      return refuse("--" + path->ArgStr + " needs a path, got an empty one");
  if (saveEvery < 0)
    return refuse("--save-every must be >= 0 (0: only at the end)");
  if (saveEvery > 0 && saveDir.empty())
    return refuse("--save-every needs --save DIR");
  if (overwrite && saveDir.empty())
    return refuse("--overwrite is for --save DIR");
  if (unrollAccum && gradAccumOptions.empty())
    return refuse("--unroll-accum unrolls the micro-batch loop of "
                  "--grad-accum, which is not given");
  if (profile && backend == "interpret")
    return refuse("--profile times the runtime's kernels; the interpret "
                  "backend runs none (use --backend cpu)");
  return success();
}

/// The train-step pipeline's options from the flags: a rank count for
/// --zero from the processes mpirun started (`worldSize`).
/// The tensor-parallel group's size of a module already split (a step
/// prepared by trainmem-opt: its #train.split parameters' parts), 1 when
/// nothing is split.
static int64_t tensorPartsOf(ModuleOp module) {
  int64_t parts = 1;
  for (auto func : module.getOps<func::FuncOp>())
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      if (auto split =
              func.getArgAttrOfType<TensorSplitAttr>(i, kTensorSplitAttrName))
        parts = std::max(parts, split.getParts());
  return parts;
}

/// The group size (`size=`, default 2) of --tensor-parallel or
/// --context-parallel options `text` (flag `flag`), which must divide the
/// `processes` (`what` they are); failure after saying what is wrong.
static FailureOr<int64_t> groupSizeOf(StringRef text, StringRef flag,
                                      int64_t processes, StringRef what) {
  int64_t size = 2; // both passes' default
  for (StringRef option : llvm::split(text, ' '))
    if (option.consume_front("size=") &&
        (option.getAsInteger(10, size) || size < 1)) {
      (void)refuse("--" + flag + ": size must be a count, got '" + option +
                   "'");
      return failure();
    }
  if (processes % size != 0) {
    (void)refuse("--" + flag + " size=" + llvm::Twine(size) +
                 " does not divide the " + llvm::Twine(processes) + " " + what +
                 ": run a multiple of " + llvm::Twine(size) + " (mpirun -np " +
                 llvm::Twine(size) + ", " + llvm::Twine(2 * size) + ", ...)");
    return failure();
  }
  return size;
}

/// train-step's pipeline= from --pipeline: the stage of this process's
/// rank. The processes are pipelines of `stages` (of tensor groups with
/// --tensor-parallel), several of them data-parallel through --zero.
static LogicalResult fillPipelineStage(TrainStepPipelineOptions &options,
                                       int64_t worldSize, int64_t worldRank,
                                       int64_t &stages) {
  if (StringRef(pipelineOptions).contains("select-stage"))
    return refuse("--pipeline takes train-pipeline's options but "
                  "select-stage: each process runs the stage of its rank");
  // The stages (train-pipeline's default 2): the processes must be as many
  // or a multiple.
  stages = 2;
  for (StringRef option : llvm::split(StringRef(pipelineOptions), ' '))
    if (option.consume_front("stages=") &&
        (option.getAsInteger(10, stages) || stages < 1))
      return refuse("--pipeline: stages must be a count, got '" + option + "'");
  if (worldSize % stages != 0)
    return refuse("--pipeline stages=" + llvm::Twine(stages) + " on " +
                  llvm::Twine(worldSize) +
                  " processes: one process per stage of each pipeline (mpirun "
                  "-np " +
                  llvm::Twine(stages) + ", or " + llvm::Twine(2 * stages) +
                  " for two data-parallel pipelines with --zero)");
  // Beside the tensor groups, the processes left are data-parallel
  // pipelines (checked against the group's size with --tensor-parallel).
  int64_t perPipeline = stages;
  if (tensorParallelOptions.getNumOccurrences()) {
    FailureOr<int64_t> size =
        groupSizeOf(tensorParallelOptions, "tensor-parallel",
                    worldSize / stages, "processes of each stage");
    if (failed(size))
      return failure();
    perPipeline *= *size;
  }
  if (worldSize > perPipeline && !zeroOptions.getNumOccurrences())
    return refuse("--pipeline stages=" + llvm::Twine(stages) + " on " +
                  llvm::Twine(worldSize) + " processes is " +
                  llvm::Twine(worldSize / perPipeline) +
                  " data-parallel pipelines: their stages average "
                  "gradients through train-zero, give --zero stage=0 (or "
                  "stage=1 to shard the optimizer state)");
  if (contextParallelOptions.getNumOccurrences())
    return refuse("--pipeline with --context-parallel is not built yet "
                  "(docs/Pipeline.md, \"Not built yet\")");
  // A stage's checkpoint holds its tensors whole: tensor-parallel parts
  // would need joining first, which is not built.
  if (tensorParallelOptions.getNumOccurrences() &&
      (!saveDir.empty() || !resumeDir.empty()))
    return refuse("--save and --resume with --pipeline and "
                  "--tensor-parallel (stage files of tensor-parallel parts) "
                  "are not built yet (docs/Pipeline.md, \"Not built yet\")");
  // ZeRO-1's shards of a stage's state: its checkpoint would need them
  // gathered (or a manifest of shards per stage), which is not built.
  if (worldSize > perPipeline && (!saveDir.empty() || !resumeDir.empty()) &&
      !StringRef(zeroOptions).contains("stage=0") &&
      StringRef(zeroOptions).contains("stage="))
    return refuse("--save and --resume with --pipeline over data-parallel "
                  "pipelines hold each stage's state whole: with --zero "
                  "stage=0, not with sharded optimizer state (docs/"
                  "Pipeline.md, \"Not built yet\")");
  // Rank r runs stage (r / t) mod p: data x pipeline x tensor, a tensor
  // group's ranks consecutive (Megatron's layout).
  options.pipeline =
      pipelineOptions + " select-stage=" +
      std::to_string((worldRank / (perPipeline / stages)) % stages);
  return success();
}

static LogicalResult fillPipelineOptions(TrainStepPipelineOptions &options,
                                         int64_t worldSize, int64_t worldRank,
                                         ModuleOp module) {
  int64_t stages = 1;
  if (pipelineOptions.getNumOccurrences() &&
      failed(fillPipelineStage(options, worldSize, worldRank, stages)))
    return failure();
  options.autodiff = autodiffOptions;
  options.remat = rematOptions;
  options.gradAccum = gradAccumOptions;
  options.unrollAccum = unrollAccum;
  options.quantize = quantizeOptions.getNumOccurrences() > 0;
  options.quantizeOptions = quantizeOptions;
  options.lossScale = lossScaleOptions.getNumOccurrences() > 0;
  options.lossScaleOptions = lossScaleOptions;
  options.fuseAttention = fuseAttention;
  options.fuseElementwise = fuseElementwise;
  options.releaseGradients = releaseGradients;
  options.tensorParallel = tensorParallelOptions;
  options.contextParallel = contextParallelOptions;
  if (zeroOptions.getNumOccurrences()) {
    if (StringRef(zeroOptions).contains("ranks"))
      return refuse("--zero takes train-zero's options but ranks: the ranks "
                    "are the processes mpirun starts (" +
                    llvm::Twine(worldSize) + " here)");
    // With tensor parallelism, ZeRO runs over the data axis: the
    // processes over the group's size (from --tensor-parallel, or from a
    // step split already).
    // With pipeline stages, over the pipelines (fillPipelineStage checked
    // that they divide the processes).
    int64_t dataRanks = worldSize / stages;
    if (int64_t parts = tensorPartsOf(module);
        parts > 1 && !tensorParallelOptions.getNumOccurrences()) {
      if (worldSize % parts != 0)
        return refuse("the step is split over tensor-parallel groups of " +
                      llvm::Twine(parts) + ", which do not divide the " +
                      llvm::Twine(worldSize) +
                      " processes mpirun starts: run a multiple of " +
                      llvm::Twine(parts) + " (mpirun -np " +
                      llvm::Twine(parts) + ", " + llvm::Twine(2 * parts) +
                      ", ...)");
      dataRanks = worldSize / stages / parts;
    }
    if (tensorParallelOptions.getNumOccurrences()) {
      FailureOr<int64_t> size =
          groupSizeOf(tensorParallelOptions, "tensor-parallel", worldSize,
                      "processes mpirun starts");
      if (failed(size))
        return failure();
      dataRanks = worldSize / stages / *size;
    }
    // With context parallelism, over the processes the groups leave (the
    // groups of --context-parallel, or of a step cut already).
    int64_t contextParts = 0;
    for (auto func : module.getOps<func::FuncOp>())
      if (ContextSplitAttr split = getContextSplit(func))
        contextParts = split.getParts();
    if (contextParts > 0 && !contextParallelOptions.getNumOccurrences()) {
      if (dataRanks % contextParts != 0)
        return refuse("the step is cut over context groups of " +
                      llvm::Twine(contextParts) + ", which do not divide " +
                      "the " + llvm::Twine(dataRanks) +
                      " processes they get: run a multiple of " +
                      llvm::Twine(contextParts));
      dataRanks /= contextParts;
    }
    if (contextParallelOptions.getNumOccurrences()) {
      FailureOr<int64_t> size =
          groupSizeOf(contextParallelOptions, "context-parallel", dataRanks,
                      "processes its groups get");
      if (failed(size))
        return failure();
      dataRanks /= *size;
    }
    options.zero = "ranks=" + std::to_string(dataRanks) + " " + zeroOptions;
  }
  // What (states or states+update), then train-offload-optimizer's other
  // options (gradients=host).
  StringRef offloadWhat = StringRef(offloadOptimizer).split(' ').first;
  if (!offloadOptimizer.empty() && offloadWhat != "states" &&
      offloadWhat != "states+update")
    return refuse("--offload-optimizer is states or states+update (then "
                  "options such as gradients=host), got '" +
                  llvm::Twine(offloadOptimizer) + "'");
  options.offload = offloadOptimizer;
  if (offloadActivationsOptions.getNumOccurrences())
    options.offloadActivations = offloadActivationsOptions.empty()
                                     ? std::string("what=checkpoints")
                                     : offloadActivationsOptions.getValue();
  return success();
}

/// The options whose values shape the step: the ranks compare them.
static std::vector<std::string> shapingOptions() {
  return {autodiffOptions,
          rematOptions,
          gradAccumOptions,
          quantizeOptions,
          zeroOptions,
          tensorParallelOptions,
          contextParallelOptions,
          pipelineOptions,
          lossScaleOptions,
          fuseAttention ? "fuse-attention" : "",
          fuseElementwise ? "fuse-elementwise" : "",
          offloadOptimizer,
          offloadActivationsOptions.getNumOccurrences()
              ? "offload-activations " + offloadActivationsOptions.getValue()
              : std::string()};
}

/// What the run is: its backend, threads, arena plans and steps (every
/// rank, one write per line: the ranks share stderr), and how the leader
/// runs 16-bit GEMMs.
static void printHeader(const Session &session, int64_t firstStep) {
  const StepLayout &layout = session.getLayout();
  std::string line;
  llvm::raw_string_ostream os(line);
  if (session.getRanks() > 1)
    os << "trainmem-run: rank " << session.getRank() << " of "
       << session.getRanks() << ": ";
  else
    os << "trainmem-run: ";
  os << backend << " backend, " << session.getThreads()
     << " threads, arena plan " << layout.deviceArenaBytes() << " B ("
     << trainmem::formatByteSize(layout.deviceArenaBytes()) << ")";
  if (layout.hessian)
    os << " (the step " << layout.arenaBytes << " B, its Hessian step "
       << layout.hessian->arenaBytes << " B, every " << layout.hessian->every
       << " steps)";
  if (layout.hostArenaBytes)
    os << ", host arena plan " << layout.hostArenaBytes << " B ("
       << trainmem::formatByteSize(layout.hostArenaBytes) << ")";
  os << ", steps " << firstStep << ".." << steps << "\n";
  llvm::errs() << line;
  if (session.getRank() == 0)
    for (const std::string &gemms : session.describeGemms16())
      llvm::errs() << "trainmem-run: " + gemms + "\n";
}

/// Dynamic loss scaling: every skipped step and every change of scale.
static void printLossScale(const StepReport &report) {
  if (!report.scaleAfter || !report.scaleBefore)
    return;
  const LossScaleState &before = *report.scaleBefore,
                       &after = *report.scaleAfter;
  std::string line;
  llvm::raw_string_ostream os(line);
  if (after.skippedSteps != before.skippedSteps)
    os << "trainmem-run: step " << report.step
       << ": gradients not finite, update skipped, loss scale "
       << llvm::format("%.10g", before.scale) << " -> "
       << llvm::format("%.10g", after.scale) << "\n";
  else if (after.scale != before.scale)
    os << "trainmem-run: step " << report.step << ": loss scale "
       << llvm::format("%.10g", before.scale) << " -> "
       << llvm::format("%.10g", after.scale) << " after "
       << before.cleanSteps + 1 << " clean steps\n";
  llvm::errs() << line; // one write (the ranks share stderr)
}

/// Rank 0's progress: a bar redrawn on a terminal, else a line at the first
/// and last steps and every tenth.
static void printProgress(const Session &session, const StepReport &report,
                          int64_t firstStep, bool terminal) {
  int64_t step = report.step;
  std::optional<uint64_t> measured = session.getMeasuredPeak();
  // The time left, at the mean pace of the steps so far; the time taken
  // once the last step is done.
  int64_t stepsDone = step - firstStep + 1, stepsLeft = steps - step;
  std::string eta =
      stepsLeft > 0 ? "ETA " + duration(report.seconds / stepsDone * stepsLeft)
                    : "done in " + duration(report.seconds);
  uint64_t arena = session.getLayout().deviceArenaBytes();
  std::string line = llvm::formatv(
      "step {0}/{1}  loss {2:F4}  {3:F0} tok/s  arena plan {4} measured {5}"
      "  {6}",
      step, steps.getValue(), report.loss, report.tokensPerSecond,
      trainmem::formatByteSize(arena),
      measured ? trainmem::formatByteSize(*measured) : "-", eta);
  if (terminal) {
    int width = 24,
        filled = static_cast<int>(width * stepsDone /
                                  std::max<int64_t>(1, steps - firstStep + 1));
    llvm::errs() << "\r[" << std::string(filled, '#')
                 << std::string(width - filled, '.') << "] " << line
                 << "\x1b[K";
    if (step == steps)
      llvm::errs() << "\n";
  } else if (step == firstStep || step == steps || step % 10 == 0) {
    llvm::errs() << line + "\n"; // one write (the ranks share stderr)
  }
}

/// The loss, its curve and the step times; the arenas' plans against their
/// measured peaks; the loss scale (rank 0, on stdout).
static void printSummary(const Session &session, const RunSummary &summary) {
  const StepLayout &layout = session.getLayout();
  uint64_t stepsRun =
      std::max<int64_t>(1, summary.lastStep - summary.firstStep + 1);
  if (!summary.losses.empty()) {
    llvm::outs() << llvm::formatv(
        "loss: first {0:F4} (step {1}), last {2:F4} (step {3})\n",
        summary.losses.front(), summary.firstStep, summary.losses.back(),
        summary.lastStep);
    llvm::outs() << "loss curve (mean per window):";
    for (const RunSummary::Window &window : summary.lossWindows())
      llvm::outs() << llvm::formatv("  {0}-{1}: {2:F3}", window.first,
                                    window.last, window.mean);
    llvm::outs() << "\n";
    RunSummary::Times times = *summary.stepTimes();
    llvm::outs() << llvm::formatv(
        "step time: best {0:F6} s, median {1:F6} s over {2} steps{3}\n",
        times.best, times.median, times.steps,
        times.afterFirst ? " (after the first)" : "");
  }
  if (std::optional<uint64_t> measured = session.getMeasuredPeak())
    llvm::outs() << "arena: planned " << layout.deviceArenaBytes()
                 << " B, measured peak " << *measured << " B\n";
  if (std::optional<uint64_t> measured = session.getMeasuredHostPeak()) {
    llvm::outs() << "host arena: planned " << layout.hostArenaBytes
                 << " B, measured peak " << *measured << " B; staging copies "
                 << session.getTransferBytes() / stepsRun
                 << " B per step between the arenas";
    if (layout.hostOps)
      llvm::outs() << " (" << layout.hostOps
                   << " ops run in host memory, reading the gradients and "
                      "writing the weights in the arena in place)";
    llvm::outs() << "\n";
  }
  if (std::optional<LossScaleState> scale = session.getLossScale())
    llvm::outs() << "loss scale: " << llvm::format("%.10g", scale->scale)
                 << ", " << scale->skippedSteps << " steps skipped in all, "
                 << scale->cleanSteps << " clean steps since the last change\n";
}

/// The kernel profile per step, most time first, on stdout.
static void printProfile(const Session &session, int64_t steps) {
  std::vector<Session::KernelTime> rows = session.getProfile();
  double total = 0;
  uint64_t calls = 0;
  for (const Session::KernelTime &row : rows) {
    total += row.seconds;
    calls += row.calls;
  }
  llvm::outs() << llvm::formatv(
      "kernel profile: {0:F6} s in {1} calls per step, over {2} step(s)\n",
      total / steps, calls / steps, steps);
  llvm::outs() << llvm::formatv("  {0,-28} {1,12} {2,10} {3,7}\n", "kernel",
                                "s/step", "calls/step", "share");
  for (const Session::KernelTime &row : rows)
    llvm::outs() << llvm::formatv(
        "  {0,-28} {1,12:F6} {2,10} {3,6:F1}%\n", row.kernel,
        row.seconds / steps, row.calls / steps,
        total > 0 ? 100 * row.seconds / total : 0.0);
}

/// Every rank's own arena and traffic figures, on stderr, one line each.
static void printRankTraffic(const Session &session,
                             const RunSummary &summary) {
  std::optional<uint64_t> measured = session.getMeasuredPeak();
  if (!measured || session.getRanks() <= 1)
    return;
  uint64_t stepsRun =
      std::max<int64_t>(1, summary.lastStep - summary.firstStep + 1);
  std::string line = llvm::formatv(
      "trainmem-run: rank {0}: arena planned {1} B, measured peak {2} B; "
      "sent {3} B, received {4} B: {5} B per step (analysis {6} B)\n",
      session.getRank(), session.getLayout().deviceArenaBytes(), *measured,
      session.getBytesSent(), session.getBytesReceived(),
      session.getBytesSent() / stepsRun, session.getPlannedBytesSent());
  // One write: the ranks share stderr, and a line written in pieces
  // interleaves with theirs.
  llvm::errs() << line;
}

/// Trains a started session: every rank runs this; one that fails ends
/// the others, which would wait for it in a collective. `together` is set
/// where every rank stopped at the same step by agreement (a signal to
/// any of them): they end on their own, with 128 + the signal.
static int trainRanks(Session &session, Trainer &trainer, bool &together) {
  if (llvm::Error error = trainer.prepare())
    return fail(std::move(error));
  bool terminal = llvm::sys::Process::StandardErrIsDisplayed();
  struct sigaction action = {};
  action.sa_handler = onStopSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  // Past a file-size limit a write fails (EFBIG) and the save says so; the
  // signal's default would kill the run with a stack dump instead.
  std::signal(SIGXFSZ, SIG_IGN);
  int64_t firstStep = trainer.getFirstStep();
  printHeader(session, firstStep);
  bool leader = session.getRank() == 0;
  // The first step also pays for first touches: profiled only when alone.
  bool profiling = profile && steps <= firstStep && session.startProfile();
  int64_t profiledFrom = firstStep;
  llvm::Expected<RunEnd> end = trainer.run(
      [&](const StepReport &ran) {
        if (leader)
          printLossScale(ran);
        if (profile && !profiling && ran.step == firstStep) {
          profiling = session.startProfile();
          profiledFrom = firstStep + 1;
        }
      },
      [&](const StepReport &report) {
        if (leader)
          printProgress(session, report, firstStep, terminal);
      });
  if (!end)
    return fail(end.takeError());
  if (end->stopSignal) {
    together = true;
    if (!leader)
      return 128 + *end->stopSignal;
    if (terminal)
      llvm::errs() << "\n";
    llvm::errs() << "trainmem-run: stopped by signal " +
                        std::to_string(*end->stopSignal) + " after step " +
                        std::to_string(end->lastStep) +
                        (saveDir.empty()
                             ? "; no --save given, nothing saved"
                             : "; checkpoint saved in '" + saveDir + "'") +
                        "\n";
    return 128 + *end->stopSignal;
  }
  printRankTraffic(session, trainer.getSummary());
  if (leader)
    printSummary(session, trainer.getSummary());
  if (leader && profiling)
    printProfile(session, std::max<int64_t>(
                              1, trainer.getSummary().lastStep -
                                     profiledFrom + 1));
  return 0;
}

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  std::vector<char *> args;
  if (failed(takeThreads(argc, argv, args)))
    return 1;
  // --help lists --threads with the others: libLLVM's option of that name
  // (which never sees the value, read above) is shown with this meaning.
  if (cl::Option *llvmThreads = cl::getRegisteredOptions().lookup("threads")) {
    llvmThreads->setDescription("CPU threads, 1 to 1024 (default: all cores)");
    llvmThreads->setValueStr("int");
    llvmThreads->addCategory(category);
  }
  cl::HideUnrelatedOptions(category);
  mlir::train::registerDebugOptions();
  cl::ParseCommandLineOptions(static_cast<int>(args.size()), args.data(),
                              "trainmem-run: trains a compiled step\n");
  if (failed(checkOptions()))
    return 1;

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
  // One rank per process under mpirun: the world's size is the ranks.
  int64_t worldSize = 1, worldRank = 0;
  if (const char *size = std::getenv("OMPI_COMM_WORLD_SIZE"))
    if (StringRef(size).getAsInteger(10, worldSize) || worldSize < 1)
      return fail("OMPI_COMM_WORLD_SIZE is '" + llvm::Twine(size) +
                  "', not a process count");
  if (const char *rankText = std::getenv("OMPI_COMM_WORLD_RANK"))
    if (StringRef(rankText).getAsInteger(10, worldRank))
      return fail("OMPI_COMM_WORLD_RANK is '" + llvm::Twine(rankText) + "'");
  TrainStepPipelineOptions pipeline;
  if (failed(fillPipelineOptions(pipeline, worldSize, worldRank, *module)) ||
      failed(prepareStep(*module, pipeline)))
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
  llvm::Expected<std::unique_ptr<Session>> created =
      Session::create(std::move(module), options);
  if (!created)
    return fail(created.takeError());
  std::unique_ptr<Session> session = std::move(*created);

  TrainerOptions run;
  run.steps = steps;
  run.seed = seed;
  run.dataFile = dataFile;
  run.stepFile = inputFile;
  run.shapingOptions = shapingOptions();
  run.saveDir = saveDir;
  run.saveEvery = saveEvery;
  run.resumeDir = resumeDir;
  run.allowDataChange = allowDataChange;
  run.overwrite = overwrite;
  run.lossLog = lossLog;
  run.stopSignal = &stopSignal;
  if (const char *text = std::getenv("TRAINMEM_FAULT")) {
    llvm::Expected<Fault> fault = parseFault(text);
    if (!fault)
      return fail(fault.takeError());
    run.fault = *fault;
  }
  llvm::Expected<std::unique_ptr<Trainer>> trainer =
      Trainer::create(*session, std::move(run));
  if (!trainer)
    return fail(trainer.takeError());
  if (llvm::Error error = session->start())
    return fail(std::move(error));
  bool together = false;
  int code = trainRanks(*session, **trainer, together);
  if (code != 0 && !together) {
    llvm::errs().flush();
    session->abortRanks(code);
  }
  return code;
}
