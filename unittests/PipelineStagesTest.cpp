//===- PipelineStagesTest.cpp - train-pipeline's stages ---------------===//
//
// train-pipeline checked three ways: its schedules keep the published
// counts of micro-batches in flight (GPipe m, 1F1B min(p - k, m), the
// interleaved schedule's (p - k - 1)·2 + (v - 1)·p + 1 chunk units); the
// stage functions, run together by the reference evaluator, give the
// one-rank step's loss, updated weights and optimizer state, to the bit
// (the same sums in the same order, the global norm summed exactly); and
// on a GPT-3 175B shape the memory analysis of each stage holds exactly
// the schedule's units in flight, each a chunk's layers' saved activations
// (Korthikanti et al. 2022: s·b·h·(34 + 5·a·s/h) bytes per layer in 16
// bits, with dropout).
//
//===----------------------------------------------------------------------===//

#include "TestModels.h"
#include "trainmem/Analysis/MemoryAnalysis.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"
#include "trainmem/Dialect/Train/Transforms/Pipeline.h"
#include "trainmem/Evaluator/Evaluator.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

using namespace mlir;
using namespace mlir::train;

namespace {

std::string debugString(Attribute attr) {
  std::string text;
  llvm::raw_string_ostream(text) << attr;
  return text;
}

/// The most (chunk, micro-batch) units whose forward has run and backward
/// has not, over a stage's schedule.
int64_t mostInFlight(ArrayRef<PipelineUnit> units) {
  int64_t live = 0, most = 0;
  for (const PipelineUnit &unit : units) {
    live += unit.backward ? -1 : 1;
    most = std::max(most, live);
  }
  return most;
}

TEST(PipelineSchedule, KeepsThePublishedCountsInFlight) {
  for (int64_t p : {2, 4, 8})
    for (int64_t m : {p, 2 * p, 3 * p})
      for (int64_t k = 0; k < p; ++k) {
        SmallVector<PipelineUnit> gpipe =
            pipelineSchedule(PipelineSchedule::gpipe, k, p, 1, m);
        SmallVector<PipelineUnit> oneF =
            pipelineSchedule(PipelineSchedule::one_f_one_b, k, p, 1, m);
        EXPECT_EQ(mostInFlight(gpipe), m);
        EXPECT_EQ(mostInFlight(oneF), std::min(p - k, m))
            << "p " << p << " m " << m << " stage " << k;
        for (int64_t v : {2, 3}) {
          SmallVector<PipelineUnit> inter =
              pipelineSchedule(PipelineSchedule::interleaved, k, p, v, m);
          EXPECT_EQ(mostInFlight(inter),
                    std::min((p - k - 1) * 2 + (v - 1) * p + 1, m * v))
              << "p " << p << " m " << m << " v " << v << " stage " << k;
          // Each chunk's forward and backward of each micro-batch, once,
          // the backward after the forward.
          std::set<std::tuple<int64_t, int64_t>> forwards;
          for (const PipelineUnit &unit : inter) {
            EXPECT_EQ(unit.chunk % p, k);
            if (!unit.backward)
              EXPECT_TRUE(
                  forwards.insert({unit.chunk, unit.microBatch}).second);
            else
              EXPECT_TRUE(forwards.count({unit.chunk, unit.microBatch}));
          }
          EXPECT_EQ(static_cast<int64_t>(inter.size()), 2 * m * v);
        }
      }
}

class PipelineStagesTest : public StepTest {
protected:
  /// The stage functions of `module`, in stage order.
  static SmallVector<func::FuncOp> stagesOf(ModuleOp module) {
    std::map<int64_t, func::FuncOp> byStage;
    for (auto func : module.getOps<func::FuncOp>())
      if (auto stage =
              func->getAttrOfType<PipelineStageAttr>(kPipelineStageAttrName))
        byStage[stage.getStage()] = func;
    SmallVector<func::FuncOp> stages;
    for (auto &[stage, func] : byStage)
      stages.push_back(func);
    return stages;
  }

