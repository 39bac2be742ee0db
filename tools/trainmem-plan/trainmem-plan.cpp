//===- trainmem-plan.cpp - one memory budget in, a configuration out ------===//
//
// trainmem-plan --model PRESET --global-batch N [--ranks R] [--memory 80GB]
// trainmem-plan --input forward.mlir [--ranks R] [--memory 80GB] ...
//               [--hardware h100-80gb|h200|b200|a100-80gb|cpu|FILE.json]
//               [--seq S] [--layers L] [--dtype bf16]
//               [--micro-batches 1,2,4] [--remat none,selective,full,budget]
//               [--stages 0,1,2,3] [--eight-bit both|off|on] [--exact]
//               [--fuse-attention both|off|on] [--fuse-elementwise ...]
//               [--tensor-parallel 1,2,8|auto] [--sequence-parallel
//               both|off|on]
//               [--emit table|pipeline|deepspeed-json|megatron-args|json]
//               [--from-deepspeed FILE]
//
// Searches micro-batch x accumulation, recompute policy, ZeRO stage,
// 8-bit optimizer state, offload, fusion and tensor / sequence parallelism
// (lib/Plan/Planner.cpp: each candidate compiled by the project's passes and
// measured by the memory analysis), prints the candidates with their per-device
// peak by category, predicted step time and throughput relative to the fastest,
// why each rejected one does not fit, and marks the best; then its trainmem-opt
// pipeline and trainmem-run options. --emit deepspeed-json writes the same
// decisions as a DeepSpeed config, --emit megatron-args as Megatron-LM's
// arguments;
// --from-deepspeed reads one into the pipeline (keys this
// project does not model are named in a warning; stages and offloading it does
// not model are errors). docs/Planner.md.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Debug/Debug.h"
#include "trainmem/Dialect/Train/IR/ShardModels.h"
#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"
#include "trainmem/Dialect/Train/Transforms/OptimizerRegistry.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Dialect/Train/Transforms/Pipelines.h"
#include "trainmem/Model/ModelBuilder.h"
#include "trainmem/Plan/Calibrate.h"
#include "trainmem/Plan/DeepSpeed.h"
#include "trainmem/Plan/Hardware.h"
#include "trainmem/Plan/Json.h"
#include "trainmem/Plan/Megatron.h"
#include "trainmem/Plan/Planner.h"
#include "trainmem/Plan/Recipe.h"
#include "trainmem/Support/ByteSize.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

#include <optional>
#include <set>
#include <string>

using namespace mlir;
using namespace mlir::train;
namespace cl = llvm::cl;

/// The registered optimizers a framework has (Megatron-LM's or
/// DeepSpeed's), by the framework's names ("AdamW and Lion") or by ours
/// ("adamw or lion"): the registry's deepSpeedType and megatronName.
static std::string frameworkOptimizers(bool megatron, bool theirNames) {
  SmallVector<std::string> names;
  for (const OptimizerInfo &info : getRegisteredOptimizers()) {
    StringRef theirs = megatron ? info.megatronName : info.deepSpeedType;
    if (!theirs.empty())
      names.push_back((theirNames ? theirs : info.name).str());
  }
  std::string text;
  for (size_t i = 0; i < names.size(); ++i)
    text += (i == 0                 ? ""
             : i + 1 < names.size() ? ", "
             : theirNames           ? " and "
                                    : " or ") +
            names[i];
  return text;
}

static cl::OptionCategory category("trainmem-plan options");
static cl::opt<std::string>
    modelName("model", cl::desc("Model preset (trainmem-model --list-presets)"),
              cl::cat(category));
static cl::opt<std::string>
    inputFile("input",
              cl::desc("A forward + loss module to plan instead of a preset "
                       "(trainmem-import's or trainmem-model's output, or "
                       "written by hand)"),
              cl::value_desc("forward.mlir"), cl::cat(category));
static cl::opt<long long>
    globalBatch("global-batch",
                cl::desc("Sequences per optimizer step, all ranks"),
                cl::init(0), cl::cat(category));
static cl::opt<long long> ranks("ranks", cl::desc("Data-parallel devices"),
                                cl::init(1), cl::cat(category));
static cl::opt<std::string>
    memory("memory",
           cl::desc("Memory per device: bytes, or with GB, GiB, MB, MiB, TB "
                    "(default: the hardware's)"),
           cl::cat(category));
static cl::opt<std::string>
    reserve("reserve",
            cl::desc("Device memory kept out of the plan (the CUDA context, "
                     "communicator buffers): bytes, or with a unit; the "
                     "rows fit what is left (default: with the hardware's "
                     "memory, its context and two communicators on more "
                     "than one rank, and 5% for a framework's allocator "
                     "with --target deepspeed|megatron; with --memory, "
                     "nothing)"),
            cl::cat(category));
static cl::opt<std::string> hardwareName(
    "hardware",
    cl::desc("h100-80gb, h200, b200, a100-80gb, a100-40gb, cpu, native (this "
             "machine, measured once and cached), or a JSON file of the "
             "same figures (docs/Planner.md)"),
    cl::init("h100-80gb"), cl::cat(category));
static cl::opt<std::string> calibration(
    "calibration",
    cl::desc("With --hardware native: full (default) or quick (the three "
             "smallest calibration steps, a few seconds; cached apart)"),
    cl::init("full"), cl::cat(category));
static cl::opt<bool> recalibrate(
    "recalibrate",
    cl::desc("With --hardware native: measure this machine again instead of "
             "reading its cached figures"),
    cl::init(false), cl::cat(category));
static cl::opt<long long> seq("seq",
                              cl::desc("Sequence length (default: the "
                                       "preset's)"),
                              cl::init(0), cl::cat(category));
static cl::opt<long long> layers("layers",
                                 cl::desc("Layers (default: the preset's)"),
                                 cl::init(0), cl::cat(category));
static cl::opt<long long>
    hidden("hidden", cl::desc("Hidden size (default: the preset's)"),
           cl::init(0), cl::cat(category));
static cl::opt<long long> heads("heads",
                                cl::desc("Attention heads (default: the "
                                         "preset's)"),
                                cl::init(0), cl::cat(category));
static cl::opt<long long> kvHeads("kv-heads",
                                  cl::desc("K/V heads of a Llama (default: "
                                           "the preset's)"),
                                  cl::init(0), cl::cat(category));
static cl::opt<long long> ffn("ffn",
                              cl::desc("MLP inner size (default: the preset's "
                                       "rule from the hidden size)"),
                              cl::init(0), cl::cat(category));
static cl::opt<long long> vocab("vocab",
                                cl::desc("Vocabulary (default: the preset's)"),
                                cl::init(0), cl::cat(category));
static cl::opt<std::string> dtype("dtype",
                                  cl::desc("f32, bf16 or f16 (default: the "
                                           "preset's)"),
                                  cl::cat(category));
static cl::list<long long>
    microBatches("micro-batches",
                 cl::desc("Micro-batches to try (default: every divisor of "
                          "the per-rank batch)"),
                 cl::CommaSeparated, cl::cat(category));
static cl::list<std::string>
    remats("remat",
           cl::desc("Recompute policies to try: none, selective, "
                    "full, budget (default: all)"),
           cl::CommaSeparated, cl::cat(category));
static cl::list<long long>
    stages("stages",
           cl::desc("ZeRO stages to try on more than one rank "
                    "(default: 0,1,2,3)"),
           cl::CommaSeparated, cl::cat(category));
static cl::opt<std::string>
    eightBit("eight-bit", cl::desc("8-bit optimizer state: both, off, on"),
             cl::init("both"), cl::cat(category));
static cl::opt<std::string> optimizerName(
    "optimizer",
    cl::desc("The optimizers to try: adamw, lion, sgd or sophia, a "
             "comma-separated list of them, or any (docs/Optimizers.md; "
             "default adamw: the planner changes the recipe's optimizer "
             "only where asked; Sophia's Hessian step is measured with the "
             "step)"),
    cl::init("adamw"), cl::cat(category));
static cl::opt<std::string> recipe(
    "autodiff-options",
    cl::desc("The recipe: train-autodiff options but the optimizer (default "
             "trainmem-run's, \"lr=1e-3 weight-decay=0.0 clip-norm=1.0\"), "
             "measured, printed with each row's trainmem-run command as its "
             "--autodiff-options (with --optimizer's choice) and exported"),
    cl::init(""), cl::cat(category));
static cl::opt<double> numericsMargin(
    "numerics-margin",
    cl::desc("A row that changes the training's numerics (8-bit state, "
             "another optimizer than the first --optimizer, gradient release "
             "without the recipe's clipping) is the best only where nothing "
             "else fits or where it is predicted faster than the best that "
             "keeps them by more than this fraction (default 0.05)"),
    cl::init(0.05), cl::cat(category));
