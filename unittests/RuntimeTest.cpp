//===- RuntimeTest.cpp - lowered execution vs the reference evaluator -----===//
//
// Each case is a @train_step of one op (or a whole model step), run twice:
// on the reference evaluator, and lowered with convert-train-to-runtime,
// JIT-compiled and executed by the CPU runtime in its planned arena. Float
// results agree within a relative 1e-5 of the tensor's largest magnitude
// (max |cpu - ref| <= 1e-5 · max(|ref|, 1e-3)): the kernels use the same
// formulas with f32 storage and double accumulation, OpenBLAS GEMMs
// accumulate in f32. Integer results and masks agree exactly.
//
// Every case of f32 tensors runs again with them in bf16 and in f16 (the
// source rewritten): both sides read the same 16-bit inputs, compute in f32
// or double and round each result to 16 bits, so a result agrees within one
// 16-bit ulp of the tensor's largest magnitude (2^-7 for bf16, 2^-10 for
// f16: a sum formed in another order can round to the neighbouring value);
// the elementwise kernels and conversions agree bit for bit, also on
// values at the 16-bit limits, subnormals, NaN and infinities.
//
//===----------------------------------------------------------------------===//

#include "trainmem-runtime/Runtime.h"
#include "CpuStepRun.h"
#include "TestModels.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Evaluator/Evaluator.h"
#include "trainmem/Model/ModelBuilder.h"
#include "trainmem/Run/Step.h"
#include "trainmem/Support/Float16.h"

#include "llvm/ADT/APFloat.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace mlir;
using namespace mlir::train;

namespace {

constexpr double kRelTol = 1e-5;

class RuntimeTest : public StepTest {
protected:
  RefTensor randomInput(RankedTensorType type) {
    std::vector<int64_t> shape(type.getShape().begin(), type.getShape().end());
    int64_t n = type.getNumElements();
    if (isa<IntegerType>(type.getElementType())) {
      std::uniform_int_distribution<int64_t> bit(0, 1);
      std::vector<int64_t> values(n);
      for (int64_t &v : values)
        v = bit(rng);
      return RefTensor::ofInts(shape, values);
    }
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> values(n);
    for (float &v : values)
      v = roundTo16(uniform(rng), type.getElementType());
    return RefTensor::ofFloats(shape, values);
  }

  /// `value` as the nearest value of a 16-bit element type (itself for f32).
  static float roundTo16(float value, Type elementType) {
    if (elementType.isBF16())
      return trainmem::floatFromBF16Bits(trainmem::bf16BitsFromFloat(value));
    if (elementType.isF16())
      return trainmem::floatFromF16Bits(trainmem::f16BitsFromFloat(value));
    return value;
  }

  static float read16(const uint8_t *p, int64_t i, StringRef dtype) {
    uint16_t bits;
    std::memcpy(&bits, p + 2 * i, 2);
    return dtype == "bf16" ? trainmem::floatFromBF16Bits(bits)
                           : trainmem::floatFromF16Bits(bits);
  }

  /// Checks a result's bytes `p` (at `slot`) against the evaluator's.
  void expectSlot(const uint8_t *p, const TensorSlot &slot,
                  const RefTensor &expected, const std::string &what) {
    if (slot.dtypeName() == "bf16" || slot.dtypeName() == "f16") {
      double scale = 1e-3, worst = 0.0;
      for (float v : expected.floats)
        if (std::isfinite(v))
          scale = std::max(scale, static_cast<double>(std::abs(v)));
      int64_t differing = 0;
      for (int64_t i = 0; i < slot.numElements(); ++i) {
        float got = read16(p, i, slot.dtypeName()), want = expected.floats[i];
        if (std::isnan(want) || std::isnan(got)) {
          EXPECT_EQ(std::isnan(got), std::isnan(want))
              << what << " element " << i << ": " << got << " vs " << want;
          continue;
        }
        if (std::isinf(want) || std::isinf(got)) {
          EXPECT_EQ(got, want) << what << " element " << i;
          continue;
        }
        differing += got != want;
        worst = std::max(worst, std::abs(static_cast<double>(got) - want));
      }
      if (exact16)
        EXPECT_EQ(differing, 0) << what << " (" << slot.dtypeName().str()
                                << ") differs from the evaluator";
      double ulp = slot.dtypeName() == "bf16" ? 0x1p-7 : 0x1p-10;
      EXPECT_LE(worst, ulp * scale)
          << what << " (" << slot.dtypeName().str() << ")";
      return;
    }
    if (slot.dtypeName() == "f32") {
      double scale = 1e-3, worst = 0.0;
      for (float v : expected.floats)
        scale = std::max(scale, static_cast<double>(std::abs(v)));
      for (int64_t i = 0; i < slot.numElements(); ++i) {
        float got = reinterpret_cast<const float *>(p)[i];
        float want = expected.floats[i];
        if (std::isnan(got) || std::isnan(want)) {
          EXPECT_EQ(std::isnan(got), std::isnan(want))
              << what << " element " << i << ": " << got << " vs " << want;
          continue;
        }
        worst = std::max(worst, std::abs(static_cast<double>(got) - want));
      }
      EXPECT_LE(worst, kRelTol * scale) << what;
      return;
    }
    for (int64_t i = 0; i < slot.numElements(); ++i) {
      int64_t got =
          slot.dtypeName() == "i64"   ? reinterpret_cast<const int64_t *>(p)[i]
          : slot.dtypeName() == "i32" ? reinterpret_cast<const int32_t *>(p)[i]
                                      : p[i];
      ASSERT_EQ(got, expected.ints[i]) << what << " element " << i;
    }
  }

  /// Runs @train_step of `module` both ways on `inputs` (random where empty)
  /// and compares every result.
  void compare(ModuleOp module, std::vector<RefTensor> inputs = {}) {
    auto func = module.lookupSymbol<func::FuncOp>("train_step");
    ASSERT_TRUE(func);
    // The hand-written steps here are the step: the lowering finds it by
    // its marker.
    func->setAttr(kStepAttrName, UnitAttr::get(module.getContext()));
    inputs.resize(func.getNumArguments());
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      if (inputs[i].floats.empty() && inputs[i].ints.empty())
        inputs[i] = randomInput(
            cast<RankedTensorType>(func.getArgument(i).getType()));
    FailureOr<SmallVector<RefTensor>> expected = evaluate(func, inputs);
    ASSERT_TRUE(succeeded(expected));

    CpuStepRun run = runStepOnCpu(module, inputs);
    ASSERT_TRUE(static_cast<bool>(run)) << run.error;
    ASSERT_EQ(run.layout.results.size(), expected->size());
    for (auto [index, slot] : llvm::enumerate(run.layout.results))
      expectSlot(reinterpret_cast<const uint8_t *>(run.results[index].data()),
                 slot, (*expected)[index], "result #" + std::to_string(index));
  }

  /// Runs `source` as written, and with its f32 tensors in bf16 and in f16
  /// unless `only32` (steps whose f32 operands must stay f32).
  void compare(const char *source, std::vector<RefTensor> inputs = {},
               bool only32 = false) {
    OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(source, &context);
    ASSERT_TRUE(module);
    compare(*module, inputs);
    if (only32 || !StringRef(source).contains("xf32>"))
      return;
    for (StringRef dtype : {"bf16", "f16"}) {
      SCOPED_TRACE(dtype.str());
      std::string rewritten =
          llvm::join(llvm::split(StringRef(source), "xf32>"),
                     ("x" + dtype + ">").str());
      compare16(rewritten.c_str(), dtype, inputs);
    }
  }

  /// Runs a step with 16-bit tensors; float inputs given are rounded to
  /// the argument's type first.
  void compare16(const char *source, StringRef dtype,
                 std::vector<RefTensor> inputs = {}, bool exact = false) {
    OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(source, &context);
    ASSERT_TRUE(module) << source;
    auto func = module->lookupSymbol<func::FuncOp>("train_step");
    ASSERT_TRUE(func);
    inputs.resize(func.getNumArguments());
    for (auto [input, type] : llvm::zip(inputs, func.getArgumentTypes()))
      for (float &v : input.floats)
        v = roundTo16(v, getElementTypeOrSelf(type));
    exact16 = exact;
    compare(*module, inputs);
    exact16 = false;
  }

  /// Inputs of a model's step: byte tokens (step number 1 for a scalar),
  /// parameters drawn from N(0, 0.1).
  std::vector<RefTensor> modelStepInputs(func::FuncOp func) {
    std::vector<RefTensor> inputs(func.getNumArguments());
    std::uniform_int_distribution<int64_t> byte(0, 255);
    std::normal_distribution<float> normal(0.0f, 0.1f);
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      auto type = cast<RankedTensorType>(func.getArgument(i).getType());
      std::vector<int64_t> shape(type.getShape().begin(), type.getShape().end());
      if (isa<IntegerType>(type.getElementType())) {
        std::vector<int64_t> ids(type.getNumElements());
        for (int64_t &id : ids)
          id = byte(rng);
        if (type.getRank() == 0)
          ids = {1};
        inputs[i] = RefTensor::ofInts(shape, ids);
      } else {
        std::vector<float> values(type.getNumElements());
        for (float &v : values)
          v = normal(rng);
        inputs[i] = RefTensor::ofFloats(shape, values);
      }
    }
    return inputs;
  }

