//===- TensorParallelTest.cpp - t simulated ranks train as one ------------===//
//
// train-tensor-parallel's transformation checked by execution: the step of
// a model whose attention and MLPs are split over t ranks (GPT's
// multi-head attention and GELU MLP, Llama's rotary and grouped-query
// attention and SwiGLU), run by the reference evaluator for t simulated
// ranks in
// lockstep, each with its part of the split parameters and the whole
// batch, gives the loss and the gradients (a rank's part of the split
// parameters') that the unsplit step gives, within 1e-5 relative in f32
// (the row-parallel products are summed in another order). Gradients, not
// AdamW's updated weights: an update divides by the gradient's own
// magnitude, so a gradient that is zero but for rounding (a key bias's:
// softmax ignores a shift of all keys) updates by +-lr on its sign, which
// the summation order decides.
//
//===----------------------------------------------------------------------===//

#include "TestModels.h"
#include "Tolerance.h"

#include "trainmem/Analysis/MemoryAnalysis.h"
#include "trainmem/Dialect/Train/IR/ShardModels.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Evaluator/Evaluator.h"
#include "trainmem/Model/ModelBuilder.h"
#include "trainmem/Run/Step.h"

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include <gtest/gtest.h>

#include <random>

using namespace mlir;
using namespace mlir::train;

namespace {

/// The dialects a step and its shard collectives need, loaded.
void loadDialects(MLIRContext &context) {
  DialectRegistry registry;
  registerRunDialects(registry);
  registry.insert<shard::ShardDialect>();
  registerShardExternalModels(registry);
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();
}

/// A model to split: its preset, heads, K/V heads, and the parameters the
/// split makes parts of (the layers' matrices and biases, and the
/// vocabulary's: a GPT's tied table, a Llama's table and head).
struct Model {
  const char *preset;
  int64_t heads, kvHeads;
  unsigned splitParams;
};

class TensorParallelTest : public ::testing::TestWithParam<Model> {
protected:
  TensorParallelTest() {
    loadDialects(context);
    // The split steps' remarks (what stays whole) are not failures.
    context.printOpOnDiagnostic(false);
  }

  /// The tiny f32 model of the preset, made a step by `pipeline`.
  func::FuncOp step(StringRef pipeline, OwningOpRef<ModuleOp> &module) {
    ModelConfig config =
        smallModel(GetParam().preset, {2, 8, GetParam().heads,
                                       GetParam().kvHeads, 16, 4, batch, 32});
    config.dropout = dropout;
    module = buildModel(&context, config);
    PassManager pm(&context);
    ScopedDiagnosticHandler quiet(&context, [](Diagnostic &d) {
      return success(d.getSeverity() == DiagnosticSeverity::Remark);
    });
    if (failed(parsePassPipeline(pipeline, pm)) || failed(pm.run(*module))) {
      ADD_FAILURE() << "pipeline failed: " << pipeline.str();
      return nullptr;
    }
    return cast<func::FuncOp>(findMarkedStep(*module, "TensorParallelTest"));
  }

  /// Part `part` of `parts` of `t` along `dim` (floats or integers).
  static RefTensor partOf(const RefTensor &t, int64_t dim, int64_t parts,
                          int64_t part) {
    std::vector<int64_t> shape = t.shape;
    shape[dim] /= parts;
    if (t.floats.empty())
      return RefTensor::ofInts(
          shape, partAlong<int64_t>(t.ints, t.shape, dim, parts, part));
    return RefTensor::ofFloats(
        shape, partAlong<float>(t.floats, t.shape, dim, parts, part));
  }

  /// What a rank at tensor position `part` holds of the whole step's
  /// result `want` when its own is of `shape`: all of it, or its part along
  /// the dimension whose size differs.
  static RefTensor expectedPart(const RefTensor &want, ArrayRef<int64_t> shape,
                                int64_t part) {
    if (shape.size() == want.shape.size())
      for (size_t d = 0; d < want.shape.size(); ++d)
        if (shape[d] != want.shape[d])
          return partOf(want, d, want.shape[d] / shape[d], part);
    return want;
  }

  /// The unsplit step on its arguments, and the split step on `ranks`
  /// simulated ranks, each with its part of them.
  void evaluateSplit(func::FuncOp whole, func::FuncOp split, int64_t ranks,
                     FailureOr<SmallVector<RefTensor>> &reference,
                     FailureOr<std::vector<SmallVector<RefTensor>>> &results) {
    SmallVector<RefTensor> args = arguments(whole);
    reference = evaluate(whole, args);
    std::vector<SmallVector<RefTensor>> perRank;
    for (int64_t r = 0; r < ranks; ++r)
      perRank.push_back(rankArguments(split, args, r));
    results = evaluateRanks(split, perRank);
  }

