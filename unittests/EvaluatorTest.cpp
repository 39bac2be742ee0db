//===- EvaluatorTest.cpp - reference evaluator vs hand-derived values -----===//
//
// Every op on inputs small enough that the expected values are worked out by
// hand (in the comments). Float comparisons use an absolute tolerance of
// 1e-6 (kTol) unless stated: the evaluator computes in f32 with f64 sums.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Evaluator/Evaluator.h"
#include "trainmem/Support/Philox.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::train;

namespace {

constexpr double kTol = 1e-6;

class EvaluatorTest : public ::testing::Test {
protected:
  EvaluatorTest() {
    context.loadDialect<TrainDialect, func::FuncDialect, arith::ArithDialect>();
  }

  /// Parses `source` (one function) and evaluates it; empty on failure, with
  /// the diagnostic kept in `lastError`.
  std::vector<RefTensor> run(llvm::StringRef source,
                             std::vector<RefTensor> args) {
    ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
      lastError = diag.str();
      return success();
    });
    module = parseSourceString<ModuleOp>(source, &context);
    if (!module) {
      ADD_FAILURE() << "parse failed: " << lastError;
      return {};
    }
    auto func = *module->getOps<func::FuncOp>().begin();
    FailureOr<SmallVector<RefTensor>> results = evaluate(func, args);
    if (failed(results))
      return {};
    return std::vector<RefTensor>(results->begin(), results->end());
  }

  static void expectFloats(const RefTensor &t, std::vector<float> expected,
                           double tol = kTol) {
    ASSERT_EQ(t.floats.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i)
      EXPECT_NEAR(t.floats[i], expected[i], tol) << "element " << i;
  }

  MLIRContext context;
  OwningOpRef<ModuleOp> module;
  std::string lastError;
};

TEST_F(EvaluatorTest, EmbeddingGathersRows) {
  auto out = run(R"mlir(
    func.func @f(%t: tensor<3x2xf32>, %ids: tensor<2xi32>) -> tensor<2x2xf32> {
      %e = train.embedding %t, %ids : tensor<3x2xf32>, tensor<2xi32> -> tensor<2x2xf32>
      return %e : tensor<2x2xf32>
    })mlir",
                 {RefTensor::ofFloats({3, 2}, {1, 2, 3, 4, 5, 6}),
                  RefTensor::ofInts({2}, {2, 0})});
  ASSERT_EQ(out.size(), 1u);
  expectFloats(out[0], {5, 6, 1, 2});
}

TEST_F(EvaluatorTest, EmbeddingRejectsIdOutsideTable) {
  auto out = run(R"mlir(
    func.func @f(%t: tensor<3x2xf32>, %ids: tensor<1xi32>) -> tensor<1x2xf32> {
      %e = train.embedding %t, %ids : tensor<3x2xf32>, tensor<1xi32> -> tensor<1x2xf32>
      return %e : tensor<1x2xf32>
    })mlir",
                 {RefTensor::ofFloats({3, 2}, {1, 2, 3, 4, 5, 6}),
                  RefTensor::ofInts({1}, {3})});
  EXPECT_TRUE(out.empty());
  EXPECT_NE(lastError.find("outside the table of 3 rows"), std::string::npos)
      << lastError;
}

TEST_F(EvaluatorTest, IotaCounts) {
  auto out = run(R"mlir(
    func.func @f() -> tensor<4xi32> {
      %p = train.iota : tensor<4xi32>
      return %p : tensor<4xi32>
    })mlir",
                 {});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].ints, (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST_F(EvaluatorTest, MatmulPlainAndTransposed) {
  // A = [[1,2],[3,4]], B = [[5,6],[7,8]]:
  // A·B = [[19,22],[43,50]], Aᵀ·B = [[26,30],[38,44]], A·Bᵀ = [[17,23],[39,53]].
  auto out = run(R"mlir(
    func.func @f(%a: tensor<2x2xf32>, %b: tensor<2x2xf32>) -> (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) {
      %0 = train.matmul %a, %b : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
      %1 = train.matmul %a, %b {transpose_lhs} : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
      %2 = train.matmul %a, %b {transpose_rhs} : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
      return %0, %1, %2 : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>
    })mlir",
                 {RefTensor::ofFloats({2, 2}, {1, 2, 3, 4}),
                  RefTensor::ofFloats({2, 2}, {5, 6, 7, 8})});
  ASSERT_EQ(out.size(), 3u);
  expectFloats(out[0], {19, 22, 43, 50});
  expectFloats(out[1], {26, 30, 38, 44});
  expectFloats(out[2], {17, 23, 39, 53});
}

