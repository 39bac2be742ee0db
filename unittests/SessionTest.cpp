//===- SessionTest.cpp - the run library: sessions, checkpoints, backends ---===//
//
// The library trainmem-run is a command line over (trainmem/Run/Session.h),
// used directly: a run stopped and resumed from its checkpoint ends
// bit-identical to one that never stopped; the CPU backend and the
// reference evaluator agree on the losses; bad backends, steps and data are
// refused with errors that say why.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Run/Session.h"
#include "TestModels.h"
#include "trainmem-runtime/Runtime.h"
#include "trainmem/Model/ModelBuilder.h"
#include "trainmem/Run/Step.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace mlir;
using namespace mlir::train;

namespace {

/// The message of `error`; empty on success.
std::string messageOf(llvm::Error error) {
  return error ? llvm::toString(std::move(error)) : std::string();
}

class SessionTest : public StepTest {
protected:
  SessionTest() { context.printOpOnDiagnostic(false); }

  /// The tiny GPT in f32, differentiated with AdamW (or `autodiff`).
  OwningOpRef<ModuleOp> model(StringRef autodiff = "lr=3e-3 clip-norm=1.0",
                              std::optional<StringRef> quantize = {}) {
    ModelConfig config = smallModel("tiny", {2, 16, 2, 2, 32, 16, 2});
    OwningOpRef<ModuleOp> module = buildModel(&context, config);
    TrainStepPipelineOptions pipeline;
    pipeline.autodiff = autodiff.str();
    pipeline.quantize = quantize.has_value();
    if (quantize)
      pipeline.quantizeOptions = quantize->str();
    if (!module || failed(prepareStep(*module, pipeline)))
      return nullptr;
    return module;
  }

  std::unique_ptr<Session> session(StringRef backend,
                                   OwningOpRef<ModuleOp> module) {
    if (!module) {
      ADD_FAILURE() << "the model did not build";
      return nullptr;
    }
    SessionOptions options;
    options.backend = backend.str();
    options.threads = 2;
    options.seed = 7;
    llvm::Expected<std::unique_ptr<Session>> session =
        Session::create(std::move(module), options);
    if (!session) {
      ADD_FAILURE() << messageOf(session.takeError());
      return nullptr;
    }
    if (std::string error = messageOf((*session)->start()); !error.empty()) {
      ADD_FAILURE() << error;
      return nullptr;
    }
    return std::move(*session);
  }

  /// The shipped corpus (real text).
  const Corpus &corpus() {
    if (!text) {
      llvm::Expected<Corpus> loaded = Corpus::load(TRAINMEM_CORPUS);
      if (!loaded)
        ADD_FAILURE() << messageOf(loaded.takeError());
      else
        text = std::move(*loaded);
    }
    return *text;
  }

  /// Trains steps first..last and returns their losses.
  std::vector<float> train(Session &session, int64_t first, int64_t last) {
    std::vector<float> losses;
    std::vector<int64_t> tokens, targets;
    for (int64_t step = first; step <= last; ++step) {
      corpus().batch(7, step, session.getBatchSize(), session.getSeqLen(),
                     tokens, targets);
      llvm::Expected<float> loss = session.runStep(step, tokens, targets);
      if (!loss)
        ADD_FAILURE() << messageOf(loss.takeError());
      losses.push_back(loss ? *loss : NAN);
    }
    return losses;
  }

  std::string scratchDir(StringRef name) {
    SmallString<128> dir;
    EXPECT_FALSE(llvm::sys::fs::createUniqueDirectory("trainmem-session", dir));
    llvm::sys::path::append(dir, name);
    return dir.str().str();
  }

