//===- trainmem-run.cpp - train a model step for real ---------------------===//
//
//   trainmem-run step.mlir --data FILE --steps N [--seed S] [--threads T]
//                [--save DIR] [--resume DIR] [--backend cpu|interpret]
//
// Compiles the step (train-autodiff when given a forward + loss, then
// convert-train-to-runtime and the LLVM lowering), JIT-compiles it, and
// trains on byte-level tokens of a text file. Everything random (weights,
// batches) is a function of --seed and the step number only, so a run
// resumed from a checkpoint ends bit-identical to one that never stopped.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Conversion/Passes.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"
#include "trainmem/Evaluator/Evaluator.h"
#include "trainmem/Run/Step.h"
#include "trainmem/Support/DynamicMap.h"
#include "trainmem/Support/Philox.h"
#include "trainmem-runtime/Runtime.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"
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
#include <cassert>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <limits>
#include <fcntl.h>
#include <map>
#include <thread>
#include <unistd.h>

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
                                    cl::desc("cpu, or interpret (reference evaluator)"),
                                    cl::init("cpu"), cl::cat(category));
static cl::opt<std::string>
    autodiffOptions("autodiff-options",
                    cl::desc("train-autodiff options for a forward + loss "
                             "input"),
                    cl::init("lr=3e-3 weight-decay=0.0 clip-norm=1.0"),
                    cl::cat(category));
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

/// Set by SIGINT/SIGTERM; the loop checkpoints at the next step boundary
/// and exits non-zero.
static volatile std::sig_atomic_t stopSignal = 0;
static void onStopSignal(int signal) { stopSignal = signal; }

static int fail(const llvm::Twine &message) {
  llvm::errs() << "trainmem-run: error: " << message << "\n";
  return 1;
}

//===----------------------------------------------------------------------===//
// Deterministic randomness
//===----------------------------------------------------------------------===//

/// 64 random bits of stream `stream` at `index`, from Philox keyed by seed.
static uint64_t random64(uint64_t streamSeed, uint64_t stream,
                         uint64_t index) {
  uint64_t lo = trainmem::philoxWord(streamSeed, stream, 2 * index);
  uint64_t hi = trainmem::philoxWord(streamSeed, stream, 2 * index + 1);
  return (hi << 32) | lo;
}

