//===- ModelBuilder.h - write a model's forward + loss as train IR -*- C++ -*-===//

#ifndef TRAINMEM_MODEL_MODELBUILDER_H
#define TRAINMEM_MODEL_MODELBUILDER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlir {
namespace train {

enum class Architecture {
  /// GPT-2/3: pre-LN, learned positions, GELU MLP, biases, tied embeddings.
  GPT,
  /// Llama-2: RMSNorm, RoPE, SwiGLU MLP, no biases, untied head, GQA.
  Llama
};

struct ModelConfig {
  std::string name;
  Architecture arch = Architecture::GPT;
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kvHeads = 0;
  int64_t ffn = 0;
  /// Llama's rule for the MLP size from the hidden size (defaultFfn).
  double ffnMultiplier = 1.0;
  int64_t ffnMultipleOf = 256;
  int64_t vocab = 0;
  /// Rows of the learned position table (GPT only).
  int64_t positions = 0;
  int64_t seq = 0;
  int64_t batch = 0;
  /// "f32", "bf16" or "f16".
  std::string dtype = "bf16";
  double dropout = 0.0;
  double normEpsilon = 1e-5;
  double ropeTheta = 10000.0;
  int64_t ignoreIndex = -100;
};

/// The MLP inner size the architecture derives from the hidden size: 4h for
/// GPT; for Llama, 2/3 of 4h times ffnMultiplier, rounded up to a multiple of
/// ffnMultipleOf (Llama-2's FeedForward).
int64_t defaultFfn(const ModelConfig &config);

/// The named presets, in a stable order.
std::vector<std::string> getPresetNames();

/// The preset called `name`, or nothing.
std::optional<ModelConfig> getPreset(llvm::StringRef name);

/// Checks that a configuration describes a buildable model; on failure
/// `why` says which value is wrong.
bool validateConfig(const ModelConfig &config, std::string &why);

/// Builds `func.func @forward(tokens, targets, params...) -> loss` for a
/// validated configuration. Only types are created, never tensor data, so
/// the graphs of the largest models cost kilobytes.
OwningOpRef<ModuleOp> buildModel(MLIRContext *context,
                                 const ModelConfig &config);

} // namespace train
} // namespace mlir

#endif // TRAINMEM_MODEL_MODELBUILDER_H
