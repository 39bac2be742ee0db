// RUN: trainmem-opt %s -split-input-file -train-fuse-elementwise | FileCheck %s

// gelu of a bias_add used by it alone: one train.bias_gelu of the
// bias_add's operands.
// CHECK-LABEL: func.func @fuses
// CHECK-SAME:    (%[[X:.*]]: tensor<2x4x8xf32>, %[[B:.*]]: tensor<8xf32>)
// CHECK-NEXT:    %[[Y:.*]] = train.bias_gelu %[[X]], %[[B]] : tensor<2x4x8xf32>, tensor<8xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @fuses(%x: tensor<2x4x8xf32>, %b: tensor<8xf32>) -> tensor<2x4x8xf32> {
  %h = train.bias_add %x, %b : tensor<2x4x8xf32>, tensor<8xf32>
  %y = train.gelu %h : tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// The sum is read elsewhere too: it must exist anyway, nothing fuses.
// CHECK-LABEL: func.func @sum_read_elsewhere
// CHECK:         train.bias_add
// CHECK-NEXT:    train.gelu
// CHECK-NOT:     train.bias_gelu
func.func @sum_read_elsewhere(%x: tensor<4x8xbf16>, %b: tensor<8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>) {
  %h = train.bias_add %x, %b : tensor<4x8xbf16>, tensor<8xbf16>
  %y = train.gelu %h : tensor<4x8xbf16>
  return %y, %h : tensor<4x8xbf16>, tensor<4x8xbf16>
}

// -----

// A gelu of something else stays; chains inside regions fuse (a pattern,
// not a walk of the function's top level).
// CHECK-LABEL: func.func @in_a_block
// CHECK:         train.gelu %{{.*}} : tensor<4x8xf32>
// CHECK:         train.block mlp layer 0
// CHECK-NEXT:      train.bias_gelu
func.func @in_a_block(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %g = train.gelu %x : tensor<4x8xf32>
  %r = train.block mlp layer 0 -> tensor<4x8xf32> {
    %h = train.bias_add %x, %b : tensor<4x8xf32>, tensor<8xf32>
    %y = train.gelu %h : tensor<4x8xf32>
    train.yield %y : tensor<4x8xf32>
  }
  return %g, %r : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// train.bias_gelu is the tanh GELU's: an exact GELU stays apart.
// CHECK-LABEL: func.func @exact
// CHECK:         train.bias_add
// CHECK-NEXT:    train.gelu %{{.*}} {exact}
// CHECK-NOT:     train.bias_gelu
func.func @exact(%x: tensor<2x4x8xf32>, %b: tensor<8xf32>) -> tensor<2x4x8xf32> {
  %h = train.bias_add %x, %b : tensor<2x4x8xf32>, tensor<8xf32>
  %y = train.gelu %h {exact} : tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}
