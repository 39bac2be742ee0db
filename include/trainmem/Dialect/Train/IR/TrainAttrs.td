//===- TrainAttrs.td - attributes of the train dialect -----*- tablegen -*-===//

#ifndef TRAINMEM_DIALECT_TRAIN_IR_TRAINATTRS_TD
#define TRAINMEM_DIALECT_TRAIN_IR_TRAINATTRS_TD

include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "trainmem/Dialect/Train/IR/TrainDialect.td"

// What a `train.block` region holds. Remat policies and the per-layer memory
// report key on this, so attention can be treated apart from the MLP;
// `optimizer` holds a step's parameter update.
def Train_BlockKind : I32EnumAttr<"BlockKind", "kind of a model block", [
    I32EnumAttrCase<"embedding", 0>,
    I32EnumAttrCase<"attention", 1>,
    I32EnumAttrCase<"mlp", 2>,
    I32EnumAttrCase<"head", 3>,
    I32EnumAttrCase<"optimizer", 4>
  ]> {
  let cppNamespace = "::mlir::train";
}

// What an optimizer-state tensor holds for its parameter.
def Train_StateKind : I32EnumAttr<"StateKind", "kind of optimizer state", [
    // The f32 master copy of a 16-bit parameter.
    I32EnumAttrCase<"master", 0>,
    // The first moment (Adam's, Lion's and Sophia's momentum) and Adam's
    // second moment.
    I32EnumAttrCase<"m", 1>,
    I32EnumAttrCase<"v", 2>,
    // SGD's momentum buffer.
    I32EnumAttrCase<"momentum", 3>,
    // The step's dynamic loss scale (train-loss-scale): tensor<3xi64> of
    // [log2(scale / initial scale), clean steps since the last change,
    // skipped steps], zeros at the start.
    I32EnumAttrCase<"loss_scale", 4>,
    // Sophia's estimate of the Hessian's diagonal.
    I32EnumAttrCase<"h", 5>
  ]> {
  let cppNamespace = "::mlir::train";
  let genSpecializedAttr = 0;
}

// Which tensor of a state's encoding: the value itself (f32 or the
// parameter's type), or the two tensors of a block-wise 8-bit encoding.
def Train_StatePart : I32EnumAttr<"StatePart", "tensor of a state encoding", [
    I32EnumAttrCase<"value", 0>,
    I32EnumAttrCase<"codes", 1>,
    I32EnumAttrCase<"absmax", 2>
  ]> {
  let cppNamespace = "::mlir::train";
  let genSpecializedAttr = 0;
}

// The 256-entry map of a block-wise 8-bit encoding (Dettmers et al.'s
// dynamic tree maps, include/trainmem/Support/DynamicMap.h).
def Train_QuantMap : I32EnumAttr<"QuantMap", "8-bit quantization map", [
    I32EnumAttrCase<"none", 0>,
    I32EnumAttrCase<"signed_dynamic", 1>,
    I32EnumAttrCase<"unsigned_dynamic", 2>
  ]> {
  let cppNamespace = "::mlir::train";
  let genSpecializedAttr = 0;
}

// How a parameter starts.
def Train_InitKind : I32EnumAttr<"InitKind", "initializer of a parameter", [
    I32EnumAttrCase<"zeros", 0>,
    I32EnumAttrCase<"ones", 1>,
    // Normal with mean 0 and the given standard deviation.
    I32EnumAttrCase<"normal", 2>
  ]> {
  let cppNamespace = "::mlir::train";
  let genSpecializedAttr = 0;
}

// An f64 parameter, parsed as a float literal and printed exactly (MLIR's
// round-trip float printer).
class Train_F64Parameter<string desc, string default>
    : APFloatParameter<desc> {
  let defaultValue = "::llvm::APFloat(" # default # ")";
  let parser = [{ [&]() -> ::mlir::FailureOr<::llvm::APFloat> {
    double value;
    if ($_parser.parseFloat(value))
      return ::mlir::failure();
    return ::llvm::APFloat(value);
  }() }];
  let printer = "$_printer.printFloat($_self)";
}

