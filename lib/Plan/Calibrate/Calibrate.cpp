//===- Calibrate.cpp - this machine's figures, measured -------------------===//
//
// The workloads are small steps of the model families the planner builds
// (GPT: LayerNorm, GELU, learned positions; Llama: RMSNorm, SiLU, RoPE,
// grouped-query attention), in f32 and bf16, with micro-batches of one and
// several sequences so that the products come in the shapes a micro-batch
// search makes, fused attention and element-wise ops, 8-bit state, Lion and
// an accumulation loop's sums. Each runs one step to warm up and two
// profiled.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Plan/Calibrate.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"
#include "trainmem/Dialect/Train/Transforms/Pipelines.h"
#include "trainmem/Model/ModelBuilder.h"
#include "trainmem/Plan/Hardware.h"
#include "trainmem/Plan/TimeModel.h"
#include "trainmem/Run/Session.h"
#include "trainmem/Run/Step.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Program.h"
#include "llvm/ADT/ScopeExit.h"

#include <array>
#include <chrono>
#include <cmath>
#include <ctime>
#include <map>
#include <thread>
#include <unistd.h>

namespace mlir {
namespace train {

namespace {

llvm::Error calibrationError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 message.str());
}

/// One step measured: a model and the trainmem-run options it runs with.
struct Workload {
  ModelConfig config;
  bool fuse = false, eightBit = false;
  std::string optimizer;
  int64_t accumulation = 1;
};

Workload workload(ModelConfig config, bool fuse = false, bool eightBit = false,
                  std::string optimizer = "", int64_t accumulation = 1) {
  return {std::move(config), fuse, eightBit, std::move(optimizer),
          accumulation};
}

ModelConfig gpt(int64_t hidden, int64_t heads, int64_t vocab, int64_t seq,
                int64_t batch, StringRef dtype) {
  ModelConfig config = *getPreset("gpt2-124m");
  config.layers = 1;
  config.hidden = hidden;
  config.heads = heads;
  config.kvHeads = heads;
  config.ffn = 4 * hidden;
  config.vocab = vocab;
  config.positions = seq;
  config.seq = seq;
  config.batch = batch;
  config.dtype = dtype.str();
  return config;
}

ModelConfig llama(int64_t hidden, int64_t heads, int64_t kvHeads,
                  int64_t vocab, int64_t seq, int64_t batch,
                  StringRef dtype) {
  ModelConfig config = *getPreset("llama2-7b");
  config.layers = 1;
  config.hidden = hidden;
  config.heads = heads;
  config.kvHeads = kvHeads;
  config.ffn = 0;
  config.ffn = defaultFfn(config);
  config.vocab = vocab;
  config.seq = seq;
  config.batch = batch;
  config.dtype = dtype.str();
  return config;
}

std::vector<Workload> workloads(bool quick) {
  std::vector<Workload> list;
  if (quick) {
    list.push_back(workload(gpt(256, 4, 8192, 128, 1, "f32")));
    list.push_back(workload(gpt(256, 4, 8192, 128, 8, "f32")));
    list.push_back(workload(gpt(256, 4, 8192, 128, 4, "bf16"), false, false, "lion",
                    /*accumulation=*/2));
    return list;
  }
  // GPT-2's width and vocabulary, one, two and four sequences of 256: the
  // products of a micro-batch search on it, each measured among the
  // kernels of an unfused step (a product right after a fused kernel runs
  // slower here: the runtime's workers still spin while BLAS's start), and
  // fused with two.
  list.push_back(workload(gpt(768, 12, 50257, 256, 1, "bf16")));
  list.push_back(workload(gpt(768, 12, 50257, 256, 2, "bf16")));
  list.push_back(workload(gpt(768, 12, 50257, 256, 4, "bf16")));
  list.push_back(workload(gpt(768, 12, 50257, 256, 2, "bf16"), /*fuse=*/true));
  list.push_back(workload(gpt(256, 4, 8192, 128, 1, "f32")));
  list.push_back(workload(gpt(256, 4, 8192, 128, 8, "f32")));
  // Small shapes: the products and kernels of a model of width 64.
  list.push_back(workload(gpt(64, 4, 512, 64, 2, "f32"), /*fuse=*/true));
  list.push_back(workload(llama(64, 4, 2, 256, 64, 8, "bf16"), /*fuse=*/true));
  list.push_back(workload(gpt(512, 8, 8192, 512, 1, "f32"), /*fuse=*/true,
                  /*eightBit=*/true));
  list.push_back(workload(gpt(256, 4, 8192, 128, 4, "bf16"), false, false, "lion",
                  /*accumulation=*/2));
  list.push_back(workload(llama(512, 8, 4, 8192, 256, 2, "bf16")));
  list.push_back(workload(llama(768, 12, 4, 8192, 128, 1, "bf16"), false,
                  /*eightBit=*/true));
  return list;
}

/// What the calibration keeps of one op of a workload's step.
struct OpSample {
  std::string name;
  double flops = 0, bytes = 0, seconds = 0;
  SmallVector<GemmShape, 1> gemms;
};

/// The op number a location carries ("tmcal.<n>"), looking inside fused
/// and call-site locations.
std::optional<size_t> sampleOf(Location loc) {
  std::optional<size_t> found;
  loc->walk([&](Location inner) {
    if (auto name = dyn_cast<NameLoc>(inner)) {
      StringRef text = name.getName().getValue();
      size_t number;
      if (text.consume_front("tmcal.") && !text.getAsInteger(10, number)) {
        found = number;
        return WalkResult::interrupt();
      }
    }
    return WalkResult::advance();
  });
  return found;
}

/// Runs one workload and appends each op's measured seconds per step.
llvm::Error measureWorkload(MLIRContext &context, const Workload &w,
                            const CalibrationOptions &options,
                            std::vector<OpSample> &samples) {
  std::string why;
  if (!validateConfig(w.config, why))
    return calibrationError("a calibration model: " + why);
  OwningOpRef<ModuleOp> module = buildModel(&context, w.config);
  TrainStepPipelineOptions pipeline;
  pipeline.autodiff = autodiffOptionsFor("", w.optimizer.empty()
                                                 ? "adamw"
                                                 : StringRef(w.optimizer),
                                         /*releaseGradients=*/false);
  pipeline.fuseAttention = w.fuse;
  pipeline.fuseElementwise = w.fuse;
  pipeline.quantize = w.eightBit;
  if (w.accumulation > 1)
    pipeline.gradAccum = "steps=" + std::to_string(w.accumulation);
  if (failed(prepareStep(*module, pipeline)))
    return calibrationError("a calibration step did not compile");
  auto step =
      dyn_cast_or_null<func::FuncOp>(findMarkedStep(*module, "trainmem-plan"));
  if (!step)
    return calibrationError("a calibration step has no training step");
  // Every costed op gets a location of its own number, which the runtime
  // calls lowered from it carry.
  size_t first = samples.size();
  step.walk([&](Operation *op) {
    auto cost = dyn_cast<CostOpInterface>(op);
    if (!cost)
      return;
    OpSample sample;
    sample.name = op->getName().getStringRef().str();
    sample.flops = static_cast<double>(cost.getFlops());
    sample.bytes = static_cast<double>(cost.getBytesRead()) +
                   static_cast<double>(cost.getBytesWritten());
    cost.getGemms(sample.gemms);
    op->setLoc(NameLoc::get(
        StringAttr::get(&context, "tmcal." + std::to_string(samples.size())),
        op->getLoc()));
    samples.push_back(std::move(sample));
  });
  SessionOptions sessionOptions;
  sessionOptions.backend = options.backend;
  sessionOptions.threads =
      options.threads > 0
          ? options.threads
          : std::max<int64_t>(1, std::thread::hardware_concurrency());
  llvm::Expected<std::unique_ptr<Session>> created =
      Session::create(std::move(module), sessionOptions);
  if (!created)
    return created.takeError();
  Session &session = **created;
  if (llvm::Error error = session.start())
    return error;
  if (llvm::Error error = session.initialize())
    return error;
  int64_t count = session.getBatchSize() * session.getSeqLen();
  std::vector<int64_t> tokens(count), targets(count);
  for (int64_t i = 0; i < count; ++i) {
    tokens[i] = (i * 7919) % session.getVocab();
    targets[i] = (i * 104729 + 13) % session.getVocab();
  }
  constexpr int64_t kProfiledSteps = 2;
  for (int64_t s = 0; s <= kProfiledSteps; ++s) {
    if (s == 1 && !session.startProfile())
      return calibrationError("the '" + options.backend +
                              "' backend has no kernel profile");
    llvm::Expected<float> loss = session.runStep(s + 1, tokens, targets);
    if (!loss)
      return loss.takeError();
  }
  std::vector<Location> locations = session.getKernelCallLocations();
  std::vector<double> seconds = session.getProfileByCall();
  if (locations.size() != seconds.size())
    return calibrationError(llvm::formatv(
        "the step made {0} kernel calls where its code has {1}",
        seconds.size(), locations.size()));
  for (size_t i = 0; i < locations.size(); ++i)
    if (std::optional<size_t> sample = sampleOf(locations[i]);
        sample && *sample >= first && *sample < samples.size())
      samples[*sample].seconds += seconds[i] / kProfiledSteps;
  return llvm::Error::success();
}

/// fitOpRate (Calibrate.h): every subset of the three rates solved by its
/// normal equations, the valid one of least weighted error kept.
OpRate fitOpRateOf(ArrayRef<OpTiming> samples) {
  auto featuresOf = [](const OpTiming &s) {
    return std::array<double, 3>{s.flops, s.bytes, 1.0};
  };
  auto error = [&](const std::array<double, 3> &rate) {
    double sum = 0;
    for (const OpTiming &s : samples) {
      std::array<double, 3> x = featuresOf(s);
      double e = rate[0] * x[0] + rate[1] * x[1] + rate[2] * x[2] - s.seconds;
      sum += e * e / s.seconds;
    }
    return sum;
  };
  // A call's fixed time is at most its fastest call's whole time.
  double fastest = INFINITY;
  for (const OpTiming &s : samples)
    fastest = std::min(fastest, s.seconds);
  std::array<double, 3> best{};
  double bestError = INFINITY;
  // A constant alone would say nothing of another size: the per-call
  // time joins a size's rate, never stands for one, and is no more than
  // the fastest call took.
  for (unsigned subset = 1; subset < 8; ++subset) {
    if (subset == 4)
      continue;
    SmallVector<unsigned, 3> used;
    for (unsigned f = 0; f < 3; ++f)
      if (subset & (1u << f))
        used.push_back(f);
    size_t n = used.size();
    // The normal equations (n <= 3), by Gaussian elimination.
    double a[3][4] = {};
    for (const OpTiming &s : samples) {
      std::array<double, 3> x = featuresOf(s);
      double w = 1.0 / s.seconds;
      for (size_t i = 0; i < n; ++i) {
        for (size_t j = 0; j < n; ++j)
          a[i][j] += w * x[used[i]] * x[used[j]];
        a[i][n] += w * x[used[i]] * s.seconds;
      }
    }
    bool singular = false;
    for (size_t i = 0; i < n && !singular; ++i) {
      size_t pivot = i;
      for (size_t r = i + 1; r < n; ++r)
        if (std::fabs(a[r][i]) > std::fabs(a[pivot][i]))
          pivot = r;
      std::swap(a[i], a[pivot]);
      if (!(std::fabs(a[i][i]) > 0)) {
        singular = true;
        break;
      }
      for (size_t r = 0; r < n; ++r) {
        if (r == i)
          continue;
        double factor = a[r][i] / a[i][i];
        for (size_t c = i; c <= n; ++c)
          a[r][c] -= factor * a[i][c];
      }
    }
    if (singular)
      continue;
    std::array<double, 3> rate{};
    bool negative = false;
    for (size_t i = 0; i < n; ++i) {
      rate[used[i]] = a[i][n] / a[i][i];
      negative |= !(rate[used[i]] >= 0) || !std::isfinite(rate[used[i]]);
    }
    if (negative || rate[2] > fastest)
      continue;
    if (double e = error(rate); e < bestError) {
      best = rate;
      bestError = e;
    }
  }
  return {best[0], best[1], best[2]};
}

/// The collectives' bandwidth between two MPI ranks on this machine: a
/// small ZeRO-1 step run by trainmem-run under mpirun with its kernel
/// profile, the bytes rank 0 sends per step over the seconds its
/// collective kernels take per step (the figure the planner divides the
/// bytes sent by). An error says why it could not be measured.
llvm::Expected<double> measureCollectives(MLIRContext &context,
                                          const CalibrationOptions &options,
                                          std::string &how) {
  if (options.runTool.empty() || !llvm::sys::fs::can_execute(options.runTool))
    return calibrationError("no trainmem-run beside trainmem-plan");
  llvm::ErrorOr<std::string> mpirun = llvm::sys::findProgramByName("mpirun");
  if (!mpirun)
    return calibrationError("no mpirun on PATH");
  SmallString<128> dir;
  if (std::error_code ec =
          llvm::sys::fs::createUniqueDirectory("trainmem-calibrate", dir))
    return calibrationError("cannot make a directory: " + ec.message());
  auto path = [&](StringRef name) {
    SmallString<128> file(dir);
    llvm::sys::path::append(file, name);
    return file.str().str();
  };
  std::string model = path("model.mlir"), text = path("text.txt"),
              out = path("out.txt"), err = path("err.txt");
  llvm::scope_exit cleanup([&] {
    for (const std::string &file : {model, text, out, err})
      llvm::sys::fs::remove(file);
    llvm::sys::fs::remove(dir);
  });
  {
    std::error_code ec;
    llvm::raw_fd_ostream modelFile(model, ec);
    if (ec)
      return calibrationError("cannot write '" + model + "': " + ec.message());
    // Two ranks, one sequence each: a ZeRO-1 step of GPT-2's width (a
    // quarter of it for the quick calibration).
    OwningOpRef<ModuleOp> built = buildModel(
        &context, options.quick ? gpt(256, 4, 8192, 64, 2, "f32")
                                : gpt(768, 12, 8192, 128, 2, "f32"));
    built->print(modelFile);
    llvm::raw_fd_ostream textFile(text, ec);
    if (ec)
      return calibrationError("cannot write '" + text + "': " + ec.message());
    for (int line = 0; line < 2048; ++line)
      textFile << "In the beginning the planner measured the machine, line "
               << line << ", and the figures were good.\n";
  }
  SmallVector<StringRef> args = {*mpirun};
  if (getuid() == 0)
    args.push_back("--allow-run-as-root");
  for (StringRef arg :
       {"--oversubscribe", "-np", "2", options.runTool.c_str(), model.c_str(),
        "--data", text.c_str(), "--steps", "3", "--threads", "1",
        "--zero=stage=1", "--profile"})
    args.push_back(arg);
  std::optional<StringRef> redirects[] = {std::nullopt, StringRef(out),
                                          StringRef(err)};
  std::string error;
  constexpr unsigned kSecondsAllowed = 300;
  int status = llvm::sys::ExecuteAndWait(*mpirun, args, std::nullopt,
                                         redirects, kSecondsAllowed, 0,
                                         &error);
  auto readAll = [](const std::string &file) {
    llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
        llvm::MemoryBuffer::getFile(file);
    return buffer ? (*buffer)->getBuffer().str() : std::string();
  };
  std::string stdoutText = readAll(out), stderrText = readAll(err);
  if (status != 0) {
    SmallVector<StringRef> lines;
    StringRef(stderrText).trim().split(lines, '\n');
    return calibrationError(
        "mpirun -np 2 trainmem-run exited " + std::to_string(status) +
        (error.empty() ? "" : " (" + error + ")") +
        (lines.empty() ? "" : ": " + lines.back().str()));
  }
  // Rank 0's bytes sent per step and its collectives' seconds per step.
  double bytes = -1, seconds = 0;
  SmallVector<StringRef> lines;
  StringRef(stderrText).split(lines, '\n');
  for (StringRef line : lines)
    if (line.consume_front("trainmem-run: rank 0: ")) {
      size_t at = line.find(" B per step");
      size_t from = line.rfind(' ', at == StringRef::npos ? 0 : at - 1);
      if (at != StringRef::npos && from != StringRef::npos)
        line.slice(from + 1, at).getAsDouble(bytes);
    }
  lines.clear();
  StringRef(stdoutText).split(lines, '\n');
  for (StringRef line : lines) {
    SmallVector<StringRef> fields;
    line.split(fields, ' ', -1, /*KeepEmpty=*/false);
    if (fields.size() == 4 &&
        llvm::is_contained({"all_reduce", "reduce_scatter", "all_gather",
                            "all_slice", "broadcast"},
                           fields[0])) {
      double s = 0;
      if (!fields[1].getAsDouble(s))
        seconds += s;
    }
  }
  if (!(bytes > 0) || !(seconds > 0))
    return calibrationError("the run printed no collective traffic and time");
  how = llvm::formatv("collectives measured between 2 MPI ranks: {0} B in "
                      "{1:F6} s per step",
                      static_cast<uint64_t>(bytes), seconds)
            .str();
  return bytes / seconds;
}

std::string hostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || !name[0])
    return "host";
  return name;
}

} // namespace

