//===- ModelTest.cpp - trainmem-model graphs: counts, checks, evaluation ---===//

#include "TestModels.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Evaluator/Evaluator.h"
#include "trainmem/Model/Layers.h"
#include "trainmem/Model/ModelBuilder.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace mlir;
using namespace mlir::train;

namespace {

func::FuncOp forwardOf(ModuleOp module) {
  return *module.getOps<func::FuncOp>().begin();
}

uint64_t countParameters(func::FuncOp func) {
  uint64_t count = 0;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (func.getArgAttr(i, kParamAttrName))
      count += getNumElements(func.getArgument(i).getType());
  return count;
}

class ModelTest : public ::testing::Test {
protected:
  ModelTest() { context.loadDialect<TrainDialect, func::FuncDialect>(); }

  OwningOpRef<ModuleOp> build(const ModelConfig &config) {
    std::string why;
    EXPECT_TRUE(validateConfig(config, why)) << why;
    OwningOpRef<ModuleOp> module = buildModel(&context, config);
    EXPECT_TRUE(succeeded(verify(*module)));
    return module;
  }

  /// Arguments as the architecture's reference initializes them: weights
  /// N(0, 0.02), norm gains 1, biases 0; tokens and targets uniform bytes.
  std::vector<RefTensor> initialArguments(func::FuncOp func, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<RefTensor> args;
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      auto type = cast<RankedTensorType>(func.getArgument(i).getType());
      std::vector<int64_t> shape(type.getShape().begin(),
                                 type.getShape().end());
      int64_t n = type.getNumElements();
      if (auto input = func.getArgAttrOfType<StringAttr>(i, kInputAttrName)) {
        int64_t vocab = 0;
        for (unsigned j = 0; j < func.getNumArguments(); ++j)
          if (auto name = func.getArgAttrOfType<StringAttr>(j, kParamAttrName))
            if (name.getValue() == "wte" || name.getValue() == "tok_embeddings")
              vocab = cast<RankedTensorType>(func.getArgument(j).getType())
                          .getDimSize(0);
        std::uniform_int_distribution<int64_t> token(0, vocab - 1);
        std::vector<int64_t> ids(n);
        for (int64_t &id : ids)
          id = token(rng);
        args.push_back(RefTensor::ofInts(shape, ids));
        continue;
      }
      StringRef name =
          func.getArgAttrOfType<StringAttr>(i, kParamAttrName).getValue();
      bool isGain = type.getRank() == 1 && name.ends_with(".weight") &&
                    (name.contains("ln") || name.contains("norm"));
      bool isNormGain = name == "norm.weight" || isGain;
      std::vector<float> values(n);
      for (float &v : values)
        v = isNormGain ? 1.0f : (type.getRank() == 1 ? 0.0f : normal(rng));
      args.push_back(RefTensor::ofFloats(shape, values));
    }
    return args;
  }

  MLIRContext context;
};

TEST_F(ModelTest, PresetParameterCountsMatchPublished) {
  // GPT-2 124M, Llama-2 7B and 70B, and GPT-3 175B (GPT style with biases,
  // vocab 50257, 2048 positions), counted from the arguments of the graph.
  std::vector<std::pair<std::string, uint64_t>> published = {
      {"gpt2-124m", 124439808ull},
      {"llama2-7b", 6738415616ull},
      {"llama2-70b", 68976648192ull},
      {"gpt3-175b", 174604259328ull}};
  for (auto &[name, count] : published) {
    std::optional<ModelConfig> config = getPreset(name);
    ASSERT_TRUE(config) << name;
    OwningOpRef<ModuleOp> module = build(*config);
    EXPECT_EQ(countParameters(forwardOf(*module)), count) << name;
  }
}

TEST_F(ModelTest, ValidationNamesTheBadValue) {
  ModelConfig config = *getPreset("tiny");
  std::string why;
  config.heads = 5;
  config.kvHeads = 5;
  EXPECT_FALSE(validateConfig(config, why));
  EXPECT_EQ(why, "--heads 5 does not divide --hidden 64");
  config = *getPreset("tiny");
  config.batch = 0;
  EXPECT_FALSE(validateConfig(config, why));
  EXPECT_EQ(why, "--batch must be > 0, got 0");
  config = *getPreset("llama2-70b");
  config.kvHeads = 3;
  EXPECT_FALSE(validateConfig(config, why));
  EXPECT_EQ(why, "--kv-heads 3 does not divide --heads 64");
  EXPECT_FALSE(getPreset("gpt5"));
}

TEST_F(ModelTest, TinyGptLossStartsNearUniform) {
  // With N(0, 0.02) weights the logits are near 0, so the first loss is
  // close to ln(256) = 5.545 (within 0.1).
  OwningOpRef<ModuleOp> module = build(*getPreset("tiny"));
  func::FuncOp func = forwardOf(*module);
  FailureOr<SmallVector<RefTensor>> loss =
      evaluate(func, initialArguments(func, 1));
  ASSERT_TRUE(succeeded(loss));
  EXPECT_NEAR((*loss)[0].scalarFloat(), std::log(256.0), 0.1);
}