static cl::opt<std::string> target(
    "target",
    cl::desc("The framework the plan is for: any (trainmem-run), deepspeed "
             "or megatron: the search keeps what that framework runs "
             "(default: the --emit framework's, else any)"),
    cl::init(""), cl::cat(category));
static cl::opt<std::string> offloadActivations(
    "offload-activations",
    cl::desc("Activation offload (train-offload-activations: the checkpoints "
             "under recompute, every saved tensor without) to try: both, off, "
             "on (default: off, and on where nothing fits without it)"),
    cl::init(""), cl::cat(category));
static cl::list<std::string> accumulateDtype(
    "accumulate-dtype",
    cl::desc("The gradients' sums over micro-batches to try "
             "(train-grad-accum accumulate-dtype): f32, and the model's "
             "16-bit type (bf16 or f16), which halves the accumulators and "
             "changes the numerics (default: f32, and the 16-bit type where "
             "nothing fits otherwise)"),
    cl::CommaSeparated, cl::cat(category));
static cl::opt<std::string> releaseGradients(
    "release-gradients",
    cl::desc("Gradient release (train-release-gradients) to try: both, off, "
             "on (default: off; where it applies: one micro-batch, "
             "no clipping in the run's recipe)"),
    cl::init("off"), cl::cat(category));
static cl::opt<std::string> fuseAttention(
    "fuse-attention",
    cl::desc("Fused attention (train-fuse-attention) to try: both, off, on "
             "(default: both; off with --from-deepspeed, where it is a model "
             "setting)"),
    cl::cat(category));
static cl::opt<std::string> fuseElementwise(
    "fuse-elementwise",
    cl::desc("Fused element-wise chains (train-fuse-elementwise) to try: "
             "both, off, on (default: both where the model has a chain to "
             "fuse, else off)"),
    cl::cat(category));
static cl::list<std::string> tensorParallel(
    "tensor-parallel",
    cl::desc("Tensor-parallel sizes to try: counts that divide --ranks, or "
             "auto (every t up to 8, a node, that divides the ranks, the "
             "heads and the K/V heads; default: 1, and auto's sizes when "
             "nothing fits at 1; an explicit 1 searches 1 only)"),
    cl::CommaSeparated, cl::cat(category));
static cl::list<int64_t> pipelineParallel(
    "pipeline-parallel",
    cl::desc("Pipeline stages to try (train-pipeline, 1F1B, the layers cut "
             "evenly): counts p with t x c x p dividing --ranks and p the "
             "layers (default: 1)"),
    cl::CommaSeparated, cl::cat(category));
static cl::list<int64_t> virtualStages(
    "virtual-stages",
    cl::desc("Model chunks per pipeline stage to try (v > 1: the interleaved "
             "schedule, Megatron's --num-layers-per-virtual-pipeline-stage; "
             "default: 1)"),
    cl::CommaSeparated, cl::cat(category));
static cl::list<std::string> contextParallel(
    "context-parallel",
    cl::desc("Context-parallel sizes to try (train-context-parallel, load "
             "balanced, with fused attention): counts c with t x c dividing "
             "--ranks and 2c the sequence, or auto (2, 4 and 8 where they "
             "do); default: 1, and auto's sizes when nothing fits otherwise; "
             "an explicit 1 searches 1 only"),
    cl::CommaSeparated, cl::cat(category));
static cl::list<std::string> contextExchange(
    "context-exchange",
    cl::desc("How context parallelism's attention gets the group's keys and "
             "values, to try with c > 1 (train-context-parallel exchange): "
             "all-gather, ring (default: both; the ring holds two blocks of "
             "K/V where the gather holds the group's, and sends more)"),
    cl::CommaSeparated, cl::cat(category));
static cl::opt<std::string> sequenceParallel(
    "sequence-parallel",
    cl::desc("Sequence parallelism to try with tensor parallelism above 1: "
             "both, off, on (default: both)"),
    cl::init("both"), cl::cat(category));
static cl::list<std::string>
    offloads("offload",
             cl::desc("CPU optimizer offload to try: none, states, "
                      "states+update, states+update+gradients (the "
                      "micro-batches' gradients summed on the host too; where "
                      "a step accumulates, without ZeRO or at stages 2-3) "
                      "(default: all)"),
             cl::CommaSeparated, cl::cat(category));
static cl::opt<bool>
    exact("exact",
          cl::desc("Compile the whole model for every candidate instead of "
                   "two small layer counts extrapolated"),
          cl::cat(category));
static cl::opt<std::string>
    emit("emit",
         cl::desc("table (default), pipeline, deepspeed-json, "
                  "megatron-args, json"),
         cl::init("table"), cl::cat(category));
static cl::opt<bool>
    fitsOnly("fits-only",
             cl::desc("Show only the candidates that fit (json; the table "
                      "shows them by default; each keeps its number in the "
                      "whole search)"),
             cl::cat(category));
static cl::opt<bool>
    showAll("all",
            cl::desc("The table shows every candidate, with why each that "
                     "does not fit does not (default: those that fit, or "
                     "every one when none fits)"),
            cl::cat(category));
static cl::opt<long long>
    top("top",
        cl::desc("Show only the N fastest candidates that fit (table and "
                 "json; each keeps its number in the whole search)"),
        cl::init(0), cl::cat(category));
static cl::opt<std::string> fromDeepSpeed(
    "from-deepspeed",
    cl::desc("Read a DeepSpeed config: its decisions become the one "
             "candidate (with --model, measured)"),
    cl::cat(category));

static int fail(const llvm::Twine &message) {
  llvm::errs() << "trainmem-plan: error: " << message << "\n";
  return 1;
}


/// The table's units, chosen by the figures' magnitude (chooseUnits): GB,
/// MB, kB or B for bytes, so that the smallest peak shows at least 1; s,
/// ms or us for the step time, so that the fastest step shows at least 1.
static double unitBytes = 1e9;
static const char *unitName = "GB";
static double unitSeconds = 1.0;
static const char *secondsName = "s";

static void chooseUnits(const PlanResult &result) {
  uint64_t smallestPeak = UINT64_MAX;
  double fastest = 0.0;
  for (const PlanCandidate &c : result.candidates) {
    if (c.rejected.rfind("not compiled", 0) == 0 || c.measure.arena == 0)
      continue;
    smallestPeak = std::min(smallestPeak, c.measure.arena);
    if (c.stepSeconds > 0 && (fastest == 0.0 || c.stepSeconds < fastest))
      fastest = c.stepSeconds;
  }
  if (smallestPeak != UINT64_MAX)
    for (auto [bytes, name] : {std::pair{1e9, "GB"}, std::pair{1e6, "MB"},
                               std::pair{1e3, "kB"}, std::pair{1.0, "B"}})
      if (static_cast<double>(smallestPeak) >= bytes || bytes == 1.0) {
        unitBytes = bytes;
        unitName = name;
        break;
      }
  if (fastest > 0.0)
    for (auto [scale, name] : {std::pair{1.0, "s"}, std::pair{1e-3, "ms"},
                               std::pair{1e-6, "us"}})
      if (fastest >= scale || scale == 1e-6) {
        unitSeconds = scale;
        secondsName = name;
        break;
      }
}

static std::string gb(uint64_t bytes) {
  return llvm::formatv("{0:F2}", static_cast<double>(bytes) / unitBytes).str();
}

//===----------------------------------------------------------------------===//
// Printing
//===----------------------------------------------------------------------===//

/// The offload column: -, states, st+upd.
static const char *offloadShort(PlanOffload offload) {
  switch (offload) {
  case PlanOffload::none:
    return "-";
  case PlanOffload::states:
    return "states";
  case PlanOffload::statesAndUpdate:
    return "st+upd";
  case PlanOffload::statesUpdateGradients:
    return "su+grd";
  }
  return "?";
}

/// The offload column of a candidate: the optimizer's (offloadShort), with
/// the activations' where they go to the host too: act, st+act, su+act.
static std::string offloadCell(const PlanCandidate &c) {
  if (!c.offloadActivations)
    return offloadShort(c.offload);
  switch (c.offload) {
  case PlanOffload::none:
    return "act";
  case PlanOffload::states:
    return "st+act";
  case PlanOffload::statesAndUpdate:
    return "su+act";
  case PlanOffload::statesUpdateGradients:
    return "sg+act";
  }
  return "?";
}

/// The candidates to show, in the search's order: all, those that fit
/// (--fits-only), or the --top N that fit with the highest throughput.
static std::vector<size_t> shownCandidates(const PlanResult &result,
                                          bool table) {
  // The table shows what fits unless --all (every row when none fits: the
  // reasons are the answer then); JSON everything unless asked.
  bool onlyFits = fitsOnly || top > 0 ||
                  (table && !showAll && result.best.has_value());
  std::vector<size_t> shown;
  for (size_t i = 0; i < result.candidates.size(); ++i)
    if (!onlyFits || result.candidates[i].fits)
      shown.push_back(i);
  if (top > 0 && static_cast<long long>(shown.size()) > top) {
    std::vector<size_t> fastest = shown;
    std::stable_sort(fastest.begin(), fastest.end(), [&](size_t a, size_t b) {
      return result.candidates[a].relative > result.candidates[b].relative;
    });
    fastest.resize(static_cast<size_t>(top));
    llvm::sort(fastest);
    shown = std::move(fastest);
  }
  return shown;
}

