//===- Step.cpp - compile, JIT and run a training step --------------------===//

#include "trainmem/Run/Step.h"
#include "trainmem-runtime/Runtime.h"
#include "trainmem/Conversion/Passes.h"
#include "trainmem/Conversion/RuntimeLowering.h"
#include "trainmem/Dialect/Train/IR/ShardModels.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Dialect/Train/Transforms/Pipelines.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "llvm/ExecutionEngine/Orc/Mangling.h"
#include "llvm/Support/TargetSelect.h"

#include <numeric>

using namespace mlir;
using namespace mlir::train;

namespace {

// Each runtime function's C prototype must match the ABI letters the
// compiler emits calls with (generated from Kernels.def into
// kRuntimeFunctions): checked here at compile time.
template <typename T> struct ParameterCode;
template <> struct ParameterCode<tmrt_context *> {
  static constexpr char value = 'c';
};
template <> struct ParameterCode<int64_t> {
  static constexpr char value = 'i';
};
template <> struct ParameterCode<double> {
  static constexpr char value = 'f';
};
template <> struct ParameterCode<const double *> {
  static constexpr char value = 'p';
};
template <> struct ParameterCode<const tmrt_attention_shape *> {
  static constexpr char value = 's';
};
template <typename... Args>
constexpr bool matchesSignature(void (*)(Args...), const char *signature) {
  constexpr char codes[] = {ParameterCode<Args>::value..., '\0'};
  for (unsigned i = 0;; ++i) {
    if (codes[i] != signature[i])
      return false;
    if (!codes[i])
      return true;
  }
}
constexpr bool sameName(const char *a, const char *b) {
  for (;; ++a, ++b) {
    if (*a != *b)
      return false;
    if (!*a)
      return true;
  }
}
constexpr const char *lettersOf(const char *name) {
  for (const RuntimeFunctionInfo &function : kRuntimeFunctions)
    if (sameName(function.name, name))
      return function.signature;
  return "";
}
#define TMRT_KERNEL(name, parameters, arguments)                               \
  static_assert(matchesSignature(&tmrt_##name, lettersOf("tmrt_" #name)),     \
                "tmrt_" #name " does not match the compiler's letters");
#include "trainmem-runtime/Kernels.def"

} // namespace

void mlir::train::registerRunDialects(DialectRegistry &registry) {
  // shard: a step train-zero partitioned (its collectives and grid); scf:
  // a lowered step's micro-batch loop.
  registry.insert<TrainDialect, func::FuncDialect, arith::ArithDialect,
                  LLVM::LLVMDialect, scf::SCFDialect, shard::ShardDialect>();
  registerShardExternalModels(registry);
  registerAllExtensions(registry);
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  // The pipelines are parsed from text, so their passes must be registered.
  static bool passesRegistered = [] {
    registerTrainPasses();
    registerTrainConversionPasses();
    registerSCFToControlFlowPass();
    registerConvertToLLVMPass();
    registerReconcileUnrealizedCastsPass();
    return true;
  }();
  (void)passesRegistered;
}

// The lowering writes references with the runtime's bit layout.
static_assert(RuntimeCallBuilder::kDtypeShift == TMRT_DTYPE_SHIFT &&
                  RuntimeCallBuilder::kHostMemoryBit == TMRT_HOST_MEMORY,
              "the lowering's reference layout is not the runtime's");

uint64_t TensorSlot::location() const {
  return offset | (host ? static_cast<uint64_t>(TMRT_HOST_MEMORY) : 0);
}

int64_t TensorSlot::numElements() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t(1),
                         std::multiplies<int64_t>());
}

StringRef mlir::train::getSlotRoleName(SlotRole role) {
  switch (role) {
  case SlotRole::param:
    return "param";
  case SlotRole::optimizerState:
    return "optimizer_state";
  case SlotRole::input:
    return "input";
  case SlotRole::grad:
    return "grad";
  case SlotRole::loss:
    return "loss";
  case SlotRole::gradNorm:
    return "grad_norm";
  case SlotRole::none:
    break;
  }
  return "";
}

StringRef mlir::train::getDtypeName(Type elementType) {
  if (!elementType)
    return "unknown";
  if (elementType.isF32())
    return "f32";
  if (elementType.isBF16())
    return "bf16";
  if (elementType.isF16())
    return "f16";
  if (elementType.isInteger(64))
    return "i64";
  if (elementType.isInteger(32))
    return "i32";
  if (elementType.isInteger(8))
    return "i8";
  if (elementType.isInteger(1))
    return "i1";
  return "unknown";
}

