//===- ExtensionTest.cpp - a new op works with every pass -----------------===//
//
// The design's promise: an op that implements the train dialect's
// interfaces works with autodiff, the memory analysis and report, and remat
// without a change to any of them. The op here (trainmem_test.square,
// TestDialect/) is defined only by this test; it replaces GPT's GELU in a
// small model.
//
//===----------------------------------------------------------------------===//

#include "TestDialect.h"
#include "TestModels.h"

#include "trainmem/Analysis/MemoryAnalysis.h"
#include "trainmem/Conversion/Passes.h"
#include "trainmem/Conversion/RuntimeLowering.h"
#include "trainmem/Evaluator/Evaluator.h"
#include "trainmem/Run/Session.h"
#include "trainmem/Run/Step.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Model/ModelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace mlir::train;

namespace {

class ExtensionTest : public ::testing::Test {
protected:
  ExtensionTest() {
    DialectRegistry registry;
    registry.insert<TrainDialect, func::FuncDialect, arith::ArithDialect,
                    trainmem_test::TestDialect>();
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
    static bool registered = [] {
      registerTrainPasses();
      registerTrainConversionPasses();
      return true;
    }();
    (void)registered;
  }

  /// A 2-layer GPT whose MLP activation is trainmem_test.square (with
  /// `asMul`, the same x · x as train.mul %x, %x).
  OwningOpRef<ModuleOp> model(bool asMul = false) {
    ModelConfig config = smallModel("tiny", {2, 8, 2, 2, 16, 4, 2});
    OwningOpRef<ModuleOp> gpt = buildModel(&context, config);
    std::string text;
    llvm::raw_string_ostream os(text);
    gpt->print(os);
    size_t replaced = 0;
    for (size_t at = text.find("train.gelu"); at != std::string::npos;
         at = text.find("train.gelu", at)) {
      if (asMul) {
        // "train.gelu %x : T" -> "train.mul %x, %x : T"
        size_t operand = at + strlen("train.gelu ");
        size_t end = text.find(' ', operand);
        std::string x = text.substr(operand, end - operand);
        text.replace(at, end - at, "train.mul " + x + ", " + x);
      } else {
        text.replace(at, strlen("train.gelu"), "trainmem_test.square");
      }
      ++replaced;
    }
    EXPECT_EQ(replaced, 2u);
    return parseSourceString<ModuleOp>(text, &context);
  }

  LogicalResult run(ModuleOp module, StringRef pipeline) {
    PassManager pm(&context);
    if (failed(parsePassPipeline(pipeline, pm)))
      return failure();
    return pm.run(module);
  }

  static size_t count(Operation *root, StringRef name) {
    size_t n = 0;
    root->walk([&](Operation *op) { n += op->getName().getStringRef() == name; });
    return n;
  }

