//===- Json.cpp - JSON with numbers as people read them -------------------===//

#include "trainmem/Plan/Json.h"

#include "llvm/ADT/STLExtras.h"

#include <charconv>
#include <cmath>
#include <vector>

using namespace llvm;

static void write(json::OStream &out, const json::Value &value) {
  if (const json::Object *object = value.getAsObject()) {
    // Sorted as llvm::json sorts them.
    std::vector<const json::Object::value_type *> entries;
    for (const auto &entry : *object)
      entries.push_back(&entry);
    llvm::sort(entries, [](const auto *a, const auto *b) {
      return a->first < b->first;
    });
    out.object([&] {
      for (const auto *entry : entries)
        out.attributeBegin(entry->first), write(out, entry->second),
            out.attributeEnd();
    });
    return;
  }
  if (const json::Array *array = value.getAsArray()) {
    out.array([&] {
      for (const json::Value &element : *array)
        write(out, element);
    });
    return;
  }
  std::optional<double> number = value.getAsNumber();
  if (!number || value.getAsInteger() || value.getAsUINT64() ||
      !std::isfinite(*number)) {
    out.value(value);
    return;
  }
  out.rawValue(mlir::train::shortestNumber(*number));
}

std::string mlir::train::shortestNumber(double value) {
  char text[32];
  std::to_chars_result result =
      std::to_chars(text, text + sizeof(text), value);
  return std::string(text, result.ptr - text);
}

void mlir::train::writeJson(raw_ostream &os, const json::Value &value,
                            unsigned indent) {
  json::OStream out(os, indent);
  write(out, value);
}