TEST_F(ModelTest, SmallLlamaWithGroupedQueryAttentionEvaluates) {
  // Llama-2 structure (RMSNorm, RoPE, SwiGLU, GQA 4 query heads per kv head)
  // at a CPU size: the loss is finite and near ln(vocab).
  ModelConfig config = smallModel("llama2-70b", {2, 64, 8, 2, 96, 16, 2, 256});
  OwningOpRef<ModuleOp> module = build(config);
  func::FuncOp func = forwardOf(*module);
  FailureOr<SmallVector<RefTensor>> loss =
      evaluate(func, initialArguments(func, 2));
  ASSERT_TRUE(succeeded(loss));
  float value = (*loss)[0].scalarFloat();
  EXPECT_TRUE(std::isfinite(value));
  EXPECT_NEAR(value, std::log(256.0), 0.1);
}

TEST_F(ModelTest, DropoutSitesGetDistinctOffsets) {
  // Two sites sharing an offset would draw the same mask.
  ModelConfig config = *getPreset("tiny");
  config.dropout = 0.1;
  OwningOpRef<ModuleOp> module = build(config);
  std::set<int64_t> offsets;
  int sites = 0;
  module->walk([&](DropoutOp op) {
    ++sites;
    offsets.insert(op.getOffset());
  });
  // Embedding, then per layer: attention probs, attention residual, MLP.
  EXPECT_EQ(sites, 1 + 3 * 2);
  EXPECT_EQ(offsets.size(), static_cast<size_t>(sites));
}

/// The function argument that is parameter `name`.
BlockArgument parameterNamed(func::FuncOp func, StringRef name) {
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (auto key = func.getArgAttrOfType<StringAttr>(i, kParamAttrName))
      if (key.getValue() == name)
        return func.getArgument(i);
  return {};
}

TEST_F(ModelTest, PresetLayersAreUniformAndCutToFewer) {
  for (const char *preset : {"tiny", "llama2-7b"}) {
    SCOPED_TRACE(preset);
    ModelConfig config = *getPreset(preset);
    config.layers = 5;
    config.hidden = 64;
    config.heads = config.kvHeads = 4;
    config.ffn = 128;
    config.seq = 16;
    OwningOpRef<ModuleOp> module = build(config);
    LayerStructure layers = analyzeLayers(*module);
    EXPECT_EQ(layers.layers, 5);
    EXPECT_TRUE(layers.uniform) << layers.why;
    // Cut to 2: the module of 2 layers, its parameters and all.
    std::string why;
    ASSERT_TRUE(succeeded(truncateLayers(*module, 2, why))) << why;
    EXPECT_TRUE(succeeded(verify(*module)));
    config.layers = 2;
    OwningOpRef<ModuleOp> two = build(config);
    EXPECT_EQ(countParameters(forwardOf(*module)),
              countParameters(forwardOf(*two)));
    EXPECT_EQ(forwardOf(*module).getNumArguments(),
              forwardOf(*two).getNumArguments());
    EXPECT_EQ(analyzeLayers(*module).layers, 2);
    EXPECT_TRUE(succeeded(truncateLayers(*module, 2, why)));
    EXPECT_TRUE(failed(truncateLayers(*module, 3, why)));
    EXPECT_EQ(why, "cannot keep 3 of 2 layers");
  }
}

TEST_F(ModelTest, LayersThatDifferOrShareAreNotUniform) {
  ModelConfig config = *getPreset("tiny");
  config.layers = 3;
  {
    // Layer 2 reads layer 0's query weight: shared, not a layer of its own.
    OwningOpRef<ModuleOp> module = build(config);
    func::FuncOp func = forwardOf(*module);
    parameterNamed(func, "h.2.attn.q.weight")
        .replaceAllUsesWith(parameterNamed(func, "h.0.attn.q.weight"));
    LayerStructure layers = analyzeLayers(*module);
    EXPECT_FALSE(layers.uniform);
    EXPECT_EQ(layers.why, "layers 0 and 2 share parameter 'h.0.attn.q.weight'");
  }
  {
    // Layer 1's MLP scales its activation: another op sequence.
    OwningOpRef<ModuleOp> module = build(config);
    GeluOp second;
    int seen = 0;
    module->walk([&](GeluOp gelu) {
      if (seen++ == 1)
        second = gelu;
    });
    ASSERT_TRUE(second);
    OpBuilder builder(second);
    builder.setInsertionPointAfter(second);
    auto scaled = ScaleOp::create(builder, second.getLoc(), second.getResult(),
                                  builder.getF64FloatAttr(0.5));
    second.getResult().replaceAllUsesExcept(scaled.getResult(), scaled);
    ASSERT_TRUE(succeeded(verify(*module)));
    LayerStructure layers = analyzeLayers(*module);
    EXPECT_FALSE(layers.uniform);
    EXPECT_NE(layers.why.find("layer 1 differs from layer 0 at its op #"),
              std::string::npos)
        << layers.why;
  }
}

} // namespace