TEST_F(EvaluatorTest, MatmulBroadcastsBatch) {
  // lhs batches [I, 2I] times one shared rhs [[1,2],[3,4]]; a [2,1,...] x
  // [1,2,...] broadcast gives all four batch pairs.
  auto out = run(R"mlir(
    func.func @f(%a: tensor<2x2x2xf32>, %b: tensor<2x2xf32>, %c: tensor<2x1x1x1xf32>, %d: tensor<1x2x1x1xf32>) -> (tensor<2x2x2xf32>, tensor<2x2x1x1xf32>) {
      %0 = train.matmul %a, %b : tensor<2x2x2xf32>, tensor<2x2xf32> -> tensor<2x2x2xf32>
      %1 = train.matmul %c, %d : tensor<2x1x1x1xf32>, tensor<1x2x1x1xf32> -> tensor<2x2x1x1xf32>
      return %0, %1 : tensor<2x2x2xf32>, tensor<2x2x1x1xf32>
    })mlir",
                 {RefTensor::ofFloats({2, 2, 2}, {1, 0, 0, 1, 2, 0, 0, 2}),
                  RefTensor::ofFloats({2, 2}, {1, 2, 3, 4}),
                  RefTensor::ofFloats({2, 1, 1, 1}, {2, 3}),
                  RefTensor::ofFloats({1, 2, 1, 1}, {5, 7})});
  ASSERT_EQ(out.size(), 2u);
  expectFloats(out[0], {1, 2, 3, 4, 2, 4, 6, 8});
  expectFloats(out[1], {10, 14, 15, 21});
}

TEST_F(EvaluatorTest, ElementwiseOps) {
  auto out = run(R"mlir(
    func.func @f(%a: tensor<3xf32>, %b: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) {
      %0 = train.add %a, %b : tensor<3xf32>
      %1 = train.mul %a, %b : tensor<3xf32>
      %2 = train.scale %a {factor = -0.5 : f64} : tensor<3xf32>
      return %0, %1, %2 : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
    })mlir",
                 {RefTensor::ofFloats({3}, {1, 2, 3}),
                  RefTensor::ofFloats({3}, {4, 5, 6})});
  ASSERT_EQ(out.size(), 3u);
  expectFloats(out[0], {5, 7, 9});
  expectFloats(out[1], {4, 10, 18});
  expectFloats(out[2], {-0.5, -1, -1.5});
}

TEST_F(EvaluatorTest, BiasAddBroadcastsTrailingDims) {
  auto out = run(R"mlir(
    func.func @f(%x: tensor<2x2x2xf32>, %b: tensor<2x2xf32>) -> tensor<2x2x2xf32> {
      %0 = train.bias_add %x, %b : tensor<2x2x2xf32>, tensor<2x2xf32>
      return %0 : tensor<2x2x2xf32>
    })mlir",
                 {RefTensor::ofFloats({2, 2, 2}, {0, 0, 0, 0, 1, 1, 1, 1}),
                  RefTensor::ofFloats({2, 2}, {1, 2, 3, 4})});
  ASSERT_EQ(out.size(), 1u);
  expectFloats(out[0], {1, 2, 3, 4, 2, 3, 4, 5});
}

TEST_F(EvaluatorTest, LayerNorm) {
  // x = [1,2,3]: mean 2, variance 2/3, so x̂ = [-√1.5, 0, √1.5];
  // gamma = [1,2,1], beta = [0,0,1] (epsilon 0 in effect: 1e-12).
  double r = std::sqrt(1.5);
  auto out = run(R"mlir(
    func.func @f(%x: tensor<1x3xf32>, %g: tensor<3xf32>, %b: tensor<3xf32>) -> tensor<1x3xf32> {
      %0 = train.layer_norm %x, %g, %b {epsilon = 1.0e-12 : f64} : tensor<1x3xf32>, tensor<3xf32>, tensor<3xf32>
      return %0 : tensor<1x3xf32>
    })mlir",
                 {RefTensor::ofFloats({1, 3}, {1, 2, 3}),
                  RefTensor::ofFloats({3}, {1, 2, 1}),
                  RefTensor::ofFloats({3}, {0, 0, 1})});
  ASSERT_EQ(out.size(), 1u);
  expectFloats(out[0], {static_cast<float>(-r), 0, static_cast<float>(r + 1)});
}

TEST_F(EvaluatorTest, RMSNorm) {
  // x = [3,4]: mean square 12.5, so x / √12.5 = [0.848528, 1.131371].
  auto out = run(R"mlir(
    func.func @f(%x: tensor<1x2xf32>, %g: tensor<2xf32>) -> tensor<1x2xf32> {
      %0 = train.rms_norm %x, %g {epsilon = 1.0e-12 : f64} : tensor<1x2xf32>, tensor<2xf32>
      return %0 : tensor<1x2xf32>
    })mlir",
                 {RefTensor::ofFloats({1, 2}, {3, 4}),
                  RefTensor::ofFloats({2}, {1, 2})});
  ASSERT_EQ(out.size(), 1u);
  expectFloats(out[0], {3 / std::sqrt(12.5f), 2 * 4 / std::sqrt(12.5f)});
}

