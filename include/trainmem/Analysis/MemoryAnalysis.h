//===- MemoryAnalysis.h - live bytes of a training step ----------*- C++ -*-===//
//
// Walks a function in program order and computes, at every op, which tensors
// are live and how many bytes they hold, sorted into the categories of
// docs/MemoryReport.md (weights, gradients, optimizer, activations,
// temporaries, gathered). Passes get it with getAnalysis<MemoryAnalysis>().
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_ANALYSIS_MEMORYANALYSIS_H
#define TRAINMEM_ANALYSIS_MEMORYANALYSIS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Operation.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/EquivalenceClasses.h"
#include <map>
#include <string>
#include <tuple>

#include <array>
#include <optional>
#include <string>
#include <vector>

namespace mlir {
namespace train {

class OptimizerUpdateOpInterface;

enum class MemoryCategory : unsigned {
  Weights,
  Gradients,
  Optimizer,
  Activations,
  Temporaries,
  /// Parameters gathered from the ranks' shards for one op (ZeRO stage 3):
  /// whole tensors that live from their all-gather to that op's last use.
  Gathered
};
constexpr unsigned kNumMemoryCategories = 6;
llvm::StringRef stringifyMemoryCategory(MemoryCategory category);

enum class Phase : unsigned { Forward, Backward, Optimizer };

/// What part of a layer an activation is kept for: the norms' inputs apart
/// from the rest of the attention and MLP blocks.
enum class SavedFor : unsigned { Attention, MLP, Norm, Other };

using CategoryBytes = std::array<uint64_t, kNumMemoryCategories>;

/// One piece of memory: a value that owns storage, with every value that
/// aliases it (views, block results, in-place state updates).
struct Buffer {
  Value owner;
  uint64_t bytes = 0;
  /// Program points between which the buffer is live, inclusive. Point 0 is
  /// the function entry; op i of the schedule is point i + 1.
  unsigned firstPoint = 0;
  unsigned lastPoint = 0;
  MemoryCategory category = MemoryCategory::Temporaries;
  /// For activations: the layer and part whose backward reads them.
  std::optional<int64_t> layer;
  SavedFor savedFor = SavedFor::Other;
  /// In host memory (train-offload-optimizer's #train.space<host>, a
  /// train.transfer to the host): not in the device's live bytes, peak or
  /// arena; counted apart.
  bool host = false;
};

struct LayerActivations {
  int64_t index = 0;
  uint64_t attention = 0;
  uint64_t mlp = 0;
  uint64_t norm = 0;
  /// Of the layer's saved activations, those kept in host memory
  /// (train-offload-activations), which the device totals above leave out.
  uint64_t host = 0;
  uint64_t total() const { return attention + mlp + norm; }
};

/// The memory of one function.
class FunctionMemory {
public:
  explicit FunctionMemory(func::FuncOp func);

  func::FuncOp getFunction() const { return func; }
  /// Ops in program order (nested block bodies in place).
  ArrayRef<Operation *> getSchedule() const { return schedule; }
  ArrayRef<Buffer> getBuffers() const { return buffers; }
  /// The buffer holding `value`, if it is a tensor.
  const Buffer *lookupBuffer(Value value) const;
  unsigned getPoint(Operation *op) const { return pointOf.lookup(op); }
  /// The phase of a scheduled op (an op outside the schedule: Forward).
  Phase getPhase(Operation *op) const {
    unsigned point = getPoint(op);
    return point ? phases[point - 1] : Phase::Forward;
  }

  /// Live bytes at each program point.
  ArrayRef<uint64_t> getLiveBytes() const { return liveBytes; }
  /// In a pipeline stage (train-pipeline's train.micro_batch marks): the
  /// units, (chunk, micro-batch), whose saved activations are on the device
  /// at `point`, in order.
  SmallVector<std::pair<int64_t, int64_t>> getUnitsLiveAt(unsigned point) const;
  uint64_t getPeakBytes() const { return peakBytes; }
  unsigned getPeakPoint() const { return peakPoint; }
  /// The op at the peak (null when the peak is at function entry).
  Operation *getPeakOp() const;
  const CategoryBytes &getAtPeak() const { return atPeak; }
  /// All weight, gradient (one per parameter, as the optimizer reads them)
  /// and optimizer tensors; all saved activations; the most temporary bytes
  /// and the most gathered parameter bytes live at once.
  const CategoryBytes &getTotals() const { return totals; }
  /// The most gradient bytes live at once, anywhere in the step (all of
  /// them at the end of the backward, unless train-release-gradients runs
  /// each update as soon as its gradient is complete).
  uint64_t getMostLiveGradients() const { return mostLiveGradients; }
  ArrayRef<LayerActivations> getLayers() const { return layers; }
  uint64_t getParameters() const { return parameters; }
  /// FLOPs of a phase, not counting recompute.
  uint64_t getFlops(Phase phase) const {
    return flops[static_cast<unsigned>(phase)];
  }
  /// FLOPs of ops cloned by train-materialize-remat (`train.recompute`).
  uint64_t getRecomputeFlops() const { return recomputeFlops; }

