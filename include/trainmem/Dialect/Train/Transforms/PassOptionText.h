//===- PassOptionText.h - pass options, typed and as text -------*- C++ -*-===//
//
// Each pass's generated options struct (`TrainZeroPassOptions`, from
// -gen-pass-decls) is the typed form of its textual options; trainmem-tblgen
// (-gen-pass-option-text) generates, from the same Passes.td records:
//
//   PassOptionsTraits<TrainZeroPassOptions>::argument   "train-zero"
//   PassOptionsTraits<TrainZeroPassOptions>::create(o)  createTrainZeroPass(o)
//   parsePassOptions("stage=1 ranks=2", options, errors)
//   printPassOptions(options)     "stage=1 ranks=2": what differs from the
//                                 defaults, parsed back to the same options
//   operator==, operator!=
//
// so that pipelines are built from typed options (train-step, the planner)
// and print as the text a user writes.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_DIALECT_TRAIN_TRANSFORMS_PASSOPTIONTEXT_H
#define TRAINMEM_DIALECT_TRAIN_TRANSFORMS_PASSOPTIONTEXT_H

#include "trainmem/Dialect/Train/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <type_traits>

namespace mlir {
namespace train {

/// The pass that takes `OptionsT`: `argument` and, where the pass has no
/// custom constructor, `create(OptionsT)`.
template <typename OptionsT> struct PassOptionsTraits;

namespace option_text {

/// The shortest decimal text of `value` that reads back as `value`.
std::string printRoundTripDouble(double value);

/// Words `name=value` in a pass's option syntax.
class PassOptionWords {
public:
  /// Appends `option`'s name and `value` printed as `option` parses it.
  template <typename OptionT, typename T>
  void add(OptionT &option, const T &value) {
    std::string word;
    llvm::raw_string_ostream os(word);
    os << option.ArgStr << '=';
    printValue(os, option.getParser(), value);
    words.push_back(std::move(word));
  }

  std::string str() const { return llvm::join(words, " "); }

private:
  template <typename ParserT, typename T>
  static void printValue(llvm::raw_ostream &os, ParserT &parser,
                         const T &value) {
    if constexpr (std::is_enum_v<T>) {
      std::optional<StringRef> name = parser.findArgStrForValue(value);
      os << (name ? *name : StringRef("?"));
    } else if constexpr (std::is_same_v<T, bool>) {
      os << (value ? "true" : "false");
    } else if constexpr (std::is_floating_point_v<T>) {
      os << printRoundTripDouble(value);
    } else if constexpr (std::is_same_v<T, std::string>) {
      printString(os, value);
    } else if constexpr (std::is_integral_v<T>) {
      os << value;
    } else {
      // A list option: its elements, comma-separated.
      llvm::interleave(
          value, os,
          [&](const auto &element) { printValue(os, parser, element); }, ",");
    }
  }

  /// A string as the option parser reads it back: in braces where it
  /// would otherwise end the word or open a nested value.
  static void printString(llvm::raw_ostream &os, const std::string &value);

  SmallVector<std::string> words;
};

} // namespace option_text

/// What a pass does after parsing its options (its initializeOptions
/// override), on `parsed`, the PassOptions mirror of `OptionsT`: nothing
/// unless an overload for `OptionsT` says (PassOptionText.cpp).
template <typename MirrorT, typename OptionsT>
LogicalResult completeParsedOptions(MirrorT &parsed, OptionsT &options,
                                    llvm::raw_ostream &errors) {
  return success();
}

#define GEN_PASS_OPTION_TEXT_DECL
#include "trainmem/Dialect/Train/Transforms/PassOptionText.h.inc"

/// The pass of `options` as a pipeline element: `name{options}`, or `name`
/// when every option has its default.
template <typename OptionsT> std::string printPass(const OptionsT &options) {
  std::string text = printPassOptions(options);
  std::string name = PassOptionsTraits<OptionsT>::argument.str();
  return text.empty() ? name : name + "{" + text + "}";
}

/// Adds the pass of `options` to `pm`.
template <typename OptionsT> void addPass(OpPassManager &pm, OptionsT options) {
  pm.addPass(PassOptionsTraits<OptionsT>::create(std::move(options)));
}

} // namespace train
} // namespace mlir

#endif // TRAINMEM_DIALECT_TRAIN_TRANSFORMS_PASSOPTIONTEXT_H