  bool exact16 = false;

  std::mt19937 rng{77};
};

TEST_F(RuntimeTest, EmbeddingAndIota) {
  compare(R"mlir(
    func.func @train_step(%t: tensor<7x5xf32>, %ids: tensor<2x3xi32>) -> (tensor<2x3x5xf32>, tensor<3xi64>) {
      %0 = train.embedding %t, %ids : tensor<7x5xf32>, tensor<2x3xi32> -> tensor<2x3x5xf32>
      %1 = train.iota : tensor<3xi64>
      return %0, %1 : tensor<2x3x5xf32>, tensor<3xi64>
    })mlir",
          {{}, RefTensor::ofInts({2, 3}, {6, 0, 3, 3, 1, 5})});
}

// train.bias_gelu and its gradient against the evaluator (f32 exactly as
// compare checks, and bf16/f16 rewritten); rows of 37 cover the vector
// loops' remainders.
TEST_F(RuntimeTest, BiasGeluAndItsGradient) {
  compare(R"mlir(
    func.func @train_step(%x: tensor<3x5x37xf32>, %b: tensor<37xf32>, %dy: tensor<3x5x37xf32>, %p: tensor<5x37xf32>)
        -> (tensor<3x5x37xf32>, tensor<3x5x37xf32>, tensor<3x5x37xf32>, tensor<3x5x37xf32>) {
      %y = train.bias_gelu %x, %b : tensor<3x5x37xf32>, tensor<37xf32>
      %g = train.bias_gelu_grad %dy, %x, %b : tensor<3x5x37xf32>, tensor<37xf32>
      %y2 = train.bias_gelu %x, %p : tensor<3x5x37xf32>, tensor<5x37xf32>
      %g2 = train.bias_gelu_grad %dy, %x, %p : tensor<3x5x37xf32>, tensor<5x37xf32>
      return %y, %g, %y2, %g2 : tensor<3x5x37xf32>, tensor<3x5x37xf32>, tensor<3x5x37xf32>, tensor<3x5x37xf32>
    })mlir");
}

// The whole tiny step with its bias + GELU chains fused, against the
// evaluator.
TEST_F(RuntimeTest, WholeTinyStepWithFusedElementwiseMatchesTheEvaluator) {
  ModelConfig config = *getPreset("tiny");
  OwningOpRef<ModuleOp> module = buildModel(&context, config);
  PassManager pm(&context);
  pm.addPass(createTrainFuseElementwisePass());
  TrainAutodiffPassOptions options;
  options.optimizer = "none";
  pm.addPass(createTrainAutodiffPass(options));
  ASSERT_TRUE(succeeded(pm.run(*module)));
  auto func = module->lookupSymbol<func::FuncOp>("train_step");
  int fused = 0;
  func.walk([&](BiasGeluGradOp) { ++fused; });
  ASSERT_EQ(fused, config.layers);
  compare(*module, modelStepInputs(func));
}

TEST_F(RuntimeTest, MatmulVariants) {
  compare(R"mlir(
    func.func @train_step(%a: tensor<3x5x4xf32>, %w: tensor<4x6xf32>, %b: tensor<3x6x4xf32>, %q: tensor<2x3x4x5xf32>, %k: tensor<2x1x4x5xf32>)
        -> (tensor<3x5x6xf32>, tensor<3x5x6xf32>, tensor<3x4x4xf32>, tensor<2x3x4x4xf32>) {
      %0 = train.matmul %a, %w : tensor<3x5x4xf32>, tensor<4x6xf32> -> tensor<3x5x6xf32>
      %1 = train.matmul %a, %b {transpose_rhs} : tensor<3x5x4xf32>, tensor<3x6x4xf32> -> tensor<3x5x6xf32>
      %2 = train.matmul %a, %a {transpose_lhs} : tensor<3x5x4xf32>, tensor<3x5x4xf32> -> tensor<3x4x4xf32>
      %3 = train.matmul %q, %k {transpose_rhs} : tensor<2x3x4x5xf32>, tensor<2x1x4x5xf32> -> tensor<2x3x4x4xf32>
      return %0, %1, %2, %3 : tensor<3x5x6xf32>, tensor<3x5x6xf32>, tensor<3x4x4xf32>, tensor<2x3x4x4xf32>
    })mlir");
}

