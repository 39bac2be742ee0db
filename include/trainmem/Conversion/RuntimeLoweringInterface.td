//===- RuntimeLoweringInterface.td - ops the runtime computes ------------===//
//
// How convert-train-to-runtime lowers an op: the op (through an external
// model the conversion library attaches) emits the runtime calls that
// compute it. The dialect does not know the runtime; the runtime lowering
// of a new op is one more model, with no change to the pass.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_CONVERSION_RUNTIMELOWERINGINTERFACE_TD
#define TRAINMEM_CONVERSION_RUNTIMELOWERINGINTERFACE_TD

include "mlir/IR/OpBase.td"

def RuntimeLoweringOpInterface : OpInterface<"RuntimeLoweringOpInterface"> {
  let cppNamespace = "::mlir::train";
  let description = [{
    An op that convert-train-to-runtime lowers to calls of the trainmem
    runtime (`tmrt_*`, the runtime's Kernels.def). `lowerToRuntime` emits them
    through a `RuntimeCallBuilder`, which knows where every tensor lives in
    the arena (the static memory plan), and returns failure after an error
    at the op for what the runtime cannot do (a rank beyond a kernel's, a
    strided operand a kernel needs row-major). A view that aliases its
    operand emits nothing.
  }];
  let methods = [
    InterfaceMethod<
      "Emits the runtime calls that compute this op.",
      "::mlir::LogicalResult", "lowerToRuntime",
      (ins "::mlir::train::RuntimeCallBuilder &":$builder)>
  ];
}

#endif // TRAINMEM_CONVERSION_RUNTIMELOWERINGINTERFACE_TD