  std::optional<Corpus> text;
};

TEST_F(SessionTest, ResumedRunIsBitIdentical) {
  for (bool quantized : {false, true}) {
    SCOPED_TRACE(quantized ? "8-bit state" : "f32 state");
    std::optional<StringRef> quantize;
    if (quantized)
      quantize = StringRef("min-size=64 block=64");

    // Four steps without a stop.
    std::unique_ptr<Session> whole =
        session("cpu", model("lr=3e-3 clip-norm=1.0", quantize));
    ASSERT_TRUE(whole);
    ASSERT_EQ(messageOf(whole->initialize()), "");
    std::vector<float> straight = train(*whole, 1, 4);

    // Two steps, a checkpoint, a new session from it, two more steps.
    RunIdentity identity{7, corpus().size(), corpus().fingerprint()};
    std::string dir = scratchDir("ckpt");
    {
      std::unique_ptr<Session> first =
          session("cpu", model("lr=3e-3 clip-norm=1.0", quantize));
      ASSERT_TRUE(first);
      ASSERT_EQ(messageOf(first->initialize()), "");
      train(*first, 1, 2);
      ASSERT_EQ(messageOf(checkSaveDir(dir)), "");
      ASSERT_EQ(messageOf(first->save(dir, 2, identity)), "");
    }
    std::unique_ptr<Session> second =
        session("cpu", model("lr=3e-3 clip-norm=1.0", quantize));
    ASSERT_TRUE(second);
    llvm::Expected<Checkpoint> read =
        readCheckpoint(dir, second->getLayout().arguments);
    ASSERT_TRUE(static_cast<bool>(read)) << messageOf(read.takeError());
    Checkpoint &checkpoint = *read;
    EXPECT_EQ(checkpoint.step, 2);
    ASSERT_TRUE(checkpoint.identity);
    EXPECT_EQ(checkpoint.identity->dataHash, corpus().fingerprint());
    second->restore(checkpoint);
    std::vector<float> resumed = train(*second, 3, 4);

    ASSERT_EQ(straight.size(), 4u);
    ASSERT_EQ(resumed.size(), 2u);
    EXPECT_EQ(std::memcmp(&straight[2], resumed.data(), 2 * sizeof(float)), 0);
    unsigned compared = 0;
    for (const TensorSlot &slot : whole->getLayout().arguments) {
      if (!isState(slot))
        continue;
      EXPECT_EQ(whole->readState(slot), second->readState(slot))
          << slot.roleName().str() << " " << slot.key;
      ++compared;
    }
    EXPECT_GT(compared, 0u);
    // The quantized run keeps 8-bit codes.
    bool hasCodes =
        llvm::any_of(whole->getLayout().arguments, [](const TensorSlot &slot) {
          return slot.dtypeName() == "i8";
        });
    EXPECT_EQ(hasCodes, quantized);
  }
}

// The kernel profile: every call of a step is numbered in program order
// and traced to the location of the op it was lowered from; its seconds
// by call and by kernel are the same time; each step's calls count once
// per step.
TEST_F(SessionTest, TheProfileTracesEachCallToItsOp) {
  std::unique_ptr<Session> run = session("cpu", model());
  ASSERT_TRUE(run);
  ASSERT_EQ(messageOf(run->initialize()), "");
  std::vector<Location> locations = run->getKernelCallLocations();
  ASSERT_FALSE(locations.empty());
  for (Location loc : locations)
    EXPECT_FALSE(isa<UnknownLoc>(loc));
  EXPECT_TRUE(run->getProfile().empty());
  ASSERT_TRUE(run->startProfile());
  train(*run, 1, 2);
  std::vector<double> byCall = run->getProfileByCall();
  EXPECT_EQ(byCall.size(), locations.size());
  double callSeconds = 0, kernelSeconds = 0;
  for (double seconds : byCall) {
    EXPECT_GE(seconds, 0.0);
    callSeconds += seconds;
  }
  uint64_t calls = 0;
  for (const Session::KernelTime &kernel : run->getProfile()) {
    kernelSeconds += kernel.seconds;
    calls += kernel.calls;
  }
  EXPECT_EQ(calls, 2 * locations.size());
  EXPECT_NEAR(callSeconds, kernelSeconds, 1e-9 * kernelSeconds + 1e-12);
  // Most time first; a matrix product among them.
  std::vector<Session::KernelTime> kernels = run->getProfile();
  for (size_t i = 1; i < kernels.size(); ++i)
    EXPECT_GE(kernels[i - 1].seconds, kernels[i].seconds);
  EXPECT_TRUE(llvm::any_of(kernels, [](const Session::KernelTime &k) {
    return k.kernel == "matmul";
  }));
}

TEST_F(SessionTest, BackendsAgreeOnTheLosses) {
  std::unique_ptr<Session> cpu = session("cpu", model());
  std::unique_ptr<Session> reference = session("interpret", model());
  ASSERT_TRUE(cpu && reference);
  EXPECT_EQ(cpu->getBackend(), "cpu");
  EXPECT_TRUE(cpu->getMeasuredPeak());
  EXPECT_FALSE(reference->getMeasuredPeak());
  ASSERT_EQ(messageOf(cpu->initialize()), "");
  ASSERT_EQ(messageOf(reference->initialize()), "");
  std::vector<float> a = train(*cpu, 1, 3), b = train(*reference, 1, 3);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], 1e-5 * std::abs(b[i])) << "step " << (i + 1);
  // The arena high-water mark stays within the plan.
  EXPECT_LE(*cpu->getMeasuredPeak(), cpu->getLayout().arenaBytes);
  EXPECT_EQ(cpu->getVocab(), 256);
}

