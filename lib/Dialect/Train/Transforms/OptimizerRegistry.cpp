//===- OptimizerRegistry.cpp - the optimizers a step can get --------------===//

#include "trainmem/Dialect/Train/Transforms/OptimizerRegistry.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"

#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace mlir::train;

StringRef mlir::train::getOptimizerOptionName(OptimizerOption option) {
  switch (option) {
  case OptimizerOption::beta1:
    return "beta1";
  case OptimizerOption::beta2:
    return "beta2";
  case OptimizerOption::epsilon:
    return "eps";
  case OptimizerOption::weightDecay:
    return "weight-decay";
  case OptimizerOption::momentum:
    return "momentum";
  case OptimizerOption::rho:
    return "rho";
  case OptimizerOption::hessianInterval:
    return "hessian-interval";
  }
  llvm_unreachable("unknown optimizer option");
}

OptimizerOptions OptimizerOptions::defaultsOf(const OptimizerInfo &info) {
  OptimizerOptions options;
  options.optimizer = info.name.str();
  options.lr = info.defaults.lr;
  options.beta1 = info.defaults.beta1;
  options.beta2 = info.defaults.beta2;
  options.epsilon = info.defaults.epsilon;
  options.weightDecay = info.defaults.weightDecay;
  return options;
}

static FloatAttr f64(OpBuilder &builder, double value) {
  return builder.getF64FloatAttr(value);
}

//===----------------------------------------------------------------------===//
// AdamW (Loshchilov & Hutter 2019)
//===----------------------------------------------------------------------===//

static OptimizerUpdateOpInterface buildAdamW(OpBuilder &builder, Location loc,
                                             const OptimizerUpdateOperands &in,
                                             const OptimizerOptions &o) {
  return AdamWOp::create(builder, loc, in.param, in.grad, in.state[0],
                         in.state[1], in.lr, in.step, f64(builder, o.beta1),
                         f64(builder, o.beta2), f64(builder, o.epsilon),
                         f64(builder, o.weightDecay));
}

static constexpr OptimizerOption kAdamWOptions[] = {
    OptimizerOption::beta1, OptimizerOption::beta2, OptimizerOption::epsilon,
    OptimizerOption::weightDecay};
static constexpr OptimizerStateInfo kAdamWStates[] = {
    {StateKind::m, StateElementType::f32},
    {StateKind::v, StateElementType::f32}};

//===----------------------------------------------------------------------===//
// Lion (Chen et al. 2023)
//===----------------------------------------------------------------------===//

static OptimizerUpdateOpInterface buildLion(OpBuilder &builder, Location loc,
                                            const OptimizerUpdateOperands &in,
                                            const OptimizerOptions &o) {
  return LionOp::create(builder, loc, in.param, in.grad, in.state[0], in.lr,
                        f64(builder, o.beta1), f64(builder, o.beta2),
                        f64(builder, o.weightDecay));
}

static constexpr OptimizerOption kLionOptions[] = {
    OptimizerOption::beta1, OptimizerOption::beta2,
    OptimizerOption::weightDecay};
static constexpr OptimizerStateInfo kLionStates[] = {
    {StateKind::m, StateElementType::f32}};

//===----------------------------------------------------------------------===//
// Sophia (Liu et al. 2023, SophiaG)
//===----------------------------------------------------------------------===//

static OptimizerUpdateOpInterface buildSophia(OpBuilder &builder, Location loc,
                                              const OptimizerUpdateOperands &in,
                                              const OptimizerOptions &o) {
  return SophiaOp::create(
      builder, loc, in.param, in.grad, in.state[0], in.state[1], in.lr,
      f64(builder, o.beta1), f64(builder, o.rho), f64(builder, o.epsilon),
      f64(builder, o.weightDecay), builder.getI64IntegerAttr(in.batchTokens));
}

