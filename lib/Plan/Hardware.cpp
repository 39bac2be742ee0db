//===- Hardware.cpp - device presets and their JSON form ------------------===//
//
// The presets' figures are the vendors' published ones (dense, without
// sparsity); docs/Planner.md cites each. achievable_fraction and host_flops
// are this project's assumptions, said there too.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Plan/Hardware.h"
#include "trainmem/Plan/Json.h"

#include "llvm/ADT/StringExtras.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cmath>

namespace mlir {
namespace train {

namespace {

constexpr double kGB = 1e9, kTB = 1e12;

/// Shared assumptions: a training step's compute reaches half the dense
/// peak (Megatron-LM's 52% on A100, PaLM's 46%), and an offloaded AdamW
/// update gets one eighth of a two-socket host's vector FLOP/s.
constexpr double kGpuAchievable = 0.5;
constexpr double kHostFlopsPerGpu = 1.0e12;

/// Assumptions for a GPU's reserve (docs/Planner.md): a CUDA context with
/// cuBLAS's workspace takes about half a GiB (PyTorch reports 0.3-0.6 GB
/// after its first CUDA call with CUDA 12's lazy module loading), and an
/// NCCL communicator holds NCCL_BUFFSIZE (4 MiB by default) per channel
/// for sending and receiving: 2 x 32 channels x 4 MiB = 256 MiB at
/// NVLink's most channels.
constexpr uint64_t kCudaContextBytes = uint64_t(512) << 20;
constexpr uint64_t kNcclCommunicatorBytes = uint64_t(256) << 20;

/// A GPU preset with the reserve assumptions; `hostMemory`: the system
/// memory of NVIDIA's 8-GPU server of it (DGX) over its 8 GPUs.
Hardware gpu(const char *name, double peakFlops, double memory,
             double bandwidth, double interconnect, double host,
             double hostMemory, double node) {
  Hardware h;
  h.name = name;
  h.peakFlops = peakFlops;
  h.achievableFraction = kGpuAchievable;
  h.memoryBytes = static_cast<uint64_t>(memory);
  h.memoryBandwidth = bandwidth;
  h.interconnectBandwidth = interconnect;
  h.hostBandwidth = host;
  h.hostFlops = kHostFlopsPerGpu;
  h.contextBytes = kCudaContextBytes;
  h.communicatorBytes = kNcclCommunicatorBytes;
  h.hostMemoryBytes = static_cast<uint64_t>(hostMemory);
  h.nodeBandwidth = node;
  h.ranksPerNode = 8;
  return h;
}

std::vector<Hardware> presets() {
  std::vector<Hardware> list;
  // NVIDIA H100 SXM5 80GB: BF16 1,979 TFLOP/s with sparsity (989.4 dense),
  // HBM3 3.35 TB/s, NVLink 4 900 GB/s (450 per direction), PCIe Gen5 x16;
  // DGX H100: 2 TB of system memory for 8, a 400 Gb/s ConnectX-7 (NDR
  // InfiniBand, 50 GB/s per direction) per GPU between nodes.
  list.push_back(gpu("h100-80gb", 989.4 * kTB, 80 * kGB, 3.35 * kTB, 450 * kGB,
                     64 * kGB, 2 * kTB / 8, 50 * kGB));
  // NVIDIA H200 SXM 141GB: the H100's compute, HBM3e 4.8 TB/s; DGX H200:
  // 2 TB for 8, the DGX H100's network.
  list.push_back(gpu("h200", 989.4 * kTB, 141 * kGB, 4.8 * kTB, 450 * kGB,
                     64 * kGB, 2 * kTB / 8, 50 * kGB));
  // NVIDIA HGX B200: BF16 36 PFLOP/s with sparsity per 8 GPUs (2.25 dense
  // each), 1.44 TB HBM3e (180 GB each) at 8 TB/s, NVLink 5 1.8 TB/s (900 GB/s
  // per direction), PCIe Gen6 x16; DGX B200: 4 TB for 8, a 400 Gb/s
  // ConnectX-7 per GPU.
  list.push_back(gpu("b200", 2250 * kTB, 180 * kGB, 8 * kTB, 900 * kGB,
                     128 * kGB, 4 * kTB / 8, 50 * kGB));
  // NVIDIA A100 SXM4 80GB: BF16 312 TFLOP/s dense, HBM2e 2,039 GB/s,
  // NVLink 3 600 GB/s (300 per direction), PCIe Gen4 x16; DGX A100 640GB:
  // 2 TB for 8, a 200 Gb/s ConnectX-6 (HDR InfiniBand, 25 GB/s per
  // direction) per GPU between nodes (the network of Narayanan et al.'s
  // 3,072-GPU runs).
  list.push_back(gpu("a100-80gb", 312 * kTB, 80 * kGB, 2039 * kGB, 300 * kGB,
                     32 * kGB, 2 * kTB / 8, 25 * kGB));
  // NVIDIA A100 SXM4 40GB: the 80GB's compute and links, HBM2 1,555 GB/s;
  // DGX A100 320GB: 1 TB for 8.
  list.push_back(gpu("a100-40gb", 312 * kTB, 40 * kGB, 1555 * kGB, 300 * kGB,
                     32 * kGB, 1 * kTB / 8, 25 * kGB));
  // This project's CPU machines (docs/CpuSpeed.md): 2 cores of OpenBLAS
  // SGEMM at about 100 GFLOP/s each, 24 GiB; ranks on one machine exchange
  // through shared memory, the "host" arena is the same memory.
  // No device context: the arena is host memory, MPI's buffers are the
  // library's own.
  Hardware cpu;
  cpu.name = "cpu";
  cpu.peakFlops = 200e9;
  cpu.achievableFraction = 0.6;
  cpu.memoryBytes = uint64_t(24) << 30;
  cpu.memoryBandwidth = 20 * kGB;
  cpu.interconnectBandwidth = 5 * kGB;
  cpu.hostBandwidth = 20 * kGB;
  cpu.hostFlops = 200e9;
  cpu.hostMemoryBytes = uint64_t(24) << 30;
  list.push_back(cpu);
  return list;
}

} // namespace

std::vector<std::string> getHardwarePresetNames() {
  std::vector<std::string> names;
  for (const Hardware &h : presets())
    names.push_back(h.name);
  return names;
}

std::optional<Hardware> getHardwarePreset(llvm::StringRef name) {
  for (const Hardware &h : presets())
    if (h.name == name)
      return h;
  return std::nullopt;
}

static llvm::Error hardwareError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

/// A measured figure: finite and at least `least`.
static bool measuredNumber(const llvm::json::Value *value, double least,
                           double &out) {
  std::optional<double> number = value ? value->getAsNumber() : std::nullopt;
  if (!number || !std::isfinite(*number) || *number < least)
    return false;
  out = *number;
  return true;
}

/// gemm_rates: [{dtype, m, n, k, flops_per_second}].
static llvm::Error parseGemmRates(const llvm::json::Value &value,
                                  Hardware &h) {
  const llvm::json::Array *rates = value.getAsArray();
  if (!rates)
    return hardwareError("'gemm_rates' must be an array of {dtype, m, n, k, "
                         "flops_per_second}");
  for (const llvm::json::Value &entry : *rates) {
    const llvm::json::Object *rate = entry.getAsObject();
    GemmRate gemm;
    double m = 0, n = 0, k = 0;
    std::optional<llvm::StringRef> dtype =
        rate ? rate->getString("dtype") : std::nullopt;
    if (!rate || !dtype || rate->size() != 5 ||
        !measuredNumber(rate->get("m"), 1, m) ||
        !measuredNumber(rate->get("n"), 1, n) ||
        !measuredNumber(rate->get("k"), 1, k) ||
        !measuredNumber(rate->get("flops_per_second"), 1,
                        gemm.flopsPerSecond) ||
        m >= 9.2e18 || n >= 9.2e18 || k >= 9.2e18)
      return hardwareError("each of 'gemm_rates' must be {dtype, m, n, k, "
                           "flops_per_second} with sizes and a rate of at "
                           "least 1");
    gemm.dtype = dtype->str();
    gemm.m = static_cast<uint64_t>(m);
    gemm.n = static_cast<uint64_t>(n);
    gemm.k = static_cast<uint64_t>(k);
    h.gemmRates.push_back(gemm);
  }
  return llvm::Error::success();
}

/// op_rates: {op name: {seconds_per_flop, seconds_per_byte,
/// seconds_per_call}}.
static llvm::Error parseOpRates(const llvm::json::Value &value, Hardware &h) {
  const llvm::json::Object *ops = value.getAsObject();
  if (!ops)
    return hardwareError("'op_rates' must be an object of op names to "
                         "{seconds_per_flop, seconds_per_byte, "
                         "seconds_per_call}");
  for (const auto &[name, entry] : *ops) {
    const llvm::json::Object *rate = entry.getAsObject();
    OpRate op;
    if (!rate || rate->size() != 3 ||
        !measuredNumber(rate->get("seconds_per_flop"), 0, op.secondsPerFlop) ||
        !measuredNumber(rate->get("seconds_per_byte"), 0, op.secondsPerByte) ||
        !measuredNumber(rate->get("seconds_per_call"), 0, op.secondsPerCall))
      return hardwareError("'op_rates' entry '" + name.str() +
                           "' must be {seconds_per_flop, seconds_per_byte, "
                           "seconds_per_call}: finite, not negative");
    h.opRates[name.str()] = op;
  }
  return llvm::Error::success();
}

llvm::Expected<Hardware> parseHardwareJson(llvm::StringRef text) {
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed) {
    return hardwareError("not JSON: " + llvm::toString(parsed.takeError()));
  }
  const llvm::json::Object *object = parsed->getAsObject();
  if (!object) {
    return hardwareError("expected a JSON object of the device's figures");
  }
  Hardware h;
  struct Field {
    const char *key;
    double *number;
  };
  double memory = -1;
  Field numbers[] = {{"peak_flops", &h.peakFlops},
                     {"achievable_fraction", &h.achievableFraction},
                     {"memory_bytes", &memory},
                     {"memory_bandwidth", &h.memoryBandwidth},
                     {"interconnect_bandwidth", &h.interconnectBandwidth},
                     {"host_bandwidth", &h.hostBandwidth},
                     {"host_flops", &h.hostFlops}};
  for (const auto &[key, value] : *object) {
    if (key == "name" || key == "source") {
      std::optional<llvm::StringRef> name = value.getAsString();
      if (!name) {
        return hardwareError("'" + key.str() + "' must be a string");
      }
      (key == "name" ? h.name : h.source) = name->str();
      continue;
    }
    if (key == "shared_by_ranks") {
      std::optional<bool> shared = value.getAsBoolean();
      if (!shared)
        return hardwareError("'shared_by_ranks' must be true or false");
      h.sharedByRanks = *shared;
      continue;
    }
    if (key == "context_bytes" || key == "communicator_bytes" ||
        key == "host_memory_bytes") {
      double bytes = 0;
      if (!measuredNumber(&value, 0, bytes) || bytes >= 9.2e18)
        return hardwareError("'" + key.str() +
                             "' must be a number of bytes from 0 to below "
                             "2^63");
      (key == "context_bytes"        ? h.contextBytes
       : key == "communicator_bytes" ? h.communicatorBytes
                                     : h.hostMemoryBytes) =
          static_cast<uint64_t>(bytes);
      continue;
    }
    if (key == "ranks_per_node") {
      std::optional<int64_t> count = value.getAsInteger();
      if (!count || *count < 1 || *count > (int64_t(1) << 30))
        return hardwareError("'ranks_per_node' must be a count of devices "
                             "from 1 to 2^30");
      h.ranksPerNode = *count;
      continue;
    }
    if (key == "node_bandwidth") {
      if (!measuredNumber(&value, 1, h.nodeBandwidth) ||
          h.nodeBandwidth >= 9.2e18)
        return hardwareError("'node_bandwidth' must be a number from 1 to "
                             "below 2^63 (bytes/s)");
      continue;
    }
    if (key == "gemm_rates" || key == "op_rates") {
      if (llvm::Error error = key == "gemm_rates" ? parseGemmRates(value, h)
                                                  : parseOpRates(value, h))
        return std::move(error);
      continue;
    }
    Field *field = nullptr;
    for (Field &f : numbers)
      if (key == f.key)
        field = &f;
    if (!field) {
      std::string known = "name, source, context_bytes, communicator_bytes, "
                          "host_memory_bytes, node_bandwidth, ranks_per_node, "
                          "shared_by_ranks, gemm_rates, op_rates";
      for (Field &f : numbers)
        known += std::string(", ") + f.key;
      return hardwareError("unknown key '" + key.str() + "' (the keys are " +
                           known + ")");
    }
    // Rates and sizes of at least 1 (per second, bytes) and a fraction of
    // at least 1e-3: every time the model divides by them is then a finite
    // number of seconds (counts are below 2^64).
    std::optional<double> number = value.getAsNumber();
    bool isFraction = field->number == &h.achievableFraction;
    double least = isFraction ? 1e-3 : 1.0;
    if (!number || !(*number >= least) || !(*number < 9.2e18) ||
        (isFraction && *number > 1)) {
      return hardwareError(
          "'" + key.str() + "' must be a number " +
          (isFraction ? "from 0.001 to 1" : "from 1 to below 2^63"));
    }
    *field->number = *number;
  }
  for (Field &f : numbers)
    if (!object->get(f.key)) {
      return hardwareError(std::string("missing key '") + f.key + "'");
    }
  if (h.name.empty())
    h.name = "custom";
  h.memoryBytes = static_cast<uint64_t>(memory);
  return h;
}

std::string printHardwareJson(const Hardware &h) {
  llvm::json::Array gemms;
  for (const GemmRate &gemm : h.gemmRates)
    gemms.push_back(llvm::json::Object{
        {"dtype", gemm.dtype},
        {"m", static_cast<int64_t>(gemm.m)},
        {"n", static_cast<int64_t>(gemm.n)},
        {"k", static_cast<int64_t>(gemm.k)},
        {"flops_per_second", gemm.flopsPerSecond}});
  llvm::json::Object ops;
  for (const auto &[name, rate] : h.opRates)
    ops[name] = llvm::json::Object{{"seconds_per_flop", rate.secondsPerFlop},
                                   {"seconds_per_byte", rate.secondsPerByte},
                                   {"seconds_per_call", rate.secondsPerCall}};
  llvm::json::Object object{
      {"name", h.name},
      {"peak_flops", h.peakFlops},
      {"achievable_fraction", h.achievableFraction},
      {"memory_bytes", static_cast<double>(h.memoryBytes)},
      {"memory_bandwidth", h.memoryBandwidth},
      {"interconnect_bandwidth", h.interconnectBandwidth},
      {"host_bandwidth", h.hostBandwidth},
      {"host_flops", h.hostFlops}};
  if (!h.source.empty())
    object["source"] = h.source;
  if (h.sharedByRanks)
    object["shared_by_ranks"] = true;
  if (h.contextBytes)
    object["context_bytes"] = static_cast<int64_t>(h.contextBytes);
  if (h.communicatorBytes)
    object["communicator_bytes"] = static_cast<int64_t>(h.communicatorBytes);
  if (h.hostMemoryBytes)
    object["host_memory_bytes"] = static_cast<int64_t>(h.hostMemoryBytes);
  if (h.nodeBandwidth > 0)
    object["node_bandwidth"] = h.nodeBandwidth;
  if (h.ranksPerNode != 8)
    object["ranks_per_node"] = h.ranksPerNode;
  if (!gemms.empty())
    object["gemm_rates"] = std::move(gemms);
  if (!ops.empty())
    object["op_rates"] = std::move(ops);
  std::string text;
  llvm::raw_string_ostream os(text);
  writeJson(os, llvm::json::Value(std::move(object)));
  os << "\n";
  return text;
}

llvm::Expected<Hardware> loadHardware(llvm::StringRef nameOrPath) {
  if (std::optional<Hardware> preset = getHardwarePreset(nameOrPath))
    return *preset;
  llvm::sys::fs::file_status status;
  bool exists = !llvm::sys::fs::status(nameOrPath, status);
  if (!exists && !nameOrPath.ends_with(".json"))
    return hardwareError("unknown hardware '" + nameOrPath + "' (presets: " +
                         llvm::join(getHardwarePresetNames(), ", ") +
                         "; or a .json file of the same figures)");
  // A device or a pipe would be read without end.
  if (exists && status.type() != llvm::sys::fs::file_type::regular_file)
    return hardwareError("'" + nameOrPath +
                         "' is not a regular file: --hardware takes a preset "
                         "(" +
                         llvm::join(getHardwarePresetNames(), ", ") +
                         ") or a .json file of the same figures");
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> file =
      llvm::MemoryBuffer::getFile(nameOrPath);
  if (!file)
    return hardwareError("cannot read '" + nameOrPath +
                         "': " + file.getError().message());
  llvm::Expected<Hardware> hardware = parseHardwareJson((*file)->getBuffer());
  if (!hardware)
    return hardwareError(nameOrPath + ": " +
                         llvm::toString(hardware.takeError()));
  return hardware;
}

} // namespace train
} // namespace mlir