TEST_F(SessionTest, RefusesWhatItCannotRun) {
  // cuda is built where the CUDA toolkit is (then a context needs a GPU:
  // cuda-backend.test), a known name that is not built elsewhere.
  std::string built = tmrt_backend_names();
  if (built == "cpu") {
    EXPECT_EQ(messageOf(Session::checkBackend("cuda")),
              "backend 'cuda' is not built into this runtime (built: cpu)");
    EXPECT_EQ(messageOf(Session::checkBackend("tpu")),
              "unknown backend 'tpu' (expected cpu or interpret)");
  } else {
    EXPECT_EQ(built, "cpu, cuda");
    EXPECT_EQ(messageOf(Session::checkBackend("cuda")), "");
    EXPECT_EQ(messageOf(Session::checkBackend("tpu")),
              "unknown backend 'tpu' (expected cpu or cuda or interpret)");
  }
  EXPECT_EQ(messageOf(Session::checkBackend("interpret")), "");

  // A step without an optimizer returns gradients and updates nothing.
  SessionOptions options;
  llvm::Expected<std::unique_ptr<Session>> noOptimizer =
      Session::create(model("optimizer=none"), options);
  ASSERT_FALSE(static_cast<bool>(noOptimizer));
  std::string error = messageOf(noOptimizer.takeError());
  EXPECT_NE(error.find("the step updates no parameter"), std::string::npos)
      << error;

  // Data: a directory is not a corpus; a missing file names the file.
  llvm::Expected<Corpus> directory = Corpus::load(scratchDir(""));
  ASSERT_FALSE(static_cast<bool>(directory));
  error = messageOf(directory.takeError());
  EXPECT_NE(error.find("is not a regular file"), std::string::npos) << error;
  llvm::Expected<Corpus> missing = Corpus::load("/nonexistent/corpus.txt");
  ASSERT_FALSE(static_cast<bool>(missing));
  error = messageOf(missing.takeError());
  EXPECT_NE(error.find("cannot read data '/nonexistent/corpus.txt'"),
            std::string::npos)
      << error;

  // A checkpoint of another step is refused before anything is touched.
  std::unique_ptr<Session> small = session("cpu", model());
  ASSERT_TRUE(small);
  ASSERT_EQ(messageOf(small->initialize()), "");
  std::string dir = scratchDir("ckpt");
  ASSERT_EQ(messageOf(small->save(dir, 1, RunIdentity{})), "");
  std::unique_ptr<Session> sgd = session("cpu", model("optimizer=sgd"));
  ASSERT_TRUE(sgd);
  llvm::Expected<Checkpoint> read =
      readCheckpoint(dir, sgd->getLayout().arguments);
  ASSERT_FALSE(static_cast<bool>(read));
  std::string mismatch = llvm::toString(read.takeError());
  EXPECT_NE(mismatch.find("does not match this step"), std::string::npos)
      << mismatch;
}

} // namespace