  MLIRContext context{MLIRContext::Threading::DISABLED};
};

TEST_F(ExtensionTest, AutodiffBuildsTheVJPTheOpDefines) {
  OwningOpRef<ModuleOp> module = model();
  ASSERT_TRUE(module);
  ASSERT_TRUE(succeeded(run(*module, "train-autodiff")));
  // Each square's gradient is 2 · x · dy: a train.scale by 2 of a train.mul
  // that reads the square's input (through the block results that carry it
  // from the forward to the backward).
  size_t vjps = 0;
  module->walk([&](ScaleOp scale) {
    auto mul = scale.getInput().getDefiningOp<MulOp>();
    if (!mul || scale.getFactor().convertToDouble() != 2.0)
      return;
    Value x = resolveRegionResult(mul.getLhs());
    if (x.getDefiningOp() &&
        llvm::any_of(x.getUsers(), [](Operation *user) {
          return isa<trainmem_test::SquareOp>(user);
        }))
      ++vjps;
  });
  EXPECT_EQ(vjps, 2u);
}

TEST_F(ExtensionTest, MemoryAnalysisCountsItsCostAndWhatItSaves) {
  OwningOpRef<ModuleOp> module = model();
  ASSERT_TRUE(module);
  ASSERT_TRUE(succeeded(run(*module, "train-autodiff")));
  MemoryAnalysis analysis(*module);
  ASSERT_EQ(analysis.getFunctions().size(), 1u);
  const FunctionMemory &memory = analysis.getFunctions().front();
  // Its FLOPs, from CostOpInterface, are in the forward total: one per
  // element of [batch 2, seq 4, ffn 16] per layer.
  uint64_t squareFlops = 0;
  module->walk([&](trainmem_test::SquareOp square) {
    squareFlops += cast<CostOpInterface>(square.getOperation()).getFlops();
  });
  EXPECT_EQ(squareFlops, 2u * 2 * 4 * 16);
  EXPECT_GE(memory.getFlops(Phase::Forward), squareFlops);
  // Its input lives from the forward into the backward (the VJP reads it):
  // a saved activation.
  module->walk([&](trainmem_test::SquareOp square) {
    const Buffer *input = memory.lookupBuffer(square.getInput());
    ASSERT_NE(input, nullptr);
    EXPECT_EQ(memory.getPhase(square), Phase::Forward);
    EXPECT_GT(input->lastPoint, memory.getPoint(square));
    Operation *lastReader = memory.getSchedule()[input->lastPoint];
    EXPECT_EQ(memory.getPhase(lastReader), Phase::Backward);
  });
  // The report pass runs on it as on any step.
  ASSERT_TRUE(succeeded(
      run(*module, "train-memory-report{output=/dev/null format=json}")));
}

TEST_F(ExtensionTest, RematRecomputesItAndLowersThePeak) {
  OwningOpRef<ModuleOp> plain = model();
  ASSERT_TRUE(plain);
  OwningOpRef<ModuleOp> remat = plain->clone();
  ASSERT_TRUE(succeeded(run(*plain, "train-autodiff")));
  ASSERT_TRUE(succeeded(run(*remat, "train-autodiff,train-remat{policy=full},"
                                    "train-materialize-remat")));
  // Forward squares, plus one recomputed copy per layer for the backward.
  EXPECT_EQ(count(*plain, "trainmem_test.square"), 2u);
  EXPECT_EQ(count(*remat, "trainmem_test.square"), 4u);
  size_t recomputed = 0;
  remat->walk([&](trainmem_test::SquareOp square) {
    recomputed += square->hasAttr(kRecomputeAttrName);
  });
  EXPECT_EQ(recomputed, 2u);
  MemoryAnalysis plainMemory(*plain), rematMemory(*remat);
  auto saved = [](const MemoryAnalysis &analysis) {
    return analysis.getFunctions().front().getTotals()[static_cast<size_t>(
        MemoryCategory::Activations)];
  };
  EXPECT_LT(saved(rematMemory), saved(plainMemory));
  EXPECT_GT(rematMemory.getFunctions().front().getRecomputeFlops(), 0u);
}

/// The square's runtime lowering, attached by the test as a dialect would
/// attach its own: x · x with the runtime's elementwise product.
struct SquareRuntimeLowering
    : public RuntimeLoweringOpInterface::ExternalModel<SquareRuntimeLowering,
                                                       trainmem_test::SquareOp> {
  LogicalResult lowerToRuntime(Operation *op,
                               RuntimeCallBuilder &builder) const {
    auto square = cast<trainmem_test::SquareOp>(op);
    Value x = square.getInput();
    return builder.emitContiguous(
        op, rt::mul{.a = builder.offset(x),
                    .b = builder.offset(x),
                    .out = builder.offset(square),
                    .n = RuntimeCallBuilder::elements(square)});
  }
};

/// The square on the reference evaluator: x · x in double, rounded to f32
/// (as the evaluator's own elementwise ops compute).
struct SquareEvaluation
    : public EvaluableOpInterface::ExternalModel<SquareEvaluation,
                                                 trainmem_test::SquareOp> {
  LogicalResult evaluate(Operation *op, EvaluationState &state) const {
    auto square = cast<trainmem_test::SquareOp>(op);
    const RefTensor &x = state.get(square.getInput());
    RefTensor y = RefTensor::ofFloats(x.shape, x.floats);
    for (float &v : y.floats)
      v = static_cast<float>(static_cast<double>(v) * static_cast<double>(v));
    state.set(square.getResult(), std::move(y));
    return success();
  }
};

TEST_F(ExtensionTest, LoweringNeedsItsRuntimeModel) {
  // Without a RuntimeLoweringOpInterface model the lowering names the op.
  OwningOpRef<ModuleOp> module = model();
  ASSERT_TRUE(module);
  std::string diagnostics;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diagnostic) {
    diagnostics += diagnostic.str() + "\n";
    return success();
  });
  EXPECT_TRUE(failed(run(*module, "train-autodiff,convert-train-to-runtime")));
  EXPECT_NE(diagnostics.find("'trainmem_test.square' op has no lowering to "
                             "the trainmem runtime"),
            std::string::npos)
      << diagnostics;
}

