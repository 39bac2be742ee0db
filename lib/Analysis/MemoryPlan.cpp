//===- MemoryPlan.cpp - static offsets of a step's buffers ----------------===//

#include "trainmem/Analysis/MemoryPlan.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/MathExtras.h"

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
  bool empty() const { return runs.empty(); }

  /// `merged` := `merged` united with this set; both sorted, disjoint and
  /// not touching, and so is the result (`scratch` is reused storage). A
  /// query merges O(log P) such sets that overlap heavily (a long-lived
  /// buffer is in the set of every node its lifetime covers): merging them
  /// one by one keeps the union small, where concatenating and sorting them
  /// sorted many times more runs than the union has.
  void uniteInto(std::vector<Interval> &merged,
                 std::vector<Interval> &scratch) const {
    if (runs.empty())
      return;
    if (merged.empty()) {
      merged.assign(runs.begin(), runs.end());
      return;
    }
    // Mostly the runs are inside the union already (the sets overlap):
    // then there is nothing to merge.
    const Interval *m = merged.data(), *mEnd = m + merged.size();
    bool contained = true;
    for (const Interval &run : runs) {
      while (m != mEnd && m->end < run.begin)
        ++m;
      if (m == mEnd || run.begin < m->begin || m->end < run.end) {
        contained = false;
        break;
      }
    }
    if (contained)
      return;
    scratch.resize(merged.size() + runs.size());
    Interval *out = scratch.data();
    Interval *outBegin = out;
    const Interval *a = merged.data(), *aEnd = a + merged.size();
    const Interval *b = runs.data(), *bEnd = b + runs.size();
    *out = a->begin <= b->begin ? *a++ : *b++;
    auto append = [&](const Interval &run) {
      if (run.begin <= out->end) {
        out->end = std::max(out->end, run.end);
      } else {
        *++out = run;
      }
    };
    while (a != aEnd && b != bEnd)
      append(a->begin <= b->begin ? *a++ : *b++);
    for (; a != aEnd; ++a)
      append(*a);
    for (; b != bEnd; ++b)
      append(*b);
    scratch.resize(out - outBegin + 1);
    merged.swap(scratch);
  }

private:
  /// Sorted, disjoint, not touching. Most nodes hold at most one run: kept
  /// inline, a node's sets are one cache line and no allocation.
  llvm::SmallVector<Interval, 1> runs;
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
  /// Halving [0, lastPoint] at its middle gives a tree of depth
  /// ceil(log2(lastPoint + 1)): its node indices stay below twice the next
  /// power of two.
  explicit PlacedBuffers(unsigned lastPoint)
      : lastPoint(lastPoint),
        nodes(2 * llvm::PowerOf2Ceil(static_cast<uint64_t>(lastPoint) + 1)) {}

  void insert(unsigned first, unsigned last, Interval range) {
    insertAt(1, 0, lastPoint, first, last, range);
  }

  /// Sets `taken` to the merged runs (sorted, disjoint, not touching) of
  /// the memory held by placed buffers live at some point of [first, last].
  void collect(unsigned first, unsigned last, std::vector<Interval> &taken,
               std::vector<Interval> &scratch) const {
    taken.clear();
    collectAt(1, 0, lastPoint, first, last, taken, scratch);
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
                 unsigned last, std::vector<Interval> &taken,
                 std::vector<Interval> &scratch) const {
    // Nothing placed in this subtree (what is stored here is below too).
    if (last < lo || hi < first || nodes[node].below.empty())
      return;
    if (first <= lo && hi <= last) {
      nodes[node].below.uniteInto(taken, scratch);
      return;
    }
    nodes[node].stored.uniteInto(taken, scratch);
    unsigned mid = lo + (hi - lo) / 2;
    collectAt(2 * node, lo, mid, first, last, taken, scratch);
    collectAt(2 * node + 1, mid + 1, hi, first, last, taken, scratch);
  }

  unsigned lastPoint;
  std::vector<Node> nodes;
};

} // namespace

MemoryPlan::MemoryPlan(const FunctionMemory &memory, uint64_t alignment)
    : MemoryPlan(memory, {}, {}, alignment) {}

