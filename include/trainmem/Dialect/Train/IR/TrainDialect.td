//===- TrainDialect.td - the train dialect -----------------*- tablegen -*-===//
//
// The `train` dialect expresses one step of model training at tensor level so
// that memory passes can see and rewrite what a step keeps alive.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_DIALECT_TRAIN_IR_TRAINDIALECT_TD
#define TRAINMEM_DIALECT_TRAIN_IR_TRAINDIALECT_TD

include "mlir/IR/OpBase.td"

def Train_Dialect : Dialect {
  let name = "train";
  let cppNamespace = "::mlir::train";
  let summary = "A tensor-level dialect for the memory of a training step";
  let description = [{
    The `train` dialect expresses a model's forward pass, its loss, its
    backward pass and its optimizer update as value-semantic tensor ops.
    Attention stays decomposed (QKᵀ, scale, causal softmax, dropout, ·V) so the
    s² tensors it creates stay visible to memory passes, and `train.block`
    regions name what part of a layer an op belongs to.

    Every compute op implements two interfaces: `DifferentiableOpInterface`
    (the op builds its own vector-Jacobian product) and `CostOpInterface`
    (FLOPs and bytes read and written), so new ops work with every pass.
  }];
  // The dialect's discardable attributes (on steps, their arguments and
  // results, and on ops passes mark): their names and value types. The
  // generated helpers (e.g. `TrainDialect::ZeroAttrHelper`) get and set
  // them typed; TrainAttrNames.h names them for C++ and says what each
  // means; the dialect's attribute verifiers check them.
  let discardableAttrs = (ins
    "::mlir::StringAttr":$param,
    "::mlir::StringAttr":$input,
    "::mlir::train::StateAttr":$optimizer_state,
    "::mlir::train::InitAttr":$init,
    "::mlir::train::SpaceAttr":$memory_space,
    "::mlir::UnitAttr":$loss,
    "::mlir::StringAttr":$grad,
    "::mlir::UnitAttr":$grad_norm,
    "::mlir::UnitAttr":$step,
    "::mlir::train::HessianStepAttr":$hessian_step,
    "::mlir::train::ZeroAttr":$zero,
    "::mlir::train::TensorSplitAttr":$tensor_split,
    "::mlir::IntegerAttr":$bucket,
    "::mlir::TypeAttr":$shard_of,
    "::mlir::UnitAttr":$micro_batch_sum,
    "::mlir::UnitAttr":$in_place,
    "::mlir::UnitAttr":$recompute,
    "::mlir::DictionaryAttr":$model,
    "::mlir::IntegerAttr":$arena_bytes,
    "::mlir::IntegerAttr":$offset,
    "::mlir::DenseI64ArrayAttr":$offsets,
    "::mlir::IntegerAttr":$host_arena_bytes,
    "::mlir::DenseI64ArrayAttr":$staging_offsets,
    "::mlir::DenseI64ArrayAttr":$argument_offsets,
    "::mlir::IntegerAttr":$workspace_offset,
    "::mlir::train::PipelineStageAttr":$pipeline_stage,
    "::mlir::IntegerAttr":$micro_batch,
    "::mlir::IntegerAttr":$chunk
  );
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let useDefaultAttributePrinterParser = 1;
  let useDefaultTypePrinterParser = 0;
  let extraClassDeclaration = [{
    /// Writes the text MLIR's printer gives `attr` (e.g. `9.000000e-01 :
    /// f64`), printed once per attribute and context: a step carries the
    /// same optimizer hyperparameters on every parameter's update, and
    /// printing a float (with its round-trip check) costs about 25k
    /// instructions.
    void printCachedAttribute(Attribute attr, llvm::raw_ostream &os);

  private:
    llvm::DenseMap<Attribute, std::string> printedAttributes;
    llvm::sys::SmartMutex<true> printedAttributesMutex;
  public:
  }];
}

class Train_Op<string mnemonic, list<Trait> traits = []>
    : Op<Train_Dialect, mnemonic, traits>;

#endif // TRAINMEM_DIALECT_TRAIN_IR_TRAINDIALECT_TD