/// The fusion column: attn (train-fuse-attention), elem
/// (train-fuse-elementwise), both, or -.
static const char *fusionShort(const PlanCandidate &c) {
  if (c.fuseAttention && c.fuseElementwise)
    return "both";
  if (c.fuseAttention)
    return "attn";
  if (c.fuseElementwise)
    return "elem";
  return "-";
}

/// The tensor-parallel column: t, with +sp for sequence parallelism, c<n>
/// for context parallelism (c<n>r: its ring form).
static std::string tensorShort(const PlanCandidate &c) {
  return std::to_string(c.tensorParallel) + (c.sequenceParallel ? "+sp" : "") +
         (c.contextParallel > 1 ? "c" + std::to_string(c.contextParallel)
                                : "") +
         (c.contextRing() ? "r" : "") +
         (c.pipelineParallel > 1 ? "p" + std::to_string(c.pipelineParallel)
                                 : "") +
         (c.virtualStages > 1 ? "v" + std::to_string(c.virtualStages) : "");
}

/// The update column: the optimizer, +rel for gradient release.
static std::string updateShort(const PlanCandidate &c) {
  return c.optimizer + (c.releaseGradients ? "+rel" : "");
}

static void printTable(llvm::raw_ostream &os, const PlanRequest &request,
                       const PlanResult &result) {
  // The tensor-parallel column where the search has t > 1, the update
  // column where it has more than one optimizer or release.
  bool tensorColumn =
      llvm::any_of(result.candidates, [](const PlanCandidate &c) {
        return c.tensorParallel > 1 || c.contextParallel > 1 ||
               c.pipelineParallel > 1;
      });
  bool updateColumn =
      llvm::any_of(result.candidates, [&](const PlanCandidate &c) {
        return updateShort(c) != updateShort(result.candidates.front());
      });
  auto tensorCell = [&](const PlanCandidate &c) {
    return (tensorColumn ? llvm::formatv(" {0,-5}", tensorShort(c)).str()
                         : std::string()) +
           (updateColumn ? llvm::formatv(" {0,-10}", updateShort(c)).str()
                         : std::string());
  };
  os << llvm::formatv("{0,3}  {1,-9} {2,-9} {3,4} {4,5} ", "#", "micro x k",
                      "remat", "zero", "8bit")
     << llvm::formatv("{0,-7} {1,-4}", "offload", "fuse")
     << (tensorColumn ? llvm::formatv(" {0,-5}", "tp").str() : std::string())
     << (updateColumn ? llvm::formatv(" {0,-10}", "update").str()
                      : std::string())
     << llvm::formatv(" {5,8} {6,8} "
                      "{7,8} {8,8} {9,8} {10,8} {11,8} {12,9} {13,6}  {14}\n",
                      "#", "micro x k", "remat", "zero", "8bit",
                      (std::string("peak ") + unitName).c_str(), "weights",
                      "grads", "optim", "gather", "activ", "temp",
                      (std::string("step ") + secondsName).c_str(),
                      "rel", "");
  auto at = [](const PlanCandidate &c, MemoryCategory cat) {
    return gb(c.measure.atPeak[static_cast<unsigned>(cat)]);
  };
  std::vector<size_t> shown = shownCandidates(result, /*table=*/true);
  if (shown.size() < result.candidates.size())
    os << llvm::formatv("({0} of {1} candidates shown: {2}; --all shows "
                        "every one)\n",
                        shown.size(), result.candidates.size(),
                        top > 0 ? "the --top " + std::to_string(top) +
                                      " that fit with the highest "
                                      "throughput, in search order"
                                : std::string("those that fit"));
  for (size_t i : shown) {
    const PlanCandidate &c = result.candidates[i];
    // 16-bit gradient sums: "1 x 8 bf16".
    std::string mk = llvm::formatv(
        "{0} x {1}{2}", c.microBatch, c.accumulation,
        c.sumDtype == AccumDtype::f32 ? ""
                                      : " " + accumDtypeName(c.sumDtype).str());
    std::string zero = c.stage < 0 ? "-" : std::to_string(c.stage);
    if (c.rejected.rfind("not compiled", 0) == 0) {
      os << llvm::formatv("{0,3}  {1,-9} {2,-9} {3,4} {4,5} ", i + 1, mk,
                          stringifyPlanRemat(c.remat), zero,
                          c.eightBit ? "yes" : "no")
         << llvm::formatv("{0,-7} {1,-4}", offloadCell(c), fusionShort(c))
         << tensorCell(c) << "  " << c.rejected << "\n";
      continue;
    }
    std::string mark = result.best && *result.best == i ? "best"
                       : c.fits                         ? "fits"
                                                        : c.rejected;
    if (c.approximate)
      mark += " (~: extrapolated from counts not linear in the layers)";
    os << llvm::formatv("{0,3}  {1,-9} {2,-9} {3,4} {4,5} ", i + 1, mk,
                        stringifyPlanRemat(c.remat), zero,
                        c.eightBit ? "yes" : "no")
       << llvm::formatv("{0,-7} {1,-4}", offloadCell(c), fusionShort(c))
       << tensorCell(c);
    os << llvm::formatv(
        " {5,8} {6,8} {7,8} {8,8} {9,8} "
        "{10,8} {11,8} {12,9:F3} {13,6:F3}  {14}\n",
        i + 1, mk, stringifyPlanRemat(c.remat), zero, c.eightBit ? "yes" : "no",
        gb(c.measure.arena), at(c, MemoryCategory::Weights),
        at(c, MemoryCategory::Gradients), at(c, MemoryCategory::Optimizer),
        at(c, MemoryCategory::Gathered), at(c, MemoryCategory::Activations),
        at(c, MemoryCategory::Temporaries), c.stepSeconds / unitSeconds,
        c.relative, mark);
  }
}

static void printBest(llvm::raw_ostream &os, const PlanRequest &request,
                      const PlanCandidate &c, size_t index) {
  os << llvm::formatv("best: #{0}, {1}: peak {2} {7} of {3} {7}, predicted "
                      "{4:F3} {8} per step ({5:F0} tokens/s per device, {6:F3} "
                      "of the fastest)\n",
                      index + 1, c.describe(), gb(c.measure.arena),
                      gb(request.memoryBytes), c.stepSeconds / unitSeconds,
                      c.tokensPerSecond, c.relative, unitName, secondsName);
  const ModelConfig &m = request.model;
  if (request.module) {
    os << "  trainmem-opt " << m.name << " --pass-pipeline='builtin.module("
       << c.passPipeline(request.ranks, request.memoryBytes)
       << ")' -o step.mlir\n";
    os << "  "
       << (request.ranks > 1
               ? llvm::formatv("mpirun -np {0} ", request.ranks).str()
               : "")
       << "trainmem-run " << m.name << " --data FILE --steps N"
       << c.runOptions(request.memoryBytes) << " --resume WEIGHTS\n";
    // Without --resume the run draws the weights from each parameter's
    // #train.init, not the model's own.
    os << "  (WEIGHTS: the directory trainmem-import --weights wrote, so "
          "that the run starts from the imported weights; without "
          "--resume it starts from #train.init draws)\n";
    return;
  }
  os << "  trainmem-model --preset " << m.name << " --layers " << m.layers
     << " --hidden " << m.hidden << " --heads " << m.heads;
  if (m.kvHeads != m.heads)
    os << " --kv-heads " << m.kvHeads;
  os << " --ffn " << m.ffn << " --vocab " << m.vocab << " --seq " << m.seq
     << " --batch " << c.microBatch * c.accumulation << " --dtype " << m.dtype
     << " -o model.mlir\n";
  os << "  trainmem-opt model.mlir --pass-pipeline='builtin.module("
     << c.passPipeline(request.ranks, request.memoryBytes)
     << ")' -o step.mlir\n";
  os << "  "
     << (request.ranks > 1
             ? llvm::formatv("mpirun -np {0} ", request.ranks).str()
             : "")
     << "trainmem-run model.mlir --data FILE --steps N"
     << c.runOptions(request.memoryBytes) << "\n";
}

/// A figure of the throughput model as JSON: JSON has no infinity or NaN,
/// so a figure that is not finite is null (the hardware checks keep them
/// finite; this keeps the output JSON whatever they miss).
static llvm::json::Value figure(double value) {
  if (!std::isfinite(value))
    return nullptr;
  return value;
}

