//===- Passes.td - passes of the train dialect -------------*- tablegen -*-===//

#ifndef TRAINMEM_DIALECT_TRAIN_TRANSFORMS_PASSES_TD
#define TRAINMEM_DIALECT_TRAIN_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def TrainFuseAttentionPass : Pass<"train-fuse-attention"> {
  let summary = "Rewrites decomposed attention into train.attention";
  let description = [{
    Finds `matmul(q, k, transpose_rhs)`, `scale`, `softmax` (causal or
    not), an optional `dropout` and `matmul(·, v)`, each value used only by
    the next, and replaces them by one `train.attention`: no score tensor
    is kept or built whole, and the backward keeps q, k, v, the output and
    the row log-sum-exp. Multi-head (`[B, H, S, D]` operands) and
    grouped-query attention (`[B, KVH, G, S, D]` queries against
    `[B, KVH, 1, S, D]` keys and values, reshaped to `[B, H, S, D]` and
    `[B, KVH, S, D]` for the op) both fuse; the dropout's counters carry
    over, so the fused op draws the decomposed pattern's mask. It is a
    rewrite pattern (`populateFuseAttentionPatterns`) that any op holding
    the pattern can run on; run it on the forward, before `train-autodiff`
    (after it, the backward reads the scores, so nothing matches).
  }];
  let statistics = [
    Statistic<"numFused", "fused-attentions", "Attentions fused">
  ];
}

def TrainFuseElementwisePass : Pass<"train-fuse-elementwise"> {
  let summary = "Fuses chains of element-wise ops into one op each";
  let description = [{
    Rewrites `train.gelu` of a `train.bias_add` used only by it into one
    `train.bias_gelu`: the same bits (the sum is rounded to the element
    type as bias_add stores it), one pass over memory instead of two in
    the forward, and the backward (`train.bias_gelu_grad`) reads the
    bias_add's input and the bias instead of the sum, the same bytes saved.
    A rewrite pattern (`populateFuseElementwisePatterns`) for any op
    holding the chain; run it on the forward, before `train-autodiff`, as
    train-fuse-attention (docs/CpuSpeed.md).
  }];
  let statistics = [
    Statistic<"numFused", "fused-chains", "Element-wise chains fused">
  ];
}

def TrainCostReportPass : Pass<"train-cost-report", "mlir::ModuleOp"> {
  let summary = "Prints parameters, FLOPs and bytes moved of each function";
  let description = [{
    Sums the `CostOpInterface` of every op of each function, by `train.block`
    kind, and counts the function's parameters (arguments marked
    `train.param`). The IR is left unchanged.

    ```
    trainmem-model --preset gpt2-124m | trainmem-opt -train-cost-report
    ```
  }];
  let options = [
    Option<"format", "format", "::mlir::train::ReportFormat",
           /*default=*/"::mlir::train::ReportFormat::text",
           "Report format", [{::llvm::cl::values(
             clEnumValN(::mlir::train::ReportFormat::text, "text",
                        "Aligned text for people"),
             clEnumValN(::mlir::train::ReportFormat::json, "json",
                        "JSON for programs (docs/MemoryReport.md)"))}]>,
    Option<"output", "output", "std::string", /*default=*/"\"-\"",
           "File to write the report to ('-' for stdout)">
  ];
  let statistics = [
    Statistic<"numOpsCosted", "ops-costed", "Ops whose cost was counted">
  ];
}

// The optimizer's options: train-add-optimizer's, and train-autodiff's,
// which appends the same optimizer after differentiating.
defvar TrainOptimizerOptions = [
    Option<"optimizer", "optimizer", "std::string", "\"adamw\"",
           "The optimizer: adamw, lion, sgd or sophia (OptimizerRegistry.h; "
           "docs/Optimizers.md), or none (train-autodiff only: the step "
           "returns the gradients). Options not given take the optimizer's "
           "defaults">,
    Option<"lr", "lr", "double", "3.0e-4",
           "Learning rate (peak with a schedule); default: the optimizer's">,
    Option<"minLr", "min-lr", "double", "0.0", "Final learning rate of the cosine schedule">,
    Option<"warmupSteps", "warmup-steps", "int64_t", "0", "Linear warm-up steps">,
    Option<"totalSteps", "total-steps", "int64_t", "0",
           "Steps of the cosine schedule; 0 keeps the learning rate constant">,
    Option<"beta1", "beta1", "double", "0.9",
           "AdamW's, Lion's and Sophia's beta1; default: the optimizer's">,
    Option<"beta2", "beta2", "double", "0.999",
           "AdamW's, Lion's and Sophia's (its Hessian estimate's) beta2; "
           "default: the optimizer's">,
    Option<"epsilon", "eps", "double", "1.0e-8",
           "AdamW's and Sophia's epsilon; default: the optimizer's">,
    Option<"weightDecay", "weight-decay", "double", "0.01",
           "Decoupled weight decay; default: the optimizer's">,
    Option<"momentum", "momentum", "double", "0.0", "SGD momentum">,
    Option<"rho", "rho", "double", "0.04",
           "Sophia's rho: the clipping scale of its Hessian-preconditioned "
           "step">,
    Option<"hessianInterval", "hessian-interval", "int64_t", "10",
           "Sophia: steps between refreshes of the Hessian estimate (the "
           "Hessian step's k)">,
    Option<"clipNorm", "clip-norm", "double", "0.0",
           "Clip the global gradient norm to this value; 0 disables clipping">,
    Option<"masterWeights", "master-weights", "bool", "true",
           "Keep f32 master weights for 16-bit parameters">
];