TEST_F(ExtensionTest, TrainsOnTheRuntimeThroughItsModel) {
  DialectRegistry registry;
  registerRunDialects(registry);
  context.appendDialectRegistry(registry);
  trainmem_test::SquareOp::attachInterface<SquareRuntimeLowering>(context);

  // The same model with x · x spelled as train.mul: the losses agree (the
  // square's VJP, 2 · (x · dy), and mul's, x · dy + dy · x, round alike).
  auto losses = [&](OwningOpRef<ModuleOp> module,
                    StringRef backend = "cpu") {
    std::vector<float> result;
    TrainStepPipelineOptions pipeline;
    pipeline.autodiff = "lr=1e-2 clip-norm=1.0";
    if (!module || failed(prepareStep(*module, pipeline)))
      return result;
    SessionOptions options;
    options.backend = backend.str();
    options.seed = 3;
    llvm::Expected<std::unique_ptr<Session>> created =
        Session::create(std::move(module), options);
    if (!created) {
      ADD_FAILURE() << llvm::toString(created.takeError());
      return result;
    }
    std::unique_ptr<Session> session = std::move(*created);
    if (llvm::Error error = session->start()) {
      ADD_FAILURE() << llvm::toString(std::move(error));
      return result;
    }
    if (llvm::Error error = session->initialize()) {
      ADD_FAILURE() << llvm::toString(std::move(error));
      return result;
    }
    Corpus corpus("In the beginning God created the heaven and the earth. "
                  "And the earth was without form, and void.");
    std::vector<int64_t> tokens, targets;
    for (int64_t step = 1; step <= 3; ++step) {
      corpus.batch(3, step, session->getBatchSize(), session->getSeqLen(),
                   tokens, targets);
      llvm::Expected<float> loss = session->runStep(step, tokens, targets);
      if (!loss)
        ADD_FAILURE() << llvm::toString(loss.takeError());
      result.push_back(loss ? *loss : NAN);
    }
    return result;
  };
  std::vector<float> square = losses(model());
  std::vector<float> mul = losses(model(/*asMul=*/true));
  ASSERT_EQ(square.size(), 3u);
  ASSERT_EQ(mul.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(std::isfinite(square[i]));
    EXPECT_NEAR(square[i], mul[i], 1e-6 * std::abs(mul[i])) << "step " << i;
  }
  EXPECT_LT(square[2], square[0]);

  // The reference evaluator runs it through the model the test attaches:
  // the same losses as the runtime, to the runtime's 1e-5.
  trainmem_test::SquareOp::attachInterface<SquareEvaluation>(context);
  std::vector<float> reference = losses(model(), "interpret");
  ASSERT_EQ(reference.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_NEAR(square[i], reference[i], 1e-5 * std::abs(reference[i]))
        << "step " << i;
}

TEST_F(ExtensionTest, EvaluatorNeedsItsModel) {
  // Without an EvaluableOpInterface model the evaluator names the op.
  OwningOpRef<ModuleOp> module = model();
  ASSERT_TRUE(module);
  auto forward = module->lookupSymbol<func::FuncOp>("forward");
  ASSERT_TRUE(forward);
  std::vector<RefTensor> args;
  for (BlockArgument argument : forward.getArguments()) {
    auto type = cast<RankedTensorType>(argument.getType());
    std::vector<int64_t> shape(type.getShape().begin(), type.getShape().end());
    int64_t n = type.getNumElements();
    args.push_back(isa<IntegerType>(type.getElementType())
                       ? RefTensor::ofInts(shape, std::vector<int64_t>(n, 1))
                       : RefTensor::ofFloats(shape, std::vector<float>(n, 0.5f)));
  }
  std::string diagnostics;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diagnostic) {
    diagnostics += diagnostic.str() + "\n";
    return success();
  });
  EXPECT_TRUE(failed(evaluate(forward, args)));
  EXPECT_NE(diagnostics.find("reference evaluator: unsupported op "
                             "'trainmem_test.square'"),
            std::string::npos)
      << diagnostics;
  // With it, the forward runs.
  trainmem_test::SquareOp::attachInterface<SquareEvaluation>(context);
  FailureOr<SmallVector<RefTensor>> loss = evaluate(forward, args);
  ASSERT_TRUE(succeeded(loss));
  EXPECT_TRUE(std::isfinite((*loss)[0].scalarFloat()));
}

} // namespace
