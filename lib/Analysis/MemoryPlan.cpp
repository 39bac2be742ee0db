//===- MemoryPlan.cpp - static offsets of a step's buffers ----------------===//

#include "trainmem/Analysis/MemoryPlan.h"

#include <algorithm>
#include <map>
#include <numeric>

using namespace mlir;
using namespace mlir::train;

namespace {

/// Offset ranges [begin, end) that placed buffers hold.
struct Interval {
  uint64_t begin, end;
};

/// A set of offset ranges kept merged: adjacent or overlapping ranges are
/// one run. A sorted vector: the runs are few (placements pack), so moving
/// them costs less than a tree's allocations.
class RangeSet {
public:
  void insert(Interval range) {
    auto first = std::lower_bound(
        runs.begin(), runs.end(), range.begin,
        [](const Interval &run, uint64_t begin) { return run.end < begin; });
    auto last = first;
    while (last != runs.end() && last->begin <= range.end) {
      range.begin = std::min(range.begin, last->begin);
      range.end = std::max(range.end, last->end);
      ++last;
    }
    if (first == last) {
      runs.insert(first, range);
      return;
    }
    *first = range;
    runs.erase(first + 1, last);
  }
  void appendTo(std::vector<Interval> &out) const {
    out.insert(out.end(), runs.begin(), runs.end());
  }

private:
  std::vector<Interval> runs; // sorted, disjoint, not touching
};

/// The offset ranges of placed buffers, by lifetime, so that the memory
/// taken during a new buffer's lifetime is found without visiting every
/// buffer that overlaps it. A segment tree over program points: a buffer
/// is stored at the O(log P) nodes whose point ranges tile its lifetime
/// (`stored`), and each node also keeps the union of what is stored at it or
/// below (`below`). The memory taken during [first, last] is the union of
/// `below` of the nodes inside [first, last] and `stored` of the nodes that
/// only meet it: O(log P) merged sets, whose runs are far fewer than the
/// buffers (the buffers live everywhere, weights and optimizer state, are
/// the root's `stored`: a few runs).
class PlacedBuffers {
public:
  explicit PlacedBuffers(unsigned lastPoint)
      : lastPoint(lastPoint), nodes(4 * (static_cast<size_t>(lastPoint) + 1)) {}

  void insert(unsigned first, unsigned last, Interval range) {
    insertAt(1, 0, lastPoint, first, last, range);
  }

  /// Appends runs covering exactly the memory of the placed buffers live
  /// at some point of [first, last] (runs may overlap one another).
  void collect(unsigned first, unsigned last,
               std::vector<Interval> &taken) const {
    collectAt(1, 0, lastPoint, first, last, taken);
  }

private:
  struct Node {
    RangeSet stored, below;
  };

  void insertAt(unsigned node, unsigned lo, unsigned hi, unsigned first,
                unsigned last, Interval range) {
    nodes[node].below.insert(range);
    if (first <= lo && hi <= last) {
      nodes[node].stored.insert(range);
      return;
    }
    unsigned mid = lo + (hi - lo) / 2;
    if (first <= mid)
      insertAt(2 * node, lo, mid, first, last, range);
    if (last > mid)
      insertAt(2 * node + 1, mid + 1, hi, first, last, range);
  }

  void collectAt(unsigned node, unsigned lo, unsigned hi, unsigned first,
                 unsigned last, std::vector<Interval> &taken) const {
    if (last < lo || hi < first)
      return;
    if (first <= lo && hi <= last) {
      nodes[node].below.appendTo(taken);
      return;
    }
    nodes[node].stored.appendTo(taken);
    unsigned mid = lo + (hi - lo) / 2;
    collectAt(2 * node, lo, mid, first, last, taken);
    collectAt(2 * node + 1, mid + 1, hi, first, last, taken);
  }

  unsigned lastPoint;
  std::vector<Node> nodes;
};

} // namespace

MemoryPlan::MemoryPlan(const FunctionMemory &memory, uint64_t alignment)
    : alignment(alignment) {
  assert(alignment && (alignment & (alignment - 1)) == 0 &&
         "alignment must be a power of two");
  ArrayRef<Buffer> buffers = memory.getBuffers();
  auto alignedSize = [&](const Buffer &buffer) {
    return (buffer.bytes + alignment - 1) & ~(alignment - 1);
  };
  offsets.assign(buffers.size(), 0);

  std::vector<unsigned> order(buffers.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](unsigned a, unsigned b) {
    if (buffers[a].bytes != buffers[b].bytes)
      return buffers[a].bytes > buffers[b].bytes;
    return buffers[a].firstPoint < buffers[b].firstPoint;
  });

  unsigned lastPoint = 0;
  for (const Buffer &buffer : buffers)
    lastPoint = std::max(lastPoint, buffer.lastPoint);
  PlacedBuffers placed(lastPoint);
  std::vector<Interval> taken;
  for (unsigned index : order) {
    const Buffer &buffer = buffers[index];
    uint64_t size = alignedSize(buffer);
    if (size == 0)
      continue;
    // Memory held, at some point of this buffer's lifetime, by others.
    taken.clear();
    placed.collect(buffer.firstPoint, buffer.lastPoint, taken);
    std::sort(taken.begin(), taken.end(), [](const Interval &a,
                                             const Interval &b) {
      return a.begin < b.begin;
    });
    // The smallest gap that fits, else after everything.
    uint64_t best = UINT64_MAX, bestGap = UINT64_MAX, cursor = 0;
    for (const Interval &interval : taken) {
      if (interval.begin > cursor) {
        uint64_t gap = interval.begin - cursor;
        if (gap >= size && gap < bestGap) {
          best = cursor;
          bestGap = gap;
        }
      }
      cursor = std::max(cursor, interval.end);
    }
    offsets[index] = best != UINT64_MAX ? best : cursor;
    // Sizes are rounded up for placement only: the arena ends where the
    // highest buffer's bytes end.
    arenaBytes = std::max(arenaBytes, offsets[index] + buffer.bytes);
    placed.insert(buffer.firstPoint, buffer.lastPoint,
                  {offsets[index], offsets[index] + size});
  }
}