TEST_F(EvaluatorTest, Activations) {
  // gelu(1) = 0.5(1 + tanh(√(2/π)·1.044715)) = 0.841192, gelu(-1) = -0.158808;
  // silu(1) = σ(1) = 0.731059, silu(-2) = -2σ(-2) = -0.238406.
  auto out = run(R"mlir(
    func.func @f(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
      %0 = train.gelu %x : tensor<3xf32>
      %1 = train.silu %x : tensor<3xf32>
      return %0, %1 : tensor<3xf32>, tensor<3xf32>
    })mlir",
                 {RefTensor::ofFloats({3}, {0, 1, -1})});
  ASSERT_EQ(out.size(), 2u);
  expectFloats(out[0], {0, 0.841192f, -0.158808f});
  expectFloats(out[1], {0, 0.731059f, -0.268941f});
}

TEST_F(EvaluatorTest, SoftmaxPlainAndCausal) {
  // Row [0, ln 3] -> [1/4, 3/4]. Causal on a 2x2: query 0 sees key 0 only.
  float ln3 = std::log(3.0f);
  auto out = run(R"mlir(
    func.func @f(%x: tensor<2x2xf32>) -> (tensor<2x2xf32>, tensor<2x2xf32>) {
      %0 = train.softmax %x : tensor<2x2xf32>
      %1 = train.softmax %x {causal} : tensor<2x2xf32>
      return %0, %1 : tensor<2x2xf32>, tensor<2x2xf32>
    })mlir",
                 {RefTensor::ofFloats({2, 2}, {0, ln3, 0, ln3})});
  ASSERT_EQ(out.size(), 2u);
  expectFloats(out[0], {0.25, 0.75, 0.25, 0.75});
  expectFloats(out[1], {1, 0, 0.25, 0.75});
}

TEST_F(EvaluatorTest, DropoutUsesPhiloxMask) {
  // Rate 0.5: kept elements double, and the mask is the Philox decision for
  // (seed 5, offset 2) at each element index.
  std::vector<float> ones(64, 1.0f);
  auto out = run(R"mlir(
    func.func @f(%x: tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8x8xi1>) {
      %y, %m = train.dropout %x {rate = 0.5 : f64, seed = 5 : i64, offset = 2 : i64} : tensor<8x8xf32> -> tensor<8x8xi1>
      return %y, %m : tensor<8x8xf32>, tensor<8x8xi1>
    })mlir",
                 {RefTensor::ofFloats({8, 8}, ones)});
  ASSERT_EQ(out.size(), 2u);
  uint32_t threshold = trainmem::dropoutKeepThreshold(0.5);
  int kept = 0;
  for (int i = 0; i < 64; ++i) {
    bool keep = trainmem::dropoutKeep(5, 2, i, threshold);
    kept += keep;
    EXPECT_EQ(out[1].ints[i], keep ? 1 : 0);
    EXPECT_EQ(out[0].floats[i], keep ? 2.0f : 0.0f);
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, 64);
}

TEST_F(EvaluatorTest, RopeRotatesByPosition) {
  // d = 4, theta = 100: pair 0 turns by p rad, pair 1 by p/10 rad. At
  // position 0 nothing moves; at position 1, (1,0) -> (cos 1, sin 1) and
  // (0,1) -> (-sin 0.1, cos 0.1). inverse undoes it.
  auto out = run(R"mlir(
    func.func @f(%x: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
      %0 = train.rope %x {theta = 100.0 : f64} : tensor<2x4xf32>
      %1 = train.rope %0 {theta = 100.0 : f64, inverse} : tensor<2x4xf32>
      return %0, %1 : tensor<2x4xf32>, tensor<2x4xf32>
    })mlir",
                 {RefTensor::ofFloats({2, 4}, {1, 0, 0, 1, 1, 0, 0, 1})});
  ASSERT_EQ(out.size(), 2u);
  expectFloats(out[0], {1, 0, 0, 1, std::cos(1.0f), std::sin(1.0f),
                        -std::sin(0.1f), std::cos(0.1f)});
  expectFloats(out[1], {1, 0, 0, 1, 1, 0, 0, 1});
}

