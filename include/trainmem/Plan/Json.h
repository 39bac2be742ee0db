//===- Json.h - JSON with numbers as people read them ------------*- C++ -*-===//
//
// llvm::json prints a double with 17 significant digits, so a 0.9 reads
// 0.90000000000000002 in a config a user pastes into DeepSpeed. writeJson
// prints the same document (keys sorted, the same indentation) with each
// double in its shortest form that reads back to the same value.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_PLAN_JSON_H
#define TRAINMEM_PLAN_JSON_H

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace mlir {
namespace train {

/// `value` in its shortest decimal form that reads back as the same double
/// (C++17 to_chars: "0.9", "1e-08").
std::string shortestNumber(double value);

/// Writes `value` to `os` indented by `indent` spaces a level, doubles in
/// their shortest round-trip form.
void writeJson(llvm::raw_ostream &os, const llvm::json::Value &value,
               unsigned indent = 2);

} // namespace train
} // namespace mlir

#endif // TRAINMEM_PLAN_JSON_H
