//===- Calibrate.h - this machine's figures, measured ------------*- C++ -*-===//
//
// `trainmem-plan --hardware native`: the figures of the device the runtime
// runs on, measured by running small training steps on it with the
// runtime's kernel profile on. Each kernel call is traced to the op it was
// lowered from (its location), so every op of the steps gets its measured
// seconds: matrix products give GEMM rates at their shapes, the other ops
// a fit of their time to their FLOPs and bytes (TimeModel.h reads both).
// The figures are cached as a hardware JSON (Hardware.h) and measured again
// on request.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_PLAN_CALIBRATE_H
#define TRAINMEM_PLAN_CALIBRATE_H

#include "trainmem/Plan/Hardware.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace mlir {
namespace train {

struct CalibrationOptions {
  /// The runtime backend measured ("cpu").
  std::string backend = "cpu";
  /// Its threads (0: every core, as trainmem-run's default).
  int64_t threads = 0;
  /// The three smallest steps only (a few seconds: tests, a first look);
  /// cached apart from the full figures.
  bool quick = false;
  /// trainmem-run, which measures the collectives between two local MPI
  /// ranks (mpirun from PATH); empty: collectives not measured.
  std::string runTool;
  /// Where progress goes (one line per step measured); null: nowhere.
  llvm::raw_ostream *log = nullptr;
};

/// One measured execution of an op: its CostOpInterface counts and its
/// seconds.
struct OpTiming {
  double flops = 0, bytes = 0, seconds = 0;
};

/// The rate that predicts `timings` (each with seconds > 0): the least
/// squares of secondsPerFlop · FLOPs + secondsPerByte · bytes +
/// secondsPerCall against the seconds, each weighted by 1 / its seconds,
/// every rate >= 0, the per-call time never alone and never above the
/// fastest execution's seconds; the best of the subsets of the three that
/// satisfy that.
OpRate fitOpRate(llvm::ArrayRef<OpTiming> timings);

/// Measures this machine: an error says what could not run.
llvm::Expected<Hardware> calibrateHardware(const CalibrationOptions &options);

/// The cached native figures' path: $TRAINMEM_CACHE_DIR, else
/// $XDG_CACHE_HOME/trainmem, else $HOME/.cache/trainmem, then
/// hardware-native-<host>-<backend>[-quick].json.
std::string nativeHardwarePath(const CalibrationOptions &options);

/// `--hardware native`: the cached figures, measured first where there are
/// none (or `recalibrate`) and cached, the path said on `log`. Where the
/// measurement cannot run or the cache cannot be written, a warning on
/// `log`; with no figures, the `cpu` preset.
Hardware loadNativeHardware(const CalibrationOptions &options,
                            bool recalibrate, llvm::raw_ostream &log);

} // namespace train
} // namespace mlir

#endif // TRAINMEM_PLAN_CALIBRATE_H