TEST_F(EvaluatorTest, ReshapeAndTranspose) {
  // [[1,2,3],[4,5,6]] transposed is [[1,4],[2,5],[3,6]].
  auto out = run(R"mlir(
    func.func @f(%x: tensor<6xf32>) -> tensor<3x2xf32> {
      %0 = train.reshape %x : tensor<6xf32> -> tensor<2x3xf32>
      %1 = train.transpose %0 {permutation = array<i64: 1, 0>} : tensor<2x3xf32> -> tensor<3x2xf32>
      return %1 : tensor<3x2xf32>
    })mlir",
                 {RefTensor::ofFloats({6}, {1, 2, 3, 4, 5, 6})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape, (std::vector<int64_t>{3, 2}));
  expectFloats(out[0], {1, 4, 2, 5, 3, 6});
}

TEST_F(EvaluatorTest, CrossEntropySkipsIgnoredAndCounts) {
  // Row 0: logits [0,0], target 1 -> ln 2. Row 1: [ln 3, 0], target 0 ->
  // ln 4 - ln 3. Row 2 is ignored. Sum = ln 2 + ln(4/3), count 2, mean half.
  float ln3 = std::log(3.0f);
  auto out = run(R"mlir(
    func.func @f(%l: tensor<3x2xf32>, %t: tensor<3xi32>) -> (tensor<f32>, tensor<i64>, tensor<f32>) {
      %s, %c = train.cross_entropy %l, %t {ignore_index = -100 : i64} : tensor<3x2xf32>, tensor<3xi32> -> tensor<f32>, tensor<i64>
      %m = train.mean_loss %s, %c : tensor<f32>, tensor<i64>
      return %s, %c, %m : tensor<f32>, tensor<i64>, tensor<f32>
    })mlir",
                 {RefTensor::ofFloats({3, 2}, {0, 0, ln3, 0, 5, -5}),
                  RefTensor::ofInts({3}, {1, 0, -100})});
  ASSERT_EQ(out.size(), 3u);
  double sum = std::log(2.0) + std::log(4.0 / 3.0);
  expectFloats(out[0], {static_cast<float>(sum)});
  EXPECT_EQ(out[1].scalarInt(), 2);
  expectFloats(out[2], {static_cast<float>(sum / 2)});
}

TEST_F(EvaluatorTest, MeanLossOfNoTokensIsZero) {
  auto out = run(R"mlir(
    func.func @f(%s: tensor<f32>, %c: tensor<i64>) -> tensor<f32> {
      %m = train.mean_loss %s, %c : tensor<f32>, tensor<i64>
      return %m : tensor<f32>
    })mlir",
                 {RefTensor::ofFloats({}, {0}), RefTensor::ofInts({}, {0})});
  ASSERT_EQ(out.size(), 1u);
  expectFloats(out[0], {0});
}

TEST_F(EvaluatorTest, EmbeddingGradScatterAdds) {
  // ids [1, 1, 0]: row 1 gets the first two gradient rows summed.
  auto out = run(R"mlir(
    func.func @f(%g: tensor<3x2xf32>, %ids: tensor<3xi32>) -> tensor<2x2xf32> {
      %0 = train.embedding_grad %g, %ids : tensor<3x2xf32>, tensor<3xi32> -> tensor<2x2xf32>
      return %0 : tensor<2x2xf32>
    })mlir",
                 {RefTensor::ofFloats({3, 2}, {1, 2, 3, 4, 5, 6}),
                  RefTensor::ofInts({3}, {1, 1, 0})});
  ASSERT_EQ(out.size(), 1u);
  expectFloats(out[0], {5, 6, 4, 6});
}

TEST_F(EvaluatorTest, SumToReducesBroadcastDims) {
  // [2,2,2] -> [2] sums over the leading dims; -> [2,1,2] over dim 1.
  auto out = run(R"mlir(
    func.func @f(%x: tensor<2x2x2xf32>) -> (tensor<2xf32>, tensor<2x1x2xf32>) {
      %0 = train.sum_to %x : tensor<2x2x2xf32> -> tensor<2xf32>
      %1 = train.sum_to %x : tensor<2x2x2xf32> -> tensor<2x1x2xf32>
      return %0, %1 : tensor<2xf32>, tensor<2x1x2xf32>
    })mlir",
                 {RefTensor::ofFloats({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})});
  ASSERT_EQ(out.size(), 2u);
  expectFloats(out[0], {16, 20});
  expectFloats(out[1], {4, 6, 12, 14});
}

