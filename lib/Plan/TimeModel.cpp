//===- TimeModel.cpp - the seconds an op takes on a device ----------------===//

#include "trainmem/Plan/TimeModel.h"
#include "trainmem/Dialect/Train/IR/ShardModels.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"

#include "mlir/Dialect/Shard/IR/ShardDialect.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"

#include <algorithm>
#include <cmath>

namespace mlir {
namespace train {

StringRef gemmDtypeName(Type elementType) {
  if (elementType && elementType.isBF16())
    return "bf16";
  if (elementType && elementType.isF16())
    return "f16";
  return "f32";
}

namespace {

/// The measured shapes nearest `gemm` (in the logarithms of m, n and k),
/// their rates averaged in the logarithm by inverse squared distance: a
/// shape measured exactly gets its own rate.
double interpolatedRate(ArrayRef<const GemmRate *> rates,
                        const GemmShape &gemm) {
  auto logOf = [](uint64_t x) { return std::log2(std::max<double>(1, x)); };
  struct Near {
    double distance, logRate, rate;
  };
  SmallVector<Near> near;
  for (const GemmRate *rate : rates) {
    double dm = logOf(rate->m) - logOf(gemm.m),
           dn = logOf(rate->n) - logOf(gemm.n),
           dk = logOf(rate->k) - logOf(gemm.k);
    near.push_back({dm * dm + dn * dn + dk * dk,
                    std::log2(rate->flopsPerSecond), rate->flopsPerSecond});
  }
  constexpr size_t kNearest = 4;
  size_t count = std::min(kNearest, near.size());
  std::partial_sort(near.begin(), near.begin() + count, near.end(),
                    [](const Near &a, const Near &b) {
                      return a.distance < b.distance;
                    });
  if (near.front().distance == 0)
    return near.front().rate;
  double weights = 0, sum = 0;
  for (size_t i = 0; i < count; ++i) {
    double weight = 1.0 / near[i].distance;
    weights += weight;
    sum += weight * near[i].logRate;
  }
  return std::exp2(sum / weights);
}

/// An op of `opName` that is not a GEMM: its calibrated fit where the
/// hardware has one, else bound by the memory bandwidth or the peak.
double elementwiseSeconds(StringRef opName, double flops, double bytes,
                          const Hardware &hardware) {
  auto rate = hardware.opRates.find(opName.str());
  if (rate != hardware.opRates.end())
    return rate->second.secondsPerFlop * flops +
           rate->second.secondsPerByte * bytes + rate->second.secondsPerCall;
  return std::max(bytes / hardware.memoryBandwidth,
                  flops / (hardware.peakFlops * hardware.achievableFraction));
}

} // namespace

double gemmFlopsPerSecond(const Hardware &hardware, const GemmShape &gemm) {
  if (!hardware.gemmRates.empty()) {
    StringRef dtype = gemmDtypeName(gemm.elementType);
    SmallVector<const GemmRate *> same, any;
    for (const GemmRate &rate : hardware.gemmRates) {
      any.push_back(&rate);
      if (rate.dtype == dtype)
        same.push_back(&rate);
    }
    return interpolatedRate(same.empty() ? any : same, gemm);
  }
  double smallest = static_cast<double>(std::min({gemm.m, gemm.n, gemm.k}));
  double efficiency = smallest / (smallest + kGemmEfficiencyKnee);
  return hardware.peakFlops * hardware.achievableFraction *
         std::max(efficiency, 1e-3);
}

double opSeconds(Operation *op, const Hardware &hardware) {
  // The shard dialect's collectives take the link's time
  // (communicationSeconds), not the device's; an op that computes and
  // communicates (a ring attention) takes both.
  auto cost = dyn_cast<CostOpInterface>(op);
  if (!cost || isa<GradAllReduceOp>(op) ||
      isa_and_nonnull<shard::ShardDialect>(op->getDialect()))
    return 0;
  SmallVector<GemmShape> gemms;
  cost.getGemms(gemms);
  if (!gemms.empty()) {
    double seconds = 0;
    for (const GemmShape &gemm : gemms)
      if (uint64_t flops = gemm.getFlops())
        seconds += static_cast<double>(flops) /
                   gemmFlopsPerSecond(hardware, gemm);
    return seconds;
  }
  return elementwiseSeconds(op->getName().getStringRef(),
                            static_cast<double>(cost.getFlops()),
                            static_cast<double>(cost.getBytesRead()) +
                                static_cast<double>(cost.getBytesWritten()),
                            hardware);
}

double loopSumSeconds(AccumulateOp loop, const Hardware &hardware) {
  double seconds = 0;
  for (Value sum : loop.getResults()) {
    auto type = cast<RankedTensorType>(sum.getType());
    double elements = static_cast<double>(type.getNumElements());
    double bytes = 3 * static_cast<double>(getTensorBytes(type));
    seconds += elementwiseSeconds(AddOp::getOperationName(), elements, bytes,
                                  hardware);
  }
  return seconds;
}

} // namespace train
} // namespace mlir
