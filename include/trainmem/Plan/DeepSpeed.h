//===- DeepSpeed.h - DeepSpeed configs in and out of the planner -*- C++
//-*-===//
//
// trainmem-plan --from-deepspeed reads a DeepSpeed config's decisions as
// one candidate; --emit deepspeed-json writes a candidate as a config, with
// the decisions DeepSpeed has no key for said as notes.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_PLAN_DEEPSPEED_H
#define TRAINMEM_PLAN_DEEPSPEED_H

#include "trainmem/Plan/Planner.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <optional>
#include <string>
#include <vector>

namespace mlir {
namespace train {

/// A DeepSpeed config's decisions, as a candidate and a request's batch.
struct DeepSpeedPlan {
  PlanCandidate candidate;
  int64_t globalBatch = 0;
  /// bf16, f16 or f32, from its bf16/fp16 keys.
  std::optional<std::string> dtype;
};

/// Reads the keys this project models from a config for `rankCount` ranks;
/// every other key is named in `warnings`; a stage, offload or optimizer it
/// does not model, or a batch that does not add up, is an error.
llvm::Expected<DeepSpeedPlan> readDeepSpeed(llvm::StringRef text,
                                            int64_t rankCount,
                                            std::vector<std::string> &warnings);

/// `c` as a DeepSpeed config for `request`; the decisions DeepSpeed has no
/// key for (selective or budget recompute, state on the host with the
/// update on the device, 8-bit state, fused attention and element-wise
/// chains) are said in `notes`.
llvm::json::Object toDeepSpeed(const PlanCandidate &c,
                               const PlanRequest &request,
                               std::vector<std::string> &notes);

} // namespace train
} // namespace mlir

#endif // TRAINMEM_PLAN_DEEPSPEED_H