  /// Arguments of the unsplit step: weights from a fixed seed per
  /// parameter, zero state, step 1, a fixed batch.
  SmallVector<RefTensor> arguments(func::FuncOp func) {
    SmallVector<RefTensor> args;
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      auto type = cast<RankedTensorType>(func.getArgument(i).getType());
      std::vector<int64_t> shape(type.getShape().begin(),
                                 type.getShape().end());
      if (auto param = func.getArgAttrOfType<StringAttr>(i, kParamAttrName)) {
        std::mt19937 rng(std::hash<std::string>()(param.getValue().str()));
        std::normal_distribution<float> normal(0.0f, 0.5f);
        std::vector<float> values(type.getNumElements());
        for (float &v : values)
          v = normal(rng);
        args.push_back(RefTensor::ofFloats(shape, std::move(values)));
      } else if (auto input =
                     func.getArgAttrOfType<StringAttr>(i, kInputAttrName)) {
        if (input.getValue() == "step") {
          args.push_back(RefTensor::ofInts({}, {1}));
          continue;
        }
        std::mt19937 rng(input.getValue() == "tokens" ? 11 : 12);
        std::uniform_int_distribution<int64_t> id(0, 31);
        std::vector<int64_t> ids(type.getNumElements());
        for (int64_t &v : ids)
          v = id(rng);
        args.push_back(RefTensor::ofInts(shape, std::move(ids)));
      } else {
        args.push_back(RefTensor::zeros(shape)); // optimizer state
      }
    }
    return args;
  }

  /// Rank `rank`'s arguments of the split step: the unsplit step's, with
  /// its part of each split parameter (its state is zero either way).
  SmallVector<RefTensor>
  rankArguments(func::FuncOp split, ArrayRef<RefTensor> whole, int64_t rank) {
    SmallVector<RefTensor> args(whole.begin(), whole.end());
    for (unsigned i = 0; i < split.getNumArguments(); ++i) {
      auto type = cast<RankedTensorType>(split.getArgument(i).getType());
      if (auto part =
              split.getArgAttrOfType<TensorSplitAttr>(i, kTensorSplitAttrName))
        args[i] = partOf(whole[i], part.getDim(), part.getParts(), rank);
      else if (!args[i].floats.empty() &&
               static_cast<int64_t>(args[i].floats.size()) !=
                   type.getNumElements())
        args[i] = RefTensor::zeros(std::vector<int64_t>(type.getShape().begin(),
                                                        type.getShape().end()));
    }
    return args;
  }

  /// The split step's ranks give the unsplit step's loss and gradients
  /// (their parts of the split parameters').
  void expectRanksTrainAsOne() {
    constexpr int64_t kRanks = 2;
    OwningOpRef<ModuleOp> wholeModule, splitModule;
    func::FuncOp whole =
        step(forward + "train-autodiff{optimizer=none}", wholeModule);
    func::FuncOp split = step("train-tensor-parallel{" + tensorParallel + "}," +
                                  forward + "train-autodiff{optimizer=none}",
                              splitModule);
    ASSERT_TRUE(whole && split);
    ASSERT_EQ(whole.getNumArguments(), split.getNumArguments());
    ASSERT_EQ(whole.getNumResults(), split.getNumResults());
    unsigned splitParams = 0;
    for (unsigned i = 0; i < split.getNumArguments(); ++i)
      splitParams +=
          static_cast<bool>(split.getArgAttr(i, kTensorSplitAttrName));
    // Per layer: GPT's q, k, v weights and biases by columns (6), the output
    // projection by rows, the MLP's weight and bias by columns and its
    // projection by rows (10); Llama's q, k, v, o and gate, up, down (7).
    EXPECT_EQ(splitParams, GetParam().splitParams);

    FailureOr<SmallVector<RefTensor>> reference;
    FailureOr<std::vector<SmallVector<RefTensor>>> ranks;
    evaluateSplit(whole, split, kRanks, reference, ranks);
    ASSERT_TRUE(succeeded(reference) && succeeded(ranks));

    // Every result: whole where the split step's is whole, else the rank's
    // part of the unsplit step's (along the dimension whose size differs).
    for (int64_t r = 0; r < kRanks; ++r)
      for (unsigned i = 0; i < whole.getNumResults(); ++i) {
        const RefTensor &got = (*ranks)[r][i];
        RefTensor expected = expectedPart((*reference)[i], got.shape, r);
        ASSERT_EQ(got.shape, expected.shape)
            << "rank " << r << ", result " << i;
        EXPECT_LE(worstRelative({got}, {expected}), 1e-5)
            << "rank " << r << ", result " << i;
      }
  }