const TensorSlot *StepLayout::findArgument(SlotRole role, StringRef key) const {
  for (const TensorSlot &slot : arguments)
    if (slot.role == role && slot.key == key)
      return &slot;
  return nullptr;
}

const TensorSlot *StepLayout::findResult(SlotRole role) const {
  for (const TensorSlot &slot : results)
    if (slot.role == role)
      return &slot;
  return nullptr;
}

LogicalResult mlir::train::prepareStep(ModuleOp module,
                                       TrainStepPipelineOptions &options) {
  Operation *step = nullptr;
  if (hasMarkedStep(module)) {
    step = findMarkedStep(module, "trainmem-run");
    if (!step)
      return failure();
  }
  if (isLoweredStep(step)) {
    // A step lowered by trainmem-opt runs as it is; the passes that would
    // reshape it work on the tensor-level step only.
    if (options.fuseAttention || options.fuseElementwise)
      return emitError(step->getLoc(), "trainmem-run: @")
             << SymbolTable::getSymbolName(step).getValue()
             << " is already lowered; "
             << (options.fuseAttention ? "--fuse-attention"
                                       : "--fuse-elementwise")
             << " rewrites the forward (before train-autodiff)";
    if (!options.remat.empty() || !options.gradAccum.empty() ||
        options.quantize || !options.zero.empty() || options.lossScale ||
        !options.offload.empty() || options.releaseGradients)
      return emitError(step->getLoc(), "trainmem-run: @")
             << SymbolTable::getSymbolName(step).getValue()
             << " is already lowered; --remat, --grad-accum, "
                "--quantize-optimizer-state, --zero, --loss-scale, "
                "--release-gradients and --offload-optimizer need the "
                "tensor-level step (the input of convert-train-to-runtime)";
    return success();
  }
  // A model's forward pass becomes the step (train-autodiff marks it); a
  // step is taken as it is.
  options.differentiate = step == nullptr;
  PassManager pm(module.getContext());
  if (failed(buildTrainStepPipeline(
          pm, options, [&](const Twine &message) -> LogicalResult {
            return emitError(module.getLoc(), "trainmem-run: ") << message;
          })))
    return failure();
  return pm.run(module);
}

std::vector<int64_t> TensorSlot::partShape() const {
  return fullShape.empty() ? shape : fullShape;
}

std::vector<int64_t> TensorSlot::wholeShape() const {
  std::vector<int64_t> whole = partShape();
  if (splitParts > 1)
    whole[splitDim] *= splitParts;
  return whole;
}

/// Reads the slots a lowered step describes; a hand-edited or foreign
/// module gets an error naming what is missing instead of a crash.
/// A tensor-parallel part's #train.split, into `slot`.
static LogicalResult readSplit(Operation *step, StringRef attrName,
                               size_t index, DictionaryAttr dict,
                               TensorSlot &slot) {
  auto split =
      dict.getAs<TensorSplitAttr>(getSlotEntryName(kTensorSplitAttrName));
  if (!split)
    return success();
  if (split.getDim() >= static_cast<int64_t>(slot.partShape().size()))
    return step->emitError("trainmem-run: entry ")
           << index << " of '" << attrName << "' splits dimension "
           << split.getDim() << " of a rank-" << slot.partShape().size()
           << " tensor";
  slot.splitDim = split.getDim();
  slot.splitParts = split.getParts();
  return success();
}

