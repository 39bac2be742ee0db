//===- Debug.h - LLVM_DEBUG in every build of trainmem ------------*- C++
//-*-===//
//
// A pass says what it decides with upstream's idiom,
//
//   #define DEBUG_TYPE "train-zero"
//   ...
//   LLVM_DEBUG(llvm::dbgs() << "bucket 0: 3 parameters, 2.1 MB\n");
//
// and `trainmem-opt -debug-only=train-zero` (or `-debug` for every pass)
// prints it. Upstream's LLVM_DEBUG compiles to nothing under NDEBUG, and
// both Debian's LLVM and trainmem build with it (Release); libLLVM still
// has llvm::DebugFlag and the debug-type list (isCurrentDebugType), so
// this header, included after llvm/Support/Debug.h, makes LLVM_DEBUG (and
// DEBUG_WITH_TYPE, for a file with two passes) test them in every build, and
// registerDebugOptions() gives the tools the
// `-debug` and `-debug-only=` options an LLVM built with assertions has
// (and leaves them alone where it does). Include it last.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_DEBUG_DEBUG_H
#define TRAINMEM_DEBUG_DEBUG_H

#include "mlir/IR/PatternMatch.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/Support/Debug.h"
#include "llvm/Support/raw_ostream.h"

#ifdef NDEBUG
// llvm/Support/Debug.h makes these macros under NDEBUG; libLLVM has the
// functions all the same.
#undef isCurrentDebugType
#undef setCurrentDebugTypes
namespace llvm {
bool isCurrentDebugType(const char *type, int level);
void setCurrentDebugTypes(const char **types, unsigned count);
} // namespace llvm
#undef DEBUG_WITH_TYPE
#define DEBUG_WITH_TYPE(TYPE, ...)                                             \
  do {                                                                         \
    if (::llvm::DebugFlag && ::llvm::isCurrentDebugType(TYPE, 1)) {            \
      __VA_ARGS__;                                                             \
    }                                                                          \
  } while (false)
#undef LLVM_DEBUG
#define LLVM_DEBUG(...) DEBUG_WITH_TYPE(DEBUG_TYPE, __VA_ARGS__)
#endif

namespace mlir {
namespace train {

/// A pattern pass's debug output: each pattern's failure to match, with its
/// reason (notifyMatchFailure), and each op a pattern replaced, as lines
/// "<type>: ..." on llvm::dbgs(). Set on the greedy driver's config under
/// LLVM_DEBUG, so that it costs nothing otherwise:
///
///   DebugRewriteListener listener(DEBUG_TYPE);
///   GreedyRewriteConfig config;
///   LLVM_DEBUG(config.setListener(&listener));
class DebugRewriteListener : public RewriterBase::Listener {
public:
  explicit DebugRewriteListener(const char *type) : type(type) {}
  void
  notifyMatchFailure(Location loc,
                     function_ref<void(Diagnostic &)> reasonCallback) override;
  void notifyOperationReplaced(Operation *op, ValueRange replacement) override;

private:
  const char *type;
};

/// applyPatternsGreedily on `root`, with a DebugRewriteListener printing
/// under `debugType` when that type's debug output is on.
LogicalResult applyPatternsWithDebug(Operation *root,
                                     RewritePatternSet &&patterns,
                                     const char *debugType);

/// A fusion pass's rewrite: the patterns applied (applyPatternsWithDebug),
/// and how many more `FusedOp`s `root` holds after them.
template <typename FusedOp>
FailureOr<uint64_t> applyFusionPatterns(Operation *root,
                                        RewritePatternSet &&patterns,
                                        const char *debugType) {
  auto count = [root] {
    uint64_t n = 0;
    root->walk([&](FusedOp) { ++n; });
    return n;
  };
  uint64_t before = count();
  if (failed(applyPatternsWithDebug(root, std::move(patterns), debugType)))
    return failure();
  return count() - before;
}

/// Registers `-debug` and `-debug-only=<type>[,<type>...]` (the passes'
/// DEBUG_TYPE, their flag names) with the command line, unless LLVM already
/// has them. Call before parsing it.
void registerDebugOptions();

} // namespace train
} // namespace mlir

#endif // TRAINMEM_DEBUG_DEBUG_H
