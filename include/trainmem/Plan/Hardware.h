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
#include <optional>
#include <string>
#include <vector>

namespace mlir {
namespace train {

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
  /// The host's FLOP/s available to one device's offloaded optimizer
  /// update (DeepSpeed's CPU Adam).
  double hostFlops = 0;
};

/// The preset names: h100-80gb, h200, b200, a100-80gb, cpu.
std::vector<std::string> getHardwarePresetNames();
/// The preset called `name`, or nothing.
std::optional<Hardware> getHardwarePreset(llvm::StringRef name);

/// A device from JSON text with exactly the keys of Hardware in snake_case
/// (name, peak_flops, achievable_fraction, memory_bytes, memory_bandwidth,
/// interconnect_bandwidth, host_bandwidth, host_flops); an error names the
/// key or value that is wrong (unknown keys are errors).
llvm::Expected<Hardware> parseHardwareJson(llvm::StringRef text);

/// A preset by name, or a JSON file by path; an error says what is wrong
/// (an unknown name lists the presets).
llvm::Expected<Hardware> loadHardware(llvm::StringRef nameOrPath);

} // namespace train
} // namespace mlir

#endif // TRAINMEM_PLAN_HARDWARE_H
