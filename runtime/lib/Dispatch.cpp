//===- Dispatch.cpp - the kernels' C entry points -------------------------===//
//
// tmrt_<kernel> (Runtime.h) calls the kernel of the context's backend
// (Backend.h) and counts the call, timing it while the context profiles.
// Generated from Kernels.def, which is checked here against the prototypes
// of Runtime.h.
//
//===----------------------------------------------------------------------===//

#include "Backend.h"
#include "Context.h"

#include <chrono>
#include <type_traits>

// Each entry point of Runtime.h has the prototype Kernels.def gives it.
#define TMRT_KERNEL(name, parameters, arguments)                               \
  static_assert(std::is_same_v<decltype(&tmrt_##name), void(*) parameters>,   \
                "tmrt_" #name " in Runtime.h differs from Kernels.def");
#include "trainmem-runtime/Kernels.def"

namespace {

/// The kernels' numbers in the profile.
enum KernelNumber : int64_t {
#define TMRT_KERNEL(name, parameters, arguments) kKernel_##name,
#include "trainmem-runtime/Kernels.def"
  kKernelCount
};

constexpr const char *kKernelNames[] = {
#define TMRT_KERNEL(name, parameters, arguments) #name,
#include "trainmem-runtime/Kernels.def"
};

/// Adds the wall time from its construction to its destruction (after
/// the backend has run the kernel) to kernel `number`'s total.
class ProfileScope {
public:
  ProfileScope(tmrt_context *ctx, int64_t number)
      : ctx(ctx), number(number), start(std::chrono::steady_clock::now()) {}
  ~ProfileScope() {
    if (ctx->backend->synchronize)
      ctx->backend->synchronize(ctx);
    std::chrono::duration<double> elapsed =
        std::chrono::steady_clock::now() - start;
    tmrt_context::KernelTime &time = ctx->profile[number];
    ++time.calls;
    time.seconds += elapsed.count();
    if (ctx->callSeconds.size() <= ctx->nextCall)
      ctx->callSeconds.resize(ctx->nextCall + 1, 0.0);
    ctx->callSeconds[ctx->nextCall++] += elapsed.count();
  }

private:
  tmrt_context *ctx;
  int64_t number;
  std::chrono::steady_clock::time_point start;
};

} // namespace

extern "C" {

#define TMRT_KERNEL(name, parameters, arguments)                               \
  void tmrt_##name parameters {                                                \
    ++ctx->kernelCalls;                                                        \
    if (ctx->profile.empty()) {                                                \
      ctx->backend->name arguments;                                            \
      return;                                                                  \
    }                                                                          \
    ProfileScope scope(ctx, kKernel_##name);                                   \
    ctx->backend->name arguments;                                              \
  }
#include "trainmem-runtime/Kernels.def"

void tmrt_profile_enable(tmrt_context *ctx, int32_t on) {
  ctx->profile.assign(on ? kKernelCount : 0, {});
  ctx->callSeconds.clear();
  ctx->nextCall = 0;
}

void tmrt_profile_step_begin(tmrt_context *ctx) { ctx->nextCall = 0; }

int64_t tmrt_profile_step_calls(tmrt_context *ctx) {
  return static_cast<int64_t>(ctx->callSeconds.size());
}

double tmrt_profile_call_seconds(tmrt_context *ctx, int64_t call) {
  return call >= 0 && call < static_cast<int64_t>(ctx->callSeconds.size())
             ? ctx->callSeconds[call]
             : 0.0;
}

int64_t tmrt_profile_kernels(void) { return kKernelCount; }

const char *tmrt_profile_name(int64_t kernel) {
  return kernel >= 0 && kernel < kKernelCount ? kKernelNames[kernel] : nullptr;
}

uint64_t tmrt_profile_calls(tmrt_context *ctx, int64_t kernel) {
  return kernel >= 0 && kernel < static_cast<int64_t>(ctx->profile.size())
             ? ctx->profile[kernel].calls
             : 0;
}

double tmrt_profile_seconds(tmrt_context *ctx, int64_t kernel) {
  return kernel >= 0 && kernel < static_cast<int64_t>(ctx->profile.size())
             ? ctx->profile[kernel].seconds
             : 0.0;
}

} // extern "C"
