//===- ModelBuilder.cpp - write a model's forward + loss as train IR -------===//

#include "trainmem/Model/ModelBuilder.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace mlir::train;

int64_t mlir::train::defaultFfn(const ModelConfig &config) {
  if (config.arch == Architecture::GPT)
    return 4 * config.hidden;
  // Llama's FeedForward: 2/3 of 4h (SwiGLU has three matrices), times the
  // multiplier, rounded up to a multiple.
  int64_t inner = 2 * (4 * config.hidden) / 3;
  inner = static_cast<int64_t>(config.ffnMultiplier * inner);
  int64_t multiple = std::max<int64_t>(1, config.ffnMultipleOf);
  return multiple * ((inner + multiple - 1) / multiple);
}

namespace {

/// A preset's name, architecture and transformer shape.
ModelConfig shaped(std::string name, Architecture arch, int64_t layers,
                   int64_t hidden, int64_t heads, int64_t kvHeads) {
  ModelConfig c;
  c.name = std::move(name);
  c.arch = arch;
  c.layers = layers;
  c.hidden = hidden;
  c.heads = heads;
  c.kvHeads = kvHeads;
  return c;
}

ModelConfig gpt(std::string name, int64_t layers, int64_t hidden, int64_t heads,
                int64_t positions, int64_t batch) {
  ModelConfig c =
      shaped(std::move(name), Architecture::GPT, layers, hidden, heads, heads);
  c.ffn = defaultFfn(c);
  c.vocab = 50257;
  c.positions = c.seq = positions;
  c.batch = batch;
  c.dtype = "bf16";
  c.dropout = 0.1;
  return c;
}

ModelConfig llama(std::string name, int64_t layers, int64_t hidden,
                  int64_t heads, int64_t kvHeads, double ffnMultiplier,
                  int64_t ffnMultipleOf) {
  ModelConfig c = shaped(std::move(name), Architecture::Llama, layers, hidden,
                         heads, kvHeads);
  c.ffnMultiplier = ffnMultiplier;
  c.ffnMultipleOf = ffnMultipleOf;
  c.ffn = defaultFfn(c);
  c.vocab = 32000;
  c.seq = 4096;
  c.batch = 1;
  c.dtype = "bf16";
  c.dropout = 0.0;
  return c;
}

ModelConfig gpt1t() {
  ModelConfig c = gpt("gpt-1t", 128, 25600, 160, 2048, 1);
  c.vocab = 51200;
  return c;
}

std::vector<ModelConfig> presets() {
  ModelConfig tiny = gpt("tiny", 2, 64, 4, 64, 4);
  tiny.vocab = 256; // bytes
  tiny.dtype = "f32";
  tiny.dropout = 0.0;
  return {
      tiny,
      gpt("gpt2-124m", 12, 768, 12, 1024, 8),
      gpt("gpt2-350m", 24, 1024, 16, 1024, 8),
      gpt("gpt2-774m", 36, 1280, 20, 1024, 8),
      gpt("gpt2-1.5b", 48, 1600, 25, 1024, 8),
      gpt("gpt3-175b", 96, 12288, 96, 2048, 1),
      // Narayanan et al. 2021 (Megatron-LM on 3,072 A100s), Table 1's
      // 1T-parameter row: 128 layers, hidden 25600, 160 heads, sequence
      // 2048, a vocabulary of 51,200.
      gpt1t(),
      // Llama-2's params.json: multiple_of 256 (7b, 13b); 4096 and
      // ffn_dim_multiplier 1.3 (70b).
      llama("llama2-7b", 32, 4096, 32, 32, 1.0, 256),
      llama("llama2-13b", 40, 5120, 40, 40, 1.0, 256),
      llama("llama2-70b", 80, 8192, 64, 8, 1.3, 4096),
  };
}

/// Builds one model graph. Parameters become block arguments as they are
/// first used, so the function signature is known only at the end.
class GraphBuilder {
public:
  GraphBuilder(MLIRContext *context, const ModelConfig &config)
      : config(config), builder(context) {
    if (config.dtype == "f32")
      elementType = builder.getF32Type();
    else if (config.dtype == "f16")
      elementType = builder.getF16Type();
    else
      elementType = builder.getBF16Type();
  }

