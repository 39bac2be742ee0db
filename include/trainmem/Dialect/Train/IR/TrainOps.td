//===- TrainOps.td - ops of the train dialect --------------*- tablegen -*-===//

#ifndef TRAINMEM_DIALECT_TRAIN_IR_TRAINOPS_TD
#define TRAINMEM_DIALECT_TRAIN_IR_TRAINOPS_TD

include "trainmem/Dialect/Train/IR/TrainDialect.td"
include "trainmem/Dialect/Train/IR/TrainAttrs.td"
include "trainmem/Dialect/Train/IR/TrainInterfaces.td"
include "trainmem/Dialect/Train/IR/TrainTypes.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ViewLikeInterface.td"

// An op with value semantics and a static cost.
class Train_ComputeOp<string mnemonic, list<Trait> traits = [],
                      list<string> costOverrides = []>
    : Train_Op<mnemonic, !listconcat(traits, [Pure,
        DeclareOpInterfaceMethods<Train_CostOpInterface, costOverrides>])>;

// What a step computes but never differentiates: gradient ops (the VJPs'
// building blocks), optimizer and loss-scaling ops, index and mask makers.
// train-autodiff names such an op when a loss depends on it through a
// differentiable path; the dialect-completeness test checks that every
// compute op is differentiable or marked so.
def Train_NotDifferentiated : NativeOpTrait<"NotDifferentiated"> {
  let cppNamespace = "::mlir::train";
}

// An op whose result is the element-wise sum of its operands: analyses
// follow a gradient through it to the partial gradients it sums.
def Train_SumsOperands : NativeOpTrait<"SumsOperands"> {
  let cppNamespace = "::mlir::train";
}

// An op that computes each position (each index of its result's leading
// dimensions) from the operands' values at that position and from
// operands it broadcasts along the positions (a norm's weights, a bias):
// it runs unchanged on a piece of the positions, given those whole
// (sequence parallelism splits the sequence; it checks that what is
// broadcast has no sequence dimension).
def Train_PositionWise : NativeOpTrait<"PositionWise"> {
  let cppNamespace = "::mlir::train";
}

// A compute op that is not differentiated.
class Train_NonDiffOp<string mnemonic, list<Trait> traits = [],
                      list<string> costOverrides = []>
    : Train_ComputeOp<mnemonic, !listconcat(traits, [Train_NotDifferentiated]),
                      costOverrides>;

// A compute op that also builds its own vector-Jacobian product.
class Train_DiffOp<string mnemonic, list<Trait> traits = [],
                   list<string> costOverrides = []>
    : Train_ComputeOp<mnemonic, !listconcat(traits,
        [DeclareOpInterfaceMethods<Train_DifferentiableOpInterface>]),
        costOverrides>;

// An element-wise activation y = f(x), `Name`Op (train.`mnemonic`), and its
// gradient from the saved input, dx = dy · f'(x), `Name`GradOp
// (train.`mnemonic`_grad): `flops` and `gradFlops` per element
// (docs/CostModel.md). The VJP and the cost are here; the kernels, the
// reference evaluator, the lowering onto tmrt_`mnemonic` and
// tmrt_`mnemonic`_grad and the sharding model come from the entry
// TMRT_ACTIVATION(`mnemonic`, `Name`) of trainmem-runtime/Activations.def,
// and the math from trainmem::`Name` (Support/Activations.h):
// docs/WritingAPass.md, "A new activation".
multiclass Train_Activation<string mnemonic, string name, string formula,
                            string exampleType, int flops, int gradFlops> {
  def Op : Train_DiffOp<mnemonic,
      [Train_PositionWise, SameOperandsAndResultType]> {
    let summary = formula;
    let description = [{
      Element-wise; its gradient is `train.}] # mnemonic # [{_grad`.

      ```mlir
      %y = train.}] # mnemonic # [{ %x : }] # exampleType # [{
      ```
    }];
    let arguments = (ins Train_FloatTensor:$input);
    let results = (outs Train_FloatTensor:$result);
    let assemblyFormat = "$input attr-dict `:` type($result)";
    let extraClassDefinition = [{
      uint64_t $cppClass::getFlops() {
        return ::mlir::train::mulCount(}] # flops # [{,
            ::mlir::train::getNumElements(getResult().getType()));
      }
      ::mlir::LogicalResult $cppClass::buildVJP(::mlir::OpBuilder &builder,
          ::mlir::ValueRange resultGrads,
          ::llvm::SmallVectorImpl<::mlir::Value> &operandGrads) {
        if (!resultGrads[0]) {
          operandGrads.push_back(::mlir::Value());
          return ::mlir::success();
        }
        operandGrads.push_back(}] # name # [{GradOp::create(builder, getLoc(),
            resultGrads[0], getInput()));
        return ::mlir::success();
      }
    }];
  }

  def GradOp : Train_NonDiffOp<mnemonic # "_grad",
      [AllTypesMatch<["grad", "input", "result"]>]> {
    let summary = "gradient of train." # mnemonic # " from its saved input";
    let description = [{
      `result = grad · f'(input)`, f being `train.}] # mnemonic # [{`.

      ```mlir
      %dx = train.}] # mnemonic # [{_grad %dy, %x : tensor<4x64x256xf32>
      ```
    }];
    let arguments = (ins Train_FloatTensor:$grad, Train_FloatTensor:$input);
    let results = (outs Train_FloatTensor:$result);
    let assemblyFormat = "$grad `,` $input attr-dict `:` type($result)";
    let extraClassDefinition = [{
      uint64_t $cppClass::getFlops() {
        return ::mlir::train::mulCount(}] # gradFlops # [{,
            ::mlir::train::getNumElements(getInput().getType()));
      }
    }];
  }
}

//===----------------------------------------------------------------------===//
// Forward compute ops
//===----------------------------------------------------------------------===//

def Train_EmbeddingOp : Train_DiffOp<"embedding", [InferTypeOpAdaptor],
                                     ["getBytesRead"]> {
  let summary = "gathers rows of an embedding table";
  let description = [{
    `result[..., :] = table[ids[...], :]`. The table is `[vocab, hidden]`; the
    result has the shape of `ids` followed by `hidden`. Ids outside the table
    are an error at run time. With `split` (vocabulary parallelism,
    `#train.split` of the table along dimension 0) the table is rows
    `[q·n, (q+1)·n)` of one `parts · n` rows long, `q` the rank's position
    on the split's grid axis: an id outside those rows looks up zeros, so
    that the group's sum of the results is the whole table's lookup; an id
    outside the whole table is the error.

    ```mlir
    %x = train.embedding %wte, %tokens
        : tensor<50257x768xbf16>, tensor<8x1024xi32> -> tensor<8x1024x768xbf16>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$table, Train_IdTensor:$ids,
                       OptionalAttr<Train_TensorSplitAttr>:$split);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = [{
    $table `,` $ids attr-dict `:` type($table) `,` type($ids) `->` type($result)
  }];
  let hasVerifier = 1;
  // The result type follows from the operands (builders and passes that
  // re-type ops ask inferReturnTypes); verify() checks the written type
  // with a message that names the expected shape, so the interface's own
  // comparison is relaxed.
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange,
                                        ::mlir::TypeRange) {
      return true;
    }
  }];
}

def Train_IotaOp : Train_NonDiffOp<"iota"> {
  let summary = "the positions 0, 1, ..., n-1";
  let description = [{
    A rank-1 tensor of consecutive positions, used to look up learned position
    embeddings.

    ```mlir
    %pos = train.iota : tensor<1024xi32>
    ```
  }];
  let results = (outs Train_IdTensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Train_ContextSliceOp : Train_NonDiffOp<"context_slice",
    [InferTypeOpAdaptor], ["getBytesRead"]> {
  let summary = "a context-parallel rank's rows of ids along the sequence";
  let description = [{
    The rows of dimension `dim` that this rank of a context-parallel group
    holds (`context_parallel`, #train.context: a contiguous piece, or chunks p and
    2c - 1 - p of 2c when balanced): how train-context-parallel gives each
    rank its positions of the step's tokens, targets and position ids,
    which every rank of the group reads whole.

    ```mlir
    %mine = train.context_slice %tokens {dim = 1, context_parallel = #train.context<parts = 2, grid = @cp, axis = 1, balanced>}
        : tensor<8x4096xi32> -> tensor<8x2048xi32>
    ```
  }];
  let arguments = (ins Train_IdTensor:$input, I64Attr:$dim,
                       Train_ContextSplitAttr:$context_parallel);
  let results = (outs Train_IdTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Train_MatmulOp : Train_DiffOp<"matmul", [DeclareOpInterfaceMethods<Train_StridedOperandsOpInterface>,
     InferTypeOpAdaptor], ["getGemms"]> {
  let summary = "batched matrix product with optional transposes";
  let description = [{
    `result = op(lhs) · op(rhs)` over the last two dimensions, where `op`
    transposes them when `transpose_lhs` / `transpose_rhs` is set. Leading
    (batch) dimensions broadcast as in NumPy: aligned from the right, each pair
    equal or one of them 1; a rank-2 `rhs` is a weight shared by every batch.

    ```mlir
    %scores = train.matmul %q, %k {transpose_rhs}
        : tensor<8x12x1024x64xbf16>, tensor<8x12x1024x64xbf16>
       -> tensor<8x12x1024x1024xbf16>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$lhs, Train_FloatTensor:$rhs,
                       UnitAttr:$transpose_lhs, UnitAttr:$transpose_rhs);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
  let hasVerifier = 1;
  // The result type follows from the operands (builders and passes that
  // re-type ops ask inferReturnTypes); verify() checks the written type
  // with a message that names the expected shape, so the interface's own
  // comparison is relaxed.
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange,
                                        ::mlir::TypeRange) {
      return true;
    }
  }];
}

def Train_AddOp : Train_DiffOp<"add",
    [Train_PositionWise, SameOperandsAndResultType, Train_SumsOperands,
     DeclareOpInterfaceMethods<Train_TiedOpInterface>]> {
  let summary = "elementwise sum (residual connections)";
  let description = [{
    A micro-batch sum (`train.micro_batch_sum`, train-unroll-accum's
    running sum of gradients) ties its result to `lhs`: the sum is written
    over the running sum where nothing reads it afterwards, as the rolled
    loop's accumulator is (TiedOpInterface).

    ```mlir
    %y = train.add %x, %attn : tensor<8x1024x768xbf16>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$lhs, Train_FloatTensor:$rhs);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Train_MulOp : Train_DiffOp<"mul", [Train_PositionWise, SameOperandsAndResultType]> {
  let summary = "elementwise product (gated MLPs)";
  let description = [{
    ```mlir
    %h = train.mul %gate, %up : tensor<1x4096x11008xbf16>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$lhs, Train_FloatTensor:$rhs);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Train_ScaleOp : Train_DiffOp<"scale", [Train_PositionWise, SameOperandsAndResultType]> {
  let summary = "multiplies by a constant";
  let description = [{
    ```mlir
    %s = train.scale %scores {factor = 0.125 : f64} : tensor<8x12x1024x1024xbf16>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input, F64Attr:$factor);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Train_BiasAddOp : Train_DiffOp<"bias_add",
    [Train_PositionWise, AllTypesMatch<["input", "result"]>]> {
  let summary = "adds a tensor broadcast over leading dimensions";
  let description = [{
    `result[i..., j...] = input[i..., j...] + bias[j...]`: the bias has the
    shape of the input's trailing dimensions (a linear layer's bias, or a
    learned position table added to every sequence of a batch).

    ```mlir
    %y = train.bias_add %x, %b : tensor<8x1024x3072xbf16>, tensor<3072xbf16>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$bias);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $bias attr-dict `:` type($input) `,` type($bias)
  }];
  let hasVerifier = 1;
}

def Train_LayerNormOp : Train_DiffOp<"layer_norm",
    [Train_PositionWise, AllTypesMatch<["input", "result"]>]> {
  let summary = "layer normalization over the last dimension";
  let description = [{
    `(x - mean) / sqrt(var + epsilon) * gamma + beta` over the last
    dimension; `gamma` and `beta` have its size.

    ```mlir
    %y = train.layer_norm %x, %g, %b {epsilon = 1.0e-05 : f64}
        : tensor<8x1024x768xbf16>, tensor<768xbf16>, tensor<768xbf16>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$gamma,
                       Train_FloatTensor:$beta, F64Attr:$epsilon);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $gamma `,` $beta attr-dict `:` type($input) `,` type($gamma)
    `,` type($beta)
  }];
  let hasVerifier = 1;
  let builders = [
    OpBuilder<(ins "::mlir::Value":$input, "::mlir::Value":$gamma,
                   "::mlir::Value":$beta, "double":$epsilon), [{
      build($_builder, $_state, input.getType(), input, gamma, beta,
            $_builder.getF64FloatAttr(epsilon));
    }]>
  ];
}

def Train_RMSNormOp : Train_DiffOp<"rms_norm",
    [Train_PositionWise, AllTypesMatch<["input", "result"]>]> {
  let summary = "root-mean-square normalization over the last dimension";
  let description = [{
    `x / sqrt(mean(x²) + epsilon) * (gamma + gain_offset)` over the last
    dimension; `gain_offset` is 0 unless given (Gemma's norm scales by
    `1 + weight`: 1).

    ```mlir
    %y = train.rms_norm %x, %g {epsilon = 1.0e-05 : f64}
        : tensor<1x4096x4096xbf16>, tensor<4096xbf16>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$gamma,
                       F64Attr:$epsilon,
                       DefaultValuedAttr<F64Attr, "0.0">:$gain_offset);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $gamma attr-dict `:` type($input) `,` type($gamma)
  }];
  let hasVerifier = 1;
  let builders = [
    OpBuilder<(ins "::mlir::Value":$input, "::mlir::Value":$gamma,
                   "double":$epsilon, CArg<"double", "0.0">:$gainOffset), [{
      build($_builder, $_state, input.getType(), input, gamma,
            $_builder.getF64FloatAttr(epsilon),
            $_builder.getF64FloatAttr(gainOffset));
    }]>
  ];
}