  MLIRContext context;
  /// The models' dropout rate (every site: embeddings, attention
  /// probabilities, residuals).
  double dropout = 0.0;
  /// The rows of the models' batch.
  int64_t batch = 2;
  /// train-tensor-parallel's options.
  std::string tensorParallel = "size=2";
  /// Passes on the forward before train-autodiff (each ending in a comma),
  /// for both steps.
  std::string forward;
};

TEST_P(TensorParallelTest, SplitRanksTrainAsOne) { expectRanksTrainAsOne(); }

/// Context parallelism on 2 simulated ranks, gathered and in its ring form
/// (exchange=ring: the reference evaluator runs a ring attention as the
/// gathered one, its K/V gradients summed over the group): each gives the
/// unsplit step's loss and gradients.
TEST_P(TensorParallelTest, ContextRanksTrainAsOne) {
  constexpr int64_t kRanks = 2;
  for (std::string exchange : {"all-gather", "ring"}) {
    OwningOpRef<ModuleOp> wholeModule, splitModule;
    func::FuncOp whole = step(
        "train-fuse-attention,train-autodiff{optimizer=none}", wholeModule);
    func::FuncOp split =
        step("train-fuse-attention,train-context-parallel{size=2 exchange=" +
                 exchange + "},train-autodiff{optimizer=none}",
             splitModule);
    ASSERT_TRUE(whole && split);
    int64_t rings = 0;
    split.walk([&](Operation *op) { rings += getRingContext(op) ? 1 : 0; });
    // Each layer's attention and its gradient.
    EXPECT_EQ(rings, exchange == "ring" ? 4 : 0) << exchange;
    FailureOr<SmallVector<RefTensor>> reference;
    FailureOr<std::vector<SmallVector<RefTensor>>> ranks;
    evaluateSplit(whole, split, kRanks, reference, ranks);
    ASSERT_TRUE(succeeded(reference) && succeeded(ranks)) << exchange;
    ASSERT_GT(whole.getNumResults(), 1u);
    for (int64_t r = 0; r < kRanks; ++r)
      for (unsigned i = 0; i < whole.getNumResults(); ++i)
        EXPECT_LE(worstRelative({(*ranks)[r][i]}, {(*reference)[i]}), 1e-5)
            << exchange << ", rank " << r << ", result " << i;
  }
}

/// Sequence parallelism: the residual stream's norms, biases, dropout and
/// the head on each rank's half of the sequence, gathered into the split
/// parts and reduce-scattered out of them; the norms' weights, the biases
/// and the head's weight entering through f. The ranks give one rank's
/// loss and gradients.
TEST_P(TensorParallelTest, SequenceParallelRanksTrainAsOne) {
  tensorParallel = "size=2 sequence-parallel=true";
  expectRanksTrainAsOne();
}

/// Fused attention with dropout on a rank's heads (train.attention's
/// split): it draws its heads' part of the whole mask, forward and
/// backward, so the ranks give the fused unsplit step's loss and gradients
/// (with and without sequence parallelism).
TEST_P(TensorParallelTest, FusedAttentionDrawsItsHeadsPartOfTheMask) {
  dropout = 0.1;
  forward = "train-fuse-attention,";
  expectRanksTrainAsOne();
  tensorParallel = "size=2 sequence-parallel=true";
  expectRanksTrainAsOne();
}

/// With dropout at every site: a dropout on a rank's piece of the sequence
/// draws its piece of the whole tensor's mask.
TEST_P(TensorParallelTest, SequenceParallelDropoutDrawsTheWholeMask) {
  tensorParallel = "size=2 sequence-parallel=true";
  dropout = 0.1;
  expectRanksTrainAsOne();
}

/// With dropout at every site, a rank's part of the attention
/// probabilities draws its heads' part of the whole tensor's mask (the
/// draw's #train.split): the ranks still give one rank's loss and
/// gradients.
TEST_P(TensorParallelTest, SplitDropoutDrawsTheWholeMask) {
  dropout = 0.1;
  expectRanksTrainAsOne();
}