  OwningOpRef<ModuleOp> build();

private:
  const ModelConfig &config;
  OpBuilder builder;
  Type elementType;
  Block *entry = nullptr;
  SmallVector<std::string> argNames;
  SmallVector<bool> argIsParam;
  SmallVector<InitAttr> argInits; // parameters: how they start
  int64_t nextDropoutOffset = 0;

  Location loc(const Twine &name) {
    return NameLoc::get(builder.getStringAttr(name));
  }
  RankedTensorType tensor(ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, elementType);
  }
  Value addArgument(RankedTensorType type, const Twine &name, bool isParam,
                    InitAttr init = {}) {
    argNames.push_back(name.str());
    argIsParam.push_back(isParam);
    argInits.push_back(init);
    return entry->addArgument(type, loc(name));
  }
  /// A parameter and its reference initialization.
  Value param(ArrayRef<int64_t> shape, const Twine &name, InitAttr init) {
    return addArgument(tensor(shape), name, /*isParam=*/true, init);
  }
  InitAttr zeros() { return InitAttr::get(builder.getContext(), InitKind::zeros, llvm::APFloat(0.0)); }
  InitAttr ones() { return InitAttr::get(builder.getContext(), InitKind::ones, llvm::APFloat(0.0)); }
  /// Normal(0, std); matrices use 0.02 (GPT-2, Llama).
  InitAttr normal(double std = kInitStd) {
    return InitAttr::get(builder.getContext(), InitKind::normal,
                         llvm::APFloat(std));
  }
  /// GPT-2's scaled init of the projections into the residual stream:
  /// N(0, 0.02 / sqrt(2 · layers)).
  InitAttr residualNormal() {
    return normal(kInitStd / std::sqrt(2.0 * static_cast<double>(config.layers)));
  }
  static constexpr double kInitStd = 0.02;

  Value matmul(Value lhs, Value rhs, bool transposeRhs, const Twine &name);
  Value linear(Value x, int64_t in, int64_t out, const Twine &prefix,
               bool bias, InitAttr init);
  Value linear(Value x, int64_t in, int64_t out, const Twine &prefix,
               bool bias) {
    return linear(x, in, out, prefix, bias, normal());
  }
  Value dropout(Value x, const Twine &name);
  Value norm(Value x, const Twine &prefix);
  Value reshape(Value x, ArrayRef<int64_t> shape, const Twine &name);
  Value transpose(Value x, ArrayRef<int64_t> perm, const Twine &name);
  Value toHeads(Value x, int64_t heads, const Twine &name);

  Value embeddingBlock(Value tokens, Value &tokenTable);
  Value attentionBlock(Value x, int64_t layer);
  Value mlpBlock(Value x, int64_t layer);
  Value headBlock(Value x, Value targets, Value tokenTable);

  template <typename BodyFn>
  Value block(BlockKind kind, std::optional<int64_t> layer, Type resultType,
              const Twine &name, BodyFn body);
};

template <typename BodyFn>
Value GraphBuilder::block(BlockKind kind, std::optional<int64_t> layer,
                          Type resultType, const Twine &name, BodyFn body) {
  auto op = BlockOp::create(builder, loc(name), TypeRange{resultType}, kind,
                            layer ? builder.getI64IntegerAttr(*layer)
                                  : IntegerAttr());
  Block *bodyBlock = builder.createBlock(&op.getBody());
  Value result = body();
  YieldOp::create(builder, loc(name), ValueRange{result});
  builder.setInsertionPointAfter(op);
  (void)bodyBlock;
  return op.getResult(0);
}