def TrainAutodiffPass : Pass<"train-autodiff", "mlir::ModuleOp"> {
  let summary = "Turns a forward-plus-loss function into one training step";
  let description = [{
    Rewrites `@forward` (option `function`) into `@train_step` (option
    `step-name`): the forward pass, then the backward pass in reverse
    (each op's VJP from `DifferentiableOpInterface`, one `train.block ...
    backward` per forward block, gradients of values used twice summed), then
    a `train.block optimizer` with the update.

    The step takes the forward's arguments, then `step` (`tensor<i64>`,
    counted from 1), then per parameter its optimizer state; it returns the
    loss, then per parameter its new weight and state, then the gradient
    norm when clipping. Mixed precision as practitioners run it: a 16-bit
    parameter gets an f32 master copy and f32 Adam m and v; AdamW updates the
    master and the 16-bit weight is refreshed from it with `train.cast`
    (2 + 2 + 12 bytes per parameter). Arguments and results are marked
    `train.param = "name"` (weights), `train.optimizer_state =
    #train.state<"name", master|m|v|momentum>`, `train.input = "step"`,
    `train.loss`, `train.grad_norm`; with `optimizer=none` the step returns
    the gradients instead (`train.grad = "name"`). The optimizer is
    train-add-optimizer's: `train-autodiff{optimizer=adamw ...}` is
    `train-autodiff{optimizer=none},train-add-optimizer{optimizer=adamw ...}`
    and prints the same step.

    Values a backward block needs from a forward block become extra results
    of that forward block: what the forward saves for the backward is
    visible in the IR.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
  let options = !listconcat([
    Option<"function", "function", "std::string", "\"forward\"",
           "Name of the forward-plus-loss function">,
    Option<"stepName", "step-name", "std::string", "\"train_step\"",
           "Name of the training-step function">,
    Option<"regenerateDropoutMasks", "regenerate-dropout-masks", "bool", "false",
           "Recompute dropout masks from the RNG in the backward instead of keeping them">
  ], TrainOptimizerOptions);
  let statistics = [
    Statistic<"numVJPs", "vjps", "Vector-Jacobian products built">
  ];
}

def TrainAddOptimizerPass : Pass<"train-add-optimizer", "mlir::ModuleOp"> {
  let summary = "Appends the optimizer update to a step that returns gradients";
  let description = [{
    Takes the step marked `train.step` that returns its loss and one
    gradient per parameter (`train.grad = "name"`, as
    `train-autodiff{optimizer=none}` makes it) and turns it into a step that
    updates the parameters: per parameter its optimizer state as new
    arguments and results (`#train.state<"name", m|v|momentum|master>`),
    then in the `train.block optimizer` the learning rate (constant or the
    cosine schedule), global-norm clipping (`clip-norm`) and one
    `train.adamw` or `train.sgd` per parameter (an f32 master copy for a
    16-bit parameter with `master-weights`). The step then returns the loss,
    per parameter its new weight and state, and the gradient norm when
    clipping.

    Differentiation and the optimizer are separate passes, so a pipeline can
    swap the optimizer, or transform the gradient step (accumulate it,
    partition it) before the update is appended.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
  let options = TrainOptimizerOptions;
}

def TrainReleaseGradientsPass
    : Pass<"train-release-gradients", "mlir::ModuleOp"> {
  let summary = "Runs each update as soon as its gradient is complete";
  let description = [{
    Gradient release (fused backward and update): the step's updates leave
    its optimizer block, and each runs right after the block of the
    backward that completes its gradient, in a `train.block optimizer` of
    its own there; the ops that only updates read (a learning rate, a
    parameter's slice) run with the first update that reads them. A
    gradient then lives from the op that finishes it to its update instead
    of to the end of the backward, so the gradients live at once at the
    step's peak fall from all of them to those of the blocks in flight.
    The same ops run on the same values: the step is bit-identical to the
    step before the pass.

    After train-zero, each shard's update follows its gradient's
    reduce-scatter (stages 1-3) or all-reduce (stage 0): a bucket's
    collectives follow its last gradient, so smaller buckets (train-zero
    `bucket=`) release earlier.

    Only where that is so: with gradient accumulation a gradient is
    complete after the last micro-batch, global-norm clipping (`clip-norm`)
    and dynamic loss scaling read every gradient before the first update;
    the pass refuses those steps, naming what to drop. Run it after
    train-materialize-remat and train-zero (train-step does, with
    `release-gradients`).
  }];
  let options = [
    Option<"function", "function", "std::string", "\"\"",
           "The step (default: the function marked train.step)">
  ];
  let statistics = [
    Statistic<"numReleased", "released-updates",
              "Updates moved into the backward">
  ];
}

def TrainLossScalePass : Pass<"train-loss-scale", "mlir::ModuleOp"> {
  let summary = "Dynamic loss scaling for 16-bit (f16) steps, as IR";
  let description = [{
    Takes a step with its optimizer update (after train-autodiff or
    train-add-optimizer) and scales its loss the way PyTorch's GradScaler
    does, with its defaults: the backward is seeded with the loss gradient
    times the scale (`train.loss_scale`, starting at `initial`, 2^16); in
    the `train.block optimizer`, `train.unscale_gradients` divides every
    gradient by it in f32 before clipping and the update. A step whose
    gradients are not all finite (an f16 overflow) skips every update
    (weights and optimizer state stay as they are) and halves the scale;
    after `growth-interval` clean steps (2000) the scale doubles. The scale,
    the clean steps and the skipped steps are one state tensor of the step
    (`#train.state<"step", loss_scale>`, an argument and a result), so they
    are in the checkpoint. bf16 has f32's range and needs none.

    ```mlir
    %s = train.loss_scale %state {initial = 65536.0 : f64} : tensor<3xi64> -> tensor<f32>
    %seed = train.mul %dloss, %s : tensor<f32>
    ...
    %u:2, %new_state = train.unscale_gradients %g0, %g1 scale(%state) {...}
    ```
  }];
  let options = [
    Option<"initial", "initial", "double", "65536.0",
           "The loss scale at the first step">,
    Option<"growthInterval", "growth-interval", "int64_t", "2000",
           "Clean steps after which the scale doubles">,
    Option<"function", "function", "std::string", "\"\"",
           "The training step (default: the function marked train.step)">
  ];
}

def TrainPlanArenaPass : Pass<"train-plan-arena", "mlir::ModuleOp"> {
  let summary = "Writes the static arena plan into the step";
  let description = [{
    Plans the arena of the step marked `train.step` (MemoryPlan: greedy by
    size over the memory analysis's buffers, 64-byte aligned) and writes it
    into the IR, where a test can check it and a later pass can read it:
    `train.arena_bytes` (i64) on the function, `train.offset` (i64) on each
    tensor argument, `train.offsets` (array<i64>, one per result, -1 for a
    result that is not a tensor) on every op with results. Values that share
    a buffer (views, region results, in-place updates) share the offset.

    convert-train-to-runtime lowers with this plan when the step carries one,
    after checking it against the IR as it is then (every tensor placed,
    buffers inside the arena, no two live at once overlapping): a plan that
    a later transform made stale is refused, not used.

    A rolled micro-batch loop (`train.accumulate`) is planned as one
    iteration, and its body's arguments get `train.argument_offsets` on the
    loop; train-unroll-accum then keeps the plan (every copy at the body's
    offsets), so the unrolled step runs in the rolled loop's memory. Before
    planning, each part the loop yields in another type than its f32 sum
    (a 16-bit gradient) is cast in the body right after the op that makes
    it, so that the cast's buffer is planned: the one change to the IR
    beyond the attributes.
  }];
  let options = [
    Option<"function", "function", "std::string", "\"\"",
           "The training step (default: the function marked train.step)">
  ];
}

def TrainOffloadOptimizerPass
    : Pass<"train-offload-optimizer", "mlir::ModuleOp"> {
  let summary = "Keeps the optimizer state in host memory (CPU offload)";
  let description = [{
    Marks the optimizer state of the step marked `train.step` (its
    arguments and results with a `#train.state`: f32 masters, Adam's m and
    v, momentum, 8-bit codes and block maxima) as living in host memory,
    `train.memory_space = #train.space<host>`:

    - `what=states`: the state lives on the host between steps; each
      update brings its tensor's state to the device, updates it there and
      sends it back after the last device op that reads it (the refreshed
      16-bit weight's cast): the device holds one tensor's state at a
      time;
    - `what=states+update`: the update itself runs on the host
      (`train.memory_space = #train.space<host>` on each optimizer update,
      DeepSpeed's CPU Adam, and on the cast of its refreshed 16-bit
      weight): the gradients go to the host, only the updated 16-bit
      weights come back.

    The memory analysis then reports device and host memory apart, and the
    bytes that cross between them per step; the memory plan gives host
    memory an arena of its own, and convert-train-to-runtime lowers to two
    arenas (host tensors named with `TMRT_HOST_MEMORY`, staging copies by
    `tmrt_transfer`). A step with no optimizer state (SGD without momentum)
    is an error.

    `gradients=host` (with `what=states+update` and a rolled
    `train.accumulate`) keeps the loop's sums of the gradients the host
    updates read in host memory (`host_sums` on the loop; the clipping
    and loss unscaling between them run there too): each micro-batch's
    part crosses to the host and is added there, DeepSpeed ZeRO-Offload's
    CPU gradient accumulation, and the device holds no accumulators. It
    does not compose with train-zero (the reductions run on the device) or
    an unrolled loop.
  }];
  let options = [
    Option<"what", "what", "::mlir::train::OffloadWhat",
           "::mlir::train::OffloadWhat::states",
           "What runs from host memory", [{::llvm::cl::values(
             clEnumValN(::mlir::train::OffloadWhat::states, "states",
                        "The optimizer state lives on the host"),
             clEnumValN(::mlir::train::OffloadWhat::statesAndUpdate,
                        "states+update",
                        "The state and the update (CPU Adam) on the host"))}]>,
    Option<"gradients", "gradients", "::mlir::train::OffloadGradients",
           "::mlir::train::OffloadGradients::device",
           "Where a micro-batch loop sums the gradients the host updates "
           "read", [{::llvm::cl::values(
             clEnumValN(::mlir::train::OffloadGradients::device, "device",
                        "In device memory, sent to the host once per step"),
             clEnumValN(::mlir::train::OffloadGradients::host, "host",
                        "In host memory: each micro-batch's part is sent "
                        "and added there (with what=states+update)"))}]>
  ];
}

def TrainOffloadActivationsPass
    : Pass<"train-offload-activations", "mlir::ModuleOp"> {
  let summary = "Keeps saved activations in host memory between the forward "
                "and the backward";
  let description = [{
    Moves the activations the step marked `train.step` saves for its
    backward to host memory: each chosen tensor is copied out
    (`train.transfer {to = #train.space<host>}`) after the forward block
    that makes it, and copied back (`{to = #train.space<device>}`) before
    the backward that reads it, which then reads the copy. The device
    holds it only in the forward and from its copy back to its last
    reader; the memory analysis places the host copy in the host arena,
    counts it per layer, and counts the bytes that cross; the runtime
    copies with `tmrt_transfer` (a side stream on CUDA). The step computes
    the same bits.

    - `what=checkpoints` (the default): the tensors a recompute reads (the
      checkpoints train-remat keeps, materialized by
      train-materialize-remat); a step without recompute is an error that
      names `what=all`;
    - `what=all`: every saved tensor.

    `layers=` offloads only those layers' tensors, `min-bytes=` only
    tensors of at least that size. With `prefetch=k` (1 by default) the
    copy back of layer l's tensors is placed before the backward of layer
    l + k, so that it overlaps k layers' backward; `prefetch=0` copies
    each back right before its first reader. A `prefetch` of the step's
    layers or more is an error.

    With `async=true` (the default) each copy is asynchronous
    (`train.transfer_wait`): a copy out finishes after the next forward
    block, which it overlaps, its device tensor kept until then; a copy
    back finishes right before its first reader, overlapping the
    `prefetch` layers' backward between. The CPU runtime copies at the
    transfer (the wait is then free); the CUDA runtime copies on a side
    stream into pinned host memory and makes its stream wait at the wait.
    `async=false` copies in place, the device tensor freed at the copy.
  }];
  let options = [
    Option<"what", "what", "::mlir::train::OffloadActivationsWhat",
           "::mlir::train::OffloadActivationsWhat::checkpoints",
           "Which saved activations go to host memory", [{::llvm::cl::values(
             clEnumValN(::mlir::train::OffloadActivationsWhat::checkpoints,
                        "checkpoints", "What a recompute reads"),
             clEnumValN(::mlir::train::OffloadActivationsWhat::all, "all",
                        "Every saved activation"))}]>,
    ListOption<"layers", "layers", "int64_t",
               "Only these layers' activations (default: every layer's)">,
    Option<"minBytes", "min-bytes", "int64_t", "0",
           "Only tensors of at least this many bytes">,
    Option<"prefetch", "prefetch", "int64_t", "1",
           "Layers ahead of its backward that a tensor comes back">,
    Option<"async", "async", "bool", "true",
           "Copies overlap the compute (a train.transfer_wait ends each)">
  ];
}

def TrainTensorParallelPass
    : Pass<"train-tensor-parallel", "mlir::ModuleOp"> {
  let summary = "Splits the model's layers across a tensor-parallel group "
                "(Megatron)";
  let description = [{
    Runs on the forward pass plus loss (before `train-autodiff`). Makes it
    one SPMD program for `size` ranks of a tensor-parallel group on a 2-D
    `shard.grid @tp` of `data` x `size` ranks (axis 0 data, axis 1 tensor;
    rank r = d · size + t), each rank holding its part of the split
    parameters (marked `train.tensor_split = #train.split<dim, parts,
    grid, axis>`). An MLP block (`train.block mlp`), GELU or SwiGLU, and an
    attention block are split as Megatron splits them (Shoeybi et al.
    2019): their first matmuls by columns (an MLP's inner columns, the
    attention's q, k and v by heads; their biases with them), the ops after
    them (element-wise ops, softmax, rotary embedding, views: reshapes and
    transposes) on a rank's part, the last matmul (the MLP's down
    projection, the attention's output projection) by rows. The block's
    input enters the split part through `train.grad_all_reduce`
    (Megatron's f: the identity, whose gradient is summed over the group)
    and the last matmul's partial products are summed by `shard.all_reduce`
    (g: the identity backward), before its bias. `train-autodiff` then
    builds the backward with the conjugate collectives. Grouped-query
    attention splits its K/V heads with the queries' (t must divide them).

    The vocabulary (Megatron's vocabulary parallelism, on by default):
    each rank holds V/t rows of the token embedding's table
    (`train.embedding` with `split`: ids of other ranks' rows look up
    zeros) and V/t columns of the head's weight (the same rows when the two
    are tied), the embedding's partial lookups summed by `shard.all_reduce`
    (reduce-scattered along the sequence with sequence parallelism, when
    the embedding block yields them directly); the head's input enters
    through f (all-gathered with sequence parallelism) and its logits stay
    split: the cross-entropy becomes `train.row_max`, a `shard.all_reduce`
    max, `train.cross_entropy_part` (each rank's sum of exponentials and
    target logit), their sums over the group and `train.cross_entropy_merge`
    — no rank gathers the logits. With `vocabulary-parallel=false` the
    embedding and the head stay whole on every rank (each computes them
    alike), which the pass says in a remark per kind. A size that does not
    divide what it splits (an MLP's inner size, the heads), a parameter a
    block shares with another, or a block that is not matmuls, ops on their
    parts and one last matmul is an error at the op. A dropout on a rank's
    part is marked with its split (`split = #train.split<...>`): each rank
    draws its part of the whole tensor's mask.

    With `sequence-parallel=true` (Megatron's sequence parallelism,
    Korthikanti et al. 2022): the embedding block's result, [batch, seq,
    hidden], is sliced along the sequence (`shard.all_slice`, gathered in
    the backward) and every op outside the split parts (the norms, the
    biases after the rows, dropout, the residual adds, the head and its
    loss) computes each rank's s/t positions; a split part's input is
    all-gathered along the sequence (`shard.all_gather`, reduce-scattered
    in the backward) in place of f, and its rows' partial products are
    reduce-scattered (`shard.reduce_scatter`, gathered in the backward) in
    place of g. The parameters those ops read whole (norm weights, biases,
    the head's weight) enter through f, each rank's gradient being its
    positions' part; a dropout there draws its piece of the whole mask; the
    loss's sum and token count are summed over the group. An op there that
    is not position-wise (`Train_PositionWise`, or a matmul by a weight), a
    sequence t does not divide, or a forward without an embedding block is
    an error at the op.

    The data axis: `train-zero{ranks=d}` on the split step averages the
    gradients (stage 0) or partitions the optimizer (stages 1-3) over the
    grid's axis 0, growing it from 1 to `d` when `data` was left at 1; a
    step whose data axis has more than one rank and no train-zero is
    refused by convert-train-to-runtime (its gradients would not be
    averaged).
  }];
  let options = [
    Option<"size", "size", "int64_t", "2",
           "Ranks of a tensor-parallel group (t)">,
    Option<"data", "data", "int64_t", "1",
           "Data-parallel groups (the grid's first axis; train-zero with "
           "ranks=data averages or partitions over it)">,
    Option<"sequenceParallel", "sequence-parallel", "bool", "false",
           "Splits the residual stream along the sequence between the split "
           "parts (Korthikanti et al. 2022): all-gathers and "
           "reduce-scatters in place of f and g">,
    Option<"vocabularyParallel", "vocabulary-parallel", "bool", "true",
           "Splits the token embedding and the head by the vocabulary, with "
           "a parallel cross-entropy (false: both whole on every rank)">
  ];
  let dependentDialects = ["::mlir::shard::ShardDialect"];
  let statistics = [
    Statistic<"numSplitBlocks", "split-blocks", "Blocks split">
  ];
}

def TrainContextParallelPass
    : Pass<"train-context-parallel", "mlir::ModuleOp"> {
  let summary = "Cuts every sequence across a context-parallel group";
  let description = [{
    Runs on the forward pass plus loss (before `train-autodiff`), with its
    attention fused (`train-fuse-attention`). Makes it one SPMD program for
    the `size` ranks of a context group: on a grid `@cp` of (data, context)
    or, after `train-tensor-parallel`, on its grid grown to (data, tensor,
    context) (the context axis last; `train-zero{ranks=d}` grows the data
    axis and partitions over it). Each rank
    holds its rows of every sequence, a contiguous piece of s/c positions
    or, with `load-balance` (the default), chunks p and 2c - 1 - p of 2c
    equal chunks, so that under a causal mask every rank's queries see as
    many keys (Megatron-Core's order). The step's token and target ids
    (`train.input`) and position ids (`train.iota` of the sequence) are cut
    by `train.context_slice`; the ops on positions run on a rank's rows
    (norms, element-wise ops, matmuls by weights, views, dropout drawing
    its piece of the whole mask, `train.rope` at the rows' places in the
    sequence); a fused attention takes the rank's queries over the group's
    keys and values, all-gathered along the sequence (`shard.all_gather`,
    whose gradient `train-autodiff` reduce-scatters; the backward gathers
    again instead of keeping the gathered keys), its causal mask comparing
    the rows' places (`context_parallel = #train.context<...>`): the scores
    are never whole, and each rank keeps 1/c of every saved activation.
    With `exchange=ring` the attention keeps the rank's own keys and values
    and passes them around the group inside the op (`train.attention`
    `ring`: c - 1 point-to-point exchanges per forward, the backward's dK
    and dV sums travelling with the blocks), so that no rank holds a
    layer's K/V whole; its blocks in flight are planned workspace. The
    loss's sum and token count are summed over the group; each parameter
    enters through f (`train.grad_all_reduce`): its gradient is the group's
    sum. An op on positions that is none of these (an unfused attention's
    scores, a reshape of the sequence dimension), a sequence the parts do
    not divide (2c with load balance), an ALiBi attention and a forward
    split along the sequence already (sequence parallelism) are errors at
    the op, naming what works.
  }];
  let options = [
    Option<"size", "size", "int64_t", "2",
           "Ranks of a context-parallel group (c)">,
    Option<"loadBalance", "load-balance", "bool", "true",
           "Each rank holds chunks p and 2c-1-p of 2c (balanced causal "
           "work); false: a contiguous piece of s/c positions">,
    Option<"exchange", "exchange", "::mlir::train::ContextExchange",
           "::mlir::train::ContextExchange::allGather",
           "How the attention gets the group's keys and values",
           [{::llvm::cl::values(
             clEnumValN(::mlir::train::ContextExchange::allGather,
                        "all-gather",
                        "Gathered along the sequence (their gradients "
                        "reduce-scattered)"),
             clEnumValN(::mlir::train::ContextExchange::ring, "ring",
                        "Passed around the group's ring, block by block, "
                        "inside the attention (train.attention ring)"))}]>
  ];
  let dependentDialects = ["::mlir::shard::ShardDialect"];
}

def TrainPipelinePass : Pass<"train-pipeline", "mlir::ModuleOp"> {
  let summary = "Splits the step into pipeline stages, one function each, "
                "with their schedule";
  let description = [{
    Runs on a step whose batch train-grad-accum split into `micro-batches`
    micro-batches (its rolled `train.accumulate`), after
    train-materialize-remat. The step's layers are cut into `stages` x
    `virtual` chunks of consecutive layers (as many per chunk, or the
    counts `split` gives), chunk j·stages + k on stage k; the embedding is
    on the first chunk, the head and loss on the last. The step becomes
    one function per stage, `@<step>.stage<k>` (`train.pipeline_stage =
    #train.pipeline<...>`), taking the inputs and the parameters and
    optimizer state of its layers (a parameter two stages read, tied
    embeddings, is on both, its gradient summed where the embedding's
    backward is and sent to the other stage's update). Its body is the
    schedule: its chunks' forward and backward for every micro-batch in
    the order `schedule` gives (GPipe: every forward, then every backward;
    1F1B: stage k runs p - k - 1 forwards, then one forward and one
    backward in turn; interleaved: 1F1B over the chunks, Megatron's
    order), each op marked with its micro-batch (`train.micro_batch`) and
    with interleaving its chunk (`train.chunk`); the gradients are summed
    over the micro-batches in order, as train-unroll-accum sums them, and
    each stage updates its own parameters after its last backward. Where a
    value crosses stages, a `train.pipeline_exchange` sends it after the
    unit that makes it and receives it before the first unit that reads
    it. Gradient clipping takes each stage's exact squared norm and
    exchanges it with every other stage, so that every stage clips by the
    global norm, to the bit. The pass simulates the exchanges and fails if
    they could deadlock. Each normal parameter's `#train.init` gets its
    `stream` (its index among the step's parameters), so that a stage
    draws the initial values one process would. With `select-stage=k`
    only stage k's function stays, marked `train.step` (a runner's rank
    lowers its own stage).

    Each stage function is a step for the memory analysis: its peak holds
    the micro-batches its schedule keeps in flight (GPipe m, 1F1B
    min(p - k, m) on stage k). Without `split`, `balance=flops` or
    `balance=memory` cuts the layers where the most expensive stage is
    cheapest (a stage that keeps more micro-batches in flight then holds
    fewer layers). Errors name what works: layers `stages` x
    `virtual` does not divide without `split` (uniform), a `split` that does not
    add up, fewer micro-batches than stages for 1F1B, interleaving with
    micro-batches not a multiple of the stages, a value that flows from a
    later unit to an earlier one on another stage (a cycle between
    stages), a step train-zero partitioned already (run train-zero after
    it: each stage over its data ranks, on a (data, pipeline) grid), and
    what is not built yet (context parallelism, loss scaling, offload and
    gradient release with pipeline stages). A tensor-parallel step's
    (data, tensor) grid gains the pipeline's axis between the two, (data,
    pipeline, tensor), Megatron's layout: rank = (data x stages + stage) x
    tensor + position; its splits and collectives on the tensor axis move
    to axis 2.
  }];
  let options = [
    Option<"stages", "stages", "int64_t", "2", "Pipeline stages (p)">,
    Option<"microBatches", "micro-batches", "int64_t", "0",
           "Micro-batches per step (m): the train.accumulate's steps "
           "(0: whatever the step has)">,
    Option<"schedule", "schedule", "::mlir::train::PipelineSchedule",
           "::mlir::train::PipelineSchedule::one_f_one_b",
           "The order of each stage's forward and backward units",
           [{::llvm::cl::values(
             clEnumValN(::mlir::train::PipelineSchedule::gpipe, "gpipe",
                        "Every forward, then every backward"),
             clEnumValN(::mlir::train::PipelineSchedule::one_f_one_b, "1f1b",
                        "One forward, one backward (PipeDream-Flush)"),
             clEnumValN(::mlir::train::PipelineSchedule::interleaved,
                        "interleaved",
                        "1F1B over `virtual` chunks per stage (Megatron)"))}]>,
    Option<"virtualStages", "virtual", "int64_t", "1",
           "Model chunks per stage (v, the interleaved schedule's)">,
    ListOption<"split", "split", "int64_t",
               "Layers per chunk, in order (stages x virtual counts); "
               "empty: as `balance` cuts them">,
    Option<"balance", "balance", "::mlir::train::PipelineBalance",
           "::mlir::train::PipelineBalance::uniform",
           "How the layers are cut into chunks without split=",
           [{::llvm::cl::values(
             clEnumValN(::mlir::train::PipelineBalance::uniform, "uniform",
                        "As many layers in each chunk (Megatron's cut)"),
             clEnumValN(::mlir::train::PipelineBalance::flops, "flops",
                        "Consecutive layers with the most FLOPs of a "
                        "stage (forward and backward, the embedding's on "
                        "the first, the head's on the last) least"),
             clEnumValN(::mlir::train::PipelineBalance::memory, "memory",
                        "Consecutive layers with the largest stage's "
                        "memory least: each layer's state, and its saved "
                        "activations times the micro-batches the stage "
                        "keeps in flight"))}]>,
    Option<"selectStage", "select-stage", "int64_t", "-1",
           "Keep only this stage's function, marked as the step (what one "
           "rank of a pipeline-parallel run lowers); -1: every stage">,
    Option<"function", "function", "std::string", "\"\"",
           "The training step (default: the function marked train.step)">
  ];
}

def TrainZeroPass : Pass<"train-zero", "mlir::ModuleOp"> {
  let summary = "Partitions the step over data-parallel ranks (ZeRO) and "
                "inserts the collectives";
  let description = [{
    Makes the step marked `train.step` one SPMD program for `ranks`
    data-parallel ranks: every rank runs it on its own batch (the step's
    batch is one rank's), the collectives are upstream `shard` ops on a
    `shard.grid` of `ranks` processes, and the step is marked
    `train.zero = #train.zero<stage = S, ranks = N, bucket = B>`.

    - `stage=0`, plain data parallel: each gradient the optimizer reads is
      averaged over the ranks (`shard.all_reduce ... reduction = average`)
      before the update (and before clipping), in place. Gradients go in
      buckets of `bucket` bytes in the order the backward produces them;
      each bucket's all-reduces follow the op that produces its last
      gradient, and carry `train.bucket = k`.

    - `stage=1`: the optimizer state is the rank's shard of each tensor
      (flattened, padded to a multiple of `ranks`, or `ranks` x block for
      8-bit state); gradients are reduce-scattered into the rank's shard
      before the update, the new weights all-gathered after it.
    - `stage=2`: each gradient is reduce-scattered into a shard of its own
      as soon as its bucket is complete. Under a `train.accumulate` loop,
      `accumulate=micro-batch` (the default) reduce-scatters inside the
      loop, into accumulated f32 shards; `accumulate=full` accumulates full
      gradients and reduce-scatters once after the loop.
    - `stage=3`: the weights are shards too, gathered
      (`shard.all_gather`) before each op that reads them and dead after
      it; `prefetch=K` gathers K ops ahead.

    With clipping, the rank's shards are clipped by the global norm
    (`train.squared_norm`, a `shard.all_reduce`, `train.clip_grad_norm ...
    squared_norm(...)`). `ranks=1` leaves the step as it is. docs/Zero.md
    has the design and the memory and communication the stages give.

    Pipeline stages (train-pipeline's functions, each or the one marked
    `train.step`): each is partitioned over its data ranks, the same stage
    of each pipeline, on a (data, pipeline) grid (or the tensor-parallel
    grid's data axis); the stage's own squared norm is summed over them
    before it is sent to the other stages. Stages 2-3 are refused there.
  }];
  let dependentDialects = ["::mlir::shard::ShardDialect"];
  let options = [
    Option<"function", "function", "std::string", "\"\"",
           "The training step (default: the function marked train.step)">,
    Option<"stage", "stage", "int64_t", "0",
           "ZeRO stage: 0 (data parallel), 1 (optimizer state sharded), 2 "
           "(+ gradients), 3 (+ parameters)">,
    Option<"ranks", "ranks", "int64_t", "1", "Data-parallel ranks">,
    Option<"bucket", "bucket", "int64_t", "500000000",
           "Gradient bucket in bytes (DeepSpeed's reduce_bucket_size)">,
    Option<"prefetch", "prefetch", "int64_t", "1",
           "Stage 3: layers whose parameters are gathered ahead">,
    Option<"accumulate", "accumulate", "::mlir::train::ZeroAccumulate",
           "::mlir::train::ZeroAccumulate::microBatch",
           "Stages 2-3 under gradient accumulation", [{::llvm::cl::values(
             clEnumValN(::mlir::train::ZeroAccumulate::microBatch,
                        "micro-batch",
                        "Reduce-scatter each micro-batch's gradients into "
                        "accumulated f32 shards (DeepSpeed's default)"),
             clEnumValN(::mlir::train::ZeroAccumulate::full, "full",
                        "Accumulate full gradients, reduce-scatter them "
                        "once after the last micro-batch"))}]>
  ];
}

def TrainMemoryReportPass : Pass<"train-memory-report", "mlir::ModuleOp"> {
  let summary = "Prints peak memory, its breakdown and saved activations per layer";
  let description = [{
    Prints the `MemoryAnalysis` of the step (or `function`): live bytes at every op in
    program order, the peak and its breakdown into weights, gradients,
    optimizer, activations (forward values still live for the backward) and
    temporaries; per layer the activation bytes saved for the backward
    (attention / mlp / norm); the parameter count; and forward, backward and
    optimizer FLOPs. The JSON keys are documented in docs/MemoryReport.md.
    `format=svg` draws the timeline instead: live bytes at every point of
    the schedule, stacked by category, the forward, backward and optimizer
    phases shaded, and the peak marked with its bytes and the op (and
    block) where it falls.
  }];
  let options = [
    Option<"format", "format", "::mlir::train::ReportFormat",
           /*default=*/"::mlir::train::ReportFormat::text",
           "Report format", [{::llvm::cl::values(
             clEnumValN(::mlir::train::ReportFormat::text, "text",
                        "Aligned text for people"),
             clEnumValN(::mlir::train::ReportFormat::json, "json",
                        "JSON for programs (docs/MemoryReport.md)"),
             clEnumValN(::mlir::train::ReportFormat::svg, "svg",
                        "The memory timeline as a picture: live bytes over "
                        "the schedule, stacked by category, the peak marked"))}]>,
    Option<"output", "output", "std::string", /*default=*/"\"-\"",
           "File to write the report to ('-' for stdout)">,
    Option<"function", "function", "std::string", "\"\"",
           "The function to report on (default: the function marked "
           "train.step; e.g. its Hessian step, @train_step_hessian)">
  ];
}

def TrainRematPass : Pass<"train-remat", "mlir::ModuleOp"> {
  let summary = "Wraps forward segments of a training step in train.remat";
  let description = [{
    Marks what the backward recomputes instead of keeping, on a step written
    by `train-autodiff`. Policies, as practitioners use them:

    - `full`: each layer (its attention and MLP blocks together); only the
      layer's input stays for the backward (2·s·b·h per GPT layer in 16-bit);
    - `selective`: the attention core of each layer (QKᵀ, scale, softmax,
      dropout, ·V), Megatron's selective recompute (34·s·b·h per GPT layer
      stays);
    - `attention` / `mlp`: that block of each layer, apart from the other;
    - `every`: with `method=uniform`, chunks of `every` consecutive layers,
      only each chunk's input stays; with `method=block`, only the first
      `every` layers, each fully (Megatron's `--recompute-method`);
    - `custom`: `choices=` names one of none, selective, attention, mlp,
      full per layer;
    - `budget`: `budget=BYTES`; per layer the choice with the least
      recompute FLOPs overall such that the step's peak fits. Each layer's
      kept bytes, working bytes and recompute FLOPs are measured with the
      memory analysis; for a chain of layers the peak is the largest of
      (what earlier layers keep + this layer's working bytes) and the plan
      is found exactly by a dynamic program over the layers. Where nothing
      fits it says by how much, and fails. The budget is for the step as
      it is measured: `measure-after=PIPELINE` names the passes that will
      follow (train-grad-accum, train-quantize-optimizer-state,
      train-materialize-remat, train-zero, train-offload-optimizer), which
      each measured copy runs (what they leave unmaterialized is
      materialized after them). Under train-zero the budget is then one
      rank's (its shards, gathers and buckets); train-step passes its own
      passes. Where they cut the step into pipeline stages, the budget is
      the stage's that train-pipeline `select-stage=k` keeps (trainmem-run
      gives each rank its own): a layer's copies count as many times as
      the stage keeps micro-batches in flight at its peak, so the first
      stage recomputes the most and the last the least.

    `layers=A:B` limits a policy to layers A..B-1. Values a region passes on
    to the forward after it (a layer's output) stay; the rest is recomputed
    by `train-materialize-remat`.
  }];
  let options = [
    Option<"function", "function", "std::string", "\"\"",
           "The training step (default: the function marked train.step)">,
    Option<"policy", "policy", "::mlir::train::RematPolicy",
           "::mlir::train::RematPolicy::full",
           "What to recompute", [{::llvm::cl::values(
             clEnumValN(::mlir::train::RematPolicy::full, "full",
                        "Every layer's attention and MLP"),
             clEnumValN(::mlir::train::RematPolicy::selective, "selective",
                        "The attention core (scores, softmax, context)"),
             clEnumValN(::mlir::train::RematPolicy::attention, "attention",
                        "Every layer's attention"),
             clEnumValN(::mlir::train::RematPolicy::mlp, "mlp",
                        "Every layer's MLP"),
             clEnumValN(::mlir::train::RematPolicy::every, "every",
                        "Chunks of layers (every=, method=)"),
             clEnumValN(::mlir::train::RematPolicy::custom, "custom",
                        "One choice per layer (choices=)"),
             clEnumValN(::mlir::train::RematPolicy::budget, "budget",
                        "The least recompute that fits budget= bytes"))}]>,
    Option<"every", "every", "int64_t", "1",
           "Layers per chunk (method=uniform) or layers recomputed "
           "(method=block), for policy=every">,
    Option<"method", "method", "::mlir::train::RematMethod",
           "::mlir::train::RematMethod::uniform",
           "For policy=every: how layers are grouped", [{::llvm::cl::values(
             clEnumValN(::mlir::train::RematMethod::uniform, "uniform",
                        "Chunks of `every` layers, each one region"),
             clEnumValN(::mlir::train::RematMethod::block, "block",
                        "The first `every` layers, each whole"))}]>,
    Option<"layers", "layers", "std::string", "\"\"",
           "Layer range A:B (A..B-1); all layers when empty">,
    ListOption<"choices", "choices", "std::string",
           "For policy=custom: one of none, selective, attention, mlp, full "
           "per layer, comma-separated">,
    Option<"budget", "budget", "std::string", "",
           "For policy=budget: the peak the step must fit in, bytes or a "
           "size with a unit (6GiB, 8GB, 512MiB; as trainmem-plan --memory)">,
    Option<"measureAfter", "measure-after", "std::string", "",
           "For policy=budget: the passes that follow train-remat "
           "(a pass pipeline, e.g. {train-materialize-remat,"
           "train-zero{stage=3 ranks=8}}); each measured copy runs them, so "
           "that the budget "
           "holds for the step as it runs (one rank's under ZeRO; "
           "train-step passes its own)">
  ];
  let statistics = [
    Statistic<"numRegions", "remat-regions", "train.remat regions inserted">
  ];
}

def TrainMaterializeLayoutsPass
    : Pass<"train-materialize-layouts", "mlir::ModuleOp"> {
  let summary = "Copies the strided views a kernel reads row-major";
  let description = [{
    A transpose is a view: its result lies in its source's buffer with
    permuted strides, and kernels that read through strides (the matmul,
    the fused attention's Q/K/V, strided copies: the ops of
    `StridedOperandsOpInterface`) take it as it lies. Every other operand
    of a compute op is read row-major; where one is a strided view (an
    imported model's `y.transpose(0, 1)` added to the residual, or the
    gradient a transpose's VJP hands on), this pass copies it into a
    row-major tensor first (`train.reshape` to its own type, which is a
    copy of a strided view). Steps that need none are left as they are.
    train-step runs it after train-materialize-remat, and so does the
    planner, so the copies are in the memory plan.
  }];
  let statistics = [
    Statistic<"numCopies", "copies", "Strided views copied row-major">
  ];
}

def TrainMaterializeRematPass
    : Pass<"train-materialize-remat", "mlir::ModuleOp"> {
  let summary = "Clones each train.remat's recompute next to its backward use";
  let description = [{
    For every `train.remat`, the values defined inside that the backward
    reads (and the forward does not pass on) are recomputed: the ops that
    compute them from the region's inputs are cloned once, right before the
    first backward op that needs one of them, so the recompute's own
    temporaries die at once and its results live only as long as the
    backward needs them. Clones carry the unit attribute `train.recompute`
    (the memory report counts their FLOPs as `recompute`). The regions are
    then dissolved and block results nobody reads removed. Regions inside
    a `train.accumulate` loop are materialized in the loop's body.
  }];
  let options = [
    Option<"function", "function", "std::string", "\"\"",
           "The training step (default: the function marked train.step)">
  ];
  let statistics = [
    Statistic<"numRecomputed", "recomputed-ops", "Ops cloned for recompute">
  ];
}

def TrainGradAccumPass : Pass<"train-grad-accum", "mlir::ModuleOp"> {
  let summary = "Splits a step's batch into micro-batches summed by train.accumulate";
  let description = [{
    Rewrites a training step of batch B into `steps` micro-batches of
    ceil(B / steps) rows with one optimizer update: the forward and backward
    move into a `train.accumulate` whose body is re-typed for a micro-batch,
    gradients and loss are summed in f32 accumulators, and the optimizer
    block (clipping, LR schedule, update) runs once, after the sum.

    Loss normalization:
    - `tokens` (default): the loss is the sum over the valid tokens of the
      whole window divided by the window's valid-token count, counted
      (`train.count_valid`) before the backward: every `train.mean_loss` of
      the body divides by the window count. This is the fix for the
      gradient-accumulation bug of transformers PR 34191.
    - `mean`: each micro-batch's mean loss is weighed by its share of the
      batch's rows (1/steps for an even split).

    A batch not divisible by `steps` pads its last micro-batch with ignored
    targets: tokens normalization counts only real tokens, mean weighs a
    short micro-batch by its real rows; `uneven=refuse` refuses it instead.

    `groups=G` (and `interleaved`) sum the micro-batches' parts in G groups
    (`train.accumulate`'s `groups`): the order in which G ranks of
    train-zero sum theirs, so that one process reproduces an N-rank run's
    gradients to the bit (docs/Zero.md).

    `accumulate-dtype=bf16` (or `f16`) sums the gradients that the body
    computes in that type in that type (DeepSpeed's
    `data_types.grad_accum_dtype`): half the accumulators' bytes, each
    micro-batch's addition rounded once. The loss and any gradient of
    another type keep f32 sums; a step with no gradient of that type is
    refused. The default, `f32`, sums everything in f32.
  }];
  let options = [
    Option<"function", "function", "std::string", "\"\"",
           "The training step (default: the function marked train.step)">,
    Option<"steps", "steps", "int64_t", "1", "Micro-batches per update">,
    Option<"normalize", "normalize", "::mlir::train::AccumNormalize",
           "::mlir::train::AccumNormalize::tokens",
           "Loss normalization", [{::llvm::cl::values(
             clEnumValN(::mlir::train::AccumNormalize::tokens, "tokens",
                        "Divide by the batch's valid tokens (as one batch)"),
             clEnumValN(::mlir::train::AccumNormalize::mean, "mean",
                        "Mean of the micro-batches' mean losses"))}]>,
    Option<"uneven", "uneven", "::mlir::train::AccumUneven",
           "::mlir::train::AccumUneven::pad",
           "A batch not divisible by steps", [{::llvm::cl::values(
             clEnumValN(::mlir::train::AccumUneven::pad, "pad",
                        "Pad the last micro-batch with ignored targets"),
             clEnumValN(::mlir::train::AccumUneven::refuse, "refuse",
                        "Refuse the batch"))}]>,
    Option<"groups", "groups", "int64_t", "1",
           "Sum the micro-batches in this many groups, each in order, then "
           "the groups in order (must divide steps)">,
    Option<"interleaved", "interleaved", "bool", "false",
           "Group j holds micro-batches j, j + groups, ... (instead of "
           "steps/groups consecutive ones)">,
    Option<"accumulateDtype", "accumulate-dtype", "::mlir::train::AccumDtype",
           "::mlir::train::AccumDtype::f32",
           "The sums' type for the gradients computed in 16 bits",
           [{::llvm::cl::values(
             clEnumValN(::mlir::train::AccumDtype::f32, "f32",
                        "Sum every part in f32"),
             clEnumValN(::mlir::train::AccumDtype::bf16, "bf16",
                        "Sum bf16 gradients in bf16"),
             clEnumValN(::mlir::train::AccumDtype::f16, "f16",
                        "Sum f16 gradients in f16"))}]>
  ];
}

def TrainUnrollAccumPass : Pass<"train-unroll-accum", "mlir::ModuleOp"> {
  let summary = "Unrolls train.accumulate loops";
  let description = [{
    With `factor=0`, replaces each `train.accumulate` by one copy of its body
    per micro-batch, each fed its rows of the batch (`train.slice_rows`), and
    the f32 sums as explicit `train.add`s, so later passes can treat the last
    micro-step differently (e.g. communicate gradients only after it). With
    `factor=K`, K micro-steps per iteration of a loop of steps/K.

    On a step that carries an arena plan (train-plan-arena on the rolled
    loop), the complete unroll keeps it: each copy's ops keep the body's
    offsets, its rows (and index and share) take the body arguments'
    (`train.argument_offsets`), and the sums the loop results': the first
    part is copied into its sum (a `train.cast` to its own type), the
    others added in place. The unrolled step then needs the rolled loop's
    arena to the byte, which is what trainmem-plan measures. A partial
    unroll of a planned step is refused.
  }];
  // Each copy's micro-batch index is an arith.constant.
  let dependentDialects = ["::mlir::arith::ArithDialect"];
  let options = [
    Option<"factor", "factor", "int64_t", "0",
           "Micro-steps per loop iteration; 0 unrolls completely">
  ];
}

def TrainQuantizeOptimizerStatePass
    : Pass<"train-quantize-optimizer-state", "mlir::ModuleOp"> {
  let summary = "Stores the optimizer state of every update with an 8-bit "
                "form (AdamW, SGD, Lion, Sophia) in 8 bits, block-wise";
  let description = [{
    Rewrites every `train.adamw` of the step whose parameter has at least
    `min-size` elements into a `train.adamw_8bit`: its m and v arguments
    (`train.optimizer_state = "<param>.m"` / `".v"`) become 8-bit codes of
    the parameter's shape (`"<param>.m.codes"`) and one f32 absmax per block
    of `block` elements (`"<param>.m.absmax"`), and so do the results that
    carry them out of the step. m uses the signed dynamic map and v the
    unsigned one (Dettmers et al. 2022): 2 bytes per parameter for m and v
    plus 8 bytes per block, against 8. A `train.sgd` with momentum becomes
    a `train.sgd_8bit` the same way, its buffer (`"<param>.momentum"`) on
    the signed map. Smaller tensors (biases, norms) keep
    f32 state, as in bitsandbytes, where 8-bit state below 4096 elements
    costs accuracy for no memory to speak of.

    A new run starts the codes at the map's zero (m, v and the buffer = 0)
    and absmax at 0. Nothing else changes: the update, the learning rate and the gradient
    are those of the f32 step.

    ```
    trainmem-opt -train-autodiff -train-quantize-optimizer-state='block=256 min-size=4096'
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", "\"\"",
           "The training step (default: the function marked train.step)">,
    Option<"block", "block", "int64_t", "256",
           "Elements per quantization block (a power of two)">,
    Option<"minSize", "min-size", "int64_t", "4096",
           "Parameters with fewer elements keep f32 state">
  ];
  let statistics = [
    Statistic<"numQuantized", "quantized-tensors",
              "Parameters whose optimizer state became 8-bit">
  ];
}

#endif // TRAINMEM_DIALECT_TRAIN_TRANSFORMS_PASSES_TD
