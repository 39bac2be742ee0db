//===- MemoryTimeline.h - the memory timeline as SVG ------------*- C++ -*-===//
//
// What train-memory-report draws and names from a FunctionMemory, apart
// from the pass: the timeline of live bytes as an SVG chart, and the
// description of the op at a program point that its reports share.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_ANALYSIS_MEMORYTIMELINE_H
#define TRAINMEM_ANALYSIS_MEMORYTIMELINE_H

#include "trainmem/Analysis/MemoryAnalysis.h"

#include "llvm/Support/raw_ostream.h"

#include <string>

namespace mlir {
namespace train {

/// The op at a program point as the reports name it: its name, the block
/// (kind, layer, backward) it is in and its name location; "function
/// entry" for none.
std::string describeOp(Operation *op);

/// The live bytes of `memory`'s function over its schedule as an SVG
/// chart: one stacked area per category, the phases shaded, the peak and
/// the op there marked, a legend with each category's bytes at the peak.
void printMemoryTimelineSvg(llvm::raw_ostream &os,
                            const FunctionMemory &memory);

} // namespace train
} // namespace mlir

#endif // TRAINMEM_ANALYSIS_MEMORYTIMELINE_H