def Train_GeluOp : Train_DiffOp<"gelu", [Train_PositionWise, SameOperandsAndResultType]> {
  let summary = "GELU, tanh approximation or exact";
  let description = [{
    `0.5 x (1 + tanh(sqrt(2/π) (x + 0.044715 x³)))`, as GPT-2 uses; with
    `exact`, `0.5 x (1 + erf(x / sqrt(2)))`, PyTorch's `nn.GELU()` (which
    nanoGPT uses).

    ```mlir
    %y = train.gelu %x : tensor<8x1024x3072xbf16>
    %z = train.gelu %x {exact} : tensor<8x1024x3072xbf16>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input, UnitAttr:$exact);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def Train_BiasGeluOp : Train_DiffOp<"bias_gelu",
    [Train_PositionWise, AllTypesMatch<["input", "result"]>]> {
  let summary = "GELU of a tensor plus a bias broadcast over leading dimensions";
  let description = [{
    `gelu(input + bias)`, the sum rounded to the element type first: to the
    bit `train.gelu` of `train.bias_add` (train-fuse-elementwise makes it
    of them), in one pass over memory instead of two. Its gradient
    (`train.bias_gelu_grad`) reads the input and the bias, not the sum, so
    the step saves the input where it saved the sum: the same bytes.

    ```mlir
    %y = train.bias_gelu %x, %b : tensor<8x1024x3072xbf16>, tensor<3072xbf16>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$bias);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $bias attr-dict `:` type($input) `,` type($bias)
  }];
  let hasVerifier = 1;
}

defm Train_Silu : Train_Activation<"silu", "Silu", "SiLU (swish): x · sigmoid(x)",
    "tensor<1x4096x11008xbf16>", /*flops=*/4, /*gradFlops=*/6>;

// OPT's feed-forward activation. NaN passes through (PyTorch's relu); the
// gradient is 0 where x <= 0 (also at 0), as PyTorch's.
defm Train_Relu : Train_Activation<"relu", "Relu", "ReLU: max(x, 0)",
    "tensor<8x2048x8192xbf16>", /*flops=*/1, /*gradFlops=*/1>;

// Persimmon's (and Primer's) activation: the square of the f32 relu,
// rounded once.
defm Train_Relu2 : Train_Activation<"relu2", "Relu2",
    "squared ReLU: max(x, 0)^2", "tensor<8x2048x16384xbf16>",
    /*flops=*/2, /*gradFlops=*/2>;