MemoryPlan::MemoryPlan(const FunctionMemory &memory,
                       ArrayRef<std::pair<unsigned, uint64_t>> pinned,
                       ArrayRef<std::pair<uint64_t, uint64_t>> reserved,
                       uint64_t alignment)
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
  // Largest first; among equals the earlier, then the longer-lived.
  std::stable_sort(order.begin(), order.end(), [&](unsigned a, unsigned b) {
    if (buffers[a].bytes != buffers[b].bytes)
      return buffers[a].bytes > buffers[b].bytes;
    if (buffers[a].firstPoint != buffers[b].firstPoint)
      return buffers[a].firstPoint < buffers[b].firstPoint;
    return buffers[a].lastPoint > buffers[b].lastPoint;
  });

  unsigned lastPoint = 0;
  for (const Buffer &buffer : buffers)
    lastPoint = std::max(lastPoint, buffer.lastPoint);
  // Each arena plans its own memory's buffers (train-offload-optimizer's
  // host memory apart from the device's).
  for (bool host : {false, true}) {
    if (host && memory.getHostBytes() == 0)
      break;
    PlacedBuffers placed(lastPoint);
    std::vector<Interval> taken, scratch;
    uint64_t &end = host ? hostArenaBytes : arenaBytes;
    std::vector<bool> isPinned(buffers.size(), false);
    if (!host)
      for (auto [offset, bytes] : reserved) {
        placed.insert(
            0, lastPoint,
            {offset, offset + ((bytes + alignment - 1) & ~(alignment - 1))});
        end = std::max(end, offset + bytes);
      }
    for (auto [index, offset] : pinned) {
      const Buffer &buffer = buffers[index];
      if (buffer.host != host)
        continue;
      isPinned[index] = true;
      offsets[index] = offset;
      end = std::max(end, offset + buffer.bytes);
      placed.insert(buffer.firstPoint, buffer.lastPoint,
                    {offset, offset + alignedSize(buffer)});
    }
    for (unsigned index : order) {
      const Buffer &buffer = buffers[index];
      uint64_t size = alignedSize(buffer);
      if (size == 0 || buffer.host != host || isPinned[index])
        continue;
      // Memory held, at some point of this buffer's lifetime, by others.
      placed.collect(buffer.firstPoint, buffer.lastPoint, taken, scratch);
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
      end = std::max(end, offsets[index] + buffer.bytes);
      placed.insert(buffer.firstPoint, buffer.lastPoint,
                    {offsets[index], offsets[index] + size});
    }
  }
}

//===----------------------------------------------------------------------===//
// The plan in the IR (train-plan-arena)
//===----------------------------------------------------------------------===//