TEST_F(EvaluatorTest, LayerNormGrad) {
  // x = [1,2,3] (x̂ = [-a, 0, a], a = √1.5), gamma 1, dy = [1,0,0]:
  // mean(dy) = 1/3, mean(dy·x̂) = -a/3, so
  // dx = (1/√(2/3))·(dy - 1/3 + x̂·a/3) = √1.5·[1/6, -1/3, 1/6];
  // dgamma = dy·x̂ = [-a,0,0]; dbeta = dy.
  double a = std::sqrt(1.5);
  auto out = run(R"mlir(
    func.func @f(%dy: tensor<1x3xf32>, %x: tensor<1x3xf32>, %g: tensor<3xf32>) -> (tensor<1x3xf32>, tensor<3xf32>, tensor<3xf32>) {
      %dx, %dg, %db = train.layer_norm_grad %dy, %x, %g {epsilon = 1.0e-12 : f64} : tensor<1x3xf32>, tensor<1x3xf32>, tensor<3xf32> -> tensor<1x3xf32>, tensor<3xf32>, tensor<3xf32>
      return %dx, %dg, %db : tensor<1x3xf32>, tensor<3xf32>, tensor<3xf32>
    })mlir",
                 {RefTensor::ofFloats({1, 3}, {1, 0, 0}),
                  RefTensor::ofFloats({1, 3}, {1, 2, 3}),
                  RefTensor::ofFloats({3}, {1, 1, 1})});
  ASSERT_EQ(out.size(), 3u);
  expectFloats(out[0], {static_cast<float>(a / 6), static_cast<float>(-a / 3),
                        static_cast<float>(a / 6)});
  expectFloats(out[1], {static_cast<float>(-a), 0, 0});
  expectFloats(out[2], {1, 0, 0});
}

TEST_F(EvaluatorTest, RMSNormGrad) {
  // x = [3,4], r = 1/√12.5, gamma 1, dy = [1,0]: Σ dy·x = 3, so
  // dx = r·dy - x·r³·3/2 = r·[1 - 9r²/2, -6r²] = r·[0.64, -0.48];
  // dgamma = dy·x·r = [3r, 0].
  double r = 1.0 / std::sqrt(12.5);
  auto out = run(R"mlir(
    func.func @f(%dy: tensor<1x2xf32>, %x: tensor<1x2xf32>, %g: tensor<2xf32>) -> (tensor<1x2xf32>, tensor<2xf32>) {
      %dx, %dg = train.rms_norm_grad %dy, %x, %g {epsilon = 1.0e-12 : f64} : tensor<1x2xf32>, tensor<1x2xf32>, tensor<2xf32> -> tensor<1x2xf32>, tensor<2xf32>
      return %dx, %dg : tensor<1x2xf32>, tensor<2xf32>
    })mlir",
                 {RefTensor::ofFloats({1, 2}, {1, 0}),
                  RefTensor::ofFloats({1, 2}, {3, 4}),
                  RefTensor::ofFloats({2}, {1, 1})});
  ASSERT_EQ(out.size(), 2u);
  expectFloats(out[0], {static_cast<float>(0.64 * r),
                        static_cast<float>(-0.48 * r)});
  expectFloats(out[1], {static_cast<float>(3 * r), 0});
}

TEST_F(EvaluatorTest, ActivationGrads) {
  // gelu'(0) = 0.5, silu'(0) = 0.5; gelu'(1) = 1.082964 (from the tanh form:
  // 0.5(1+t) + 0.5(1-t²)·√(2/π)·(1 + 3·0.044715), t = tanh(0.833518)).
  auto out = run(R"mlir(
    func.func @f(%dy: tensor<2xf32>, %x: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
      %0 = train.gelu_grad %dy, %x : tensor<2xf32>
      %1 = train.silu_grad %dy, %x : tensor<2xf32>
      return %0, %1 : tensor<2xf32>, tensor<2xf32>
    })mlir",
                 {RefTensor::ofFloats({2}, {2, 1}),
                  RefTensor::ofFloats({2}, {0, 1})});
  ASSERT_EQ(out.size(), 2u);
  double t = std::tanh(std::sqrt(2.0 / M_PI) * 1.044715);
  double gelu1 = 0.5 * (1 + t) + 0.5 * (1 - t * t) * std::sqrt(2.0 / M_PI) *
                                     (1 + 3 * 0.044715);
  double s = 1.0 / (1.0 + std::exp(-1.0));
  expectFloats(out[0], {1.0f, static_cast<float>(gelu1)});
  expectFloats(out[1], {1.0f, static_cast<float>(s * (1 + (1 - s)))});
}