/// Standard normal by Box-Muller.
static double normal(uint64_t streamSeed, uint64_t stream, uint64_t index) {
  double u1 = (static_cast<double>(random64(streamSeed, stream, 2 * index) >> 11) + 1.0) /
              9007199254740993.0;
  double u2 = static_cast<double>(random64(streamSeed, stream, 2 * index + 1) >> 11) /
              9007199254740992.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

/// Initial values of a parameter from its #train.init (the model builder
/// writes the architecture's reference: norm gains 1, biases 0, matrices
/// N(0, 0.02), GPT's residual projections N(0, 0.02 / sqrt(2 · layers))).
static std::vector<float> initialValues(const TensorSlot &slot,
                                        unsigned paramIndex) {
  std::vector<float> values(slot.numElements(), 0.0f);
  switch (*slot.init) {
  case InitKind::zeros:
    break;
  case InitKind::ones:
    std::fill(values.begin(), values.end(), 1.0f);
    break;
  case InitKind::normal:
    for (size_t i = 0; i < values.size(); ++i)
      values[i] = static_cast<float>(slot.initStd *
                                     normal(seed, 1000 + paramIndex, i));
    break;
  }
  return values;
}

//===----------------------------------------------------------------------===//
// Data
//===----------------------------------------------------------------------===//

struct Corpus {
  std::string bytes;

  /// tokens[b][s] = bytes[start_b + s], targets = the next byte, with
  /// start_b drawn from (seed, step, b).
  void batch(int64_t step, int64_t batchSize, int64_t seqLen,
             std::vector<int64_t> &tokens, std::vector<int64_t> &targets) const {
    uint64_t span = bytes.size() - static_cast<uint64_t>(seqLen);
    tokens.resize(batchSize * seqLen);
    targets.resize(batchSize * seqLen);
    for (int64_t b = 0; b < batchSize; ++b) {
      uint64_t start = random64(seed, 2000000 + step, b) % span;
      for (int64_t s = 0; s < seqLen; ++s) {
        tokens[b * seqLen + s] = static_cast<unsigned char>(bytes[start + s]);
        targets[b * seqLen + s] =
            static_cast<unsigned char>(bytes[start + s + 1]);
      }
    }
  }
};

//===----------------------------------------------------------------------===//
// State: the arena (cpu) or host tensors (interpret)
//===----------------------------------------------------------------------===//

/// The bytes of a tensor as the arena holds it.
using Bytes = std::vector<uint8_t>;

static Bytes floatBytes(const std::vector<float> &values) {
  Bytes bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

/// The persistent state of a run, addressed by (role, key) and held as the
/// bytes of each tensor (f32 params and state, i8 codes of 8-bit state).
class State {
public:
  virtual ~State() = default;
  virtual void write(const TensorSlot &slot, const Bytes &bytes) = 0;
  virtual Bytes read(const TensorSlot &slot) const = 0;
};

class ArenaState : public State {
public:
  explicit ArenaState(tmrt_context *ctx) : ctx(ctx) {}
  void write(const TensorSlot &slot, const Bytes &bytes) override {
    assert(bytes.size() == slot.bytes && "state tensor of the wrong size");
    std::memcpy(tmrt_arena_base(ctx) + slot.offset, bytes.data(), slot.bytes);
    tmrt_arena_touch(ctx, slot.offset, slot.bytes);
  }
  Bytes read(const TensorSlot &slot) const override {
    Bytes bytes(slot.bytes);
    std::memcpy(bytes.data(), tmrt_arena_base(ctx) + slot.offset, slot.bytes);
    return bytes;
  }

private:
  tmrt_context *ctx;
};

class HostState : public State {
public:
  void write(const TensorSlot &slot, const Bytes &bytes) override {
    tensors[slot.role + ":" + slot.key] = bytes;
  }
  Bytes read(const TensorSlot &slot) const override {
    return tensors.at(slot.role + ":" + slot.key);
  }
  std::map<std::string, Bytes> tensors;
};

/// A state tensor as the interpreter takes it: i8 codes as integers 0..255.
static RefTensor toRefTensor(const TensorSlot &slot, const Bytes &bytes) {
  std::vector<int64_t> shape(slot.shape.begin(), slot.shape.end());
  if (slot.dtype == "i8")
    return RefTensor::ofInts(shape, std::vector<int64_t>(bytes.begin(), bytes.end()));
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return RefTensor::ofFloats(shape, std::move(values));
}

static Bytes fromRefTensor(const TensorSlot &slot, const RefTensor &value) {
  if (slot.dtype == "i8") {
    Bytes bytes(value.ints.size());
    for (size_t i = 0; i < bytes.size(); ++i)
      bytes[i] = static_cast<uint8_t>(value.ints[i]);
    return bytes;
  }
  return floatBytes(value.floats);
}

static bool isState(const TensorSlot &slot) {
  return slot.role == "param" || slot.role == "optimizer_state";
}

//===----------------------------------------------------------------------===//
// Checkpoints
//===----------------------------------------------------------------------===//

// Version 02 adds the run's seed and the fingerprint of its data after the
// step; version 01 checkpoints (no seed, no data) still load.
static constexpr char kMagic[8] = {'T', 'M', 'C', 'K', 'P', 'T', '0', '2'};
static constexpr char kMagicV1[8] = {'T', 'M', 'C', 'K', 'P', 'T', '0', '1'};

static uint64_t fnv1a(StringRef data) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : data)
    hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

static void appendU64(std::string &out, uint64_t value) {
  out.append(reinterpret_cast<const char *>(&value), 8);
}
static void appendString(std::string &out, const std::string &value) {
  appendU64(out, value.size());
  out += value;
}

/// What a run trains on besides its state: resuming with other values
/// breaks the promise that a resumed run equals one that never stopped.
struct RunIdentity {
  int64_t seed = 0;
  uint64_t dataBytes = 0;
  uint64_t dataHash = 0;
};

/// Bytes per element of the dtypes a checkpoint may hold.
static std::optional<uint64_t> dtypeBytes(StringRef dtype) {
  return llvm::StringSwitch<std::optional<uint64_t>>(dtype)
      .Cases({"f32", "i32"}, 4)
      .Cases({"bf16", "f16"}, 2)
      .Case("i64", 8)
      .Case("i8", 1)
      .Default(std::nullopt);
}

/// Largest step a checkpoint may claim: far beyond any run, far below
/// where step arithmetic (step + 1, the Philox stream of the batch) wraps.
static constexpr uint64_t kMaxStep = uint64_t(1) << 53;

/// Writes params and optimizer state atomically: a temporary file, fsync,
/// rename over the old checkpoint, fsync of the directory.
static bool saveCheckpoint(StringRef dir, int64_t step,
                           const RunIdentity &identity,
                           const std::vector<TensorSlot> &slots,
                           const State &state, std::string &error) {
  if (std::error_code ec = llvm::sys::fs::create_directories(dir)) {
    error = "cannot create '" + dir.str() + "': " + ec.message();
    return false;
  }
  std::string data(kMagic, 8);
  appendU64(data, static_cast<uint64_t>(step));
  appendU64(data, static_cast<uint64_t>(identity.seed));
  appendU64(data, identity.dataBytes);
  appendU64(data, identity.dataHash);
  uint64_t count = 0;
  for (const TensorSlot &slot : slots)
    count += isState(slot);
  appendU64(data, count);
  for (const TensorSlot &slot : slots) {
    if (!isState(slot))
      continue;
    appendString(data, slot.role);
    appendString(data, slot.key);
    appendString(data, slot.dtype);
    appendU64(data, slot.shape.size());
    for (int64_t d : slot.shape)
      appendU64(data, static_cast<uint64_t>(d));
    Bytes bytes = state.read(slot);
    appendU64(data, bytes.size());
    data.append(reinterpret_cast<const char *>(bytes.data()), bytes.size());
  }
  appendU64(data, fnv1a(data));

  std::string path = (dir + "/checkpoint.bin").str();
  std::string temporary = path + ".tmp";
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    error = "cannot write '" + temporary + "': " + std::strerror(errno);
    return false;
  }
  size_t written = 0;
  while (written < data.size()) {
    ssize_t n = ::write(fd, data.data() + written, data.size() - written);
    if (n <= 0) {
      error = "cannot write '" + temporary + "': " + std::strerror(errno);
      ::close(fd);
      ::unlink(temporary.c_str());
      return false;
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0 ||
      ::rename(temporary.c_str(), path.c_str()) != 0) {
    error = "cannot commit '" + path + "': " + std::strerror(errno);
    ::unlink(temporary.c_str());
    return false;
  }
  int dirFd = ::open(dir.str().c_str(), O_RDONLY);
  if (dirFd >= 0) {
    ::fsync(dirFd);
    ::close(dirFd);
  }
  return true;
}

/// Checks that a checkpoint can be written into `dir` before any step runs,
/// so that a bad --save path does not throw a finished run away.
static bool checkSaveDir(StringRef dir, std::string &error) {
  if (std::error_code ec = llvm::sys::fs::create_directories(dir)) {
    error = "cannot create --save directory '" + dir.str() + "': " +
            ec.message();
    return false;
  }
  std::string probe = (dir + "/checkpoint.bin.tmp").str();
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    error = "cannot write into --save directory '" + dir.str() + "': " +
            std::strerror(errno);
    return false;
  }
  ::close(fd);
  ::unlink(probe.c_str());
  return true;
}

