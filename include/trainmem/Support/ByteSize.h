//===- ByteSize.h - sizes as people write them -----------------*- C++ -*-===//
//
// "80GB", "24GiB", "512MiB", "1e9", "4096": bytes. One reader for every
// option that takes a size (train-remat's budget, trainmem-plan's
// --memory), so a size written for one works for the other; and one way to
// print a size (the memory report, trainmem-run), in trainmem-plan's units.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_SUPPORT_BYTESIZE_H
#define TRAINMEM_SUPPORT_BYTESIZE_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace trainmem {

/// The bytes `text` names: a number (an integer or a decimal, e.g. 1e9)
/// with an optional unit, in any case: decimal (KB, MB, GB, TB, or K, M, G,
/// T: powers of 1000, as GPU memory is quoted: "80G") or binary (KiB, MiB,
/// GiB, TiB: powers of 1024), or B. None unless it is at least one byte
/// and below 2^63 (a count the analyses can compare).
inline std::optional<uint64_t> parseByteSize(llvm::StringRef text) {
  text = text.trim();
  struct Unit {
    llvm::StringLiteral suffix;
    double scale;
  };
  static constexpr Unit kUnits[] = {
      {"TiB", 1099511627776.0}, {"GiB", 1073741824.0}, {"MiB", 1048576.0},
      {"KiB", 1024.0},          {"TB", 1e12},          {"GB", 1e9},
      {"MB", 1e6},              {"KB", 1e3},           {"T", 1e12},
      {"G", 1e9},               {"M", 1e6},            {"K", 1e3},
      {"B", 1.0}};
  double scale = 1.0;
  for (const Unit &unit : kUnits)
    if (text.ends_with_insensitive(unit.suffix)) {
      text = text.drop_back(unit.suffix.size()).trim();
      scale = unit.scale;
      break;
    }
  double value;
  if (text.empty() || text.getAsDouble(value) || !(value * scale >= 1.0) ||
      !(value * scale < 9.2e18))
    return std::nullopt;
  return static_cast<uint64_t>(value * scale);
}

/// `bytes` as people read them, in the units trainmem-plan and the
/// hardware presets use (powers of 1000): "12.03 GB", "4.81 MB", "1.5 KB",
/// "0 B".
inline std::string formatByteSize(uint64_t bytes) {
  char text[32];
  if (bytes >= 1000000000ull)
    std::snprintf(text, sizeof(text), "%.2f GB", bytes / 1e9);
  else if (bytes >= 1000000ull)
    std::snprintf(text, sizeof(text), "%.2f MB", bytes / 1e6);
  else if (bytes >= 1000ull)
    std::snprintf(text, sizeof(text), "%.1f KB", bytes / 1e3);
  else
    std::snprintf(text, sizeof(text), "%llu B",
                  static_cast<unsigned long long>(bytes));
  return text;
}

} // namespace trainmem

#endif // TRAINMEM_SUPPORT_BYTESIZE_H