/// Clipping by the global norm: every rank clips by the norm of the whole
/// gradients (the split ones' squares summed over the group, the whole
/// ones' once), so the ranks' norm is the unsplit step's and their SGD
/// updates are its update's parts. The clip binds (the norm is above
/// max_norm): a rank clipping by its own parts' norm would update by
/// another factor.
TEST_P(TensorParallelTest, RanksClipByTheWholeNorm) {
  constexpr int64_t kRanks = 2;
  constexpr double kMaxNorm = 0.01;
  const char *optimizer = "train-autodiff{optimizer=sgd lr=0.1 clip-norm=0.01}";
  OwningOpRef<ModuleOp> wholeModule, splitModule;
  func::FuncOp whole = step(optimizer, wholeModule);
  func::FuncOp split = step(
      std::string("train-tensor-parallel{size=2},") + optimizer, splitModule);
  ASSERT_TRUE(whole && split);
  ASSERT_EQ(whole.getNumResults(), split.getNumResults());
  FailureOr<SmallVector<RefTensor>> reference;
  FailureOr<std::vector<SmallVector<RefTensor>>> ranks;
  evaluateSplit(whole, split, kRanks, reference, ranks);
  ASSERT_TRUE(succeeded(reference) && succeeded(ranks));
  unsigned normIndex = whole.getNumResults();
  for (unsigned i = 0; i < whole.getNumResults(); ++i)
    if (whole.getResultAttr(i, kGradNormAttrName))
      normIndex = i;
  ASSERT_LT(normIndex, whole.getNumResults());
  float norm = (*reference)[normIndex].scalarFloat();
  EXPECT_GT(norm, 10 * kMaxNorm);
  for (int64_t r = 0; r < kRanks; ++r) {
    EXPECT_NEAR((*ranks)[r][normIndex].scalarFloat(), norm, 1e-5 * norm)
        << "rank " << r;
    for (unsigned i = 0; i < whole.getNumResults(); ++i) {
      const RefTensor &got = (*ranks)[r][i];
      RefTensor expected = expectedPart((*reference)[i], got.shape, r);
      ASSERT_EQ(got.shape, expected.shape) << "rank " << r << ", result " << i;
      EXPECT_LE(worstRelative({got}, {expected}), 1e-5)
          << "rank " << r << ", result " << i;
    }
  }
}

/// ZeRO over the data axis of a (data, tensor) grid of 2 x 2 ranks: rank
/// r = 2d + p holds part p of the split parameters and rows [dB, (d+1)B)
/// of the global batch; train-zero averages the gradients over the data
/// axis (stage 0) or partitions the optimizer state (1, 2) and the weights
/// (3) of each rank's part over it, and clips by the norm summed over
/// both axes. The ranks give the unsplit step's loss on the global batch
/// and its updated weights, momenta and norm: their parts, their data
/// shards joined.
class TensorParallelZeroTest : public TensorParallelTest {
protected:
  static constexpr int64_t kData = 2, kParts = 2;

  /// Rank (d, p)'s arguments from the unsplit step's on the global batch:
  /// its rows, its part of each split parameter, its data shard of a
  /// sharded one, zero state.
  SmallVector<RefTensor> zeroRankArguments(func::FuncOp split,
                                           ArrayRef<RefTensor> whole, int64_t d,
                                           int64_t p) {
    SmallVector<RefTensor> args;
    for (unsigned i = 0; i < split.getNumArguments(); ++i) {
      auto type = cast<RankedTensorType>(split.getArgument(i).getType());
      std::vector<int64_t> shape(type.getShape().begin(),
                                 type.getShape().end());
      RefTensor value = whole[i];
      if (auto input = split.getArgAttrOfType<StringAttr>(i, kInputAttrName);
          input && input.getValue() != "step") {
        value = partOf(value, 0, kData, d); // the data rank's rows
      } else if (split.getArgAttr(i, kParamAttrName)) {
        if (auto part = split.getArgAttrOfType<TensorSplitAttr>(
                i, kTensorSplitAttrName))
          value = partOf(value, part.getDim(), part.getParts(), p);
        if (split.getArgAttr(i, kShardOfAttrName)) {
          int64_t n = type.getNumElements();
          std::vector<float> flat = value.floats;
          flat.resize(n * kData, 0.0f);
          value = RefTensor::ofFloats(
              shape, std::vector<float>(flat.begin() + d * n,
                                        flat.begin() + (d + 1) * n));
        }
      } else if (!value.floats.empty()) {
        value = RefTensor::zeros(shape); // optimizer state
      }
      args.push_back(std::move(value));
    }
    return args;
  }

