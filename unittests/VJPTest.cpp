//===- VJPTest.cpp - every op's VJP against central finite differences ----===//
//
// For an op y = f(x) and a random cotangent c, the VJP must equal the
// gradient of L(x) = Σ c·f(x). The test builds @vjp from the op's own
// DifferentiableOpInterface, evaluates it on the reference evaluator, and
// compares with central differences of L:
//   (L(x + h e) - L(x - h e)) / 2h,  h = 1e-3,
// element by element, within |fd - vjp| <= 2e-3 + 1e-2 |fd| (f32 outputs
// make L noisy at about 1e-6; the bound leaves a wide margin for that and
// none for a wrong formula, whose errors are O(1)).
//
//===----------------------------------------------------------------------===//

#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Evaluator/Evaluator.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <random>

using namespace mlir;
using namespace mlir::train;

namespace {

constexpr double kStep = 1e-3;
constexpr double kAbsTol = 2e-3;
constexpr double kRelTol = 1e-2;

bool isFloat(Type type) {
  return isa<FloatType>(cast<RankedTensorType>(type).getElementType());
}

class VJPTest : public ::testing::Test {
protected:
  VJPTest() {
    context.loadDialect<TrainDialect, func::FuncDialect, arith::ArithDialect>();
  }

  RefTensor randomFloats(Type type) {
    auto tensor = cast<RankedTensorType>(type);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> values(tensor.getNumElements());
    for (float &v : values)
      v = uniform(rng);
    return RefTensor::ofFloats(
        std::vector<int64_t>(tensor.getShape().begin(),
                             tensor.getShape().end()),
        values);
  }

  /// L = Σ_k Σ_i c_k[i] · y_k[i] over the float results of @f.
  double weightedSum(func::FuncOp f, const std::vector<RefTensor> &inputs,
                     const std::vector<RefTensor> &cotangents) {
    FailureOr<SmallVector<RefTensor>> outputs = evaluate(f, inputs);
    if (failed(outputs)) {
      ADD_FAILURE() << "the evaluator failed";
      return 0.0;
    }
    double sum = 0.0;
    size_t k = 0;
    for (const RefTensor &output : *outputs) {
      if (output.isInteger)
        continue;
      const RefTensor &c = cotangents[k++];
      for (size_t i = 0; i < output.floats.size(); ++i)
        sum += static_cast<double>(c.floats[i]) * output.floats[i];
    }
    return sum;
  }