static constexpr OptimizerOption kSophiaOptions[] = {
    OptimizerOption::beta1,   OptimizerOption::beta2,
    OptimizerOption::epsilon, OptimizerOption::weightDecay,
    OptimizerOption::rho,     OptimizerOption::hessianInterval};
static constexpr OptimizerStateInfo kSophiaStates[] = {
    {StateKind::m, StateElementType::f32},
    {StateKind::h, StateElementType::f32}};

//===----------------------------------------------------------------------===//
// SGD, with momentum when momentum > 0
//===----------------------------------------------------------------------===//

static OptimizerUpdateOpInterface buildSGD(OpBuilder &builder, Location loc,
                                           const OptimizerUpdateOperands &in,
                                           const OptimizerOptions &o) {
  Value buffer = in.state.empty() ? Value() : in.state[0];
  return SGDOp::create(builder, loc, in.param.getType(),
                       buffer ? buffer.getType() : Type(), in.param, in.grad,
                       in.lr, buffer, f64(builder, o.momentum),
                       f64(builder, o.weightDecay), UnitAttr());
}

static bool hasMomentum(const OptimizerOptions &o) { return o.momentum > 0.0; }

static constexpr OptimizerOption kSGDOptions[] = {OptimizerOption::momentum,
                                                  OptimizerOption::weightDecay};
static constexpr OptimizerStateInfo kSGDStates[] = {
    {StateKind::momentum, StateElementType::updated, hasMomentum}};

//===----------------------------------------------------------------------===//
// The table
//===----------------------------------------------------------------------===//

static const OptimizerInfo kOptimizers[] = {
    {"adamw",
     "AdamW: Adam with decoupled weight decay (Loshchilov & Hutter 2019)",
     OptimizerDefaults{}, kAdamWOptions, kAdamWStates, "train.adamw",
     "train.adamw_8bit", buildAdamW, /*hessianStep=*/false,
     /*deepSpeedType=*/"AdamW", /*megatronName=*/"adam"},
    {"lion",
     "Lion: the sign of an interpolated momentum, one state (Chen et al. "
     "2023)",
     // The paper's betas; its learning rate 3-10x below AdamW's; weight
     // decay off as in its reference implementation.
     OptimizerDefaults{1.0e-4, 0.9, 0.99, 1.0e-8, 0.0}, kLionOptions,
     kLionStates, "train.lion", "train.lion_8bit", buildLion,
     /*hessianStep=*/false, /*deepSpeedType=*/"Lion" /* its FusedLion */},
    {"sgd", "SGD, with (Nesterov) momentum when momentum > 0",
     OptimizerDefaults{}, kSGDOptions, kSGDStates, "train.sgd",
     "train.sgd_8bit", buildSGD},
    {"sophia",
     "SophiaG: a clipped step preconditioned by a diagonal Hessian estimate "
     "that a Hessian step refreshes every k steps (Liu et al. 2023)",
     // SophiaG's reference implementation: lr 1e-4, betas (0.965, 0.99),
     // 1e-15 in the denominator, weight decay 0.1 (rho 0.04 and k = 10
     // are the options' own defaults).
     OptimizerDefaults{1.0e-4, 0.965, 0.99, 1.0e-15, 0.1}, kSophiaOptions,
     kSophiaStates, "train.sophia", "train.sophia_8bit", buildSophia,
     /*hessianStep=*/true},
};

ArrayRef<OptimizerInfo> mlir::train::getRegisteredOptimizers() {
  return kOptimizers;
}

const OptimizerInfo *mlir::train::lookupOptimizer(StringRef name) {
  for (const OptimizerInfo &info : kOptimizers)
    if (info.name == name)
      return &info;
  return nullptr;
}

std::string mlir::train::listOptimizerNames() {
  std::string text;
  ArrayRef<OptimizerInfo> all = getRegisteredOptimizers();
  for (auto [i, info] : llvm::enumerate(all)) {
    if (i > 0)
      text += i + 1 == all.size() ? " or " : ", ";
    text += info.name;
  }
  return text;
}
