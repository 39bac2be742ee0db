//===- TrainInterfaces.td - interfaces of the train dialect -*- tablegen -*-===//

#ifndef TRAINMEM_DIALECT_TRAIN_IR_TRAININTERFACES_TD
#define TRAINMEM_DIALECT_TRAIN_IR_TRAININTERFACES_TD

include "mlir/IR/OpBase.td"

def Train_DifferentiableOpInterface : OpInterface<"DifferentiableOpInterface"> {
  let cppNamespace = "::mlir::train";
  let description = [{
    An op that builds its own vector-Jacobian product. Reverse-mode autodiff
    calls `buildVJP` with the builder positioned in the backward pass and one
    incoming gradient per result (a null `Value` where no gradient flows into
    that result). The op appends one gradient per operand to `operandGrads`:
    a null `Value` for operands that are not differentiable (token ids,
    targets, masks). The ops it builds use only the operands and results the
    VJP really needs, so liveness shows what the forward must keep.
  }];
  let methods = [
    InterfaceMethod<
      "Builds the vector-Jacobian product of this op at the builder's "
      "insertion point.",
      "::llvm::LogicalResult", "buildVJP",
      (ins "::mlir::OpBuilder &":$builder,
           "::mlir::ValueRange":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>
  ];
}

def Train_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::mlir::train";
  let description = [{
    The cost of one execution of an op, from its static shapes: floating-point
    operations (a multiply-add counts 2) and bytes read and written in
    memory. The defaults count every operand as read once and every result as
    written once; ops that touch less (views, gathers) override them. Counts
    saturate at `kCountOverflow` (mulCount, addCount) instead of wrapping.
  }];
  let methods = [
    InterfaceMethod<"Floating-point operations of one execution.",
      "uint64_t", "getFlops">,
    InterfaceMethod<"Of getFlops, the operations that redo forward work (a "
      "backward that recomputes what its forward did not keep); the memory "
      "report counts them as recompute.",
      "uint64_t", "getRecomputeFlops", (ins), [{}], [{ return 0; }]>,
    InterfaceMethod<"The matrix products one execution runs as GEMMs (all of "
      "getFlops, for an op that is one); a time model rates them by their "
      "shape and element type. None by default: the op is rated by its "
      "FLOPs and bytes.",
      "void", "getGemms",
      (ins "::llvm::SmallVectorImpl<::mlir::train::GemmShape> &":$gemms),
      [{}], [{ (void)gemms; }]>,
    InterfaceMethod<"Bytes read from memory.",
      "uint64_t", "getBytesRead", (ins), [{}], [{
        uint64_t bytes = 0;
        for (::mlir::Value operand : $_op->getOperands())
          bytes = ::mlir::train::addCount(
              bytes, ::mlir::train::getTensorBytes(operand.getType()));
        return bytes;
      }]>,
    InterfaceMethod<"Bytes written to memory.",
      "uint64_t", "getBytesWritten", (ins), [{}], [{
        uint64_t bytes = 0;
        for (::mlir::Value result : $_op->getResults())
          bytes = ::mlir::train::addCount(
              bytes, ::mlir::train::getTensorBytes(result.getType()));
        return bytes;
      }]>
  ];
}