  /// `source` holds @f whose body is one op returning all its results;
  /// `inputs` gives every argument (random floats where left empty).
  void check(const char *source, std::vector<RefTensor> inputs = {}) {
    OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(source, &context);
    ASSERT_TRUE(module);
    auto f = *module->getOps<func::FuncOp>().begin();
    Operation *op = &f.front().front();
    auto differentiable = dyn_cast<DifferentiableOpInterface>(op);
    ASSERT_TRUE(differentiable) << op->getName().getStringRef().str();

    // Inputs and cotangents.
    inputs.resize(f.getNumArguments());
    for (unsigned i = 0; i < f.getNumArguments(); ++i)
      if (inputs[i].shape.empty() && inputs[i].floats.empty() &&
          inputs[i].ints.empty())
        inputs[i] = randomFloats(f.getArgument(i).getType());
    std::vector<RefTensor> cotangents;
    SmallVector<Type> cotangentTypes;
    for (Value result : op->getResults())
      if (isFloat(result.getType())) {
        cotangents.push_back(randomFloats(result.getType()));
        cotangentTypes.push_back(result.getType());
      }

    // @vjp(args..., cotangents...) -> grads of the float arguments.
    OpBuilder builder(&context);
    builder.setInsertionPointToEnd(module->getBody());
    SmallVector<Type> argTypes(f.getArgumentTypes());
    argTypes.append(cotangentTypes);
    auto vjp = func::FuncOp::create(builder, f.getLoc(), "vjp",
                                    builder.getFunctionType(argTypes, {}));
    Block *body = vjp.addEntryBlock();
    builder.setInsertionPointToEnd(body);
    IRMapping mapping;
    for (unsigned i = 0; i < f.getNumArguments(); ++i)
      mapping.map(f.getArgument(i), vjp.getArgument(i));
    auto clone = cast<DifferentiableOpInterface>(builder.clone(*op, mapping));
    SmallVector<Value> resultGrads;
    unsigned next = f.getNumArguments();
    for (Value result : op->getResults())
      resultGrads.push_back(isFloat(result.getType())
                                ? Value(vjp.getArgument(next++))
                                : Value());
    SmallVector<Value> operandGrads;
    ASSERT_TRUE(succeeded(clone.buildVJP(builder, resultGrads, operandGrads)));
    ASSERT_EQ(operandGrads.size(), op->getNumOperands());
    SmallVector<Value> returned;
    SmallVector<unsigned> gradArg;
    for (auto [index, operand] : llvm::enumerate(op->getOperands())) {
      if (!isFloat(operand.getType()))
        continue;
      ASSERT_TRUE(operandGrads[index]) << "no gradient for operand " << index;
      ASSERT_EQ(operandGrads[index].getType(), operand.getType());
      returned.push_back(operandGrads[index]);
      gradArg.push_back(cast<BlockArgument>(operand).getArgNumber());
    }
    func::ReturnOp::create(builder, f.getLoc(), returned);
    vjp.setFunctionType(builder.getFunctionType(
        argTypes, ValueRange(returned).getTypes()));
    ASSERT_TRUE(succeeded(verify(*module)));

    std::vector<RefTensor> vjpArgs = inputs;
    vjpArgs.insert(vjpArgs.end(), cotangents.begin(), cotangents.end());
    FailureOr<SmallVector<RefTensor>> grads = evaluate(vjp, vjpArgs);
    ASSERT_TRUE(succeeded(grads));

    for (auto [k, argIndex] : llvm::enumerate(gradArg)) {
      const RefTensor &grad = (*grads)[k];
      for (size_t e = 0; e < inputs[argIndex].floats.size(); ++e) {
        std::vector<RefTensor> plus = inputs, minus = inputs;
        plus[argIndex].floats[e] += kStep;
        minus[argIndex].floats[e] -= kStep;
        double fd = (weightedSum(f, plus, cotangents) -
                     weightedSum(f, minus, cotangents)) /
                    (2 * kStep);
        EXPECT_NEAR(grad.floats[e], fd, kAbsTol + kRelTol * std::abs(fd))
            << op->getName().getStringRef().str() << " operand " << argIndex
            << " element " << e;
      }
    }
  }

  MLIRContext context;
  std::mt19937 rng{1234};
};

TEST_F(VJPTest, Embedding) {
  check(R"mlir(
    func.func @f(%t: tensor<5x3xf32>, %ids: tensor<2x2xi32>) -> tensor<2x2x3xf32> {
      %0 = train.embedding %t, %ids : tensor<5x3xf32>, tensor<2x2xi32> -> tensor<2x2x3xf32>
      return %0 : tensor<2x2x3xf32>
    })mlir",
        {{}, RefTensor::ofInts({2, 2}, {4, 1, 4, 0})});
}

TEST_F(VJPTest, MatmulPlain) {
  check(R"mlir(
    func.func @f(%a: tensor<3x4xf32>, %b: tensor<4x2xf32>) -> tensor<3x2xf32> {
      %0 = train.matmul %a, %b : tensor<3x4xf32>, tensor<4x2xf32> -> tensor<3x2xf32>
      return %0 : tensor<3x2xf32>
    })mlir");
}

TEST_F(VJPTest, MatmulTransposedLhs) {
  check(R"mlir(
    func.func @f(%a: tensor<4x3xf32>, %b: tensor<4x2xf32>) -> tensor<3x2xf32> {
      %0 = train.matmul %a, %b {transpose_lhs} : tensor<4x3xf32>, tensor<4x2xf32> -> tensor<3x2xf32>
      return %0 : tensor<3x2xf32>
    })mlir");
}