Value GraphBuilder::matmul(Value lhs, Value rhs, bool transposeRhs,
                           const Twine &name) {
  // The result type is inferred (InferTypeOpAdaptor).
  return MatmulOp::create(builder, loc(name), lhs, rhs,
                          /*transpose_lhs=*/false, transposeRhs);
}

Value GraphBuilder::linear(Value x, int64_t in, int64_t out,
                           const Twine &prefix, bool bias, InitAttr init) {
  Value weight = param({in, out}, prefix + ".weight", init);
  Value y = matmul(x, weight, /*transposeRhs=*/false, prefix);
  if (bias)
    y = BiasAddOp::create(builder, loc(prefix + ".bias_add"), y,
                          param({out}, prefix + ".bias", zeros()));
  return y;
}

Value GraphBuilder::dropout(Value x, const Twine &name) {
  if (config.dropout <= 0.0)
    return x;
  auto op = DropoutOp::create(builder, loc(name), x, config.dropout,
                              /*seed=*/0, nextDropoutOffset++);
  return op.getResult();
}

Value GraphBuilder::norm(Value x, const Twine &prefix) {
  int64_t h = config.hidden;
  if (config.arch == Architecture::GPT) {
    Value gamma = param({h}, prefix + ".weight", ones());
    Value beta = param({h}, prefix + ".bias", zeros());
    return LayerNormOp::create(builder, loc(prefix), x, gamma, beta,
                               config.normEpsilon);
  }
  Value gamma = param({h}, prefix + ".weight", ones());
  return RMSNormOp::create(builder, loc(prefix), x, gamma, config.normEpsilon);
}

Value GraphBuilder::reshape(Value x, ArrayRef<int64_t> shape,
                            const Twine &name) {
  return ReshapeOp::create(builder, loc(name), tensor(shape), x);
}

Value GraphBuilder::transpose(Value x, ArrayRef<int64_t> perm,
                              const Twine &name) {
  ArrayRef<int64_t> in = cast<RankedTensorType>(x.getType()).getShape();
  SmallVector<int64_t> shape;
  for (int64_t p : perm)
    shape.push_back(in[p]);
  return TransposeOp::create(builder, loc(name), tensor(shape), x,
                             builder.getDenseI64ArrayAttr(perm));
}

/// [B, S, n·d] -> [B, n, S, d].
Value GraphBuilder::toHeads(Value x, int64_t heads, const Twine &name) {
  int64_t b = config.batch, s = config.seq;
  int64_t d = config.hidden / config.heads;
  Value split = reshape(x, {b, s, heads, d}, name + ".split_heads");
  return transpose(split, {0, 2, 1, 3}, name + ".heads_first");
}

Value GraphBuilder::embeddingBlock(Value tokens, Value &tokenTable) {
  int64_t b = config.batch, s = config.seq, h = config.hidden;
  bool isGpt = config.arch == Architecture::GPT;
  return block(BlockKind::embedding, std::nullopt, tensor({b, s, h}),
               "embedding", [&]() -> Value {
                 tokenTable = param({config.vocab, h},
                                    isGpt ? "wte" : "tok_embeddings", normal());
                 Value x = EmbeddingOp::create(builder, loc("embedding.tokens"),
                                               tensor({b, s, h}), tokenTable,
                                               tokens, TensorSplitAttr());
                 if (!isGpt)
                   return x;
                 Value table = param({config.positions, h}, "wpe", normal());
                 auto positionType =
                     RankedTensorType::get({s}, builder.getI32Type());
                 Value positions = IotaOp::create(
                     builder, loc("embedding.positions"), positionType);
                 Value pos = EmbeddingOp::create(
                     builder, loc("embedding.position_rows"), tensor({s, h}),
                     table, positions, TensorSplitAttr());
                 x = BiasAddOp::create(builder, loc("embedding.add_positions"),
                                       x, pos);
                 return dropout(x, "embedding.dropout");
               });
}

