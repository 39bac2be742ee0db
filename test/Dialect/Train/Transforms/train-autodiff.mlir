// RUN: trainmem-opt %s -split-input-file -train-autodiff | FileCheck %s
// RUN: trainmem-opt %s -split-input-file -train-autodiff="optimizer=sgd momentum=0.9 clip-norm=1.0 total-steps=100 warmup-steps=10" | FileCheck %s --check-prefix=SGD
// RUN: trainmem-opt %s -split-input-file -train-autodiff="optimizer=none" | FileCheck %s --check-prefix=GRADS

// Structure of a step: forward blocks export what their backward reads, one
// backward block per forward block in reverse order, then the optimizer.

// CHECK-LABEL: func.func @train_step(
// CHECK-SAME:    %[[X:.*]]: tensor<2x4xf32> {train.input = "x"}, %[[T:.*]]: tensor<2xi32> {train.input = "targets"}, %[[W:.*]]: tensor<4x3xf32> {train.param = "w"},
// CHECK-SAME:    %[[STEP:.*]]: tensor<i64> {train.input = "step"}, %[[M:.*]]: tensor<4x3xf32> {train.optimizer_state = #train.state<"w", m>}, %[[V:.*]]: tensor<4x3xf32> {train.optimizer_state = #train.state<"w", v>})
// CHECK-SAME:    -> (tensor<f32> {train.loss}, tensor<4x3xf32> {train.param = "w"}, tensor<4x3xf32> {train.optimizer_state = #train.state<"w", m>}, tensor<4x3xf32> {train.optimizer_state = #train.state<"w", v>})
// The softmax keeps its output for the backward: the block yields it.
// CHECK:       %[[P:.*]] = train.block attention layer 0 -> tensor<2x3xf32> {
// CHECK:         %[[MM:.*]] = train.matmul %[[X]], %[[W]]
// CHECK:         %[[SM:.*]] = train.softmax %[[MM]]
// CHECK:         train.yield %[[SM]]
// CHECK:       %[[HEAD:.*]]:2 = train.block head -> tensor<f32>, tensor<i64>
// CHECK:       %[[SEED:.*]] = arith.constant dense<1.000000e+00> : tensor<f32>
// CHECK:       %[[DP:.*]] = train.block head backward -> tensor<2x3xf32> {
// CHECK:         %[[DSUM:.*]] = train.mean_loss %[[SEED]], %[[HEAD]]#1
// CHECK:         train.cross_entropy_grad %[[DSUM]], %[[P]], %[[T]]
// CHECK:       %[[DW:.*]] = train.block attention layer 0 backward -> tensor<4x3xf32> {
// CHECK:         %[[DS:.*]] = train.softmax_grad %[[DP]], %[[P]]
// The input x is data: no gradient is computed for it.
// CHECK-NOT:     train.matmul %[[DS]], %[[W]]
// CHECK:         %[[G:.*]] = train.matmul %[[X]], %[[DS]] {transpose_lhs}
// CHECK:         train.yield %[[G]]
// CHECK:       %[[NEW:.*]]:3 = train.block optimizer -> tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32> {
// CHECK:         %[[LR:.*]] = arith.constant dense<3.000000e-04> : tensor<f32>
// CHECK:         train.adamw %[[W]], %[[DW]], %[[M]], %[[V]], %[[LR]], %[[STEP]]
// CHECK:       return %[[HEAD]]#0, %[[NEW]]#0, %[[NEW]]#1, %[[NEW]]#2

// SGD-LABEL: func.func @train_step(
// SGD-SAME:    %{{.*}}: tensor<4x3xf32> {train.optimizer_state = #train.state<"w", momentum>})
// SGD-SAME:    -> (tensor<f32> {train.loss}, tensor<4x3xf32> {train.param = "w"}, tensor<4x3xf32> {train.optimizer_state = #train.state<"w", momentum>}, tensor<f32> {train.grad_norm})
// SGD:         train.block optimizer
// SGD:           %[[LR:.*]] = train.lr_schedule %{{.*}} {min_lr = 0.000000e+00 : f64, peak_lr = 3.000000e-04 : f64, total_steps = 100 : i64, warmup_steps = 10 : i64}
// SGD:           %[[CLIPPED:.*]], %[[NORM:.*]] = train.clip_grad_norm %{{.*}} {max_norm = 1.000000e+00 : f64}
// SGD:           train.sgd %{{.*}}, %[[CLIPPED]], %[[LR]], %{{.*}} {momentum = 9.000000e-01 : f64

