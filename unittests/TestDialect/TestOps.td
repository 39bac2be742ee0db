//===- TestOps.td - an op defined only by the tests --------*- tablegen -*-===//
//
// A dialect that no pass of trainmem knows: its op implements the train
// dialect's interfaces, and the tests show that autodiff, the memory
// analysis and report, and remat handle it through those interfaces alone.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_TEST_OPS_TD
#define TRAINMEM_TEST_OPS_TD

include "mlir/IR/OpBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "trainmem/Dialect/Train/IR/TrainInterfaces.td"

def Test_Dialect : Dialect {
  let name = "trainmem_test";
  let cppNamespace = "::trainmem_test";
}

// y = x², element-wise. Its vector-Jacobian product 2·x·dy reads the input,
// so the forward must keep (or recompute) x for the backward.
def Test_SquareOp : Op<Test_Dialect, "square", [Pure,
    SameOperandsAndResultType,
    DeclareOpInterfaceMethods<Train_DifferentiableOpInterface>,
    DeclareOpInterfaceMethods<Train_CostOpInterface>]> {
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

#endif // TRAINMEM_TEST_OPS_TD