TEST_F(VJPTest, MatmulTransposedBoth) {
  check(R"mlir(
    func.func @f(%a: tensor<2x4x3xf32>, %b: tensor<2x2x4xf32>) -> tensor<2x3x2xf32> {
      %0 = train.matmul %a, %b {transpose_lhs, transpose_rhs} : tensor<2x4x3xf32>, tensor<2x2x4xf32> -> tensor<2x3x2xf32>
      return %0 : tensor<2x3x2xf32>
    })mlir");
}

TEST_F(VJPTest, MatmulSharedWeight) {
  // A rank-2 weight under a batched input: the weight gradient is one GEMM
  // over all rows.
  check(R"mlir(
    func.func @f(%x: tensor<2x3x4xf32>, %w: tensor<4x5xf32>) -> tensor<2x3x5xf32> {
      %0 = train.matmul %x, %w : tensor<2x3x4xf32>, tensor<4x5xf32> -> tensor<2x3x5xf32>
      return %0 : tensor<2x3x5xf32>
    })mlir");
}

TEST_F(VJPTest, MatmulSharedTransposedWeight) {
  // The tied output head: logits = x · wteᵀ.
  check(R"mlir(
    func.func @f(%x: tensor<2x3x4xf32>, %w: tensor<6x4xf32>) -> tensor<2x3x6xf32> {
      %0 = train.matmul %x, %w {transpose_rhs} : tensor<2x3x4xf32>, tensor<6x4xf32> -> tensor<2x3x6xf32>
      return %0 : tensor<2x3x6xf32>
    })mlir");
}

TEST_F(VJPTest, MatmulBroadcastBatch) {
  // Grouped-query attention: one K per group of query heads.
  check(R"mlir(
    func.func @f(%q: tensor<1x2x3x4x2xf32>, %k: tensor<1x2x1x4x2xf32>) -> tensor<1x2x3x4x4xf32> {
      %0 = train.matmul %q, %k {transpose_rhs} : tensor<1x2x3x4x2xf32>, tensor<1x2x1x4x2xf32> -> tensor<1x2x3x4x4xf32>
      return %0 : tensor<1x2x3x4x4xf32>
    })mlir");
}

