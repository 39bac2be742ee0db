// A step whose shapes do not match is refused before any rewrite, with the
// verifier's diagnostic at the op.
// RUN: not trainmem-opt %s -train-autodiff 2>&1 | FileCheck %s

// CHECK: train-autodiff-shape-mismatch.mlir:[[@LINE+3]]:8: error: 'train.matmul' op contraction dimensions differ (4 vs 3)
func.func @forward(%x: tensor<2x4xf32> {train.input = "x"}, %w: tensor<3x3xf32> {train.param = "w"},
                   %t: tensor<2xi32> {train.input = "targets"}) -> tensor<f32> {
  %m = train.matmul %x, %w : tensor<2x4xf32>, tensor<3x3xf32> -> tensor<2x3xf32>
  %sum, %count = train.cross_entropy %m, %t {ignore_index = -100 : i64} : tensor<2x3xf32>, tensor<2xi32> -> tensor<f32>, tensor<i64>
  %l = train.mean_loss %sum, %count : tensor<f32>, tensor<i64>
  return %l : tensor<f32>
}