Value GraphBuilder::attentionBlock(Value x, int64_t layer) {
  int64_t b = config.batch, s = config.seq, h = config.hidden;
  int64_t a = config.heads, kv = config.kvHeads, d = h / a;
  bool isGpt = config.arch == Architecture::GPT;
  std::string p = (isGpt ? "h." : "layers.") + std::to_string(layer);
  return block(BlockKind::attention, layer, x.getType(), p + ".attn",
               [&]() -> Value {
    Value n = norm(x, p + (isGpt ? ".ln_1" : ".attention_norm"));
    std::string ap = p + (isGpt ? ".attn" : ".attention");
    Value q = linear(n, h, h, ap + (isGpt ? ".q" : ".wq"), isGpt);
    Value k = linear(n, h, kv * d, ap + (isGpt ? ".k" : ".wk"), isGpt);
    Value v = linear(n, h, kv * d, ap + (isGpt ? ".v" : ".wv"), isGpt);
    q = toHeads(q, a, ap + ".q");
    k = toHeads(k, kv, ap + ".k");
    v = toHeads(v, kv, ap + ".v");
    if (!isGpt) {
      q = RopeOp::create(builder, loc(ap + ".q.rope"), q,
                         builder.getF64FloatAttr(config.ropeTheta), UnitAttr(),
                         UnitAttr(), ContextSplitAttr());
      k = RopeOp::create(builder, loc(ap + ".k.rope"), k,
                         builder.getF64FloatAttr(config.ropeTheta), UnitAttr(),
                         UnitAttr(), ContextSplitAttr());
    }
    if (kv != a) {
      // Grouped-query attention: each of the kv heads serves a/kv query
      // heads, expressed as a broadcast batch dimension of the matmuls.
      int64_t group = a / kv;
      q = reshape(q, {b, kv, group, s, d}, ap + ".q.groups");
      k = reshape(k, {b, kv, 1, s, d}, ap + ".k.groups");
      v = reshape(v, {b, kv, 1, s, d}, ap + ".v.groups");
    }
    Value scores = matmul(q, k, /*transposeRhs=*/true, ap + ".scores");
    scores = ScaleOp::create(builder, loc(ap + ".scale"), scores,
                             builder.getF64FloatAttr(1.0 / std::sqrt(d)));
    auto probs = SoftmaxOp::create(builder, loc(ap + ".softmax"), scores);
    probs.setCausal(true);
    Value attn = dropout(probs, ap + ".attn_dropout");
    Value context = matmul(attn, v, /*transposeRhs=*/false, ap + ".context");
    if (kv != a)
      context = reshape(context, {b, a, s, d}, ap + ".context.heads");
    context = transpose(context, {0, 2, 1, 3}, ap + ".context.seq_first");
    context = reshape(context, {b, s, h}, ap + ".context.merge_heads");
    Value out = linear(context, h, h, ap + (isGpt ? ".proj" : ".wo"), isGpt,
                       isGpt ? residualNormal() : normal());
    out = dropout(out, ap + ".resid_dropout");
    return AddOp::create(builder, loc(p + ".attn.residual"), x, out);
  });
}

Value GraphBuilder::mlpBlock(Value x, int64_t layer) {
  int64_t h = config.hidden, f = config.ffn;
  bool isGpt = config.arch == Architecture::GPT;
  std::string p = (isGpt ? "h." : "layers.") + std::to_string(layer);
  return block(BlockKind::mlp, layer, x.getType(), p + ".mlp", [&]() -> Value {
    if (isGpt) {
      Value n = norm(x, p + ".ln_2");
      Value up = linear(n, h, f, p + ".mlp.fc", true);
      Value act =
          GeluOp::create(builder, loc(p + ".mlp.gelu"), up, /*exact=*/false);
      Value down = linear(act, f, h, p + ".mlp.proj", true, residualNormal());
      down = dropout(down, p + ".mlp.dropout");
      return AddOp::create(builder, loc(p + ".mlp.residual"), x, down);
    }
    Value n = norm(x, p + ".ffn_norm");
    Value gate = linear(n, h, f, p + ".feed_forward.w1", false);
    Value up = linear(n, h, f, p + ".feed_forward.w3", false);
    Value act = SiluOp::create(builder, loc(p + ".feed_forward.silu"), gate);
    Value gated = MulOp::create(builder, loc(p + ".feed_forward.gate"), act, up);
    Value down = linear(gated, f, h, p + ".feed_forward.w2", false);
    return AddOp::create(builder, loc(p + ".mlp.residual"), x, down);
  });
}