TEST_F(RuntimeTest, MatmulOfStridedViews) {
  // Attention's Q·Kᵀ on heads transposed out of [B, S, H, D]: BLAS reads
  // the views through their leading dimensions.
  compare(R"mlir(
    func.func @train_step(%x: tensor<2x6x3x4xf32>, %y: tensor<2x6x3x4xf32>) -> tensor<2x3x6x6xf32> {
      %q = train.transpose %x {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x6x3x4xf32> -> tensor<2x3x6x4xf32>
      %k = train.transpose %y {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x6x3x4xf32> -> tensor<2x3x6x4xf32>
      %s = train.matmul %q, %k {transpose_rhs} : tensor<2x3x6x4xf32>, tensor<2x3x6x4xf32> -> tensor<2x3x6x6xf32>
      return %s : tensor<2x3x6x6xf32>
    })mlir");
}

TEST_F(RuntimeTest, ReshapeOfStridedViewCopies) {
  compare(R"mlir(
    func.func @train_step(%x: tensor<2x3x4x5xf32>) -> tensor<2x4x15xf32> {
      %t = train.transpose %x {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x3x4x5xf32> -> tensor<2x4x3x5xf32>
      %r = train.reshape %t : tensor<2x4x3x5xf32> -> tensor<2x4x15xf32>
      return %r : tensor<2x4x15xf32>
    })mlir");
}

TEST_F(RuntimeTest, Elementwise) {
  compare(R"mlir(
    func.func @train_step(%a: tensor<4x6xf32>, %b: tensor<4x6xf32>, %bias: tensor<6xf32>)
        -> (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>) {
      %0 = train.add %a, %b : tensor<4x6xf32>
      %1 = train.mul %a, %b : tensor<4x6xf32>
      %2 = train.scale %a {factor = -0.75 : f64} : tensor<4x6xf32>
      %3 = train.bias_add %a, %bias : tensor<4x6xf32>, tensor<6xf32>
      %4 = train.gelu %a : tensor<4x6xf32>
      %5 = train.silu %a : tensor<4x6xf32>
      %6 = train.gelu_grad %b, %a : tensor<4x6xf32>
      %7 = train.silu_grad %b, %a : tensor<4x6xf32>
      %8 = train.cast %a : tensor<4x6xf32> -> tensor<4x6xf32>
      return %0, %1, %2, %3, %4, %5, %6, %7, %8 : tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>
    })mlir");
}

// Every activation of Activations.def and its gradient: the runtime's
// kernel against the evaluator's, in f32, bf16 and f16.
TEST_F(RuntimeTest, EveryActivation) {
  for (const char *kernel : {
#define TMRT_ACTIVATION(kernel, Name) #kernel,
#include "trainmem-runtime/Activations.def"
       }) {
    SCOPED_TRACE(kernel);
    std::string source = llvm::formatv(R"mlir(
    func.func @train_step(%a: tensor<4x6xf32>, %b: tensor<4x6xf32>)
        -> (tensor<4x6xf32>, tensor<4x6xf32>) {
      %0 = train.{0} %a : tensor<4x6xf32>
      %1 = train.{0}_grad %b, %a : tensor<4x6xf32>
      return %0, %1 : tensor<4x6xf32>, tensor<4x6xf32>
    })mlir",
                                       kernel)
                             .str();
    compare(source.c_str());
  }
}

TEST_F(RuntimeTest, ExactGeluAndItsGradient) {
  compare(R"mlir(
    func.func @train_step(%a: tensor<4x6xf32>, %b: tensor<4x6xf32>)
        -> (tensor<4x6xf32>, tensor<4x6xf32>) {
      %0 = train.gelu %a {exact} : tensor<4x6xf32>
      %1 = train.gelu_grad %b, %a {exact} : tensor<4x6xf32>
      return %0, %1 : tensor<4x6xf32>, tensor<4x6xf32>
    })mlir");
}

TEST_F(RuntimeTest, NormsAndTheirGradients) {
  compare(R"mlir(
    func.func @train_step(%x: tensor<5x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>, %dy: tensor<5x8xf32>)
        -> (tensor<5x8xf32>, tensor<5x8xf32>, tensor<5x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<5x8xf32>, tensor<8xf32>) {
      %0 = train.layer_norm %x, %g, %b {epsilon = 1.0e-05 : f64} : tensor<5x8xf32>, tensor<8xf32>, tensor<8xf32>
      %1 = train.rms_norm %x, %g {epsilon = 1.0e-05 : f64} : tensor<5x8xf32>, tensor<8xf32>
      %2:3 = train.layer_norm_grad %dy, %x, %g {epsilon = 1.0e-05 : f64} : tensor<5x8xf32>, tensor<5x8xf32>, tensor<8xf32> -> tensor<5x8xf32>, tensor<8xf32>, tensor<8xf32>
      %3:2 = train.rms_norm_grad %dy, %x, %g {epsilon = 1.0e-05 : f64} : tensor<5x8xf32>, tensor<5x8xf32>, tensor<8xf32> -> tensor<5x8xf32>, tensor<8xf32>
      return %0, %1, %2#0, %2#1, %2#2, %3#0, %3#1 : tensor<5x8xf32>, tensor<5x8xf32>, tensor<5x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<5x8xf32>, tensor<8xf32>
    })mlir");
}

// Gemma's RMS norm: the scale is 1 + gamma.
TEST_F(RuntimeTest, RMSNormWithGainOffset) {
  compare(R"mlir(
    func.func @train_step(%x: tensor<5x8xf32>, %g: tensor<8xf32>, %dy: tensor<5x8xf32>)
        -> (tensor<5x8xf32>, tensor<5x8xf32>, tensor<8xf32>) {
      %0 = train.rms_norm %x, %g {epsilon = 1.0e-06 : f64, gain_offset = 1.0 : f64} : tensor<5x8xf32>, tensor<8xf32>
      %1:2 = train.rms_norm_grad %dy, %x, %g {epsilon = 1.0e-06 : f64, gain_offset = 1.0 : f64} : tensor<5x8xf32>, tensor<5x8xf32>, tensor<8xf32> -> tensor<5x8xf32>, tensor<8xf32>
      return %0, %1#0, %1#1 : tensor<5x8xf32>, tensor<5x8xf32>, tensor<8xf32>
    })mlir");
}

TEST_F(RuntimeTest, SoftmaxAndDropout) {
  compare(R"mlir(
    func.func @train_step(%x: tensor<2x3x5x5xf32>, %dy: tensor<2x3x5x5xf32>, %key: tensor<i64>)
        -> (tensor<2x3x5x5xf32>, tensor<2x3x5x5xf32>, tensor<2x3x5x5xf32>, tensor<2x3x5x5xf32>, tensor<2x3x5x5xi1>, tensor<2x3x5x5xi1>, tensor<2x3x5x5xf32>) {
      %0 = train.softmax %x : tensor<2x3x5x5xf32>
      %1 = train.softmax %x {causal} : tensor<2x3x5x5xf32>
      %2 = train.softmax_grad %dy, %1 : tensor<2x3x5x5xf32>
      %3, %4 = train.dropout %x key(%key : tensor<i64>) {rate = 0.3 : f64, seed = 5 : i64, offset = 9 : i64} : tensor<2x3x5x5xf32> -> tensor<2x3x5x5xi1>
      %5 = train.dropout_mask {rate = 0.3 : f64, seed = 5 : i64, offset = 9 : i64} : tensor<2x3x5x5xi1>
      %6 = train.dropout_grad %dy, %4 {rate = 0.3 : f64} : tensor<2x3x5x5xf32>, tensor<2x3x5x5xi1>
      return %0, %1, %2, %3, %4, %5, %6 : tensor<2x3x5x5xf32>, tensor<2x3x5x5xf32>, tensor<2x3x5x5xf32>, tensor<2x3x5x5xf32>, tensor<2x3x5x5xi1>, tensor<2x3x5x5xi1>, tensor<2x3x5x5xf32>
    })mlir",
          {{}, {}, RefTensor::ofInts({}, {12})});
}

// ALiBi: the runtime's biased softmax is the evaluator's, causal or not,
// its slopes per head (the third-to-last dimension, batch rows apart).
TEST_F(RuntimeTest, SoftmaxWithAlibiSlopes) {
  compare(R"mlir(
    func.func @train_step(%x: tensor<2x3x5x5xf32>) -> (tensor<2x3x5x5xf32>, tensor<2x3x5x5xf32>) {
      %0 = train.softmax %x {alibi_slopes = array<f64: 0.5, 0.25, 0.125>} : tensor<2x3x5x5xf32>
      %1 = train.softmax %x {causal, alibi_slopes = array<f64: 0.5, 0.25, 0.125>} : tensor<2x3x5x5xf32>
      return %0, %1 : tensor<2x3x5x5xf32>, tensor<2x3x5x5xf32>
    })mlir");
}

TEST_F(RuntimeTest, RopeOfStridedView) {
  compare(R"mlir(
    func.func @train_step(%x: tensor<2x6x3x8xf32>) -> (tensor<2x3x6x8xf32>, tensor<2x3x6x8xf32>, tensor<2x3x6x8xf32>, tensor<2x3x6x8xf32>) {
      %t = train.transpose %x {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x6x3x8xf32> -> tensor<2x3x6x8xf32>
      %0 = train.rope %t {theta = 10000.0 : f64} : tensor<2x3x6x8xf32>
      %1 = train.rope %0 {theta = 10000.0 : f64, inverse} : tensor<2x3x6x8xf32>
      %2 = train.rope %t {theta = 500.0 : f64, halves} : tensor<2x3x6x8xf32>
      %3 = train.rope %2 {theta = 500.0 : f64, halves, inverse} : tensor<2x3x6x8xf32>
      return %0, %1, %2, %3 : tensor<2x3x6x8xf32>, tensor<2x3x6x8xf32>, tensor<2x3x6x8xf32>, tensor<2x3x6x8xf32>
    })mlir");
}

TEST_F(RuntimeTest, LossAndItsGradient) {
  compare(R"mlir(
    func.func @train_step(%l: tensor<2x4x9xf32>, %t: tensor<2x4xi64>, %g: tensor<f32>)
        -> (tensor<f32>, tensor<i64>, tensor<f32>, tensor<2x4x9xf32>) {
      %s, %c = train.cross_entropy %l, %t {ignore_index = -1 : i64} : tensor<2x4x9xf32>, tensor<2x4xi64> -> tensor<f32>, tensor<i64>
      %m = train.mean_loss %s, %c : tensor<f32>, tensor<i64>
      %d = train.cross_entropy_grad %g, %l, %t {ignore_index = -1 : i64} : tensor<f32>, tensor<2x4x9xf32>, tensor<2x4xi64> -> tensor<2x4x9xf32>
      return %s, %c, %m, %d : tensor<f32>, tensor<i64>, tensor<f32>, tensor<2x4x9xf32>
    })mlir",
          {{}, RefTensor::ofInts({2, 4}, {0, 8, -1, 3, 3, 2, -1, 7}), {}});
}

// Label smoothing: the runtime's loss and gradient are the evaluator's.
TEST_F(RuntimeTest, LabelSmoothedLossAndItsGradient) {
  compare(R"mlir(
    func.func @train_step(%l: tensor<2x4x9xf32>, %t: tensor<2x4xi64>, %g: tensor<f32>)
        -> (tensor<f32>, tensor<i64>, tensor<2x4x9xf32>) {
      %s, %c = train.cross_entropy %l, %t {ignore_index = -1 : i64, label_smoothing = 0.25 : f64} : tensor<2x4x9xf32>, tensor<2x4xi64> -> tensor<f32>, tensor<i64>
      %d = train.cross_entropy_grad %g, %l, %t {ignore_index = -1 : i64, label_smoothing = 0.25 : f64} : tensor<f32>, tensor<2x4x9xf32>, tensor<2x4xi64> -> tensor<2x4x9xf32>
      return %s, %c, %d : tensor<f32>, tensor<i64>, tensor<2x4x9xf32>
    })mlir",
          {{}, RefTensor::ofInts({2, 4}, {0, 8, -1, 3, 3, 2, -1, 7}), {}});
}