OpRate fitOpRate(ArrayRef<OpTiming> timings) {
  return fitOpRateOf(timings);
}

llvm::Expected<Hardware> calibrateHardware(const CalibrationOptions &options) {
  DialectRegistry registry;
  registerRunDialects(registry);
  MLIRContext context(registry);
  context.printOpOnDiagnostic(false);
  std::string diagnostics;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diagnostic) {
    diagnostics += diagnostic.str() + "\n";
    return success();
  });
  auto start = std::chrono::steady_clock::now();
  std::vector<OpSample> samples;
  for (const Workload &w : workloads(options.quick)) {
    auto began = std::chrono::steady_clock::now();
    if (llvm::Error error = measureWorkload(context, w, options, samples))
      return calibrationError(
          llvm::toString(std::move(error)) +
          (diagnostics.empty() ? "" : ": ") + StringRef(diagnostics).rtrim());
    if (options.log)
      *options.log << llvm::formatv(
          "trainmem-plan: calibrated: {0} hidden {1}, {2} x {3} tokens, "
          "{4}{5}{6}{7}{8} ({9:F1} s)\n",
          w.config.name, w.config.hidden, w.config.batch, w.config.seq,
          w.config.dtype, w.fuse ? ", fused" : "",
          w.eightBit ? ", 8-bit state" : "",
          w.optimizer.empty() ? "" : ", " + w.optimizer,
          w.accumulation > 1
              ? ", " + std::to_string(w.accumulation) + " micro-batches"
              : "",
          std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                        began)
              .count());
  }

  Hardware h = *getHardwarePreset("cpu");
  h.name = "native";
  // GEMMs: one rate per shape and element type (the mean of its ops').
  std::map<std::tuple<std::string, uint64_t, uint64_t, uint64_t>,
           std::pair<double, double>>
      gemms;
  std::map<std::string, SmallVector<OpTiming>> byName;
  // Ops that never took a kernel call (views of their operand's buffer)
  // take no time.
  std::map<std::string, bool> timed;
  for (const OpSample &s : samples)
    timed[s.name] = timed[s.name] || s.seconds > 0;
  for (const auto &[name, any] : timed)
    if (!any)
      h.opRates[name] = OpRate{};
  for (const OpSample &s : samples) {
    if (s.gemms.size() == 1 && s.seconds > 0) {
      const GemmShape &g = s.gemms.front();
      auto &[flops, seconds] =
          gemms[{gemmDtypeName(g.elementType).str(), g.m, g.n, g.k}];
      flops += static_cast<double>(g.getFlops());
      seconds += s.seconds;
    } else if (s.gemms.empty() && s.seconds > 0) {
      byName[s.name].push_back({s.flops, s.bytes, s.seconds});
    }
  }
  double best = 0;
  for (const auto &[shape, total] : gemms) {
    GemmRate rate{std::get<0>(shape), std::get<1>(shape), std::get<2>(shape),
                  std::get<3>(shape), total.first / total.second};
    best = std::max(best, rate.flopsPerSecond);
    h.gemmRates.push_back(rate);
  }
  for (const auto &[name, list] : byName) {
    OpRate rate = fitOpRate(list);
    h.opRates[name] = rate;
  }
  if (h.gemmRates.empty())
    return calibrationError("no matrix product was measured");
  // The device's headline figures, for what is costed apart from the ops:
  // the fastest product, a sum's bandwidth (the host is the device here).
  h.peakFlops = best;
  h.achievableFraction = 1.0;
  // Ranks on this machine split its cores (trainmem-run under mpirun).
  h.sharedByRanks = true;
  h.hostFlops = best;
  auto add = h.opRates.find("train.add");
  if (add != h.opRates.end() && add->second.secondsPerByte > 0)
    h.memoryBandwidth = 1.0 / add->second.secondsPerByte;
  h.hostBandwidth = h.memoryBandwidth;
  long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && pageSize > 0)
    h.memoryBytes = static_cast<uint64_t>(pages) *
                    static_cast<uint64_t>(pageSize);
  // The host arena is the same memory.
  h.hostMemoryBytes = h.memoryBytes;
  // Collectives between local ranks, where MPI can run them.
  std::string collectives;
  llvm::Expected<double> interconnect =
      measureCollectives(context, options, collectives);
  if (interconnect) {
    h.interconnectBandwidth = *interconnect;
  } else {
    collectives = "collectives not measured (" +
                  llvm::toString(interconnect.takeError()) +
                  "; the cpu preset's interconnect)";
    if (options.log)
      *options.log << "trainmem-plan: warning: --hardware native: " +
                          collectives + "\n";
  }
  if (options.log && interconnect)
    *options.log << "trainmem-plan: calibrated: " << collectives << "\n";
  double took = std::chrono::duration<double>(
                    std::chrono::steady_clock::now() - start)
                    .count();
  std::time_t now = std::time(nullptr);
  char date[32] = {};
  std::strftime(date, sizeof(date), "%Y-%m-%d", std::gmtime(&now));
  h.source = llvm::formatv("calibrated{5} on {0} ({1} backend, {2} threads) "
                           "on {3} in {4:F1} s; {6}",
                           hostName(), options.backend,
                           options.threads > 0
                               ? options.threads
                               : static_cast<int64_t>(
                                     std::thread::hardware_concurrency()),
                           date, took, options.quick ? " (quick)" : "",
                           collectives)
                 .str();
  return h;
}