  void check(int64_t stage) {
    const char *optimizer =
        "train-autodiff{optimizer=sgd lr=0.1 momentum=0.9 clip-norm=0.01}";
    OwningOpRef<ModuleOp> wholeModule, splitModule;
    batch = kData * 2;
    func::FuncOp whole = step(optimizer, wholeModule);
    batch = 2;
    func::FuncOp split =
        step(std::string("train-tensor-parallel{size=2},") + optimizer +
                 ",train-zero{ranks=2 stage=" + std::to_string(stage) + "}",
             splitModule);
    ASSERT_TRUE(whole && split);
    ASSERT_EQ(whole.getNumResults(), split.getNumResults());
    SmallVector<RefTensor> args = arguments(whole);
    FailureOr<SmallVector<RefTensor>> reference = evaluate(whole, args);
    ASSERT_TRUE(succeeded(reference));
    std::vector<SmallVector<RefTensor>> perRank;
    for (int64_t d = 0; d < kData; ++d)
      for (int64_t p = 0; p < kParts; ++p)
        perRank.push_back(zeroRankArguments(split, args, d, p));
    FailureOr<std::vector<SmallVector<RefTensor>>> ranks =
        evaluateRanks(split, perRank);
    ASSERT_TRUE(succeeded(ranks));
    auto rankOf = [](int64_t d, int64_t p) { return d * kParts + p; };

    double loss = 0.0;
    for (int64_t d = 0; d < kData; ++d)
      loss += (*ranks)[rankOf(d, 0)][0].scalarFloat() / kData;
    EXPECT_NEAR(loss, (*reference)[0].scalarFloat(),
                1e-5 * std::abs((*reference)[0].scalarFloat()));
    unsigned sharded = 0, compared = 0;
    for (unsigned i = 1; i < whole.getNumResults(); ++i) {
      if (!whole.getResultAttr(i, kParamAttrName) &&
          !whole.getResultAttr(i, kOptimizerStateAttrName) &&
          !whole.getResultAttr(i, kGradNormAttrName))
        continue;
      const RefTensor &want = (*reference)[i];
      auto full = split.getResultAttrOfType<TypeAttr>(i, kShardOfAttrName);
      std::vector<int64_t> partShape =
          full ? std::vector<int64_t>(
                     cast<RankedTensorType>(full.getValue()).getShape().begin(),
                     cast<RankedTensorType>(full.getValue()).getShape().end())
               : (*ranks)[0][i].shape;
      sharded += static_cast<bool>(full);
      for (int64_t p = 0; p < kParts; ++p) {
        RefTensor expected = expectedPart(want, partShape, p);
        for (int64_t d = 0; d < kData; ++d) {
          RefTensor got = (*ranks)[rankOf(d, p)][i];
          if (full) {
            // The part: its data shards joined, the padding dropped.
            std::vector<float> joined;
            for (int64_t e = 0; e < kData; ++e)
              joined.insert(joined.end(),
                            (*ranks)[rankOf(e, p)][i].floats.begin(),
                            (*ranks)[rankOf(e, p)][i].floats.end());
            joined.resize(expected.floats.size());
            got = RefTensor::ofFloats(expected.shape, std::move(joined));
          }
          ASSERT_EQ(got.floats.size(), expected.floats.size())
              << "result " << i;
          EXPECT_LE(worstRelative({got}, {expected}), 1e-5)
              << "rank (" << d << ", " << p << "), result " << i;
          ++compared;
        }
      }
    }
    EXPECT_GT(compared, 0u);
    if (stage > 0)
      EXPECT_GT(sharded, 0u);
  }
};

TEST_P(TensorParallelZeroTest, Stage0AveragesOverTheDataAxis) { check(0); }
TEST_P(TensorParallelZeroTest, Stage1ShardsEachPartsState) { check(1); }
TEST_P(TensorParallelZeroTest, Stage2ScattersEachPartsGradients) { check(2); }
TEST_P(TensorParallelZeroTest, Stage3ShardsEachPartsWeights) { check(3); }
/// Dropout at every site: a rank draws at its data rank's place in the
/// global batch (rank_stride: the tensor group's size) and, on its part,
/// at its part's place in the whole tensor.
TEST_P(TensorParallelZeroTest, Stage1DropoutDrawsTheGlobalMask) {
  dropout = 0.1;
  check(1);
}

