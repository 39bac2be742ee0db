//===- trainmem-model.cpp - write a model's forward + loss as train IR ----===//

#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Model/ModelBuilder.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::train;
namespace cl = llvm::cl;

static cl::OptionCategory category("Model options");

static cl::opt<std::string>
    presetName("preset", cl::desc("Model preset (see --list-presets)"),
               cl::init("tiny"), cl::cat(category));
static cl::opt<bool> listPresets("list-presets",
                                 cl::desc("Print the preset names and exit"),
                                 cl::cat(category));
static cl::opt<long long> layers("layers", cl::desc("Transformer layers"),
                                 cl::cat(category));
static cl::opt<long long> hidden("hidden", cl::desc("Hidden size"),
                                 cl::cat(category));
static cl::opt<long long> heads("heads", cl::desc("Attention heads"),
                                cl::cat(category));
static cl::opt<long long>
    kvHeads("kv-heads", cl::desc("Key/value heads (Llama: grouped-query)"),
            cl::cat(category));
static cl::opt<long long>
    ffn("ffn",
        cl::desc("MLP inner size (default: follows --hidden by the "
                 "architecture's rule: 4h for GPT; Llama: 2/3 of 4h, times "
                 "the preset's multiplier, rounded up to its multiple)"),
        cl::cat(category));
static cl::opt<long long> vocab("vocab", cl::desc("Vocabulary size"),
                                cl::cat(category));
static cl::opt<long long>
    positions("positions", cl::desc("Learned positions (GPT)"),
              cl::cat(category));
static cl::opt<long long> seq("seq", cl::desc("Sequence length"),
                              cl::cat(category));
static cl::opt<long long> batch("batch",
                                cl::desc("Batch size: sequences per step "
                                         "(train-grad-accum splits them into "
                                         "micro-batches)"),
                                cl::cat(category));
static cl::opt<std::string> dtype("dtype",
                                  cl::desc("Element type: f32, bf16, f16"),
                                  cl::cat(category));
static cl::opt<double> dropout("dropout", cl::desc("Dropout rate"),
                               cl::cat(category));
static cl::opt<std::string> outputFilename("o", cl::desc("Output file"),
                                           cl::value_desc("filename"),
                                           cl::init("-"), cl::cat(category));

static int fail(const llvm::Twine &message) {
  llvm::errs() << "trainmem-model: error: " << message << "\n";
  return 1;
}

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv, "trainmem-model: writes a model's forward pass plus loss "
                  "as train IR\n");

  if (listPresets) {
    for (const std::string &name : getPresetNames())
      llvm::outs() << name << "\n";
    return 0;
  }

  std::optional<ModelConfig> preset = getPreset(presetName);
  if (!preset)
    return fail("unknown preset '" + presetName + "' (known: " +
                llvm::join(getPresetNames(), ", ") + ")");
  ModelConfig config = *preset;
  auto override = [](cl::opt<long long> &flag, int64_t &field) {
    if (flag.getNumOccurrences())
      field = flag;
  };
  override(layers, config.layers);
  override(hidden, config.hidden);
  override(heads, config.heads);
  // Without --kv-heads, a new --heads keeps plain multi-head attention
  // unless the preset groups its kv heads.
  if (heads.getNumOccurrences() && config.kvHeads == preset->heads)
    config.kvHeads = config.heads;
  override(kvHeads, config.kvHeads);
  // A new hidden size brings the MLP size the architecture derives from it,
  // unless --ffn says otherwise.
  if (hidden.getNumOccurrences())
    config.ffn = defaultFfn(config);
  override(ffn, config.ffn);
  override(vocab, config.vocab);
  override(positions, config.positions);
  override(seq, config.seq);
  override(batch, config.batch);
  // A longer sequence on a preset grows its learned position table only
  // when asked to with --positions.
  if (dtype.getNumOccurrences())
    config.dtype = dtype;
  if (dropout.getNumOccurrences())
    config.dropout = dropout;

  std::string why;
  if (!validateConfig(config, why))
    return fail(why);

  MLIRContext context;
  context.loadDialect<TrainDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> module = buildModel(&context, config);
  if (failed(verify(*module)))
    return fail("internal error: the generated graph does not verify");

  std::string errorMessage;
  std::unique_ptr<llvm::ToolOutputFile> output =
      openOutputFile(outputFilename, &errorMessage);
  if (!output)
    return fail(errorMessage);
  module->print(output->os());
  output->os() << "\n";
  output->keep();
  return 0;
}
