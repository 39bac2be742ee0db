//===- DeepSpeed.cpp - DeepSpeed configs in and out of the planner
//---------===//
//
// A DeepSpeed config's decisions as the planner's candidate, and a
// candidate as a DeepSpeed config (docs/Planner.md "DeepSpeed configs and
// Megatron-LM arguments").
//
//===----------------------------------------------------------------------===//

#include "trainmem/Plan/DeepSpeed.h"
#include "trainmem/Plan/Json.h"
#include "trainmem/Dialect/Train/Transforms/OptimizerRegistry.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <climits>

namespace mlir {
namespace train {

static llvm::Error makeError(std::string message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

namespace {

/// What the keys of a config say, as they are read.
struct Reading {
  DeepSpeedPlan plan;
  std::optional<int64_t> micro, accumulation, batch;
  bool bf16 = false, fp16 = false;
  int64_t ranks = 1;
  std::vector<std::string> &warnings;
  /// train-autodiff options read so far.
  std::vector<std::string> recipe = {};
};

/// Names every key of `o` but those `known` says it models.
void warnUnknown(Reading &r, const llvm::json::Object &o,
                 llvm::StringRef prefix,
                 llvm::function_ref<bool(llvm::StringRef)> known) {
  for (const auto &[key, value] : o)
    if (!known(key))
      r.warnings.push_back((prefix + "." + llvm::StringRef(key)).str());
}

/// train_micro_batch_size_per_gpu, gradient_accumulation_steps,
/// train_batch_size: positive integers.
llvm::Error readCount(llvm::StringRef key, const llvm::json::Value &value,
                      std::optional<int64_t> &out) {
  std::optional<int64_t> n = value.getAsInteger();
  if (!n || *n < 1)
    return makeError("'" + key.str() + "' must be a positive integer");
  out = *n;
  return llvm::Error::success();
}

/// bf16 / fp16: {"enabled": true|false}; without it, f32. fp16's
/// loss-scaling keys are the scale's rule: no memory.
llvm::Error readPrecision(Reading &r, llvm::StringRef key,
                          const llvm::json::Value &value) {
  static constexpr llvm::StringLiteral kLossScaleKeys[] = {
      "loss_scale", "initial_scale_power",    "loss_scale_window",
      "hysteresis", "consecutive_hysteresis", "min_loss_scale",
      "auto_cast"};
  const llvm::json::Object *o = value.getAsObject();
  if (!o)
    return makeError("'" + key.str() +
                     "' must be an object such as {\"enabled\": "
                     "true} (DeepSpeed reads its \"enabled\" key)");
  std::optional<bool> enabled = false;
  if (const llvm::json::Value *v = o->get("enabled")) {
    enabled = v->getAsBoolean();
    if (!enabled) {
      std::optional<llvm::StringRef> text = v->getAsString();
      return makeError(key.str() + ".enabled must be true or false" +
                       (text && *text == "auto"
                            ? std::string(": \"auto\" is filled in by the "
                                          "Hugging Face Trainer from its own "
                                          "arguments; give the value it "
                                          "resolves to")
                            : std::string()));
    }
  }
  (key == "bf16" ? r.bf16 : r.fp16) = *enabled;
  warnUnknown(r, *o, key, [&](llvm::StringRef sub) {
    return sub == "enabled" ||
           (key == "fp16" && llvm::is_contained(kLossScaleKeys, sub));
  });
  return llvm::Error::success();
}

/// zero_optimization: the stage and the optimizer's offload (DeepSpeed's
/// runs the update on the CPU); parameter and NVMe offload are not
/// modeled.
llvm::Error readZero(Reading &r, const llvm::json::Value &value) {
  const llvm::json::Object *o = value.getAsObject();
  if (!o)
    return makeError("'zero_optimization' must be an object");
  for (const auto &[sub, v] : *o) {
    if (sub == "stage") {
      std::optional<int64_t> stage = v.getAsInteger();
      if (!stage || *stage < 0 || *stage > 3)
        return makeError("zero_optimization.stage must be 0, 1, 2 or 3 (the "
                         "stages this project models)");
      if (r.ranks == 1 && *stage > 0)
        return makeError(llvm::formatv("zero_optimization.stage {0} "
                                       "partitions over ranks: give --ranks",
                                       *stage));
      r.plan.candidate.stage = r.ranks > 1 ? *stage : -1;
    } else if (sub == "offload_optimizer") {
      const llvm::json::Object *offload = v.getAsObject();
      std::optional<llvm::StringRef> device =
          offload && offload->get("device")
              ? offload->get("device")->getAsString()
              : std::nullopt;
      if (!device || (*device != "cpu" && *device != "none"))
        return makeError("zero_optimization.offload_optimizer.device must be "
                         "cpu or none (NVMe is not modeled)");
      if (*device == "cpu")
        r.plan.candidate.offload = PlanOffload::statesAndUpdate;
      warnUnknown(r, *offload, "zero_optimization.offload_optimizer",
                  [](llvm::StringRef key) { return key == "device"; });
    } else if (sub == "offload_param") {
      return makeError(
          "zero_optimization.offload_param: parameter offload is not "
          "modeled (only the optimizer's, train-offload-optimizer)");
    } else {
      r.warnings.push_back("zero_optimization." + sub.str());
    }
  }
  return llvm::Error::success();
}

/// data_types: grad_accum_dtype, the micro-batches' gradient sums (fp32,
/// or the model's 16-bit type: train-grad-accum accumulate-dtype).
llvm::Error readDataTypes(Reading &r, const llvm::json::Value &value) {
  const llvm::json::Object *o = value.getAsObject();
  if (!o)
    return makeError("'data_types' must be an object such as "
                     "{\"grad_accum_dtype\": \"bf16\"}");
  if (const llvm::json::Value *v = o->get("grad_accum_dtype")) {
    std::optional<llvm::StringRef> name = v->getAsString();
    if (name && *name == "fp32")
      r.plan.candidate.sumDtype = AccumDtype::f32;
    else if (name && *name == "bf16")
      r.plan.candidate.sumDtype = AccumDtype::bf16;
    else if (name && *name == "fp16")
      r.plan.candidate.sumDtype = AccumDtype::f16;
    else
      return makeError("data_types.grad_accum_dtype must be fp32, bf16 or "
                       "fp16");
  }
  warnUnknown(r, *o, "data_types",
              [](llvm::StringRef sub) { return sub == "grad_accum_dtype"; });
  return llvm::Error::success();
}

/// activation_checkpointing: DeepSpeed checkpoints what the model's code
/// wraps, usually whole layers: full recompute. Its own keys change where
/// the saved activations live (partitioned over model-parallel ranks, CPU,
/// contiguous buffers): off, they are what the planner models.
llvm::Error readCheckpointing(Reading &r, const llvm::json::Value &value) {
  r.plan.candidate.remat = PlanRemat::full;
  if (const llvm::json::Object *o = value.getAsObject())
    for (const auto &[sub, v] : *o) {
      bool off = v.getAsBoolean() == std::optional<bool>(false);
      if (!(off && (sub == "partition_activations" ||
                    sub == "contiguous_memory_optimization" ||
                    sub == "cpu_checkpointing")))
        r.warnings.push_back("activation_checkpointing." + sub.str());
    }
  return llvm::Error::success();
}

/// A number the recipe takes, as train-autodiff's option `option`.
llvm::Error readRecipeNumber(Reading &r, llvm::StringRef key,
                             const llvm::json::Value &value,
                             llvm::StringRef option) {
  std::optional<double> number = value.getAsNumber();
  if (!number || !(*number >= 0))
    return makeError(key.str() + " must be a number >= 0");
  r.recipe.push_back((option + "=" + shortestNumber(*number)).str());
  return llvm::Error::success();
}

/// optimizer.params: the recipe's rate, betas, epsilon and weight decay.
llvm::Error readOptimizerParams(Reading &r, const llvm::json::Value &value) {
  const llvm::json::Object *o = value.getAsObject();
  if (!o)
    return makeError("optimizer.params must be an object");
  // In the keys' order: the recipe's text does not depend on the map's.
  std::vector<llvm::StringRef> keys;
  for (const auto &entry : *o)
    keys.push_back(entry.first);
  llvm::sort(keys);
  auto readParam = [&](llvm::StringRef key,
                       const llvm::json::Value &v) -> llvm::Error {
    if (key == "lr")
      return readRecipeNumber(r, "optimizer.params.lr", v, "lr");
    if (key == "eps")
      return readRecipeNumber(r, "optimizer.params.eps", v, "eps");
    if (key == "weight_decay")
      return readRecipeNumber(r, "optimizer.params.weight_decay", v,
                              "weight-decay");
    if (key == "betas") {
      const llvm::json::Array *betas = v.getAsArray();
      if (!betas || betas->size() != 2)
        return makeError("optimizer.params.betas must be [beta1, beta2]");
      if (llvm::Error e = readRecipeNumber(r, "optimizer.params.betas[0]",
                                           (*betas)[0], "beta1"))
        return e;
      return readRecipeNumber(r, "optimizer.params.betas[1]", (*betas)[1],
                              "beta2");
    }
    r.warnings.push_back(("optimizer.params." + key).str());
    return llvm::Error::success();
  };
  for (llvm::StringRef key : keys)
    if (llvm::Error error = readParam(key, *o->get(key)))
      return error;
  return llvm::Error::success();
}

/// optimizer: Adam or AdamW, its params the recipe's.
llvm::Error readOptimizer(Reading &r, const llvm::json::Value &value) {
  const llvm::json::Object *o = value.getAsObject();
  std::optional<llvm::StringRef> type =
      o && o->get("type") ? o->get("type")->getAsString() : std::nullopt;
  if (!type ||
      !(type->equals_insensitive("adamw") || type->equals_insensitive("adam")))
    return makeError("optimizer.type must be Adam or AdamW (the optimizer the "
                     "planner models)");
  warnUnknown(r, *o, "optimizer", [](llvm::StringRef key) {
    return key == "type" || key == "params";
  });
  if (const llvm::json::Value *params = o->get("params"))
    return readOptimizerParams(r, *params);
  return llvm::Error::success();
}

/// The keys read so far as one plan: the dtype, and the batch they imply.
llvm::Expected<DeepSpeedPlan> finish(Reading &r) {
  if (r.bf16 && r.fp16)
    return makeError("fp16 and bf16 are both enabled (DeepSpeed refuses "
                     "this too): enable one");
  // DeepSpeed trains f32 unless one of them is enabled.
  r.plan.dtype = r.bf16 ? "bf16" : r.fp16 ? "f16" : "f32";
  // 16-bit sums are of 16-bit gradients (train-grad-accum sums f32 ones in
  // f32).
  AccumDtype sums = r.plan.candidate.sumDtype;
  if (sums != AccumDtype::f32 && accumDtypeName(sums) != r.plan.dtype)
    return makeError(
        llvm::formatv("data_types.grad_accum_dtype {0} with {1} gradients: "
                      "sum them in fp32 or enable {0}",
                      sums == AccumDtype::bf16 ? "bf16" : "fp16",
                      r.plan.dtype == "f16" ? "fp16" : r.plan.dtype));
  if (!r.micro)
    return makeError("the config has no train_micro_batch_size_per_gpu");
  int64_t micro = *r.micro;
  int64_t accumulation = r.accumulation.value_or(1);
  r.plan.candidate.microBatch = micro;
  r.plan.candidate.accumulation = accumulation;
  if (accumulation > INT64_MAX / micro / r.ranks)
    return makeError("train_micro_batch_size_per_gpu x "
                     "gradient_accumulation_steps x ranks does not fit in 64 "
                     "bits");
  int64_t implied = micro * accumulation * r.ranks;
  if (r.batch && *r.batch != implied)
    return makeError(llvm::formatv("train_batch_size {0} is not micro-batch "
                                   "{1} x accumulation {2} x ranks {3} = {4}",
                                   *r.batch, micro, accumulation, r.ranks,
                                   implied));
  r.plan.globalBatch = implied;
  // DeepSpeed clips only where the config says so (gradient_clipping 0:
  // none); what it does not say of the optimizer is train-autodiff's
  // default.
  if (llvm::none_of(r.recipe, [](const std::string &word) {
        return llvm::StringRef(word).starts_with("clip-norm=");
      }))
    r.recipe.push_back("clip-norm=0");
  r.plan.recipe = llvm::join(r.recipe, " ");
  return r.plan;
}

} // namespace

llvm::Expected<DeepSpeedPlan>
readDeepSpeed(llvm::StringRef text, int64_t rankCount,
              std::vector<std::string> &warnings) {
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed)
    return makeError("not JSON: " + llvm::toString(parsed.takeError()));
  const llvm::json::Object *config = parsed->getAsObject();
  if (!config)
    return makeError("a DeepSpeed config is a JSON object");
  Reading r{DeepSpeedPlan(), {}, {}, {}, false, false, rankCount, warnings};
  r.plan.candidate.stage = rankCount > 1 ? 0 : -1;
  auto read = [&](llvm::StringRef k,
                  const llvm::json::Value &value) -> llvm::Error {
    if (k == "train_micro_batch_size_per_gpu")
      return readCount(k, value, r.micro);
    if (k == "gradient_accumulation_steps")
      return readCount(k, value, r.accumulation);
    if (k == "train_batch_size")
      return readCount(k, value, r.batch);
    if (k == "bf16" || k == "fp16")
      return readPrecision(r, k, value);
    if (k == "zero_optimization")
      return readZero(r, value);
    if (k == "activation_checkpointing")
      return readCheckpointing(r, value);
    if (k == "data_types")
      return readDataTypes(r, value);
    if (k == "optimizer")
      return readOptimizer(r, value);
    if (k == "gradient_clipping")
      return readRecipeNumber(r, k, value, "clip-norm");
    warnings.push_back(k.str());
    return llvm::Error::success();
  };
  for (const auto &[key, value] : *config)
    if (llvm::Error error = read(key, value))
      return std::move(error);
  return finish(r);
}

std::vector<std::string> deepSpeedCannotExpress(const PlanCandidate &c,
                                                const PlanRecipe &recipe) {
  std::vector<std::string> reasons;
  if (c.remat == PlanRemat::selective || c.remat == PlanRemat::budget)
    reasons.push_back(stringifyPlanRemat(c.remat).str() +
                      " recompute (activation_checkpointing turns on the "
                      "checkpointing the model's code does)");
  if (c.offload == PlanOffload::states)
    reasons.push_back("optimizer state on the host with the update on the "
                      "device (offload_optimizer runs the update on the "
                      "CPU: states+update)");
  if (c.eightBit)
    reasons.push_back("8-bit optimizer state (bitsandbytes' AdamW8bit is "
                      "passed to deepspeed.initialize, not configured)");
  if (c.offloadActivations && c.remat != PlanRemat::full)
    reasons.push_back("activation offload without full recompute "
                      "(activation_checkpointing.cpu_checkpointing moves the "
                      "checkpoints only)");
  if (c.releaseGradients)
    reasons.push_back("gradient release");
  if (c.tensorParallel > 1)
    reasons.push_back(llvm::formatv(
        "tensor parallelism (size {0}: DeepSpeed takes it from Megatron-LM's "
        "model code, --emit megatron-args)",
        c.tensorParallel));
  if (c.virtualStages > 1)
    reasons.push_back(llvm::formatv(
        "the interleaved pipeline schedule ({0} chunks per stage: "
        "DeepSpeed's pipeline engine runs 1F1B over one chunk per stage)",
        c.virtualStages));
  if (c.contextParallel > 1)
    reasons.push_back(llvm::formatv(
        "context parallelism (size {0}: DeepSpeed has no key for it; its "
        "Ulysses sequence parallelism is an all-to-all over heads that the "
        "model code sets up, not a configuration key)",
        c.contextParallel));
  const OptimizerInfo *optimizer = lookupOptimizer(recipe.optimizer);
  if (!optimizer || optimizer->deepSpeedType.empty())
    reasons.push_back("the " + recipe.optimizer + " optimizer");
  if (recipe.hasSchedule())
    reasons.push_back("the recipe's rate schedule (warm-up, cosine decay): "
                      "its scheduler block is not written");
  return reasons;
}

llvm::json::Object toDeepSpeed(const PlanCandidate &c,
                               const PlanRequest &request,
                               const PlanRecipe &recipe,
                               std::vector<std::string> &notes) {
  llvm::json::Object config;
  config["train_batch_size"] = request.globalBatch;
  config["train_micro_batch_size_per_gpu"] = c.microBatch;
  config["gradient_accumulation_steps"] = c.accumulation;
  config["bf16"] =
      llvm::json::Object{{"enabled", request.model.dtype == "bf16"}};
  config["fp16"] =
      llvm::json::Object{{"enabled", request.model.dtype == "f16"}};
  llvm::json::Object zero{{"stage", c.stage < 0 ? 0 : c.stage}};
  if (c.offload == PlanOffload::statesAndUpdate ||
      c.offload == PlanOffload::statesUpdateGradients)
    zero["offload_optimizer"] = llvm::json::Object{{"device", "cpu"}};
  if (c.offload == PlanOffload::statesUpdateGradients)
    notes.push_back("the plan sums each micro-batch's gradients in host "
                    "memory (train-offload-optimizer gradients=host); "
                    "offload_optimizer moves the gradients to the CPU, but "
                    "whether DeepSpeed sums the micro-batches there or on the "
                    "GPU is its stage's and version's choice, not a key: the "
                    "planned device memory holds only where it sums them on "
                    "the CPU");
  config["zero_optimization"] = std::move(zero);
  // Pipeline stages: DeepSpeed's pipeline engine (a PipelineModule of
  // p stages, its layers cut evenly as the plan cuts them), its
  // micro-batches the accumulation steps.
  if (c.pipelineParallel > 1) {
    llvm::json::Object pipeline{{"stages", c.pipelineParallel},
                                {"partition", "uniform"}};
    if (c.remat == PlanRemat::full)
      pipeline["activation_checkpoint_interval"] = 1;
    config["pipeline"] = std::move(pipeline);
    notes.push_back(llvm::formatv(
        "pipeline.stages is read by deepspeed.pipe.PipelineModule when the "
        "model code passes num_stages from the config; the plan assumes "
        "its layers cut evenly, {0} per stage (partition uniform)",
        request.model.layers / c.pipelineParallel));
  }
  // The recipe's optimizer, by its DeepSpeed type (the registry's), and
  // clipping (0: none); eps where the optimizer reads one.
  const OptimizerInfo *optimizer = lookupOptimizer(recipe.optimizer);
  llvm::json::Object params{
      {"lr", recipe.lr},
      {"betas", llvm::json::Array{recipe.beta1, recipe.beta2}},
      {"weight_decay", recipe.weightDecay}};
  if (!optimizer || optimizer->reads(OptimizerOption::epsilon))
    params["eps"] = recipe.epsilon;
  config["optimizer"] =
      llvm::json::Object{{"type", optimizer && !optimizer->deepSpeedType.empty()
                                      ? optimizer->deepSpeedType
                                      : llvm::StringRef("AdamW")},
                         {"params", std::move(params)}};
  config["gradient_clipping"] = recipe.clipNorm;
  if (c.sumDtype != AccumDtype::f32)
    config["data_types"] = llvm::json::Object{
        {"grad_accum_dtype", c.sumDtype == AccumDtype::bf16 ? "bf16" : "fp16"}};
  if (c.remat == PlanRemat::full && c.offloadActivations) {
    // DeepSpeed moves checkpoints to the CPU only where it partitions
    // them (its checkpointing API, as Megatron-DeepSpeed calls it).
    config["activation_checkpointing"] =
        llvm::json::Object{{"partition_activations", true},
                           {"cpu_checkpointing", true},
                           {"contiguous_memory_optimization", false}};
    notes.push_back("activation_checkpointing.cpu_checkpointing moves the "
                    "checkpoints to the CPU only where the model checkpoints "
                    "through deepspeed.checkpointing (Megatron-DeepSpeed), "
                    "which needs partition_activations; with PyTorch's own "
                    "checkpointing they stay on the GPU and the plan's peak "
                    "does not hold");
  } else if (c.remat == PlanRemat::full) {
    config["activation_checkpointing"] =
        llvm::json::Object{{"partition_activations", false},
                           {"contiguous_memory_optimization", false}};
  }
  if (c.fuseAttention)
    notes.push_back("fused attention has no DeepSpeed key: it is the "
                    "model's setting (a FlashAttention kernel: Hugging Face "
                    "attn_implementation=\"flash_attention_2\", Megatron "
                    "--use-flash-attn); the plan's peak assumes it, without "
                    "it the attention keeps its score tensors");
  if (c.fuseElementwise)
    notes.push_back("fused element-wise chains have no DeepSpeed key: they "
                    "are the model's setting (Megatron --bias-gelu-fusion); "
                    "the plan's peak assumes them");
  return config;
}

} // namespace train
} // namespace mlir