void MemoryPlan::writeToIR(const FunctionMemory &memory) const {
  func::FuncOp func = memory.getFunction();
  Builder builder(func.getContext());
  const Buffer *base = memory.getBuffers().data();
  auto offsetOf = [&](Value value) -> int64_t {
    if (!isa<RankedTensorType>(value.getType()))
      return -1;
    const Buffer *buffer = memory.lookupBuffer(value);
    return buffer ? static_cast<int64_t>(offsets[buffer - base]) : -1;
  };
  func->setAttr(kPlanArenaBytesAttrName,
                builder.getI64IntegerAttr(static_cast<int64_t>(arenaBytes)));
  if (hostArenaBytes)
    func->setAttr(
        kPlanHostArenaBytesAttrName,
        builder.getI64IntegerAttr(static_cast<int64_t>(hostArenaBytes)));
  else
    func->removeAttr(kPlanHostArenaBytesAttrName);
  // All arguments' attributes at once (setArgAttr per argument rebuilds
  // every argument's attributes each time).
  SmallVector<DictionaryAttr> argAttrs;
  for (BlockArgument argument : func.getArguments()) {
    NamedAttrList attrs(func.getArgAttrDict(argument.getArgNumber()));
    if (int64_t offset = offsetOf(argument); offset >= 0)
      attrs.set(kPlanOffsetAttrName, builder.getI64IntegerAttr(offset));
    argAttrs.push_back(attrs.getDictionary(func.getContext()));
  }
  func.setAllArgAttrs(argAttrs);
  func.walk([&](Operation *op) {
    if (op == func.getOperation())
      return;
    // Staging copies of host operands (train-offload-optimizer what=states).
    SmallVector<int64_t> stagingOffsets;
    for (unsigned i = 0; i < op->getNumOperands(); ++i) {
      const FunctionMemory::Staging *copy = memory.lookupStaging(op, i);
      if (copy && stagingOffsets.empty())
        stagingOffsets.assign(op->getNumOperands(), -1);
      if (copy)
        stagingOffsets[i] = static_cast<int64_t>(offsets[copy->buffer]);
    }
    if (!stagingOffsets.empty())
      op->setAttr(kPlanStagingOffsetsAttrName,
                  builder.getDenseI64ArrayAttr(stagingOffsets));
    else
      op->removeAttr(kPlanStagingOffsetsAttrName);
    // An op's workspace (a ring attention's blocks in flight).
    if (std::optional<unsigned> workspace = memory.lookupWorkspace(op))
      op->setAttr(
          kPlanWorkspaceOffsetAttrName,
          builder.getI64IntegerAttr(static_cast<int64_t>(offsets[*workspace])));
    else
      op->removeAttr(kPlanWorkspaceOffsetAttrName);
    // A micro-batch loop's arguments: where each micro-batch's are written.
    if (auto loop = dyn_cast<AccumulateOp>(op)) {
      SmallVector<int64_t> argumentOffsets;
      for (BlockArgument argument : loop.getBody().front().getArguments())
        argumentOffsets.push_back(offsetOf(argument));
      op->setAttr(kPlanArgumentOffsetsAttrName,
                  builder.getDenseI64ArrayAttr(argumentOffsets));
    }
    if (op->getNumResults() == 0)
      return;
    SmallVector<int64_t> resultOffsets;
    for (Value result : op->getResults())
      resultOffsets.push_back(offsetOf(result));
    op->setAttr(kPlanOffsetsAttrName,
                builder.getDenseI64ArrayAttr(resultOffsets));
  });
}

bool MemoryPlan::hasPlanInIR(Operation *func) {
  return func && func->hasAttr(kPlanArenaBytesAttrName);
}

namespace {

/// Reads the arena plan train-plan-arena wrote into a step and checks it
/// against the step's buffers: every tensor has an aligned offset, buffers
/// that share one agree, and no two buffers live at once overlap.
class PlanReader {
public:
  PlanReader(const FunctionMemory &memory, StringRef passName)
      : memory(memory), passName(passName), buffers(memory.getBuffers()),
        offsets(buffers.size(), -1) {}

  /// Reads the offsets and checks them against arenas of these sizes.
  LogicalResult read(uint64_t arenaBytes, uint64_t hostArenaBytes);
  /// The offset the IR gives each buffer, -1 for none.
  ArrayRef<int64_t> getOffsets() const { return offsets; }

private:
  InFlightDiagnostic stale(Location loc) {
    return emitError(loc, passName) << ": ";
  }
  static constexpr const char *again =
      "; the plan is older than the IR: run train-plan-arena after the last "
      "transform";

  LogicalResult record(Value value, int64_t offset, Location loc);
  LogicalResult recordStaging(Operation *op);
  LogicalResult recordWorkspace(Operation *op);
  LogicalResult recordResults(Operation *op);
  LogicalResult recordArguments(Operation *op);
  LogicalResult readOffsets();
  LogicalResult checkArena(bool host, uint64_t arenaBytes);

  const FunctionMemory &memory;
  StringRef passName;
  ArrayRef<Buffer> buffers;
  /// The offset the IR gives each buffer, -1 until one is read.
  std::vector<int64_t> offsets;
};

} // namespace