Value GraphBuilder::headBlock(Value x, Value targets, Value tokenTable) {
  bool isGpt = config.arch == Architecture::GPT;
  auto lossType = RankedTensorType::get({}, builder.getF32Type());
  return block(BlockKind::head, std::nullopt, lossType, "head",
               [&]() -> Value {
    Value n = norm(x, isGpt ? "ln_f" : "norm");
    // GPT ties the output projection to the token table; Llama has its own
    // [vocab, hidden] output matrix.
    Value table = isGpt ? tokenTable
                        : param({config.vocab, config.hidden}, "output",
                                normal());
    Value logits = matmul(n, table, /*transposeRhs=*/true, "head.logits");
    auto countType = RankedTensorType::get({}, builder.getI64Type());
    auto loss = CrossEntropyOp::create(
        builder, loc("head.cross_entropy"), lossType, countType, logits,
        targets, builder.getI64IntegerAttr(config.ignoreIndex),
        /*label_smoothing=*/builder.getF64FloatAttr(0.0));
    return MeanLossOp::create(builder, loc("head.mean_loss"),
                              loss.getLossSum(), loss.getCount(),
                              /*weight=*/Value(), builder.getF64FloatAttr(1.0));
  });
}

OwningOpRef<ModuleOp> GraphBuilder::build() {
  MLIRContext *context = builder.getContext();
  context->getOrLoadDialect<TrainDialect>();
  context->getOrLoadDialect<func::FuncDialect>();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc(config.name));

  NamedAttrList modelInfo;
  modelInfo.append("name", builder.getStringAttr(config.name));
  modelInfo.append("arch", builder.getStringAttr(
                               config.arch == Architecture::GPT ? "gpt"
                                                                : "llama"));
  modelInfo.append("layers", builder.getI64IntegerAttr(config.layers));
  modelInfo.append("hidden", builder.getI64IntegerAttr(config.hidden));
  modelInfo.append("heads", builder.getI64IntegerAttr(config.heads));
  modelInfo.append("kv_heads", builder.getI64IntegerAttr(config.kvHeads));
  modelInfo.append("ffn", builder.getI64IntegerAttr(config.ffn));
  modelInfo.append("vocab", builder.getI64IntegerAttr(config.vocab));
  modelInfo.append("seq", builder.getI64IntegerAttr(config.seq));
  modelInfo.append("batch", builder.getI64IntegerAttr(config.batch));
  modelInfo.append("dtype", builder.getStringAttr(config.dtype));
  modelInfo.append("dropout", builder.getF64FloatAttr(config.dropout));
  if (config.arch == Architecture::GPT)
    modelInfo.append("positions", builder.getI64IntegerAttr(config.positions));
  (*module)->setAttr(kModelAttrName, modelInfo.getDictionary(context));

  builder.setInsertionPointToEnd(module->getBody());
  auto func = func::FuncOp::create(builder, loc("forward"), "forward",
                                   builder.getFunctionType({}, {}));
  entry = func.addEntryBlock();
  builder.setInsertionPointToEnd(entry);

  auto idType = RankedTensorType::get({config.batch, config.seq},
                                      builder.getI32Type());
  Value tokens = addArgument(idType, "tokens", /*isParam=*/false);
  Value targets = addArgument(idType, "targets", /*isParam=*/false);

  Value tokenTable;
  Value x = embeddingBlock(tokens, tokenTable);
  for (int64_t layer = 0; layer < config.layers; ++layer) {
    x = attentionBlock(x, layer);
    x = mlpBlock(x, layer);
  }
  Value loss = headBlock(x, targets, tokenTable);
  func::ReturnOp::create(builder, loc("return"), loss);

  func.setFunctionType(
      builder.getFunctionType(entry->getArgumentTypes(), {loss.getType()}));
  // Every argument's attributes at once: each setArgAttr would build (and
  // the context keep) an array of all of them, quadratic in the arguments
  // (82 MB at 200 layers, 16 GB at 2000).
  SmallVector<DictionaryAttr> argAttrs;
  argAttrs.reserve(argNames.size());
  for (unsigned i = 0; i < argNames.size(); ++i) {
    SmallVector<NamedAttribute, 2> attrs{builder.getNamedAttr(
        argIsParam[i] ? kParamAttrName : kInputAttrName,
        builder.getStringAttr(argNames[i]))};
    if (argInits[i])
      attrs.push_back(builder.getNamedAttr(kInitAttrName, argInits[i]));
    argAttrs.push_back(builder.getDictionaryAttr(attrs));
  }
  func.setAllArgAttrs(argAttrs);
  return module;
}

} // namespace