  /// Host memory (train-offload-optimizer): the bytes of the buffers that
  /// live there, by category, and the bytes that cross between host and
  /// device per step (states: each update's state in and out; the update
  /// on the host: the gradients out and the updated weights back).
  const CategoryBytes &getHostTotals() const { return hostTotals; }
  uint64_t getHostBytes() const;
  uint64_t getHostDeviceBytes() const { return hostDeviceBytes; }
  /// Of those, the train.transfer copies' (train-offload-activations: out
  /// in the forward, back before the backward), once per execution.
  uint64_t getActivationTransferBytes() const {
    return activationTransferBytes;
  }
  /// A device copy of a host operand of an update that runs on the device
  /// (train-offload-optimizer what=states): the state comes in before the
  /// update, the update reads and writes the copy in place, the device ops
  /// after it that read what it updated (the cast of the refreshed 16-bit
  /// weight) read the copy, and it goes back after the last of them,
  /// `last` (the update itself when none does). The copy is buffer
  /// `buffer`, live from the update to `last`.
  struct Staging {
    Operation *update;
    unsigned operand;
    unsigned buffer;
    Operation *last;
  };
  ArrayRef<Staging> getStaging() const { return staging; }
  /// The buffer (index into getBuffers()) of `op`'s workspace
  /// (WorkspaceOpInterface: arena memory it uses while it runs), or none.
  std::optional<unsigned> lookupWorkspace(Operation *op) const {
    auto it = workspaceIndex.find(op);
    if (it == workspaceIndex.end())
      return std::nullopt;
    return it->second;
  }
  /// The staging copies (indices into getStaging()) that `op`, not their
  /// update, reads.
  ArrayRef<unsigned> getStagingReadBy(Operation *op) const;
  /// The staging copy of `update`'s operand `operand`, or null.
  const Staging *lookupStaging(Operation *update, unsigned operand) const;

  /// A count that does not fit in 64 bits (kCountOverflow), the first one
  /// found: the op where it happens and what was counted ("backward
  /// FLOPs", "bytes of a tensor"). The numbers above are then meaningless;
  /// passes report this instead of printing them.
  struct Overflow {
    Operation *op;
    std::string quantity;
  };
  const std::optional<Overflow> &getOverflow() const { return overflow; }
  /// An op whose memory the analysis does not model (the first one), with
  /// what to do instead; checkCounts reports it.
  struct Unmodeled {
    Operation *op;
    std::string message;
  };
  const std::optional<Unmodeled> &getUnmodeled() const { return unmodeled; }
  /// Emits the overflow, if any, at its op as an error of pass `passName`.
  LogicalResult checkCounts(llvm::StringRef passName) const;

private:
  void buildSchedule(Block &block, Phase phase);
  /// The tensor values in definition order (arguments, then results and
  /// loop arguments in program order), numbered in valueIndex.
  llvm::SmallVector<mlir::Value> numberValues();
  /// The last point at which `value` or a view or block result naming its
  /// memory is read.
  unsigned lastRead(mlir::Value value) const;
  /// The values (by number) that name one memory: aliasing views, block
  /// results and what they yield, updates in place, state results written
  /// into their arguments.
  void findAliases(llvm::EquivalenceClasses<unsigned> &aliases,
                   unsigned numValues);
  /// The point until which `user`'s read keeps `value` live.
  unsigned readPoint(mlir::Value value, mlir::Operation *user) const;
  Buffer newBuffer(mlir::Value owner, unsigned returnPoint);
  void buildBuffers();
  /// What flows into an optimizer's gradient operand or out as a step's
  /// gradient result.
  llvm::SmallVector<mlir::Value> finalGradients();
  /// Per buffer: whether it holds a gradient (the final ones, traced back
  /// through sums, block results, in-place updates and views).
  std::vector<bool> gradientBuffers(llvm::ArrayRef<mlir::Value> finals) const;
  /// Per buffer: its last reader in the backward, and whether a norm's
  /// backward reads it as the norm's input.
  void findBackwardReaders(std::vector<mlir::Operation *> &lastBackwardUser,
                           std::vector<bool> &readByNormGrad) const;
  /// Whether buffer `index` is a parameter gathered from the ranks' shards
  /// (or made of one alone).
  bool isGathered(unsigned index);
  /// An activation the backward's `reader` reads: its layer and what keeps
  /// it.
  void classifyActivation(Buffer &buffer, mlir::Operation *reader,
                          bool readByNorm);
  void classify();
  /// The phase of the op that makes `value` (of its first reader for what a
  /// pipeline stage receives).
  Phase definingPhase(Value value) const;
  /// Marks the buffers that live in host memory; whether there are any.
  bool markHostBuffers();
  /// The host-device traffic of an update that runs on the host.
  void countHostUpdate(OptimizerUpdateOpInterface update);
  /// The staging copy of `operand` (of `buffer`, in host memory) on the
  /// device, to be buffer `bufferIndex`.
  Buffer stageHostOperand(mlir::OpOperand &operand, const Buffer &buffer,
                          unsigned bufferIndex);
  void placeInMemory();
  /// A buffer live at its op alone for each op's workspace
  /// (WorkspaceOpInterface), counted with the temporaries.
  void addWorkspaces();
  void computeLiveness();
  void summarize();
  /// Records the first overflow.
  void noteOverflow(Operation *op, llvm::StringRef quantity);
  /// a + b, noting an overflow at `op` as `quantity`.
  uint64_t add(uint64_t a, uint64_t b, Operation *op,
               llvm::StringRef quantity);