def Train_BatchDrawOpInterface : OpInterface<"BatchDrawOpInterface"> {
  let cppNamespace = "::mlir::train";
  let description = [{
    An op that draws Philox numbers by an element's position in the whole
    batch (dropout and its masks, fused attention's dropout): element `i`
    of a draw is at `first + rank · rank_elements + part · part_elements +
    i`. Gradient accumulation gives a micro-batch's copy its index as `part`
    and its draw's element count as `part_elements`; unrolling folds them
    into `first`. train-zero gives the elements of one rank's batch as
    `rank_elements` (the rank is the process's). Each sample then draws
    what it draws in the whole global batch.
  }];
  let methods = [
    InterfaceMethod<"Whether the op draws at all (a dropout rate above 0).",
      "bool", "drawsRandom", (ins), [{}], [{ return true; }]>,
    InterfaceMethod<"The elements one execution draws.",
      "int64_t", "getDrawnElements">,
    InterfaceMethod<"The tensor one execution draws for, as an i1 mask "
      "type: element i of the draw is its i-th element, row-major (a "
      "dropout's mask; a fused attention's [B, H, S, S'] probabilities).",
      "::mlir::RankedTensorType", "getDrawnType">,
    InterfaceMethod<"The batch rows one execution draws for: dimension 0 "
      "of its first result (its draws are row-major over them).",
      "int64_t", "getDrawnRows", (ins), [{}], [{
        auto type = ::llvm::cast<::mlir::ShapedType>(
            $_op->getResult(0).getType());
        return type.getRank() == 0 ? 1 : type.getDimSize(0);
      }]>,
    InterfaceMethod<"The key operand (a step passes its step counter, so "
      "each step draws afresh; null without one).",
      "::mlir::Value", "getKeyValue", (ins), [{}],
      [{ return $_op.getKey(); }]>,
    InterfaceMethod<"Sets the key operand.",
      "void", "setKeyValue", (ins "::mlir::Value":$key), [{}],
      [{ $_op.getKeyMutable().assign(key); }]>,
    InterfaceMethod<"The micro-batch index operand (null without one).",
      "::mlir::Value", "getPartValue", (ins), [{}],
      [{ return $_op.getPart(); }]>,
    InterfaceMethod<"Sets (or, with a null value, removes) the micro-batch "
      "index operand.",
      "void", "setPartValue", (ins "::mlir::Value":$part), [{}], [{
        if (part)
          $_op.getPartMutable().assign(part);
        else
          $_op.getPartMutable().clear();
      }]>,
    InterfaceMethod<"Position of the first element (with part 0).",
      "int64_t", "getFirstPosition", (ins), [{}],
      [{ return $_op.getFirstAttr().getInt(); }]>,
    InterfaceMethod<"Sets the position of the first element.",
      "void", "setFirstPosition", (ins "int64_t":$first), [{}],
      [{ $_op.setFirst(first); }]>,
    InterfaceMethod<"Elements between two parts.",
      "int64_t", "getElementsPerPart", (ins), [{}],
      [{ return $_op.getPartElementsAttr().getInt(); }]>,
    InterfaceMethod<"Sets the elements between two parts.",
      "void", "setElementsPerPart", (ins "int64_t":$elements), [{}],
      [{ $_op.setPartElements(elements); }]>,
    InterfaceMethod<"Elements between two data-parallel ranks' batches "
      "(rank r draws from r times this on).",
      "int64_t", "getElementsPerRank", (ins), [{}],
      [{ return $_op.getRankElementsAttr().getInt(); }]>,
    InterfaceMethod<"Sets the elements between two ranks' batches.",
      "void", "setElementsPerRank", (ins "int64_t":$elements), [{}],
      [{ $_op.setRankElements(elements); }]>,
    InterfaceMethod<"Processes between two data ranks: the rank is the "
      "process's index over this (1, or a tensor-parallel group's size).",
      "int64_t", "getDataRankStride", (ins), [{}],
      [{ return $_op.getRankStrideAttr().getInt(); }]>,
    InterfaceMethod<"Sets the processes between two data ranks.",
      "void", "setDataRankStride", (ins "int64_t":$stride), [{}],
      [{ $_op.setRankStride(stride); }]>,
    InterfaceMethod<"The whole tensor this draw is one rank's part of "
      "(train-tensor-parallel's #train.split of the drawn tensor), or null "
      "when it draws all of it.",
      "::mlir::Attribute", "getDrawSplit", (ins), [{}],
      [{ return $_op->getAttr("split"); }]>
  ];
}

def Train_LossOpInterface : OpInterface<"LossOpInterface"> {
  let cppNamespace = "::mlir::train";
  let description = [{
    An op that gives a step's summed loss over its valid targets and the
    count of those targets (`train.cross_entropy`, and
    `train.cross_entropy_merge` of a vocabulary-parallel one): gradient
    accumulation normalizes by the window's count of the same targets.
  }];
  let methods = [
    InterfaceMethod<"The targets whose valid ones are counted.",
      "::mlir::Value", "getTargets">,
    InterfaceMethod<"The target value that marks a position ignored.",
      "int64_t", "getIgnoredTarget", (ins), [{}],
      [{ return $_op.getIgnoreIndexAttr().getInt(); }]>,
    InterfaceMethod<"The summed loss (an f32 scalar).",
      "::mlir::Value", "getLossSum">,
    InterfaceMethod<"The count of valid targets (an i64 scalar).",
      "::mlir::Value", "getCount">
  ];
}

def Train_LossGradOpInterface : OpInterface<"LossGradOpInterface"> {
  let cppNamespace = "::mlir::train";
  let description = [{
    The first op of a backward pass: it takes the gradient of a summed loss
    (`train.cross_entropy_grad`, `train.cross_entropy_merge_grad`). Loss
    scaling multiplies that operand by the scale.
  }];
  let methods = [
    InterfaceMethod<"The summed loss's gradient operand (an f32 scalar).",
      "::mlir::OpOperand &", "getLossGradOperand", (ins), [{}], [{
        return $_op.getGradMutable();
      }]>
  ];
}

def Train_NormGradOpInterface : OpInterface<"NormGradOpInterface"> {
  let cppNamespace = "::mlir::train";
  let description = [{
    The backward of a normalization (`layer_norm_grad`, `rms_norm_grad`):
    it reads the norm's input, which is what the forward keeps for it (the
    memory report's `saved_for = norm`).
  }];
  let methods = [
    InterfaceMethod<"The norm's input operand this backward reads.",
      "::mlir::OpOperand &", "getNormInputOperand", (ins), [{}], [{
        return $_op.getInputMutable();
      }]>
  ];
}

def Train_StridedViewOpInterface : OpInterface<"StridedViewOpInterface"> {
  let cppNamespace = "::mlir::train";
  let description = [{
    A view (upstream `ViewLikeOpInterface`) whose result's layout in its
    source's buffer follows from the source's strides: `transpose` permutes
    them; `reshape` renames a row-major source's shape and cannot view any
    other (it copies then). The layout analysis (getStrides,
    isAliasingView) asks this interface, not the ops by name.
  }];
  let methods = [
    InterfaceMethod<[{
        The strides (in elements) of the result as a view of a source laid
        out with `sourceStrides`; none when the result cannot be a view of
        such a source (it is a row-major copy then).
      }],
      "::std::optional<::llvm::SmallVector<int64_t>>", "getViewStrides",
      (ins "::llvm::ArrayRef<int64_t>":$sourceStrides)>
  ];
}

def Train_StridedOperandsOpInterface
    : OpInterface<"StridedOperandsOpInterface"> {
  let cppNamespace = "::mlir::train";
  let description = [{
    An op whose runtime kernel reads some of its operands through their
    strides, so that a strided view (a transpose) is read where it lies:
    the matmul's operands, the input of a view or a strided copy, the fused
    attention's Q, K and V. Every other operand of a train op is read
    row-major: train-materialize-layouts copies a strided view read there
    into a row-major tensor first. The pass asks this interface, not the
    ops by name.
  }];
  let methods = [
    InterfaceMethod<"Whether operand `index` is read through its strides.",
      "bool", "readsStridedOperand", (ins "unsigned":$index)>
  ];
}

def Train_TransparentRegionOpInterface
    : OpInterface<"TransparentRegionOpInterface"> {
  let cppNamespace = "::mlir::train";
  let description = [{
    An op with one region executed once, in place (`train.block`,
    `train.remat`): its body uses outer values directly and its results are
    what its `train.yield` yields. Analyses look through it (a result names
    the yielded value's memory) and passes that move ops across it keep the
    IR valid through this interface, not through a list of ops.
  }];
  let methods = [
    InterfaceMethod<"The yielded values, one per result.",
      "::mlir::OperandRange", "getYieldedValues", (ins), [{}], [{
        return $_op->getRegion(0).front().getTerminator()->getOperands();
      }]>,
    InterfaceMethod<"The value result `resultIndex` stands for.",
      "::mlir::Value", "getYieldedValue", (ins "unsigned":$resultIndex),
      [{}], [{
        return $_op->getRegion(0).front().getTerminator()->getOperand(
            resultIndex);
      }]>
  ];
}

def Train_TiedOpInterface : OpInterface<"TiedOpInterface"> {
  let cppNamespace = "::mlir::train";
  let description = [{
    An op some of whose results may reuse an operand's buffer (in the manner
    of IREE's tied operands): the result is the operand updated, written in
    place when nothing reads the operand afterwards. Optimizer updates tie
    the new parameter and state to the old ones, clipping ties each clipped
    gradient to its gradient. The memory analysis and the arena plan read
    this instead of knowing the ops.
  }];
  let methods = [
    InterfaceMethod<
      "The operand whose buffer result `resultIndex` may reuse, if any.",
      "::std::optional<unsigned>", "getTiedResultOperandIndex",
      (ins "unsigned":$resultIndex)>
  ];
}

def Train_OptimizerUpdateOpInterface
    : OpInterface<"OptimizerUpdateOpInterface", [Train_TiedOpInterface]> {
  let cppNamespace = "::mlir::train";
  let description = [{
    One optimizer update of one parameter: it reads the parameter, its
    gradient and its state, and returns the new parameter and the new state
    (each result tied to its operand). Passes ask this interface what the
    state is (its kind, and its part of an 8-bit encoding) instead of
    matching optimizer ops, so a new optimizer plugs in by implementing it:
    the memory analysis classifies the gradient and the state, and
    `train-quantize-optimizer-state` stores the state in 8 bits when the op
    can build its fused 8-bit form.
  }];
  let methods = [
    // The defaults read ODS operands named `param` and `grad` and the
    // result `new_param`, as every update here names them.
    InterfaceMethod<"The parameter before the update.",
      "::mlir::Value", "getUpdatedParam", (ins), [{}], [{
        return $_op.getParam();
      }]>,
    InterfaceMethod<"The parameter after the update.",
      "::mlir::Value", "getNewParamValue", (ins), [{}], [{
        return $_op.getNewParam();
      }]>,
    InterfaceMethod<"The gradient the update applies.",
      "::mlir::Value", "getGradient", (ins), [{}], [{
        return $_op.getGrad();
      }]>,
    InterfaceMethod<
      "The state tensors the update reads and writes, in operand order.",
      "::llvm::SmallVector<::mlir::train::OptimizerStateUse>",
      "getStateUses">,
    InterfaceMethod<
      "Builds the same update on block-wise 8-bit state: `codes` and "
      "`absmax` hold one (codes, absmax) pair per f32 state of "
      "getStateUses(), in order; returns the new op, whose results are the "
      "new parameter followed by the new pairs, or null when this update "
      "has no 8-bit form.",
      "::mlir::Operation *", "buildBlockwise8bit",
      (ins "::mlir::OpBuilder &":$builder, "::mlir::ValueRange":$codes,
           "::mlir::ValueRange":$absmax, "int64_t":$block), [{}], [{
        return nullptr;
      }]>
  ];
}

def Train_CommunicationOpInterface : OpInterface<"CommunicationOpInterface"> {
  let cppNamespace = "::mlir::train";
  let description = [{
    A collective: what one rank sends per execution, by the ring algorithm
    (Patarasuk & Yuan 2009, as NCCL runs it): a reduce-scatter or an
    all-gather moves (N - 1)/N of the full buffer through each rank, an
    all-reduce (a reduce-scatter then an all-gather) twice that, a local
    slice nothing. The memory report sums it per kind ("communication");
    the train dialect attaches this to upstream's `shard` collectives as
    external models. An op that communicates in some of its forms only (a
    train.attention passing its K/V blocks around a ring) gives an empty
    kind in the others, and is not counted there.
  }];
  let methods = [
    InterfaceMethod<"The collective's kind, as the report names it; empty "
      "when this op does not communicate.",
      "::llvm::StringRef", "getCollectiveKind">,
    InterfaceMethod<"The ranks taking part.", "int64_t", "getGroupSize">,
    InterfaceMethod<
      "Elements one rank sends per execution (as many arrive).",
      "uint64_t", "getElementsSent">,
    InterfaceMethod<
      "Bytes one rank sends per execution (as many arrive).",
      "uint64_t", "getBytesSent">
  ];
}

def Train_WorkspaceOpInterface : OpInterface<"WorkspaceOpInterface"> {
  let cppNamespace = "::mlir::train";
  let description = [{
    Arena memory an op uses while it runs beyond its operands and results (a
    ring attention's K/V blocks in flight and running sums): the memory
    analysis counts it as a temporary live at the op alone, the arena plan
    places it (`train.workspace_offset`), and the runtime lowering hands the
    kernel its offset.
  }];
  let methods = [
    InterfaceMethod<"Bytes of workspace the op needs (0: none).",
      "uint64_t", "getWorkspaceBytes">
  ];
}

#endif // TRAINMEM_DIALECT_TRAIN_IR_TRAININTERFACES_TD