// Vocabulary parallelism's loss on one rank (whole logits, no split): the
// row maxima, each row's sum of exponentials and target logit, the merge
// and both gradients, in f32 and bf16 logits, an ignored target among
// them.
TEST_F(RuntimeTest, ParallelCrossEntropyPiecesAndTheirGradients) {
  for (StringRef dtype : {"f32", "bf16"}) {
    SCOPED_TRACE(dtype.str());
    std::string source = R"mlir(
    func.func @train_step(%l: tensor<2x4x9xT>, %t: tensor<2x4xi64>, %g: tensor<f32>)
        -> (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<f32>, tensor<i64>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4x9xT>) {
      %m = train.row_max %l : tensor<2x4x9xT> -> tensor<2x4xf32>
      %se, %tl = train.cross_entropy_part %l, %t, %m {ignore_index = -1 : i64} : tensor<2x4x9xT>, tensor<2x4xi64>, tensor<2x4xf32> -> tensor<2x4xf32>, tensor<2x4xf32>
      %s, %c = train.cross_entropy_merge %se, %tl, %m, %t {ignore_index = -1 : i64} : tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xi64> -> tensor<f32>, tensor<i64>
      %dse, %dtl = train.cross_entropy_merge_grad %g, %se, %t {ignore_index = -1 : i64} : tensor<f32>, tensor<2x4xf32>, tensor<2x4xi64> -> tensor<2x4xf32>, tensor<2x4xf32>
      %d = train.cross_entropy_part_grad %dse, %dtl, %l, %m, %t {ignore_index = -1 : i64} : tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4x9xT>, tensor<2x4xf32>, tensor<2x4xi64>
      return %m, %se, %tl, %s, %c, %dse, %dtl, %d : tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<f32>, tensor<i64>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4x9xT>
    })mlir";
    std::string typed = llvm::join(llvm::split(StringRef(source), "xT>"),
                                   ("x" + dtype + ">").str());
    std::vector<RefTensor> inputs = {
        {}, RefTensor::ofInts({2, 4}, {0, 8, -1, 3, 3, 2, -1, 7}), {}};
    if (dtype == "f32")
      compare(typed.c_str(), inputs, /*only32=*/true);
    else
      compare16(typed.c_str(), dtype, inputs);
  }
}

// A broadcast of a row-major tensor and of a strided view (a transpose):
// the repeated dimensions read with stride 0; its gradient sums them back.
TEST_F(RuntimeTest, BroadcastAndItsGradient) {
  compare(R"mlir(
    func.func @train_step(%k: tensor<2x3x1x4xf32>, %t: tensor<2x4x1x3xf32>)
        -> (tensor<2x3x5x4xf32>, tensor<2x3x5x4xf32>, tensor<2x3x1x4xf32>) {
      %0 = train.broadcast %k : tensor<2x3x1x4xf32> -> tensor<2x3x5x4xf32>
      %v = train.transpose %t {permutation = array<i64: 0, 3, 2, 1>} : tensor<2x4x1x3xf32> -> tensor<2x3x1x4xf32>
      %1 = train.broadcast %v : tensor<2x3x1x4xf32> -> tensor<2x3x5x4xf32>
      %2 = train.sum_to %1 : tensor<2x3x5x4xf32> -> tensor<2x3x1x4xf32>
      return %0, %1, %2 : tensor<2x3x5x4xf32>, tensor<2x3x5x4xf32>, tensor<2x3x1x4xf32>
    })mlir");
}

TEST_F(RuntimeTest, SliceAndItsGradient) {
  // A fused projection's parts (last dimension), a block of a middle
  // dimension, a slice of a transposed view, and the gradients placed
  // back into zeros; in f32 and in bf16 and f16 (2-byte offsets).
  const char *source = R"(
func.func @train_step(%qkv: tensor<2x3x12xT>, %t: tensor<2x12x3xT>) -> (tensor<2x3x4xT>, tensor<2x2x12xT>, tensor<2x3x4xT>, tensor<2x3x12xT>, tensor<2x3x12xT>) {
  %k = train.slice %qkv {dim = 2 : i64, offset = 4 : i64, size = 4 : i64} : tensor<2x3x12xT> -> tensor<2x3x4xT>
  %m = train.slice %qkv {dim = 1 : i64, offset = 1 : i64, size = 2 : i64} : tensor<2x3x12xT> -> tensor<2x2x12xT>
  %v = train.transpose %t {permutation = array<i64: 0, 2, 1>} : tensor<2x12x3xT> -> tensor<2x3x12xT>
  %s = train.slice %v {dim = 2 : i64, offset = 8 : i64, size = 4 : i64} : tensor<2x3x12xT> -> tensor<2x3x4xT>
  %g = train.slice_grad %k {dim = 2 : i64, offset = 8 : i64, whole = 12 : i64} : tensor<2x3x4xT> -> tensor<2x3x12xT>
  %h = train.slice_grad %m {dim = 1 : i64, offset = 1 : i64, whole = 3 : i64} : tensor<2x2x12xT> -> tensor<2x3x12xT>
  return %k, %m, %s, %g, %h : tensor<2x3x4xT>, tensor<2x2x12xT>, tensor<2x3x4xT>, tensor<2x3x12xT>, tensor<2x3x12xT>
})";
  auto in = [&](StringRef dtype) {
    return llvm::join(llvm::split(StringRef(source), "xT>"),
                      ("x" + dtype + ">").str());
  };
  compare(in("f32").c_str());
  for (StringRef dtype : {"bf16", "f16"}) {
    SCOPED_TRACE(dtype.str());
    compare16(in(dtype).c_str(), dtype);
  }
}

TEST_F(RuntimeTest, ReductionsAndScatter) {
  compare(R"mlir(
    func.func @train_step(%dy: tensor<2x3x4xf32>, %ids: tensor<2x3xi32>) -> (tensor<4xf32>, tensor<3x4xf32>, tensor<2x1x4xf32>, tensor<6x4xf32>) {
      %0 = train.sum_to %dy : tensor<2x3x4xf32> -> tensor<4xf32>
      %1 = train.sum_to %dy : tensor<2x3x4xf32> -> tensor<3x4xf32>
      %2 = train.sum_to %dy : tensor<2x3x4xf32> -> tensor<2x1x4xf32>
      %3 = train.embedding_grad %dy, %ids : tensor<2x3x4xf32>, tensor<2x3xi32> -> tensor<6x4xf32>
      return %0, %1, %2, %3 : tensor<4xf32>, tensor<3x4xf32>, tensor<2x1x4xf32>, tensor<6x4xf32>
    })mlir",
          {{}, RefTensor::ofInts({2, 3}, {5, 1, 5, 0, 1, 5})});
}

TEST_F(RuntimeTest, FusedAttentionAndItsGradient) {
  // The tiled kernels (tiles of 64 queries by 64 keys, f32 products by
  // cblas_sgemm, fastExp) against the evaluator's double sums: 70 positions
  // cross a tile edge; causal with grouped-query heads (4 over 2) and a
  // value width apart from the key width; not causal with dropout and the
  // output transposed.
  const char *source = R"(
func.func @train_step(%q: tensor<2x4x70x16xT>, %k: tensor<2x2x70x16xT>, %v: tensor<2x2x70x8xT>, %dout: tensor<2x4x70x8xT>, %doutT: tensor<2x70x4x8xT>, %step: tensor<i64>) -> (tensor<2x4x70x8xT>, tensor<2x4x70xf32>, tensor<2x4x70x16xT>, tensor<2x2x70x16xT>, tensor<2x2x70x8xT>, tensor<2x70x4x8xT>, tensor<2x4x70xf32>, tensor<2x4x70x16xT>, tensor<2x2x70x16xT>, tensor<2x2x70x8xT>) {
  %o, %lse = train.attention %q, %k, %v {causal, scale = 0.25 : f64} : tensor<2x4x70x16xT>, tensor<2x2x70x16xT>, tensor<2x2x70x8xT> -> tensor<2x4x70x8xT>, tensor<2x4x70xf32>
  %dq, %dk, %dv = train.attention_grad %dout, %q, %k, %v, %o, %lse {causal, scale = 0.25 : f64} : tensor<2x4x70x8xT>, tensor<2x4x70x16xT>, tensor<2x2x70x16xT>, tensor<2x2x70x8xT>, tensor<2x4x70x8xT>, tensor<2x4x70xf32>
  %o2, %lse2 = train.attention %q, %k, %v key(%step : tensor<i64>) {scale = 0.25 : f64, rate = 0.2 : f64, seed = 5 : i64, transpose_output} : tensor<2x4x70x16xT>, tensor<2x2x70x16xT>, tensor<2x2x70x8xT> -> tensor<2x70x4x8xT>, tensor<2x4x70xf32>
  %dq2, %dk2, %dv2 = train.attention_grad %doutT, %q, %k, %v, %o2, %lse2 key(%step : tensor<i64>) {scale = 0.25 : f64, rate = 0.2 : f64, seed = 5 : i64, transpose_output} : tensor<2x70x4x8xT>, tensor<2x4x70x16xT>, tensor<2x2x70x16xT>, tensor<2x2x70x8xT>, tensor<2x70x4x8xT>, tensor<2x4x70xf32>
  return %o, %lse, %dq, %dk, %dv, %o2, %lse2, %dq2, %dk2, %dv2 : tensor<2x4x70x8xT>, tensor<2x4x70xf32>, tensor<2x4x70x16xT>, tensor<2x2x70x16xT>, tensor<2x2x70x8xT>, tensor<2x70x4x8xT>, tensor<2x4x70xf32>, tensor<2x4x70x16xT>, tensor<2x2x70x16xT>, tensor<2x2x70x8xT>
})";
  auto in = [&](StringRef dtype) {
    return llvm::join(llvm::split(StringRef(source), "xT>"),
                      ("x" + dtype + ">").str());
  };
  // (The log-sum-exp is f32 whatever the operands are.)
  compare(in("f32").c_str(), {}, /*only32=*/true);
  for (StringRef dtype : {"bf16", "f16"}) {
    SCOPED_TRACE(dtype.str());
    compare16(in(dtype).c_str(), dtype);
  }
}

