//===- Passes.td - conversion passes of trainmem -----------*- tablegen -*-===//

#ifndef TRAINMEM_CONVERSION_PASSES_TD
#define TRAINMEM_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertTrainToRuntimePass
    : Pass<"convert-train-to-runtime", "mlir::ModuleOp"> {
  let summary = "Lowers a training step to calls into the trainmem runtime";
  let description = [{
    Plans the step's memory (`MemoryAnalysis` lifetimes, greedy-by-size
    offsets in one arena, `MemoryPlan`) and replaces the step by
    `func.func @<name>(%ctx: !llvm.ptr)`: one `func.call @tmrt_*` per op, with
    the arena offsets of its operands and results, sizes and attributes as
    i64/f64 constants. Views that share their source's buffer cost nothing; a
    reshape of a strided view becomes a copy. The functions it calls are the
    runtime's kernels (`trainmem-runtime/Kernels.def`).

    The host learns where everything is from attributes on the function:
    `tmrt.arena_bytes`, and `tmrt.arguments` / `tmrt.results`, one
    dictionary per original argument / result with its `role` (`param`,
    `optimizer_state`, `input`, `loss`, `grad`, `grad_norm`), `key` (the
    marker's value), `offset`, `bytes`, `shape` and `dtype`.

    Host memory (`train-offload-optimizer`): the host's tensors get offsets
    in a second arena (`tmrt.host_arena_bytes`; their slots carry
    `memory_space = #train.space<host>`, their references
    `TMRT_HOST_MEMORY`); an update on the device with host state is
    surrounded by `tmrt_transfer` calls into its staging copies and back,
    and `tmrt.host_ops` counts the ops that run in host memory
    (`what=states+update`: the updates and the casts of their refreshed
    16-bit weights). A staging copy lives from its update to the last
    device op that reads what the update wrote (the refreshed weight's
    cast): the state goes back after that op.

    It is a dialect conversion (`populateTrainToRuntimePatterns`): every
    compute op is illegal and becomes the calls its
    `RuntimeLoweringOpInterface` model emits, in place; `train.block`
    regions are then inlined, so the calls run in program order, the order
    the memory analysis measured. Tensors are f32, bf16 or f16 (and integer
    ids, counts and masks); an op without a lowering, an unmaterialized
    `train.remat`, a `train.accumulate` that cannot run as a loop (nested,
    summed in groups) and what a kernel cannot take (a strided operand, a
    rank beyond its own) get a diagnostic at the op.

    A rolled micro-batch loop (`train.accumulate`, as `train-step` leaves
    it) runs as a loop: its body's calls go into `@<step>.loop<k>.body`
    (the context and the micro-batch index), which `@<step>.loop<k>` calls
    for each index in an `scf.for` (its `tmrt.loop_steps` says how many);
    each iteration first writes the body's arguments at their planned
    offsets (`tmrt_slice_rows` from row index x rows; the index, which the
    dropouts read; the share) and sums each part into its accumulator
    after the op that completes it (`tmrt_convert` at index 0, `tmrt_add`
    after: both called, the other on 0 elements). These are the calls and
    offsets `train-unroll-accum` makes, so the loop computes the unrolled
    step's numbers to the bit, and its code does not grow with the steps.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::func::FuncDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::ub::UBDialect"];
  let options = [
    Option<"function", "function", "std::string", "\"\"",
           "The step to lower (default: the function marked train.step)">
  ];
  let statistics = [
    Statistic<"numCalls", "runtime-calls", "Runtime calls emitted">
  ];
}

#endif // TRAINMEM_CONVERSION_PASSES_TD
