//===- TimeModel.h - the seconds an op takes on a device --------*- C++ -*-===//
//
// The planner's step time is the sum of its ops' times (Planner.h). An op
// that runs GEMMs (CostOpInterface::getGemms) takes their FLOPs at a rate
// that depends on their shape and element type; any other op takes a time
// from its FLOPs and the bytes it reads and writes. A calibrated device
// (`--hardware native`, Calibrate.h) carries measured figures for both: GEMM
// rates at measured shapes, interpolated between them, and per-op fits of
// time to FLOPs and bytes. A preset has none, and takes the documented rule
// (docs/Planner.md): GEMMs at the achievable fraction of the peak times an
// efficiency by their smallest dimension, d / (d + 64), other ops bound by
// memory bandwidth or by the peak, whichever is slower.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_PLAN_TIMEMODEL_H
#define TRAINMEM_PLAN_TIMEMODEL_H

#include "trainmem/Dialect/Train/IR/TrainInterfaces.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Plan/Hardware.h"

namespace mlir {
namespace train {

/// The smallest dimension at which the presets' GEMM efficiency is one half
/// (d / (d + kGemmEfficiencyKnee)).
constexpr double kGemmEfficiencyKnee = 64;

/// The element type's name as GEMM rates record it (GemmRate::dtype): bf16,
/// f16, else f32 (the runtime's other products widen to f32).
llvm::StringRef gemmDtypeName(Type elementType);

/// The FLOP/s of one GEMM of `gemm`'s shape on `hardware`: measured rates
/// interpolated in the logarithms of m, n and k (the nearest measured
/// shapes of its element type, or of any where none is of it), or the
/// preset rule.
double gemmFlopsPerSecond(const Hardware &hardware, const GemmShape &gemm);

/// Seconds of one execution of `op` on `hardware`: 0 for an op without
/// CostOpInterface and for collectives (the planner costs the bytes they
/// send apart).
double opSeconds(Operation *op, const Hardware &hardware);

/// Seconds one iteration of a rolled micro-batch loop takes to sum its
/// parts into its accumulators: no op of the loop's body does (the
/// lowering and train-unroll-accum add each part, or copy it at the first
/// micro-batch, where it is complete), so each part is costed as a
/// `train.add` of its f32 sum's elements (reading two, writing one).
double loopSumSeconds(AccumulateOp loop, const Hardware &hardware);

} // namespace train
} // namespace mlir

#endif // TRAINMEM_PLAN_TIMEMODEL_H