TEST_F(EvaluatorTest, ReluAndSquaredRelu) {
  // relu: max(x, 0), NaN kept; relu2 = relu²; gradients dy·[x > 0] and
  // dy·2·relu(x), 0 at x = 0 (PyTorch's threshold_backward).
  float nan = std::numeric_limits<float>::quiet_NaN();
  auto out = run(R"mlir(
    func.func @f(%x: tensor<4xf32>, %dy: tensor<4xf32>)
        -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
      %0 = train.relu %x : tensor<4xf32>
      %1 = train.relu2 %x : tensor<4xf32>
      %2 = train.relu_grad %dy, %x : tensor<4xf32>
      %3 = train.relu2_grad %dy, %x : tensor<4xf32>
      return %0, %1, %2, %3 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
    })mlir",
                 {RefTensor::ofFloats({4}, {-1.5f, 0, 3, nan}),
                  RefTensor::ofFloats({4}, {2, 2, 0.5f, 1})});
  ASSERT_EQ(out.size(), 4u);
  auto firstThree = [](const RefTensor &t) {
    return RefTensor::ofFloats({3}, {t.floats[0], t.floats[1], t.floats[2]});
  };
  expectFloats(firstThree(out[0]), {0, 0, 3});
  EXPECT_TRUE(std::isnan(out[0].floats[3]));
  expectFloats(firstThree(out[1]), {0, 0, 9});
  EXPECT_TRUE(std::isnan(out[1].floats[3]));
  // NaN passes the gradient through: [x <= 0] is false.
  expectFloats(out[2], {0, 0, 0.5f, 1});
  expectFloats(firstThree(out[3]), {0, 0, 3});
  EXPECT_TRUE(std::isnan(out[3].floats[3]));
}

TEST_F(EvaluatorTest, SoftmaxAndDropoutGrads) {
  // y = [1/4, 3/4], dy = [1, 0]: Σ dy·y = 1/4, dx = y·(dy - 1/4) =
  // [3/16, -3/16]. dropout_grad at rate 0.5 doubles kept entries.
  auto out = run(R"mlir(
    func.func @f(%dy: tensor<2xf32>, %y: tensor<2xf32>, %m: tensor<2xi1>) -> (tensor<2xf32>, tensor<2xf32>) {
      %0 = train.softmax_grad %dy, %y : tensor<2xf32>
      %1 = train.dropout_grad %y, %m {rate = 0.5 : f64} : tensor<2xf32>, tensor<2xi1>
      return %0, %1 : tensor<2xf32>, tensor<2xf32>
    })mlir",
                 {RefTensor::ofFloats({2}, {1, 0}),
                  RefTensor::ofFloats({2}, {0.25, 0.75}),
                  RefTensor::ofInts({2}, {0, 1})});
  ASSERT_EQ(out.size(), 2u);
  expectFloats(out[0], {3.0f / 16, -3.0f / 16});
  expectFloats(out[1], {0, 1.5});
}

TEST_F(EvaluatorTest, CrossEntropyGrad) {
  // Logits [0,0], target 1, incoming 2: 2·([1/2,1/2] - [0,1]) = [1,-1];
  // ignored row gets 0.
  auto out = run(R"mlir(
    func.func @f(%g: tensor<f32>, %l: tensor<2x2xf32>, %t: tensor<2xi32>) -> tensor<2x2xf32> {
      %0 = train.cross_entropy_grad %g, %l, %t {ignore_index = -1 : i64} : tensor<f32>, tensor<2x2xf32>, tensor<2xi32> -> tensor<2x2xf32>
      return %0 : tensor<2x2xf32>
    })mlir",
                 {RefTensor::ofFloats({}, {2}),
                  RefTensor::ofFloats({2, 2}, {0, 0, 3, 4}),
                  RefTensor::ofInts({2}, {1, -1})});
  ASSERT_EQ(out.size(), 1u);
  expectFloats(out[0], {1, -1, 0, 0});
}

TEST_F(EvaluatorTest, AdamWFirstStep) {
  // Step 1: m = 0.1g, v = 0.001g²; bias-corrected m̂ = g, v̂ = g², so the
  // update is g/(|g| + eps) + wd·p = sign(g) + wd·p (eps 0 in effect).
  // p = [1, -2], g = [0.5, -4], lr 0.1, wd 0.1:
  // p' = [1 - 0.1(1 + 0.1), -2 - 0.1(-1 - 0.2)] = [0.89, -1.88].
  auto out = run(R"mlir(
    func.func @f(%p: tensor<2xf32>, %g: tensor<2xf32>, %m: tensor<2xf32>, %v: tensor<2xf32>, %lr: tensor<f32>, %t: tensor<i64>) -> (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) {
      %p2, %m2, %v2 = train.adamw %p, %g, %m, %v, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-12 : f64, weight_decay = 0.1 : f64} : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<f32>, tensor<i64>
      return %p2, %m2, %v2 : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>
    })mlir",
                 {RefTensor::ofFloats({2}, {1, -2}),
                  RefTensor::ofFloats({2}, {0.5, -4}), RefTensor::zeros({2}),
                  RefTensor::zeros({2}), RefTensor::ofFloats({}, {0.1f}),
                  RefTensor::ofInts({}, {1})});
  ASSERT_EQ(out.size(), 3u);
  expectFloats(out[0], {0.89f, -1.88f});
  expectFloats(out[1], {0.05f, -0.4f});
  expectFloats(out[2], {0.00025f, 0.016f});
}