TEST_F(VJPTest, AddMulScale) {
  check(R"mlir(
    func.func @f(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> (tensor<2x3xf32>) {
      %0 = train.add %a, %b : tensor<2x3xf32>
      return %0 : tensor<2x3xf32>
    })mlir");
  check(R"mlir(
    func.func @f(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> (tensor<2x3xf32>) {
      %0 = train.mul %a, %b : tensor<2x3xf32>
      return %0 : tensor<2x3xf32>
    })mlir");
  check(R"mlir(
    func.func @f(%a: tensor<2x3xf32>) -> (tensor<2x3xf32>) {
      %0 = train.scale %a {factor = -1.5 : f64} : tensor<2x3xf32>
      return %0 : tensor<2x3xf32>
    })mlir");
}

TEST_F(VJPTest, BiasAdd) {
  check(R"mlir(
    func.func @f(%x: tensor<2x3x4xf32>, %b: tensor<3x4xf32>) -> tensor<2x3x4xf32> {
      %0 = train.bias_add %x, %b : tensor<2x3x4xf32>, tensor<3x4xf32>
      return %0 : tensor<2x3x4xf32>
    })mlir");
}

TEST_F(VJPTest, LayerNorm) {
  check(R"mlir(
    func.func @f(%x: tensor<3x5xf32>, %g: tensor<5xf32>, %b: tensor<5xf32>) -> tensor<3x5xf32> {
      %0 = train.layer_norm %x, %g, %b {epsilon = 1.0e-05 : f64} : tensor<3x5xf32>, tensor<5xf32>, tensor<5xf32>
      return %0 : tensor<3x5xf32>
    })mlir");
}

TEST_F(VJPTest, RMSNorm) {
  check(R"mlir(
    func.func @f(%x: tensor<3x5xf32>, %g: tensor<5xf32>) -> tensor<3x5xf32> {
      %0 = train.rms_norm %x, %g {epsilon = 1.0e-05 : f64} : tensor<3x5xf32>, tensor<5xf32>
      return %0 : tensor<3x5xf32>
    })mlir");
  // Gemma's scale, 1 + gamma.
  check(R"mlir(
    func.func @f(%x: tensor<3x5xf32>, %g: tensor<5xf32>) -> tensor<3x5xf32> {
      %0 = train.rms_norm %x, %g {epsilon = 1.0e-05 : f64, gain_offset = 1.0 : f64} : tensor<3x5xf32>, tensor<5xf32>
      return %0 : tensor<3x5xf32>
    })mlir");
}

TEST_F(VJPTest, GeluAndSilu) {
  check(R"mlir(
    func.func @f(%x: tensor<2x6xf32>) -> tensor<2x6xf32> {
      %0 = train.gelu %x : tensor<2x6xf32>
      return %0 : tensor<2x6xf32>
    })mlir");
  check(R"mlir(
    func.func @f(%x: tensor<2x6xf32>) -> tensor<2x6xf32> {
      %0 = train.gelu %x {exact} : tensor<2x6xf32>
      return %0 : tensor<2x6xf32>
    })mlir");
  check(R"mlir(
    func.func @f(%x: tensor<2x6xf32>) -> tensor<2x6xf32> {
      %0 = train.silu %x : tensor<2x6xf32>
      return %0 : tensor<2x6xf32>
    })mlir");
}

// Every activation of Activations.def (its VJP, its gradient op, both
// kernels of the evaluator) against central differences: an entry there
// is tested here without a line of its own.
TEST_F(VJPTest, EveryActivation) {
  for (const char *kernel : {
#define TMRT_ACTIVATION(kernel, Name) #kernel,
#include "trainmem-runtime/Activations.def"
       }) {
    SCOPED_TRACE(kernel);
    std::string source = std::string(R"mlir(
    func.func @f(%x: tensor<2x6xf32>) -> tensor<2x6xf32> {
      %0 = train.)mlir") +
                         kernel + R"mlir( %x : tensor<2x6xf32>
      return %0 : tensor<2x6xf32>
    })mlir";
    check(source.c_str());
  }
}

TEST_F(VJPTest, Softmax) {
  check(R"mlir(
    func.func @f(%x: tensor<2x5xf32>) -> tensor<2x5xf32> {
      %0 = train.softmax %x : tensor<2x5xf32>
      return %0 : tensor<2x5xf32>
    })mlir");
}

TEST_F(VJPTest, CausalSoftmax) {
  check(R"mlir(
    func.func @f(%x: tensor<2x4x4xf32>) -> tensor<2x4x4xf32> {
      %0 = train.softmax %x {causal} : tensor<2x4x4xf32>
      return %0 : tensor<2x4x4xf32>
    })mlir");
}

TEST_F(VJPTest, Dropout) {
  // The mask is a function of (seed, offset, index) only, so the op is
  // linear in its input and the central difference is exact.
  check(R"mlir(
    func.func @f(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xi1>) {
      %0, %1 = train.dropout %x {rate = 0.25 : f64, seed = 9 : i64, offset = 4 : i64} : tensor<4x8xf32> -> tensor<4x8xi1>
      return %0, %1 : tensor<4x8xf32>, tensor<4x8xi1>
    })mlir");
}

TEST_F(VJPTest, Rope) {
  check(R"mlir(
    func.func @f(%x: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
      %0 = train.rope %x {theta = 100.0 : f64} : tensor<2x3x4xf32>
      return %0 : tensor<2x3x4xf32>
    })mlir");
  check(R"mlir(
    func.func @f(%x: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
      %0 = train.rope %x {theta = 100.0 : f64, inverse} : tensor<2x3x4xf32>
      return %0 : tensor<2x3x4xf32>
    })mlir");
  check(R"mlir(
    func.func @f(%x: tensor<2x3x6xf32>) -> tensor<2x3x6xf32> {
      %0 = train.rope %x {theta = 100.0 : f64, halves} : tensor<2x3x6xf32>
      return %0 : tensor<2x3x6xf32>
    })mlir");
}

TEST_F(VJPTest, ReshapeAndTranspose) {
  check(R"mlir(
    func.func @f(%x: tensor<2x6xf32>) -> tensor<3x4xf32> {
      %0 = train.reshape %x : tensor<2x6xf32> -> tensor<3x4xf32>
      return %0 : tensor<3x4xf32>
    })mlir");
  check(R"mlir(
    func.func @f(%x: tensor<2x3x4xf32>) -> tensor<4x2x3xf32> {
      %0 = train.transpose %x {permutation = array<i64: 2, 0, 1>} : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
      return %0 : tensor<4x2x3xf32>
    })mlir");
}

// A slice and its placement back into zeros (train.slice_grad, which
// trainmem-import also uses in a forward: a torch.cat is the sum of its
// placed parts).
TEST_F(VJPTest, SliceAndPlace) {
  check(R"mlir(
    func.func @f(%x: tensor<2x3x6xf32>) -> tensor<2x3x2xf32> {
      %0 = train.slice %x {dim = 2 : i64, offset = 3 : i64, size = 2 : i64} : tensor<2x3x6xf32> -> tensor<2x3x2xf32>
      return %0 : tensor<2x3x2xf32>
    })mlir");
  check(R"mlir(
    func.func @f(%x: tensor<2x3x2xf32>) -> tensor<2x3x6xf32> {
      %0 = train.slice_grad %x {dim = 2 : i64, offset = 3 : i64, whole = 6 : i64} : tensor<2x3x2xf32> -> tensor<2x3x6xf32>
      return %0 : tensor<2x3x6xf32>
    })mlir");
}

TEST_F(VJPTest, CrossEntropy) {
  // One position ignored; its logits get no gradient.
  check(R"mlir(
    func.func @f(%l: tensor<2x3x5xf32>, %t: tensor<2x3xi32>) -> (tensor<f32>, tensor<i64>) {
      %0, %1 = train.cross_entropy %l, %t {ignore_index = -100 : i64} : tensor<2x3x5xf32>, tensor<2x3xi32> -> tensor<f32>, tensor<i64>
      return %0, %1 : tensor<f32>, tensor<i64>
    })mlir",
        {{}, RefTensor::ofInts({2, 3}, {0, 4, -100, 2, 2, 1})});
}