static llvm::json::Object candidateJson(const PlanCandidate &c,
                                        const PlanRequest &request) {
  llvm::json::Object atPeak;
  for (unsigned cat = 0; cat < kNumMemoryCategories; ++cat)
    atPeak[stringifyMemoryCategory(static_cast<MemoryCategory>(cat))] =
        c.measure.atPeak[cat];
  llvm::json::Object o{
      {"micro_batch", c.microBatch},
      {"accumulation", c.accumulation},
      {"remat", stringifyPlanRemat(c.remat)},
      {"zero_stage", c.stage},
      {"eight_bit", c.eightBit},
      {"optimizer", c.optimizer},
      {"release_gradients", c.releaseGradients},
      {"offload", stringifyPlanOffload(c.offload)},
      {"offload_activations", c.offloadActivations},
      {"accumulate_dtype", accumDtypeName(c.sumDtype)},
      {"fuse_attention", c.fuseAttention},
      {"fuse_elementwise", c.fuseElementwise},
      {"tensor_parallel", c.tensorParallel},
      {"sequence_parallel", c.sequenceParallel},
      {"context_parallel", c.contextParallel},
      {"pipeline_parallel", c.pipelineParallel},
      {"virtual_stages", c.virtualStages},
      {"context_exchange",
       c.contextParallel > 1
           ? llvm::json::Value(c.contextRing() ? "ring" : "all-gather")
           : llvm::json::Value(nullptr)},
      {"fits", c.fits},
      {"pipeline", c.passPipeline(request.ranks, request.memoryBytes)},
      {"trainmem_run_options",
       StringRef(c.runOptions(request.memoryBytes)).ltrim().str()}};
  if (c.rejected.rfind("not compiled", 0) == 0) {
    o["rejected"] = c.rejected;
    return o;
  }
  o["measured"] = c.wholeModel    ? "whole model"
                  : c.approximate ? "extrapolated, approximate"
                                  : "extrapolated";
  // The loop is planned rolled and runs as a loop in that plan.
  o["micro_batch_loop"] = c.accumulation == 1 ? "none" : "rolled";
  o["changes_numerics"] = c.changesNumerics;
  // The arena the printed command plans and measures; the analysis's
  // most live bytes beside it.
  o["peak_bytes"] = c.measure.arena;
  o["live_peak_bytes"] = c.measure.peak;
  o["at_peak"] = std::move(atPeak);
  o["flops"] = llvm::json::Object{{"forward", c.measure.forwardFlops},
                                  {"backward", c.measure.backwardFlops},
                                  {"recompute", c.measure.recomputeFlops},
                                  {"optimizer", c.measure.optimizerFlops}};
  o["bytes_sent"] = c.measure.bytesSent;
  if (c.pipelineParallel > 1) {
    o["exchange_bytes"] = c.measure.exchangeBytes;
    o["units_in_flight"] = c.measure.unitsInFlight;
  }
  o["host_bytes"] = c.measure.hostBytes;
  o["host_device_bytes"] = c.measure.hostDeviceBytes;
  o["seconds"] =
      llvm::json::Object{{"compute", figure(c.computeSeconds)},
                         {"optimizer", figure(c.optimizerSeconds)},
                         {"communication", figure(c.communicationSeconds)},
                         {"offload", figure(c.offloadSeconds)},
                         {"bubble", figure(c.bubbleSeconds)},
                         {"point_to_point", figure(c.pointToPointSeconds)},
                         {"step", figure(c.stepSeconds)}};
  o["tokens_per_second"] = figure(c.tokensPerSecond);
  o["relative"] = figure(c.relative);
  if (!c.fits)
    o["rejected"] = c.rejected;
  return o;
}

/// fail() for the steps of main that return a LogicalResult.
static LogicalResult refuse(const llvm::Twine &message) {
  fail(message);
  return failure();
}

/// --from-deepspeed's plan (none without it); its keys that trainmem does
/// not model are warned about.
static LogicalResult readDeepSpeedFile(std::optional<DeepSpeedPlan> &out) {
  if (fromDeepSpeed.empty())
    return success();
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> file =
      llvm::MemoryBuffer::getFile(fromDeepSpeed);
  if (!file)
    return refuse("cannot read '" + fromDeepSpeed +
                  "': " + file.getError().message());
  std::vector<std::string> warnings;
  llvm::Expected<DeepSpeedPlan> read =
      readDeepSpeed((*file)->getBuffer(), ranks, warnings);
  if (!read)
    return refuse(fromDeepSpeed + ": " + llvm::toString(read.takeError()));
  out = std::move(*read);
  for (const std::string &key : warnings)
    llvm::errs() << "trainmem-plan: warning: " << fromDeepSpeed << ": '" << key
                 << "' is not modeled by trainmem; the plan does "
                 << "not carry it\n";
  return success();
}

/// This executable, to find trainmem-import beside it.
static std::string mainExecutable;

/// A model trainmem-import wrote (its train.import says from what), traced
/// again at `batch` x `seq` into `traced` (beside `file`), then read into
/// `module`: a model file is planned at another shape as it was imported.
static LogicalResult traceAgain(MLIRContext &context, StringRef file,
                                int64_t batch, int64_t seq,
                                OwningOpRef<ModuleOp> &module,
                                std::string &traced) {
  auto source = (*module)->getAttrOfType<DictionaryAttr>("train.import");
  auto entry = source ? source.getAs<StringAttr>("entry") : StringAttr();
  if (!entry)
    return refuse("--seq and --global-batch plan a model file at another "
                  "shape by tracing it again, from the source trainmem-import "
                  "records (train.import); '" +
                  file +
                  "' has none: write it at the shape to plan (trainmem-import "
                  "--batch B --seq S)");
  SmallString<256> importer(llvm::sys::path::parent_path(mainExecutable));
  llvm::sys::path::append(importer, "trainmem-import");
  SmallString<256> out(file);
  llvm::sys::path::replace_extension(
      out, llvm::formatv(".b{0}.s{1}.mlir", batch, seq).str());
  traced = out.str().str();
  std::string batchText = std::to_string(batch), seqText = std::to_string(seq);
  SmallVector<StringRef> args = {importer,  entry.getValue(), "--batch",
                                 batchText, "--seq",          seqText,
                                 "-o",      traced};
  if (source.get("meta"))
    args.push_back("--meta");
  if (auto python = source.getAs<StringAttr>("python")) {
    args.push_back("--python");
    args.push_back(python.getValue());
  }
  llvm::errs() << "trainmem-plan: note: tracing " << entry.getValue()
               << " again at batch " << batch << ", seq " << seq << " into "
               << traced << "\n";
  std::string error;
  int status = llvm::sys::ExecuteAndWait(importer, args, std::nullopt, {}, 0,
                                         0, &error);
  if (status != 0)
    return refuse("tracing " + entry.getValue() + " again at batch " +
                  batchText + ", seq " + seqText + " failed" +
                  (error.empty() ? " (trainmem-import's error above)"
                                 : ": " + error));
  module = parseSourceFile<ModuleOp>(traced, &context);
  if (!module)
    return refuse("cannot read the traced model '" + traced + "'");
  return success();
}

