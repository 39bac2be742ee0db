//===- Step.cpp - compile, JIT and run a training step --------------------===//

#include "trainmem/Run/Step.h"
#include "trainmem/Conversion/Passes.h"
#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem-runtime/Runtime.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
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

// Each runtime function's C prototype must match RuntimeFunctions.def, the
// list the compiler emits calls from: checked here at compile time.
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
#define TMRT_FUNCTION(name, signature)                                         \
  static_assert(matchesSignature(&name, signature),                           \
                #name " does not match RuntimeFunctions.def");
#include "trainmem/Conversion/RuntimeFunctions.def"

} // namespace

void mlir::train::registerRunDialects(DialectRegistry &registry) {
  registry.insert<TrainDialect, func::FuncDialect, arith::ArithDialect,
                  LLVM::LLVMDialect>();
  registerAllExtensions(registry);
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  // The pipelines are parsed from text, so their passes must be registered.
  static bool passesRegistered = [] {
    registerTrainPasses();
    registerTrainConversionPasses();
    registerConvertToLLVMPass();
    registerReconcileUnrealizedCastsPass();
    return true;
  }();
  (void)passesRegistered;
}

int64_t TensorSlot::numElements() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t(1),
                         std::multiplies<int64_t>());
}

const TensorSlot *StepLayout::findArgument(StringRef role,
                                           StringRef key) const {
  for (const TensorSlot &slot : arguments)
    if (slot.role == role && slot.key == key)
      return &slot;
  return nullptr;
}

const TensorSlot *StepLayout::findResult(StringRef role) const {
  for (const TensorSlot &slot : results)
    if (slot.role == role)
      return &slot;
  return nullptr;
}

LogicalResult mlir::train::prepareStep(ModuleOp module,
                                       StringRef autodiffOptions,
                                       StringRef rematOptions,
                                       StringRef gradAccumOptions,
                                       std::optional<StringRef> quantizeOptions) {
  bool hasStep = static_cast<bool>(module.lookupSymbol("train_step"));
  if (!hasStep && !module.lookupSymbol("forward"))
    return module.emitError("trainmem-run: the module has neither "
                            "@train_step nor @forward");
  std::string pipeline;
  if (!hasStep)
    pipeline += ("train-autodiff{" + autodiffOptions + "},").str();
  if (!rematOptions.empty())
    pipeline += ("train-remat{" + rematOptions + "},").str();
  if (!gradAccumOptions.empty())
    pipeline += ("train-grad-accum{" + gradAccumOptions + "},").str();
  if (quantizeOptions)
    pipeline +=
        ("train-quantize-optimizer-state{" + *quantizeOptions + "},").str();
  pipeline += "train-unroll-accum,train-materialize-remat";
  PassManager pm(module.getContext());
  if (failed(parsePassPipeline(pipeline, pm, llvm::errs())))
    return module.emitError("trainmem-run: bad pass options in '")
           << pipeline << "'";
  return pm.run(module);
}

static std::vector<TensorSlot> readSlots(ArrayAttr array) {
  std::vector<TensorSlot> slots;
  for (Attribute attr : array) {
    auto dict = cast<DictionaryAttr>(attr);
    TensorSlot slot;
    slot.role = dict.getAs<StringAttr>("role").getValue().str();
    slot.key = dict.getAs<StringAttr>("key").getValue().str();
    slot.offset = dict.getAs<IntegerAttr>("offset").getInt();
    slot.bytes = dict.getAs<IntegerAttr>("bytes").getInt();
    ArrayRef<int64_t> shape = dict.getAs<DenseI64ArrayAttr>("shape").asArrayRef();
    slot.shape.assign(shape.begin(), shape.end());
    slot.dtype = dict.getAs<StringAttr>("dtype").getValue().str();
    slots.push_back(slot);
  }
  return slots;
}

FailureOr<StepLayout> mlir::train::lowerStep(ModuleOp module) {
  PassManager pm(module.getContext());
  pm.addPass(createConvertTrainToRuntimePass());
  if (failed(parsePassPipeline("convert-to-llvm,reconcile-unrealized-casts",
                               pm, llvm::errs())) ||
      failed(pm.run(module)))
    return failure();
  auto step = module.lookupSymbol<LLVM::LLVMFuncOp>("train_step");
  if (!step)
    return module.emitError("trainmem-run: lowering produced no @train_step");
  StepLayout layout;
  layout.arenaBytes =
      step->getAttrOfType<IntegerAttr>("tmrt.arena_bytes").getInt();
  layout.arguments =
      readSlots(step->getAttrOfType<ArrayAttr>("tmrt.arguments"));
  layout.results = readSlots(step->getAttrOfType<ArrayAttr>("tmrt.results"));
  return layout;
}

JitStep::~JitStep() = default;

std::unique_ptr<JitStep> JitStep::create(ModuleOp lowered,
                                         std::string &error) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  auto transformer = makeOptimizingTransformer(/*optLevel=*/2, 0, nullptr);
  ExecutionEngineOptions options;
  options.transformer = transformer;
  auto engine = ExecutionEngine::create(lowered, options);
  if (!engine) {
    error = llvm::toString(engine.takeError());
    return nullptr;
  }
  (*engine)->registerSymbols([](llvm::orc::MangleAndInterner interner) {
    llvm::orc::SymbolMap symbols;
#define TMRT_FUNCTION(name, signature)                                         \
  symbols[interner(#name)] = {llvm::orc::ExecutorAddr::fromPtr(&name),        \
                              llvm::JITSymbolFlags::Exported};
#include "trainmem/Conversion/RuntimeFunctions.def"
    return symbols;
  });
  auto entry = (*engine)->lookup("train_step");
  if (!entry) {
    error = llvm::toString(entry.takeError());
    return nullptr;
  }
  auto step = std::unique_ptr<JitStep>(new JitStep());
  step->entry = reinterpret_cast<void (*)(void *)>(*entry);
  step->engine = std::move(*engine);
  return step;
}
