//===- Passes.td - passes of the train dialect -------------*- tablegen -*-===//

#ifndef TRAINMEM_DIALECT_TRAIN_TRANSFORMS_PASSES_TD
#define TRAINMEM_DIALECT_TRAIN_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def TrainCostReportPass : Pass<"train-cost-report", "mlir::ModuleOp"> {
  let summary = "Prints parameters, FLOPs and bytes moved of each function";
  let description = [{
    Sums the `CostOpInterface` of every op of each function, by `train.block`
    kind, and counts the function's parameters (arguments marked
    `train.param`). The IR is left unchanged.

    ```
    trainmem-model --preset gpt2-124m | trainmem-opt -train-cost-report
    ```
  }];
  let options = [
    Option<"format", "format", "std::string", /*default=*/"\"text\"",
           "Report format: text or json">,
    Option<"output", "output", "std::string", /*default=*/"\"-\"",
           "File to write the report to ('-' for stdout)">
  ];
  let statistics = [
    Statistic<"numOpsCosted", "ops-costed", "Ops whose cost was counted">
  ];
}

#endif // TRAINMEM_DIALECT_TRAIN_TRANSFORMS_PASSES_TD