/// The model planned: a model file (forward + loss, as trainmem-model
/// writes it, into `moduleFile`) used as it is, or a preset with the
/// shape options applied (and the DeepSpeed config's dtype). A model
/// trainmem-import wrote is traced again where --seq or --global-batch
/// asks for another shape than its own.
static LogicalResult loadModel(MLIRContext &context,
                               const std::optional<DeepSpeedPlan> &deepSpeed,
                               OwningOpRef<ModuleOp> &moduleFile,
                               std::optional<ModelConfig> &model) {
  if (!inputFile.empty() && !modelName.empty())
    return refuse("--model names a preset and --input a model file: give "
                  "one of them");
  // A model file: --input, or --model FILE.mlir as before.
  std::string file = !inputFile.empty() ? inputFile.getValue()
                     : StringRef(modelName).ends_with(".mlir")
                         ? modelName.getValue()
                         : std::string();
  if (!file.empty()) {
    if (layers.getNumOccurrences() || hidden.getNumOccurrences() ||
        heads.getNumOccurrences() || kvHeads.getNumOccurrences() ||
        ffn.getNumOccurrences() || vocab.getNumOccurrences() ||
        dtype.getNumOccurrences())
      return refuse("--layers, --hidden, --heads, --kv-heads, --ffn, --vocab "
                    "and --dtype shape a preset; a model file is used as it "
                    "is (--seq and --global-batch trace a model "
                    "trainmem-import wrote again at that shape)");
    moduleFile = parseSourceFile<ModuleOp>(file, &context);
    if (!moduleFile)
      return refuse("cannot read the model '" + file + "'");
    // A model trainmem-import wrote is traced again at another shape;
    // another file's batch is checked by the planner, its sequence fixed.
    bool imported = (*moduleFile)->hasAttr("train.import");
    // The shape the planner plans (its tokens input); a module without
    // one is refused by the planner, which says why.
    int64_t fileBatch = 0, fileSeq = 0;
    llvm::consumeError(batchOfModule(*moduleFile, fileBatch, fileSeq));
    int64_t wantBatch = fileBatch, wantSeq = fileSeq;
    if (seq.getNumOccurrences()) {
      if (seq < 1)
        return refuse("--seq must be at least 1, got " +
                      llvm::Twine(seq.getValue()));
      if (!imported)
        return refuse("--seq plans a model file at another sequence by "
                      "tracing it again, from the source trainmem-import "
                      "records (train.import); '" +
                      file + "' has none: write it at that sequence");
      wantSeq = seq;
    }
    if (imported && !deepSpeed && globalBatch.getNumOccurrences() &&
        globalBatch > 0) {
      if (globalBatch % ranks != 0)
        return refuse("--global-batch " + llvm::Twine(globalBatch.getValue()) +
                      " is not a multiple of --ranks " +
                      llvm::Twine(ranks.getValue()) +
                      ": a model file's batch is each rank's");
      wantBatch = globalBatch / ranks;
    }
    if (imported && (wantBatch != fileBatch || wantSeq != fileSeq)) {
      std::string traced;
      if (failed(traceAgain(context, file, wantBatch, wantSeq, moduleFile,
                            traced)))
        return failure();
      file = traced;
    }
    // The planner builds the step itself, for each candidate.
    if (hasMarkedStep(*moduleFile))
      return refuse("'" + file +
                    "' holds a training step (a function marked train.step, "
                    "as train-autodiff or trainmem-opt's pipelines write "
                    "it); the planner takes the forward + loss module it "
                    "was built from (trainmem-model's or trainmem-import's "
                    "output) and builds each candidate's step itself");
    model = ModelConfig();
    model->name = file;
  } else {
    model = getPreset(modelName);
  }
  if (!model)
    return refuse("unknown model preset '" + modelName +
                  "' (trainmem-model --list-presets, or a .mlir file)");
  // A shape given is the shape planned: 0 or a negative one is refused
  // later (validateConfig), as trainmem-model refuses it.
  if (seq.getNumOccurrences() && !moduleFile)
    model->seq = seq;
  if (hidden.getNumOccurrences()) {
    model->hidden = hidden;
    model->ffn = 0; // re-derived below unless given
  }
  if (heads.getNumOccurrences()) {
    model->heads = heads;
    if (model->arch == Architecture::GPT)
      model->kvHeads = heads;
  }
  if (kvHeads.getNumOccurrences())
    model->kvHeads = kvHeads;
  if (vocab.getNumOccurrences())
    model->vocab = vocab;
  if (ffn.getNumOccurrences())
    model->ffn = ffn;
  else if (model->ffn == 0 && model->hidden > 0)
    model->ffn = defaultFfn(*model);
  if (layers.getNumOccurrences())
    model->layers = layers;
  if (dtype.getNumOccurrences())
    model->dtype = dtype;
  if (deepSpeed && deepSpeed->dtype) {
    if (dtype.getNumOccurrences() && dtype != *deepSpeed->dtype)
      return refuse("--dtype " + dtype + ", but the DeepSpeed config trains " +
                    *deepSpeed->dtype + " (its bf16/fp16 keys decide)");
    model->dtype = *deepSpeed->dtype;
  }
  return success();
}

/// both, off or on as the values a choice takes.
static std::optional<std::vector<bool>> bothOffOn(StringRef value) {
  if (value == "both")
    return std::vector<bool>{false, true};
  if (value == "off")
    return std::vector<bool>{false};
  if (value == "on")
    return std::vector<bool>{true};
  return std::nullopt;
}

/// The choices searched: the DeepSpeed config's (one of each), or the
/// options'. Fusion is a model setting in DeepSpeed: with --from-deepspeed
/// it is off unless asked for here.
static LogicalResult
fillSearchSpace(PlanRequest &request,
                const std::optional<DeepSpeedPlan> &deepSpeed) {
  if (deepSpeed) {
    const PlanCandidate &c = deepSpeed->candidate;
    request.microBatches = {c.microBatch};
    request.remats = {c.remat};
    request.stages = {c.stage};
    request.eightBit = {false};
    request.offloads = {c.offload};
    request.fuseAttention = {false};
    request.fuseElementwise = {false};
    // The question is this config, as DeepSpeed runs it: no tensor
    // parallelism (DeepSpeed alone has none), no search beyond it.
    request.tensorParallel = {1};
    request.sequenceParallel = {false};
    request.contextParallel = {1};
    request.releaseGradients = {false};
    request.offloadActivations = {false};
    request.sixteenBitSums = {c.sumDtype != AccumDtype::f32};
  } else {
    for (long long m : microBatches)
      request.microBatches.push_back(m);
    for (const std::string &r : remats) {
      std::optional<PlanRemat> remat = parsePlanRemat(r);
      if (!remat)
        return refuse("--remat: unknown policy '" + r +
                      "' (none, selective, full, budget)");
      request.remats.push_back(*remat);
    }
    for (long long s : stages)
      request.stages.push_back(s);
    for (const std::string &o : offloads) {
      std::optional<PlanOffload> offload = parsePlanOffload(o);
      if (!offload)
        return refuse("--offload: unknown choice '" + o +
                      "' (none, states, states+update, "
                      "states+update+gradients)");
      request.offloads.push_back(*offload);
    }
    std::optional<std::vector<bool>> eight = bothOffOn(eightBit);
    if (!eight)
      return refuse("--eight-bit must be both, off or on");
    request.eightBit = *eight;
    std::optional<std::vector<bool>> release = bothOffOn(releaseGradients);
    if (!release)
      return refuse("--release-gradients must be both, off or on");
    request.releaseGradients = *release;
    if (!offloadActivations.empty()) {
      std::optional<std::vector<bool>> activations =
          bothOffOn(offloadActivations);
      if (!activations)
        return refuse("--offload-activations must be both, off or on");
      request.offloadActivations = *activations;
    }
    for (const std::string &e : contextExchange) {
      ContextExchange exchange;
      if (e == "all-gather")
        exchange = ContextExchange::allGather;
      else if (e == "ring")
        exchange = ContextExchange::ring;
      else
        return refuse("--context-exchange: '" + e +
                      "' is not all-gather or ring");
      if (!llvm::is_contained(request.contextExchanges, exchange))
        request.contextExchanges.push_back(exchange);
    }
    for (const std::string &d : accumulateDtype) {
      AccumDtype narrow = sixteenBitGradients(request);
      if (d == "f32") {
        request.sixteenBitSums.push_back(false);
        continue;
      }
      if (d != "bf16" && d != "f16")
        return refuse("--accumulate-dtype: '" + d +
                      "' is not f32, bf16 or f16");
      if (accumDtypeName(narrow) != d)
        return refuse("--accumulate-dtype " + d +
                      ": the model's gradients "
                      "are " +
                      accumDtypeName(narrow).str() +
                      (narrow == AccumDtype::f32
                           ? " (give a 16-bit model: --dtype bf16)"
                           : " (sum them in f32 or " +
                                 accumDtypeName(narrow).str() + ")"));
      request.sixteenBitSums.push_back(true);
    }
    for (const std::string &t : tensorParallel) {
      if (t == "auto") {
        for (int64_t size : tensorParallelSizes(request))
          if (!llvm::is_contained(request.tensorParallel, size))
            request.tensorParallel.push_back(size);
        continue;
      }
      int64_t size = 0;
      if (StringRef(t).getAsInteger(10, size) || size < 1)
        return refuse("--tensor-parallel: '" + t + "' is not a count or auto");
      if (!llvm::is_contained(request.tensorParallel, size))
        request.tensorParallel.push_back(size);
    }
    for (int64_t p : pipelineParallel)
      if (!llvm::is_contained(request.pipelineParallel, p))
        request.pipelineParallel.push_back(p);
    for (int64_t v : virtualStages)
      if (!llvm::is_contained(request.virtualStages, v))
        request.virtualStages.push_back(v);
    std::optional<std::vector<bool>> sequence = bothOffOn(sequenceParallel);
    if (!sequence)
      return refuse("--sequence-parallel must be both, off or on");
    request.sequenceParallel = *sequence;
    for (const std::string &c : contextParallel) {
      if (c == "auto") {
        for (int64_t size : {int64_t(1), int64_t(2), int64_t(4), int64_t(8)})
          if (request.ranks % size == 0 &&
              request.model.seq % (2 * size) == 0 &&
              !llvm::is_contained(request.contextParallel, size))
            request.contextParallel.push_back(size);
        continue;
      }
      int64_t size = 0;
      if (StringRef(c).getAsInteger(10, size) || size < 1)
        return refuse("--context-parallel: '" + c + "' is not a count or auto");
      if (!llvm::is_contained(request.contextParallel, size))
        request.contextParallel.push_back(size);
    }
  }
  for (auto [option, out] :
       {std::pair{&fuseAttention, &request.fuseAttention},
        std::pair{&fuseElementwise, &request.fuseElementwise}}) {
    if (!option->getNumOccurrences())
      continue;
    std::optional<std::vector<bool>> values = bothOffOn(*option);
    if (!values)
      return refuse("--" + option->ArgStr + " must be both, off or on");
    *out = *values;
  }
  return success();
}