// ALiBi inside the tiles: 70 positions across a tile edge, causal with
// grouped-query heads, and not causal with dropout; the slopes' biases
// reach 70 · 0.5 = 35, so a bias in the wrong place shows.
TEST_F(RuntimeTest, FusedAttentionWithAlibiAndItsGradient) {
  compare(R"(
func.func @train_step(%q: tensor<2x4x70x16xf32>, %k: tensor<2x2x70x16xf32>, %v: tensor<2x2x70x8xf32>, %dout: tensor<2x4x70x8xf32>, %step: tensor<i64>) -> (tensor<2x4x70x8xf32>, tensor<2x4x70xf32>, tensor<2x4x70x16xf32>, tensor<2x2x70x16xf32>, tensor<2x2x70x8xf32>, tensor<2x4x70x8xf32>, tensor<2x4x70x16xf32>, tensor<2x2x70x16xf32>, tensor<2x2x70x8xf32>) {
  %o, %lse = train.attention %q, %k, %v {causal, scale = 0.25 : f64, alibi_slopes = array<f64: 0.5, 0.125, 0.03125, 0.0078125>} : tensor<2x4x70x16xf32>, tensor<2x2x70x16xf32>, tensor<2x2x70x8xf32> -> tensor<2x4x70x8xf32>, tensor<2x4x70xf32>
  %dq, %dk, %dv = train.attention_grad %dout, %q, %k, %v, %o, %lse {causal, scale = 0.25 : f64, alibi_slopes = array<f64: 0.5, 0.125, 0.03125, 0.0078125>} : tensor<2x4x70x8xf32>, tensor<2x4x70x16xf32>, tensor<2x2x70x16xf32>, tensor<2x2x70x8xf32>, tensor<2x4x70x8xf32>, tensor<2x4x70xf32>
  %o2, %lse2 = train.attention %q, %k, %v key(%step : tensor<i64>) {scale = 0.25 : f64, rate = 0.2 : f64, seed = 5 : i64, alibi_slopes = array<f64: 0.5, 0.125, 0.03125, 0.0078125>} : tensor<2x4x70x16xf32>, tensor<2x2x70x16xf32>, tensor<2x2x70x8xf32> -> tensor<2x4x70x8xf32>, tensor<2x4x70xf32>
  %dq2, %dk2, %dv2 = train.attention_grad %dout, %q, %k, %v, %o2, %lse2 key(%step : tensor<i64>) {scale = 0.25 : f64, rate = 0.2 : f64, seed = 5 : i64, alibi_slopes = array<f64: 0.5, 0.125, 0.03125, 0.0078125>} : tensor<2x4x70x8xf32>, tensor<2x4x70x16xf32>, tensor<2x2x70x16xf32>, tensor<2x2x70x8xf32>, tensor<2x4x70x8xf32>, tensor<2x4x70xf32>
  return %o, %lse, %dq, %dk, %dv, %o2, %dq2, %dk2, %dv2 : tensor<2x4x70x8xf32>, tensor<2x4x70xf32>, tensor<2x4x70x16xf32>, tensor<2x2x70x16xf32>, tensor<2x2x70x8xf32>, tensor<2x4x70x8xf32>, tensor<2x4x70x16xf32>, tensor<2x2x70x16xf32>, tensor<2x2x70x8xf32>
})", {{}, {}, {}, {}, RefTensor::ofInts({}, {7})}, /*only32=*/true);
}

TEST_F(RuntimeTest, FusedAttentionOfFewQueriesOverManyKeys) {
  // Not causal, 5 queries over 130 keys (two whole key tiles and a part),
  // an odd head width, dropout.
  compare(R"(
func.func @train_step(%q: tensor<1x2x5x3xf32>, %k: tensor<1x2x130x3xf32>, %v: tensor<1x2x130x3xf32>, %dout: tensor<1x2x5x3xf32>, %step: tensor<i64>) -> (tensor<1x2x5x3xf32>, tensor<1x2x5xf32>, tensor<1x2x5x3xf32>, tensor<1x2x130x3xf32>, tensor<1x2x130x3xf32>) {
  %o, %lse = train.attention %q, %k, %v key(%step : tensor<i64>) {scale = 0.5 : f64, rate = 0.1 : f64, seed = 3 : i64} : tensor<1x2x5x3xf32>, tensor<1x2x130x3xf32>, tensor<1x2x130x3xf32> -> tensor<1x2x5x3xf32>, tensor<1x2x5xf32>
  %dq, %dk, %dv = train.attention_grad %dout, %q, %k, %v, %o, %lse key(%step : tensor<i64>) {scale = 0.5 : f64, rate = 0.1 : f64, seed = 3 : i64} : tensor<1x2x5x3xf32>, tensor<1x2x5x3xf32>, tensor<1x2x130x3xf32>, tensor<1x2x130x3xf32>, tensor<1x2x5x3xf32>, tensor<1x2x5xf32>
  return %o, %lse, %dq, %dk, %dv : tensor<1x2x5x3xf32>, tensor<1x2x5xf32>, tensor<1x2x5x3xf32>, tensor<1x2x130x3xf32>, tensor<1x2x130x3xf32>
})", {}, /*only32=*/true);
}

TEST_F(RuntimeTest, WholeTinyStepWithFusedAttentionMatchesTheEvaluator) {
  // The tiny preset with dropout, its attention fused, differentiated into
  // a step that returns the loss and every parameter's gradient.
  ModelConfig config = *getPreset("tiny");
  config.dropout = 0.1;
  OwningOpRef<ModuleOp> module = buildModel(&context, config);
  PassManager pm(&context);
  pm.addPass(createTrainFuseAttentionPass());
  TrainAutodiffPassOptions options;
  options.optimizer = "none";
  pm.addPass(createTrainAutodiffPass(options));
  ASSERT_TRUE(succeeded(pm.run(*module)));
  auto func = module->lookupSymbol<func::FuncOp>("train_step");
  bool fused = false;
  func.walk([&](AttentionGradOp) { fused = true; });
  ASSERT_TRUE(fused);
  compare(*module, modelStepInputs(func));
}

TEST_F(RuntimeTest, Optimizers) {
  compare(R"mlir(
    func.func @train_step(%p: tensor<10xf32>, %g: tensor<10xf32>, %m: tensor<10xf32>, %v: tensor<10xf32>, %b: tensor<10xf32>, %t: tensor<i64>)
        -> (tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<f32>, tensor<f32>) {
      %lr = train.lr_schedule %t {peak_lr = 0.1 : f64, min_lr = 0.01 : f64, warmup_steps = 2 : i64, total_steps = 10 : i64} : tensor<i64> -> tensor<f32>
      %c:2 = train.clip_grad_norm %g {max_norm = 0.5 : f64} : (tensor<10xf32>) -> (tensor<10xf32>, tensor<f32>)
      %v2 = train.mul %v, %v : tensor<10xf32>
      %a:3 = train.adamw %p, %c#0, %m, %v2, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-08 : f64, weight_decay = 0.1 : f64} : tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<f32>, tensor<i64>
      %s:2 = train.sgd %p, %g, %lr, %b {momentum = 0.9 : f64, weight_decay = 0.01 : f64, nesterov} : (tensor<10xf32>, tensor<10xf32>, tensor<f32>, tensor<10xf32>) -> (tensor<10xf32>, tensor<10xf32>)
      return %a#0, %a#1, %a#2, %s#0, %s#1, %c#0, %c#1, %lr : tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<f32>, tensor<f32>
    })mlir",
          {{}, {}, {}, {}, {}, RefTensor::ofInts({}, {6})}, /*only32=*/true);
}