static LogicalResult readSlots(Operation *step, StringRef attrName,
                               std::vector<TensorSlot> &slots) {
  auto array = step->getAttrOfType<ArrayAttr>(attrName);
  if (!array)
    return step->emitError("trainmem-run: the lowered step has no '")
           << attrName << "' array";
  for (auto [entryIndex, attr] : llvm::enumerate(array)) {
    // A plain variable: lambdas below capture it (C++17 cannot capture a
    // structured binding).
    size_t index = entryIndex;
    auto dict = dyn_cast<DictionaryAttr>(attr);
    auto offset = dict ? dict.getAs<IntegerAttr>("offset") : IntegerAttr();
    auto bytes = dict ? dict.getAs<IntegerAttr>("bytes") : IntegerAttr();
    auto shape = dict ? dict.getAs<DenseI64ArrayAttr>("shape")
                      : DenseI64ArrayAttr();
    auto elementType = dict ? dict.getAs<TypeAttr>("element_type") : TypeAttr();
    if (!offset || !bytes || !shape || !elementType || offset.getInt() < 0 ||
        bytes.getInt() < 0)
      return step->emitError("trainmem-run: entry ")
             << index << " of '" << attrName
             << "' is not {offset, bytes, shape, element_type, and a marker}";
    TensorSlot slot;
    slot.offset = offset.getInt();
    slot.bytes = bytes.getInt();
    slot.shape.assign(shape.asArrayRef().begin(), shape.asArrayRef().end());
    if (auto full = dict.getAs<DenseI64ArrayAttr>("full_shape"))
      slot.fullShape.assign(full.asArrayRef().begin(), full.asArrayRef().end());
    if (failed(readSplit(step, attrName, index, dict, slot)))
      return failure();
    slot.elementType = elementType.getValue();
    // What the tensor is: its marker, the first of these it has.
    for (auto [markerName, role] : {std::pair{kParamAttrName, SlotRole::param},
                                    std::pair{kInputAttrName, SlotRole::input},
                                    std::pair{kGradAttrName, SlotRole::grad}}) {
      StringRef name = getSlotEntryName(markerName);
      Attribute marker = dict.get(name);
      if (!marker || slot.role != SlotRole::none)
        continue;
      auto key = dyn_cast<StringAttr>(marker);
      if (!key)
        return step->emitError("trainmem-run: entry ")
               << index << " of '" << attrName << "': " << name
               << " is not a name";
      slot.role = role;
      slot.key = key.getValue().str();
    }
    // The typed entries (what the runner needs to start the tensor).
    auto typed = [&](StringRef name, auto kind) -> FailureOr<decltype(kind)> {
      Attribute value = dict.get(name);
      if (!value)
        return decltype(kind)();
      if (auto attr = dyn_cast<decltype(kind)>(value))
        return attr;
      return step->emitError("trainmem-run: entry ")
             << index << " of '" << attrName << "': " << name
             << " is not a #train." << decltype(kind)::getMnemonic();
    };
    FailureOr<StateAttr> state =
        typed(getSlotEntryName(kOptimizerStateAttrName), StateAttr());
    FailureOr<InitAttr> init =
        typed(getSlotEntryName(kInitAttrName), InitAttr());
    FailureOr<SpaceAttr> space =
        typed(getSlotEntryName(kMemorySpaceAttrName), SpaceAttr());
    if (failed(state) || failed(init) || failed(space))
      return failure();
    slot.host = *space && space->getSpace() == MemorySpace::host;
    if (*state) {
      slot.role = SlotRole::optimizerState;
      slot.key = state->getKey();
      slot.stateKind = state->getKind();
      slot.stateParam = state->getParam().str();
      slot.statePart = state->getPart();
      slot.stateMap = state->getMap();
    }
    if (*init) {
      slot.init = init->getKind();
      slot.initStd = init->getStd().convertToDouble();
      if (init->getStream() >= 0)
        slot.initStream = init->getStream();
    }
    if (slot.role == SlotRole::none &&
        dict.get(getSlotEntryName(kLossAttrName)))
      slot.role = SlotRole::loss;
    if (slot.role == SlotRole::none &&
        dict.get(getSlotEntryName(kGradNormAttrName)))
      slot.role = SlotRole::gradNorm;
    slots.push_back(slot);
  }
  return success();
}

