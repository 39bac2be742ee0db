//===- StepPhases.cpp - what passes leave a step in, and refuse -----------===//
//
// Each phase recognized from the step's IR in one place; the refusals are
// StepPhases.def's rows.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Dialect/Train/Transforms/StepPhases.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Dialect/Train/Transforms/RegionUtils.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::train;

namespace {

struct Refusal {
  StringRef pass;
  StringRef condition;
  StepPhase phase;
  StringRef cannot;
  StringRef remedy;
};

constexpr Refusal kRefusals[] = {
#define TRAIN_PHASE_REFUSES(Pass, Condition, Phase, Cannot, Remedy)            \
  {Pass, Condition, StepPhase::Phase, Cannot, Remedy},
#include "trainmem/Dialect/Train/Transforms/StepPhases.def"
};

struct Making {
  StringRef pass;
  StringRef condition;
  StepPhase phase;
};

constexpr Making kMakes[] = {
#define TRAIN_PHASE_MAKES(Pass, Condition, Phase)                              \
  {Pass, Condition, StepPhase::Phase},
#include "trainmem/Dialect/Train/Transforms/StepPhases.def"
};

constexpr Making kClears[] = {
#define TRAIN_PHASE_CLEARS(Pass, Phase) {Pass, "", StepPhase::Phase},
#include "trainmem/Dialect/Train/Transforms/StepPhases.def"
};

bool holds(StringRef condition, ArrayRef<StringRef> conditions) {
  return condition.empty() || llvm::is_contained(conditions, condition);
}

/// The first optimizer block with updates that comes before a backward
/// block (train-release-gradients' order), or null.
Operation *findReleasedUpdates(func::FuncOp step) {
  if (step.isExternal())
    return nullptr;
  Operation *firstUpdateBlock = nullptr;
  for (Operation &op : step.front()) {
    auto block = dyn_cast<BlockOp>(op);
    if (!block)
      continue;
    if (block.getKind() == BlockKind::optimizer && !firstUpdateBlock &&
        block
            .walk([](OptimizerUpdateOpInterface) {
              return WalkResult::interrupt();
            })
            .wasInterrupted())
      firstUpdateBlock = block;
    if (firstUpdateBlock && block.getBackward())
      return firstUpdateBlock;
  }
  return nullptr;
}

/// The first op of kind OpT in `step`, or null.
template <typename OpT> Operation *findFirst(func::FuncOp step) {
  Operation *found = nullptr;
  step.walk([&](OpT op) {
    found = op;
    return WalkResult::interrupt();
  });
  return found;
}

} // namespace

StringRef mlir::train::describeStepPhase(StepPhase phase) {
  switch (phase) {
  case StepPhase::HessianStep:
    return "has a Hessian step (optimizer=sophia)";
  case StepPhase::Released:
    return "runs its updates inside the backward";
  case StepPhase::Accumulating:
    return "accumulates gradients";
  case StepPhase::LossScaled:
    return "is loss-scaled";
  case StepPhase::Partitioned:
    return "is partitioned";
  case StepPhase::UnmaterializedRemat:
    return "has train.remat regions not materialized";
  case StepPhase::OffloadedActivations:
    return "keeps activations in host memory";
  }
  llvm_unreachable("unknown step phase");
}

std::string mlir::train::findStepPhase(func::FuncOp step, StepPhase phase,
                                       Operation *&at) {
  at = step;
  switch (phase) {
  case StepPhase::HessianStep:
    if (func::FuncOp hessian = findHessianStep(step))
      return ("has a Hessian step (@" + hessian.getSymName() +
              ", optimizer=sophia)")
          .str();
    return "";
  case StepPhase::Released:
    if ((at = findReleasedUpdates(step)))
      return "runs its updates inside the backward (train-release-gradients)";
    return "";
  case StepPhase::Accumulating:
    if ((at = findAccumulation(step)))
      return ("already accumulates gradients (" + at->getName().getStringRef() +
              ")")
          .str();
    return "";
  case StepPhase::LossScaled:
    for (unsigned i = 0; i < step.getNumArguments(); ++i)
      if (auto state =
              step.getArgAttrOfType<StateAttr>(i, kOptimizerStateAttrName);
          state && state.getKind() == StateKind::loss_scale)
        return llvm::formatv("is loss-scaled already (argument {0})", i).str();
    return "";
  case StepPhase::Partitioned:
    if (auto zero = step->getAttrOfType<ZeroAttr>(kZeroAttrName))
      return llvm::formatv("is partitioned already (stage {0}, {1} ranks)",
                           zero.getStage(), zero.getRanks())
          .str();
    return "";
  case StepPhase::UnmaterializedRemat:
    if ((at = findFirst<RematOp>(step)))
      return "has a train.remat region not materialized";
    return "";
  case StepPhase::OffloadedActivations:
    if ((at = findFirst<TransferOp>(step)))
      return "keeps activations in host memory already (train.transfer)";
    return "";
  }
  llvm_unreachable("unknown step phase");
}

LogicalResult mlir::train::checkStepPhases(func::FuncOp step, StringRef pass,
                                           ArrayRef<StringRef> conditions) {
  for (const Refusal &refusal : kRefusals) {
    if (refusal.pass != pass || !holds(refusal.condition, conditions))
      continue;
    Operation *at = nullptr;
    std::string shows = findStepPhase(step, refusal.phase, at);
    if (shows.empty())
      continue;
    return at->emitError(pass)
           << ": @" << step.getSymName() << " " << shows << ", which " << pass
           << " cannot " << refusal.cannot << ": " << refusal.remedy;
  }
  return success();
}

LogicalResult mlir::train::checkPhaseOrder(ArrayRef<PhasedPass> passes,
                                           std::string &message) {
  // Each phase a step is in, with the pass that made it.
  llvm::SmallDenseMap<unsigned, StringRef> made;
  for (const PhasedPass &next : passes) {
    for (const Refusal &refusal : kRefusals) {
      auto maker = made.find(static_cast<unsigned>(refusal.phase));
      if (refusal.pass != next.pass ||
          !holds(refusal.condition, next.conditions) || maker == made.end())
        continue;
      message = ("after " + maker->second + " the step " +
                 describeStepPhase(refusal.phase) + ", which " + next.pass +
                 " cannot " + refusal.cannot + ": " + refusal.remedy)
                    .str();
      return failure();
    }
    for (const Making &clears : kClears)
      if (clears.pass == next.pass)
        made.erase(static_cast<unsigned>(clears.phase));
    for (const Making &makes : kMakes)
      if (makes.pass == next.pass && holds(makes.condition, next.conditions))
        made.try_emplace(static_cast<unsigned>(makes.phase), next.pass);
  }
  return success();
}