  /// `preset`'s tiny model made a step by `recipe`, once unrolled on one
  /// rank and once cut by `pipeline`: the stages, run together, return
  /// the one rank's values for every result they hold, bit for bit.
  void expectStagesTrainAsOne(StringRef preset, double dropout,
                              StringRef recipe, StringRef pipeline) {
    ModelConfig config = smallModel(preset, {4, 16, 2, 2, 32, 8, 8, 256});
    config.dropout = dropout;
    std::string base = recipe.str();
    OwningOpRef<ModuleOp> one = buildStep(config, base + ",train-unroll-accum");
    OwningOpRef<ModuleOp> split =
        buildStep(config, base + "," + pipeline.str());
    auto step = cast<func::FuncOp>(findMarkedStep(*one, "PipelineStagesTest"));
    SmallVector<func::FuncOp> stages = stagesOf(*split);
    ASSERT_GT(stages.size(), 1u);
    std::vector<RefTensor> args = randomStepInputs(step, 7, 0.02f);
    FailureOr<SmallVector<RefTensor>> reference = evaluate(step, args);
    ASSERT_TRUE(succeeded(reference));
    // Each stage's arguments and results are the step's with the same
    // markers.
    // (A stage's #train.init also names its random stream.)
    auto markerOf = [](DictionaryAttr attrs) -> Attribute {
      for (StringRef name :
           {kParamAttrName, kInputAttrName, kOptimizerStateAttrName})
        if (Attribute marker = attrs.get(name))
          return marker;
      return attrs;
    };
    auto argumentOf = [&](DictionaryAttr attrs) -> int64_t {
      for (unsigned i = 0; i < step.getNumArguments(); ++i)
        if (markerOf(step.getArgAttrDict(i)) == markerOf(attrs))
          return i;
      return -1;
    };
    SmallVector<SmallVector<RefTensor>> stageArgs;
    for (func::FuncOp stage : stages) {
      SmallVector<RefTensor> own;
      for (unsigned i = 0; i < stage.getNumArguments(); ++i) {
        int64_t index = argumentOf(stage.getArgAttrDict(i));
        ASSERT_GE(index, 0) << "stage argument " << i;
        own.push_back(args[index]);
      }
      stageArgs.push_back(std::move(own));
    }
    FailureOr<std::vector<SmallVector<RefTensor>>> results =
        evaluatePipeline(stages, stageArgs);
    ASSERT_TRUE(succeeded(results)) << pipeline.str();
    std::set<unsigned> covered;
    for (auto [stage, func] : llvm::enumerate(stages))
      for (unsigned r = 0; r < func.getNumResults(); ++r) {
        unsigned match = step.getNumResults();
        for (unsigned i = 0; i < step.getNumResults(); ++i)
          if (step.getResultAttrDict(i) == func.getResultAttrDict(r))
            match = i;
        ASSERT_LT(match, step.getNumResults());
        covered.insert(match);
        const RefTensor &got = (*results)[stage][r];
        const RefTensor &want = (*reference)[match];
        EXPECT_EQ(got.shape, want.shape);
        EXPECT_TRUE(got.floats == want.floats && got.ints == want.ints)
            << pipeline.str() << ": stage " << stage << " result " << r << " ("
            << debugString(func.getResultAttrDict(r)) << ")";
      }
    // Every result of the step is some stage's.
    EXPECT_EQ(covered.size(), step.getNumResults());
  }
};

constexpr const char *kRecipe =
    "train-autodiff{clip-norm=0.01},train-grad-accum{steps=4}";

TEST_F(PipelineStagesTest, GptStagesTrainAsOneRank) {
  for (const char *pipeline :
       {"train-pipeline{stages=2 schedule=gpipe}",
        "train-pipeline{stages=2 schedule=1f1b}",
        "train-pipeline{stages=4 schedule=1f1b}",
        "train-pipeline{stages=2 schedule=interleaved virtual=2}",
        "train-pipeline{stages=2 split=1,3}"})
    expectStagesTrainAsOne("tiny", 0.0, kRecipe, pipeline);
}

/// Dropout: each micro-batch's copy draws its place in the batch, on
/// whichever stage it runs (the masks do not depend on p).
TEST_F(PipelineStagesTest, DropoutMasksDoNotDependOnTheStages) {
  expectStagesTrainAsOne("tiny", 0.1, kRecipe,
                         "train-pipeline{stages=4 schedule=1f1b}");
}

/// Full recompute: each layer's backward recomputes its forward in its
/// own stage.
TEST_F(PipelineStagesTest, RecomputedStagesTrainAsOneRank) {
  expectStagesTrainAsOne(
      "tiny", 0.1,
      "train-autodiff{clip-norm=0.01},train-remat{policy=full},"
      "train-grad-accum{steps=4},train-materialize-remat",
      "train-pipeline{stages=2 schedule=1f1b}");
}

/// A Llama (untied head, RMS norm, rotary, SwiGLU, grouped-query heads).
TEST_F(PipelineStagesTest, LlamaStagesTrainAsOneRank) {
  expectStagesTrainAsOne("llama2-7b", 0.0, kRecipe,
                         "train-pipeline{stages=4 schedule=1f1b}");
  expectStagesTrainAsOne("llama2-7b", 0.0, kRecipe,
                         "train-pipeline{stages=2 schedule=interleaved "
                         "virtual=2}");
}

/// GPT-3 175B's layer (h 12288, 96 heads, s 2048, micro-batch 1, bf16),
/// 8 layers on p = 4 stages, m = 8 micro-batches: each stage's analysis
/// keeps the schedule's units in flight, each unit a chunk's layers'
/// saved activations, s·b·h·(34 + 5·a·s/h) bytes per layer; the stages
/// between the embedding and the head hold exactly that many.
TEST_F(PipelineStagesTest, Gpt3StagesHoldTheScheduleInFlight) {
  static constexpr int64_t p = 4, m = 8, layers = 8;
  ModelConfig config = *getPreset("gpt3-175b");
  config.layers = layers;
  config.batch = m;
  config.dropout = 0.1;
  const int64_t s = config.seq, h = config.hidden, a = config.heads;
  const uint64_t layerBytes = s * h * (34 + 5 * a * s / h);
  struct Case {
    const char *pipeline;
    int64_t v;
    std::function<int64_t(int64_t)> inFlight;
  };
  std::vector<Case> cases = {
      {"train-pipeline{stages=4 schedule=gpipe}", 1, [](int64_t) { return m; }},
      {"train-pipeline{stages=4 schedule=1f1b}", 1,
       [](int64_t k) { return std::min(p - k, m); }},
      {"train-pipeline{stages=4 schedule=interleaved virtual=2}", 2,
       [](int64_t k) { return std::min((p - k - 1) * 2 + p + 1, 2 * m); }}};
  for (const Case &c : cases) {
    OwningOpRef<ModuleOp> module = buildStep(
        config,
        std::string("train-autodiff,train-grad-accum{steps=8},") + c.pipeline);
    SmallVector<func::FuncOp> stages = stagesOf(*module);
    ASSERT_EQ(stages.size(), static_cast<size_t>(p));
    MemoryAnalysis analysis(*module);
    const uint64_t unitBytes = layerBytes * (layers / (p * c.v));
    for (auto [k, stage] : llvm::enumerate(stages)) {
      const FunctionMemory &memory = *analysis.lookup(stage);
      // The most saved activations live at once, and the units then.
      std::vector<int64_t> change(memory.getLiveBytes().size() + 2, 0);
      for (const Buffer &buffer : memory.getBuffers())
        if (buffer.category == MemoryCategory::Activations) {
          change[buffer.firstPoint] += buffer.bytes;
          change[buffer.lastPoint + 1] -= buffer.bytes;
        }
      uint64_t most = 0;
      unsigned mostPoint = 0;
      int64_t live = 0;
      for (unsigned point = 0; point < change.size(); ++point) {
        live += change[point];
        if (static_cast<uint64_t>(live) > most) {
          most = live;
          mostPoint = point;
        }
      }
      int64_t units = memory.getUnitsLiveAt(mostPoint).size();
      EXPECT_EQ(units, c.inFlight(k)) << c.pipeline << ", stage " << k;
      // Tensors received ahead of the unit that reads them (the
      // interleaved schedule's crossing forward sends), live then too.
      uint64_t early = 0;
      for (const Buffer &buffer : memory.getBuffers()) {
        if (buffer.category != MemoryCategory::Activations ||
            !isa_and_nonnull<PipelineExchangeOp>(
                buffer.owner.getDefiningOp()) ||
            buffer.firstPoint > mostPoint || buffer.lastPoint < mostPoint)
          continue;
        bool read = llvm::any_of(buffer.owner.getUsers(), [&](Operation *u) {
          return memory.getPoint(u) <= mostPoint;
        });
        if (!read)
          early += buffer.bytes;
      }
      if (c.v == 1)
        EXPECT_EQ(early, 0u) << c.pipeline << ", stage " << k;
      // The stages without the embedding or the head: their layers alone.
      if (k != 0 && static_cast<int64_t>(k) != p - 1)
        EXPECT_EQ(most, units * unitBytes + early)
            << c.pipeline << ", stage " << k;
    }
  }
}

} // namespace