class Train_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Train_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def Train_ZeroAttr : Train_Attr<"Zero", "zero"> {
  let summary = "how train-zero partitioned the step over data-parallel ranks";
  let description = [{
    The value of `train.zero` on the step: the ZeRO stage (0: plain data
    parallel, 1: optimizer state sharded, 2: + gradients, 3: + parameters),
    the data-parallel ranks of the `shard.grid` the collectives run on, the
    gradient bucket in bytes and how many layers stage 3 gathers ahead. The
    step is one SPMD program: every rank runs it on its own micro-batch, the
    rank being a runtime value.

    ```mlir
    func.func @train_step(...) attributes {train.step,
        train.zero = #train.zero<stage = 1, ranks = 8, bucket = 500000000>}
    ```
  }];
  let parameters = (ins
    "int64_t":$stage,
    "int64_t":$ranks,
    "int64_t":$bucket,
    DefaultValuedParameter<"int64_t", "0">:$prefetch
  );
  let assemblyFormat = [{
    `<` `stage` `=` $stage `,` `ranks` `=` $ranks `,` `bucket` `=` $bucket
    (`,` `prefetch` `=` $prefetch^)? `>`
  }];
  let genVerifyDecl = 1;
}

def Train_HessianStepAttr : Train_Attr<"HessianStep", "hessian_step"> {
  let summary = "a function that refreshes a step's Hessian estimate";
  let description = [{
    The value of `train.hessian_step` on a function train-autodiff built
    for an optimizer with a Hessian estimate (Sophia): the step whose state
    (`#train.state<param, h>`) it refreshes, and every how many steps the
    runner calls it (after step t when t is a multiple of `every`). The
    function shares the step's parameters and state by their markers.

    ```mlir
    func.func @train_step_hessian(...) attributes {
        train.hessian_step = #train.hessian_step<@train_step, every = 10>}
    ```
  }];
  let parameters = (ins "::mlir::FlatSymbolRefAttr":$step,
                        "int64_t":$every);
  let assemblyFormat = "`<` $step `,` `every` `=` $every `>`";
  let genVerifyDecl = 1;
}

// How train-context-parallel cuts a sequence among a context group.
def Train_ContextOrder : I32EnumAttr<"ContextOrder",
    "order of a context-parallel rank's positions", [
    // Rank p holds positions [p·n, (p + 1)·n).
    I32EnumAttrCase<"contiguous", 0>,
    // Rank p holds chunks p and 2c - 1 - p of 2c equal chunks: each rank's
    // queries see as many keys under a causal mask (Megatron-Core's order).
    I32EnumAttrCase<"balanced", 1>
  ]> {
  let cppNamespace = "::mlir::train";
  let genSpecializedAttr = 0;
}

def Train_TensorSplitAttr : Train_Attr<"TensorSplit", "split"> {
  let summary = "a parameter split across a tensor-parallel group";
  let description = [{
    The value of `train.tensor_split` on a step's parameter argument that
    train-tensor-parallel split: the argument is one rank's part of the
    whole parameter, which is `parts` times larger along dimension `dim`;
    the rank at position p of its group along axis `axis` of the
    `shard.grid` `grid` holds elements [p · n, (p + 1) · n) of that
    dimension (n the argument's size there). A column-parallel weight is
    split along its columns (dim 1), a row-parallel one along its rows
    (dim 0). The optimizer sums the squared norms of split gradients over
    that axis; the runner and checkpoints cut and join parameters by it.
    On a dropout it says which part of the whole mask a rank draws; a
    `balanced` part (a context-parallel rank's positions,
    train-context-parallel) is chunks p and 2·parts - 1 - p of 2·parts.

    ```mlir
    %w1: tensor<768x1536xbf16> {train.param = "h.0.mlp.fc.weight",
        train.tensor_split = #train.split<dim = 1, parts = 2, grid = @tp, axis = 1>}
    ```
  }];
  let parameters = (ins "int64_t":$dim, "int64_t":$parts,
                        "FlatSymbolRefAttr":$grid, "int64_t":$axis,
                        DefaultValuedParameter<"::mlir::train::ContextOrder",
                            "::mlir::train::ContextOrder::contiguous">:$order);
  let assemblyFormat = [{
    `<` `dim` `=` $dim `,` `parts` `=` $parts `,` `grid` `=` $grid `,`
    `axis` `=` $axis (`,` $order^)? `>`
  }];
  let builders = [
    // A contiguous part (every split but a balanced context piece's).
    AttrBuilder<(ins "int64_t":$dim, "int64_t":$parts,
                     "FlatSymbolRefAttr":$grid, "int64_t":$axis), [{
      return $_get($_ctxt, dim, parts, grid, axis,
                   ::mlir::train::ContextOrder::contiguous);
    }]>
  ];
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    bool isBalanced() const {
      return getOrder() == ::mlir::train::ContextOrder::balanced;
    }
  }];
}