/// The optimizers tried (--optimizer: one name, a comma-separated list or
/// `any`, each registered; Sophia's Hessian step is measured with its
/// step), each one the chosen export can name.
static LogicalResult
fillOptimizers(PlanRequest &request,
               const std::optional<DeepSpeedPlan> &deepSpeed) {
  SmallVector<StringRef> words;
  StringRef(recipe).split(words, ' ', -1, /*KeepEmpty=*/false);
  for (StringRef word : words)
    if (word.split('=').first.trim() == "optimizer")
      return refuse("--autodiff-options: the optimizer is --optimizer's "
                    "(one, a list or any); the recipe holds the other "
                    "train-autodiff options");
  request.recipe = recipe;
  if (deepSpeed) {
    if (recipe.getNumOccurrences())
      return refuse("--autodiff-options and --from-deepspeed both give the "
                    "recipe: the config's optimizer params and "
                    "gradient_clipping are its recipe");
    request.recipe = deepSpeed->recipe;
  }
  request.optimizers.clear();
  if (optimizerName == "any") {
    for (const OptimizerInfo &info : getRegisteredOptimizers())
      request.optimizers.push_back(info.name.str());
  } else {
    SmallVector<StringRef> names;
    StringRef(optimizerName).split(names, ',');
    for (StringRef name : names) {
      name = name.trim();
      if (!lookupOptimizer(name))
        return refuse("--optimizer: '" + name +
                      "' is an unknown optimizer (expected " +
                      listOptimizerNames() + ", a list of them, or any)");
      if (!llvm::is_contained(request.optimizers, name))
        request.optimizers.push_back(name.str());
    }
  }
  for (const std::string &name : request.optimizers) {
    if (deepSpeed && name != "adamw")
      return refuse("--from-deepspeed plans the config's AdamW; --optimizer "
                    "does not apply");
    const OptimizerInfo *info = lookupOptimizer(name);
    if (info->deepSpeedType.empty() && emit == "deepspeed-json")
      return refuse(
          "--emit deepspeed-json: DeepSpeed has no " + name +
          " optimizer (its types include " + frameworkOptimizers(false, true) +
          "); plan with --optimizer " + frameworkOptimizers(false, false) +
          ", or emit table or json");
    if (info->megatronName.empty() && emit == "megatron-args")
      return refuse("--emit megatron-args: Megatron-LM has no " + name +
                    " optimizer (its --optimizer takes " +
                    frameworkOptimizers(true, true) +
                    "); plan with --optimizer " +
                    frameworkOptimizers(true, false));
  }
  return success();
}

/// The request from the options: the model, ranks, hardware, global batch,
/// memory and the choices searched.
/// The default reserve's parts besides the hardware's context: a run on
/// more than one rank holds a communicator per process group it uses, at
/// most two (the data and the tensor axis); a framework's plan runs under
/// PyTorch's caching allocator, which keeps freed blocks for reuse and
/// splits them: an assumed 5 % of the memory lost to that fragmentation
/// (trainmem-run's one planned arena has none).
constexpr uint64_t kCommunicatorsPerRank = 2;
constexpr double kFrameworkFragmentation = 0.05;

/// The framework the plan is for: --target, or the --emit framework's.
static StringRef targetFramework() {
  if (!target.empty())
    return target;
  if (emit == "deepspeed-json")
    return "deepspeed";
  if (emit == "megatron-args")
    return "megatron";
  return "any";
}

/// Keeps of the search what the target framework runs (what its config or
/// arguments express: deepSpeedCannotExpress, megatronCannotExpress); a
/// dimension left with nothing is an error naming what was asked.
static LogicalResult restrictToTarget(PlanRequest &request) {
  StringRef framework = targetFramework();
  if (framework == "any")
    return success();
  if (framework != "deepspeed" && framework != "megatron")
    return refuse("--target must be any, deepspeed or megatron, not '" +
                  framework + "'");
  bool megatron = framework == "megatron";
  auto keep = [&](auto &values, auto allowed, StringRef what) {
    llvm::erase_if(values, [&](const auto &v) { return !allowed(v); });
    if (values.empty())
      return refuse("--target " + framework + ": none of the " + what +
                    " asked for is one " + framework + " runs");
    return success();
  };
  if (failed(keep(
          request.remats,
          [&](PlanRemat r) {
            return r == PlanRemat::none || r == PlanRemat::full ||
                   (megatron && r == PlanRemat::selective);
          },
          "recompute policies")) ||
      failed(keep(
          request.stages,
          [&](int64_t stage) { return !megatron || stage <= 1; },
          "ZeRO stages")) ||
      failed(keep(
          request.offloads,
          [&](PlanOffload o) {
            return o == PlanOffload::none ||
                   (!megatron && (o == PlanOffload::statesAndUpdate ||
                                  o == PlanOffload::statesUpdateGradients));
          },
          "offload choices")) ||
      failed(keep(
          request.eightBit, [](bool on) { return !on; }, "8-bit choices")) ||
      failed(keep(
          request.releaseGradients, [](bool on) { return !on; },
          "gradient release choices")) ||
      failed(keep(
          request.sixteenBitSums, [&](bool on) { return !on || !megatron; },
          "gradient sum types")) ||
      failed(keep(
          request.tensorParallel, [&](int64_t t) { return megatron || t == 1; },
          "tensor-parallel sizes")) ||
      failed(keep(
          request.contextParallel,
          [&](int64_t c) { return megatron || c == 1; },
          "context-parallel sizes")) ||
      failed(keep(
          request.virtualStages, [&](int64_t v) { return megatron || v == 1; },
          "virtual pipeline stages")) ||
      failed(keep(
          request.optimizers,
          [&](const std::string &name) {
            const OptimizerInfo *info = lookupOptimizer(name);
            return info &&
                   !(megatron ? info->megatronName : info->deepSpeedType)
                        .empty();
          },
          "optimizers")))
    return failure();
  // Escalating to tensor parallelism is Megatron's only; to 16-bit
  // gradient sums DeepSpeed's only.
  if (!megatron) {
    request.defaultTensorParallel = false;
    request.defaultContextParallel = false;
  } else {
    request.defaultSixteenBitSums = false;
  }
  return success();
}

static LogicalResult
fillRequest(PlanRequest &request, const ModelConfig &model, ModuleOp moduleFile,
            const Hardware &hardware,
            const std::optional<DeepSpeedPlan> &deepSpeed) {
  request.model = model;
  request.module = moduleFile;
  request.ranks = ranks;
  request.hardware = hardware;
  request.globalBatch = deepSpeed ? deepSpeed->globalBatch : globalBatch;
  if (!deepSpeed && globalBatch.getNumOccurrences() && globalBatch <= 0)
    return refuse("--global-batch must be at least 1 (sequences per "
                  "optimizer step over all ranks), got " +
                  llvm::Twine(globalBatch.getValue()));
  if (request.globalBatch <= 0 && !moduleFile)
    return refuse("--global-batch is required (sequences per optimizer step "
                  "over all ranks)");
  request.memoryBytes = hardware.memoryBytes;
  if (!memory.empty()) {
    std::optional<uint64_t> bytes = trainmem::parseByteSize(memory);
    if (!bytes)
      return refuse("--memory '" + memory +
                    "' is not a size from 1 byte to below 2^63 bytes (e.g. "
                    "80GB, 24GiB, 1e9)");
    request.memoryBytes = *bytes;
  }
  if (reserve.empty() && memory.empty()) {
    // The hardware's memory: what a run keeps outside its arena there.
    uint64_t kept = hardware.contextBytes;
    if (ranks > 1)
      kept += kCommunicatorsPerRank * hardware.communicatorBytes;
    if (targetFramework() != "any")
      kept += static_cast<uint64_t>(kFrameworkFragmentation *
                                    static_cast<double>(request.memoryBytes));
    if (kept >= request.memoryBytes)
      return refuse("the hardware's reserve (" + std::to_string(kept) +
                    " B) keeps all of its " +
                    std::to_string(request.memoryBytes) +
                    " B per device: give --memory or --reserve");
    request.reserveBytes = kept;
    request.memoryBytes -= kept;
  }
  if (!reserve.empty()) {
    std::optional<uint64_t> bytes = trainmem::parseByteSize(reserve);
    if (reserve == "0")
      bytes = 0;
    if (!bytes)
      return refuse("--reserve '" + reserve +
                    "' is not a size (bytes, or with a unit: 2GB, 512MiB)");
    if (*bytes >= request.memoryBytes)
      return refuse("--reserve " + reserve + " keeps all of the " +
                    std::to_string(request.memoryBytes) +
                    " B per device: nothing is left to plan");
    request.reserveBytes = *bytes;
    request.memoryBytes -= *bytes;
  }
  request.exact = exact;
  if (!(numericsMargin >= 0.0) || !std::isfinite(numericsMargin))
    return refuse("--numerics-margin must be a fraction >= 0, got " +
                  shortestNumber(numericsMargin.getValue()));
  request.numericsMargin = numericsMargin;
  if (failed(fillOptimizers(request, deepSpeed)))
    return failure();
  if (failed(fillSearchSpace(request, deepSpeed)))
    return failure();
  if (top < 0)
    return refuse("--top must be a count of candidates (1 or more), got " +
                  llvm::Twine(top.getValue()));
  if (llvm::Error error = completePlanRequest(request))
    return refuse(llvm::toString(std::move(error)));
  return restrictToTarget(request);
}

