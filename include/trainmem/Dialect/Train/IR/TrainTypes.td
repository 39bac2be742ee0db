//===- TrainTypes.td - type constraints of the train dialect -*- tablegen -*-===//
//
// The dialect works on builtin ranked tensors; this file names the tensor
// kinds its ops accept so that every op states them the same way.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_DIALECT_TRAIN_IR_TRAINTYPES_TD
#define TRAINMEM_DIALECT_TRAIN_IR_TRAINTYPES_TD

include "mlir/IR/BuiltinTypes.td"
include "mlir/IR/CommonTypeConstraints.td"

// Element types of values that take part in compute: f32, bf16 and f16.
def Train_FloatElement : AnyTypeOf<[F32, BF16, F16]>;

// A ranked tensor of a compute element type.
def Train_FloatTensor : StaticShapeTensorOf<[F32, BF16, F16]>;

// Token ids and targets.
def Train_IdTensor : StaticShapeTensorOf<[I32, I64]>;

// Dropout keep-masks: one byte per element in memory.
def Train_MaskTensor : StaticShapeTensorOf<[I1]>;

// Scalars that flow between the loss, the schedule and the optimizer.
def Train_F32Scalar : 0DTensorOf<[F32]>;
def Train_I64Scalar : 0DTensorOf<[I64]>;

#endif // TRAINMEM_DIALECT_TRAIN_IR_TRAINTYPES_TD