// The order in which a pipeline stage runs its micro-batches' forward and
// backward (train-pipeline).
def Train_PipelineSchedule : I32EnumAttr<"PipelineSchedule",
    "order of a pipeline stage's forward and backward units", [
    // Every micro-batch's forward, then every backward (Huang et al. 2019):
    // m micro-batches in flight on every stage.
    I32EnumAttrCase<"gpipe", 0>,
    // One forward, one backward (Narayanan et al. 2021, PipeDream-Flush):
    // stage k runs p - k - 1 forwards first, min(p - k, m) in flight.
    I32EnumAttrCase<"one_f_one_b", 1>,
    // 1F1B over v model chunks per stage (Megatron's interleaved
    // schedule): the bubble and the first stage's activations shrink by v.
    I32EnumAttrCase<"interleaved", 2>
  ]> {
  let cppNamespace = "::mlir::train";
  let genSpecializedAttr = 0;
}

def Train_PipelineStageAttr : Train_Attr<"PipelineStage", "pipeline"> {
  let summary = "one stage of a pipeline-parallel step";
  let description = [{
    The value of `train.pipeline_stage` on a function train-pipeline made:
    it is stage `stage` of `stages`, the ranks at that position of the
    pipeline axis run it; it runs `micro_batches` micro-batches per step in
    `schedule`'s order over its `virtual` model chunks (chunk j of stage k
    holds the layers of virtual stage j·stages + k). The stages exchange
    activations and their gradients through `train.pipeline_exchange`.

    ```mlir
    func.func @train_step.stage1(...) attributes {
        train.pipeline_stage = #train.pipeline<stage = 1, stages = 4,
            micro_batches = 8, schedule = one_f_one_b, virtual = 1>}
    ```
  }];
  let parameters = (ins "int64_t":$stage, "int64_t":$stages,
                        "int64_t":$micro_batches,
                        EnumParameter<Train_PipelineSchedule>:$schedule,
                        "int64_t":$virtual_stages);
  let assemblyFormat = [{
    `<` `stage` `=` $stage `,` `stages` `=` $stages `,` `micro_batches` `=`
    $micro_batches `,` `schedule` `=` $schedule `,` `virtual` `=`
    $virtual_stages `>`
  }];
  let genVerifyDecl = 1;
}

def Train_ContextSplitAttr : Train_Attr<"ContextSplit", "context"> {
  let summary = "a sequence cut among a context-parallel group";
  let description = [{
    What train-context-parallel puts on the ops that read positions: the
    sequence is cut among the `parts` ranks along axis `axis` of the
    `shard.grid` `grid`, the rank at position p of its group holding
    positions [p·n, (p + 1)·n) (`contiguous`) or chunks p and 2·parts - 1 -
    p of 2·parts equal chunks (`balanced`). On `train.context_slice` it says
    which rows to take, on `train.rope` the positions of a rank's rows, on
    `train.attention` (and its gradient) the queries' positions, the keys
    being the group's rows gathered in rank order
    (include/trainmem/Support/ContextChunks.h).

    ```mlir
    %o, %lse = train.attention %q, %k, %v {causal, scale = 0.125 : f64,
        context_parallel = #train.context<parts = 2, grid = @cp, axis = 1, balanced>}
    ```
  }];
  let parameters = (ins "int64_t":$parts, "FlatSymbolRefAttr":$grid,
                        "int64_t":$axis,
                        EnumParameter<Train_ContextOrder>:$order);
  let assemblyFormat = [{
    `<` `parts` `=` $parts `,` `grid` `=` $grid `,` `axis` `=` $axis `,`
    $order `>`
  }];
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    bool isBalanced() const {
      return getOrder() == ::mlir::train::ContextOrder::balanced;
    }
    /// The rows one rank holds of `whole` (0 when `parts` does not divide
    /// them, or 2·parts when balanced).
    int64_t rowsOf(int64_t whole) const {
      // A part's rows: whole / parts, and two chunks of them when balanced
      // (checked without forming 2 · parts, which may not be a count).
      if (whole % getParts() != 0)
        return 0;
      int64_t rows = whole / getParts();
      return isBalanced() && rows % 2 != 0 ? 0 : rows;
    }
  }];
}