/// Records the offset the IR gives a tensor value for its buffer.
LogicalResult PlanReader::record(Value value, int64_t offset, Location loc) {
  const Buffer *buffer = memory.lookupBuffer(value);
  if (!buffer)
    return success();
  if (offset < 0)
    return stale(loc) << "a tensor has no planned offset" << again;
  if (offset % 64 != 0)
    return stale(loc) << "offset " << offset << " is not 64-byte aligned";
  int64_t &known = offsets[buffer - buffers.data()];
  if (known >= 0 && known != offset)
    return stale(loc) << "offset " << offset << " differs from " << known
                      << ", the offset of the buffer it shares" << again;
  known = offset;
  return success();
}

/// Staging copies: one buffer each, named by its update and operand.
LogicalResult PlanReader::recordStaging(Operation *op) {
  auto written =
      op->getAttrOfType<DenseI64ArrayAttr>(kPlanStagingOffsetsAttrName);
  bool complete =
      written && written.size() == static_cast<int64_t>(op->getNumOperands());
  for (unsigned i = 0; i < op->getNumOperands(); ++i) {
    const FunctionMemory::Staging *copy = memory.lookupStaging(op, i);
    int64_t offset = complete ? written[i] : -1;
    if (!copy && offset >= 0)
      return stale(op->getLoc())
             << "operand " << i << " has a staging offset but no staging copy"
             << again;
    if (!copy)
      continue;
    if (offset < 0)
      return stale(op->getLoc())
             << "operand " << i
             << " (host memory) has no planned staging offset" << again;
    if (offset % 64 != 0)
      return stale(op->getLoc())
             << "staging offset " << offset << " is not 64-byte aligned";
    offsets[copy->buffer] = offset;
  }
  return success();
}

/// An op's workspace: one buffer, at the offset on the op.
LogicalResult PlanReader::recordWorkspace(Operation *op) {
  auto written = op->getAttrOfType<IntegerAttr>(kPlanWorkspaceOffsetAttrName);
  std::optional<unsigned> workspace = memory.lookupWorkspace(op);
  if (!workspace && written)
    return stale(op->getLoc())
           << "a workspace offset but no workspace" << again;
  if (!workspace)
    return success();
  if (!written || written.getInt() < 0)
    return stale(op->getLoc())
           << "its workspace has no planned offset" << again;
  if (written.getInt() % 64 != 0)
    return stale(op->getLoc()) << "workspace offset " << written.getInt()
                               << " is not 64-byte aligned";
  offsets[*workspace] = written.getInt();
  return success();
}

LogicalResult PlanReader::recordResults(Operation *op) {
  if (op->getNumResults() == 0)
    return success();
  auto written = op->getAttrOfType<DenseI64ArrayAttr>(kPlanOffsetsAttrName);
  bool complete =
      written && written.size() == static_cast<int64_t>(op->getNumResults());
  for (OpResult result : op->getResults()) {
    if (!isa<RankedTensorType>(result.getType()))
      continue;
    int64_t offset = complete ? written[result.getResultNumber()] : -1;
    if (failed(record(result, offset, op->getLoc())))
      return failure();
  }
  return success();
}

/// A micro-batch loop's arguments, at the offsets it lists.
LogicalResult PlanReader::recordArguments(Operation *op) {
  auto loop = dyn_cast<AccumulateOp>(op);
  if (!loop)
    return success();
  Block &body = loop.getBody().front();
  auto written =
      op->getAttrOfType<DenseI64ArrayAttr>(kPlanArgumentOffsetsAttrName);
  bool complete =
      written && written.size() == static_cast<int64_t>(body.getNumArguments());
  for (BlockArgument argument : body.getArguments())
    if (isa<RankedTensorType>(argument.getType()) &&
        failed(record(argument, complete ? written[argument.getArgNumber()] : -1,
                      op->getLoc())))
      return failure();
  return success();
}

