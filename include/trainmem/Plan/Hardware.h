//===- Hardware.h - what a device can do, for the throughput model -*- C++
//-*-===//
//
// The figures the planner's throughput model (Planner.h) needs of a
// device: its dense 16-bit tensor peak, its memory and memory bandwidth,
// its interconnect to the other devices and its link to the host, and the
// host's share of CPU FLOP/s for an offloaded optimizer update. Presets
// carry the vendors' published figures (docs/Planner.md cites each); a JSON
// file of the same keys describes any other device.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_PLAN_HARDWARE_H
#define TRAINMEM_PLAN_HARDWARE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mlir {
namespace train {

/// A GEMM rate measured on the device (calibration): `flopsPerSecond` for
/// C[m, n] = A[m, k] · B[k, n] with operands of `dtype` (f32, bf16, f16).
struct GemmRate {
  std::string dtype;
  uint64_t m = 0, n = 0, k = 0;
  double flopsPerSecond = 0;
};

/// An op's time fitted to measured runs (calibration): one execution takes
/// secondsPerFlop · FLOPs + secondsPerByte · bytes read and written (its
/// CostOpInterface counts) + secondsPerCall.
struct OpRate {
  double secondsPerFlop = 0, secondsPerByte = 0, secondsPerCall = 0;
};

struct Hardware {
  std::string name;
  /// Dense bf16/fp16 tensor FLOP/s (without sparsity).
  double peakFlops = 0;
  /// The fraction of peakFlops a training step's compute reaches (model
  /// FLOP utilization), an assumption of the model (docs/Planner.md).
  double achievableFraction = 0;
  /// Memory per device, bytes.
  uint64_t memoryBytes = 0;
  /// Device memory bandwidth, bytes/s.
  double memoryBandwidth = 0;
  /// Device-to-device bandwidth per direction, bytes/s (NVLink).
  double interconnectBandwidth = 0;
  /// Host link per direction, bytes/s (PCIe).
  double hostBandwidth = 0;
  /// Between nodes, per device and direction, bytes/s (a server's network
  /// cards over its devices: InfiniBand); and the devices of one node.
  /// Pipeline stages whose peers are on other nodes send at this figure.
  /// 0: not given, the interconnect's then (one node).
  double nodeBandwidth = 0;
  int64_t ranksPerNode = 8;
  /// The host's FLOP/s available to one device's offloaded optimizer
  /// update (DeepSpeed's CPU Adam).
  double hostFlops = 0;
  /// Device memory a run keeps outside its arena, for the planner's
  /// default reserve (docs/Planner.md states each): the runtime's context
  /// on the device (CUDA's, with cuBLAS's workspace), and one
  /// communicator's buffers (NCCL's), per process group a run uses.
  uint64_t contextBytes = 0, communicatorBytes = 0;
  /// Host memory per device for what a plan offloads (a node's system
  /// memory over its devices); 0: not given, and activation offload is
  /// then refused (the optimizer's is not checked).
  uint64_t hostMemoryBytes = 0;
  /// Measured figures (a calibrated device, `--hardware native`): GEMM
  /// rates by shape and element type, and op times by op name
  /// ("train.gelu"). Empty for the presets, whose time model is the
  /// documented rule (docs/Planner.md, TimeModel.h).
  std::vector<GemmRate> gemmRates;
  std::map<std::string, OpRate> opRates;
  /// Whether the ranks of a plan share this device (`--hardware native`:
  /// ranks under mpirun on this machine split its cores, so each op takes
  /// ranks times its measured time); false for a device per rank.
  bool sharedByRanks = false;
  /// Where the figures come from, in words (a calibration's machine and
  /// date); empty for a preset.
  std::string source;
};

/// The preset names: h100-80gb, h200, b200, a100-80gb, cpu.
std::vector<std::string> getHardwarePresetNames();
/// The preset called `name`, or nothing.
std::optional<Hardware> getHardwarePreset(llvm::StringRef name);

/// A device from JSON text with exactly the keys of Hardware in snake_case
/// (name, peak_flops, achievable_fraction, memory_bytes, memory_bandwidth,
/// interconnect_bandwidth, host_bandwidth, host_flops; optionally
/// context_bytes and communicator_bytes (0 when absent), node_bandwidth (0:
/// one node) and ranks_per_node (8), shared_by_ranks (false when absent),
/// gemm_rates: [{dtype, m, n, k, flops_per_second}], op_rates: {op name:
/// {seconds_per_flop, seconds_per_byte, seconds_per_call}} and
/// source); an error names the
/// key or value that is wrong (unknown keys are errors).
llvm::Expected<Hardware> parseHardwareJson(llvm::StringRef text);

/// The JSON form parseHardwareJson reads (floats shortest round-trip).
std::string printHardwareJson(const Hardware &hardware);

/// A preset by name, or a JSON file by path; an error says what is wrong
/// (an unknown name lists the presets).
llvm::Expected<Hardware> loadHardware(llvm::StringRef nameOrPath);

} // namespace train
} // namespace mlir

#endif // TRAINMEM_PLAN_HARDWARE_H