  func::FuncOp func;
  std::vector<Operation *> schedule;
  llvm::DenseMap<Operation *, unsigned> pointOf;
  /// The phase of schedule[i].
  std::vector<Phase> phases;
  std::vector<Buffer> buffers;
  /// Tensor values by definition order (arguments, then results and loop
  /// arguments in program order), and the buffer of each.
  llvm::DenseMap<Value, unsigned> valueIndex;
  std::vector<unsigned> bufferOfValue;
  std::vector<uint64_t> liveBytes;
  uint64_t peakBytes = 0;
  unsigned peakPoint = 0;
  CategoryBytes atPeak{};
  CategoryBytes totals{};
  uint64_t mostLiveGradients = 0;
  /// The buffers of the complete gradients the updates read (classify).
  std::vector<unsigned> finalGradientBuffers;
  CategoryBytes hostTotals{};
  uint64_t hostDeviceBytes = 0, activationTransferBytes = 0;
  std::vector<Staging> staging;
  /// (update, operand) -> index in `staging`.
  llvm::DenseMap<std::pair<Operation *, unsigned>, unsigned> stagingIndex;
  llvm::DenseMap<Operation *, SmallVector<unsigned, 2>> stagingReaders;
  llvm::DenseMap<Operation *, unsigned> workspaceIndex;
  std::vector<LayerActivations> layers;
  uint64_t parameters = 0;
  std::array<uint64_t, 3> flops{};
  uint64_t recomputeFlops = 0;
  std::optional<Overflow> overflow;
  std::optional<Unmodeled> unmodeled;
};

/// The memory of every function with a body in a module (or of one
/// function).
/// What one rank's collectives send per step, by the grid axis they run
/// over and their kind ("all_reduce", "reduce_scatter", ...), from their
/// CommunicationOpInterface; a micro-batch loop's body counts once per
/// micro-batch. The axis: "tensor" (the one the function's #train.split
/// parts are cut over), "data" (another: ZeRO's, the data axis of a
/// tensor-parallel grid), "data+tensor" (both, a norm's sum) or
/// "context" (the group of a train-context-parallel step).
struct CollectiveTraffic {
  uint64_t ops = 0, elements = 0, bytes = 0;
};
struct TrafficKey {
  std::string axis, kind;
  bool operator<(const TrafficKey &other) const {
    return std::tie(axis, kind) < std::tie(other.axis, other.kind);
  }
};
std::map<TrafficKey, CollectiveTraffic> collectiveTrafficOf(func::FuncOp func);

class MemoryAnalysis {
public:
  explicit MemoryAnalysis(Operation *op);

  ArrayRef<FunctionMemory> getFunctions() const { return functions; }
  const FunctionMemory *lookup(func::FuncOp func) const;

private:
  std::vector<FunctionMemory> functions;
};

} // namespace train
} // namespace mlir

#endif // TRAINMEM_ANALYSIS_MEMORYANALYSIS_H
