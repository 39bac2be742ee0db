//===- PassOptionTextGen.cpp - the pass options' text form ----------------===//
//
// -gen-pass-option-text: for each pass with options (and the generated
// `<Pass>Options` struct of -gen-pass-decls), the functions that make the
// struct the typed form of the pass's textual options:
//
//   PassOptionsTraits<XPassOptions>   the pass's argument and create()
//   parsePassOptions(text, options, errors)
//   printPassOptions(options, all)    the options that differ from the
//                                     defaults (every option with `all`),
//                                     in declaration order
//   operator== / operator!=
//
// GEN_PASS_OPTION_TEXT_DECL gives the declarations, GEN_PASS_OPTION_TEXT_DEF
// the definitions (through a PassPipelineOptions mirror of the pass's
// options, declared with the same flags, so that text parses exactly as the
// pass parses it). Both are included inside the namespace of the passes,
// after PassOptionText.h's helpers.
//
//===----------------------------------------------------------------------===//

#include "mlir/TableGen/GenInfo.h"
#include "mlir/TableGen/Pass.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/TableGen/Record.h"
#include "llvm/TableGen/TableGenBackend.h"

using namespace mlir;
using namespace mlir::tblgen;
using llvm::RecordKeeper;
using llvm::StringRef;

namespace {

/// `text` as the body of a C++ string literal.
std::string cppString(StringRef text) {
  std::string out;
  for (char c : text.trim()) {
    if (c == '\\' || c == '"')
      out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out;
}

std::string optionsStruct(const Pass &pass) {
  return (pass.getDef()->getName() + "Options").str();
}

void emitDecl(const Pass &pass, llvm::raw_ostream &os) {
  std::string options = optionsStruct(pass);
  os << llvm::formatv("/// {0}'s options (the struct of -gen-pass-decls) "
                      "as its text.\n",
                      pass.getArgument());
  os << llvm::formatv("template <> struct PassOptionsTraits<{0}> {{\n"
                      "  static constexpr ::llvm::StringLiteral argument = "
                      "\"{1}\";\n",
                      options, pass.getArgument());
  if (pass.getConstructor().empty())
    os << llvm::formatv(
        "  static std::unique_ptr<::mlir::Pass> create({0} options) {{\n"
        "    return create{1}(std::move(options));\n  }\n",
        options, pass.getDef()->getName());
  os << "};\n";
  os << llvm::formatv(
      "::llvm::LogicalResult parsePassOptions(::llvm::StringRef text, {0} "
      "&options, ::llvm::raw_ostream &errors);\n"
      "std::string printPassOptions(const {0} &options, bool all = "
      "false);\n"
      "bool operator==(const {0} &lhs, const {0} &rhs);\n"
      "inline bool operator!=(const {0} &lhs, const {0} &rhs) {{\n"
      "  return !(lhs == rhs);\n}\n\n",
      options);
}

void emitDef(const Pass &pass, llvm::raw_ostream &os) {
  std::string options = optionsStruct(pass);
  std::string mirror = options + "Text";
  os << "namespace {\n";
  os << llvm::formatv("/// {0}'s options as the pass declares them.\n"
                      "struct {1} : public ::mlir::PassPipelineOptions<{1}> "
                      "{{\n",
                      pass.getArgument(), mirror);
  for (const PassOption &opt : pass.getOptions()) {
    os << llvm::formatv("  {0}<{1}> {2}{{*this, \"{3}\", "
                        "::llvm::cl::desc(\"{4}\")",
                        opt.isListOption() ? "ListOption" : "Option",
                        opt.getType(), opt.getCppVariableName(),
                        opt.getArgument(), cppString(opt.getDescription()));
    if (std::optional<StringRef> init = opt.getDefaultValue())
      os << ", ::llvm::cl::init(" << *init << ")";
    if (std::optional<StringRef> flags = opt.getAdditionalFlags())
      os << ", " << *flags;
    os << "};\n";
  }
  os << "};\n} // namespace\n\n";

  os << llvm::formatv(
      "::llvm::LogicalResult parsePassOptions(::llvm::StringRef "
      "text, {0} &options, ::llvm::raw_ostream &errors) {{\n"
      "  {1} parsed;\n"
      "  std::string message;\n"
      "  ::llvm::raw_string_ostream os(message);\n"
      "  if (::mlir::failed(parsed.parseFromString(text, os)) "
      "||\n"
      "      ::mlir::failed(completeParsedOptions(parsed, "
      "options, os))) {{\n"
      "    // A value the option's parser refuses is reported "
      "on stderr by llvm::cl.\n"
      "    errors << (message.empty() ? \"{2}: bad value in '\" "
      "+ text.str() + \"'\" : message);\n"
      "    return ::mlir::failure();\n  }\n",
      options, mirror, pass.getArgument());
  for (const PassOption &opt : pass.getOptions()) {
    StringRef name = opt.getCppVariableName();
    if (opt.isListOption())
      os << llvm::formatv(
          "  options.{0}.assign(parsed.{0}.begin(), parsed.{0}.end());\n",
          name);
    else
      os << llvm::formatv("  options.{0} = parsed.{0}.getValue();\n", name);
  }
  os << "  return ::mlir::success();\n}\n\n";

  os << llvm::formatv(
      "std::string printPassOptions(const {0} &options, bool all) {{\n"
      "  {1} text;\n  const {0} defaults;\n"
      "  ::mlir::train::option_text::PassOptionWords words;\n",
      options, mirror);
  for (const PassOption &opt : pass.getOptions())
    os << llvm::formatv("  if (all || !(options.{0} == defaults.{0}))\n"
                        "    words.add(text.{0}, options.{0});\n",
                        opt.getCppVariableName());
  os << "  return words.str();\n}\n\n";

  os << llvm::formatv("bool operator==(const {0} &lhs, const {0} &rhs) {{\n"
                      "  return true",
                      options);
  for (const PassOption &opt : pass.getOptions())
    os << llvm::formatv("\n      && lhs.{0} == rhs.{0}",
                        opt.getCppVariableName());
  os << ";\n}\n\n";
}

bool emitPassOptionText(const RecordKeeper &records, llvm::raw_ostream &os) {
  llvm::emitSourceFileHeader("Pass option text", os, records);
  std::vector<Pass> passes;
  for (const llvm::Record *def : records.getAllDerivedDefinitions("PassBase"))
    if (!def->getValueAsListOfDefs("options").empty())
      passes.emplace_back(def);
  os << "#ifdef GEN_PASS_OPTION_TEXT_DECL\n#undef "
        "GEN_PASS_OPTION_TEXT_DECL\n\n";
  for (const Pass &pass : passes)
    emitDecl(pass, os);
  os << "#endif // GEN_PASS_OPTION_TEXT_DECL\n\n";
  os << "#ifdef GEN_PASS_OPTION_TEXT_DEF\n#undef GEN_PASS_OPTION_TEXT_DEF\n\n";
  for (const Pass &pass : passes)
    emitDef(pass, os);
  os << "#endif // GEN_PASS_OPTION_TEXT_DEF\n";
  return false;
}

GenRegistration genPassOptionText(
    "gen-pass-option-text",
    "Generate the parse/print/compare functions of pass option structs",
    emitPassOptionText);

} // namespace