TEST_F(VJPTest, LabelSmoothedCrossEntropy) {
  // Against (1 - 0.1) onehot(t) + 0.1 / vocab; the ignored position still
  // gets no gradient.
  check(R"mlir(
    func.func @f(%l: tensor<2x3x5xf32>, %t: tensor<2x3xi32>) -> (tensor<f32>, tensor<i64>) {
      %0, %1 = train.cross_entropy %l, %t {ignore_index = -100 : i64, label_smoothing = 0.1 : f64} : tensor<2x3x5xf32>, tensor<2x3xi32> -> tensor<f32>, tensor<i64>
      return %0, %1 : tensor<f32>, tensor<i64>
    })mlir",
        {{}, RefTensor::ofInts({2, 3}, {0, 4, -100, 2, 2, 1})});
}

TEST_F(VJPTest, MeanLoss) {
  check(R"mlir(
    func.func @f(%s: tensor<f32>, %c: tensor<i64>) -> tensor<f32> {
      %0 = train.mean_loss %s, %c : tensor<f32>, tensor<i64>
      return %0 : tensor<f32>
    })mlir",
        {{}, RefTensor::ofInts({}, {7})});
}

TEST_F(VJPTest, CastIsStraightThrough) {
  // Rounding casts pass gradients through unchanged (their derivative is 1
  // almost everywhere); between equal types the cast is the identity.
  check(R"mlir(
    func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
      %0 = train.cast %x : tensor<3xf32> -> tensor<3xf32>
      return %0 : tensor<3xf32>
    })mlir");
}

} // namespace