std::string nativeHardwarePath(const CalibrationOptions &options) {
  SmallString<256> dir;
  if (std::optional<std::string> explicitDir =
          llvm::sys::Process::GetEnv("TRAINMEM_CACHE_DIR")) {
    dir = *explicitDir;
  } else if (std::optional<std::string> xdg =
                 llvm::sys::Process::GetEnv("XDG_CACHE_HOME");
             xdg && !xdg->empty()) {
    dir = *xdg;
    llvm::sys::path::append(dir, "trainmem");
  } else {
    std::optional<std::string> home = llvm::sys::Process::GetEnv("HOME");
    dir = home ? *home : ".";
    llvm::sys::path::append(dir, ".cache", "trainmem");
  }
  llvm::sys::path::append(dir, "hardware-native-" + hostName() + "-" +
                                   options.backend +
                                   (options.quick ? "-quick" : "") + ".json");
  return dir.str().str();
}

Hardware loadNativeHardware(const CalibrationOptions &options,
                            bool recalibrate, llvm::raw_ostream &log) {
  std::string path = nativeHardwarePath(options);
  if (!recalibrate && llvm::sys::fs::exists(path)) {
    llvm::Expected<Hardware> cached = loadHardware(path);
    if (cached) {
      log << "trainmem-plan: --hardware native: " << path << " ("
          << cached->source << "; --recalibrate measures again)\n";
      return *cached;
    }
    log << "trainmem-plan: warning: " << llvm::toString(cached.takeError())
        << "; measuring again\n";
  }
  log << "trainmem-plan: --hardware native: measuring this machine (once; "
         "cached in "
      << path << ")\n";
  CalibrationOptions logged = options;
  if (!logged.log)
    logged.log = &log;
  llvm::Expected<Hardware> measured = calibrateHardware(logged);
  if (!measured) {
    log << "trainmem-plan: warning: --hardware native: the calibration "
           "could not run ("
        << llvm::toString(measured.takeError())
        << "); planning with the cpu preset instead\n";
    return *getHardwarePreset("cpu");
  }
  std::error_code ec =
      llvm::sys::fs::create_directories(llvm::sys::path::parent_path(path));
  if (!ec) {
    llvm::raw_fd_ostream file(path, ec);
    if (!ec) {
      file << printHardwareJson(*measured);
      file.close();
      ec = file.error();
    }
  }
  if (ec)
    log << "trainmem-plan: warning: --hardware native: cannot cache the "
           "figures in '"
        << path << "': " << ec.message()
        << " (measured again next time)\n";
  else
    log << "trainmem-plan: --hardware native: " << measured->source
        << "; cached in " << path << "\n";
  return *measured;
}

} // namespace train
} // namespace mlir