TEST_F(RuntimeTest, EightBitOptimizerState) {
  // 1000 elements: three full blocks of 256 and a partial one.
  std::uniform_int_distribution<int64_t> code(0, 255);
  std::vector<int64_t> mCodes(1000), vCodes(1000);
  for (int64_t i = 0; i < 1000; ++i) {
    mCodes[i] = code(rng);
    vCodes[i] = code(rng);
  }
  std::vector<float> absmax = {0.02f, 0.5f, 1e-5f, 0.0f};
  compare(R"mlir(
    func.func @train_step(%p: tensor<1000xf32>, %g: tensor<1000xf32>, %mc: tensor<1000xi8>, %ma: tensor<4xf32>, %vc: tensor<1000xi8>, %va: tensor<4xf32>, %t: tensor<i64>, %x: tensor<1000xf32>)
        -> (tensor<1000xf32>, tensor<1000xi8>, tensor<4xf32>, tensor<1000xi8>, tensor<4xf32>, tensor<1000xi8>, tensor<4xf32>, tensor<1000xf32>, tensor<1000xf32>, tensor<1000xf32>, tensor<1000xi8>, tensor<4xf32>) {
      %lr = arith.constant dense<1.0e-3> : tensor<f32>
      %a:5 = train.adamw_8bit %p, %g, %mc, %ma, %vc, %va, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-08 : f64, weight_decay = 0.01 : f64, block = 256 : i64} : tensor<1000xf32>, tensor<1000xf32>, tensor<1000xi8>, tensor<4xf32>, tensor<1000xi8>, tensor<4xf32>, tensor<f32>, tensor<i64>
      %qc, %qa = train.quantize %x {block = 256 : i64, is_signed} : tensor<1000xf32> -> tensor<1000xi8>, tensor<4xf32>
      %d = train.dequantize %qc, %qa {block = 256 : i64, is_signed} : tensor<1000xi8>, tensor<4xf32> -> tensor<1000xf32>
      %u = train.dequantize %vc, %va {block = 256 : i64} : tensor<1000xi8>, tensor<4xf32> -> tensor<1000xf32>
      %s:3 = train.sgd_8bit %p, %g, %mc, %ma, %lr {momentum = 0.9 : f64, weight_decay = 0.01 : f64, nesterov, block = 256 : i64} : tensor<1000xf32>, tensor<1000xf32>, tensor<1000xi8>, tensor<4xf32>, tensor<f32>
      return %a#0, %a#1, %a#2, %a#3, %a#4, %qc, %qa, %d, %u, %s#0, %s#1, %s#2 : tensor<1000xf32>, tensor<1000xi8>, tensor<4xf32>, tensor<1000xi8>, tensor<4xf32>, tensor<1000xi8>, tensor<4xf32>, tensor<1000xf32>, tensor<1000xf32>, tensor<1000xf32>, tensor<1000xi8>, tensor<4xf32>
    })mlir",
          {{}, {}, RefTensor::ofInts({1000}, mCodes), RefTensor::ofFloats({4}, absmax),
           RefTensor::ofInts({1000}, vCodes), RefTensor::ofFloats({4}, absmax),
           RefTensor::ofInts({}, {5})},
          /*only32=*/true);
}

TEST_F(RuntimeTest, ConstantsFill) {
  compare(R"mlir(
    func.func @train_step() -> (tensor<3xf32>, tensor<2xi64>) {
      %0 = arith.constant dense<2.5> : tensor<3xf32>
      %1 = arith.constant dense<-4> : tensor<2xi64>
      return %0, %1 : tensor<3xf32>, tensor<2xi64>
    })mlir");
}

