//===- DeepSpeed.cpp - DeepSpeed configs in and out of the planner
//---------===//
//
// A DeepSpeed config's decisions as the planner's candidate, and a
// candidate as a DeepSpeed config (docs/Planner.md "DeepSpeed configs").
//
//===----------------------------------------------------------------------===//

#include "trainmem/Plan/DeepSpeed.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <climits>

namespace mlir {
namespace train {

static llvm::Error makeError(std::string message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

llvm::Expected<DeepSpeedPlan>
readDeepSpeed(llvm::StringRef text, int64_t rankCount,
              std::vector<std::string> &warnings) {
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed)
    return makeError("not JSON: " + llvm::toString(parsed.takeError()));
  const llvm::json::Object *config = parsed->getAsObject();
  if (!config) {
    return makeError("a DeepSpeed config is a JSON object");
  }
  DeepSpeedPlan plan;
  plan.candidate.stage = rankCount > 1 ? 0 : -1;
  bool bf16 = false, fp16 = false;
  // fp16's loss-scaling keys: the scale's rule, no memory.
  static constexpr llvm::StringLiteral kLossScaleKeys[] = {
      "loss_scale", "initial_scale_power",    "loss_scale_window",
      "hysteresis", "consecutive_hysteresis", "min_loss_scale",
      "auto_cast"};
  std::optional<int64_t> micro, accumulation, batch;
  std::string error;
  auto integer = [&](const llvm::json::Value &v, llvm::StringRef key,
                     std::optional<int64_t> &out) {
    std::optional<int64_t> n = v.getAsInteger();
    if (!n || *n < 1) {
      error = "'" + key.str() + "' must be a positive integer";
      return false;
    }
    out = *n;
    return true;
  };
  for (const auto &[key, value] : *config) {
    llvm::StringRef k = key;
    if (k == "train_micro_batch_size_per_gpu") {
      if (!integer(value, k, micro))
        return makeError(error);
    } else if (k == "gradient_accumulation_steps") {
      if (!integer(value, k, accumulation))
        return makeError(error);
    } else if (k == "train_batch_size") {
      if (!integer(value, k, batch))
        return makeError(error);
    } else if (k == "bf16" || k == "fp16") {
      // DeepSpeed reads {"enabled": true|false}; without it, f32.
      const llvm::json::Object *o = value.getAsObject();
      if (!o)
        return makeError("'" + k.str() +
                         "' must be an object such as {\"enabled\": "
                         "true} (DeepSpeed reads its \"enabled\" key)");
      std::optional<bool> enabled = false;
      if (const llvm::json::Value *v = o->get("enabled")) {
        enabled = v->getAsBoolean();
        if (!enabled) {
          std::optional<llvm::StringRef> text = v->getAsString();
          return makeError(
              k.str() + ".enabled must be true or false" +
              (text && *text == "auto"
                   ? std::string(": \"auto\" is filled in by the Hugging "
                                 "Face Trainer from its own arguments; "
                                 "give the value it resolves to")
                   : std::string()));
        }
      }
      (k == "bf16" ? bf16 : fp16) = *enabled;
      for (const auto &[sub, v] : *o)
        if (sub != "enabled" &&
            !(k == "fp16" &&
              llvm::is_contained(kLossScaleKeys, llvm::StringRef(sub))))
          warnings.push_back(k.str() + "." + sub.str());
    } else if (k == "zero_optimization") {
      const llvm::json::Object *o = value.getAsObject();
      if (!o) {
        return makeError("'zero_optimization' must be an object");
      }
      for (const auto &[sub, v] : *o) {
        if (sub == "stage") {
          std::optional<int64_t> stage = v.getAsInteger();
          if (!stage || *stage < 0 || *stage > 3) {
            return makeError(
                "zero_optimization.stage must be 0, 1, 2 or 3 (the "
                "stages this project models)");
          }
          if (rankCount == 1 && *stage > 0) {
            return makeError(
                llvm::formatv("zero_optimization.stage {0} partitions "
                              "over ranks: give --ranks",
                              *stage));
          }
          plan.candidate.stage = rankCount > 1 ? *stage : -1;
        } else if (sub == "offload_optimizer") {
          // DeepSpeed's optimizer offload runs the update on the CPU.
          const llvm::json::Object *o = v.getAsObject();
          std::optional<llvm::StringRef> device =
              o && o->get("device") ? o->get("device")->getAsString()
                                    : std::nullopt;
          if (!device || (*device != "cpu" && *device != "none")) {
            return makeError(
                "zero_optimization.offload_optimizer.device must be cpu "
                "or none (NVMe is not modeled)");
          }
          if (*device == "cpu")
            plan.candidate.offload = PlanOffload::statesAndUpdate;
          if (o)
            for (const auto &[key2, v2] : *o)
              if (key2 != "device")
                warnings.push_back("zero_optimization.offload_optimizer." +
                                   key2.str());
        } else if (sub == "offload_param") {
          return makeError(
              "zero_optimization.offload_param: parameter offload is not "
              "modeled (only the optimizer's, train-offload-optimizer)");
        } else {
          warnings.push_back("zero_optimization." + sub.str());
        }
      }
    } else if (k == "activation_checkpointing") {
      // DeepSpeed checkpoints what the model's code wraps, usually whole
      // layers: full recompute. Its own keys change where the saved
      // activations live (partitioned over model-parallel ranks, CPU,
      // contiguous buffers): off, they are what the planner models.
      plan.candidate.remat = PlanRemat::full;
      if (const llvm::json::Object *o = value.getAsObject())
        for (const auto &[sub, v] : *o) {
          bool off = v.getAsBoolean() == std::optional<bool>(false);
          if (!(off && (sub == "partition_activations" ||
                        sub == "contiguous_memory_optimization" ||
                        sub == "cpu_checkpointing")))
            warnings.push_back("activation_checkpointing." + sub.str());
        }
    } else if (k == "optimizer") {
      const llvm::json::Object *o = value.getAsObject();
      std::optional<llvm::StringRef> type =
          o && o->get("type") ? o->get("type")->getAsString() : std::nullopt;
      if (!type || !(type->equals_insensitive("adamw") ||
                     type->equals_insensitive("adam"))) {
        return makeError(
            "optimizer.type must be Adam or AdamW (the optimizer the "
            "planner models)");
      }
      // Its params (lr, betas, eps, weight decay) change no memory.
      if (o)
        for (const auto &[sub, v] : *o)
          if (sub != "type" && sub != "params")
            warnings.push_back("optimizer." + sub.str());
    } else {
      warnings.push_back(k.str());
    }
  }
  if (bf16 && fp16) {
    return makeError(
        "fp16 and bf16 are both enabled (DeepSpeed refuses this too): "
        "enable one");
  }
  // DeepSpeed trains f32 unless one of them is enabled.
  plan.dtype = bf16 ? "bf16" : fp16 ? "f16" : "f32";
  if (!micro) {
    return makeError("the config has no train_micro_batch_size_per_gpu");
  }
  plan.candidate.microBatch = *micro;
  plan.candidate.accumulation = accumulation.value_or(1);
  if (plan.candidate.accumulation > INT64_MAX / *micro / rankCount) {
    return makeError(
        "train_micro_batch_size_per_gpu x gradient_accumulation_steps x "
        "ranks does not fit in 64 bits");
  }
  int64_t implied = *micro * plan.candidate.accumulation * rankCount;
  if (batch && *batch != implied) {
    return makeError(llvm::formatv(
        "train_batch_size {0} is not micro-batch {1} x "
        "accumulation {2} x ranks {3} = {4}",
        *batch, *micro, plan.candidate.accumulation, rankCount, implied));
  }
  plan.globalBatch = implied;
  return plan;
}

llvm::json::Object toDeepSpeed(const PlanCandidate &c,
                               const PlanRequest &request,
                               std::vector<std::string> &notes) {
  llvm::json::Object config;
  config["train_batch_size"] = request.globalBatch;
  config["train_micro_batch_size_per_gpu"] = c.microBatch;
  config["gradient_accumulation_steps"] = c.accumulation;
  config["bf16"] =
      llvm::json::Object{{"enabled", request.model.dtype == "bf16"}};
  config["fp16"] =
      llvm::json::Object{{"enabled", request.model.dtype == "f16"}};
  config["zero_optimization"] =
      llvm::json::Object{{"stage", c.stage < 0 ? 0 : c.stage}};
  // The step's AdamW, with train-add-optimizer's defaults.
  TrainAddOptimizerPassOptions adamw;
  config["optimizer"] = llvm::json::Object{
      {"type", "AdamW"},
      {"params", llvm::json::Object{
                     {"lr", adamw.lr},
                     {"betas", llvm::json::Array{adamw.beta1, adamw.beta2}},
                     {"eps", adamw.epsilon},
                     {"weight_decay", adamw.weightDecay}}}};
  if (c.remat != PlanRemat::none) {
    config["activation_checkpointing"] =
        llvm::json::Object{{"partition_activations", false},
                           {"contiguous_memory_optimization", false}};
    if (c.remat != PlanRemat::full)
      notes.push_back(
          stringifyPlanRemat(c.remat).str() +
          " recompute has no DeepSpeed key: activation_checkpointing turns "
          "on the checkpointing the model's code does (Megatron-DeepSpeed: "
          "--recompute-granularity selective for the attention core)");
  }
  if (c.offload == PlanOffload::statesAndUpdate)
    config["zero_optimization"] = llvm::json::Object{
        {"stage", c.stage < 0 ? 0 : c.stage},
        {"offload_optimizer", llvm::json::Object{{"device", "cpu"}}}};
  if (c.offload == PlanOffload::states)
    notes.push_back("optimizer state on the host with the update on the "
                    "device has no DeepSpeed key (its offload_optimizer runs "
                    "the update on the CPU)");
  if (c.eightBit)
    notes.push_back("8-bit optimizer state has no DeepSpeed key (it is "
                    "bitsandbytes' AdamW8bit passed to deepspeed.initialize)");
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