TEST_F(EvaluatorTest, SGDWithAndWithoutMomentum) {
  // Plain: p' = p - lr·g = 1 - 0.5·2 = 0. Momentum 0.9, buffer 1:
  // b' = 0.9 + 2 = 2.9, p' = 1 - 0.5·2.9 = -0.45.
  auto out = run(R"mlir(
    func.func @f(%p: tensor<1xf32>, %g: tensor<1xf32>, %lr: tensor<f32>, %b: tensor<1xf32>) -> (tensor<1xf32>, tensor<1xf32>, tensor<1xf32>) {
      %0 = train.sgd %p, %g, %lr {momentum = 0.0 : f64, weight_decay = 0.0 : f64} : (tensor<1xf32>, tensor<1xf32>, tensor<f32>) -> tensor<1xf32>
      %1, %2 = train.sgd %p, %g, %lr, %b {momentum = 0.9 : f64, weight_decay = 0.0 : f64} : (tensor<1xf32>, tensor<1xf32>, tensor<f32>, tensor<1xf32>) -> (tensor<1xf32>, tensor<1xf32>)
      return %0, %1, %2 : tensor<1xf32>, tensor<1xf32>, tensor<1xf32>
    })mlir",
                 {RefTensor::ofFloats({1}, {1}), RefTensor::ofFloats({1}, {2}),
                  RefTensor::ofFloats({}, {0.5}),
                  RefTensor::ofFloats({1}, {1})});
  ASSERT_EQ(out.size(), 3u);
  expectFloats(out[0], {0});
  expectFloats(out[1], {-0.45f});
  expectFloats(out[2], {2.9f});
}

TEST_F(EvaluatorTest, ClipGradNormScalesGlobally) {
  // Gradients [3] and [4]: global norm 5; max_norm 1 scales by 1/5
  // (the 1e-6 guard moves the result by < 1e-6).
  auto out = run(R"mlir(
    func.func @f(%a: tensor<1xf32>, %b: tensor<1xf32>) -> (tensor<1xf32>, tensor<1xf32>, tensor<f32>) {
      %0, %1, %n = train.clip_grad_norm %a, %b {max_norm = 1.0 : f64} : (tensor<1xf32>, tensor<1xf32>) -> (tensor<1xf32>, tensor<1xf32>, tensor<f32>)
      return %0, %1, %n : tensor<1xf32>, tensor<1xf32>, tensor<f32>
    })mlir",
                 {RefTensor::ofFloats({1}, {3}), RefTensor::ofFloats({1}, {4})});
  ASSERT_EQ(out.size(), 3u);
  expectFloats(out[0], {0.6f});
  expectFloats(out[1], {0.8f});
  expectFloats(out[2], {5});
}

TEST_F(EvaluatorTest, LRScheduleWarmupThenCosine) {
  // peak 1, min 0.1, warm-up 10 of 110 steps: step 5 -> 0.5; step 10 -> 1;
  // step 60 (half-way through decay) -> 0.1 + 0.45·(1 + cos(π/2)) = 0.55;
  // step 200 -> 0.1.
  const char *source = R"mlir(
    func.func @f(%t: tensor<i64>) -> tensor<f32> {
      %lr = train.lr_schedule %t {peak_lr = 1.0 : f64, min_lr = 0.1 : f64, warmup_steps = 10 : i64, total_steps = 110 : i64} : tensor<i64> -> tensor<f32>
      return %lr : tensor<f32>
    })mlir";
  std::vector<std::pair<int64_t, float>> cases = {
      {5, 0.5f}, {10, 1.0f}, {60, 0.55f}, {200, 0.1f}};
  for (auto [step, expected] : cases) {
    auto out = run(source, {RefTensor::ofInts({}, {step})});
    ASSERT_EQ(out.size(), 1u);
    expectFloats(out[0], {expected});
  }
}

TEST_F(EvaluatorTest, BlockRunsItsBodyInPlace) {
  auto out = run(R"mlir(
    func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
      %0 = train.block mlp layer 3 -> tensor<2xf32> {
        %1 = train.scale %x {factor = 3.0 : f64} : tensor<2xf32>
        train.yield %1 : tensor<2xf32>
      }
      return %0 : tensor<2xf32>
    })mlir",
                 {RefTensor::ofFloats({2}, {1, 2})});
  ASSERT_EQ(out.size(), 1u);
  expectFloats(out[0], {3, 6});
}

