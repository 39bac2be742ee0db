//===- ZeroTest.cpp - N simulated ranks train as one rank on the batch ----===//
//
// train-zero's transformation checked by execution: the step partitioned
// over 4 data-parallel ranks (stages 0, 1 and 2), run by the reference
// evaluator for 4 simulated ranks in lockstep, each on a quarter of the
// batch, gives the weights (and, sharded, the optimizer state) that the
// unpartitioned step gives on the whole batch, within 1e-6 relative in f32.
//
//===----------------------------------------------------------------------===//

#include "TestModels.h"
#include "trainmem/Dialect/Train/IR/ShardModels.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Evaluator/Evaluator.h"
#include "trainmem/Model/ModelBuilder.h"
#include "trainmem/Run/Step.h"

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace mlir;
using namespace mlir::train;

namespace {

constexpr int64_t kRanks = 4, kRankBatch = 2;

class ZeroTest : public ::testing::Test {
protected:
  ZeroTest() {
    DialectRegistry registry;
    registerRunDialects(registry);
    registry.insert<shard::ShardDialect>();
    registerShardExternalModels(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
  }

  /// The tiny f32 GPT with `batch` rows, made a step by `pipeline`.
  func::FuncOp step(int64_t batch, StringRef pipeline,
                    OwningOpRef<ModuleOp> &module) {
    ModelConfig config = smallModel("tiny", {1, 8, 2, 2, 16, 4, batch});
    config.dropout = dropout;
    module = buildModel(&context, config);
    PassManager pm(&context);
    if (failed(parsePassPipeline(pipeline, pm)) || failed(pm.run(*module))) {
      ADD_FAILURE() << "pipeline failed: " << pipeline.str();
      return nullptr;
    }
    return cast<func::FuncOp>(findMarkedStep(*module, "ZeroTest"));
  }

  /// Arguments of rank `rank`: weights from a fixed seed per parameter name
  /// (a rank's shard of them at stage 3), zero state, step 1, and rows
  /// [rank x rows, (rank + 1) x rows) of a fixed global batch.
  SmallVector<RefTensor> arguments(func::FuncOp func, int64_t rank) {
    SmallVector<RefTensor> args;
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      auto type = cast<RankedTensorType>(func.getArgument(i).getType());
      std::vector<int64_t> shape(type.getShape().begin(),
                                 type.getShape().end());
      if (auto param = func.getArgAttrOfType<StringAttr>(i, kParamAttrName)) {
        auto full = func.getArgAttrOfType<TypeAttr>(i, kShardOfAttrName);
        int64_t n = full ? cast<RankedTensorType>(full.getValue())
                               .getNumElements()
                         : type.getNumElements();
        std::mt19937 rng(std::hash<std::string>()(param.getValue().str()));
        std::normal_distribution<float> normal(0.0f, 0.5f);
        std::vector<float> values(n);
        for (float &v : values)
          v = normal(rng);
        if (full) {
          // The rank's shard of the flattened, zero-padded tensor.
          int64_t shard = type.getNumElements();
          values.resize(shard * kRanks, 0.0f);
          values = std::vector<float>(values.begin() + rank * shard,
                                      values.begin() + (rank + 1) * shard);
        }
        args.push_back(RefTensor::ofFloats(shape, std::move(values)));
      } else if (auto input =
                     func.getArgAttrOfType<StringAttr>(i, kInputAttrName)) {
        if (input.getValue() == "step") {
          args.push_back(RefTensor::ofInts({}, {1}));
          continue;
        }
        // tokens / targets: rows of the global batch.
        std::mt19937 rng(input.getValue() == "tokens" ? 11 : 12);
        std::uniform_int_distribution<int64_t> id(0, 255);
        std::vector<int64_t> global(kRanks * kRankBatch * shape[1]);
        for (int64_t &v : global)
          v = id(rng);
        int64_t first = rank * shape[0];
        std::vector<int64_t> rows(global.begin() + first * shape[1],
                                  global.begin() + (first + shape[0]) *
                                                       shape[1]);
        args.push_back(RefTensor::ofInts(shape, std::move(rows)));
      } else if (isa<IntegerType>(type.getElementType())) {
        // 8-bit state codes (with zero block maxima: zero m and v).
        args.push_back(RefTensor::ofInts(
            shape, std::vector<int64_t>(type.getNumElements(), 0)));
      } else {
        args.push_back(RefTensor::zeros(shape)); // optimizer state
      }
    }
    return args;
  }