/// --emit json: each candidate shown with its table number (#, from 1);
/// "best" is one.
static int printJson(const PlanRequest &request, const PlanResult &result) {
  llvm::json::Array candidates;
  for (size_t i : shownCandidates(result, /*table=*/false)) {
    llvm::json::Object candidate = candidateJson(result.candidates[i], request);
    candidate["number"] = static_cast<int64_t>(i + 1);
    candidates.push_back(std::move(candidate));
  }
  llvm::json::Object out{{"model", request.model.name},
                         {"layers", request.model.layers},
                         {"seq", request.model.seq},
                         {"dtype", request.model.dtype},
                         {"global_batch", request.globalBatch},
                         {"ranks", request.ranks},
                         {"memory_bytes", request.memoryBytes},
                         {"reserve_bytes", request.reserveBytes},
                         {"hardware", request.hardware.name},
                         {"candidates", std::move(candidates)}};
  if (result.best)
    out["best"] = static_cast<int64_t>(*result.best + 1);
  else
    out["nothing_fits"] = result.nothingFits;
  if (!request.wholeModelReason.empty())
    out["whole_model"] = request.wholeModelReason;
  if (!result.escalatedTensorParallel.empty())
    out["escalated_tensor_parallel"] =
        llvm::json::Array(result.escalatedTensorParallel);
  if (result.escalatedOffloadActivations)
    out["escalated_offload_activations"] = true;
  if (result.escalatedSixteenBitSums)
    out["escalated_accumulate_dtype"] =
        accumDtypeName(sixteenBitGradients(request));
  if (!result.escalatedContextParallel.empty())
    out["escalated_context_parallel"] =
        llvm::json::Array(result.escalatedContextParallel);
  writeJson(llvm::outs(), llvm::json::Value(std::move(out)));
  llvm::outs() << "\n";
  return result.best ? 0 : 1;
}

/// Group sizes as a note lists them: "2, 4, 8".
static std::string joinSizes(ArrayRef<int64_t> sizes) {
  return llvm::join(
      llvm::map_range(sizes, [](int64_t n) { return std::to_string(n); }),
      ", ");
}

/// "{what the plan may use} per device", with the reserve kept out.
static std::string perDevice(const PlanRequest &request) {
  std::string text = gb(request.memoryBytes) + " " + unitName + " per device";
  if (request.reserveBytes)
    text += llvm::formatv(" (of {0} {1}, less a {2} {1} reserve)",
                          gb(request.memoryBytes + request.reserveBytes),
                          unitName, gb(request.reserveBytes))
                .str();
  return text;
}

/// --emit table: what was planned, then the candidates.
static void printHeaderAndTable(llvm::raw_ostream &os,
                                const PlanRequest &request,
                                const PlanResult &result) {
  if (request.module)
    os << llvm::formatv(
        "trainmem-plan: {0} ({10} layers, seq {1}, batch {2} per rank), "
        "global batch {3} on {4} rank(s), {5}, {6} ({7:F1} "
        "TFLOP/s dense, {8:P0} achievable){11}\n",
        request.model.name, request.model.seq, request.model.batch,
        request.globalBatch, request.ranks, perDevice(request),
        request.hardware.name, request.hardware.peakFlops / 1e12,
        request.hardware.achievableFraction, unitName, request.model.layers,
        request.exact ? ", every candidate compiled whole" : "");
  else
    os << llvm::formatv(
        "trainmem-plan: {0} ({1} layers, seq {2}, {3}), global batch {4} on "
        "{5} rank(s), {6}, {7} ({8:F1} TFLOP/s dense, {9:P0} "
        "achievable){10}\n",
        request.model.name, request.model.layers, request.model.seq,
        request.model.dtype, request.globalBatch, request.ranks,
        perDevice(request), request.hardware.name,
        request.hardware.peakFlops / 1e12, request.hardware.achievableFraction,
        request.exact ? ", every candidate compiled whole" : "", unitName);
  printTable(os, request, result);
}

/// A config of --from-deepspeed that does not fit: the nearest config
/// DeepSpeed itself can run that fits (the fewest of micro-batch, ZeRO
/// stage, activation checkpointing and optimizer offload changed; the
/// fastest of those), as words.
static std::string nearestDeepSpeedChange(MLIRContext &context,
                                          const PlanRequest &request,
                                          const PlanCandidate &config) {
  PlanRequest wider = request;
  wider.microBatches.clear();
  wider.remats = {PlanRemat::none, PlanRemat::full};
  wider.stages.clear();
  wider.offloads = {PlanOffload::none, PlanOffload::statesAndUpdate};
  if (llvm::Error error = completePlanRequest(wider))
    return "no other config searched: " + llvm::toString(std::move(error));
  PlanResult around = plan(context, wider);
  auto changes = [&](const PlanCandidate &c) {
    std::vector<std::string> changed;
    if (c.microBatch != config.microBatch)
      changed.push_back(llvm::formatv("train_micro_batch_size_per_gpu {0} -> "
                                      "{1} (gradient_accumulation_steps {2})",
                                      config.microBatch, c.microBatch,
                                      c.accumulation));
    if (c.stage != config.stage)
      changed.push_back(llvm::formatv("zero_optimization.stage {0} -> {1}",
                                      config.stage, c.stage));
    if (c.remat != config.remat)
      changed.push_back(c.remat == PlanRemat::full
                            ? "activation checkpointing on"
                            : "activation checkpointing off");
    if (c.offload != config.offload)
      changed.push_back(c.offload == PlanOffload::none
                            ? "no optimizer offload"
                            : "offload_optimizer to cpu");
    return changed;
  };
  const PlanCandidate *nearest = nullptr;
  size_t fewest = SIZE_MAX;
  for (const PlanCandidate &c : around.candidates) {
    if (!c.fits)
      continue;
    size_t n = changes(c).size();
    if (n < fewest ||
        (n == fewest && c.tokensPerSecond > nearest->tokensPerSecond)) {
      nearest = &c;
      fewest = n;
    }
  }
  if (!nearest)
    return "no config DeepSpeed can run (micro-batch, ZeRO stage, "
           "activation checkpointing, optimizer offload) fits either";
  return llvm::formatv("the nearest config DeepSpeed can run that fits: {0} "
                       "(peak {1} {3}, predicted {2:F3} {4} per step; "
                       "trainmem-plan without --from-deepspeed searches "
                       "every plan)",
                       llvm::join(changes(*nearest), ", "),
                       gb(nearest->measure.arena),
                       nearest->stepSeconds / unitSeconds, unitName,
                       secondsName)
      .str();
}

/// What of `c` changes the training's numerics.
static std::string numericsOf(const PlanRequest &request,
                              const PlanCandidate &c) {
  std::vector<std::string> what;
  if (c.eightBit)
    what.push_back("8-bit state");
  if (c.optimizer != request.optimizers.front())
    what.push_back(c.optimizer + " instead of " + request.optimizers.front());
  if (c.releaseGradients)
    what.push_back("gradient release without clipping");
  if (c.sumDtype != AccumDtype::f32)
    what.push_back("gradients summed in " + accumDtypeName(c.sumDtype).str());
  return llvm::join(what, ", ");
}

