// RUN: trainmem-opt %s -train-materialize-layouts | FileCheck %s
// RUN: trainmem-opt %s -train-materialize-layouts -train-materialize-layouts | FileCheck %s

// A transpose is a view: the matmul reads it through its strides; the add
// and the layer norm read row-major, so each gets a row-major copy (a
// train.reshape to its own type) of the view. A row-major value is left
// as it is, and a second run finds nothing to copy.
// CHECK-LABEL: func.func @views
// CHECK:      %[[T:.*]] = train.transpose %arg0
// CHECK-NEXT: %[[M:.*]] = train.matmul %[[T]], %arg1
// CHECK-NEXT: %[[C:.*]] = train.reshape %[[T]] : tensor<3x2xf32> -> tensor<3x2xf32>
// CHECK-NEXT: %[[A:.*]] = train.add %arg2, %[[C]]
// CHECK-NEXT: %[[C2:.*]] = train.reshape %[[T]] : tensor<3x2xf32> -> tensor<3x2xf32>
// CHECK-NEXT: train.layer_norm %[[C2]]
// CHECK-NOT:  train.reshape
func.func @views(%x: tensor<2x3xf32>, %w: tensor<2x4xf32>,
                 %r: tensor<3x2xf32>, %g: tensor<2xf32>, %b: tensor<2xf32>)
    -> (tensor<3x4xf32>, tensor<3x2xf32>, tensor<3x2xf32>, tensor<3x2xf32>) {
  %t = train.transpose %x {permutation = array<i64: 1, 0>} : tensor<2x3xf32> -> tensor<3x2xf32>
  %m = train.matmul %t, %w : tensor<3x2xf32>, tensor<2x4xf32> -> tensor<3x4xf32>
  %a = train.add %r, %t : tensor<3x2xf32>
  %n = train.layer_norm %t, %g, %b {epsilon = 1.0e-05 : f64} : tensor<3x2xf32>, tensor<2xf32>, tensor<2xf32>
  %s = train.add %r, %a : tensor<3x2xf32>
  return %m, %a, %n, %s : tensor<3x4xf32>, tensor<3x2xf32>, tensor<3x2xf32>, tensor<3x2xf32>
}