TEST_F(EvaluatorTest, CastRoundsToNearestEven) {
  // bf16 keeps 8 significant bits: 1 + 2^-8 is a tie between 1 and 1 + 2^-7
  // and rounds to the even 1; 1 + 3·2^-8 rounds up to 1 + 2^-6. f16 keeps 11
  // bits, so 1 + 2^-8 survives. Casting back to f32 is exact.
  float tie = 1.0f + std::ldexp(1.0f, -8);
  float up = 1.0f + 3 * std::ldexp(1.0f, -8);
  auto out = run(R"mlir(
    func.func @f(%x: tensor<2xf32>) -> (tensor<2xbf16>, tensor<2xf16>, tensor<2xf32>) {
      %0 = train.cast %x : tensor<2xf32> -> tensor<2xbf16>
      %1 = train.cast %x : tensor<2xf32> -> tensor<2xf16>
      %2 = train.cast %0 : tensor<2xbf16> -> tensor<2xf32>
      return %0, %1, %2 : tensor<2xbf16>, tensor<2xf16>, tensor<2xf32>
    })mlir",
                 {RefTensor::ofFloats({2}, {tie, up})});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].floats, (std::vector<float>{1.0f, 1.0f + std::ldexp(1.0f, -6)}));
  EXPECT_EQ(out[1].floats, (std::vector<float>{tie, up}));
  EXPECT_EQ(out[2].floats, out[0].floats);
}

TEST_F(EvaluatorTest, DropoutMaskRegeneratesTheForwardMask) {
  auto out = run(R"mlir(
    func.func @f(%x: tensor<4x16xf32>) -> (tensor<4x16xi1>, tensor<4x16xi1>) {
      %y, %m = train.dropout %x {rate = 0.3 : f64, seed = 11 : i64, offset = 6 : i64} : tensor<4x16xf32> -> tensor<4x16xi1>
      %r = train.dropout_mask {rate = 0.3 : f64, seed = 11 : i64, offset = 6 : i64} : tensor<4x16xi1>
      return %m, %r : tensor<4x16xi1>, tensor<4x16xi1>
    })mlir",
                 {RefTensor::zeros({4, 16})});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].ints, out[1].ints);
}

TEST_F(EvaluatorTest, DropoutKeyAddsToTheSeed) {
  // key k with seed s draws the stream of seed s + k: step 3 with seed 4 is
  // seed 7 without a key; another key draws another mask.
  auto out = run(R"mlir(
    func.func @f(%x: tensor<64xf32>, %k: tensor<i64>, %k2: tensor<i64>) -> (tensor<64xi1>, tensor<64xi1>, tensor<64xi1>) {
      %y, %a = train.dropout %x key(%k : tensor<i64>) {rate = 0.5 : f64, seed = 4 : i64, offset = 2 : i64} : tensor<64xf32> -> tensor<64xi1>
      %b = train.dropout_mask {rate = 0.5 : f64, seed = 7 : i64, offset = 2 : i64} : tensor<64xi1>
      %c = train.dropout_mask key(%k2 : tensor<i64>) {rate = 0.5 : f64, seed = 4 : i64, offset = 2 : i64} : tensor<64xi1>
      return %a, %b, %c : tensor<64xi1>, tensor<64xi1>, tensor<64xi1>
    })mlir",
                 {RefTensor::zeros({64}), RefTensor::ofInts({}, {3}),
                  RefTensor::ofInts({}, {4})});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].ints, out[1].ints);
  EXPECT_NE(out[0].ints, out[2].ints);
}

TEST_F(EvaluatorTest, DenseConstants) {
  auto out = run(R"mlir(
    func.func @f() -> (tensor<2xf32>, tensor<f32>, tensor<2xi64>) {
      %0 = arith.constant dense<[1.5, -2.0]> : tensor<2xf32>
      %1 = arith.constant dense<3.0e-04> : tensor<f32>
      %2 = arith.constant dense<[7, -1]> : tensor<2xi64>
      return %0, %1, %2 : tensor<2xf32>, tensor<f32>, tensor<2xi64>
    })mlir",
                 {});
  ASSERT_EQ(out.size(), 3u);
  expectFloats(out[0], {1.5f, -2.0f});
  expectFloats(out[1], {3.0e-4f});
  EXPECT_EQ(out[2].ints, (std::vector<int64_t>{7, -1}));
}

TEST_F(EvaluatorTest, RejectsArgumentOfWrongShape) {
  auto out = run(R"mlir(
    func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
      return %x : tensor<2xf32>
    })mlir",
                 {RefTensor::ofFloats({3}, {1, 2, 3})});
  EXPECT_TRUE(out.empty());
  EXPECT_NE(lastError.find("argument #0 does not match"), std::string::npos)
      << lastError;
}

} // namespace