LogicalResult PlanReader::readOffsets() {
  func::FuncOp func = memory.getFunction();
  for (BlockArgument argument : func.getArguments()) {
    if (!isa<RankedTensorType>(argument.getType()))
      continue;
    auto offset = func.getArgAttrOfType<IntegerAttr>(argument.getArgNumber(),
                                                     kPlanOffsetAttrName);
    if (failed(record(argument, offset ? offset.getInt() : -1,
                      func.getLoc())))
      return failure();
  }
  WalkResult walk = func.walk([&](Operation *op) {
    if (op == func.getOperation())
      return WalkResult::advance();
    if (failed(recordStaging(op)) || failed(recordWorkspace(op)) ||
        failed(recordResults(op)) || failed(recordArguments(op)))
      return WalkResult::interrupt();
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

/// Every buffer of one arena lies inside it, and no two of them live at once
/// share a byte: a sweep over program points with the live buffers ordered
/// by offset.
LogicalResult PlanReader::checkArena(bool host, uint64_t arenaBytes) {
  func::FuncOp func = memory.getFunction();
  const char *arenaName = host ? "host arena" : "arena";
  std::vector<unsigned> order;
  for (unsigned i = 0; i < buffers.size(); ++i) {
    if (buffers[i].bytes == 0 || buffers[i].host != host)
      continue;
    if (offsets[i] < 0)
      return stale(func.getLoc()) << "a buffer of @" << func.getSymName()
                                  << " has no offset" << again;
    if (static_cast<uint64_t>(offsets[i]) > arenaBytes ||
        buffers[i].bytes > arenaBytes - offsets[i])
      return stale(buffers[i].owner.getLoc())
             << "a buffer of " << buffers[i].bytes << " B at offset "
             << offsets[i] << " ends past the " << arenaName << " of "
             << arenaBytes << " B";
    order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](unsigned a, unsigned b) {
    return buffers[a].firstPoint < buffers[b].firstPoint;
  });
  std::map<uint64_t, unsigned> live;      // offset -> buffer
  std::multimap<unsigned, uint64_t> ends; // last point -> offset
  for (unsigned index : order) {
    const Buffer &buffer = buffers[index];
    // Buffers whose last point is before this one's first are free.
    while (!ends.empty() && ends.begin()->first < buffer.firstPoint) {
      live.erase(ends.begin()->second);
      ends.erase(ends.begin());
    }
    uint64_t begin = offsets[index], end = begin + buffer.bytes;
    auto next = live.lower_bound(begin);
    auto clash = [&](unsigned other) {
      return stale(buffer.owner.getLoc())
             << "its buffer [" << begin << ", " << end
             << ") overlaps another live at the same time at ["
             << offsets[other] << ", " << offsets[other] + buffers[other].bytes
             << ")" << again;
    };
    if (next != live.end() && next->first < end)
      return clash(next->second);
    if (next != live.begin()) {
      auto previous = std::prev(next);
      if (previous->first + buffers[previous->second].bytes > begin)
        return clash(previous->second);
    }
    live[begin] = index;
    ends.emplace(buffer.lastPoint, begin);
  }
  return success();
}

LogicalResult PlanReader::read(uint64_t arenaBytes, uint64_t hostArenaBytes) {
  return failure(failed(readOffsets()) ||
                 failed(checkArena(false, arenaBytes)) ||
                 failed(checkArena(true, hostArenaBytes)));
}

FailureOr<MemoryPlan> MemoryPlan::readFromIR(const FunctionMemory &memory,
                                             StringRef passName) {
  func::FuncOp func = memory.getFunction();
  auto arena = func->getAttrOfType<IntegerAttr>(kPlanArenaBytesAttrName);
  if (!arena)
    return func.emitError(passName)
           << ": @" << func.getSymName() << " has no arena plan ('"
           << kPlanArenaBytesAttrName << "'; run train-plan-arena)";
  MemoryPlan plan;
  plan.arenaBytes = static_cast<uint64_t>(arena.getInt());
  if (auto host = func->getAttrOfType<IntegerAttr>(kPlanHostArenaBytesAttrName))
    plan.hostArenaBytes = static_cast<uint64_t>(host.getInt());
  PlanReader reader(memory, passName);
  if (failed(reader.read(plan.arenaBytes, plan.hostArenaBytes)))
    return failure();
  plan.alignment = 64;
  // A buffer of no bytes has no place; like the planner, put it at 0.
  plan.offsets.reserve(reader.getOffsets().size());
  for (int64_t offset : reader.getOffsets())
    plan.offsets.push_back(offset < 0 ? 0 : static_cast<uint64_t>(offset));
  return plan;
}