def Train_SoftmaxOp : Train_DiffOp<"softmax", [SameOperandsAndResultType]> {
  let summary = "softmax over the last dimension, optionally causal";
  let description = [{
    With `causal`, the last two dimensions are (query, key) and entries with
    key > query get probability 0, so they must be equal in size.

    With `alibi_slopes` (ALiBi, Press et al. 2022: one slope `m_h` per head,
    the heads being the dimensions before (query, key), counted from the
    back: `H` of `[B, H, S, S]`, `KVH · G` of a grouped-query
    `[B, KVH, G, S, S]`), score `(h, i, j)` gets the bias
    `m_h · (j - i)` before the softmax: a linear penalty on the distance to
    the query, computed where the score is read (no bias tensor exists). A
    bias that differs from it by a constant per row (Bloom's `m_h · j`) is
    the same softmax. The bias is constant: the gradient is
    `train.softmax_grad`'s as without it.

    ```mlir
    %p = train.softmax %scores {causal} : tensor<8x12x1024x1024xbf16>
    %a = train.softmax %scores {causal, alibi_slopes = array<f64: 0.25, 0.0625>}
        : tensor<8x2x1024x1024xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input, UnitAttr:$causal,
                       OptionalAttr<DenseF64ArrayAttr>:$alibi_slopes);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Train_DropoutOp : Train_DiffOp<"dropout",
    [Train_PositionWise, AllTypesMatch<["input", "result"]>, AttrSizedOperandSegments,
     InferShapedTypeOpAdaptor,
     DeclareOpInterfaceMethods<Train_BatchDrawOpInterface>]> {
  let summary = "inverted dropout with a counter-based keep-mask";
  let description = [{
    Zeroes each element with probability `rate` and scales the rest by
    `1 / (1 - rate)`. Element `i` (row-major) is kept when the top 24 bits of
    word `e % 4` of Philox-4x32-10, keyed by `seed + key` (the optional `key`
    operand, 0 without it), at counter (`e / 4`, `offset`), are below
    `round((1 - rate) · 2^24)`, where `e = first + rank · rank_elements +
    part · part_elements + i` is the element's position in the whole batch
    (`part`, an optional operand, is 0 without it; `rank` is the process's
    index on the data-parallel axis, 0 on one process): a uniform draw
    below `1 - rate`, in integers,
    so any executor and any recompute draws the same mask
    (`include/trainmem/Support/Philox.h`). `offset` tells the dropout sites
    of a model apart; `key` (a training step passes its step counter) draws
    a fresh mask every step. `first` and `part` place a micro-batch in its
    batch: gradient accumulation gives micro-batch `j` of `N`-element
    tensors `part(j)` with `part_elements = N`, so each sample draws the mask
    it would draw in the whole batch. `rank_elements` places a rank's batch
    in the global batch the same way: train-zero sets it to the elements
    one rank's batch draws, so rank `r`, holding rows `[r·B, (r+1)·B)` of
    the global batch, draws what one process running the global batch
    draws for them; on a (data, tensor) grid the rank is the data rank,
    the process's index over `rank_stride` (the tensor-parallel group's
    size: the ranks of a group draw alike). With `split`
    (train-tensor-parallel: the input is one
    rank's part of a tensor `parts` times larger along `dim`), element `i`
    draws where its element of the whole tensor draws: with `n` the part's
    elements from `dim` on (one block of the part), at
    `(i / n) · n · parts + p · n + i mod n` instead of `i`, `p` the rank's
    position on the split's grid axis; the ranks' masks are the whole
    tensor's mask, cut as the tensor is. The second result is the keep-mask
    (one byte per element), which the backward uses.

    ```mlir
    %y, %mask = train.dropout %p key(%step : tensor<i64>) {rate = 0.1 : f64, seed = 0 : i64, offset = 3 : i64}
        : tensor<8x12x1024x1024xbf16> -> tensor<8x12x1024x1024xi1>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input, Optional<Train_I64Scalar>:$key,
                       Optional<Train_I64Scalar>:$part,
                       F64Attr:$rate, I64Attr:$seed, I64Attr:$offset,
                       DefaultValuedAttr<I64Attr, "0">:$first,
                       DefaultValuedAttr<I64Attr, "0">:$part_elements,
                       DefaultValuedAttr<I64Attr, "0">:$rank_elements,
                       DefaultValuedAttr<I64Attr, "1">:$rank_stride,
                       OptionalAttr<Train_TensorSplitAttr>:$split);
  let results = (outs Train_FloatTensor:$result, Train_MaskTensor:$mask);
  let assemblyFormat = [{
    $input (`key` `(` $key^ `:` type($key) `)`)?
    (`part` `(` $part^ `:` type($part) `)`)? attr-dict `:` type($input)
    `->` type($mask)
  }];
  let hasVerifier = 1;
  let builders = [
    OpBuilder<(ins "::mlir::Value":$input, "double":$rate, "int64_t":$seed,
                   "int64_t":$offset)>
  ];
}

def Train_AttentionOp : Train_DiffOp<"attention",
    [DeclareOpInterfaceMethods<Train_StridedOperandsOpInterface>,
     AttrSizedOperandSegments, InferTypeOpAdaptor,
     DeclareOpInterfaceMethods<Train_BatchDrawOpInterface, ["drawsRandom"]>,
     DeclareOpInterfaceMethods<Train_CommunicationOpInterface>,
     DeclareOpInterfaceMethods<Train_WorkspaceOpInterface>]> {
  let summary = "fused memory-efficient attention (causal, GQA, dropout)";
  let description = [{
    `output = dropout(softmax(scale · q·kᵀ [causal])) · v` per batch and
    query head, without the score matrix: `q` is `[B, H, S, D]`, `k` and `v`
    `[B, KVH, S', D]` and `[B, KVH, S', Dv]` with `H` a multiple of `KVH`
    (query head `h` reads key/value head `h / (H / KVH)`: grouped-query
    attention; `KVH = H` is multi-head). With `causal`, key `j > i` is
    masked for query `i` (then `S' = S`). The second result is the row-wise
    log-sum-exp of the scaled, masked scores, in f32: with `q`, `k`, `v`
    and `output` it is all the backward (`train.attention_grad`) needs, as
    in FlashAttention, so no `S × S'` tensor is kept or even built whole.

    With `alibi_slopes` (one per query head), score `(h, i, j)` gets
    `train.softmax`'s ALiBi bias `m_h · (j - i)` after the scale, added
    inside the kernels' tiles: memory stays O(S) and the bias costs one
    multiply-add per score.

    With `transpose_output` the output is `[B, S, H, Dv]` (the order the
    model's output projection reads, so that it is a view of the output and
    the backward keeps no second copy); the log-sum-exp stays `[B, H, S]`.

    Dropout (`rate > 0`) is `train.dropout`'s on the probabilities, element
    `(b, h, i, j)` at position `first + rank · rank_elements +
    part · part_elements + ((b·H + h)·S + i)·S' + j`: the mask the decomposed pattern draws, with
    no mask stored (the backward draws it again). With `split` (a rank's
    heads of a tensor-parallel attention, `#train.split` of the drawn
    `[B, H, S, S']` along the heads) the element is at its place in the
    whole tensor, as a split `train.dropout` draws it.

    With `context_parallel` (#train.context, train-context-parallel), `q` holds this
    rank's rows of the sequence and `k`, `v` the group's rows gathered in
    rank order (`S' = S · parts`): the causal mask compares the rows'
    places in the whole sequence, and the dropout draws element `(b, h, i,
    j)` at those places in the whole `[B, H, S·parts, S']` tensor.

    With `ring` as well (train-context-parallel `exchange=ring`), `k` and `v`
    are this rank's own rows (`S' = S`): the op passes them around the
    group's ring (to the next rank, from the previous: `parts - 1`
    exchanges) and attends to each block as it comes, the online softmax
    carried between blocks, so no rank holds the group's K/V whole; the
    blocks in flight and the running sums are its planned workspace
    (WorkspaceOpInterface, trainmem/Support/RingAttention.h). It is
    `train.attention` over the gathered K/V, summed in another order.

    ```mlir
    %o, %lse = train.attention %q, %k, %v {causal, scale = 0.125 : f64}
        : tensor<8x12x1024x64xbf16>, tensor<8x12x1024x64xbf16>,
          tensor<8x12x1024x64xbf16> -> tensor<8x12x1024x64xbf16>,
          tensor<8x12x1024xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$q, Train_FloatTensor:$k,
                       Train_FloatTensor:$v,
                       Optional<Train_I64Scalar>:$key,
                       Optional<Train_I64Scalar>:$part,
                       F64Attr:$scale, UnitAttr:$causal,
                       UnitAttr:$transpose_output,
                       DefaultValuedAttr<F64Attr, "0.0">:$rate,
                       DefaultValuedAttr<I64Attr, "0">:$seed,
                       DefaultValuedAttr<I64Attr, "0">:$offset,
                       DefaultValuedAttr<I64Attr, "0">:$first,
                       DefaultValuedAttr<I64Attr, "0">:$part_elements,
                       DefaultValuedAttr<I64Attr, "0">:$rank_elements,
                       DefaultValuedAttr<I64Attr, "1">:$rank_stride,
                       OptionalAttr<Train_TensorSplitAttr>:$split,
                       OptionalAttr<DenseF64ArrayAttr>:$alibi_slopes,
                       OptionalAttr<Train_ContextSplitAttr>:$context_parallel,
                       UnitAttr:$ring);
  let results = (outs Train_FloatTensor:$output,
                      Train_StaticTensorOf<[F32]>:$lse);
  let assemblyFormat = [{
    $q `,` $k `,` $v (`key` `(` $key^ `:` type($key) `)`)?
    (`part` `(` $part^ `:` type($part) `)`)? attr-dict `:` type($q) `,`
    type($k) `,` type($v) `->` type($output) `,` type($lse)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange,
                                        ::mlir::TypeRange) {
      return true;
    }
  }];
}

def Train_RopeOp : Train_DiffOp<"rope", [DeclareOpInterfaceMethods<Train_StridedOperandsOpInterface>,
     SameOperandsAndResultType]> {
  let summary = "rotary position embedding";
  let description = [{
    Rotates pairs `(x[2i], x[2i+1])` of the last dimension (the head
    dimension `d`) at position `p` (the second-to-last dimension) by the angle
    `p · theta^(-2i/d)`, as Llama's reference does; with `halves`, the pairs
    `(x[i], x[i + d/2])` (GPT-NeoX's and Hugging Face's `rotate_half`). With
    `inverse` it rotates by the negated angle, which is the op's own VJP.
    With `context_parallel` (train-context-parallel) the rows are this rank's of the
    sequence, each at its place in the whole (#train.context).

    ```mlir
    %q_rot = train.rope %q {theta = 10000.0 : f64} : tensor<1x32x4096x128xbf16>
    %k_rot = train.rope %k {theta = 10000.0 : f64, halves} : tensor<1x32x4096x128xbf16>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input, F64Attr:$theta,
                       UnitAttr:$inverse, UnitAttr:$halves,
                       OptionalAttr<Train_ContextSplitAttr>:$context_parallel);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Train_ReshapeOp : Train_DiffOp<"reshape",
    [DeclareOpInterfaceMethods<Train_StridedOperandsOpInterface>,
     DeclareOpInterfaceMethods<ViewLikeOpInterface>,
     DeclareOpInterfaceMethods<Train_StridedViewOpInterface>],
    ["getBytesRead", "getBytesWritten"]> {
  let summary = "a view with another shape and the same elements";
  let description = [{
    ```mlir
    %heads = train.reshape %q : tensor<8x1024x768xbf16> -> tensor<8x1024x12x64xbf16>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Train_BroadcastOp : Train_DiffOp<"broadcast",
    [DeclareOpInterfaceMethods<Train_StridedOperandsOpInterface>]> {
  let summary = "repeats a tensor along its dimensions of size 1";
  let description = [{
    The result has the input's rank; each of its dimensions equals the
    input's, or the input's is 1 and the result repeats it. Its gradient
    sums the repeats back (`train.sum_to`). train-tensor-parallel repeats
    the K/V heads a group of ranks shares when t does not divide them
    (each rank then takes its query heads' K/V head).

    ```mlir
    %kv = train.broadcast %k : tensor<8x2x1x1024x128xbf16> -> tensor<8x2x4x1024x128xbf16>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Train_SliceOp : Train_DiffOp<"slice",
    [InferTypeOpAdaptor,
     DeclareOpInterfaceMethods<Train_StridedOperandsOpInterface>],
                                 ["getBytesRead"]> {
  let summary = "consecutive indices of one dimension, copied";
  let description = [{
    `result = input[..., offset : offset + size, ...]` along dimension
    `dim`; the other dimensions whole. The parts of a fused projection
    (nanoGPT's `c_attn`, Q, K and V side by side in one `[b, s, 3h]`
    product) are its slices. A copy: the result is a tensor of its own.
    Its gradient is `train.slice_grad`. It also copies i32 ids, which have
    no gradient: a model's own loss scores `logits[:, :-1]` against its
    labels shifted by `labels[:, 1:]`, which trainmem-import writes as the
    first `s - 1` of the step's targets (the tokens shifted by one).

    ```mlir
    %k = train.slice %qkv {dim = 2 : i64, offset = 768 : i64, size = 768 : i64}
        : tensor<8x1024x2304xbf16> -> tensor<8x1024x768xbf16>
    ```
  }];
  let arguments = (ins Train_SliceableTensor:$input, I64Attr:$dim,
                       I64Attr:$offset, I64Attr:$size);
  let results = (outs Train_SliceableTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  // The result type follows from the operand and attributes (passes that
  // re-type ops ask inferReturnTypes); verify() checks the written type
  // with a message that names the expected shape.
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange,
                                        ::mlir::TypeRange) {
      return true;
    }
  }];
}

def Train_GradAllReduceOp : Train_DiffOp<"grad_all_reduce",
    [SameOperandsAndResultType,
     DeclareOpInterfaceMethods<ViewLikeOpInterface>,
     DeclareOpInterfaceMethods<Train_StridedViewOpInterface>],
    ["getBytesRead", "getBytesWritten"]> {
  let summary = "the identity, whose gradient is summed over a grid's ranks";
  let description = [{
    Megatron's `f` (Shoeybi et al. 2019): where a value every rank of a
    tensor-parallel group holds whole enters the part of a layer split
    across the group (the column-parallel matmuls), each rank's backward
    gives only its part of the value's gradient; this op passes the value
    on unchanged and, in its vector-Jacobian product, sums the gradient
    over the ranks of `grid` along `grid_axes` (a `shard.all_reduce`). Its
    conjugate, `g` (the sum of the row-parallel matmul's partial results
    forward, the identity backward), is `shard.all_reduce` itself, whose
    gradient is the identity. A view: no memory, no call.

    ```mlir
    %x = train.grad_all_reduce %ln on @grid grid_axes = [1] : tensor<8x1024x768xbf16>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input, FlatSymbolRefAttr:$grid,
                   DenseI16ArrayAttr:$grid_axes);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = [{
    $input `on` $grid `grid_axes` `=` $grid_axes attr-dict `:` type($result)
  }];
  let hasVerifier = 1;
}

def Train_TransposeOp : Train_DiffOp<"transpose",
    [DeclareOpInterfaceMethods<Train_StridedOperandsOpInterface>,
     DeclareOpInterfaceMethods<ViewLikeOpInterface>,
     DeclareOpInterfaceMethods<Train_StridedViewOpInterface>,
     InferTypeOpAdaptor],
    ["getBytesRead", "getBytesWritten"]> {
  let summary = "a view with permuted dimensions";
  let description = [{
    `result` dimension `i` is `input` dimension `permutation[i]`.

    ```mlir
    %t = train.transpose %x {permutation = array<i64: 0, 2, 1, 3>}
        : tensor<8x1024x12x64xbf16> -> tensor<8x12x1024x64xbf16>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input,
                       DenseI64ArrayAttr:$permutation);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  // The result type follows from the operands (builders and passes that
  // re-type ops ask inferReturnTypes); verify() checks the written type
  // with a message that names the expected shape, so the interface's own
  // comparison is relaxed.
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange,
                                        ::mlir::TypeRange) {
      return true;
    }
  }];
}

def Train_CrossEntropyOp : Train_DiffOp<"cross_entropy",
    [InferTypeOpAdaptor, Train_LossOpInterface]> {
  let summary = "summed softmax cross-entropy and the count of valid tokens";
  let description = [{
    `logits` is `[..., vocab]`, `targets` has the leading shape. Returns the
    sum over positions whose target is not `ignore_index` of
    `logsumexp(logits) - logits[target]`, computed in f32, and the number of
    such positions. Keeping sum and count apart lets gradient accumulation
    normalize by the tokens of a whole window. With `label_smoothing` ε
    (PyTorch's `F.cross_entropy(..., label_smoothing=ε)`) a position's term
    is `logsumexp(logits) - (1 - ε) logits[target] - ε mean(logits)`: the
    cross-entropy against `(1 - ε) onehot(target) + ε / vocab`.

    ```mlir
    %sum, %count = train.cross_entropy %logits, %targets {ignore_index = -100 : i64}
        : tensor<8x1024x50257xbf16>, tensor<8x1024xi32> -> tensor<f32>, tensor<i64>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$logits, Train_IdTensor:$targets,
                       I64Attr:$ignore_index,
                       DefaultValuedAttr<F64Attr, "0.0">:$label_smoothing);
  let results = (outs Train_F32Scalar:$loss_sum, Train_I64Scalar:$count);
  let assemblyFormat = [{
    $logits `,` $targets attr-dict `:` type($logits) `,` type($targets) `->`
    type($loss_sum) `,` type($count)
  }];
  let hasVerifier = 1;
}

def Train_RowMaxOp : Train_NonDiffOp<"row_max", [InferTypeOpAdaptor]> {
  let summary = "the maximum of each row, in f32";
  let description = [{
    `result[i...] = max over c of input[i..., c]`, in f32; the result has
    the input's shape without its last dimension. A vocabulary-parallel
    cross-entropy shifts each rank's exponentials by the rows' maxima over
    the whole vocabulary (this op's result, all-reduced by max); the loss
    does not depend on the shift, so the op is not differentiated.

    ```mlir
    %m = train.row_max %logits : tensor<8x1024x25152xbf16> -> tensor<8x1024xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input);
  let results = (outs Train_StaticTensorOf<[F32]>:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Train_CrossEntropyPartOp : Train_DiffOp<"cross_entropy_part",
    [InferTypeOpAdaptor]> {
  let summary = "one vocabulary part's terms of a cross-entropy";
  let description = [{
    Vocabulary parallelism (Megatron's parallel cross-entropy): `logits`
    `[..., n]` are columns `[q·n, (q+1)·n)` of the whole logits, `q` the
    rank's position on `split`'s grid axis (`split` says the whole
    vocabulary is `parts · n`; without it the logits are whole); `max`
    holds the rows' maxima over the whole vocabulary. Per row, in f32:
    `sum_exp = Σ_c exp(logits[c] - max)` over the part's columns, and
    `target_logit = logits[target - q·n]` when the target is one of them,
    else 0 (0 at ignored positions). Summed over the group, they are what
    `train.cross_entropy_merge` turns into the loss: no rank gathers the
    logits. A target outside the whole vocabulary is an error at run time.

    ```mlir
    %se, %tl = train.cross_entropy_part %logits, %targets, %max
        {ignore_index = -100 : i64, split = #train.split<dim = 2, parts = 2, grid = @tp, axis = 1>}
        : tensor<8x1024x25152xbf16>, tensor<8x1024xi32>, tensor<8x1024xf32>
        -> tensor<8x1024xf32>, tensor<8x1024xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$logits, Train_IdTensor:$targets,
                       Train_StaticTensorOf<[F32]>:$max, I64Attr:$ignore_index,
                       OptionalAttr<Train_TensorSplitAttr>:$split);
  let results = (outs Train_StaticTensorOf<[F32]>:$sum_exp,
                      Train_StaticTensorOf<[F32]>:$target_logit);
  let assemblyFormat = [{
    $logits `,` $targets `,` $max attr-dict `:` type($logits) `,`
    type($targets) `,` type($max) `->` type($sum_exp) `,` type($target_logit)
  }];
  let hasVerifier = 1;
}

def Train_CrossEntropyMergeOp : Train_DiffOp<"cross_entropy_merge",
    [InferTypeOpAdaptor, Train_LossOpInterface]> {
  let summary = "a vocabulary-parallel cross-entropy's loss from its sums";
  let description = [{
    The summed cross-entropy and the count of valid targets, as
    `train.cross_entropy` gives them, from the group's sums of
    `train.cross_entropy_part`: the sum over positions whose target is not
    `ignore_index` of `log(sum_exp) + max - target_logit`.

    ```mlir
    %sum, %count = train.cross_entropy_merge %se, %tl, %max, %targets {ignore_index = -100 : i64}
        : tensor<8x1024xf32>, tensor<8x1024xf32>, tensor<8x1024xf32>, tensor<8x1024xi32>
        -> tensor<f32>, tensor<i64>
    ```
  }];
  let arguments = (ins Train_StaticTensorOf<[F32]>:$sum_exp,
                       Train_StaticTensorOf<[F32]>:$target_logit,
                       Train_StaticTensorOf<[F32]>:$max,
                       Train_IdTensor:$targets, I64Attr:$ignore_index);
  let results = (outs Train_F32Scalar:$loss_sum, Train_I64Scalar:$count);
  let assemblyFormat = [{
    $sum_exp `,` $target_logit `,` $max `,` $targets attr-dict `:`
    type($sum_exp) `,` type($target_logit) `,` type($max) `,` type($targets)
    `->` type($loss_sum) `,` type($count)
  }];
  let hasVerifier = 1;
}

def Train_MeanLossOp : Train_DiffOp<"mean_loss",
    [AllTypesMatch<["loss_sum", "result"]>]> {
  let summary = "divides a summed loss by a token count";
  let description = [{
    `scale · weight · loss_sum / max(count, 1)`: the mean over valid tokens
    (0 when there are none, never NaN), times `scale` (1 by default) and the
    optional `weight` operand (gradient accumulation with `normalize=mean`
    weighs each micro-batch by its share of the batch's rows).

    ```mlir
    %loss = train.mean_loss %sum, %count : tensor<f32>, tensor<i64>
    %part = train.mean_loss %sum, %count weighted by %share : tensor<f32>
        : tensor<f32>, tensor<i64>
    ```
  }];
  let arguments = (ins Train_F32Scalar:$loss_sum, Train_I64Scalar:$count,
                       Optional<Train_F32Scalar>:$weight,
                       DefaultValuedAttr<F64Attr, "1.0">:$scale);
  let results = (outs Train_F32Scalar:$result);
  let assemblyFormat = [{
    $loss_sum `,` $count (`weighted` `by` $weight^ `:` type($weight))?
    attr-dict `:` type($loss_sum) `,` type($count)
  }];
}

def Train_CastOp : Train_DiffOp<"cast", [Train_PositionWise, SameOperandsAndResultShape]> {
  let summary = "converts between f32, bf16 and f16";
  let description = [{
    Rounds to the nearest value of the result element type (ties to even).
    Mixed-precision steps use it to refresh 16-bit weights from f32 master
    copies.

    ```mlir
    %w = train.cast %master : tensor<768x768xf32> -> tensor<768x768xbf16>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Train_TransferOp : Train_NonDiffOp<"transfer", [SameOperandsAndResultType]> {
  let summary = "copies a tensor to the host's memory or back to the device's";
  let description = [{
    The same tensor in the memory `to` names: `#train.space<host>`, the
    host arena (CPU memory; on a GPU, pinned memory the copy crosses the
    host link to), or `#train.space<device>`, the arena the step computes
    in. `train-offload-activations` moves saved activations out after the
    forward op that makes them and back before the backward that reads
    them; the memory analysis places the result in that memory and counts
    the bytes that cross.

    A copy with a `train.transfer_wait` is asynchronous: it starts here and
    has finished at the wait, so that the compute between the two overlaps
    it (a device copies on a side stream); its input stays live until the
    wait, and its result is read after it. Without a wait the copy is done
    when the op is.

    ```mlir
    %h = train.transfer %x {to = #train.space<host>} : tensor<4x64x256xf32>
    %d = train.transfer %h {to = #train.space<device>} : tensor<4x64x256xf32>
    ```
  }];
  let arguments = (ins Train_AnyRankedTensor:$input, Train_SpaceAttr:$to);
  let results = (outs Train_AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let extraClassDeclaration = [{
    /// Whether the copy goes to host memory.
    bool toHost() { return getTo().getSpace() == ::mlir::train::MemorySpace::host; }
    /// The wait that ends this copy (an asynchronous one), or null.
    ::mlir::Operation *getWait();
  }];
}

def Train_TransferWaitOp : Train_NonDiffOp<"transfer_wait", [],
    ["getBytesRead", "getBytesWritten"]> {
  let summary = "waits until an asynchronous train.transfer has finished";
  let description = [{
    The copy that made `copy` (a `train.transfer` in this block) has
    finished: its input may be overwritten and `copy` read from here on.
    `train-offload-activations` (`async=true`) places the wait of a copy
    out after the next forward block and of a copy back before the
    backward that reads it, so that the copies overlap the compute. Every
    other reader of `copy` comes after the wait; a copy has one wait.

    ```mlir
    %h = train.transfer %x {to = #train.space<host>} : tensor<4x64x256xf32>
    ... // the next layer's forward
    train.transfer_wait %h : tensor<4x64x256xf32>
    ```
  }];
  let arguments = (ins Train_AnyRankedTensor:$copy);
  let assemblyFormat = "$copy attr-dict `:` type($copy)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The copy this waits for.
    ::mlir::train::TransferOp getTransfer() {
      return getCopy().getDefiningOp<::mlir::train::TransferOp>();
    }
  }];
}

def Train_PipelineExchangeOp : Train_Op<"pipeline_exchange", [
    Train_NotDifferentiated, MemoryEffects<[MemRead, MemWrite]>,
    DeclareOpInterfaceMethods<Train_CostOpInterface,
                              ["getBytesRead", "getBytesWritten"]>,
    DeclareOpInterfaceMethods<Train_CommunicationOpInterface>]> {
  let summary = "sends tensors to neighbouring pipeline stages and receives theirs";
  let description = [{
    Between two units of a pipeline stage's schedule (train-pipeline): each
    of `sends` goes to the stage `send_peers` names, with the tag beside
    it; each result comes from the stage `recv_peers` names, the message
    with its tag (one per tensor that crosses stages in a step). All of
    them start together and the op ends when all have arrived and left, as
    Megatron's batched send/receive does, so that the 1F1B steady state's
    send-forward-receive-backward cannot deadlock; train-pipeline checks
    that its schedule's exchanges complete. The stage function runs on the
    ranks at its place of the pipeline axis; a peer is the rank at the
    same data and tensor place in the peer stage. The sent tensors live
    until the exchange, the received ones from it.

    ```mlir
    %g = train.pipeline_exchange send %h : tensor<2x64x64xf32>
        {send_peers = array<i64: 1>, send_tags = array<i64: 0>,
         recv_peers = array<i64: 1>, recv_tags = array<i64: 5>}
        -> tensor<2x64x64xf32>
    ```
  }];
  let arguments = (ins Variadic<Train_AnyRankedTensor>:$sends,
                       DenseI64ArrayAttr:$send_peers,
                       DenseI64ArrayAttr:$send_tags,
                       DenseI64ArrayAttr:$recv_peers,
                       DenseI64ArrayAttr:$recv_tags);
  let results = (outs Variadic<Train_AnyRankedTensor>:$received);
  let assemblyFormat = [{
    (`send` $sends^ `:` type($sends))? attr-dict (`->` type($received)^)?
  }];
  let hasVerifier = 1;
}

def Train_DropoutMaskOp : Train_NonDiffOp<"dropout_mask",
    [AttrSizedOperandSegments,
     DeclareOpInterfaceMethods<Train_BatchDrawOpInterface>]> {
  let summary = "regenerates the keep-mask of a dropout from its RNG stream";
  let description = [{
    The mask `train.dropout` with the same `key`, `part`, `rate`, `seed`,
    `offset`, `first`, `part_elements`, `rank_elements` and `split` draws
    for a tensor of this shape.
    The backward can recompute a mask with it instead of keeping the
    forward's (1 byte per element saved, a few integer operations per
    element spent).

    ```mlir
    %mask = train.dropout_mask key(%step : tensor<i64>) {rate = 0.1 : f64, seed = 0 : i64, offset = 3 : i64}
        : tensor<8x12x1024x1024xi1>
    ```
  }];
  let arguments = (ins Optional<Train_I64Scalar>:$key,
                       Optional<Train_I64Scalar>:$part, F64Attr:$rate,
                       I64Attr:$seed, I64Attr:$offset,
                       DefaultValuedAttr<I64Attr, "0">:$first,
                       DefaultValuedAttr<I64Attr, "0">:$part_elements,
                       DefaultValuedAttr<I64Attr, "0">:$rank_elements,
                       DefaultValuedAttr<I64Attr, "1">:$rank_stride,
                       OptionalAttr<Train_TensorSplitAttr>:$split);
  let results = (outs Train_MaskTensor:$mask);
  let assemblyFormat = [{
    (`key` `(` $key^ `:` type($key) `)`)?
    (`part` `(` $part^ `:` type($part) `)`)? attr-dict `:` type($mask)
  }];
  let hasVerifier = 1;
}

def Train_CountValidOp : Train_NonDiffOp<"count_valid",
    [InferTypeOpAdaptor]> {
  let summary = "counts the targets that are not the ignore index";
  let description = [{
    The number of elements of `targets` different from `ignore_index`: the
    tokens a cross-entropy averages over. Gradient accumulation with
    `normalize=tokens` counts a whole window before its backward.

    ```mlir
    %n = train.count_valid %targets {ignore_index = -100 : i64} : tensor<8x1024xi32> -> tensor<i64>
    ```
  }];
  let arguments = (ins Train_IdTensor:$targets, I64Attr:$ignore_index);
  let results = (outs Train_I64Scalar:$count);
  let assemblyFormat = [{
    $targets attr-dict `:` type($targets) `->` type($count)
  }];
  let builders = [
    OpBuilder<(ins "::mlir::Value":$targets, "int64_t":$ignoreIndex), [{
      build($_builder, $_state,
            ::mlir::RankedTensorType::get({}, $_builder.getI64Type()),
            targets, $_builder.getI64IntegerAttr(ignoreIndex));
    }]>
  ];
}

def Train_SliceRowsOp : Train_NonDiffOp<"slice_rows"> {
  let summary = "rows of a tensor along its first dimension, padded";
  let description = [{
    Rows `offset` .. `offset + n` of `input` along dimension 0, where `n` is
    the result's first dimension; rows past the end of `input` are filled
    with `padding`. Unrolled gradient accumulation feeds each micro-step its
    rows of the batch with it.

    ```mlir
    %mb = train.slice_rows %tokens {offset = 6 : i64, padding = 0 : i64}
        : tensor<8x1024xi32> -> tensor<3x1024xi32>
    ```
  }];
  let arguments = (ins Train_AnyRankedTensor:$input, I64Attr:$offset,
                       DefaultValuedAttr<I64Attr, "0">:$padding);
  let results = (outs Train_AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Train_AccumulateOp : Train_Op<"accumulate", [
    SingleBlock, RecursiveMemoryEffects]> {
  let summary = "a loop over micro-batches summing what its body yields";
  let description = [{
    Splits each operand along dimension 0 into `steps` micro-batches of
    `ceil(B / steps)` rows (the last padded with the operand's entry of
    `padding`: a padding token id, or the ignore index for targets, so
    padded rows contribute nothing), runs the body once per micro-batch
    with the slices as its arguments, and sums what the body yields into
    the results: gradient accumulation. Results have the yielded shapes
    with an f32 element type, or a 16-bit part's own type (its sum rounded
    to it after each addition: train-grad-accum's `accumulate-dtype`).
    `host_sums` (one flag per result) keeps the flagged sums in host memory:
    each micro-batch's part crosses to the host and is added there
    (train-offload-optimizer `gradients=host`, whose updates read them
    there). With `indexed`, the body takes one more
    argument, a `tensor<i64>`: the micro-batch's index (0 to `steps - 1`),
    which places its dropout masks in the batch's (`train.dropout`'s
    `part`). With `weighted`, the body then takes a `tensor<f32>`: the
    micro-batch's share of the batch's real rows (rows / B, 0 for a
    micro-batch of padding only).

    The sums add the micro-batches' parts in order, ((p0 + p1) + p2) + ...,
    unless `groups G` is given: then the parts are summed in G groups of
    K = steps / G, each in order, and the groups' sums added in order.
    Group j holds micro-batches j·K to j·K + K - 1, or, `interleaved`, j,
    j + G, j + 2G, ...: the order in which ranks sum (train-zero on G
    ranks, each accumulating K micro-batches, reduces after the loop: plain
    groups; on K ranks reducing each of G micro-batches: interleaved), so
    one process reproduces such a run's gradients to the bit.

    ```mlir
    %acc:2 = train.accumulate %tokens, %targets steps 4 padding [0, -100]
        : (tensor<8x64xi32>, tensor<8x64xi32>) -> (tensor<f32>, tensor<256x64xf32>) {
    ^bb0(%t: tensor<2x64xi32>, %y: tensor<2x64xi32>):
      ...
      train.yield %loss, %dwte : tensor<f32>, tensor<256x64xf32>
    }
    ```
  }];
  let arguments = (ins Variadic<Train_AnyRankedTensor>:$inputs, I64Attr:$steps,
                       DenseI64ArrayAttr:$padding, UnitAttr:$indexed,
                       UnitAttr:$weighted, OptionalAttr<I64Attr>:$groups,
                       UnitAttr:$interleaved,
                       OptionalAttr<DenseBoolArrayAttr>:$host_sums);
  let results = (outs Variadic<Train_AnyRankedTensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $inputs `steps` $steps `padding` $padding (`indexed` $indexed^)?
    (`weighted` $weighted^)? (`groups` $groups^)? (`interleaved` $interleaved^)?
    (`host_sums` $host_sums^)?
    attr-dict `:` functional-type($inputs, $results) $body
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Rows of one micro-batch: ceil(B / steps).
    int64_t getMicroBatchRows();
    /// The share of the batch's real rows micro-batch `step` holds.
    double getShare(int64_t step);
    /// The body argument holding the micro-batch index (`indexed`), or null.
    ::mlir::BlockArgument getIndexArgument();
    /// The body argument holding the share (`weighted`), or null.
    ::mlir::BlockArgument getShareArgument();
    /// The micro-batches in the order their parts are summed (`groups`),
    /// each with whether it starts a group; a group's sum is added to the
    /// total when the next group starts and after the last part.
    ::llvm::SmallVector<std::pair<int64_t, bool>> getSumOrder();
  }];
}

//===----------------------------------------------------------------------===//
// Backward compute ops (built by the VJPs)
//===----------------------------------------------------------------------===//

def Train_EmbeddingGradOp : Train_NonDiffOp<"embedding_grad"> {
  let summary = "scatter-adds rows into an embedding table gradient";
  let description = [{
    `result[v, :] = Σ grad[i..., :] over positions i with ids[i...] = v`; the
    result type names the table shape. With `split`, the result is rows
    `[q·n, (q+1)·n)` of the whole table's gradient, as `train.embedding`'s
    table is.

    ```mlir
    %dwte = train.embedding_grad %dx, %tokens
        : tensor<8x1024x768xf32>, tensor<8x1024xi32> -> tensor<50257x768xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$grad, Train_IdTensor:$ids,
                       OptionalAttr<Train_TensorSplitAttr>:$split);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $ids attr-dict `:` type($grad) `,` type($ids) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Train_SliceGradOp : Train_DiffOp<"slice_grad", [InferTypeOpAdaptor]> {
  let summary = "a slice's gradient: zeros around the slice's gradient";
  let description = [{
    The gradient of `train.slice` with respect to its input: a tensor of
    `grad`'s shape but `whole` along `dim`, zero except
    `result[..., offset : offset + size, ...] = grad`. It is differentiable
    (its gradient is the slice of the result's at the same place), so a
    forward may use it too: trainmem-import writes a concatenation
    (`torch.cat`) as the sum of its parts each placed so.

    ```mlir
    %dqkv_k = train.slice_grad %dk {dim = 2 : i64, offset = 768 : i64, whole = 2304 : i64}
        : tensor<8x1024x768xf32> -> tensor<8x1024x2304xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$grad, I64Attr:$dim,
                       I64Attr:$offset, I64Attr:$whole);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$grad attr-dict `:` type($grad) `->` type($result)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange,
                                        ::mlir::TypeRange) {
      return true;
    }
  }];
}

def Train_SumToOp : Train_NonDiffOp<"sum_to"> {
  let summary = "sums a tensor down to a shape it was broadcast from";
  let description = [{
    The adjoint of broadcasting: sums over leading dimensions that the result
    lacks and over dimensions where the result has size 1. Used for bias
    gradients and for broadcast batch dimensions of a matmul.

    ```mlir
    %db = train.sum_to %dy : tensor<8x1024x3072xf32> -> tensor<3072xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Train_LayerNormGradOp : Train_NonDiffOp<"layer_norm_grad",
    [InferShapedTypeOpAdaptor, Train_NormGradOpInterface]> {
  let summary = "gradient of layer normalization";
  let description = [{
    From the incoming gradient, the saved input and gamma, computes the
    gradients of the input, gamma and beta (statistics are recomputed from
    the input).

    ```mlir
    %dx, %dg, %db = train.layer_norm_grad %dy, %x, %g {epsilon = 1.0e-05 : f64}
        : tensor<4x64x64xf32>, tensor<4x64x64xf32>, tensor<64xf32>
       -> tensor<4x64x64xf32>, tensor<64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$grad, Train_FloatTensor:$input,
                       Train_FloatTensor:$gamma, F64Attr:$epsilon);
  let results = (outs Train_FloatTensor:$input_grad,
                      Train_FloatTensor:$gamma_grad,
                      Train_FloatTensor:$beta_grad);
  let assemblyFormat = [{
    $grad `,` $input `,` $gamma attr-dict `:` type($grad) `,` type($input) `,`
    type($gamma) `->` type($input_grad) `,` type($gamma_grad) `,`
    type($beta_grad)
  }];
  let hasVerifier = 1;
}

def Train_RMSNormGradOp : Train_NonDiffOp<"rms_norm_grad",
    [InferShapedTypeOpAdaptor, Train_NormGradOpInterface]> {
  let summary = "gradient of RMS normalization";
  let description = [{
    ```mlir
    %dx, %dg = train.rms_norm_grad %dy, %x, %g {epsilon = 1.0e-05 : f64}
        : tensor<4x64x64xf32>, tensor<4x64x64xf32>, tensor<64xf32>
       -> tensor<4x64x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$grad, Train_FloatTensor:$input,
                       Train_FloatTensor:$gamma, F64Attr:$epsilon,
                       DefaultValuedAttr<F64Attr, "0.0">:$gain_offset);
  let results = (outs Train_FloatTensor:$input_grad,
                      Train_FloatTensor:$gamma_grad);
  let assemblyFormat = [{
    $grad `,` $input `,` $gamma attr-dict `:` type($grad) `,` type($input) `,`
    type($gamma) `->` type($input_grad) `,` type($gamma_grad)
  }];
  let hasVerifier = 1;
}

def Train_GeluGradOp : Train_NonDiffOp<"gelu_grad",
    [AllTypesMatch<["grad", "input", "result"]>]> {
  let summary = "gradient of GELU from its saved input";
  let description = [{
    `result = grad · gelu'(input)`, of the tanh approximation or, with
    `exact`, of the erf form (`train.gelu`'s).

    ```mlir
    %dx = train.gelu_grad %dy, %x : tensor<4x64x256xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$grad, Train_FloatTensor:$input,
                       UnitAttr:$exact);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$grad `,` $input attr-dict `:` type($result)";
}

def Train_BiasGeluGradOp : Train_NonDiffOp<"bias_gelu_grad",
    [AllTypesMatch<["grad", "input", "result"]>]> {
  let summary = "gradient of bias_gelu from its saved input and bias";
  let description = [{
    `result = grad · gelu'(input + bias)`, the sum rounded to the element
    type as the forward rounds it: the gradient with respect to the sum,
    which is the input's; the bias's is its sum over the leading dimensions
    (`train.sum_to`).

    ```mlir
    %dh = train.bias_gelu_grad %dy, %x, %b : tensor<4x64x256xf32>, tensor<256xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$grad, Train_FloatTensor:$input,
                       Train_FloatTensor:$bias);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $input `,` $bias attr-dict `:` type($result) `,` type($bias)
  }];
  let hasVerifier = 1;
}

def Train_SoftmaxGradOp : Train_NonDiffOp<"softmax_grad",
    [AllTypesMatch<["grad", "output", "result"]>]> {
  let summary = "gradient of softmax from its saved output";
  let description = [{
    `result = output · (grad - Σ_j grad·output)` over the last dimension; it
    needs the softmax output, not its input.

    ```mlir
    %ds = train.softmax_grad %dp, %p : tensor<4x4x64x64xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$grad, Train_FloatTensor:$output);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$grad `,` $output attr-dict `:` type($result)";
}

def Train_DropoutGradOp : Train_NonDiffOp<"dropout_grad",
    [AllTypesMatch<["grad", "result"]>]> {
  let summary = "gradient of dropout from its keep-mask";
  let description = [{
    `result = grad · mask / (1 - rate)`.

    ```mlir
    %dx = train.dropout_grad %dy, %mask {rate = 0.1 : f64}
        : tensor<4x64x64xf32>, tensor<4x64x64xi1>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$grad, Train_MaskTensor:$mask,
                       F64Attr:$rate);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $mask attr-dict `:` type($grad) `,` type($mask)
  }];
  let hasVerifier = 1;
}

def Train_AttentionGradOp : Train_NonDiffOp<"attention_grad",
    [DeclareOpInterfaceMethods<Train_StridedOperandsOpInterface>,
     AttrSizedOperandSegments, InferTypeOpAdaptor,
     DeclareOpInterfaceMethods<Train_BatchDrawOpInterface, ["drawsRandom"]>,
     DeclareOpInterfaceMethods<Train_CommunicationOpInterface>,
     DeclareOpInterfaceMethods<Train_WorkspaceOpInterface>],
    ["getRecomputeFlops"]> {
  let summary = "gradient of train.attention from q, k, v, output and lse";
  let description = [{
    The FlashAttention backward: the probabilities are recomputed from `q`,
    `k` and the saved log-sum-exp (its `q·kᵀ` is counted as recompute), the
    dropout mask is drawn again at the same positions, and with
    `Dᵢ = Σ doᵢ·oᵢ` the score gradient is `p · (dp − D)`. Gradients of `k`
    and `v` sum over the query heads that share them. The attributes are the
    forward's (with `transpose_output`, `grad` and `output` are
    `[B, S, H, Dv]`). With `ring`, K and V go around the group again with
    each block's dK and dV sums (f32) travelling beside them, one more
    exchange bringing each sum to its owner: `dk` and `dv` are this rank's
    rows' gradients summed over the group's queries.

    ```mlir
    %dq, %dk, %dv = train.attention_grad %do, %q, %k, %v, %o, %lse
        {causal, scale = 0.125 : f64}
        : tensor<8x12x1024x64xbf16>, tensor<8x12x1024x64xbf16>,
          tensor<8x12x1024x64xbf16>, tensor<8x12x1024x64xbf16>,
          tensor<8x12x1024x64xbf16>, tensor<8x12x1024xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$grad, Train_FloatTensor:$q,
                       Train_FloatTensor:$k, Train_FloatTensor:$v,
                       Train_FloatTensor:$output,
                       Train_StaticTensorOf<[F32]>:$lse,
                       Optional<Train_I64Scalar>:$key,
                       Optional<Train_I64Scalar>:$part,
                       F64Attr:$scale, UnitAttr:$causal,
                       UnitAttr:$transpose_output,
                       DefaultValuedAttr<F64Attr, "0.0">:$rate,
                       DefaultValuedAttr<I64Attr, "0">:$seed,
                       DefaultValuedAttr<I64Attr, "0">:$offset,
                       DefaultValuedAttr<I64Attr, "0">:$first,
                       DefaultValuedAttr<I64Attr, "0">:$part_elements,
                       DefaultValuedAttr<I64Attr, "0">:$rank_elements,
                       DefaultValuedAttr<I64Attr, "1">:$rank_stride,
                       OptionalAttr<Train_TensorSplitAttr>:$split,
                       OptionalAttr<DenseF64ArrayAttr>:$alibi_slopes,
                       OptionalAttr<Train_ContextSplitAttr>:$context_parallel,
                       UnitAttr:$ring);
  let results = (outs Train_FloatTensor:$q_grad, Train_FloatTensor:$k_grad,
                      Train_FloatTensor:$v_grad);
  let assemblyFormat = [{
    $grad `,` $q `,` $k `,` $v `,` $output `,` $lse
    (`key` `(` $key^ `:` type($key) `)`)?
    (`part` `(` $part^ `:` type($part) `)`)? attr-dict `:` type($grad) `,`
    type($q) `,` type($k) `,` type($v) `,` type($output) `,` type($lse)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange,
                                        ::mlir::TypeRange) {
      return true;
    }
  }];
}

def Train_CrossEntropyGradOp : Train_NonDiffOp<"cross_entropy_grad",
    [InferShapedTypeOpAdaptor,
     Train_LossGradOpInterface]> {
  let summary = "gradient of the summed cross-entropy w.r.t. the logits";
  let description = [{
    `result[i, :] = grad · (softmax(logits[i, :]) - onehot(targets[i]))` for
    valid positions and 0 at ignored ones; with `label_smoothing` ε the
    target distribution is `(1 - ε) onehot(targets[i]) + ε / vocab`.

    ```mlir
    %dlogits = train.cross_entropy_grad %dsum, %logits, %targets {ignore_index = -100 : i64}
        : tensor<f32>, tensor<4x64x256xf32>, tensor<4x64xi32> -> tensor<4x64x256xf32>
    ```
  }];
  let arguments = (ins Train_F32Scalar:$grad, Train_FloatTensor:$logits,
                       Train_IdTensor:$targets, I64Attr:$ignore_index,
                       DefaultValuedAttr<F64Attr, "0.0">:$label_smoothing);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $logits `,` $targets attr-dict `:` type($grad) `,` type($logits)
    `,` type($targets) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Train_CrossEntropyPartGradOp : Train_NonDiffOp<"cross_entropy_part_grad",
    [AllTypesMatch<["logits", "result"]>]> {
  let summary = "gradient of a vocabulary part's cross-entropy terms";
  let description = [{
    The gradient w.r.t. the part's logits of `train.cross_entropy_part`'s
    results: `result[i, c] = d_sum_exp[i] · exp(logits[i, c] - max[i]) +
    d_target_logit[i] · (c = target[i] - q·n)`, 0 at ignored positions
    (`split`, `q` and `n` as the forward's).

    ```mlir
    %dlogits = train.cross_entropy_part_grad %dse, %dtl, %logits, %max, %targets {ignore_index = -100 : i64}
        : tensor<4x64xf32>, tensor<4x64xf32>, tensor<4x64x128xf32>, tensor<4x64xf32>, tensor<4x64xi32>
    ```
  }];
  let arguments = (ins Train_StaticTensorOf<[F32]>:$d_sum_exp,
                       Train_StaticTensorOf<[F32]>:$d_target_logit,
                       Train_FloatTensor:$logits,
                       Train_StaticTensorOf<[F32]>:$max,
                       Train_IdTensor:$targets, I64Attr:$ignore_index,
                       OptionalAttr<Train_TensorSplitAttr>:$split);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = [{
    $d_sum_exp `,` $d_target_logit `,` $logits `,` $max `,` $targets attr-dict
    `:` type($d_sum_exp) `,` type($d_target_logit) `,` type($logits) `,`
    type($max) `,` type($targets)
  }];
  let hasVerifier = 1;
}

def Train_CrossEntropyMergeGradOp : Train_NonDiffOp<"cross_entropy_merge_grad",
    [InferTypeOpAdaptor, Train_LossGradOpInterface]> {
  let summary = "gradient of a vocabulary-parallel cross-entropy's merge";
  let description = [{
    From the summed loss's gradient `grad`: `d_sum_exp = grad / sum_exp` and
    `d_target_logit = -grad` at valid positions, 0 at ignored ones (the
    rows' maxima are a shift the loss does not depend on: no gradient).

    ```mlir
    %dse, %dtl = train.cross_entropy_merge_grad %dsum, %se, %targets {ignore_index = -100 : i64}
        : tensor<f32>, tensor<4x64xf32>, tensor<4x64xi32> -> tensor<4x64xf32>, tensor<4x64xf32>
    ```
  }];
  let arguments = (ins Train_F32Scalar:$grad,
                       Train_StaticTensorOf<[F32]>:$sum_exp,
                       Train_IdTensor:$targets, I64Attr:$ignore_index);
  let results = (outs Train_StaticTensorOf<[F32]>:$d_sum_exp,
                      Train_StaticTensorOf<[F32]>:$d_target_logit);
  let assemblyFormat = [{
    $grad `,` $sum_exp `,` $targets attr-dict `:` type($grad) `,`
    type($sum_exp) `,` type($targets) `->` type($d_sum_exp) `,`
    type($d_target_logit)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Structure
//===----------------------------------------------------------------------===//

def Train_BlockOp : Train_Op<"block", [
    SingleBlock, RecursiveMemoryEffects, RecursivelySpeculatable,
    DeclareOpInterfaceMethods<Train_TransparentRegionOpInterface>,
    DeclareOpInterfaceMethods<RegionBranchOpInterface>]> {
  let summary = "marks what part of a model a region of ops is";
  let description = [{
    A region executed once, in place, whose `train.yield` operands are the
    op's results. `kind` says what it holds (`embedding`, `attention`, `mlp`,
    `head`, `optimizer`) and `layer` which transformer layer (required for
    `attention` and `mlp`). `backward` marks the backward pass of that part,
    as `train-autodiff` writes it, so the backward of layer i is as
    identifiable as its forward. Remat policies and the memory report key on
    these.

    ```mlir
    %y = train.block attention layer 0 -> tensor<8x1024x768xbf16> {
      ...
      train.yield %sum : tensor<8x1024x768xbf16>
    }
    %dx = train.block attention layer 0 backward -> tensor<8x1024x768xbf16> {
      ...
    }
    ```
  }];
  let arguments = (ins Train_BlockKind:$kind, OptionalAttr<I64Attr>:$layer,
                       UnitAttr:$backward);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $kind (`layer` $layer^)? (`backward` $backward^)? (`->` type($results)^)?
    attr-dict-with-keyword $body
  }];
  let hasVerifier = 1;
}

def Train_RematOp : Train_Op<"remat", [
    SingleBlock, RecursiveMemoryEffects, RecursivelySpeculatable,
    DeclareOpInterfaceMethods<Train_TransparentRegionOpInterface>,
    DeclareOpInterfaceMethods<RegionBranchOpInterface>]> {
  let summary = "values computed inside are recomputed for the backward";
  let description = [{
    A region executed once, in place, in the forward pass; its `train.yield`
    operands are its results. The values defined inside are not kept for the
    backward: where a backward op needs one, `train-materialize-remat`
    recomputes it from the region's inputs (the values it uses from outside)
    next to that backward op. `train-remat` inserts these regions around
    whole layers, blocks, or the attention core.

    Recompute must give the same values, so the region may only hold ops
    without side effects; dropout draws the same mask again because its RNG
    is counter-based.

    ```mlir
    %ctx, %p = train.remat -> tensor<8x12x1024x64xbf16>, tensor<8x12x1024x1024xbf16> {
      %s = train.matmul %q, %k {transpose_rhs} : ...
      ...
      train.yield %c, %p : tensor<8x12x1024x64xbf16>, tensor<8x12x1024x1024xbf16>
    }
    ```
  }];
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    (`->` type($results)^)? attr-dict-with-keyword $body
  }];
  let hasVerifier = 1;
}

def Train_YieldOp : Train_Op<"yield", [
    Pure, Terminator, ReturnLike,
    ParentOneOf<["BlockOp", "RematOp", "AccumulateOp"]>]> {
  let summary = "ends a train.block or train.remat and gives its results";
  let description = [{
    ```mlir
    train.yield %x : tensor<8x1024x768xbf16>
    ```
  }];
  let arguments = (ins Variadic<AnyType>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
  let builders = [OpBuilder<(ins), [{ /* nothing to yield */ }]>];
}

//===----------------------------------------------------------------------===//
// Optimizer side
//===----------------------------------------------------------------------===//

def Train_AdamWOp : Train_NonDiffOp<"adamw",
    [DeclareOpInterfaceMethods<Train_TiedOpInterface>,
     DeclareOpInterfaceMethods<Train_OptimizerUpdateOpInterface, ["buildBlockwise8bit"]>,
     AllTypesMatch<["param", "new_param"]>, AllTypesMatch<["m", "new_m"]>,
     AllTypesMatch<["v", "new_v"]>]> {
  let summary = "one AdamW update with decoupled weight decay";
  let description = [{
    With `t = step` (counted from 1), `m' = β1 m + (1-β1) g`,
    `v' = β2 v + (1-β2) g²`, and
    `p' = p - lr · (m'/(1-β1^t) / (sqrt(v'/(1-β2^t)) + eps) + wd · p)`,
    evaluated in f32 as `p' = (1 - lr·wd) p - α m' / (sqrt(v') + ε̂)` with
    `α = lr sqrt(1-β2^t) / (1-β1^t)` and `ε̂ = eps sqrt(1-β2^t)` (Kingma &
    Ba's form; the constants in f64 once per tensor). `m` and `v` are f32;
    the parameter may be the f32 master copy of a 16-bit weight. A gradient
    with an element that is not finite leaves the parameter, `m` and `v` as
    they are (the update of this tensor is skipped; see
    `train.unscale_gradients`).

    ```mlir
    %p2, %m2, %v2 = train.adamw %p, %g, %m, %v, %lr, %step
        {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-08 : f64, weight_decay = 0.1 : f64}
        : tensor<768xf32>, tensor<768xf32>, tensor<768xf32>, tensor<768xf32>,
          tensor<f32>, tensor<i64>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$param, Train_FloatTensor:$grad,
                       Train_FloatTensor:$m, Train_FloatTensor:$v,
                       Train_F32Scalar:$lr, Train_I64Scalar:$step,
                       F64Attr:$beta1, F64Attr:$beta2, F64Attr:$epsilon,
                       F64Attr:$weight_decay);
  let results = (outs Train_FloatTensor:$new_param, Train_FloatTensor:$new_m,
                      Train_FloatTensor:$new_v);
  // `$param, $grad, $m, $v, $lr, $step attr-dict : <their types>`, written
  // by hand so that the hyperparameters print from the dialect's cache.
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
}

def Train_SGDOp : Train_NonDiffOp<"sgd", [
    DeclareOpInterfaceMethods<Train_TiedOpInterface>, InferTypeOpAdaptor,
    DeclareOpInterfaceMethods<Train_OptimizerUpdateOpInterface, ["buildBlockwise8bit"]>]> {
  let summary = "one SGD update, with optional momentum";
  let description = [{
    `g' = g + wd · p`; with momentum, `b' = momentum · b + g'` and the step
    uses `b'` (or `g' + momentum · b'` with `nesterov`); `p' = p - lr · step`.
    The momentum buffer is an operand and a result exactly when
    `momentum > 0`. A gradient with an element that is not finite leaves the
    parameter and buffer as they are.

    ```mlir
    %p2, %b2 = train.sgd %p, %g, %lr, %buf {momentum = 0.9 : f64, weight_decay = 0.0 : f64}
        : (tensor<768xf32>, tensor<768xf32>, tensor<f32>, tensor<768xf32>)
       -> (tensor<768xf32>, tensor<768xf32>)
    ```
  }];
  let arguments = (ins Train_FloatTensor:$param, Train_FloatTensor:$grad,
                       Train_F32Scalar:$lr,
                       Optional<Train_FloatTensor>:$momentum_buffer,
                       F64Attr:$momentum, F64Attr:$weight_decay,
                       UnitAttr:$nesterov);
  let results = (outs Train_FloatTensor:$new_param,
                      Optional<Train_FloatTensor>:$new_momentum_buffer);
  let assemblyFormat = [{
    $param `,` $grad `,` $lr (`,` $momentum_buffer^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Train_SGD8bitOp : Train_NonDiffOp<"sgd_8bit", [
    DeclareOpInterfaceMethods<Train_TiedOpInterface>,
    DeclareOpInterfaceMethods<Train_OptimizerUpdateOpInterface>,
    AllTypesMatch<["param", "new_param"]>,
    AllTypesMatch<["codes", "new_codes"]>,
    AllTypesMatch<["absmax", "new_absmax"]>]> {
  let summary = "SGD with momentum on a block-wise 8-bit buffer, fused";
  let description = [{
    The update of `train.sgd` with momentum, its buffer stored as codes of
    the signed dynamic map plus one f32 absmax per block: one block at a
    time, dequantize, update in f32, find the new absmax, requantize. A
    non-finite gradient element leaves the parameter and buffer as they are.

    ```mlir
    %p2, %c2, %a2 = train.sgd_8bit %p, %g, %codes, %absmax, %lr
        {momentum = 0.9 : f64, weight_decay = 0.0 : f64, block = 256 : i64}
        : tensor<4096xf32>, tensor<4096xf32>, tensor<4096xi8>, tensor<16xf32>,
          tensor<f32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$param, Train_FloatTensor:$grad,
                       Train_StaticTensorOf<[I8]>:$codes,
                       Train_StaticTensorOf<[F32]>:$absmax,
                       Train_F32Scalar:$lr, F64Attr:$momentum,
                       F64Attr:$weight_decay, UnitAttr:$nesterov,
                       I64Attr:$block);
  let results = (outs Train_FloatTensor:$new_param,
                      Train_StaticTensorOf<[I8]>:$new_codes,
                      Train_StaticTensorOf<[F32]>:$new_absmax);
  let assemblyFormat = [{
    $param `,` $grad `,` $codes `,` $absmax `,` $lr attr-dict `:`
    type($param) `,` type($grad) `,` type($codes) `,` type($absmax) `,`
    type($lr)
  }];
  let hasVerifier = 1;
}

// An optimizer with one f32 state tensor per parameter (`stateKind`, on
// the signed 8-bit map when quantized): `Name`Op (train.`mnemonic`:
// param, grad, state, lr -> new param, new state) and its fused 8-bit form
// `Name`8bitOp (train.`mnemonic`_8bit: the state as codes and one absmax
// per block), with the hyperparameters `hyper` (F64Attrs, checked by name:
// verifyHyperparameters), the verifiers, the state and tied-result models,
// the 8-bit rewrite and the cost (`flops`, `flops8bit` per element). The
// kernels, the reference evaluator and the lowering come from the entry
// TMRT_ONE_STATE_OPTIMIZER(`mnemonic`, `Name`, ...) of
// trainmem-runtime/Optimizers.def; the registry entry
// (OptimizerRegistry.cpp) makes it an `optimizer=`.
multiclass Train_OneStateOptimizer<string mnemonic, string name,
                                   string summaryText, dag hyper,
                                   string exampleAttrs, string stateKind,
                                   int flops, int flops8bit> {
  def Op : Train_NonDiffOp<mnemonic,
      [DeclareOpInterfaceMethods<Train_TiedOpInterface>,
       DeclareOpInterfaceMethods<Train_OptimizerUpdateOpInterface,
                                 ["buildBlockwise8bit"]>,
       AllTypesMatch<["param", "new_param"]>, AllTypesMatch<["m", "new_m"]>]> {
    let summary = summaryText;
    let description = [{
      One state tensor, `m` (f32). A gradient with an element that is not
      finite leaves the parameter and `m` as they are. Its 8-bit form is
      `train.}] # mnemonic # [{_8bit`.

      ```mlir
      %p2, %m2 = train.}] # mnemonic # [{ %p, %g, %m, %lr
          }] # exampleAttrs # [{
          : tensor<768xf32>, tensor<768xf32>, tensor<768xf32>, tensor<f32>
      ```
    }];
    let arguments = !con((ins Train_FloatTensor:$param,
                              Train_FloatTensor:$grad, Train_FloatTensor:$m,
                              Train_F32Scalar:$lr), hyper);
    let results = (outs Train_FloatTensor:$new_param,
                        Train_FloatTensor:$new_m);
    // `<operands> attr-dict : <their types>`, as `train.adamw`.
    let hasCustomAssemblyFormat = 1;
    let hasVerifier = 1;
    let extraClassDefinition = [{
      ::mlir::ParseResult $cppClass::parse(::mlir::OpAsmParser &parser,
                                           ::mlir::OperationState &result) {
        return parseOperandsAndTypes(parser, result, 4, {0, 2});
      }
      void $cppClass::print(::mlir::OpAsmPrinter &p) {
        printOperandsAndTypes(p, *this);
      }
      ::mlir::LogicalResult $cppClass::verify() {
        return verifyOneStateUpdate(*this, getParam(), getGrad(), getM());
      }
      ::llvm::SmallVector<::mlir::train::OptimizerStateUse>
      $cppClass::getStateUses() {
        return {{StateKind::}] # stateKind # [{, StatePart::value, 2, 1}};
      }
      std::optional<unsigned>
      $cppClass::getTiedResultOperandIndex(unsigned result) {
        return tiedOfUpdate(*this, result);
      }
      ::mlir::Operation *$cppClass::buildBlockwise8bit(
          ::mlir::OpBuilder &builder, ::mlir::ValueRange codes,
          ::mlir::ValueRange absmax, int64_t block) {
        return }] # name # [{8bitOp::create(builder, getLoc(),
            ::mlir::TypeRange{getParam().getType(), codes[0].getType(),
                              absmax[0].getType()},
            ::mlir::ValueRange{getParam(), getGrad(), codes[0], absmax[0],
                               getLr()},
            hyperparametersWithBlock(*this, builder, block));
      }
      uint64_t $cppClass::getFlops() {
        return ::mlir::train::mulCount(}] # flops # [{,
            ::mlir::train::getNumElements(getParam().getType()));
      }
    }];
  }

  def 8bitOp : Train_NonDiffOp<mnemonic # "_8bit", [
      DeclareOpInterfaceMethods<Train_TiedOpInterface>,
      DeclareOpInterfaceMethods<Train_OptimizerUpdateOpInterface>,
      AllTypesMatch<["param", "new_param"]>,
      AllTypesMatch<["m_codes", "new_m_codes"]>,
      AllTypesMatch<["m_absmax", "new_m_absmax"]>]> {
    let summary = "train." # mnemonic # " on a block-wise 8-bit state, fused";
    let description = [{
      The update of `train.}] # mnemonic # [{`, its state stored as codes of
      the signed dynamic map plus one f32 absmax per block: one block at a
      time, dequantize, update in f32, find the new absmax, requantize. A
      non-finite gradient element leaves the parameter and the state as
      they are.

      ```mlir
      %p2, %c2, %a2 = train.}] # mnemonic # [{_8bit %p, %g, %codes, %absmax, %lr
          {..., block = 256 : i64}
          : tensor<4096xf32>, tensor<4096xf32>, tensor<4096xi8>,
            tensor<16xf32>, tensor<f32>
      ```
    }];
    let arguments = !con((ins Train_FloatTensor:$param,
                              Train_FloatTensor:$grad,
                              Train_StaticTensorOf<[I8]>:$m_codes,
                              Train_StaticTensorOf<[F32]>:$m_absmax,
                              Train_F32Scalar:$lr), hyper,
                         (ins I64Attr:$block));
    let results = (outs Train_FloatTensor:$new_param,
                        Train_StaticTensorOf<[I8]>:$new_m_codes,
                        Train_StaticTensorOf<[F32]>:$new_m_absmax);
    let hasCustomAssemblyFormat = 1;
    let hasVerifier = 1;
    let extraClassDefinition = [{
      ::mlir::ParseResult $cppClass::parse(::mlir::OpAsmParser &parser,
                                           ::mlir::OperationState &result) {
        return parseOperandsAndTypes(parser, result, 5, {0, 2, 3});
      }
      void $cppClass::print(::mlir::OpAsmPrinter &p) {
        printOperandsAndTypes(p, *this);
      }
      ::mlir::LogicalResult $cppClass::verify() {
        return verifyOneState8bitUpdate(*this, getParam(), getGrad(),
                                        getMCodes(), getMAbsmax(),
                                        getBlockAttr().getInt());
      }
      ::llvm::SmallVector<::mlir::train::OptimizerStateUse>
      $cppClass::getStateUses() {
        return {{StateKind::}] # stateKind # [{, StatePart::codes, 2, 1},
                {StateKind::}] # stateKind # [{, StatePart::absmax, 3, 2}};
      }
      std::optional<unsigned>
      $cppClass::getTiedResultOperandIndex(unsigned result) {
        return tiedOfUpdate(*this, result);
      }
      uint64_t $cppClass::getFlops() {
        return ::mlir::train::mulCount(}] # flops8bit # [{,
            ::mlir::train::getNumElements(getParam().getType()));
      }
    }];
  }
}

// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization
// Algorithms"): `c = β1 m + (1-β1) g`, `p' = p - lr · (sign(c) + wd · p)`,
// `m' = β2 m + (1-β2) g`, evaluated in f32 as `p' = (1 - lr·wd) p - lr ·
// sign(c)` (the decay factor in f64 once per tensor; `sign(0) = 0`).
defm Train_Lion : Train_OneStateOptimizer<"lion", "Lion",
    "one Lion update (sign of the interpolated momentum)",
    (ins F64Attr:$beta1, F64Attr:$beta2, F64Attr:$weight_decay),
    "{beta1 = 0.9 : f64, beta2 = 0.99 : f64, weight_decay = 0.1 : f64}",
    // Interpolate (3), sign, decay and step (4), the new momentum (3); the
    // 8-bit form: dequantize (1), Lion (10), absmax and requantize (10).
    "m", /*flops=*/10, /*flops8bit=*/21>;

def Train_SophiaOp : Train_NonDiffOp<"sophia",
    [DeclareOpInterfaceMethods<Train_TiedOpInterface>,
     DeclareOpInterfaceMethods<Train_OptimizerUpdateOpInterface, ["buildBlockwise8bit"]>,
     AllTypesMatch<["param", "new_param"]>, AllTypesMatch<["m", "new_m"]>,
     AllTypesMatch<["h", "new_h"]>]> {
  let summary = "one SophiaG update (clipped, Hessian-preconditioned sign)";
  let description = [{
    Sophia (Liu et al. 2023, "Sophia: A Scalable Stochastic Second-order
    Optimizer for Language Model Pre-training", SophiaG):
    `m' = β1 m + (1-β1) g`,
    `p' = (1 - lr·wd) p - lr · sign(m') · min(|m'| / (ρ · batch · h + ε), 1)`
    with `h` the estimate of the Hessian's diagonal that the step's Hessian
    function refreshes every k steps (`train.hessian_ema`) and `batch` the
    tokens one step trains on (the gradient is the mean loss's). In f32 one
    operation at a time, `ρ · batch` and the decay factor in f64 once per
    tensor. The step reads `h` and returns it as it is (`new_h`, in place),
    so that a step's state is always read and written. A gradient with an
    element that is not finite leaves the parameter and `m` as they are.

    ```mlir
    %p2, %m2, %h2 = train.sophia %p, %g, %m, %h, %lr
        {beta1 = 0.965 : f64, rho = 0.04 : f64, epsilon = 1.0e-15 : f64,
         weight_decay = 0.1 : f64, batch = 4096 : i64}
        : tensor<768xf32>, tensor<768xf32>, tensor<768xf32>, tensor<768xf32>,
          tensor<f32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$param, Train_FloatTensor:$grad,
                       Train_FloatTensor:$m, Train_FloatTensor:$h,
                       Train_F32Scalar:$lr, F64Attr:$beta1, F64Attr:$rho,
                       F64Attr:$epsilon, F64Attr:$weight_decay,
                       I64Attr:$batch);
  let results = (outs Train_FloatTensor:$new_param, Train_FloatTensor:$new_m,
                      Train_FloatTensor:$new_h);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
}

def Train_Sophia8bitOp : Train_NonDiffOp<"sophia_8bit", [
    DeclareOpInterfaceMethods<Train_TiedOpInterface>,
    DeclareOpInterfaceMethods<Train_OptimizerUpdateOpInterface>,
    AllTypesMatch<["param", "new_param"]>,
    AllTypesMatch<["m_codes", "new_m_codes", "h_codes", "new_h_codes"]>,
    AllTypesMatch<["m_absmax", "new_m_absmax", "h_absmax", "new_h_absmax"]>]> {
  let summary = "SophiaG on block-wise 8-bit m and h, fused";
  let description = [{
    The update of `train.sophia` with `m` on the signed dynamic map and `h`
    on the unsigned one, one block at a time: dequantize, update in f32,
    requantize `m` (`h` is read and returned as it is). A non-finite
    gradient element leaves the parameter and state as they are.

    ```mlir
    %p2, %mc2, %ma2, %hc2, %ha2 = train.sophia_8bit %p, %g, %mc, %ma, %hc, %ha, %lr
        {beta1 = 0.965 : f64, rho = 0.04 : f64, epsilon = 1.0e-15 : f64,
         weight_decay = 0.1 : f64, batch = 4096 : i64, block = 256 : i64}
        : tensor<4096xf32>, tensor<4096xf32>, tensor<4096xi8>, tensor<16xf32>,
          tensor<4096xi8>, tensor<16xf32>, tensor<f32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$param, Train_FloatTensor:$grad,
                       Train_StaticTensorOf<[I8]>:$m_codes,
                       Train_StaticTensorOf<[F32]>:$m_absmax,
                       Train_StaticTensorOf<[I8]>:$h_codes,
                       Train_StaticTensorOf<[F32]>:$h_absmax,
                       Train_F32Scalar:$lr, F64Attr:$beta1, F64Attr:$rho,
                       F64Attr:$epsilon, F64Attr:$weight_decay,
                       I64Attr:$batch, I64Attr:$block);
  let results = (outs Train_FloatTensor:$new_param,
                      Train_StaticTensorOf<[I8]>:$new_m_codes,
                      Train_StaticTensorOf<[F32]>:$new_m_absmax,
                      Train_StaticTensorOf<[I8]>:$new_h_codes,
                      Train_StaticTensorOf<[F32]>:$new_h_absmax);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
}

def Train_HessianEMAOp : Train_NonDiffOp<"hessian_ema", [
    DeclareOpInterfaceMethods<Train_TiedOpInterface>,
    DeclareOpInterfaceMethods<Train_OptimizerUpdateOpInterface,
                              ["getUpdatedParam", "getNewParamValue"]>,
    AllTypesMatch<["h", "new_h"]>]> {
  let summary = "refreshes Sophia's Hessian estimate from a sampled gradient";
  let description = [{
    `h' = β2 h + (1-β2) ĝ²` (SophiaG's Gauss-Newton-Bartlett estimator),
    with `ĝ` the gradient of the loss on labels sampled from the model's own
    logits (`train.sample`): the update of a Hessian step. In f32 one
    operation at a time. Its OptimizerUpdateOpInterface's updated tensor is
    `h` (it has no parameter): the memory analysis counts `ĝ` as the
    Hessian step's gradient. A gradient with an element that is not finite
    leaves `h` as it is.

    ```mlir
    %h2 = train.hessian_ema %h, %g {beta2 = 0.99 : f64}
        : tensor<768xf32>, tensor<768xbf16>
    ```
  }];
  let arguments = (ins Train_StaticTensorOf<[F32]>:$h,
                       Train_FloatTensor:$grad, F64Attr:$beta2);
  let results = (outs Train_StaticTensorOf<[F32]>:$new_h);
  let assemblyFormat = [{
    $h `,` $grad attr-dict `:` type($h) `,` type($grad)
  }];
  let hasVerifier = 1;
}

def Train_SampleOp : Train_NonDiffOp<"sample"> {
  let summary = "draws one class per row from the softmax of logits";
  let description = [{
    For each row `r` of `logits` (its last dimension the classes), the
    class `c` with `Σ_{j<c} p_j <= u < Σ_{j<=c} p_j`, `p = softmax(row)`,
    `u` the top 24 bits of the Philox word of (`seed` + `key`, `offset`,
    `r`) over 2^24: labels drawn from the model's own distribution, as
    Sophia's Hessian step needs them. The sums run in f64 in class order,
    each `exp` in f32 of `x - max` (trainmem/Support/Sample.h: the
    evaluator and the kernels share it). Not differentiated: the labels
    are constants of the loss that reads them.

    ```mlir
    %y = train.sample %logits key(%step : tensor<i64>) {seed = 0 : i64, offset = 7 : i64}
        : tensor<8x1024x50304xbf16> -> tensor<8x1024xi32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$logits,
                       Optional<Train_I64Scalar>:$key, I64Attr:$seed,
                       I64Attr:$offset);
  let results = (outs Train_IdTensor:$labels);
  let assemblyFormat = [{
    $logits (`key` `(` $key^ `:` type($key) `)`)? attr-dict `:`
    type($logits) `->` type($labels)
  }];
  let hasVerifier = 1;
}

def Train_ClipGradNormOp : Train_NonDiffOp<"clip_grad_norm", [
    AttrSizedOperandSegments, InferTypeOpAdaptor,
    DeclareOpInterfaceMethods<Train_TiedOpInterface>]> {
  let summary = "scales gradients so their global L2 norm is at most max_norm";
  let description = [{
    Computes `norm = sqrt(Σ ||g_i||²)` over all operands and returns each
    gradient times `min(1, max_norm / (norm + 1e-6))`, followed by `norm`.

    The squared norm is summed exactly (trainmem/Support/ExactSum.h: every
    square added to a fixed-point number without rounding, the sum rounded
    to double once), so the norm does not depend on the order of the terms.

    With `squared_norm(%s, ...)`, the squared global norm is the exact sum
    of the operands' words instead: the gradients are one rank's parts, and
    each `%s` the sum over a group of ranks of their `train.squared_norm`
    (a `shard.all_reduce` of the exact sums): one rank's shards under ZeRO
    stages 1-3, the parts of the gradients train-tensor-parallel split
    (summed over the tensor axis) beside those of the whole ones (on every
    rank alike, counted once). Every rank clips by the same global norm,
    the norm one rank computes from the whole gradients, to the bit.

    ```mlir
    %g0c, %g1c, %norm = train.clip_grad_norm %g0, %g1 {max_norm = 1.0 : f64}
        : (tensor<768xf32>, tensor<768x768xf32>)
       -> (tensor<768xf32>, tensor<768x768xf32>, tensor<f32>)
    %s0c, %n = train.clip_grad_norm %s0 squared_norm(%all) {max_norm = 1.0 : f64}
        : (tensor<192xf32>, tensor<24xi64>) -> (tensor<192xf32>, tensor<f32>)
    ```
  }];
  let arguments = (ins Variadic<Train_FloatTensor>:$grads,
                       Variadic<Train_StaticTensorOf<[I64]>>:$squared_norms,
                       F64Attr:$max_norm);
  let results = (outs Variadic<Train_FloatTensor>:$clipped,
                      Train_F32Scalar:$norm);
  let assemblyFormat = [{
    $grads (`squared_norm` `(` $squared_norms^ `)`)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Train_SquaredNormOp : Train_NonDiffOp<"squared_norm",
    [InferTypeOpAdaptor]> {
  let summary = "the exact sum of the squares of every element of its operands";
  let description = [{
    `Σ_i ||g_i||²` over all operands, without rounding: a fixed-point number
    of 22 limbs of 32 bits, the lowest weighing 2^-352, each held in an i64,
    followed by the counts of infinite and NaN squares
    (trainmem/Support/ExactSum.h). One rank's part of the squared global
    gradient norm when the gradients are sharded (ZeRO): a `shard.all_reduce`
    (sum) of the words adds the ranks' parts exactly, in any order, for
    `train.clip_grad_norm ... squared_norm(...)`.

    ```mlir
    %s = train.squared_norm %g0, %g1 : tensor<192xf32>, tensor<64xf32> -> tensor<24xi64>
    ```
  }];
  let arguments = (ins Variadic<Train_FloatTensor>:$inputs);
  let results = (outs Train_StaticTensorOf<[I64]>:$result);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs) `->` type($result)";
  let hasVerifier = 1;
}

def Train_LossScaleOp : Train_NonDiffOp<"loss_scale",
    [InferTypeOpAdaptor]> {
  let summary = "the dynamic loss scale a step's backward is seeded with";
  let description = [{
    `initial · 2^state[0]` as an f32 scalar, where `state` is the step's
    loss-scale state (`#train.state<"step", loss_scale>`, see
    `train.unscale_gradients`). train-loss-scale multiplies the loss
    gradient by it, so that small f16 gradients do not flush to zero.

    ```mlir
    %s = train.loss_scale %state {initial = 65536.0 : f64} : tensor<3xi64> -> tensor<f32>
    ```
  }];
  let arguments = (ins Train_StaticTensorOf<[I64]>:$state, F64Attr:$initial);
  let results = (outs Train_F32Scalar:$scale);
  let assemblyFormat = "$state attr-dict `:` type($state) `->` type($scale)";
  let hasVerifier = 1;
}

def Train_UnscaleGradientsOp : Train_NonDiffOp<"unscale_gradients",
    [AttrSizedOperandSegments, InferTypeOpAdaptor]> {
  let summary = "divides scaled gradients by the loss scale and updates it";
  let description = [{
    Dynamic loss scaling, with PyTorch GradScaler's defaults: with
    `s = initial · 2^state[0]` (the scale the backward was seeded with),
    when every element of every gradient is finite, each result is its
    gradient divided by `s`, in f32; `state[1]` (clean steps) counts up and
    after `growth_interval` clean steps the scale doubles (`state[0] + 1`,
    `state[1] = 0`). When any element is not finite (an f16 overflow), every
    result is NaN, so that every optimizer update of the step is skipped
    (`train.adamw` and the others leave a tensor whose gradient is not
    finite as it is), the scale halves (`state[0] - 1`), `state[1] = 0` and
    `state[2]` (skipped steps) counts up.

    With `squared_norm(%s, ...)` (a partitioned step: each rank unscales
    its shards or its tensor-parallel parts), the step overflowed when its
    own gradients or any `%s` are not finite: each `%s` is the exact
    squared norm of a group of ranks' parts (`train.squared_norm`, summed
    over the group by a `shard.all_reduce`), so every rank skips, halves or
    grows the scale alike.

    ```mlir
    %u0, %u1, %new_state = train.unscale_gradients %g0, %g1 scale(%state)
        {initial = 65536.0 : f64, growth_interval = 2000 : i64}
        : (tensor<768xf16>, tensor<768x768xf16>), tensor<3xi64>
       -> (tensor<768xf32>, tensor<768x768xf32>), tensor<3xi64>
    ```
  }];
  let arguments = (ins Variadic<Train_FloatTensor>:$grads,
                       Train_StaticTensorOf<[I64]>:$state,
                       Variadic<Train_StaticTensorOf<[I64]>>:$squared_norms,
                       F64Attr:$initial, I64Attr:$growth_interval);
  let results = (outs Variadic<Train_FloatTensor>:$unscaled,
                      Train_StaticTensorOf<[I64]>:$new_state);
  let assemblyFormat = [{
    $grads `scale` `(` $state `)`
    (`squared_norm` `(` $squared_norms^ `:` type($squared_norms) `)`)?
    attr-dict `:` `(` type($grads) `)` `,`
    type($state) `->` `(` type($unscaled) `)` `,` type($new_state)
  }];
  let hasVerifier = 1;
}

def Train_QuantizeOp : Train_NonDiffOp<"quantize"> {
  let summary = "block-wise 8-bit dynamic quantization";
  let description = [{
    Splits the flattened `input` into blocks of `block` elements; each block
    stores its largest magnitude in `absmax` (f32) and each element the code
    (0..255, stored as i8) of the entry of the 256-entry dynamic map nearest
    to `x / absmax` (Dettmers et al. 2022; the signed map for values of both
    signs, Adam's m; the unsigned one for v). See
    `include/trainmem/Support/DynamicMap.h`.

    ```mlir
    %codes, %absmax = train.quantize %m {block = 256 : i64, is_signed}
        : tensor<768x768xf32> -> tensor<768x768xi8>, tensor<2304xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input, I64Attr:$block,
                       UnitAttr:$is_signed);
  let results = (outs Train_StaticTensorOf<[I8]>:$codes,
                      Train_StaticTensorOf<[F32]>:$absmax);
  let assemblyFormat = [{
    $input attr-dict `:` type($input) `->` type($codes) `,` type($absmax)
  }];
  let hasVerifier = 1;
}

def Train_DequantizeOp : Train_NonDiffOp<"dequantize"> {
  let summary = "block-wise 8-bit dynamic dequantization";
  let description = [{
    `map[code] · absmax[block of the element]`: the inverse of
    `train.quantize` up to the map's resolution.

    ```mlir
    %m = train.dequantize %codes, %absmax {block = 256 : i64, is_signed}
        : tensor<768x768xi8>, tensor<2304xf32> -> tensor<768x768xf32>
    ```
  }];
  let arguments = (ins Train_StaticTensorOf<[I8]>:$codes,
                       Train_StaticTensorOf<[F32]>:$absmax, I64Attr:$block,
                       UnitAttr:$is_signed);
  let results = (outs Train_StaticTensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $codes `,` $absmax attr-dict `:` type($codes) `,` type($absmax) `->`
    type($result)
  }];
  let hasVerifier = 1;
}

def Train_AdamW8bitOp : Train_NonDiffOp<"adamw_8bit", [
    DeclareOpInterfaceMethods<Train_TiedOpInterface>,
    DeclareOpInterfaceMethods<Train_OptimizerUpdateOpInterface>,
    AllTypesMatch<["param", "new_param"]>,
    AllTypesMatch<["m_codes", "new_m_codes", "v_codes", "new_v_codes"]>,
    AllTypesMatch<["m_absmax", "new_m_absmax", "v_absmax", "new_v_absmax"]>]> {
  let summary = "AdamW on block-wise 8-bit m and v, fused";
  let description = [{
    One block at a time: dequantize m (signed map) and v (unsigned map),
    apply the AdamW update of `train.adamw` in f32, find each block's new
    absmax and requantize; element by element, with no f32 copy of the
    state. If any gradient element is not finite, the parameter and its
    state are left as they are (the step is skipped for this tensor).

    ```mlir
    %p2, %mc2, %ma2, %vc2, %va2 = train.adamw_8bit %p, %g, %mc, %ma, %vc, %va, %lr, %step
        {beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-08 : f64,
         weight_decay = 0.0 : f64, block = 256 : i64}
        : tensor<4096xf32>, tensor<4096xf32>, tensor<4096xi8>, tensor<16xf32>,
          tensor<4096xi8>, tensor<16xf32>, tensor<f32>, tensor<i64>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$param, Train_FloatTensor:$grad,
                       Train_StaticTensorOf<[I8]>:$m_codes,
                       Train_StaticTensorOf<[F32]>:$m_absmax,
                       Train_StaticTensorOf<[I8]>:$v_codes,
                       Train_StaticTensorOf<[F32]>:$v_absmax,
                       Train_F32Scalar:$lr, Train_I64Scalar:$step,
                       F64Attr:$beta1, F64Attr:$beta2, F64Attr:$epsilon,
                       F64Attr:$weight_decay, I64Attr:$block);
  let results = (outs Train_FloatTensor:$new_param,
                      Train_StaticTensorOf<[I8]>:$new_m_codes,
                      Train_StaticTensorOf<[F32]>:$new_m_absmax,
                      Train_StaticTensorOf<[I8]>:$new_v_codes,
                      Train_StaticTensorOf<[F32]>:$new_v_absmax);
  // `<operands> attr-dict : <their types>`, as `train.adamw`.
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
}

def Train_LRScheduleOp : Train_NonDiffOp<"lr_schedule",
    [InferTypeOpAdaptor]> {
  let summary = "learning rate with linear warm-up and cosine decay";
  let description = [{
    For step `t` (from 1): `peak_lr · t / warmup_steps` while
    `t <= warmup_steps`; then cosine decay from `peak_lr` to `min_lr` at
    `total_steps`, and `min_lr` after it.

    ```mlir
    %lr = train.lr_schedule %step {peak_lr = 6.0e-04 : f64, min_lr = 6.0e-05 : f64,
                                   warmup_steps = 100 : i64, total_steps = 5000 : i64}
        : tensor<i64> -> tensor<f32>
    ```
  }];
  let arguments = (ins Train_I64Scalar:$step, F64Attr:$peak_lr,
                       F64Attr:$min_lr, I64Attr:$warmup_steps,
                       I64Attr:$total_steps);
  let results = (outs Train_F32Scalar:$result);
  let assemblyFormat = "$step attr-dict `:` type($step) `->` type($result)";
  let hasVerifier = 1;
}

#endif // TRAINMEM_DIALECT_TRAIN_IR_TRAINOPS_TD