std::vector<std::string> mlir::train::getPresetNames() {
  std::vector<std::string> names;
  for (const ModelConfig &config : presets())
    names.push_back(config.name);
  return names;
}

std::optional<ModelConfig> mlir::train::getPreset(llvm::StringRef name) {
  for (const ModelConfig &config : presets())
    if (config.name == name)
      return config;
  return std::nullopt;
}

bool mlir::train::validateConfig(const ModelConfig &c, std::string &why) {
  auto positive = [&](int64_t value, const char *flag) {
    if (value > 0)
      return true;
    why = std::string(flag) + " must be > 0, got " + std::to_string(value);
    return false;
  };
  if (!positive(c.layers, "--layers") || !positive(c.hidden, "--hidden") ||
      !positive(c.heads, "--heads") || !positive(c.kvHeads, "--kv-heads") ||
      !positive(c.ffn, "--ffn") || !positive(c.vocab, "--vocab") ||
      !positive(c.seq, "--seq") || !positive(c.batch, "--batch"))
    return false;
  if (c.hidden % c.heads != 0) {
    why = "--heads " + std::to_string(c.heads) + " does not divide --hidden " +
          std::to_string(c.hidden);
    return false;
  }
  if (c.heads % c.kvHeads != 0) {
    why = "--kv-heads " + std::to_string(c.kvHeads) +
          " does not divide --heads " + std::to_string(c.heads);
    return false;
  }
  if (c.arch == Architecture::GPT && c.kvHeads != c.heads) {
    why = "--kv-heads must equal --heads for GPT models (grouped-query "
          "attention is a Llama feature)";
    return false;
  }
  if (c.arch == Architecture::Llama && (c.hidden / c.heads) % 2 != 0) {
    why = "head dimension " + std::to_string(c.hidden / c.heads) +
          " must be even for rotary embeddings";
    return false;
  }
  if (c.arch == Architecture::GPT && c.seq > c.positions) {
    why = "--seq " + std::to_string(c.seq) + " exceeds the " +
          std::to_string(c.positions) +
          " learned positions (raise --positions)";
    return false;
  }
  if (c.dtype != "f32" && c.dtype != "bf16" && c.dtype != "f16") {
    why = "--dtype must be f32, bf16 or f16, got '" + c.dtype + "'";
    return false;
  }
  if (!(c.dropout >= 0.0 && c.dropout < 1.0)) {
    why = "--dropout must be in [0, 1), got " + std::to_string(c.dropout);
    return false;
  }
  return true;
}

OwningOpRef<ModuleOp> mlir::train::buildModel(MLIRContext *context,
                                               const ModelConfig &config) {
  return GraphBuilder(context, config).build();
}