def Train_StateAttr : Train_Attr<"State", "state"> {
  let summary = "what an optimizer-state tensor of a step holds";
  let description = [{
    The value of `train.optimizer_state` on a step's arguments and results:
    the parameter the state belongs to, its kind, and its encoding: the
    plain value, or one of the two tensors (codes, block maxima) of a
    block-wise 8-bit encoding with its map and block size. Passes and the
    runner read these fields; nothing parses a name.

    ```mlir
    #train.state<"h.0.mlp.fc.weight", m>
    #train.state<"h.0.mlp.fc.weight", v, codes, unsigned_dynamic, block = 256>
    ```
  }];
  let parameters = (ins
    StringRefParameter<"name of the parameter">:$param,
    EnumParameter<Train_StateKind>:$kind,
    DefaultValuedParameter<"::mlir::train::StatePart",
                           "::mlir::train::StatePart::value">:$part,
    DefaultValuedParameter<"::mlir::train::QuantMap",
                           "::mlir::train::QuantMap::none">:$map,
    DefaultValuedParameter<"int64_t", "0">:$block
  );
  let assemblyFormat = [{
    `<` $param `,` $kind (`,` $part^ `,` $map `,` `block` `=` $block)? `>`
  }];
  let builders = [
    // A plain (not 8-bit) state.
    AttrBuilder<(ins "::llvm::StringRef":$param,
                     "::mlir::train::StateKind":$kind), [{
      return $_get($_ctxt, param, kind, ::mlir::train::StatePart::value,
                   ::mlir::train::QuantMap::none, 0);
    }]>
  ];
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Whether this is one tensor of a block-wise 8-bit encoding.
    bool isQuantized() const { return getPart() != StatePart::value; }
    /// The same state in another part of its encoding.
    StateAttr withPart(StatePart part, QuantMap map, int64_t block) const;
    /// The name the runner and checkpoints key this tensor by:
    /// "<param>.<kind>", and ".codes" or ".absmax" for 8-bit parts.
    std::string getKey() const;
  }];
}

def Train_InitAttr : Train_Attr<"Init", "init"> {
  let summary = "how a parameter is initialized";
  let description = [{
    The value of `train.init` on a step's parameter arguments, written by the
    model builder from the architecture's reference initialization: norm
    gains `ones`, biases `zeros`, matrices `normal` with a standard
    deviation (GPT-2 scales the residual projections by 1/sqrt(2 · layers)).

    A `stream` (normal only) names the random stream a runner draws a
    parameter's values from (its index among the whole model's
    parameters): a pipeline stage's function holds some of them
    (train-pipeline sets it), and draws what one process running the whole
    step draws. Without one, a runner uses the parameter's index among the
    function's.

    ```mlir
    #train.init<normal, std = 0.02>
    #train.init<ones>
    #train.init<normal, std = 0.02, stream = 17>
    ```
  }];
  let parameters = (ins
    EnumParameter<Train_InitKind>:$kind,
    Train_F64Parameter<"standard deviation of normal", "0.0">:$std,
    DefaultValuedParameter<"int64_t", "-1">:$stream
  );
  let builders = [
    AttrBuilder<(ins "::mlir::train::InitKind":$kind,
                     "::llvm::APFloat":$std), [{
      return $_get($_ctxt, kind, std, -1);
    }]>
  ];
  let assemblyFormat =
      "`<` $kind (`,` `std` `=` $std^)? (`,` `stream` `=` $stream^)? `>`";
  let genVerifyDecl = 1;
}

// Where a step's tensor lives, or where an op runs.
def Train_MemorySpace : I32EnumAttr<"MemorySpace", "memory space", [
    I32EnumAttrCase<"device", 0>,
    I32EnumAttrCase<"host", 1>
  ]> {
  let cppNamespace = "::mlir::train";
  let genSpecializedAttr = 0;
}

def Train_SpaceAttr : Train_Attr<"Space", "space"> {
  let summary = "the memory a step's tensor lives in, or where an op runs";
  let description = [{
    The value of `train.memory_space`: on a step's arguments and results,
    the memory the tensor lives in between steps (`host`: CPU memory, for
    optimizer state offloaded by `train-offload-optimizer`; `device`, the
    default, where the step computes); on an optimizer update, or on the
    cast of its refreshed 16-bit weight, where it runs (`host`: DeepSpeed's
    CPU Adam, `what=states+update`). The memory
    analysis counts host tensors apart from the device's and the bytes that
    cross between them.

    ```mlir
    %arg5: tensor<768xf32> {train.memory_space = #train.space<host>, ...}
    ```
  }];
  let parameters = (ins EnumParameter<Train_MemorySpace>:$space);
  let assemblyFormat = "`<` $space `>`";
}

#endif // TRAINMEM_DIALECT_TRAIN_IR_TRAINATTRS_TD