// GRADS-LABEL: func.func @train_step(
// GRADS-SAME:    -> (tensor<f32> {train.loss}, tensor<4x3xf32> {train.grad = "w"})
// GRADS-NOT:   train.adamw

func.func @forward(%x: tensor<2x4xf32> {train.input = "x"},
                   %t: tensor<2xi32> {train.input = "targets"},
                   %w: tensor<4x3xf32> {train.param = "w"}) -> tensor<f32> {
  %s = train.block attention layer 0 -> tensor<2x3xf32> {
    %m = train.matmul %x, %w : tensor<2x4xf32>, tensor<4x3xf32> -> tensor<2x3xf32>
    %p = train.softmax %m : tensor<2x3xf32>
    train.yield %p : tensor<2x3xf32>
  }
  %loss = train.block head -> tensor<f32> {
    %sum, %count = train.cross_entropy %s, %t {ignore_index = -100 : i64} : tensor<2x3xf32>, tensor<2xi32> -> tensor<f32>, tensor<i64>
    %l = train.mean_loss %sum, %count : tensor<f32>, tensor<i64>
    train.yield %l : tensor<f32>
  }
  return %loss : tensor<f32>
}

// -----

// Mixed precision: a bf16 parameter gets an f32 master copy and f32 Adam
// state; AdamW updates the master and the bf16 weight is refreshed from it.
// A parameter used twice (a tied table) gets its two gradients summed.

// CHECK-LABEL: func.func @train_step(
// CHECK-SAME:    %[[E:[^:]*]]: tensor<8x4xbf16> {train.param = "wte"}
// CHECK-SAME:    %[[MASTER:[^:]*]]: tensor<8x4xf32> {train.optimizer_state = #train.state<"wte", master>}, %[[M:[^:]*]]: tensor<8x4xf32> {train.optimizer_state = #train.state<"wte", m>}, %[[V:[^:]*]]: tensor<8x4xf32> {train.optimizer_state = #train.state<"wte", v>})
// CHECK-SAME:    -> (tensor<f32> {train.loss}, tensor<8x4xbf16> {train.param = "wte"}, tensor<8x4xf32> {train.optimizer_state = #train.state<"wte", master>}, tensor<8x4xf32> {train.optimizer_state = #train.state<"wte", m>}, tensor<8x4xf32> {train.optimizer_state = #train.state<"wte", v>})
// CHECK:       %[[HB:.*]]:2 = train.block head backward -> tensor<2x3x4xbf16>, tensor<8x4xbf16>
// CHECK:       train.block embedding backward -> tensor<8x4xbf16> {
// CHECK:         %[[EG:.*]] = train.embedding_grad %[[HB]]#0
// CHECK:         %[[SUM:.*]] = train.add %[[HB]]#1, %[[EG]] : tensor<8x4xbf16>
// CHECK:         train.yield %[[SUM]]
// CHECK:       %[[OPT:.*]]:4 = train.block optimizer
// CHECK:         %[[P:.*]], %{{.*}}, %{{.*}} = train.adamw %[[MASTER]], %{{.*}}, %[[M]], %[[V]]
// CHECK:         %[[NEWW:.*]] = train.cast %[[P]] : tensor<8x4xf32> -> tensor<8x4xbf16>
// CHECK:         train.yield %[[P]], %{{.*}}, %{{.*}}, %[[NEWW]]
// CHECK:       return %{{.*}}, %[[OPT]]#3, %[[OPT]]#0, %[[OPT]]#1, %[[OPT]]#2

func.func @forward(%ids: tensor<2x3xi32> {train.input = "tokens"},
                   %t: tensor<2x3xi32> {train.input = "targets"},
                   %wte: tensor<8x4xbf16> {train.param = "wte"}) -> tensor<f32> {
  %x = train.block embedding -> tensor<2x3x4xbf16> {
    %e = train.embedding %wte, %ids : tensor<8x4xbf16>, tensor<2x3xi32> -> tensor<2x3x4xbf16>
    train.yield %e : tensor<2x3x4xbf16>
  }
  %loss = train.block head -> tensor<f32> {
    %logits = train.matmul %x, %wte {transpose_rhs} : tensor<2x3x4xbf16>, tensor<8x4xbf16> -> tensor<2x3x8xbf16>
    %sum, %count = train.cross_entropy %logits, %t {ignore_index = -100 : i64} : tensor<2x3x8xbf16>, tensor<2x3xi32> -> tensor<f32>, tensor<i64>
    %l = train.mean_loss %sum, %count : tensor<f32>, tensor<i64>
    train.yield %l : tensor<f32>
  }
  return %loss : tensor<f32>
}
