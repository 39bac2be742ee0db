//===- Session.cpp - a training run on one backend ------------------------===//
//
// The corpus, the run's state and the session that runs a compiled step
// (Session.h); the checkpoint format is Checkpoint.cpp's.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Run/Session.h"
#include "trainmem-runtime/Runtime.h"
#include "trainmem/Analysis/MemoryAnalysis.h"
#include "trainmem/Dialect/Train/IR/ShardModels.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"
#include "trainmem/Dialect/Train/Transforms/OptimizerRegistry.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Evaluator/Evaluator.h"
#include "trainmem/Support/ByteSize.h"
#include "trainmem/Support/DynamicMap.h"
#include "trainmem/Support/Float16.h"
#include "trainmem/Support/LossScaleUpdate.h"
#include "trainmem/Support/Philox.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Interfaces/CallInterfaces.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cassert>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <functional>
#include <fcntl.h>
#include <sys/file.h>
#include <limits>
#include <unistd.h>

using namespace mlir;
using namespace mlir::train;

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

/// The model builder writes the architecture's reference: norm gains 1,
/// biases 0, matrices N(0, 0.02), GPT's residual projections
/// N(0, 0.02 / sqrt(2 · layers)).
std::vector<float> mlir::train::initialValues(const TensorSlot &slot,
                                              unsigned index, uint64_t seed) {
  std::vector<float> values(slot.numElements(), 0.0f);
  assert(slot.init && "a parameter without #train.init");
  switch (*slot.init) {
  case InitKind::zeros:
    break;
  case InitKind::ones:
    std::fill(values.begin(), values.end(), 1.0f);
    break;
  case InitKind::normal:
    for (size_t i = 0; i < values.size(); ++i)
      values[i] = static_cast<float>(slot.initStd *
                                     normal(seed, 1000 + index, i));
    break;
  }
  return values;
}

//===----------------------------------------------------------------------===//
// Data
//===----------------------------------------------------------------------===//


Corpus::Corpus(std::string text) : bytes(std::move(text)), hash(fnv1a(bytes)) {}

llvm::Expected<Corpus> Corpus::load(StringRef path) {
  // A regular file of bounded size: a device (/dev/zero) or a pipe would be
  // read without end.
  llvm::sys::fs::file_status status;
  if (std::error_code ec = llvm::sys::fs::status(path, status)) {
    return runError("cannot read data '" + path.str() + "': " + ec.message());
  }
  if (status.type() != llvm::sys::fs::file_type::regular_file) {
    return runError("data '" + path.str() + "' is not a regular file");
  }
  constexpr uint64_t kMaxDataBytes = uint64_t(16) << 30;
  if (status.getSize() > kMaxDataBytes) {
    return runError("data '" + path.str() + "' has " +
                    std::to_string(status.getSize()) +
                    " bytes; trainmem-run reads at most 16 GiB");
  }
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer) {
    return runError("cannot read data '" + path.str() +
                    "': " + buffer.getError().message());
  }
  return Corpus((*buffer)->getBuffer().str());
}

void Corpus::batch(uint64_t seed, int64_t step, int64_t batchSize,
                   int64_t seqLen, std::vector<int64_t> &tokens,
                   std::vector<int64_t> &targets, int64_t firstRow) const {
  assert(bytes.size() > static_cast<uint64_t>(seqLen) && "corpus too short");
  uint64_t span = bytes.size() - static_cast<uint64_t>(seqLen);
  tokens.resize(batchSize * seqLen);
  targets.resize(batchSize * seqLen);
  for (int64_t b = 0; b < batchSize; ++b) {
    uint64_t start = random64(seed, 2000000 + step, firstRow + b) % span;
    for (int64_t s = 0; s < seqLen; ++s) {
      tokens[b * seqLen + s] = static_cast<unsigned char>(bytes[start + s]);
      targets[b * seqLen + s] =
          static_cast<unsigned char>(bytes[start + s + 1]);
    }
  }
}

//===----------------------------------------------------------------------===//
// State: the arena (runtime backends) or host tensors (interpret)
//===----------------------------------------------------------------------===//