  /// Whether `got` is `want` within 1e-6 of the tensor's largest magnitude.
  static void expectClose(ArrayRef<float> got, ArrayRef<float> want,
                          const std::string &what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    double scale = 1e-30, worst = 0.0;
    for (float v : want)
      scale = std::max(scale, std::abs(static_cast<double>(v)));
    for (size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
    EXPECT_LE(worst, 1e-6 * scale) << what;
  }

  void check(int64_t stage, StringRef before = "", StringRef options = "",
             StringRef after = "") {
    OwningOpRef<ModuleOp> wholeModule, zeroModule;
    func::FuncOp whole = step(kRanks * kRankBatch, autodiff, wholeModule);
    std::string zero = autodiff + "," + before.str() +
                       "train-zero{ranks=" +
                       std::to_string(kRanks) +
                       " stage=" + std::to_string(stage) + " " +
                       options.str() + "}" + after.str();
    func::FuncOp parted = step(kRankBatch, zero, zeroModule);
    ASSERT_TRUE(whole && parted);
    ASSERT_TRUE(parted->hasAttr(kZeroAttrName));

    FailureOr<SmallVector<RefTensor>> reference =
        evaluate(whole, arguments(whole, 0));
    ASSERT_TRUE(succeeded(reference));
    std::vector<SmallVector<RefTensor>> perRank;
    for (int64_t r = 0; r < kRanks; ++r)
      perRank.push_back(arguments(parted, r));
    FailureOr<std::vector<SmallVector<RefTensor>>> ranks =
        evaluateRanks(parted, perRank);
    ASSERT_TRUE(succeeded(ranks));

    // The loss: the mean over the ranks of their means is the batch's mean.
    double meanLoss = 0.0;
    for (const auto &results : *ranks)
      meanLoss += results[0].scalarFloat() / kRanks;
    EXPECT_NEAR(meanLoss, (*reference)[0].scalarFloat(),
                1e-6 * std::abs((*reference)[0].scalarFloat()));

    // Every result of the whole step by its marker; the ranks' alike: the
    // same tensor on every rank, or (train.shard_of) the ranks' shards of
    // the flattened, zero-padded tensor.
    unsigned weights = 0, states = 0, sharded = 0, norms = 0;
    for (unsigned i = 1; i < whole.getNumResults(); ++i) {
      const RefTensor &want = (*reference)[i];
      std::string what;
      if (auto param =
              whole.getResultAttrOfType<StringAttr>(i, kParamAttrName)) {
        what = "weights of '" + param.getValue().str() + "'";
        ++weights;
      } else if (auto state = whole.getResultAttrOfType<StateAttr>(
                     i, kOptimizerStateAttrName)) {
        what = "state " + state.getKey();
        ++states;
      } else if (whole.getResultAttr(i, kGradNormAttrName)) {
        // The global gradient norm, the same on every rank.
        what = "gradient norm";
        ++norms;
      } else {
        continue;
      }
      if (!parted.getResultAttr(i, kShardOfAttrName)) {
        for (int64_t r = 0; r < kRanks; ++r)
          expectClose((*ranks)[r][i].floats, want.floats,
                      what + ", rank " + std::to_string(r));
        continue;
      }
      ++sharded;
      std::vector<float> joined;
      for (int64_t r = 0; r < kRanks; ++r)
        joined.insert(joined.end(), (*ranks)[r][i].floats.begin(),
                      (*ranks)[r][i].floats.end());
      ASSERT_GE(joined.size(), want.floats.size());
      for (size_t k = want.floats.size(); k < joined.size(); ++k)
        EXPECT_EQ(joined[k], 0.0f) << "padding of " << what;
      joined.resize(want.floats.size());
      expectClose(joined, want.floats, what);
    }
    // What each stage shards: nothing, the state, and (3) the weights too.
    EXPECT_EQ(sharded, stage == 0   ? 0u
                       : stage < 3 ? states
                                   : states + weights);
    EXPECT_GT(weights, 0u);
    EXPECT_EQ(states, 2 * weights);
    EXPECT_EQ(norms, autodiff.find("clip-norm") != std::string::npos ? 1u : 0u);
  }

  MLIRContext context;
  /// How the whole and the partitioned step are differentiated.
  std::string autodiff = "train-autodiff{lr=1e-2}";
  /// The model's dropout rate.
  double dropout = 0.0;
};

TEST_F(ZeroTest, Stage0RanksTrainAsOneOnTheBatch) { check(0); }
TEST_F(ZeroTest, Stage1RanksTrainAsOneOnTheBatch) { check(1); }

// Each rank draws the masks of its rows of the global batch (issue 31,
// item 1): with dropout, the ranks still train as one process on the
// global batch.
TEST_F(ZeroTest, DropoutDrawsTheGlobalBatchsMasks) {
  dropout = 0.25;
  check(0);
  check(2);
  check(3, "train-grad-accum{steps=2},");
}

// With gradient accumulation (2 micro-batches of one row per rank), the
// ranks reduce once, after the last micro-batch: the same step again.
TEST_F(ZeroTest, Stage0WithAccumulation) {
  check(0, "train-grad-accum{steps=2},");
}
TEST_F(ZeroTest, Stage1WithUnrolledAccumulation) {
  check(1, "train-grad-accum{steps=2},train-unroll-accum,");
}
// Stage 2: gradients reduce-scattered as the backward produces them (one
// bucket, or a bucket per gradient).
TEST_F(ZeroTest, Stage2RanksTrainAsOneOnTheBatch) { check(2); }
TEST_F(ZeroTest, Stage2WithSmallBuckets) { check(2, "", "bucket=64"); }

// Stage 2 under accumulation: each micro-batch's gradients reduce-scattered
// inside the loop into f32 shards (the default), also when the loop is
// unrolled after train-zero; or the full gradients accumulated and
// reduce-scattered once.
TEST_F(ZeroTest, Stage2ReduceScattersEachMicroBatch) {
  check(2, "train-grad-accum{steps=2},", "bucket=64");
}
TEST_F(ZeroTest, Stage2ReduceScattersEachMicroBatchUnrolled) {
  check(2, "train-grad-accum{steps=2},", "", ",train-unroll-accum");
}
TEST_F(ZeroTest, Stage2AccumulatesFullGradients) {
  check(2, "train-grad-accum{steps=2},", "accumulate=full");
}

// Stage 3: the weights sharded too, gathered before each op that reads
// them (the default prefetch of one, and none).
TEST_F(ZeroTest, Stage3RanksTrainAsOneOnTheBatch) { check(3); }
TEST_F(ZeroTest, Stage3WithoutPrefetch) { check(3, "", "prefetch=0"); }
TEST_F(ZeroTest, Stage3WithAccumulation) {
  check(3, "train-grad-accum{steps=2},");
}
TEST_F(ZeroTest, Stage3WithUnrolledAccumulationAndRemat) {
  check(3,
        "train-remat{policy=selective},train-materialize-remat,"
        "train-grad-accum{steps=2},",
        "", ",train-unroll-accum");
}
TEST_F(ZeroTest, Stage3AfterUnrollingAccumulatesFullGradients) {
  check(3,
        "train-remat{policy=full},train-materialize-remat,"
        "train-grad-accum{steps=2},train-unroll-accum,",
        "accumulate=full");
}

// Clipping by the global norm of the ranks' gradient shards (an all-reduce
// of their squared norms); a max_norm small enough that it clips.
TEST_F(ZeroTest, Stage1ClipsByTheGlobalNorm) {
  autodiff = "train-autodiff{lr=1e-2 clip-norm=1e-3}";
  check(1);
}
TEST_F(ZeroTest, Stage2ClipsByTheGlobalNorm) {
  autodiff = "train-autodiff{lr=1e-2 clip-norm=1e-3}";
  check(2, "", "bucket=64");
}
TEST_F(ZeroTest, Stage3ClipsByTheGlobalNorm) {
  autodiff = "train-autodiff{lr=1e-2 clip-norm=1e-3}";
  check(3, "train-grad-accum{steps=2},");
}

// The learning-rate schedule (warm-up) and weight decay: scalars every
// rank computes alike, on every stage's shards.
TEST_F(ZeroTest, Stage1WithTheSchedule) {
  autodiff = "train-autodiff{lr=1e-2 warmup-steps=4 total-steps=20 "
             "clip-norm=1e-3}";
  check(1);
}
TEST_F(ZeroTest, Stage3WithTheSchedule) {
  autodiff = "train-autodiff{lr=1e-2 warmup-steps=4 total-steps=20}";
  check(3, "", "prefetch=2");
}

// 8-bit state quantized before or after train-zero: the same program, the
// ranks' shards of whole blocks either way (bit for bit, by execution).
TEST_F(ZeroTest, QuantizingBeforeOrAfterShardingIsTheSame) {
  std::string quantize = "train-quantize-optimizer-state{min-size=64 block=8}";
  std::string zero = "train-zero{ranks=" + std::to_string(kRanks) +
                     " stage=1}";
  OwningOpRef<ModuleOp> firstModule, laterModule;
  func::FuncOp first = step(kRankBatch, autodiff + "," + quantize + "," + zero,
                            firstModule);
  func::FuncOp later = step(kRankBatch, autodiff + "," + zero + "," + quantize,
                            laterModule);
  ASSERT_TRUE(first && later);
  ASSERT_EQ(first.getFunctionType(), later.getFunctionType());
  for (unsigned i = 0; i < first.getNumArguments(); ++i)
    EXPECT_EQ(first.getArgAttrDict(i), later.getArgAttrDict(i))
        << "argument " << i;
  for (unsigned i = 0; i < first.getNumResults(); ++i)
    EXPECT_EQ(first.getResultAttrDict(i), later.getResultAttrDict(i))
        << "result " << i;
  unsigned codes = 0;
  for (unsigned i = 0; i < first.getNumArguments(); ++i)
    if (auto state = first.getArgAttrOfType<StateAttr>(
            i, kOptimizerStateAttrName))
      codes += state.getPart() == StatePart::codes;
  EXPECT_GT(codes, 0u);

  std::vector<SmallVector<RefTensor>> perRank;
  for (int64_t r = 0; r < kRanks; ++r)
    perRank.push_back(arguments(first, r));
  auto a = evaluateRanks(first, perRank);
  auto b = evaluateRanks(later, perRank);
  ASSERT_TRUE(succeeded(a) && succeeded(b));
  for (int64_t r = 0; r < kRanks; ++r)
    for (unsigned i = 0; i < first.getNumResults(); ++i) {
      EXPECT_EQ((*a)[r][i].floats, (*b)[r][i].floats)
          << "rank " << r << ", result " << i;
      EXPECT_EQ((*a)[r][i].ints, (*b)[r][i].ints)
          << "rank " << r << ", result " << i;
    }
}

// Rematerialized layers change nothing in what the ranks compute.
TEST_F(ZeroTest, Stage1WithRemat) {
  check(1, "train-remat{policy=full},train-materialize-remat,");
}

// The evaluator's lockstep ranks on a (data, tensor) grid of 2 x 2, row
// major: a collective over the tensor axis (grid_axes = [1]) combines ranks
// {0, 1} and {2, 3}, one over the data axis ([0]) ranks {0, 2} and {1, 3},
// as the runtime's process groups (2, 1) and (2, 2) do.
TEST_F(ZeroTest, CollectivesOfAGridAxisCombineItsGroupOnly) {
  const char *source = R"mlir(
    shard.grid @grid(shape = 2x2)
    func.func @f(%a: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>, tensor<4xf32>, tensor<1xf32>, tensor<1xf32>) {
      %t = shard.all_reduce %a on @grid grid_axes = [1] : tensor<2xf32> -> tensor<2xf32>
      %d = shard.all_reduce %a on @grid grid_axes = [0] : tensor<2xf32> -> tensor<2xf32>
      %g = shard.all_gather %a on @grid grid_axes = [1] gather_axis = 0 : tensor<2xf32> -> tensor<4xf32>
      %s = shard.reduce_scatter %a on @grid grid_axes = [0] scatter_axis = 0 : tensor<2xf32> -> tensor<1xf32>
      %l = shard.all_slice %a on @grid grid_axes = [1] slice_axis = 0 : tensor<2xf32> -> tensor<1xf32>
      return %t, %d, %g, %s, %l : tensor<2xf32>, tensor<2xf32>, tensor<4xf32>, tensor<1xf32>, tensor<1xf32>
    })mlir";
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(source, &context);
  ASSERT_TRUE(module);
  auto func = module->lookupSymbol<func::FuncOp>("f");
  // Rank r holds (10 r, 10 r + 1).
  auto value = [](int64_t r, int64_t i) { return float(10 * r + i); };
  std::vector<SmallVector<RefTensor>> perRank;
  for (int64_t r = 0; r < 4; ++r)
    perRank.push_back({RefTensor::ofFloats({2}, {value(r, 0), value(r, 1)})});
  auto results = evaluateRanks(func, perRank);
  ASSERT_TRUE(succeeded(results));
  for (int64_t r = 0; r < 4; ++r) {
    int64_t tensorBase = r - r % 2, dataPeer = (r + 2) % 4;
    int64_t tensorPosition = r % 2, dataPosition = r / 2;
    const SmallVector<RefTensor> &got = (*results)[r];
    for (int64_t i = 0; i < 2; ++i) {
      EXPECT_EQ(got[0].floats[i],
                value(tensorBase, i) + value(tensorBase + 1, i))
          << "rank " << r;
      EXPECT_EQ(got[1].floats[i], value(r, i) + value(dataPeer, i))
          << "rank " << r;
    }
    EXPECT_EQ(got[2].floats,
              (std::vector<float>{value(tensorBase, 0), value(tensorBase, 1),
                                  value(tensorBase + 1, 0),
                                  value(tensorBase + 1, 1)}))
        << "rank " << r;
    EXPECT_EQ(got[3].floats[0],
              value(r, dataPosition) + value(dataPeer, dataPosition))
        << "rank " << r;
    EXPECT_EQ(got[4].floats[0], value(r, tensorPosition)) << "rank " << r;
  }
}

// A grid of other ranks than those simulated is refused.
TEST_F(ZeroTest, CollectivesOfAnotherGridAreRefused) {
  const char *source = R"mlir(
    shard.grid @grid(shape = 3x2)
    func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {
      %t = shard.all_reduce %a on @grid grid_axes = [1] : tensor<2xf32> -> tensor<2xf32>
      return %t : tensor<2xf32>
    })mlir";
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(source, &context);
  ASSERT_TRUE(module);
  std::string message;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &d) {
    message = d.str();
    return success();
  });
  std::vector<SmallVector<RefTensor>> perRank(
      4, {RefTensor::ofFloats({2}, {1.0f, 2.0f})});
  EXPECT_TRUE(
      failed(evaluateRanks(module->lookupSymbol<func::FuncOp>("f"), perRank)));
  EXPECT_EQ(message, "reference evaluator: the collective's grid is not a "
                     "static grid of 4 ranks (the ranks simulated) with its "
                     "group on consecutive axes");
}

} // namespace
