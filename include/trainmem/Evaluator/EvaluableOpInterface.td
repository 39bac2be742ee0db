//===- EvaluableOpInterface.td - ops the reference evaluator runs --------===//
//
// How the reference evaluator runs an op: the op computes its results from
// its operands' host tensors. The train ops get it as external models that
// the evaluator library attaches (registerEvaluatorExternalModels); an op of
// another dialect implements it (or gets its own model) and runs with no
// change to the evaluator.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_EVALUATOR_EVALUABLEOPINTERFACE_TD
#define TRAINMEM_EVALUATOR_EVALUABLEOPINTERFACE_TD

include "mlir/IR/OpBase.td"

def EvaluableOpInterface : OpInterface<"EvaluableOpInterface"> {
  let cppNamespace = "::mlir::train";
  let description = [{
    An op the reference evaluator (`trainmem/Evaluator/Evaluator.h`) runs:
    `evaluate` reads its operands' values from the `EvaluationState` and
    sets every result, or returns failure after an error at the op.
  }];
  let methods = [
    InterfaceMethod<
      "Computes the op's results from its operands' values.",
      "::mlir::LogicalResult", "evaluate",
      (ins "::mlir::train::EvaluationState &":$state)>
  ];
}

#endif // TRAINMEM_EVALUATOR_EVALUABLEOPINTERFACE_TD
