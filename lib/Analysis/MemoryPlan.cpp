//===- MemoryPlan.cpp - static offsets of a step's buffers ----------------===//

#include "trainmem/Analysis/MemoryPlan.h"

#include <algorithm>
#include <numeric>

using namespace mlir;
using namespace mlir::train;

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

  std::vector<unsigned> placed;
  struct Interval {
    uint64_t begin, end;
  };
  std::vector<Interval> taken;
  for (unsigned index : order) {
    const Buffer &buffer = buffers[index];
    uint64_t size = alignedSize(buffer);
    if (size == 0)
      continue;
    // Memory held, at some point of this buffer's lifetime, by others.
    taken.clear();
    for (unsigned other : placed) {
      const Buffer &o = buffers[other];
      if (o.lastPoint < buffer.firstPoint || buffer.lastPoint < o.firstPoint)
        continue;
      taken.push_back({offsets[other], offsets[other] + alignedSize(o)});
    }
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
    placed.push_back(index);
  }
}
