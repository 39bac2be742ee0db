//===- MemoryTimeline.cpp - the memory timeline as SVG --------------------===//
//
// train-memory-report's format=svg: the live bytes of each category over
// the schedule as stacked areas, the phases shaded, the peak marked.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Analysis/MemoryTimeline.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Support/ByteSize.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>

namespace mlir {
namespace train {

std::string describeOp(Operation *op) {
  if (!op)
    return "function entry";
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "'" << op->getName() << "'";
  if (auto block = op->getParentOfType<BlockOp>()) {
    os << " in " << stringifyBlockKind(block.getKind());
    if (IntegerAttr layer = block.getLayerAttr())
      os << " layer " << layer.getInt();
    if (block.getBackward())
      os << " backward";
  }
  if (auto name = dyn_cast<NameLoc>(op->getLoc()))
    os << " (" << name.getName().getValue() << ")";
  return text;
}

namespace {

/// Live bytes per category at every program point (point 0: the entry; op
/// i of the schedule: point i + 1), from the buffers' live ranges.
std::vector<CategoryBytes> liveByCategory(const FunctionMemory &memory) {
  size_t points = memory.getSchedule().size() + 1;
  std::vector<CategoryBytes> delta(points + 1, CategoryBytes{});
  for (const Buffer &buffer : memory.getBuffers()) {
    if (buffer.host) // not the device's (train-offload-optimizer)
      continue;
    unsigned c = static_cast<unsigned>(buffer.category);
    delta[buffer.firstPoint][c] += buffer.bytes;
    delta[buffer.lastPoint + 1][c] -= buffer.bytes;
  }
  std::vector<CategoryBytes> live(points, CategoryBytes{});
  CategoryBytes running{};
  for (size_t p = 0; p < points; ++p) {
    for (unsigned c = 0; c < kNumMemoryCategories; ++c)
      running[c] += delta[p][c];
    live[p] = running;
  }
  return live;
}

/// Text for an SVG element or a double-quoted attribute.
std::string xmlEscaped(StringRef text) {
  std::string out;
  for (char c : text) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

/// Bytes as people read them on an axis: B, KB, MB, GB or TB (powers of
/// 1000, as the report's and trainmem-plan's figures).
std::string axisBytes(double bytes) {
  const char *units[] = {"B", "KB", "MB", "GB", "TB"};
  int unit = 0;
  while (bytes >= 1000.0 && unit < 4) {
    bytes /= 1000.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%g %s", bytes, units[unit]);
  return text;
}

/// A step of about `top / ticks`: 1, 2 or 5 times a power of ten bytes
/// (which reads well in decimal units: 200 MB, 500 MB, 1 GB, ...).
double tickStep(double top, int ticks) {
  double decade = 1.0;
  while (true) {
    for (double mantissa : {1.0, 2.0, 5.0})
      if (top / (mantissa * decade) <= ticks)
        return mantissa * decade;
    decade *= 10.0;
  }
}

/// The chart printMemoryTimelineSvg draws: its geometry, the columns shown
/// (each the point of most live bytes of the schedule points it spans, so
/// that the peak is drawn at its height), and the scale.
struct SvgChart {
  static constexpr int width = 960, height = 440, left = 90, right = 20,
                       top = 50, bottom = 90;
  static constexpr int plotW = width - left - right,
                       plotH = height - top - bottom;
  const FunctionMemory &memory;
  std::vector<CategoryBytes> live;
  std::vector<size_t> shown;
  uint64_t peak;
  unsigned peakPoint;
  double yTop;

  explicit SvgChart(const FunctionMemory &memory)
      : memory(memory), live(liveByCategory(memory)),
        peak(memory.getPeakBytes()), peakPoint(memory.getPeakPoint()) {
    ArrayRef<uint64_t> total = memory.getLiveBytes();
    size_t points = live.size();
    // Columns two pixels wide at least; each shows its point of most live
    // bytes, as a flat step.
    size_t columns = std::min<size_t>(points, static_cast<size_t>(plotW / 2));
    shown.resize(columns);
    for (size_t col = 0; col < columns; ++col) {
      size_t first = col * points / columns,
             last = (col + 1) * points / columns;
      size_t best = first;
      for (size_t p = first; p < last; ++p)
        if (total[p] > total[best] || p == peakPoint)
          best = p;
      if (peakPoint >= first && peakPoint < last)
        best = peakPoint;
      shown[col] = best;
    }
    yTop = std::max<double>(1.0, static_cast<double>(peak)) * 1.08;
  }
  size_t columns() const { return shown.size(); }
  /// Column col spans [x(col), x(col + 1)).
  double x(double col) const { return left + col * plotW / columns(); }
  double y(double bytes) const { return top + plotH - bytes / yTop * plotH; }

  void printPhases(llvm::raw_ostream &os) const;
  void printAreas(llvm::raw_ostream &os) const;
  void printAxes(llvm::raw_ostream &os) const;
  void printPeak(llvm::raw_ostream &os) const;
  void printLegend(llvm::raw_ostream &os) const;
};

const std::pair<MemoryCategory, const char *> kSvgColors[] = {
    {MemoryCategory::Weights, "#4e79a7"},
    {MemoryCategory::Gradients, "#f28e2b"},
    {MemoryCategory::Optimizer, "#e15759"},
    {MemoryCategory::Gathered, "#edc948"},
    {MemoryCategory::Activations, "#76b7b2"},
    {MemoryCategory::Temporaries, "#59a14f"}};

/// The phases as bands behind the areas.
void SvgChart::printPhases(llvm::raw_ostream &os) const {
  static const std::pair<Phase, const char *> kPhases[] = {
      {Phase::Forward, "forward"},
      {Phase::Backward, "backward"},
      {Phase::Optimizer, "optimizer"}};
  ArrayRef<Operation *> schedule = memory.getSchedule();
  for (auto [phase, name] : kPhases) {
    std::optional<size_t> from, to;
    for (size_t col = 0; col < columns(); ++col) {
      size_t p = shown[col];
      if (p == 0 || memory.getPhase(schedule[p - 1]) != phase)
        continue;
      if (!from)
        from = col;
      to = col;
    }
    if (!from)
      continue;
    double x0 = x(*from), x1 = x(*to + 1);
    os << llvm::formatv("<rect x=\"{0:F1}\" y=\"{1}\" width=\"{2:F1}\" "
                        "height=\"{3}\" fill=\"{4}\" opacity=\"0.35\"/>\n",
                        x0, top, std::max(1.0, x1 - x0), plotH,
                        phase == Phase::Backward ? "#e8e8f4" : "#f2f2f2");
    os << llvm::formatv("<text x=\"{0:F1}\" y=\"{1}\" fill=\"#666\">{2}</"
                        "text>\n",
                        x0 + 4, top + 14, name);
  }
}

/// The stacked areas, bottom to top.
void SvgChart::printAreas(llvm::raw_ostream &os) const {
  std::vector<double> below(columns(), 0.0);
  for (auto [category, color] : kSvgColors) {
    unsigned c = static_cast<unsigned>(category);
    bool any = false;
    for (size_t col = 0; col < columns() && !any; ++col)
      any = live[shown[col]][c] != 0;
    if (!any)
      continue;
    std::string path;
    llvm::raw_string_ostream ps(path);
    std::vector<double> above(columns());
    for (size_t col = 0; col < columns(); ++col)
      above[col] = below[col] + static_cast<double>(live[shown[col]][c]);
    for (size_t col = 0; col < columns(); ++col)
      ps << (col ? " L" : "M")
         << llvm::formatv("{0:F1},{1:F1} L{2:F1},{1:F1}", x(col), y(above[col]),
                          x(col + 1));
    for (size_t col = columns(); col-- > 0;)
      ps << llvm::formatv(" L{0:F1},{1:F1} L{2:F1},{1:F1}", x(col + 1),
                          y(below[col]), x(col));
    ps << " Z";
    os << llvm::formatv("<path d=\"{0}\" fill=\"{1}\" stroke=\"none\" "
                        "data-category=\"{2}\"/>\n",
                        path, color, stringifyMemoryCategory(category));
    below = std::move(above);
  }
}

/// Axes, ticks, labels.
void SvgChart::printAxes(llvm::raw_ostream &os) const {
  os << llvm::formatv("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" "
                      "stroke=\"black\"/>\n",
                      left, top, top + plotH);
  os << llvm::formatv("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" "
                      "stroke=\"black\"/>\n",
                      left, top + plotH, left + plotW);
  double step = tickStep(yTop, 6);
  for (double v = 0.0; v <= yTop; v += step)
    os << llvm::formatv("<line x1=\"{0}\" y1=\"{1:F1}\" x2=\"{2}\" "
                        "y2=\"{1:F1}\" stroke=\"#ccc\"/><text x=\"{3}\" "
                        "y=\"{4:F1}\" text-anchor=\"end\">{5}</text>\n",
                        left - 4, y(v), left + plotW, left - 8, y(v) + 4,
                        axisBytes(v));
  os << llvm::formatv("<text x=\"{0}\" y=\"{1}\" text-anchor=\"middle\">"
                      "schedule ({2} ops, program order)</text>\n",
                      left + plotW / 2, top + plotH + 20,
                      memory.getSchedule().size());
}

/// The peak: a line, a dot and what it is.
void SvgChart::printPeak(llvm::raw_ostream &os) const {
  size_t peakColumn = 0;
  for (size_t col = 0; col < columns(); ++col)
    if (shown[col] == peakPoint)
      peakColumn = col;
  os << llvm::formatv("<line x1=\"{0:F1}\" y1=\"{1}\" x2=\"{0:F1}\" "
                      "y2=\"{2}\" stroke=\"black\" stroke-dasharray=\"4 3\"/>"
                      "<circle cx=\"{3:F1}\" cy=\"{4:F1}\" r=\"4\" "
                      "fill=\"black\"/>\n",
                      x(peakColumn + 0.5), top, top + plotH,
                      x(peakColumn + 0.5), y(peak));
  os << llvm::formatv("<text x=\"{0}\" y=\"{1}\" font-weight=\"bold\">@{2}: "
                      "peak {3} ({4} B) at {5}</text>\n",
                      left, top - 24,
                      xmlEscaped(memory.getFunction().getSymName()),
                      xmlEscaped(trainmem::formatByteSize(peak)), peak,
                      xmlEscaped(describeOp(memory.getPeakOp())));
}

/// The legend: the categories present, three to a row, with their bytes at
/// the peak.
void SvgChart::printLegend(llvm::raw_ostream &os) const {
  int shownCategories = 0;
  for (auto [category, color] : kSvgColors) {
    unsigned c = static_cast<unsigned>(category);
    if (memory.getAtPeak()[c] == 0 && memory.getTotals()[c] == 0)
      continue;
    int lx = left + (shownCategories % 3) * 260;
    int ly = height - 52 + (shownCategories / 3) * 20;
    ++shownCategories;
    os << llvm::formatv(
        "<rect x=\"{0}\" y=\"{1}\" width=\"12\" "
        "height=\"12\" fill=\"{2}\"/><text x=\"{3}\" "
        "y=\"{4}\">{5}: {6} at the peak</text>\n",
        lx, ly, color, lx + 16, ly + 10, stringifyMemoryCategory(category),
        xmlEscaped(trainmem::formatByteSize(memory.getAtPeak()[c])));
  }
}

} // namespace

void printMemoryTimelineSvg(llvm::raw_ostream &os,
                            const FunctionMemory &memory) {
  SvgChart chart(memory);
  os << llvm::formatv(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" "
      "height=\"{1}\" viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" "
      "font-size=\"12\" data-function=\"{2}\" data-peak-bytes=\"{3}\" "
      "data-peak-point=\"{4}\">\n",
      SvgChart::width, SvgChart::height,
      xmlEscaped(memory.getFunction().getSymName()), chart.peak,
      chart.peakPoint);
  os << llvm::formatv("<title>@{0}: live bytes over the schedule, peak {1} "
                      "B</title>\n",
                      xmlEscaped(memory.getFunction().getSymName()),
                      chart.peak);
  os << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  chart.printPhases(os);
  chart.printAreas(os);
  chart.printAxes(os);
  chart.printPeak(os);
  chart.printLegend(os);
  os << "</svg>\n";
}

} // namespace train
} // namespace mlir