/// Float values as a tensor of `type` holds them: f32, or bf16/f16
/// rounded to nearest even.
static Bytes floatBytes(Type type, const std::vector<float> &values) {
  if (type.isBF16() || type.isF16()) {
    Bytes bytes(values.size() * 2);
    for (size_t i = 0; i < values.size(); ++i) {
      uint16_t bits = type.isBF16() ? trainmem::bf16BitsFromFloat(values[i])
                                    : trainmem::f16BitsFromFloat(values[i]);
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
    }
    return bytes;
  }
  Bytes bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

/// The values of a float tensor of `type`, widened to f32 (exactly).
static std::vector<float> floatValues(Type type, const Bytes &bytes) {
  if (type.isBF16() || type.isF16()) {
    std::vector<float> values(bytes.size() / 2);
    for (size_t i = 0; i < values.size(); ++i) {
      uint16_t bits;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      values[i] = type.isBF16() ? trainmem::floatFromBF16Bits(bits)
                                : trainmem::floatFromF16Bits(bits);
    }
    return values;
  }
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

namespace mlir {
namespace train {
/// The persistent state of a run, addressed by (role, key) and held as the
/// bytes of each tensor (f32 params and state, i8 codes of 8-bit state).
class State {
public:
  virtual ~State() = default;
  virtual void write(const TensorSlot &slot, const Bytes &bytes) = 0;
  virtual Bytes read(const TensorSlot &slot) const = 0;
};
} // namespace train
} // namespace mlir

namespace {
/// State in the backend's arena, reached through the runtime's copies (the
/// arena may be device memory).
class ArenaState : public State {
public:
  explicit ArenaState(tmrt_context *ctx) : ctx(ctx) {}
  void write(const TensorSlot &slot, const Bytes &bytes) override {
    assert(bytes.size() == slot.bytes && "state tensor of the wrong size");
    int32_t status =
        tmrt_arena_write(ctx, slot.location(), bytes.data(), slot.bytes);
    assert(status == 0 && "a slot outside the arena");
    (void)status;
  }
  Bytes read(const TensorSlot &slot) const override {
    Bytes bytes(slot.bytes);
    int32_t status =
        tmrt_arena_read(ctx, slot.location(), bytes.data(), slot.bytes);
    assert(status == 0 && "a slot outside the arena");
    (void)status;
    return bytes;
  }

private:
  tmrt_context *ctx;
};

class HostState : public State {
public:
  void write(const TensorSlot &slot, const Bytes &bytes) override {
    tensors[slot.stateName()] = bytes;
  }
  Bytes read(const TensorSlot &slot) const override {
    return tensors.at(slot.stateName());
  }
  std::map<std::string, Bytes> tensors;
};
} // namespace

/// A state tensor as the interpreter takes it: i8 codes as integers 0..255.
static RefTensor toRefTensor(const TensorSlot &slot, const Bytes &bytes) {
  std::vector<int64_t> shape(slot.shape.begin(), slot.shape.end());
  if (slot.elementType.isInteger(8))
    return RefTensor::ofInts(shape, std::vector<int64_t>(bytes.begin(), bytes.end()));
  if (slot.elementType.isInteger(64)) {
    std::vector<int64_t> values(bytes.size() / 8);
    std::memcpy(values.data(), bytes.data(), bytes.size());
    return RefTensor::ofInts(shape, std::move(values));
  }
  return RefTensor::ofFloats(shape, floatValues(slot.elementType, bytes));
}

static Bytes fromRefTensor(const TensorSlot &slot, const RefTensor &value) {
  if (slot.elementType.isInteger(64)) {
    Bytes bytes(value.ints.size() * 8);
    std::memcpy(bytes.data(), value.ints.data(), bytes.size());
    return bytes;
  }
  if (slot.elementType.isInteger(8)) {
    Bytes bytes(value.ints.size());
    for (size_t i = 0; i < bytes.size(); ++i)
      bytes[i] = static_cast<uint8_t>(value.ints[i]);
    return bytes;
  }
  return floatBytes(slot.elementType, value.floats);
}

//===----------------------------------------------------------------------===//
// Session
//===----------------------------------------------------------------------===//

Session::~Session() {
  // The JIT's code calls into the context: it goes first.
  jit.reset();
  state.reset();
  if (ctx)
    tmrt_context_destroy(ctx);
}

llvm::Error Session::checkBackend(StringRef backend) {
  if (backend == "interpret")
    return llvm::Error::success();
  int32_t status = tmrt_backend_status(backend.str().c_str());
  if (status > 0)
    return llvm::Error::success();
  std::string built = tmrt_backend_names();
  if (status == 0) {
    return runError("backend '" + backend.str() +
                    "' is not built into this runtime (built: " + built + ")");
  }
  std::string expected;
  for (StringRef name : llvm::split(built, ", "))
    expected += name.str() + " or ";
  return runError("unknown backend '" + backend.str() + "' (expected " +
                  expected + "interpret)");
}

/// The location of each kernel call of a lowered step (in the LLVM
/// dialect), in the order a run makes them: the step's own calls, its
/// parts' as it calls them, a micro-batch loop's body once per iteration
/// (kLoopStepsAttrName on the function that runs the loop).
static std::vector<Location> kernelCallLocations(ModuleOp module) {
  std::vector<Location> locations;
  llvm::StringSet<> kernels;
  for (int64_t k = 0, e = tmrt_profile_kernels(); k < e; ++k)
    kernels.insert((Twine("tmrt_") + tmrt_profile_name(k)).str());
  std::function<void(Operation *)> visit = [&](Operation *function) {
    function->walk([&](CallOpInterface call) {
      auto callee = dyn_cast_if_present<SymbolRefAttr>(
          call.getCallableForCallee().dyn_cast<SymbolRefAttr>());
      if (!callee)
        return;
      StringRef name = callee.getLeafReference().getValue();
      if (kernels.contains(name)) {
        locations.push_back(call->getLoc());
        return;
      }
      Operation *part = SymbolTable::lookupSymbolIn(module, callee);
      if (!part || !part->getNumRegions() || part->getRegion(0).empty())
        return;
      auto steps = part->getAttrOfType<IntegerAttr>(kLoopStepsAttrName);
      for (int64_t i = 0, e = steps ? steps.getInt() : 1; i < e; ++i)
        visit(part);
    });
  };
  if (Operation *step = findMarkedStep(module, "trainmem-run"))
    visit(step);
  return locations;
}

llvm::Expected<std::unique_ptr<Session>>
Session::create(OwningOpRef<ModuleOp> owned, const SessionOptions &options) {
  if (!owned) {
    return runError("no module to run");
  }
  ModuleOp module = *owned;
  if (llvm::Error error = checkBackend(options.backend))
    return std::move(error);
  std::unique_ptr<Session> session(new Session());
  session->options = options;
  bool interpret = options.backend == "interpret";

  Operation *marked = findMarkedStep(module, "trainmem-run");
  if (!marked)
    return runError("");
  auto stepFunc = dyn_cast<func::FuncOp>(marked);
  if (isLoweredStep(marked))
    stepFunc = nullptr;
  session->readRanks(marked, stepFunc);
  if (interpret && !stepFunc) {
    return runError(
        "the interpret backend runs a tensor-level step; this one is "
        "already lowered (give the model, or the step before "
        "convert-train-to-runtime)");
  }
  // The vocabulary: the classes of the step's cross-entropy (the lowered
  // step has none left; the model builder's description says it).
  if (stepFunc) {
    stepFunc.walk([&](CrossEntropyOp op) {
      session->vocab = op.getLogits().getType().getShape().back();
    });
    // A vocabulary-parallel one's: its parts' columns.
    stepFunc.walk([&](CrossEntropyPartOp op) {
      TensorSplitAttr split = op.getSplitAttr();
      session->vocab = op.getLogits().getType().getShape().back() *
                       (split ? split.getParts() : 1);
    });
  }
  if (auto model = module->getAttrOfType<DictionaryAttr>(kModelAttrName))
    if (auto v = model.getAs<IntegerAttr>("vocab"); v && session->vocab == 0)
      session->vocab = v.getInt();
  // The initial loss scale of a loss-scaled step, to report the scale by.
  if (stepFunc)
    stepFunc.walk([&](LossScaleOp op) {
      session->lossScaleInitial = op.getInitial().convertToDouble();
    });

  // The tensor-level step stays for the interpreter; the lowered one runs.
  if (interpret) {
    session->tensorStep = module.clone();
    session->stepFunc = cast<func::FuncOp>(
        findMarkedStep(*session->tensorStep, "trainmem-run"));
    session->hessianFunc = findHessianStep(session->stepFunc);
  }
  // What the step's collectives send per rank, as the analysis counts them,
  // for the runtime's counts to be held against.
  if (stepFunc)
    for (auto &[kind, traffic] : collectiveTrafficOf(stepFunc))
      session->plannedBytesSent =
          addCount(session->plannedBytesSent, traffic.bytes);
  if (stepFunc)
    if (ContextSplitAttr context = getContextSplit(stepFunc))
      session->contextParts = context.getParts();
  FailureOr<StepLayout> layout = lowerStep(module);
  if (failed(layout))
    return runError("");
  session->layout = std::move(*layout);
  for (const TensorSlot &slot : session->layout.arguments)
    session->tensorParts = std::max(session->tensorParts, slot.splitParts);
  if (session->ranks % session->tensorParts != 0)
    return runError("the step splits parameters over " +
                    std::to_string(session->tensorParts) +
                    " ranks, which do not divide its " +
                    std::to_string(session->ranks) + " ranks");
  session->lowered = std::move(owned);
  session->callLocations = kernelCallLocations(*session->lowered);
  if (llvm::Error error = session->checkSlots())
    return std::move(error);
  return std::move(session);
}

/// The slots must be ones this library trains: f32, bf16 or f16 weights
/// with a #train.init, f32 optimizer state or 8-bit codes, an optimizer,
/// [batch, seq] tokens and targets, a step input and a loss.
llvm::Error Session::checkSlots() {
  const StepLayout &slots = layout;
  // The session initializes and checkpoints f32, bf16 and f16 weights,
  // f32 optimizer state and 8-bit codes.
  for (const TensorSlot &slot : slots.arguments) {
    bool weight16 = slot.role == SlotRole::param &&
                    (slot.elementType.isBF16() || slot.elementType.isF16());
    bool lossScale = slot.stateKind == StateKind::loss_scale &&
                     slot.elementType.isInteger(64) && slot.numElements() == 3;
    if (isState(slot) && !slot.elementType.isF32() && !weight16 && !lossScale &&
        !(slot.elementType.isInteger(8) &&
          slot.statePart == StatePart::codes)) {
      return runError(
          slot.roleName().str() + " '" + slot.key + "' is " +
          slot.dtypeName().str() +
          "; trainmem-run trains steps whose weights are f32, bf16 or "
          "f16 and whose optimizer state is f32 or 8-bit codes");
    }
  }
  // Parameters start as their #train.init says (the model builder writes
  // it); without one there is no reference to follow.
  for (const TensorSlot &slot : slots.arguments)
    if (slot.role == SlotRole::param && !slot.init) {
      return runError("parameter '" + slot.key + "' has no " +
                      kInitAttrName.str() +
                      " (#train.init<zeros|ones|normal, std = S>); models from "
                      "trainmem-model carry one");
    }
  // A step that returns gradients (optimizer=none) updates nothing: training
  // it would run and learn nothing.
  if (llvm::none_of(slots.results, [](const TensorSlot &slot) {
        return slot.role == SlotRole::param;
      })) {
    return runError(
        "the step updates no parameter (built with optimizer=none? it "
        "returns gradients); trainmem-run trains steps with an "
        "optimizer (" +
        listOptimizerNames() + ")");
  }
  tokensSlot = slots.findArgument(SlotRole::input, "tokens");
  targetsSlot = slots.findArgument(SlotRole::input, "targets");
  stepSlot = slots.findArgument(SlotRole::input, "step");
  lossSlot = slots.findResult(SlotRole::loss);
  // A pipeline's last stage holds the loss; the others report none.
  bool lossElsewhere =
      pipelineStages > 1 && pipelineStage != pipelineStages - 1;
  if (!tokensSlot || !targetsSlot || !stepSlot ||
      (!lossSlot && !lossElsewhere)) {
    return runError(
        "the step needs 'tokens', 'targets' and 'step' inputs and a "
        "loss result");
  }
  if (tokensSlot->shape.size() != 2 ||
      tokensSlot->shape != targetsSlot->shape) {
    return runError("the step's tokens and targets must both be [batch, seq]");
  }
  batchSize = tokensSlot->shape[0];
  seqLen = tokensSlot->shape[1];
  return checkHessianSlots();
}

/// A Hessian estimate (Sophia's h) needs the Hessian step that refreshes
/// it, and that step takes the step's tokens, step counter and state, the
/// state where the step keeps it.
llvm::Error Session::checkHessianSlots() const {
  bool keepsHessian = llvm::any_of(layout.arguments, [](const TensorSlot &s) {
    return s.stateKind == StateKind::h;
  });
  if (keepsHessian && !layout.hessian)
    return runError("the step keeps a Hessian estimate (optimizer state 'h') "
                    "and the module has no Hessian step that refreshes it "
                    "(a function marked train.hessian_step; "
                    "train-autodiff{optimizer=sophia} builds both)");
  if (!layout.hessian)
    return llvm::Error::success();
  for (const TensorSlot &slot : layout.hessian->arguments) {
    const TensorSlot *same = layout.findArgument(slot.role, slot.key);
    if (slot.role == SlotRole::input) {
      if (slot.key == "targets" || !same || same->bytes != slot.bytes)
        return runError("the Hessian step's input '" + slot.key +
                        "' is not one of the step's");
      continue;
    }
    if (!same || same->offset != slot.offset || same->bytes != slot.bytes)
      return runError("the Hessian step's " + slot.roleName().str() + " '" +
                      slot.key + "' does not lie where the step's does");
  }
  return llvm::Error::success();
}

static Bytes idBytes(const TensorSlot &slot, ArrayRef<int64_t> ids);

/// The evaluator's arguments of a step (or its Hessian step) with `slots`:
/// the batch's tokens and targets, the step counter, the state as `host`
/// holds it.
static std::vector<RefTensor> evaluatorArguments(ArrayRef<TensorSlot> slots,
                                                 const HostState &host,
                                                 int64_t step,
                                                 ArrayRef<int64_t> tokens,
                                                 ArrayRef<int64_t> targets) {
  std::vector<RefTensor> args;
  for (const TensorSlot &slot : slots) {
    std::vector<int64_t> shape(slot.shape.begin(), slot.shape.end());
    if (slot.role == SlotRole::input && slot.key == "tokens")
      args.push_back(RefTensor::ofInts(shape, tokens.vec()));
    else if (slot.role == SlotRole::input && slot.key == "targets")
      args.push_back(RefTensor::ofInts(shape, targets.vec()));
    else if (slot.role == SlotRole::input && slot.key == "step")
      args.push_back(RefTensor::ofInts({}, {step}));
    else
      args.push_back(toRefTensor(slot, host.read(slot)));
  }
  return args;
}

/// State a lowered step could not update in place comes back through its
/// result slot to its argument's.
void Session::copyStateBack(ArrayRef<TensorSlot> results) {
  for (const TensorSlot &result : results) {
    if (!isState(result))
      continue;
    const TensorSlot *argument = layout.findArgument(result.role, result.key);
    if (argument && argument->location() != result.location())
      tmrt_arena_copy(ctx, result.location(), argument->location(),
                      result.bytes);
  }
}

llvm::Expected<float> Session::runHessianStep(int64_t step,
                                              ArrayRef<int64_t> tokens) {
  assert(state && layout.hessian && "a started session with a Hessian step");
  const HessianLayout &h = *layout.hessian;
  float loss = 0;
  const TensorSlot *lossResult = nullptr;
  for (const TensorSlot &slot : h.results)
    if (slot.role == SlotRole::loss)
      lossResult = &slot;
  if (options.backend != "interpret") {
    for (const TensorSlot &slot : h.arguments) {
      if (slot.role != SlotRole::input)
        continue;
      Bytes bytes = slot.key == "tokens" ? idBytes(slot, tokens) : Bytes(8, 0);
      if (slot.key == "step")
        std::memcpy(bytes.data(), &step, 8);
      tmrt_arena_write(ctx, slot.location(), bytes.data(), bytes.size());
    }
    jit->runHessian(ctx);
    if (const char *kernelError = tmrt_context_error(ctx))
      return runError("the Hessian step after step " + std::to_string(step) +
                      ": " + kernelError);
    uint64_t skipped = tmrt_skipped_updates(ctx);
    tmrt_clear_skipped_updates(ctx);
    if (skipped)
      return runError("the Hessian step after step " + std::to_string(step) +
                      " left " + std::to_string(skipped) +
                      " estimates as they were: a sampled gradient is not "
                      "finite");
    copyStateBack(h.results);
    if (lossResult)
      tmrt_arena_read(ctx, lossResult->location(), &loss, 4);
    return loss;
  }
  auto &host = static_cast<HostState &>(*state);
  std::vector<RefTensor> args =
      evaluatorArguments(h.arguments, host, step, tokens, {});
  SmallVector<Value> skipped;
  FailureOr<SmallVector<RefTensor>> results =
      evaluate(hessianFunc, args, &skipped);
  if (failed(results))
    return runError("");
  if (!skipped.empty())
    return runError("the Hessian step after step " + std::to_string(step) +
                    " left " + std::to_string(skipped.size()) +
                    " estimates as they were: a sampled gradient is not "
                    "finite");
  for (auto [slot, value] : llvm::zip(h.results, *results))
    if (isState(slot))
      host.write(slot, fromRefTensor(slot, value));
  if (lossResult)
    loss = (*results)[lossResult - h.results.data()].scalarFloat();
  return loss;
}

llvm::Error Session::start() {
  assert(!state && "the session has started already");
  if (options.backend == "interpret") {
    if (ranks > 1) {
      return runError("the interpreter runs one rank; a step partitioned for " +
                      std::to_string(ranks) +
                      " ranks runs on a runtime backend");
    }
    state = std::make_unique<HostState>();
    return llvm::Error::success();
  }
  const char *contextError = nullptr;
  ctx = tmrt_context_create_on_device(options.backend.c_str(), options.device,
                                      options.threads, &contextError);
  if (!ctx) {
    return runError(contextError ? contextError : "cannot create the context");
  }
  if (options.communicator != "single" &&
      tmrt_context_set_communicator(ctx, options.communicator.c_str(),
                                    &contextError) != 0) {
    return runError(contextError);
  }
  int64_t world = tmrt_world_size(ctx);
  rank = tmrt_rank(ctx);
  // Rank r runs stage (r / t) mod p (data x pipeline x tensor).
  int64_t stageStride = tensorParts * contextParts;
  if (pipelineStages > 1 &&
      (world != ranks ||
       (rank / stageStride) % pipelineStages != pipelineStage))
    return runError("the step is stage " + std::to_string(pipelineStage) +
                    " of a pipeline of " + std::to_string(pipelineStages) +
                    " stages over " + std::to_string(ranks / pipelineStages) +
                    " data ranks, run by rank " + std::to_string(rank) +
                    " of " + std::to_string(world) +
                    " processes: run one process per stage of each pipeline "
                    "(mpirun -np " +
                    std::to_string(ranks) + "), rank r running stage " +
                    (stageStride > 1
                         ? "(r / " + std::to_string(stageStride) + ") mod "
                         : std::string("r mod ")) +
                    std::to_string(pipelineStages));
  if (world != ranks) {
    return runError(
        ranks > 1 ? "the step is partitioned for " + std::to_string(ranks) +
                        " ranks (" +
                        (tensorParts > 1
                             ? "train-tensor-parallel size=" +
                                   std::to_string(tensorParts)
                             : "train-zero ranks=" + std::to_string(ranks)) +
                        "), but " + std::to_string(world) +
                        " processes run it: run it on " +
                        std::to_string(ranks) + " (mpirun -np " +
                        std::to_string(ranks) + ")" +
                        (tensorParts > 1 && ranks == tensorParts
                             ? ", or on a multiple of " +
                                   std::to_string(tensorParts) +
                                   " with --zero (the groups then train on "
                                   "the data axis)"
                             : std::string())
                  : std::to_string(world) +
                        " processes run a step that is not partitioned "
                        "(give --zero to partition it over them)");
  }
  // The step and its Hessian step (Sophia's) share one arena.
  uint64_t arenaBytes = layout.deviceArenaBytes();
  if (tmrt_arena_alloc(ctx, arenaBytes) != 0) {
    const char *why = tmrt_context_error(ctx);
    return runError(why ? std::string(why) + " (the arena of " +
                              trainmem::formatByteSize(arenaBytes) + ")"
                        : "cannot allocate the arena of " +
                              std::to_string(arenaBytes) + " bytes (" +
                              trainmem::formatByteSize(arenaBytes) + ")");
  }
  // Host memory (train-offload-optimizer): its own arena. A backend whose
  // kernels run on a device moves it only by tmrt_transfer, so an update
  // that runs in host memory cannot run there.
  if (layout.hostOps && !tmrt_arena_base(ctx)) {
    return runError("the step runs " + std::to_string(layout.hostOps) +
                    " ops (optimizer updates, weight casts) in host memory "
                    "(train-offload-optimizer what=states+update), which the " +
                    options.backend +
                    " backend's kernels cannot read (they run on the device): "
                    "offload with what=states, or run on the cpu backend");
  }
  if (layout.hostArenaBytes &&
      tmrt_host_arena_alloc(ctx, layout.hostArenaBytes) != 0) {
    return runError("cannot allocate the host arena of " +
                    std::to_string(layout.hostArenaBytes) + " bytes (" +
                    trainmem::formatByteSize(layout.hostArenaBytes) + ")");
  }
  llvm::Expected<std::unique_ptr<JitStep>> compiled = JitStep::create(*lowered);
  if (!compiled)
    return runError("JIT compilation failed: " +
                    llvm::toString(compiled.takeError()));
  jit = std::move(*compiled);
  state = std::make_unique<ArenaState>(ctx);
  return llvm::Error::success();
}

void Session::readRanks(Operation *marked, func::FuncOp stepFunc) {
  // A pipeline stage (train-pipeline): one of `stages` consecutive ranks.
  if (auto stage =
          marked->getAttrOfType<PipelineStageAttr>(kPipelineStageAttrName)) {
    pipelineStages = stage.getStages();
    pipelineStage = stage.getStage();
  }
  // The ranks train-zero partitioned it for (a stage's data ranks, each
  // running the pipeline's stages).
  if (auto zero = marked->getAttrOfType<ZeroAttr>(kZeroAttrName)) {
    ranks = zero.getRanks();
    zeroStage = zero.getStage();
  }
  ranks *= pipelineStages;
  // The lowered step's ranks: its grid's, which on a (data, tensor) grid
  // are more than train-zero's data ranks (the lowering counts a
  // pipeline's stages).
  if (auto lowered =
          marked->getAttrOfType<IntegerAttr>(kLoweredRanksAttrName)) {
    ranks = std::max(ranks, lowered.getInt());
  } else if (stepFunc) {
    // A step whose collectives run on a grid of their own (a tensor-
    // parallel one): as many ranks as the grid has.
    stepFunc.walk([&](Operation *op) {
      if (std::optional<ProcessGroup> group = getProcessGroup(op))
        ranks = std::max(ranks, group->gridRanks);
    });
  }
}

/// The rank's part of `values` (a whole tensor's) for `slot`: all of it,
/// or (a shard) elements [rank x n, (rank + 1) x n) of the tensor padded
/// with zeros.
static std::vector<float> partOf(const TensorSlot &slot,
                                 const std::vector<float> &values,
                                 int64_t rank) {
  if (slot.fullShape.empty())
    return values;
  int64_t n = slot.numElements();
  std::vector<float> part(n, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    int64_t at = rank * n + i;
    if (at < static_cast<int64_t>(values.size()))
      part[i] = values[at];
  }
  return part;
}

llvm::Error Session::initialize(const Checkpoint *weights) {
  assert(state && "start the session first");
  unsigned paramIndex = 0;
  // Whole tensors: every rank draws the same, and keeps its part (a ZeRO
  // shard, or a tensor-parallel part: its parameter's, its master's).
  std::map<std::string, std::vector<float>> params;
  auto partFor = [&](const TensorSlot &slot, const std::vector<float> &values) {
    if (slot.splitParts <= 1)
      return partOf(slot, values, getDataRank());
    return partOf(slot,
                  partAlong<float>(values, slot.wholeShape(), slot.splitDim,
                                   slot.splitParts, getTensorPosition()),
                  getDataRank());
  };
  for (const TensorSlot &slot : layout.arguments)
    if (slot.role == SlotRole::param) {
      TensorSlot whole = slot;
      whole.shape = slot.wholeShape();
      std::vector<float> values =
          weights ? floatValues(slot.elementType,
                                weights->tensors.at(slot.stateName()))
                  : initialValues(whole, slot.initStream.value_or(paramIndex),
                                  options.seed);
      ++paramIndex;
      // A std too large for f32 would start training from infinities.
      if (!llvm::all_of(values, [](float v) { return std::isfinite(v); })) {
        return runError("parameter '" + slot.key + "': its #train.init (std " +
                        std::to_string(slot.initStd) +
                        ") gives values that are not finite in f32");
      }
      state->write(slot, floatBytes(slot.elementType, partFor(slot, values)));
      params[slot.key] = std::move(values);
    }
  for (const TensorSlot &slot : layout.arguments) {
    if (!slot.stateKind)
      continue;
    if (*slot.stateKind == StateKind::master) {
      state->write(slot, floatBytes(slot.elementType,
                                    partFor(slot, params[slot.stateParam])));
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
  return llvm::Error::success();
}

llvm::Expected<double> Session::meanOverRanks(double value) const {
  if (ranks == 1 || !ctx)
    return value;
  double sum = value;
  if (tmrt_host_sum_f64(ctx, &sum, 1) != 0) {
    const char *why = tmrt_context_error(ctx);
    return runError(why ? why : "the ranks could not sum a value");
  }
  return sum / static_cast<double>(ranks);
}

llvm::Expected<bool> Session::anyRank(bool flag) const {
  llvm::Expected<double> mean = meanOverRanks(flag ? 1.0 : 0.0);
  if (!mean)
    return mean.takeError();
  return *mean > 0.0;
}

llvm::Expected<float> Session::meanLossOverRanks(float loss) const {
  if (ranks == 1 || !ctx)
    return loss;
  float sum = loss;
  if (tmrt_host_sum_f32(ctx, &sum, 1) != 0) {
    const char *why = tmrt_context_error(ctx);
    return runError(why ? why : "the ranks could not sum their losses");
  }
  // A pipeline's stages but its last report 0: the mean over its copies.
  return static_cast<float>(static_cast<double>(sum) /
                            (ranks / pipelineStages));
}

void Session::abortRanks(int code) const {
  if (ranks > 1 && ctx)
    tmrt_abort(ctx, code);
}

std::optional<LossScaleState> Session::getLossScale() const {
  if (!state)
    return std::nullopt;
  for (const TensorSlot &slot : layout.arguments)
    if (slot.stateKind == StateKind::loss_scale &&
        slot.elementType.isInteger(64)) {
      Bytes bytes = state->read(slot);
      int64_t values[3];
      std::memcpy(values, bytes.data(), 24);
      return LossScaleState{trainmem::lossScale(lossScaleInitial, values[0]),
                            values[1], values[2]};
    }
  return std::nullopt;
}

std::vector<std::string> Session::describeGemms16() const {
  std::vector<std::string> lines;
  if (!ctx)
    return lines;
  auto has = [&](function_ref<bool(Type)> isType) {
    return llvm::any_of(layout.arguments, [&](const TensorSlot &slot) {
      return slot.role == SlotRole::param && isType(slot.elementType);
    });
  };
  if (has([](Type type) { return type.isBF16(); }))
    lines.push_back(std::string("bf16 GEMMs: ") + tmrt_bf16_gemm(ctx));
  if (has([](Type type) { return type.isF16(); }))
    lines.push_back("f16 GEMMs: f16 tiles widened to f32, cblas_sgemm "
                    "(OpenBLAS has no half-precision GEMM)");
  return lines;
}

uint64_t Session::getBytesSent() const {
  return ctx ? tmrt_bytes_sent(ctx) : 0;
}
uint64_t Session::getBytesReceived() const {
  return ctx ? tmrt_bytes_received(ctx) : 0;
}

bool Session::startProfile() {
  if (!ctx)
    return false;
  tmrt_profile_enable(ctx, 1);
  return true;
}

std::vector<double> Session::getProfileByCall() const {
  std::vector<double> seconds;
  if (!ctx)
    return seconds;
  for (int64_t i = 0, e = tmrt_profile_step_calls(ctx); i < e; ++i)
    seconds.push_back(tmrt_profile_call_seconds(ctx, i));
  return seconds;
}

std::vector<Session::KernelTime> Session::getProfile() const {
  std::vector<KernelTime> rows;
  if (!ctx)
    return rows;
  for (int64_t k = 0, e = tmrt_profile_kernels(); k < e; ++k)
    if (uint64_t calls = tmrt_profile_calls(ctx, k))
      rows.push_back({tmrt_profile_name(k), calls,
                      tmrt_profile_seconds(ctx, k)});
  llvm::sort(rows, [](const KernelTime &a, const KernelTime &b) {
    return a.seconds != b.seconds ? a.seconds > b.seconds : a.kernel < b.kernel;
  });
  return rows;
}

void Session::restore(const Checkpoint &checkpoint) {
  assert(state && "start the session first");
  for (const TensorSlot &slot : layout.arguments)
    if (isState(slot))
      state->write(slot, checkpoint.tensors.at(slot.stateName()));
}

/// Token ids as the slot holds them (i32 or i64).
static Bytes idBytes(const TensorSlot &slot, ArrayRef<int64_t> ids) {
  if (slot.elementType.isInteger(32)) {
    std::vector<int32_t> narrow(ids.begin(), ids.end());
    Bytes bytes(narrow.size() * 4);
    std::memcpy(bytes.data(), narrow.data(), bytes.size());
    return bytes;
  }
  Bytes bytes(ids.size() * 8);
  std::memcpy(bytes.data(), ids.data(), bytes.size());
  return bytes;
}

/// The error of a step without loss scaling whose update skipped tensors
/// (`first`, the parameter or master of the first, when known).
static std::string skippedUpdateError(int64_t step, const TensorSlot *first,
                                      uint64_t skipped) {
  std::string name = "a parameter";
  if (first)
    name = "'" +
           (first->role == SlotRole::param ? first->key : first->stateParam) +
           "'";
  return "step " + std::to_string(step) + ": the gradient of " + name +
         (skipped > 1
              ? " (and of " + std::to_string(skipped - 1) + " more tensors)"
              : std::string()) +
         " is not finite (NaN or infinity; in f16, an overflow), so its "
         "update was skipped; stopping without writing this step's state "
         "(train f16 with loss scaling: --loss-scale)";
}

llvm::Expected<float> Session::runStep(int64_t step, ArrayRef<int64_t> tokens,
                                       ArrayRef<int64_t> targets) {
  float loss = 0;
  assert(state && "start the session first");
  assert(static_cast<int64_t>(tokens.size()) == batchSize * seqLen &&
         tokens.size() == targets.size() && "a batch of another shape");
  if (options.backend != "interpret") {
    Bytes tokenBytes = idBytes(*tokensSlot, tokens);
    Bytes targetBytes = idBytes(*targetsSlot, targets);
    if (tokenBytes.size() != tokensSlot->bytes ||
        targetBytes.size() != targetsSlot->bytes || stepSlot->bytes != 8) {
      return runError("the step's inputs do not have the sizes of their types");
    }
    tmrt_arena_write(ctx, tokensSlot->location(), tokenBytes.data(),
                     tokenBytes.size());
    tmrt_arena_write(ctx, targetsSlot->location(), targetBytes.data(),
                     targetBytes.size());
    tmrt_arena_write(ctx, stepSlot->location(), &step, 8);
    tmrt_profile_step_begin(ctx);
    jit->run(ctx);
    if (const char *kernelError = tmrt_context_error(ctx)) {
      return runError("step " + std::to_string(step) + ": " + kernelError);
    }
    // An update skipped for a non-finite gradient is a loss-scaled step's
    // overflow, handled by its scale; in any other step it is an error
    // that names the tensor (before the state of this step comes back).
    uint64_t skipped = tmrt_skipped_updates(ctx);
    if (skipped && !getLossScale()) {
      int64_t offset = tmrt_skipped_update_param(ctx, 0);
      const TensorSlot *first = nullptr;
      for (const TensorSlot &slot : layout.arguments)
        if (static_cast<int64_t>(slot.location()) == offset)
          first = &slot;
      tmrt_clear_skipped_updates(ctx);
      return runError(skippedUpdateError(step, first, skipped));
    }
    tmrt_clear_skipped_updates(ctx);
    copyStateBack(layout.results);
    if (lossSlot)
      tmrt_arena_read(ctx, lossSlot->location(), &loss, 4);
    return loss;
  }

  auto &host = static_cast<HostState &>(*state);
  std::vector<RefTensor> args =
      evaluatorArguments(layout.arguments, host, step, tokens, targets);
  SmallVector<Value> skipped;
  FailureOr<SmallVector<RefTensor>> results =
      evaluate(stepFunc, args, &skipped);
  if (failed(results))
    return runError("");
  if (!skipped.empty() && !getLossScale()) {
    const TensorSlot *first = nullptr;
    if (auto arg = dyn_cast<BlockArgument>(skipped.front()))
      first = &layout.arguments[arg.getArgNumber()];
    return runError(skippedUpdateError(step, first, skipped.size()));
  }
  for (auto [slot, value] : llvm::zip(layout.results, *results))
    if (isState(slot))
      host.write(slot, fromRefTensor(slot, value));
  loss = (*results)[0].scalarFloat();
  return loss;
}

llvm::Error Session::save(StringRef dir, int64_t step,
                          const RunIdentity &identity) const {
  assert(state && "start the session first");
  auto read = [&](const TensorSlot &slot) { return state->read(slot); };
  auto barrier = [&]() -> llvm::Error {
    tmrt_barrier(ctx);
    if (const char *why = tmrt_context_error(ctx))
      return runError(std::string("checkpoint of step ") +
                      std::to_string(step) + ": " + why);
    return llvm::Error::success();
  };
  // A pipeline: each stage its tensors whole in a file of the step's
  // directory, then rank 0 the manifest that names them, so that it names
  // a complete set only.
  // Data-parallel pipelines hold the same state: the first writes it.
  if (pipelineStages > 1) {
    std::string stepName = "step-" + std::to_string(step);
    if (getDataRank() == 0)
      if (llvm::Error failure = writeCheckpoint(
              (dir + "/" + stepName).str(), step, identity, layout.arguments,
              read, stageFileName(pipelineStage, pipelineStages)))
        return failure;
    if (llvm::Error failure = barrier())
      return failure;
    if (rank == 0) {
      if (llvm::Error failure =
              writePipelineManifest(dir, stepName, pipelineStages, step))
        return failure;
      removeOtherCheckpoints(dir, stepName);
    }
    return barrier();
  }
  // The ranks of a context group hold the same state: the first of each
  // writes it (getCheckpointLayout folds the group into one rank).
  CheckpointLayout shardLayout = getCheckpointLayout();
  bool writes = rank % contextParts == 0;
  if (shardLayout.ranks <= 1) {
    if (writes) {
      if (llvm::Error failure =
              writeCheckpoint(dir, step, identity, layout.arguments, read))
        return failure;
      // One rank's checkpoint replaces a sharded one in the same directory.
      removeOtherCheckpoints(dir, "checkpoint.bin");
    }
    return ranks > 1 ? barrier() : llvm::Error::success();
  }
  // Each rank its shard, in a directory of the step; then rank 0 the
  // manifest that names them, so that it names a complete set only.
  std::string stepName = "step-" + std::to_string(step);
  if (writes)
    if (llvm::Error failure = writeCheckpoint(
            (dir + "/" + stepName).str(), step, identity, layout.arguments,
            read, shardFileName(shardLayout.rank, shardLayout.ranks),
            &shardLayout))
      return failure;
  if (llvm::Error failure = barrier())
    return failure;
  if (rank == 0) {
    if (llvm::Error failure =
            writeManifest(dir, stepName, shardLayout, step, layout.arguments))
      return failure;
    // The checkpoints the manifest no longer names go (and one rank's).
    removeOtherCheckpoints(dir, stepName);
  }
  return barrier();
}

Bytes Session::readState(const TensorSlot &slot) const {
  assert(state && isState(slot) && "not a state slot of a started session");
  return state->read(slot);
}

std::optional<uint64_t> Session::getMeasuredPeak() const {
  if (!ctx)
    return std::nullopt;
  return tmrt_arena_high_water(ctx);
}

std::optional<uint64_t> Session::getMeasuredHostPeak() const {
  if (!ctx || !layout.hostArenaBytes)
    return std::nullopt;
  return tmrt_host_arena_high_water(ctx);
}

uint64_t Session::getTransferBytes() const {
  return ctx ? tmrt_transfer_bytes(ctx) : 0;
}