/// A checkpoint read and checked completely; nothing of the run's state is
/// touched until every field agrees with the step.
struct Checkpoint {
  int64_t step = 0;
  std::optional<RunIdentity> identity; // absent in version 01
  std::map<std::string, Bytes> tensors;
};

static bool readCheckpoint(StringRef dir, const std::vector<TensorSlot> &slots,
                           Checkpoint &checkpoint, std::string &error) {
  std::string path = (dir + "/checkpoint.bin").str();
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer) {
    error = "cannot read checkpoint '" + path + "': " +
            buffer.getError().message();
    return false;
  }
  StringRef data = (*buffer)->getBuffer();
  auto corrupt = [&](const Twine &why) {
    error = ("checkpoint '" + path + "' is corrupt: " + why).str();
    return false;
  };
  if (data.size() < 16 || (std::memcmp(data.data(), kMagic, 8) != 0 &&
                           std::memcmp(data.data(), kMagicV1, 8) != 0)) {
    error = "'" + path + "' is not a trainmem checkpoint";
    return false;
  }
  bool version1 = std::memcmp(data.data(), kMagicV1, 8) == 0;
  uint64_t stored;
  std::memcpy(&stored, data.data() + data.size() - 8, 8);
  if (data.size() < 24 || fnv1a(data.drop_back(8)) != stored) {
    error = "checkpoint '" + path +
            "' is truncated or corrupt (checksum mismatch)";
    return false;
  }
  StringRef body = data.drop_back(8);
  size_t pos = 8;
  bool truncated = false;
  // Every length is checked against what is left before it is used, so no
  // field can make a read run past the file or a size wrap around.
  auto readU64 = [&]() -> uint64_t {
    if (truncated || body.size() - pos < 8) {
      truncated = true;
      return 0;
    }
    uint64_t value;
    std::memcpy(&value, body.data() + pos, 8);
    pos += 8;
    return value;
  };
  auto readBytes = [&](uint64_t size) -> StringRef {
    if (truncated || size > body.size() - pos) {
      truncated = true;
      return "";
    }
    StringRef value = body.substr(pos, size);
    pos += size;
    return value;
  };
  uint64_t savedStep = readU64();
  if (!truncated && savedStep > kMaxStep)
    return corrupt("its step " + Twine(static_cast<int64_t>(savedStep)) +
                   " is negative or absurd");
  if (!version1) {
    RunIdentity identity;
    identity.seed = static_cast<int64_t>(readU64());
    identity.dataBytes = readU64();
    identity.dataHash = readU64();
    checkpoint.identity = identity;
  }
  uint64_t count = readU64();
  // Each entry takes at least 5 words; a count beyond that is a lie.
  if (!truncated && count > (body.size() - pos) / 40)
    return corrupt("it claims " + Twine(count) + " tensors");
  std::map<std::string, std::string> description;
  for (uint64_t i = 0; i < count && !truncated; ++i) {
    std::string role = readBytes(readU64()).str();
    std::string key = readBytes(readU64()).str();
    std::string dtype = readBytes(readU64()).str();
    uint64_t rank = readU64();
    if (truncated)
      break;
    if (rank > 8)
      return corrupt("tensor '" + key + "' has rank " + Twine(rank));
    std::optional<uint64_t> elementBytes = dtypeBytes(dtype);
    if (!elementBytes)
      return corrupt("tensor '" + key + "' has unknown dtype '" + dtype + "'");
    std::string shape;
    uint64_t expectedBytes = *elementBytes;
    for (uint64_t d = 0; d < rank && !truncated; ++d) {
      uint64_t dim = readU64();
      if (dim > (uint64_t(1) << 40) ||
          (dim && expectedBytes > std::numeric_limits<uint64_t>::max() / dim))
        return corrupt("tensor '" + key + "' has an absurd dimension " +
                       Twine(dim));
      expectedBytes *= dim;
      shape += (d ? "x" : "") + std::to_string(dim);
    }
    uint64_t bytes = readU64();
    if (!truncated && bytes != expectedBytes)
      return corrupt("tensor '" + key + "' holds " + Twine(bytes) +
                     " bytes; " + dtype + "[" + shape + "] needs " +
                     Twine(expectedBytes));
    StringRef values = readBytes(bytes);
    if (truncated)
      break;
    std::string name = role + ":" + key;
    if (checkpoint.tensors.count(name))
      return corrupt("it holds " + role + " '" + key + "' twice");
    checkpoint.tensors[name] = Bytes(values.bytes_begin(), values.bytes_end());
    description[name] = dtype + "[" + shape + "]";
  }
  if (truncated || pos != body.size()) {
    error = "checkpoint '" + path + "' is truncated or has trailing bytes";
    return false;
  }
  // Every state tensor of this step must be there with its shape and type.
  size_t expectedCount = 0;
  for (const TensorSlot &slot : slots) {
    if (!isState(slot))
      continue;
    ++expectedCount;
    std::string name = slot.role + ":" + slot.key;
    std::string shape;
    for (size_t d = 0; d < slot.shape.size(); ++d)
      shape += (d ? "x" : "") + std::to_string(slot.shape[d]);
    std::string expected = slot.dtype + "[" + shape + "]";
    auto it = description.find(name);
    if (it == description.end()) {
      error = "checkpoint '" + path + "' does not match this step: it has no " +
              slot.role + " '" + slot.key + "'";
      return false;
    }
    if (it->second != expected ||
        checkpoint.tensors[name].size() != slot.bytes) {
      error = "checkpoint '" + path + "' does not match this step: " +
              slot.role + " '" + slot.key + "' is " + it->second +
              " there and " + expected + " here";
      return false;
    }
  }
  if (checkpoint.tensors.size() != expectedCount) {
    error = "checkpoint '" + path +
            "' does not match this step: it holds other tensors as well";
    return false;
  }
  checkpoint.step = static_cast<int64_t>(savedStep);
  return true;
}

