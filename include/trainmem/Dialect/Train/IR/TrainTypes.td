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

// The checks of StaticShapeTensorOf, 0DTensorOf and AnyRankedTensor (same
// predicates, same messages), made on RankedTensorType itself: upstream's
// cast every type to the ShapedType interface, a lookup per operand and
// result, which came to 2% of a pipeline's time in the verifier.
class Train_RankedTensorOf<list<Type> allowedTypes, list<Pred> preds,
                           string summary>
  : Type<And<!listconcat(
             [CPred<"::llvm::isa<::mlir::RankedTensorType>($_self)">],
             preds,
             [SubstLeaves<"$_self",
                 "::llvm::cast<::mlir::RankedTensorType>($_self)"
                 ".getElementType()",
                 AnyTypeOf<allowedTypes>.predicate>])>,
         summary # " of " # AnyTypeOf<allowedTypes>.summary # " values",
         "::mlir::RankedTensorType">;

class Train_StaticTensorOf<list<Type> allowedTypes>
  : Train_RankedTensorOf<allowedTypes,
      [CPred<"::llvm::cast<::mlir::RankedTensorType>($_self)"
             ".hasStaticShape()">],
      "statically shaped tensor">;

class Train_0DTensorOf<list<Type> allowedTypes>
  : Train_RankedTensorOf<allowedTypes,
      [CPred<"::llvm::cast<::mlir::RankedTensorType>($_self).getRank() == 0">],
      "0D tensor">;

def Train_AnyRankedTensor
  : Type<CPred<"::llvm::isa<::mlir::RankedTensorType>($_self)">,
         "ranked tensor of any type values", "::mlir::RankedTensorType">;

// Element types of values that take part in compute: f32, bf16 and f16.
def Train_FloatElement : AnyTypeOf<[F32, BF16, F16]>;

// A ranked tensor of a compute element type.
def Train_FloatTensor : Train_StaticTensorOf<[F32, BF16, F16]>;

// Token ids and targets.
def Train_IdTensor : Train_StaticTensorOf<[I32, I64]>;

// What train.slice copies: compute values, and i32 ids (a model's own
// loss shifts its labels, labels[..., 1:]; the runtime's ids are i32).
def Train_SliceableTensor : Train_StaticTensorOf<[F32, BF16, F16, I32]>;

// Dropout keep-masks: one byte per element in memory.
def Train_MaskTensor : Train_StaticTensorOf<[I1]>;

// Scalars that flow between the loss, the schedule and the optimizer.
def Train_F32Scalar : Train_0DTensorOf<[F32]>;
def Train_I64Scalar : Train_0DTensorOf<[I64]>;

#endif // TRAINMEM_DIALECT_TRAIN_IR_TRAINTYPES_TD
