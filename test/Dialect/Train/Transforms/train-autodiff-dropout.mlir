// RUN: trainmem-opt %s -train-autodiff | FileCheck %s
// RUN: trainmem-opt %s -train-autodiff="regenerate-dropout-masks=true" | FileCheck %s --check-prefix=REGEN

// Dropout keeps its mask, not its input; with regenerate-dropout-masks the
// backward draws the mask again from the same RNG stream instead.

// The step counter keys the masks, so every step draws fresh ones.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME:    %[[STEP:[^:]*]]: tensor<i64> {train.input = "step"}
// CHECK:       %[[FWD:.*]]:2 = train.block mlp layer 0 -> tensor<2x4xf32>, tensor<2x4xi1>
// CHECK:         %[[Y:.*]], %[[MASK:.*]] = train.dropout %{{.*}} key(%[[STEP]] : tensor<i64>)
// CHECK:         train.yield %[[Y]], %[[MASK]]
// CHECK:       train.block mlp layer 0 backward
// CHECK:         train.dropout_grad %{{.*}}, %[[FWD]]#1 {rate = 1.000000e-01 : f64}

// REGEN-LABEL: func.func @train_step
// REGEN-SAME:    %[[STEP:[^:]*]]: tensor<i64> {train.input = "step"}
// REGEN:       train.block mlp layer 0 -> tensor<2x4xf32> {
// REGEN:       train.block mlp layer 0 backward
// REGEN:         %[[MASK:.*]] = train.dropout_mask key(%[[STEP]] : tensor<i64>) {offset = 5 : i64, rate = 1.000000e-01 : f64, seed = 3 : i64} : tensor<2x4xi1>
// REGEN:         train.dropout_grad %{{.*}}, %[[MASK]] {rate = 1.000000e-01 : f64}

func.func @forward(%x: tensor<2x4xf32> {train.input = "x"},
                   %t: tensor<2xi32> {train.input = "targets"},
                   %w: tensor<4x4xf32> {train.param = "w"}) -> tensor<f32> {
  %h = train.block mlp layer 0 -> tensor<2x4xf32> {
    %m = train.matmul %x, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
    %d, %mask = train.dropout %m {rate = 0.1 : f64, seed = 3 : i64, offset = 5 : i64} : tensor<2x4xf32> -> tensor<2x4xi1>
    train.yield %d : tensor<2x4xf32>
  }
  %loss = train.block head -> tensor<f32> {
    %sum, %count = train.cross_entropy %h, %t {ignore_index = -100 : i64} : tensor<2x4xf32>, tensor<2xi32> -> tensor<f32>, tensor<i64>
    %l = train.mean_loss %sum, %count : tensor<f32>, tensor<i64>
    train.yield %l : tensor<f32>
  }
  return %loss : tensor<f32>
}