//===----------------------------------------------------------------------===//
// main
//===----------------------------------------------------------------------===//

static std::string humanBytes(uint64_t bytes) {
  char text[32];
  if (bytes >= (1ull << 30))
    snprintf(text, sizeof(text), "%.2f GiB", bytes / double(1ull << 30));
  else if (bytes >= (1ull << 20))
    snprintf(text, sizeof(text), "%.2f MiB", bytes / double(1ull << 20));
  else
    snprintf(text, sizeof(text), "%.1f KiB", bytes / 1024.0);
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
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(static_cast<int>(args.size()), args.data(),
                              "trainmem-run: trains a compiled step\n"
                              "  --threads=<int>   CPU threads (default: "
                              "all cores)\n");
  if (backend != "cpu" && backend != "interpret")
    return fail("unknown backend '" + backend + "' (expected cpu or interpret)");
  if (steps < 0 || static_cast<uint64_t>(steps) > kMaxStep)
    return fail("--steps must be from 0 to 2^53, got " + llvm::Twine(steps.getValue()));
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
  if (failed(prepareStep(*module, autodiffOptions, rematOptions,
                         gradAccumOptions, quantize)))
    return 1;

  // The tensor-level step stays for the interpreter; the lowered one runs.
  OwningOpRef<ModuleOp> tensorStep = module->clone();
  Operation *markedStep = findMarkedStep(*tensorStep, "trainmem-run");
  if (!markedStep)
    return 1;
  auto stepFunc = dyn_cast<func::FuncOp>(markedStep);
  if (isLoweredStep(markedStep))
    stepFunc = nullptr;
  if (backend == "interpret" && !stepFunc)
    return fail("the interpret backend runs a tensor-level step; this one is "
                "already lowered (give the model, or the step before "
                "convert-train-to-runtime)");
  // The vocabulary: the classes of the step's cross-entropy (the lowered
  // step has none left; the model builder's description says it).
  int64_t vocab = 0;
  if (stepFunc)
    stepFunc.walk([&](CrossEntropyOp op) {
      vocab = op.getLogits().getType().getShape().back();
    });
  if (auto model = (*module)->getAttrOfType<DictionaryAttr>(kModelAttrName))
    if (auto v = model.getAs<IntegerAttr>("vocab"); v && vocab == 0)
      vocab = v.getInt();
  FailureOr<StepLayout> layout = lowerStep(*module);
  if (failed(layout))
    return 1;

  // The runner initializes and checkpoints f32 tensors and 8-bit codes.
  for (const TensorSlot &slot : layout->arguments)
    if (isState(slot) && slot.dtype != "f32" &&
        !(slot.dtype == "i8" && slot.statePart == StatePart::codes))
      return fail(slot.role + " '" + slot.key + "' is " + slot.dtype +
                  "; trainmem-run trains steps whose parameters and f32 "
                  "state are f32 (use --dtype=f32)");

  // Parameters start as their #train.init says (the model builder writes
  // it); without one there is no reference to follow.
  for (const TensorSlot &slot : layout->arguments)
    if (slot.role == "param" && !slot.init)
      return fail("parameter '" + slot.key + "' has no " +
                  kInitAttrName.str() +
                  " (#train.init<zeros|ones|normal, std = S>); models from "
                  "trainmem-model carry one");

  // A step that returns gradients (optimizer=none) updates nothing: training
  // it would run and learn nothing.
  if (llvm::none_of(layout->results,
                    [](const TensorSlot &slot) { return slot.role == "param"; }))
    return fail("the step updates no parameter (built with optimizer=none? "
                "it returns gradients); trainmem-run trains steps with an "
                "optimizer (adamw or sgd)");

  // Data and the step's shapes must agree.
  const TensorSlot *tokensSlot = layout->findArgument("input", "tokens");
  const TensorSlot *targetsSlot = layout->findArgument("input", "targets");
  const TensorSlot *stepSlot = layout->findArgument("input", "step");
  const TensorSlot *lossSlot = layout->findResult("loss");
  if (!tokensSlot || !targetsSlot || !stepSlot || !lossSlot)
    return fail("the step needs 'tokens', 'targets' and 'step' inputs and a "
                "loss result");
  if (tokensSlot->shape.size() != 2 || tokensSlot->shape != targetsSlot->shape)
    return fail("the step's tokens and targets must both be [batch, seq]");
  int64_t batchSize = tokensSlot->shape[0], seqLen = tokensSlot->shape[1];
  if (vocab < 256)
    return fail("the step's vocabulary has " + std::to_string(vocab) +
                " tokens; byte-level data needs 256");
  // A regular file of bounded size: a device (/dev/zero) or a pipe would be
  // read without end.
  llvm::sys::fs::file_status dataStatus;
  if (std::error_code ec = llvm::sys::fs::status(dataFile, dataStatus))
    return fail("cannot read data '" + dataFile + "': " + ec.message());
  if (dataStatus.type() != llvm::sys::fs::file_type::regular_file)
    return fail("data '" + dataFile + "' is not a regular file");
  constexpr uint64_t kMaxDataBytes = uint64_t(16) << 30;
  if (dataStatus.getSize() > kMaxDataBytes)
    return fail("data '" + dataFile + "' has " +
                llvm::Twine(dataStatus.getSize()) +
                " bytes; trainmem-run reads at most 16 GiB");
  auto dataBuffer = llvm::MemoryBuffer::getFile(dataFile);
  if (!dataBuffer)
    return fail("cannot read data '" + dataFile + "': " +
                dataBuffer.getError().message());
  Corpus corpus{(*dataBuffer)->getBuffer().str()};
  RunIdentity identity{seed, corpus.bytes.size(), fnv1a(corpus.bytes)};
  if (static_cast<int64_t>(corpus.bytes.size()) < seqLen + 1)
    return fail("data '" + dataFile + "' has " +
                std::to_string(corpus.bytes.size()) +
                " bytes; one sequence of the step needs " +
                std::to_string(seqLen + 1));

  int64_t threadCount =
      threads > 0 ? threads
                  : std::max<int64_t>(1, std::thread::hardware_concurrency());
  const char *contextError = nullptr;
  tmrt_context *ctx = tmrt_context_create("cpu", threadCount, &contextError);
  if (!ctx)
    return fail(contextError);
  auto destroyContext =
      llvm::make_scope_exit([&] { tmrt_context_destroy(ctx); });
  std::unique_ptr<JitStep> jit;
  std::unique_ptr<State> state;
  if (backend == "cpu") {
    if (tmrt_arena_alloc(ctx, layout->arenaBytes) != 0)
      return fail("cannot allocate the arena of " +
                  std::to_string(layout->arenaBytes) + " bytes (" +
                  humanBytes(layout->arenaBytes) + ")");
    std::string error;
    jit = JitStep::create(*module, error);
    if (!jit)
      return fail("JIT compilation failed: " + error);
    state = std::make_unique<ArenaState>(ctx);
  } else {
    state = std::make_unique<HostState>();
  }

  // Initial state, or the checkpoint's.
  int64_t firstStep = 1;
  if (!resumeDir.empty()) {
    std::string error;
    Checkpoint checkpoint;
    if (!readCheckpoint(resumeDir, layout->arguments, checkpoint, error))
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
    for (const TensorSlot &slot : layout->arguments)
      if (isState(slot))
        state->write(slot, checkpoint.tensors[slot.role + ":" + slot.key]);
    firstStep = checkpoint.step + 1;
  } else {
    unsigned paramIndex = 0;
    std::map<std::string, Bytes> params;
    for (const TensorSlot &slot : layout->arguments)
      if (slot.role == "param") {
        std::vector<float> values = initialValues(slot, paramIndex++);
        // A std too large for f32 would start training from infinities.
        if (!llvm::all_of(values, [](float v) { return std::isfinite(v); }))
          return fail("parameter '" + slot.key + "': its #train.init (std " +
                      std::to_string(slot.initStd) +
                      ") gives values that are not finite in f32");
        params[slot.key] = floatBytes(values);
        state->write(slot, params[slot.key]);
      }
    for (const TensorSlot &slot : layout->arguments) {
      if (!slot.stateKind)
        continue;
      if (*slot.stateKind == StateKind::master) {
        state->write(slot, params[slot.stateParam]);
      } else if (slot.statePart == StatePart::codes) {
        // 8-bit state starts at 0: the code of 0 in its map.
        uint8_t zero = trainmem::zeroCode(
            slot.stateMap == QuantMap::signed_dynamic
                ? trainmem::signedDynamicMap()
                : trainmem::unsignedDynamicMap());
        state->write(slot, Bytes(slot.bytes, zero));
      } else {
        state->write(slot, Bytes(slot.bytes, 0)); // f32 zeros, absmax 0
      }
    }
  }

  bool terminal = llvm::sys::Process::StandardErrIsDisplayed();
  // Where the run writes is checked before the first step.
  if (!saveDir.empty()) {
    std::string error;
    if (!checkSaveDir(saveDir, error))
      return fail(error);
  }
  std::unique_ptr<llvm::raw_fd_ostream> lossFile;
  if (!lossLog.empty()) {
    // Never onto a file the run reads.
    std::vector<std::string> inputs = {dataFile, inputFile};
    if (!resumeDir.empty())
      inputs.push_back(resumeDir + "/checkpoint.bin");
    if (!saveDir.empty())
      inputs.push_back(saveDir + "/checkpoint.bin");
    for (const std::string &input : inputs) {
      bool same = false;
      if (!llvm::sys::fs::equivalent(lossLog, input, same) && same)
        return fail("--loss-log '" + lossLog + "' is '" + input +
                    "', which this run reads or writes; give another file");
    }
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
  llvm::errs() << "trainmem-run: " << backend << " backend, " << threadCount
               << " threads, arena plan " << layout->arenaBytes << " B ("
               << humanBytes(layout->arenaBytes) << "), steps " << firstStep
               << ".." << steps << "\n";

  std::vector<int64_t> tokens, targets;
  double firstLoss = NAN, lastLoss = NAN;
  std::vector<float> losses;
  auto start = std::chrono::steady_clock::now();
  std::vector<double> stepSeconds;
  for (int64_t step = firstStep; step <= steps; ++step) {
    auto stepStart = std::chrono::steady_clock::now();
    corpus.batch(step, batchSize, seqLen, tokens, targets);
    float loss;
    if (backend == "cpu") {
      uint8_t *arena = tmrt_arena_base(ctx);
      auto writeIds = [&](const TensorSlot &slot,
                          const std::vector<int64_t> &ids) {
        for (size_t i = 0; i < ids.size(); ++i) {
          if (slot.dtype == "i32")
            reinterpret_cast<int32_t *>(arena + slot.offset)[i] =
                static_cast<int32_t>(ids[i]);
          else
            reinterpret_cast<int64_t *>(arena + slot.offset)[i] = ids[i];
        }
        tmrt_arena_touch(ctx, slot.offset, slot.bytes);
      };
      writeIds(*tokensSlot, tokens);
      writeIds(*targetsSlot, targets);
      std::memcpy(arena + stepSlot->offset, &step, 8);
      tmrt_arena_touch(ctx, stepSlot->offset, 8);
      jit->run(ctx);
      if (const char *error = tmrt_context_error(ctx))
        return fail(llvm::Twine("step ") + llvm::Twine(step) + ": " + error);
      // State the step could not update in place comes back through its
      // result slot.
      for (const TensorSlot &result : layout->results) {
        if (!isState(result))
          continue;
        const TensorSlot *argument =
            layout->findArgument(result.role, result.key);
        if (argument && argument->offset != result.offset)
          std::memmove(arena + argument->offset, arena + result.offset,
                       result.bytes);
      }
      std::memcpy(&loss, arena + lossSlot->offset, 4);
    } else {
      auto &host = static_cast<HostState &>(*state);
      std::vector<RefTensor> args;
      for (const TensorSlot &slot : layout->arguments) {
        std::vector<int64_t> shape(slot.shape.begin(), slot.shape.end());
        if (slot.role == "input" && slot.key == "tokens")
          args.push_back(RefTensor::ofInts(shape, tokens));
        else if (slot.role == "input" && slot.key == "targets")
          args.push_back(RefTensor::ofInts(shape, targets));
        else if (slot.role == "input" && slot.key == "step")
          args.push_back(RefTensor::ofInts({}, {step}));
        else
          args.push_back(toRefTensor(slot, host.read(slot)));
      }
      FailureOr<SmallVector<RefTensor>> results = evaluate(stepFunc, args);
      if (failed(results))
        return 1;
      for (auto [slot, value] : llvm::zip(layout->results, *results))
        if (isState(slot))
          host.write(slot, fromRefTensor(slot, value));
      loss = (*results)[0].scalarFloat();
    }
    stepSeconds.push_back(std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - stepStart)
                              .count());
    if (std::isnan(firstLoss))
      firstLoss = loss;
    lastLoss = loss;
    losses.push_back(loss);
    if (lossFile) {
      *lossFile << step << " " << llvm::format("%.6f", loss) << "\n";
      lossFile->flush();
    }
    double seconds = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    double tokensPerSecond =
        (step - firstStep + 1) * batchSize * seqLen / std::max(seconds, 1e-9);
    std::string line = llvm::formatv(
        "step {0}/{1}  loss {2:F4}  {3:F0} tok/s  arena plan {4} measured {5}",
        step, steps.getValue(), loss, tokensPerSecond,
        humanBytes(layout->arenaBytes),
        backend == "cpu" ? humanBytes(tmrt_arena_high_water(ctx)) : "-");
    if (terminal) {
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
    if (!saveDir.empty() && (periodic || stopSignal)) {
      std::string error;
      if (!saveCheckpoint(saveDir, step, identity, layout->arguments, *state,
                          error))
        return fail(error);
    }
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

  if (!saveDir.empty()) {
    std::string error;
    if (!saveCheckpoint(saveDir, std::max<int64_t>(steps, firstStep - 1),
                        identity, layout->arguments, *state, error))
      return fail(error);
  }
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
  if (backend == "cpu")
    llvm::outs() << "arena: planned " << layout->arenaBytes
                 << " B, measured peak " << tmrt_arena_high_water(ctx)
                 << " B\n";
  return 0;
}