FailureOr<StepLayout> mlir::train::lowerStep(ModuleOp module) {
  PassManager pm(module.getContext());
  Operation *symbol = findMarkedStep(module, "trainmem-run");
  if (!symbol)
    return failure();
  if (!isLoweredStep(symbol))
    pm.addPass(createConvertTrainToRuntimePass());
  // Its Hessian step (Sophia's), lowered after it: its parameters and
  // estimates live at the step's offsets.
  for (auto func : module.getOps<func::FuncOp>())
    if (func->hasAttr(kHessianStepAttrName) && !isLoweredStep(func)) {
      ConvertTrainToRuntimePassOptions options;
      options.function = func.getSymName().str();
      pm.addPass(createConvertTrainToRuntimePass(options));
    }
  if (!isa<LLVM::LLVMFuncOp>(symbol)) {
    pm.addPass(createSCFToControlFlowPass());
    pm.addPass(createConvertToLLVMPass());
    pm.addPass(createReconcileUnrealizedCastsPass());
  }
  if (failed(pm.run(module)))
    return failure();
  Operation *marked = findMarkedStep(module, "trainmem-run");
  auto step = dyn_cast_or_null<LLVM::LLVMFuncOp>(marked);
  if (!step)
    return emitError(module.getLoc(),
                     "trainmem-run: lowering produced no LLVM function marked ")
           << kStepAttrName;
  StepLayout layout;
  auto arenaBytes = step->getAttrOfType<IntegerAttr>(kArenaBytesAttrName);
  if (!arenaBytes || arenaBytes.getInt() <= 0)
    return step->emitError("trainmem-run: the lowered step has no positive '")
           << kArenaBytesAttrName << "'";
  layout.arenaBytes = arenaBytes.getInt();
  for (auto [name, field] :
       {std::pair{kHostArenaBytesAttrName, &layout.hostArenaBytes},
        std::pair{kHostOpsAttrName, &layout.hostOps}})
    if (Attribute attr = step->getAttr(name)) {
      auto value = dyn_cast<IntegerAttr>(attr);
      if (!value || value.getInt() < 0)
        return step->emitError("trainmem-run: '")
               << name << "' of the lowered step is not an integer >= 0";
      *field = value.getInt();
    }
  if (failed(readSlots(step, kArgumentSlotsAttrName, layout.arguments)) ||
      failed(readSlots(step, kResultSlotsAttrName, layout.results)))
    return failure();
  for (auto func : module.getOps<LLVM::LLVMFuncOp>()) {
    auto hessian = func->getAttrOfType<HessianStepAttr>(kHessianStepAttrName);
    if (!hessian || hessian.getStep().getValue() != step.getSymName())
      continue;
    HessianLayout &h = layout.hessian.emplace();
    h.every = hessian.getEvery();
    auto bytes = func->getAttrOfType<IntegerAttr>(kArenaBytesAttrName);
    if (!bytes || bytes.getInt() <= 0)
      return func->emitError("trainmem-run: the lowered Hessian step has no "
                             "positive '")
             << kArenaBytesAttrName << "'";
    h.arenaBytes = bytes.getInt();
    if (failed(readSlots(func, kArgumentSlotsAttrName, h.arguments)) ||
        failed(readSlots(func, kResultSlotsAttrName, h.results)))
      return failure();
  }
  // Every slot must lie inside the arena.
  for (const std::vector<TensorSlot> *slots :
       {&layout.arguments, &layout.results})
    for (const TensorSlot &slot : *slots) {
      uint64_t arena = slot.host ? layout.hostArenaBytes : layout.arenaBytes;
      if (slot.offset > arena || slot.bytes > arena - slot.offset)
        return step->emitError("trainmem-run: ")
               << slot.roleName() << " '" << slot.key << "' lies outside the "
               << (slot.host ? "host arena" : "arena");
    }
  return layout;
}

JitStep::~JitStep() = default;

llvm::Error mlir::train::runError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

llvm::Expected<std::unique_ptr<JitStep>> JitStep::create(ModuleOp lowered) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  // The lowered step is a straight line of runtime calls with constant
  // arguments: LLVM's optimizer has nothing to gain there, and its time
  // grows faster than linearly with the calls (minutes for 256 unrolled
  // micro-batches), so the step is compiled without optimization.
  auto transformer = makeOptimizingTransformer(/*optLevel=*/0, 0, nullptr);
  ExecutionEngineOptions options;
  options.transformer = transformer;
  options.jitCodeGenOptLevel = llvm::CodeGenOptLevel::None;
  auto engine = ExecutionEngine::create(lowered, options);
  if (!engine)
    return engine.takeError();
  (*engine)->registerSymbols([](llvm::orc::MangleAndInterner interner) {
    llvm::orc::SymbolMap symbols;
#define TMRT_KERNEL(name, parameters, arguments)                               \
  symbols[interner("tmrt_" #name)] = {                                         \
      llvm::orc::ExecutorAddr::fromPtr(&tmrt_##name),                          \
      llvm::JITSymbolFlags::Exported};
#include "trainmem-runtime/Kernels.def"
    return symbols;
  });
  Operation *marked = findMarkedStep(lowered, "trainmem-run");
  if (!marked)
    return runError("the lowered module has no step marked train.step");
  auto entry =
      (*engine)->lookup(SymbolTable::getSymbolName(marked).getValue());
  if (!entry)
    return entry.takeError();
  auto step = std::unique_ptr<JitStep>(new JitStep());
  step->entry = reinterpret_cast<void (*)(void *)>(*entry);
  for (Operation &op : lowered.getOps())
    if (op.hasAttr(kHessianStepAttrName) && isLoweredStep(&op)) {
      auto hessian =
          (*engine)->lookup(SymbolTable::getSymbolName(&op).getValue());
      if (!hessian)
        return hessian.takeError();
      step->hessianEntry = reinterpret_cast<void (*)(void *)>(*hessian);
    }
  step->engine = std::move(*engine);
  return step;
}