TEST_F(RuntimeTest, OptimizersTake16BitGradients) {
  // Mixed precision: f32 weights (the masters) and state, 16-bit gradients,
  // clipped in 16 bits.
  for (StringRef dtype : {"bf16", "f16"}) {
    SCOPED_TRACE(dtype.str());
    std::string source = llvm::join(llvm::split(StringRef(R"mlir(
    func.func @train_step(%p: tensor<10xf32>, %g: tensor<10xG>, %m: tensor<10xf32>, %v: tensor<10xf32>, %b: tensor<10xf32>, %t: tensor<i64>)
        -> (tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<10xG>, tensor<f32>) {
      %lr = arith.constant dense<1.0e-2> : tensor<f32>
      %c:2 = train.clip_grad_norm %g {max_norm = 0.5 : f64} : (tensor<10xG>) -> (tensor<10xG>, tensor<f32>)
      %v2 = train.mul %v, %v : tensor<10xf32>
      %a:3 = train.adamw %p, %c#0, %m, %v2, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-08 : f64, weight_decay = 0.1 : f64} : tensor<10xf32>, tensor<10xG>, tensor<10xf32>, tensor<10xf32>, tensor<f32>, tensor<i64>
      %s:2 = train.sgd %p, %g, %lr, %b {momentum = 0.9 : f64, weight_decay = 0.01 : f64, nesterov} : (tensor<10xf32>, tensor<10xG>, tensor<f32>, tensor<10xf32>) -> (tensor<10xf32>, tensor<10xf32>)
      return %a#0, %a#1, %a#2, %s#0, %s#1, %c#0, %c#1 : tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<10xG>, tensor<f32>
    })mlir"), "xG>"), ("x" + dtype + ">").str());
    compare16(source.c_str(), dtype,
              {{}, {}, {}, {}, {}, RefTensor::ofInts({}, {6})});
    std::string eightBit = llvm::join(llvm::split(StringRef(R"mlir(
    func.func @train_step(%p: tensor<1000xf32>, %g: tensor<1000xG>, %mc: tensor<1000xi8>, %ma: tensor<4xf32>, %vc: tensor<1000xi8>, %va: tensor<4xf32>, %t: tensor<i64>)
        -> (tensor<1000xf32>, tensor<1000xi8>, tensor<4xf32>, tensor<1000xi8>, tensor<4xf32>, tensor<1000xf32>, tensor<1000xi8>, tensor<4xf32>) {
      %lr = arith.constant dense<1.0e-3> : tensor<f32>
      %a:5 = train.adamw_8bit %p, %g, %mc, %ma, %vc, %va, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-08 : f64, weight_decay = 0.01 : f64, block = 256 : i64} : tensor<1000xf32>, tensor<1000xG>, tensor<1000xi8>, tensor<4xf32>, tensor<1000xi8>, tensor<4xf32>, tensor<f32>, tensor<i64>
      %s:3 = train.sgd_8bit %p, %g, %mc, %ma, %lr {momentum = 0.9 : f64, weight_decay = 0.01 : f64, nesterov, block = 256 : i64} : tensor<1000xf32>, tensor<1000xG>, tensor<1000xi8>, tensor<4xf32>, tensor<f32>
      return %a#0, %a#1, %a#2, %a#3, %a#4, %s#0, %s#1, %s#2 : tensor<1000xf32>, tensor<1000xi8>, tensor<4xf32>, tensor<1000xi8>, tensor<4xf32>, tensor<1000xf32>, tensor<1000xi8>, tensor<4xf32>
    })mlir"), "xG>"), ("x" + dtype + ">").str());
    std::uniform_int_distribution<int64_t> code(0, 255);
    std::vector<int64_t> mCodes(1000), vCodes(1000);
    for (int64_t i = 0; i < 1000; ++i) {
      mCodes[i] = code(rng);
      vCodes[i] = code(rng);
    }
    std::vector<float> absmax = {0.02f, 0.5f, 1e-5f, 0.0f};
    compare16(eightBit.c_str(), dtype,
              {{}, {}, RefTensor::ofInts({1000}, mCodes),
               RefTensor::ofFloats({4}, absmax),
               RefTensor::ofInts({1000}, vCodes),
               RefTensor::ofFloats({4}, absmax), RefTensor::ofInts({}, {5})});
  }
}

TEST_F(RuntimeTest, LionAndItsEightBitForm) {
  // Lion on an f32 momentum and on 8-bit codes (1000 elements: three full
  // blocks and a partial one), f32 and 16-bit gradients; zero momentum and
  // gradient elements give sign(0) = 0.
  std::uniform_int_distribution<int64_t> code(0, 255);
  std::vector<int64_t> mCodes(1000);
  for (int64_t &c : mCodes)
    c = code(rng);
  std::vector<float> absmax = {0.02f, 0.5f, 1e-5f, 0.0f};
  std::vector<float> zeros(1000, 0.0f);
  for (StringRef dtype : {"f32", "bf16", "f16"}) {
    SCOPED_TRACE(dtype.str());
    std::string source = llvm::join(llvm::split(StringRef(R"mlir(
    func.func @train_step(%p: tensor<1000xf32>, %g: tensor<1000xG>, %m: tensor<1000xf32>, %mc: tensor<1000xi8>, %ma: tensor<4xf32>, %z: tensor<1000xf32>)
        -> (tensor<1000xf32>, tensor<1000xf32>, tensor<1000xf32>, tensor<1000xi8>, tensor<4xf32>, tensor<1000xf32>, tensor<1000xf32>) {
      %lr = arith.constant dense<1.0e-2> : tensor<f32>
      %a:2 = train.lion %p, %g, %m, %lr {beta1 = 0.9 : f64, beta2 = 0.99 : f64, weight_decay = 0.1 : f64} : tensor<1000xf32>, tensor<1000xG>, tensor<1000xf32>, tensor<f32>
      %q:3 = train.lion_8bit %p, %g, %mc, %ma, %lr {beta1 = 0.95 : f64, beta2 = 0.98 : f64, weight_decay = 0.0 : f64, block = 256 : i64} : tensor<1000xf32>, tensor<1000xG>, tensor<1000xi8>, tensor<4xf32>, tensor<f32>
      %zz = train.cast %z : tensor<1000xf32> -> tensor<1000xG>
      %s:2 = train.lion %p, %zz, %z, %lr {beta1 = 0.9 : f64, beta2 = 0.99 : f64, weight_decay = 0.0 : f64} : tensor<1000xf32>, tensor<1000xG>, tensor<1000xf32>, tensor<f32>
      return %a#0, %a#1, %q#0, %q#1, %q#2, %s#0, %s#1 : tensor<1000xf32>, tensor<1000xf32>, tensor<1000xf32>, tensor<1000xi8>, tensor<4xf32>, tensor<1000xf32>, tensor<1000xf32>
    })mlir"),
                                                "xG>"),
                                    ("x" + dtype + ">").str());
    std::vector<RefTensor> inputs = {{},
                                     {},
                                     {},
                                     RefTensor::ofInts({1000}, mCodes),
                                     RefTensor::ofFloats({4}, absmax),
                                     RefTensor::ofFloats({1000}, zeros)};
    if (dtype == "f32")
      compare(source.c_str(), inputs, /*only32=*/true);
    else
      compare16(source.c_str(), dtype, inputs);
  }
}

TEST_F(RuntimeTest, SophiaItsEightBitFormAndItsHessianStep) {
  // Sophia on f32 and 8-bit m and h (1000 elements: three full blocks and
  // a partial one), the Hessian refresh, and labels sampled from logits
  // (f32 and 16-bit), against the evaluator. h is non-negative: |x| of
  // random values.
  std::uniform_int_distribution<int64_t> code(0, 255);
  std::vector<int64_t> mCodes(1000), hCodes(1000);
  for (int64_t i = 0; i < 1000; ++i) {
    mCodes[i] = code(rng);
    hCodes[i] = code(rng);
  }
  std::vector<float> absmax = {0.02f, 0.5f, 1e-5f, 0.0f};
  std::vector<float> h(1000);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  for (float &v : h)
    v = std::fabs(normal(rng));
  for (StringRef dtype : {"f32", "bf16", "f16"}) {
    SCOPED_TRACE(dtype.str());
    std::string source = llvm::join(llvm::split(StringRef(R"mlir(
    func.func @train_step(%p: tensor<1000xf32>, %g: tensor<1000xG>, %m: tensor<1000xf32>, %h: tensor<1000xf32>, %mc: tensor<1000xi8>, %ma: tensor<4xf32>, %hc: tensor<1000xi8>, %ha: tensor<4xf32>, %logits: tensor<6x50xG>, %t: tensor<i64>)
        -> (tensor<1000xf32>, tensor<1000xf32>, tensor<1000xf32>, tensor<1000xf32>, tensor<1000xi8>, tensor<4xf32>, tensor<1000xi8>, tensor<4xf32>, tensor<1000xf32>, tensor<6xi32>, tensor<6xi64>) {
      %lr = arith.constant dense<1.0e-2> : tensor<f32>
      %a:3 = train.sophia %p, %g, %m, %h, %lr {beta1 = 0.965 : f64, rho = 0.04 : f64, epsilon = 1.0e-15 : f64, weight_decay = 0.1 : f64, batch = 512 : i64} : tensor<1000xf32>, tensor<1000xG>, tensor<1000xf32>, tensor<1000xf32>, tensor<f32>
      %q:5 = train.sophia_8bit %p, %g, %mc, %ma, %hc, %ha, %lr {beta1 = 0.9 : f64, rho = 0.05 : f64, epsilon = 1.0e-12 : f64, weight_decay = 0.0 : f64, batch = 64 : i64, block = 256 : i64} : tensor<1000xf32>, tensor<1000xG>, tensor<1000xi8>, tensor<4xf32>, tensor<1000xi8>, tensor<4xf32>, tensor<f32>
      %e = train.hessian_ema %h, %g {beta2 = 0.99 : f64} : tensor<1000xf32>, tensor<1000xG>
      %y = train.sample %logits key(%t : tensor<i64>) {seed = 3 : i64, offset = 5 : i64} : tensor<6x50xG> -> tensor<6xi32>
      %z = train.sample %logits {seed = 0 : i64, offset = 0 : i64} : tensor<6x50xG> -> tensor<6xi64>
      return %a#0, %a#1, %a#2, %q#0, %q#1, %q#2, %q#3, %q#4, %e, %y, %z : tensor<1000xf32>, tensor<1000xf32>, tensor<1000xf32>, tensor<1000xf32>, tensor<1000xi8>, tensor<4xf32>, tensor<1000xi8>, tensor<4xf32>, tensor<1000xf32>, tensor<6xi32>, tensor<6xi64>
    })mlir"),
                                                "xG>"),
                                    ("x" + dtype + ">").str());
    std::vector<RefTensor> inputs = {{},
                                     {},
                                     {},
                                     RefTensor::ofFloats({1000}, h),
                                     RefTensor::ofInts({1000}, mCodes),
                                     RefTensor::ofFloats({4}, absmax),
                                     RefTensor::ofInts({1000}, hCodes),
                                     RefTensor::ofFloats({4}, absmax),
                                     {},
                                     RefTensor::ofInts({}, {7})};
    if (dtype == "f32")
      compare(source.c_str(), inputs, /*only32=*/true);
    else
      compare16(source.c_str(), dtype, inputs);
  }
}

TEST_F(RuntimeTest, LossScalingAndSkippedUpdates) {
  // The scale from the state, the unscaled f32 gradients and the new state;
  // then AdamW on them. With an infinite gradient element every unscaled
  // gradient is NaN, the state records the skip, and AdamW leaves the
  // weights and moments as they were.
  const char *source = R"mlir(
    func.func @train_step(%g0: tensor<6xf16>, %g1: tensor<2x3xf16>, %state: tensor<3xi64>, %p: tensor<6xf32>, %m: tensor<6xf32>, %v: tensor<6xf32>, %t: tensor<i64>)
        -> (tensor<f32>, tensor<6xf32>, tensor<2x3xf32>, tensor<3xi64>, tensor<6xf32>, tensor<6xf32>, tensor<6xf32>) {
      %s = train.loss_scale %state {initial = 1024.0 : f64} : tensor<3xi64> -> tensor<f32>
      %u:3 = train.unscale_gradients %g0, %g1 scale(%state) {initial = 1024.0 : f64, growth_interval = 6 : i64} : (tensor<6xf16>, tensor<2x3xf16>), tensor<3xi64> -> (tensor<6xf32>, tensor<2x3xf32>), tensor<3xi64>
      %lr = arith.constant dense<1.0e-2> : tensor<f32>
      %v2 = train.mul %v, %v : tensor<6xf32>
      %a:3 = train.adamw %p, %u#0, %m, %v2, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-08 : f64, weight_decay = 0.1 : f64} : tensor<6xf32>, tensor<6xf32>, tensor<6xf32>, tensor<6xf32>, tensor<f32>, tensor<i64>
      return %s, %u#0, %u#1, %u#2, %a#0, %a#1, %a#2 : tensor<f32>, tensor<6xf32>, tensor<2x3xf32>, tensor<3xi64>, tensor<6xf32>, tensor<6xf32>, tensor<6xf32>
    })mlir";
  float inf = std::numeric_limits<float>::infinity();
  // Clean step 5 of 6 at scale 1024 · 2^3: the scale doubles.
  compare16(source, "f16",
            {RefTensor::ofFloats({6}, {100.0f, -3.0f, 0.5f, 65504.0f, 1e-7f, 0.0f}),
             {}, RefTensor::ofInts({3}, {3, 5, 1}), {}, {}, {},
             RefTensor::ofInts({}, {4})},
            /*exact=*/true);
  // An overflow: everything skipped, the scale halves.
  std::vector<RefTensor> overflow = {
      RefTensor::ofFloats({6}, {100.0f, -3.0f, inf, 1.0f, 2.0f, 3.0f}),
      RefTensor::ofFloats({2, 3}, {1, 2, 3, 4, 5, 6}),
      RefTensor::ofInts({3}, {-2, 4, 7}),
      RefTensor::ofFloats({6}, {0.5f, -1, 2, 0, 1, 3}),
      RefTensor::ofFloats({6}, {0.1f, 0.2f, 0, 0, 0, 0}),
      RefTensor::ofFloats({6}, {0.3f, 0.1f, 0, 0, 0, 0}),
      RefTensor::ofInts({}, {4})};
  compare16(source, "f16", overflow, /*exact=*/true);
  // What the two agree on: the skip as the op defines it.
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(source, &context);
  ASSERT_TRUE(module);
  auto func = module->lookupSymbol<func::FuncOp>("train_step");
  FailureOr<SmallVector<RefTensor>> results = evaluate(func, overflow);
  ASSERT_TRUE(succeeded(results));
  EXPECT_EQ((*results)[0].floats[0], 256.0f); // 1024 · 2^-2
  EXPECT_TRUE(std::isnan((*results)[2].floats[0])); // the finite tensor too
  EXPECT_EQ((*results)[3].ints, (std::vector<int64_t>{-3, 0, 8}));
  EXPECT_EQ((*results)[4].floats, overflow[3].floats); // weights kept
  EXPECT_EQ((*results)[5].floats, overflow[4].floats); // m kept
  // A clean step: gradients over the scale, the scale doubles after the
  // sixth clean step.
  std::vector<RefTensor> clean = overflow;
  clean[0] = RefTensor::ofFloats({6}, {8192.0f, -4096.0f, 1, 2, 3, 4});
  clean[2] = RefTensor::ofInts({3}, {3, 5, 1});
  results = evaluate(func, clean);
  ASSERT_TRUE(succeeded(results));
  EXPECT_EQ((*results)[1].floats[0], 1.0f); // 8192 / (1024 · 2^3)
  EXPECT_EQ((*results)[1].floats[1], -0.5f);
  EXPECT_EQ((*results)[3].ints, (std::vector<int64_t>{4, 0, 1}));
  EXPECT_NE((*results)[4].floats, clean[3].floats); // updated
}

/// Values at the edges of the 16-bit formats, as f32: the largest finite
/// values and what rounds past them, the smallest normal, subnormals and
/// what rounds to zero, signed zeros, infinities and NaN.
static std::vector<float> edgeValues() {
  float inf = std::numeric_limits<float>::infinity();
  return {65504.0f,  -65504.0f, 65519.0f, 65520.0f,  70000.0f, 3.0e38f,
          -3.4e38f,  6.1035156e-5f, 5.9604645e-8f, 2.9802322e-8f,
          2.9802326e-8f, 1.0e-6f, -3.0e-7f, 1.0e-40f, 0.0f, -0.0f,
          inf,       -inf,      std::nanf(""), 1.0f, -1.5f, 0.33333334f,
          1.00390625f, 1.01171875f, 1.0009766f, 2049.0f, 2051.0f, 1.0e4f};
}

TEST_F(RuntimeTest, ConversionsAndElementwiseAtThe16BitLimits) {
  // train.cast rounds f32 to 16 bits (and back, and between the two), and
  // the elementwise kernels round what they store, bit for bit as the
  // evaluator does, NaN and infinities included.
  std::vector<float> values = edgeValues();
  int64_t n = static_cast<int64_t>(values.size());
  for (StringRef dtype : {"bf16", "f16"}) {
    SCOPED_TRACE(dtype.str());
    StringRef other = dtype == "bf16" ? "f16" : "bf16";
    std::string source = llvm::formatv(R"mlir(
    func.func @train_step(%x: tensor<{0}xf32>, %y: tensor<{0}x{1}>)
        -> (tensor<{0}x{1}>, tensor<{0}xf32>, tensor<{0}x{2}>, tensor<{0}x{1}>, tensor<{0}x{1}>, tensor<{0}x{1}>, tensor<{0}x{1}>, tensor<{0}x{1}>) {
      %0 = train.cast %x : tensor<{0}xf32> -> tensor<{0}x{1}>
      %1 = train.cast %y : tensor<{0}x{1}> -> tensor<{0}xf32>
      %2 = train.cast %y : tensor<{0}x{1}> -> tensor<{0}x{2}>
      %3 = train.add %y, %y : tensor<{0}x{1}>
      %4 = train.mul %y, %y : tensor<{0}x{1}>
      %5 = train.scale %y {{factor = 0.5 : f64} : tensor<{0}x{1}>
      %6 = train.gelu %y : tensor<{0}x{1}>
      %7 = train.silu %y : tensor<{0}x{1}>
      return %0, %1, %2, %3, %4, %5, %6, %7 : tensor<{0}x{1}>, tensor<{0}xf32>, tensor<{0}x{2}>, tensor<{0}x{1}>, tensor<{0}x{1}>, tensor<{0}x{1}>, tensor<{0}x{1}>, tensor<{0}x{1}>
    })mlir", n, dtype, other).str();
    compare16(source.c_str(), dtype,
              {RefTensor::ofFloats({n}, values), RefTensor::ofFloats({n}, values)},
              /*exact=*/true);
  }
}

TEST(Float16Conversions, MatchAPFloatRoundToNearestEven) {
  // Every 16-bit value widens exactly and narrows back to itself; f32
  // values (edges, every 2^-16th bit pattern, and those just around each
  // rounding boundary of both formats) narrow as APFloat's
  // round-to-nearest-even does.
  auto viaAPFloat = [](float value, const llvm::fltSemantics &semantics) {
    llvm::APFloat wide(value);
    bool losesInfo = false;
    wide.convert(semantics, llvm::APFloat::rmNearestTiesToEven, &losesInfo);
    return static_cast<uint16_t>(wide.bitcastToAPInt().getZExtValue());
  };
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    uint16_t b = static_cast<uint16_t>(bits);
    float bf = trainmem::floatFromBF16Bits(b), h = trainmem::floatFromF16Bits(b);
    llvm::APFloat apBf(llvm::APFloat::BFloat(), llvm::APInt(16, bits));
    llvm::APFloat apH(llvm::APFloat::IEEEhalf(), llvm::APInt(16, bits));
    bool losesInfo = false;
    apBf.convert(llvm::APFloat::IEEEsingle(), llvm::APFloat::rmNearestTiesToEven, &losesInfo);
    apH.convert(llvm::APFloat::IEEEsingle(), llvm::APFloat::rmNearestTiesToEven, &losesInfo);
    if (std::isnan(bf)) {
      EXPECT_TRUE(apBf.isNaN());
      EXPECT_TRUE(std::isnan(trainmem::floatFromBF16Bits(trainmem::bf16BitsFromFloat(bf))));
    } else {
      EXPECT_EQ(trainmem::floatBits(bf), trainmem::floatBits(apBf.convertToFloat())) << bits;
      EXPECT_EQ(trainmem::bf16BitsFromFloat(bf), b) << bits;
    }
    if (std::isnan(h)) {
      EXPECT_TRUE(apH.isNaN());
    } else {
      EXPECT_EQ(trainmem::floatBits(h), trainmem::floatBits(apH.convertToFloat())) << bits;
      EXPECT_EQ(trainmem::f16BitsFromFloat(h), b) << bits;
    }
  }
  std::vector<float> probes = edgeValues();
  for (uint64_t bits = 0; bits < (1ull << 32); bits += 65521)
    probes.push_back(trainmem::floatFromBits(static_cast<uint32_t>(bits)));
  // Around each boundary between two 16-bit values: the midpoint and its
  // f32 neighbours.
  for (uint32_t bits = 0; bits < 65535; bits += 7) {
    for (bool bf16 : {true, false}) {
      float lo = bf16 ? trainmem::floatFromBF16Bits(bits) : trainmem::floatFromF16Bits(bits);
      float hi = bf16 ? trainmem::floatFromBF16Bits(bits + 1) : trainmem::floatFromF16Bits(bits + 1);
      if (!std::isfinite(lo) || !std::isfinite(hi))
        continue;
      float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);
      probes.push_back(mid);
      probes.push_back(std::nextafter(mid, -INFINITY));
      probes.push_back(std::nextafter(mid, INFINITY));
    }
  }
  for (float value : probes) {
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(trainmem::floatFromBF16Bits(trainmem::bf16BitsFromFloat(value))));
      EXPECT_TRUE(std::isnan(trainmem::floatFromF16Bits(trainmem::f16BitsFromFloat(value))));
      continue;
    }
    EXPECT_EQ(trainmem::bf16BitsFromFloat(value), viaAPFloat(value, llvm::APFloat::BFloat())) << value;
    EXPECT_EQ(trainmem::f16BitsFromFloat(value), viaAPFloat(value, llvm::APFloat::IEEEhalf())) << value;
  }
}

TEST_F(RuntimeTest, WholeTinyStepGradientsMatchTheEvaluator) {
  // The tiny preset with dropout, differentiated into a step that returns
  // the loss and every parameter's gradient.
  ModelConfig config = *getPreset("tiny");
  config.dropout = 0.1;
  OwningOpRef<ModuleOp> module = buildModel(&context, config);
  PassManager pm(&context);
  TrainAutodiffPassOptions options;
  options.optimizer = "none";
  pm.addPass(createTrainAutodiffPass(options));
  ASSERT_TRUE(succeeded(pm.run(*module)));
  auto func = module->lookupSymbol<func::FuncOp>("train_step");
  compare(*module, modelStepInputs(func));
}

} // namespace
