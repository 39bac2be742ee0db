//===- TrainAttrs.td - attributes of the train dialect -----*- tablegen -*-===//

#ifndef TRAINMEM_DIALECT_TRAIN_IR_TRAINATTRS_TD
#define TRAINMEM_DIALECT_TRAIN_IR_TRAINATTRS_TD

include "mlir/IR/EnumAttr.td"

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

#endif // TRAINMEM_DIALECT_TRAIN_IR_TRAINATTRS_TD