/// Says, on stderr, when the best changes the numerics and why, and which
/// faster row that changes them was passed over.
static void noteNumerics(const PlanRequest &request, const PlanResult &result) {
  if (!result.best)
    return;
  const PlanCandidate &best = result.candidates[*result.best];
  const PlanCandidate *keeping = nullptr, *faster = nullptr;
  for (const PlanCandidate &c : result.candidates) {
    if (!c.fits)
      continue;
    if (!c.changesNumerics &&
        (!keeping || c.tokensPerSecond > keeping->tokensPerSecond))
      keeping = &c;
    if (c.changesNumerics && c.tokensPerSecond > best.tokensPerSecond &&
        (!faster || c.tokensPerSecond > faster->tokensPerSecond))
      faster = &c;
  }
  auto number = [&](const PlanCandidate *c) {
    return c - result.candidates.data() + 1;
  };
  if (best.changesNumerics)
    llvm::errs() << llvm::formatv(
        "trainmem-plan: note: the best changes the training's numerics "
        "({0}): {1}\n",
        numericsOf(request, best),
        keeping ? llvm::formatv("predicted {0:F1}% faster than #{1}, the "
                                "fastest that keeps them (--numerics-margin "
                                "{2})",
                                100.0 * (best.tokensPerSecond /
                                             keeping->tokensPerSecond -
                                         1.0),
                                number(keeping), request.numericsMargin)
                          .str()
                : std::string("nothing that keeps them fits"));
  else if (faster)
    llvm::errs() << llvm::formatv(
        "trainmem-plan: note: #{0} ({1}) is predicted {2:F1}% faster but "
        "changes the training's numerics, within --numerics-margin {3}: "
        "not chosen\n",
        number(faster), numericsOf(request, *faster),
        100.0 * (faster->tokensPerSecond / best.tokensPerSecond - 1.0),
        request.numericsMargin);
}

/// The best candidate as --emit asks: explained under the table, as a
/// pass pipeline, or as a DeepSpeed config.
static LogicalResult printBestAs(MLIRContext &context, llvm::raw_ostream &os,
                                 const PlanRequest &request,
                                 const PlanResult &result) {
  const PlanCandidate &best = result.candidates[*result.best];
  // An export trains as the printed run does (the recipe's values), or is
  // refused for what its framework cannot express.
  PlanRecipe recipe;
  if (emit == "megatron-args" || emit == "deepspeed-json") {
    llvm::Expected<PlanRecipe> resolved =
        resolveRecipe(context, best.autodiffOptions());
    if (!resolved)
      return refuse(llvm::toString(resolved.takeError()));
    recipe = *resolved;
    bool megatron = emit == "megatron-args";
    std::vector<std::string> reasons =
        megatron ? megatronCannotExpress(best, recipe)
                 : deepSpeedCannotExpress(best, recipe);
    if (!reasons.empty())
      return refuse(llvm::formatv(
          "--emit {0}: the best (#{1}, {2}) has what {3} cannot express: "
          "{4}; --target {5} searches only what {3} runs",
          emit.getValue(), *result.best + 1, best.describe(),
          megatron ? "Megatron-LM" : "DeepSpeed", llvm::join(reasons, "; "),
          megatron ? "megatron" : "deepspeed"));
  }
  if (emit == "table") {
    printBest(os, request, best, *result.best);
  } else if (emit == "pipeline") {
    os << "builtin.module("
       << best.passPipeline(request.ranks, request.memoryBytes) << ")\n";
  } else {
    bool megatron = emit == "megatron-args";
    std::vector<std::string> notes;
    if (megatron) {
      std::vector<std::string> args =
          toMegatronArguments(best, request, recipe, notes);
      llvm::interleave(args, os, " ");
    } else {
      writeJson(os, llvm::json::Value(
                        toDeepSpeed(best, request, recipe, notes)));
    }
    os << "\n";
    for (const std::string &note : notes)
      llvm::errs() << "trainmem-plan: note: " << note << "\n";
  }
  return success();
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  mainExecutable = llvm::sys::fs::getMainExecutable(
      argv[0], reinterpret_cast<void *>(&traceAgain));
  cl::HideUnrelatedOptions(category);
  mlir::train::registerDebugOptions();
  cl::ParseCommandLineOptions(
      argc, argv,
      "trainmem-plan: the training configuration that fits a memory budget\n");

  if ((recalibrate || calibration.getNumOccurrences()) &&
      hardwareName != "native")
    return fail(std::string(recalibrate ? "--recalibrate" : "--calibration") +
                " measures --hardware native (not '" + hardwareName + "')");
  if (calibration != "full" && calibration != "quick")
    return fail("--calibration is full or quick, not '" + calibration + "'");
  CalibrationOptions calibrationOptions;
  calibrationOptions.quick = calibration == "quick";
  SmallString<256> runTool(llvm::sys::path::parent_path(mainExecutable));
  llvm::sys::path::append(runTool, "trainmem-run");
  calibrationOptions.runTool = runTool.str().str();
  llvm::Expected<Hardware> hardware =
      hardwareName == "native"
          ? Hardware(loadNativeHardware(calibrationOptions, recalibrate,
                                        llvm::errs()))
          : loadHardware(hardwareName);
  if (!hardware)
    return fail(llvm::toString(hardware.takeError()));
  if (emit != "table" && emit != "pipeline" && emit != "deepspeed-json" &&
      emit != "megatron-args" && emit != "json")
    return fail("--emit must be table, pipeline, deepspeed-json, "
                "megatron-args or json, not '" +
                emit + "'");
  // More devices than any cluster has is a typo, not a plan (the
  // checkpoint's limit on ranks).
  constexpr long long kMaxRanks = 1LL << 20;
  if (ranks < 1 || ranks > kMaxRanks)
    return fail("--ranks must be from 1 to " + llvm::Twine(kMaxRanks) +
                ", got " + llvm::Twine(ranks.getValue()));
  std::optional<DeepSpeedPlan> deepSpeed;
  if (failed(readDeepSpeedFile(deepSpeed)))
    return 1;
  if (modelName.empty() && inputFile.empty()) {
    if (deepSpeed && emit == "pipeline") {
      llvm::outs() << "builtin.module("
                   << deepSpeed->candidate.passPipeline(ranks, 0) << ")\n";
      return 0;
    }
    return fail("--model is required (a preset: trainmem-model "
                "--list-presets), or --input FILE.mlir (a forward + loss "
                "module: trainmem-import's)");
  }
  DialectRegistry registry;
  registry.insert<TrainDialect, func::FuncDialect, arith::ArithDialect,
                  tensor::TensorDialect, shard::ShardDialect>();
  registerShardExternalModels(registry);
  registerTrainPasses();
  registerTrainPipelines();
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  OwningOpRef<ModuleOp> moduleFile;
  std::optional<ModelConfig> model;
  PlanRequest request;
  if (failed(loadModel(context, deepSpeed, moduleFile, model)) ||
      failed(
          fillRequest(request, *model, moduleFile.get(), *hardware, deepSpeed)))
    return 1;
  // A recipe train-autodiff refuses is said once, before any candidate is
  // compiled with it.
  for (const std::string &optimizer : request.optimizers)
    if (llvm::Expected<PlanRecipe> resolved = resolveRecipe(
            context, autodiffOptionsFor(request.recipe, optimizer, false));
        !resolved)
      return fail(llvm::toString(resolved.takeError()));

  if (!request.wholeModelReason.empty())
    llvm::errs() << "trainmem-plan: note: " << request.model.name << ": "
                 << request.wholeModelReason << "\n";
  PlanResult result = plan(context, request);
  chooseUnits(result);
  if (deepSpeed && !result.best)
    result.nothingFits +=
        "; " + nearestDeepSpeedChange(context, request, deepSpeed->candidate);
  llvm::raw_ostream &os = llvm::outs();
  if (!result.escalatedTensorParallel.empty())
    llvm::errs() << "trainmem-plan: note: nothing fits with t = 1; searched "
                    "tensor parallelism t = "
                 << joinSizes(result.escalatedTensorParallel)
                 << " too (--tensor-parallel 1 searches t = 1 only)\n";
  if (result.escalatedOffloadActivations)
    llvm::errs() << "trainmem-plan: note: nothing fits with the activations "
                    "on the device; searched activation offload too "
                    "(--offload-activations off searches without it only)\n";
  // In the order the planner escalates: t, activation offload, 16-bit
  // sums, context parallelism.
  if (result.escalatedSixteenBitSums)
    llvm::errs() << "trainmem-plan: note: nothing fits with f32 gradient "
                    "sums; searched sums in "
                 << accumDtypeName(sixteenBitGradients(request))
                 << " too (--accumulate-dtype f32 searches f32 only)\n";
  if (!result.escalatedContextParallel.empty())
    llvm::errs() << "trainmem-plan: note: nothing fits with each sequence "
                    "on one rank; searched context parallelism c = "
                 << joinSizes(result.escalatedContextParallel)
                 << " too (--context-parallel 1 searches c = 1 only)\n";
  noteNumerics(request, result);
  if (emit == "json")
    return printJson(request, result);
  if (emit == "table")
    printHeaderAndTable(os, request, result);
  if (!result.best) {
    if (emit == "table")
      os << result.nothingFits << "\n";
    os.flush();
    return fail(result.nothingFits);
  }
  return failed(printBestAs(context, os, request, result)) ? 1 : 0;
}