INSTANTIATE_TEST_SUITE_P(Models, TensorParallelZeroTest,
                         ::testing::Values(Model{"gpt2-124m", 2, 2, 20},
                                           Model{"llama2-7b", 4, 2, 14}));

// Multi-head GPT and Llama, and grouped-query Llama (4 query heads on 2
// K/V heads: each rank 2 query heads and their K/V head).
/// The activation bytes each layer of a 2-layer gpt3-175b keeps after
/// `pipeline` (its passes on the forward), by the memory analysis.
std::vector<uint64_t> layerActivations(const std::string &pipeline) {
  MLIRContext context;
  loadDialects(context);
  ScopedDiagnosticHandler quiet(&context, [](Diagnostic &d) {
    return success(d.getSeverity() == DiagnosticSeverity::Remark);
  });
  ModelConfig config = *getPreset("gpt3-175b");
  config.layers = 2;
  // The vocabulary padded as Megatron pads it for the paper's runs (a
  // multiple of 128 · t: 51200), so that t = 8 splits it; the layers'
  // activations do not depend on it.
  config.vocab = 51200;
  OwningOpRef<ModuleOp> module = buildModel(&context, config);
  PassManager pm(&context);
  std::vector<uint64_t> totals;
  if (failed(parsePassPipeline(pipeline, pm)) || failed(pm.run(*module)))
    return totals;
  MemoryAnalysis analysis(*module);
  for (const LayerActivations &layer :
       analysis.getFunctions().front().getLayers())
    totals.push_back(layer.total());
  return totals;
}

/// gpt3-175b's s, b, h and a (16-bit activations).
constexpr uint64_t kS = 2048, kB = 1, kH = 12288, kA = 96;

/// Korthikanti et al. 2022, Table 2, per transformer layer of gpt3-175b
/// (s = 2048, b = 1, h = 12288, a = 96, 16-bit) with tensor parallelism
/// over t = 8: sbh(10 + 24/t + 5as/(ht)) bytes kept for the backward
/// without recompute, sbh(10 + 24/t) with selective recompute; t = 1 is
/// 34sbh + 5as²b (RematTest). Two layers: the formula is per layer.
TEST(TensorParallelMemory, LayersKeepWhatKorthikantiSays) {
  for (uint64_t t : {1, 2, 8}) {
    for (const char *remat : {"", "train-remat{policy=selective},"
                                  "train-materialize-remat"}) {
      std::string pipeline = "train-tensor-parallel{size=" + std::to_string(t) +
                             "},train-autodiff";
      if (*remat)
        pipeline += std::string(",") + remat;
      // In units of s·b·h / t: 10t + 24 (+ 5as/h without recompute).
      uint64_t expected =
          kS * kB * kH * (10 * t + 24 + (*remat ? 0 : 5 * kA * kS / kH)) / t;
      EXPECT_EQ(layerActivations(pipeline), std::vector<uint64_t>(2, expected))
          << "t = " << t << (*remat ? ", selective" : ", no recompute");
    }
  }
}

/// Table 2's sequence-parallel rows, per layer of gpt3-175b at t = 2 and
/// 8: sbh(34/t + 5as/(ht)) without recompute, 34sbh/t with selective
/// recompute, 2sbh/t (the layer's input piece) with full recompute. The
/// gathered inputs of the split parts are gathered again in the backward,
/// as Megatron does, so each rank keeps its piece only.
TEST(TensorParallelMemory, SequenceParallelLayersKeepWhatKorthikantiSays) {
  struct Row {
    const char *remat;
    uint64_t sbhOverT; // the formula, in units of s·b·h / t
  };
  const Row rows[] = {
      {"", 34 + 5 * kA * kS / kH},
      {"train-remat{policy=selective},train-materialize-remat", 34},
      {"train-remat{policy=full},train-materialize-remat", 2}};
  for (uint64_t t : {2, 8}) {
    for (const Row &row : rows) {
      std::string pipeline = "train-tensor-parallel{size=" + std::to_string(t) +
                             " sequence-parallel=true},train-autodiff";
      if (*row.remat)
        pipeline += std::string(",") + row.remat;
      EXPECT_EQ(layerActivations(pipeline),
                std::vector<uint64_t>(2, kS * kB * kH * row.sbhOverT / t))
          << "t = " << t << ", " << (*row.remat ? row.remat : "none");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, TensorParallelTest,
                         ::testing::Values(Model{"gpt2-124m", 2, 2, 21},
                                           Model{"llama2-7b", 2, 2, 16},
                                           Model{"llama2-7b", 4, 2, 16}));

} // namespace
