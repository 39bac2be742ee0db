// RUN: trainmem-opt %s | trainmem-opt | FileCheck %s
// RUN: trainmem-opt %s --mlir-print-op-generic | trainmem-opt | FileCheck %s

// CHECK-LABEL: func.func @forward_ops
func.func @forward_ops(%table: tensor<16x8xbf16>, %ids: tensor<2x4xi32>,
                       %x: tensor<2x4x8xbf16>, %w: tensor<8x8xbf16>,
                       %g: tensor<8xbf16>, %b: tensor<8xbf16>) {
  // CHECK: %[[E:.*]] = train.embedding %{{.*}}, %{{.*}} : tensor<16x8xbf16>, tensor<2x4xi32> -> tensor<2x4x8xbf16>
  %e = train.embedding %table, %ids : tensor<16x8xbf16>, tensor<2x4xi32> -> tensor<2x4x8xbf16>
  // CHECK: train.iota : tensor<4xi64>
  %pos = train.iota : tensor<4xi64>
  // CHECK: train.matmul %{{.*}}, %{{.*}} : tensor<2x4x8xbf16>, tensor<8x8xbf16> -> tensor<2x4x8xbf16>
  %m = train.matmul %x, %w : tensor<2x4x8xbf16>, tensor<8x8xbf16> -> tensor<2x4x8xbf16>
  // CHECK: train.matmul %{{.*}}, %{{.*}} {transpose_lhs, transpose_rhs} : tensor<8x8xbf16>, tensor<8x8xbf16> -> tensor<8x8xbf16>
  %mt = train.matmul %w, %w {transpose_lhs, transpose_rhs} : tensor<8x8xbf16>, tensor<8x8xbf16> -> tensor<8x8xbf16>
  // CHECK: train.add %[[E]], %{{.*}} : tensor<2x4x8xbf16>
  %a = train.add %e, %m : tensor<2x4x8xbf16>
  // CHECK: train.mul
  %p = train.mul %e, %m : tensor<2x4x8xbf16>
  // CHECK: train.scale %{{.*}} {factor = 1.250000e-01 : f64} : tensor<2x4x8xbf16>
  %s = train.scale %a {factor = 0.125 : f64} : tensor<2x4x8xbf16>
  // CHECK: train.bias_add %{{.*}}, %{{.*}} : tensor<2x4x8xbf16>, tensor<8xbf16>
  %ba = train.bias_add %s, %b : tensor<2x4x8xbf16>, tensor<8xbf16>
  // CHECK: train.layer_norm %{{.*}}, %{{.*}}, %{{.*}} {epsilon = 1.000000e-05 : f64} : tensor<2x4x8xbf16>, tensor<8xbf16>, tensor<8xbf16>
  %ln = train.layer_norm %ba, %g, %b {epsilon = 1.0e-05 : f64} : tensor<2x4x8xbf16>, tensor<8xbf16>, tensor<8xbf16>
  // CHECK: train.rms_norm %{{.*}}, %{{.*}} {epsilon = 1.000000e-05 : f64} : tensor<2x4x8xbf16>, tensor<8xbf16>
  %rn = train.rms_norm %ln, %g {epsilon = 1.0e-05 : f64} : tensor<2x4x8xbf16>, tensor<8xbf16>
  // CHECK: train.rms_norm %{{.*}}, %{{.*}} {epsilon = {{.*}} : f64, gain_offset = 1.000000e+00 : f64} : tensor<2x4x8xbf16>, tensor<8xbf16>
  %gemma = train.rms_norm %ln, %g {epsilon = 1.0e-06 : f64, gain_offset = 1.0 : f64} : tensor<2x4x8xbf16>, tensor<8xbf16>
  // CHECK: train.gelu %{{.*}} : tensor<2x4x8xbf16>
  %ge = train.gelu %rn : tensor<2x4x8xbf16>
  // CHECK: train.silu %{{.*}} : tensor<2x4x8xbf16>
  %si = train.silu %ge : tensor<2x4x8xbf16>
  // CHECK: %[[H:.*]] = train.reshape %{{.*}} : tensor<2x4x8xbf16> -> tensor<2x4x2x4xbf16>
  %h = train.reshape %si : tensor<2x4x8xbf16> -> tensor<2x4x2x4xbf16>
  // CHECK: train.transpose %[[H]] {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x4x2x4xbf16> -> tensor<2x2x4x4xbf16>
  %t = train.transpose %h {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x4x2x4xbf16> -> tensor<2x2x4x4xbf16>
  // CHECK: train.rope %{{.*}} {theta = 1.000000e+04 : f64} : tensor<2x2x4x4xbf16>
  %r = train.rope %t {theta = 10000.0 : f64} : tensor<2x2x4x4xbf16>
  // CHECK: train.rope %{{.*}} {inverse, theta = 1.000000e+04 : f64} : tensor<2x2x4x4xbf16>
  %ri = train.rope %r {theta = 10000.0 : f64, inverse} : tensor<2x2x4x4xbf16>
  // CHECK: train.softmax %{{.*}} {causal} : tensor<2x2x4x4xbf16>
  %sm = train.softmax %ri {causal} : tensor<2x2x4x4xbf16>
  // CHECK: train.softmax %{{.*}} : tensor<2x4x8xbf16>
  %sm2 = train.softmax %si : tensor<2x4x8xbf16>
  // CHECK: train.softmax %{{.*}} {alibi_slopes = array<f64: 2.500000e-01, 6.250000e-02>, causal} : tensor<2x2x4x4xbf16>
  %sm3 = train.softmax %ri {causal, alibi_slopes = array<f64: 0.25, 0.0625>} : tensor<2x2x4x4xbf16>
  // CHECK: %{{.*}}, %[[MASK:.*]] = train.dropout %{{.*}} {offset = 3 : i64, rate = 1.000000e-01 : f64, seed = 7 : i64} : tensor<2x2x4x4xbf16> -> tensor<2x2x4x4xi1>
  %d, %mask = train.dropout %sm {rate = 0.1 : f64, seed = 7 : i64, offset = 3 : i64} : tensor<2x2x4x4xbf16> -> tensor<2x2x4x4xi1>
  return
}

// CHECK-LABEL: func.func @loss_ops
func.func @loss_ops(%logits: tensor<2x4x16xf32>, %targets: tensor<2x4xi64>) -> tensor<f32> {
  // CHECK: %[[SUM:.*]], %[[COUNT:.*]] = train.cross_entropy %{{.*}}, %{{.*}} {ignore_index = -100 : i64} : tensor<2x4x16xf32>, tensor<2x4xi64> -> tensor<f32>, tensor<i64>
  %sum, %count = train.cross_entropy %logits, %targets {ignore_index = -100 : i64} : tensor<2x4x16xf32>, tensor<2x4xi64> -> tensor<f32>, tensor<i64>
  // CHECK: train.mean_loss %[[SUM]], %[[COUNT]] : tensor<f32>, tensor<i64>
  %loss = train.mean_loss %sum, %count : tensor<f32>, tensor<i64>
  return %loss : tensor<f32>
}

// CHECK-LABEL: func.func @backward_ops
func.func @backward_ops(%dy: tensor<2x4x8xf32>, %x: tensor<2x4x8xf32>,
                        %g: tensor<8xf32>, %ids: tensor<2x4xi32>,
                        %mask: tensor<2x4x8xi1>, %dl: tensor<f32>,
                        %targets: tensor<2x4xi32>) {
  // CHECK: train.embedding_grad %{{.*}}, %{{.*}} : tensor<2x4x8xf32>, tensor<2x4xi32> -> tensor<16x8xf32>
  %0 = train.embedding_grad %dy, %ids : tensor<2x4x8xf32>, tensor<2x4xi32> -> tensor<16x8xf32>
  // CHECK: train.sum_to %{{.*}} : tensor<2x4x8xf32> -> tensor<8xf32>
  %1 = train.sum_to %dy : tensor<2x4x8xf32> -> tensor<8xf32>
  // CHECK: train.layer_norm_grad %{{.*}}, %{{.*}}, %{{.*}} {epsilon = 1.000000e-05 : f64} : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8xf32> -> tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
  %2:3 = train.layer_norm_grad %dy, %x, %g {epsilon = 1.0e-05 : f64} : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8xf32> -> tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
  // CHECK: train.rms_norm_grad %{{.*}}, %{{.*}}, %{{.*}} {epsilon = 1.000000e-05 : f64} : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8xf32> -> tensor<2x4x8xf32>, tensor<8xf32>
  %3:2 = train.rms_norm_grad %dy, %x, %g {epsilon = 1.0e-05 : f64} : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8xf32> -> tensor<2x4x8xf32>, tensor<8xf32>
  // CHECK: train.gelu_grad %{{.*}}, %{{.*}} : tensor<2x4x8xf32>
  %4 = train.gelu_grad %dy, %x : tensor<2x4x8xf32>
  // CHECK: train.silu_grad %{{.*}}, %{{.*}} : tensor<2x4x8xf32>
  %5 = train.silu_grad %dy, %x : tensor<2x4x8xf32>
  // CHECK: train.softmax_grad %{{.*}}, %{{.*}} : tensor<2x4x8xf32>
  %6 = train.softmax_grad %dy, %x : tensor<2x4x8xf32>
  // CHECK: train.dropout_grad %{{.*}}, %{{.*}} {rate = 1.000000e-01 : f64} : tensor<2x4x8xf32>, tensor<2x4x8xi1>
  %7 = train.dropout_grad %dy, %mask {rate = 0.1 : f64} : tensor<2x4x8xf32>, tensor<2x4x8xi1>
  // CHECK: train.cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}} {ignore_index = -100 : i64} : tensor<f32>, tensor<2x4x8xf32>, tensor<2x4xi32> -> tensor<2x4x8xf32>
  %8 = train.cross_entropy_grad %dl, %x, %targets {ignore_index = -100 : i64} : tensor<f32>, tensor<2x4x8xf32>, tensor<2x4xi32> -> tensor<2x4x8xf32>
  return
}

// CHECK-LABEL: func.func @structure
func.func @structure(%x: tensor<4x8xf16>) -> tensor<4x8xf16> {
  // CHECK: %[[A:.*]] = train.block attention layer 0 -> tensor<4x8xf16> {
  // CHECK:   train.yield %{{.*}} : tensor<4x8xf16>
  // CHECK: }
  %0 = train.block attention layer 0 -> tensor<4x8xf16> {
    %1 = train.gelu %x : tensor<4x8xf16>
    train.yield %1 : tensor<4x8xf16>
  }
  // CHECK: train.block mlp layer 0 -> tensor<4x8xf16>
  %2 = train.block mlp layer 0 -> tensor<4x8xf16> {
    train.yield %0 : tensor<4x8xf16>
  }
  // CHECK: train.block embedding {
  train.block embedding {
    train.yield
  }
  // CHECK: train.block head -> tensor<4x8xf16>
  %3 = train.block head -> tensor<4x8xf16> {
    train.yield %2 : tensor<4x8xf16>
  }
  // CHECK: train.block mlp layer 0 backward -> tensor<4x8xf16>
  %4 = train.block mlp layer 0 backward -> tensor<4x8xf16> {
    train.yield %3 : tensor<4x8xf16>
  }
  // CHECK: train.block optimizer backward {
  train.block optimizer backward {
    train.yield
  }
  return %4 : tensor<4x8xf16>
}

// CHECK-LABEL: func.func @precision_and_masks
func.func @precision_and_masks(%master: tensor<4x8xf32>) -> (tensor<4x8xbf16>, tensor<4x8xi1>) {
  // CHECK: train.cast %{{.*}} : tensor<4x8xf32> -> tensor<4x8xbf16>
  %w = train.cast %master : tensor<4x8xf32> -> tensor<4x8xbf16>
  // CHECK: train.dropout_mask {offset = 2 : i64, rate = 1.000000e-01 : f64, seed = 1 : i64} : tensor<4x8xi1>
  %m = train.dropout_mask {rate = 0.1 : f64, seed = 1 : i64, offset = 2 : i64} : tensor<4x8xi1>
  return %w, %m : tensor<4x8xbf16>, tensor<4x8xi1>
}

// CHECK-LABEL: func.func @remat
func.func @remat(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK: %[[R:.*]]:2 = train.remat -> tensor<4x8xf32>, tensor<4x8xf32> {
  // CHECK:   train.yield %{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<4x8xf32>
  // CHECK: }
  %r:2 = train.remat -> tensor<4x8xf32>, tensor<4x8xf32> {
    %g = train.gelu %x : tensor<4x8xf32>
    %s = train.softmax %g : tensor<4x8xf32>
    train.yield %s, %g : tensor<4x8xf32>, tensor<4x8xf32>
  }
  // CHECK: train.remat {
  train.remat {
    train.yield
  }
  return %r#0 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @accumulation
func.func @accumulation(%tokens: tensor<4x8xi32>, %targets: tensor<4x8xi32>, %table: tensor<16x2xbf16>) -> (tensor<f32>, tensor<16x2xf32>) {
  // CHECK: %[[N:.*]] = train.count_valid %{{.*}} {ignore_index = -100 : i64} : tensor<4x8xi32> -> tensor<i64>
  %n = train.count_valid %targets {ignore_index = -100 : i64} : tensor<4x8xi32> -> tensor<i64>
  // CHECK: train.accumulate %{{.*}}, %{{.*}} steps 2 padding [0, -100] : (tensor<4x8xi32>, tensor<4x8xi32>) -> (tensor<f32>, tensor<16x2xf32>) {
  // CHECK: ^bb0(%{{.*}}: tensor<2x8xi32>, %{{.*}}: tensor<2x8xi32>):
  // CHECK:   train.mean_loss %{{.*}}, %[[N]] {scale = 5.000000e-01 : f64} : tensor<f32>, tensor<i64>
  // CHECK:   train.yield %{{.*}}, %{{.*}} : tensor<f32>, tensor<16x2xbf16>
  %sums:2 = train.accumulate %tokens, %targets steps 2 padding [0, -100] : (tensor<4x8xi32>, tensor<4x8xi32>) -> (tensor<f32>, tensor<16x2xf32>) {
  ^bb0(%t: tensor<2x8xi32>, %y: tensor<2x8xi32>):
    %e = train.embedding %table, %t : tensor<16x2xbf16>, tensor<2x8xi32> -> tensor<2x8x2xbf16>
    %g = train.embedding_grad %e, %y : tensor<2x8x2xbf16>, tensor<2x8xi32> -> tensor<16x2xbf16>
    %s, %c = train.cross_entropy %e, %y {ignore_index = -100 : i64} : tensor<2x8x2xbf16>, tensor<2x8xi32> -> tensor<f32>, tensor<i64>
    %l = train.mean_loss %s, %n {scale = 0.5 : f64} : tensor<f32>, tensor<i64>
    train.yield %l, %g : tensor<f32>, tensor<16x2xbf16>
  }
  // CHECK: train.accumulate %{{.*}} steps 3 padding [0] weighted : (tensor<4x8xi32>) -> tensor<f32> {
  // CHECK: ^bb0(%{{.*}}: tensor<2x8xi32>, %[[W:.*]]: tensor<f32>):
  // CHECK:   train.mean_loss %{{.*}}, %[[N]] weighted by %[[W]] : tensor<f32> : tensor<f32>, tensor<i64>
  %weighted = train.accumulate %tokens steps 3 padding [0] weighted : (tensor<4x8xi32>) -> tensor<f32> {
  ^bb0(%t: tensor<2x8xi32>, %w: tensor<f32>):
    %e = train.embedding %table, %t : tensor<16x2xbf16>, tensor<2x8xi32> -> tensor<2x8x2xbf16>
    %s, %c = train.cross_entropy %e, %t {ignore_index = -100 : i64} : tensor<2x8x2xbf16>, tensor<2x8xi32> -> tensor<f32>, tensor<i64>
    %l = train.mean_loss %s, %n weighted by %w : tensor<f32> : tensor<f32>, tensor<i64>
    train.yield %l : tensor<f32>
  }
  // CHECK: train.slice_rows %{{.*}} {offset = 3 : i64, padding = -100 : i64} : tensor<4x8xi32> -> tensor<2x8xi32>
  %last = train.slice_rows %targets {offset = 3 : i64, padding = -100 : i64} : tensor<4x8xi32> -> tensor<2x8xi32>
  return %sums#0, %sums#1 : tensor<f32>, tensor<16x2xf32>
}

// CHECK-LABEL: func.func @keyed_dropout
func.func @keyed_dropout(%x: tensor<4x8xf32>, %step: tensor<i64>) -> (tensor<4x8xf32>, tensor<4x8xi1>) {
  // CHECK: train.dropout %{{.*}} key(%{{.*}} : tensor<i64>) {offset = 1 : i64, rate = 5.000000e-01 : f64, seed = 7 : i64} : tensor<4x8xf32> -> tensor<4x8xi1>
  %y, %m = train.dropout %x key(%step : tensor<i64>) {rate = 0.5 : f64, seed = 7 : i64, offset = 1 : i64} : tensor<4x8xf32> -> tensor<4x8xi1>
  // CHECK: train.dropout_mask key(%{{.*}} : tensor<i64>) {offset = 1 : i64, rate = 5.000000e-01 : f64, seed = 7 : i64} : tensor<4x8xi1>
  %r = train.dropout_mask key(%step : tensor<i64>) {rate = 0.5 : f64, seed = 7 : i64, offset = 1 : i64} : tensor<4x8xi1>
  return %y, %r : tensor<4x8xf32>, tensor<4x8xi1>
}

// CHECK-LABEL: func.func @optimizer
func.func @optimizer(%p: tensor<8xf32>, %g: tensor<8xbf16>, %m: tensor<8xf32>,
                     %v: tensor<8xf32>, %step: tensor<i64>, %w: tensor<4x8xf32>) {
  // CHECK: %[[LR:.*]] = train.lr_schedule %{{.*}} {min_lr = 6.000000e-05 : f64, peak_lr = 6.000000e-04 : f64, total_steps = 5000 : i64, warmup_steps = 100 : i64} : tensor<i64> -> tensor<f32>
  %lr = train.lr_schedule %step {peak_lr = 6.0e-04 : f64, min_lr = 6.0e-05 : f64, warmup_steps = 100 : i64, total_steps = 5000 : i64} : tensor<i64> -> tensor<f32>
  // CHECK: train.adamw %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[LR]], %{{.*}} {beta1 = 9.000000e-01 : f64, beta2 = {{.*}} : f64, epsilon = 1.000000e-08 : f64, weight_decay = 1.000000e-01 : f64} : tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<i64>
  %p2, %m2, %v2 = train.adamw %p, %g, %m, %v, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-08 : f64, weight_decay = 0.1 : f64} : tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<i64>
  // CHECK: train.sgd %{{.*}}, %{{.*}}, %[[LR]] {momentum = 0.000000e+00 : f64, weight_decay = 0.000000e+00 : f64} : (tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %p3 = train.sgd %p, %m, %lr {momentum = 0.0 : f64, weight_decay = 0.0 : f64} : (tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  // CHECK: train.sgd %{{.*}}, %{{.*}}, %[[LR]], %{{.*}} {momentum = 9.000000e-01 : f64, nesterov, weight_decay = 0.000000e+00 : f64} : (tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>)
  %p4, %b4 = train.sgd %p, %m, %lr, %v {momentum = 0.9 : f64, weight_decay = 0.0 : f64, nesterov} : (tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>)
  // CHECK: train.clip_grad_norm %{{.*}}, %{{.*}} {max_norm = 1.000000e+00 : f64} : (tensor<8xf32>, tensor<4x8xf32>) -> (tensor<8xf32>, tensor<4x8xf32>, tensor<f32>)
  %c:3 = train.clip_grad_norm %m, %w {max_norm = 1.0 : f64} : (tensor<8xf32>, tensor<4x8xf32>) -> (tensor<8xf32>, tensor<4x8xf32>, tensor<f32>)
  // CHECK: train.bias_gelu %{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<8xf32>
  %bg = train.bias_gelu %w, %m : tensor<4x8xf32>, tensor<8xf32>
  // CHECK: train.bias_gelu_grad %{{.*}}, %{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<8xf32>
  %bgg = train.bias_gelu_grad %bg, %w, %m : tensor<4x8xf32>, tensor<8xf32>
  // CHECK: %[[SQ:.*]] = train.squared_norm %{{.*}}, %{{.*}} : tensor<8xf32>, tensor<4x8xf32> -> tensor<24xi64>
  %sq = train.squared_norm %m, %w : tensor<8xf32>, tensor<4x8xf32> -> tensor<24xi64>
  // CHECK: train.clip_grad_norm %{{.*}} squared_norm(%[[SQ]]) {max_norm = 1.000000e+00 : f64} : (tensor<8xf32>, tensor<24xi64>) -> (tensor<8xf32>, tensor<f32>)
  %cs:2 = train.clip_grad_norm %m squared_norm(%sq) {max_norm = 1.0 : f64} : (tensor<8xf32>, tensor<24xi64>) -> (tensor<8xf32>, tensor<f32>)
  return
}

// CHECK-LABEL: func.func @quantized_state
func.func @quantized_state(%p: tensor<16x64xf32>, %g: tensor<16x64xf32>,
                           %mc: tensor<16x64xi8>, %ma: tensor<4xf32>,
                           %vc: tensor<16x64xi8>, %va: tensor<4xf32>,
                           %lr: tensor<f32>, %step: tensor<i64>) {
  // CHECK: train.quantize %{{.*}} {block = 256 : i64, is_signed} : tensor<16x64xf32> -> tensor<16x64xi8>, tensor<4xf32>
  %c, %a = train.quantize %p {block = 256 : i64, is_signed} : tensor<16x64xf32> -> tensor<16x64xi8>, tensor<4xf32>
  // CHECK: train.dequantize %{{.*}}, %{{.*}} {block = 256 : i64} : tensor<16x64xi8>, tensor<4xf32> -> tensor<16x64xf32>
  %d = train.dequantize %c, %a {block = 256 : i64} : tensor<16x64xi8>, tensor<4xf32> -> tensor<16x64xf32>
  // CHECK: train.adamw_8bit %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {beta1 = 9.000000e-01 : f64, beta2 = {{.*}} : f64, block = 256 : i64, epsilon = 1.000000e-08 : f64, weight_decay = 0.000000e+00 : f64} : tensor<16x64xf32>, tensor<16x64xf32>, tensor<16x64xi8>, tensor<4xf32>, tensor<16x64xi8>, tensor<4xf32>, tensor<f32>, tensor<i64>
  %r:5 = train.adamw_8bit %p, %g, %mc, %ma, %vc, %va, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-08 : f64, weight_decay = 0.0 : f64, block = 256 : i64} : tensor<16x64xf32>, tensor<16x64xf32>, tensor<16x64xi8>, tensor<4xf32>, tensor<16x64xi8>, tensor<4xf32>, tensor<f32>, tensor<i64>
  // CHECK: train.sgd_8bit %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {block = 256 : i64, momentum = 9.000000e-01 : f64, nesterov, weight_decay = 0.000000e+00 : f64} : tensor<16x64xf32>, tensor<16x64xf32>, tensor<16x64xi8>, tensor<4xf32>, tensor<f32>
  %s:3 = train.sgd_8bit %p, %g, %mc, %ma, %lr {momentum = 0.9 : f64, weight_decay = 0.0 : f64, nesterov, block = 256 : i64} : tensor<16x64xf32>, tensor<16x64xf32>, tensor<16x64xi8>, tensor<4xf32>, tensor<f32>
  return
}

// A micro-batch's dropout placed in its batch by the loop's index.
// CHECK-LABEL: func.func @indexed_accumulation
func.func @indexed_accumulation(%x: tensor<4x8xf32>) -> tensor<2x8xf32> {
  // CHECK: train.accumulate %{{.*}} steps 2 padding [0] indexed : (tensor<4x8xf32>) -> tensor<2x8xf32> {
  // CHECK: ^bb0(%{{.*}}: tensor<2x8xf32>, %[[J:.*]]: tensor<i64>):
  // CHECK:   train.dropout %{{.*}} part(%[[J]] : tensor<i64>) {offset = 1 : i64, part_elements = 16 : i64, rate = 5.000000e-01 : f64, seed = 7 : i64} : tensor<2x8xf32> -> tensor<2x8xi1>
  // CHECK:   train.dropout_mask part(%[[J]] : tensor<i64>) {first = 4 : i64, offset = 1 : i64, part_elements = 16 : i64, rate = 5.000000e-01 : f64, seed = 7 : i64} : tensor<2x8xi1>
  %sum = train.accumulate %x steps 2 padding [0] indexed : (tensor<4x8xf32>) -> tensor<2x8xf32> {
  ^bb0(%m: tensor<2x8xf32>, %j: tensor<i64>):
    %y, %mask = train.dropout %m part(%j : tensor<i64>) {rate = 0.5 : f64, seed = 7 : i64, offset = 1 : i64, part_elements = 16 : i64} : tensor<2x8xf32> -> tensor<2x8xi1>
    %again = train.dropout_mask part(%j : tensor<i64>) {rate = 0.5 : f64, seed = 7 : i64, offset = 1 : i64, first = 4 : i64, part_elements = 16 : i64} : tensor<2x8xi1>
    train.yield %y : tensor<2x8xf32>
  }
  return %sum : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @loss_scaling
func.func @loss_scaling(%g0: tensor<8xf16>, %g1: tensor<4x8xf16>, %state: tensor<3xi64>) {
  // CHECK: train.loss_scale %{{.*}} {initial = 6.553600e+04 : f64} : tensor<3xi64> -> tensor<f32>
  %s = train.loss_scale %state {initial = 65536.0 : f64} : tensor<3xi64> -> tensor<f32>
  // CHECK: train.unscale_gradients %{{.*}}, %{{.*}} scale(%{{.*}}) {growth_interval = 2000 : i64, initial = 6.553600e+04 : f64} : (tensor<8xf16>, tensor<4x8xf16>), tensor<3xi64> -> (tensor<8xf32>, tensor<4x8xf32>), tensor<3xi64>
  %u:3 = train.unscale_gradients %g0, %g1 scale(%state) {initial = 65536.0 : f64, growth_interval = 2000 : i64} : (tensor<8xf16>, tensor<4x8xf16>), tensor<3xi64> -> (tensor<8xf32>, tensor<4x8xf32>), tensor<3xi64>
  // CHECK: %[[SQ:.*]] = train.squared_norm
  // CHECK: train.unscale_gradients %{{.*}} scale(%{{.*}}) squared_norm(%[[SQ]] : tensor<24xi64>) {growth_interval = 2000 : i64, initial = 6.553600e+04 : f64} : (tensor<8xf16>), tensor<3xi64> -> (tensor<8xf32>), tensor<3xi64>
  %sq = train.squared_norm %g0 : tensor<8xf16> -> tensor<24xi64>
  %v:2 = train.unscale_gradients %g0 scale(%state) squared_norm(%sq : tensor<24xi64>) {initial = 65536.0 : f64, growth_interval = 2000 : i64} : (tensor<8xf16>), tensor<3xi64> -> (tensor<8xf32>), tensor<3xi64>
  return
}

// CHECK-LABEL: func @attention
func.func @attention(%q: tensor<2x8x16x4xbf16>, %kv: tensor<2x2x16x4xbf16>, %step: tensor<i64>, %j: tensor<i64>) {
  // CHECK: %[[O:.*]], %[[LSE:.*]] = train.attention %{{.*}}, %{{.*}}, %{{.*}} {causal, scale = 5.000000e-01 : f64} : tensor<2x8x16x4xbf16>, tensor<2x2x16x4xbf16>, tensor<2x2x16x4xbf16> -> tensor<2x8x16x4xbf16>, tensor<2x8x16xf32>
  %o, %lse = train.attention %q, %kv, %kv {causal, scale = 0.5 : f64} : tensor<2x8x16x4xbf16>, tensor<2x2x16x4xbf16>, tensor<2x2x16x4xbf16> -> tensor<2x8x16x4xbf16>, tensor<2x8x16xf32>
  // CHECK: train.attention %{{.*}}, %{{.*}}, %{{.*}} key(%{{.*}} : tensor<i64>) part(%{{.*}} : tensor<i64>) {causal, offset = 2 : i64, part_elements = 4096 : i64, rate = 1.000000e-01 : f64, scale = 5.000000e-01 : f64, seed = 7 : i64, transpose_output} : tensor<2x8x16x4xbf16>, tensor<2x2x16x4xbf16>, tensor<2x2x16x4xbf16> -> tensor<2x16x8x4xbf16>, tensor<2x8x16xf32>
  %o2, %lse2 = train.attention %q, %kv, %kv key(%step : tensor<i64>) part(%j : tensor<i64>) {causal, scale = 0.5 : f64, rate = 0.1 : f64, seed = 7 : i64, offset = 2 : i64, part_elements = 4096 : i64, transpose_output} : tensor<2x8x16x4xbf16>, tensor<2x2x16x4xbf16>, tensor<2x2x16x4xbf16> -> tensor<2x16x8x4xbf16>, tensor<2x8x16xf32>
  // CHECK: train.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[O]], %[[LSE]] {causal, scale = 5.000000e-01 : f64} : tensor<2x8x16x4xbf16>, tensor<2x8x16x4xbf16>, tensor<2x2x16x4xbf16>, tensor<2x2x16x4xbf16>, tensor<2x8x16x4xbf16>, tensor<2x8x16xf32>
  %dq, %dk, %dv = train.attention_grad %o, %q, %kv, %kv, %o, %lse {causal, scale = 0.5 : f64} : tensor<2x8x16x4xbf16>, tensor<2x8x16x4xbf16>, tensor<2x2x16x4xbf16>, tensor<2x2x16x4xbf16>, tensor<2x8x16x4xbf16>, tensor<2x8x16xf32>
  return
}

// Vocabulary parallelism: a split lookup, the parallel cross-entropy and
// their gradients round-trip.
shard.grid @tp(shape = 1x2)
// CHECK-LABEL: func.func @vocabulary_parallel
func.func @vocabulary_parallel(%table: tensor<8x6xf32>, %ids: tensor<2x4xi32>, %logits: tensor<2x4x8xbf16>, %dsum: tensor<f32>) {
  // CHECK: train.embedding %{{.*}}, %{{.*}} {split = #train.split<dim = 0, parts = 2, grid = @tp, axis = 1>} : tensor<8x6xf32>, tensor<2x4xi32> -> tensor<2x4x6xf32>
  %e = train.embedding %table, %ids {split = #train.split<dim = 0, parts = 2, grid = @tp, axis = 1>} : tensor<8x6xf32>, tensor<2x4xi32> -> tensor<2x4x6xf32>
  // CHECK: train.embedding_grad %{{.*}}, %{{.*}} {split = #train.split<dim = 0, parts = 2, grid = @tp, axis = 1>} : tensor<2x4x6xf32>, tensor<2x4xi32> -> tensor<8x6xf32>
  %de = train.embedding_grad %e, %ids {split = #train.split<dim = 0, parts = 2, grid = @tp, axis = 1>} : tensor<2x4x6xf32>, tensor<2x4xi32> -> tensor<8x6xf32>
  // CHECK: %[[M:.*]] = train.row_max %{{.*}} : tensor<2x4x8xbf16> -> tensor<2x4xf32>
  %m = train.row_max %logits : tensor<2x4x8xbf16> -> tensor<2x4xf32>
  // CHECK: %[[SE:.*]], %[[TL:.*]] = train.cross_entropy_part %{{.*}}, %{{.*}}, %[[M]] {ignore_index = -100 : i64, split = #train.split<dim = 2, parts = 2, grid = @tp, axis = 1>} : tensor<2x4x8xbf16>, tensor<2x4xi32>, tensor<2x4xf32> -> tensor<2x4xf32>, tensor<2x4xf32>
  %se, %tl = train.cross_entropy_part %logits, %ids, %m {ignore_index = -100 : i64, split = #train.split<dim = 2, parts = 2, grid = @tp, axis = 1>} : tensor<2x4x8xbf16>, tensor<2x4xi32>, tensor<2x4xf32> -> tensor<2x4xf32>, tensor<2x4xf32>
  // CHECK: train.cross_entropy_merge %[[SE]], %[[TL]], %[[M]], %{{.*}} {ignore_index = -100 : i64} : tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xi32> -> tensor<f32>, tensor<i64>
  %sum, %count = train.cross_entropy_merge %se, %tl, %m, %ids {ignore_index = -100 : i64} : tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xi32> -> tensor<f32>, tensor<i64>
  // CHECK: %[[DSE:.*]], %[[DTL:.*]] = train.cross_entropy_merge_grad %{{.*}}, %[[SE]], %{{.*}} {ignore_index = -100 : i64} : tensor<f32>, tensor<2x4xf32>, tensor<2x4xi32> -> tensor<2x4xf32>, tensor<2x4xf32>
  %dse, %dtl = train.cross_entropy_merge_grad %dsum, %se, %ids {ignore_index = -100 : i64} : tensor<f32>, tensor<2x4xf32>, tensor<2x4xi32> -> tensor<2x4xf32>, tensor<2x4xf32>
  // CHECK: train.cross_entropy_part_grad %[[DSE]], %[[DTL]], %{{.*}}, %[[M]], %{{.*}} {ignore_index = -100 : i64, split = #train.split<dim = 2, parts = 2, grid = @tp, axis = 1>} : tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4x8xbf16>, tensor<2x4xf32>, tensor<2x4xi32>
  %dl = train.cross_entropy_part_grad %dse, %dtl, %logits, %m, %ids {ignore_index = -100 : i64, split = #train.split<dim = 2, parts = 2, grid = @tp, axis = 1>} : tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4x8xbf16>, tensor<2x4xf32>, tensor<2x4xi32>
  return
}

// CHECK-LABEL: func.func @rope_halves
func.func @rope_halves(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  // CHECK: train.rope %{{.*}} {halves, theta = 1.000000e+04 : f64} : tensor<2x4x8xf32>
  %y = train.rope %x {theta = 10000.0 : f64, halves} : tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// CHECK-LABEL: func.func @gelu_exact
func.func @gelu_exact(%x: tensor<2x8xf32>, %dy: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // CHECK: train.gelu %{{.*}} {exact} : tensor<2x8xf32>
  %y = train.gelu %x {exact} : tensor<2x8xf32>
  // CHECK: train.gelu_grad %{{.*}}, %{{.*}} {exact} : tensor<2x8xf32>
  %g = train.gelu_grad %dy, %y {exact} : tensor<2x8xf32>
  return %g : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @slice
func.func @slice(%qkv: tensor<2x4x24xf32>) -> tensor<2x4x24xf32> {
  // CHECK: train.slice %{{.*}} {dim = 2 : i64, offset = 8 : i64, size = 8 : i64} : tensor<2x4x24xf32> -> tensor<2x4x8xf32>
  %k = train.slice %qkv {dim = 2 : i64, offset = 8 : i64, size = 8 : i64} : tensor<2x4x24xf32> -> tensor<2x4x8xf32>
  // CHECK: train.slice_grad %{{.*}} {dim = 2 : i64, offset = 8 : i64, whole = 24 : i64} : tensor<2x4x8xf32> -> tensor<2x4x24xf32>
  %g = train.slice_grad %k {dim = 2 : i64, offset = 8 : i64, whole = 24 : i64} : tensor<2x4x8xf32> -> tensor<2x4x24xf32>
  return %g : tensor<2x4x24xf32>
}

// CHECK-LABEL: func.func @broadcast
func.func @broadcast(%k: tensor<2x2x1x4x8xbf16>) -> tensor<2x2x3x4x8xbf16> {
  // CHECK: train.broadcast %{{.*}} : tensor<2x2x1x4x8xbf16> -> tensor<2x2x3x4x8xbf16>
  %r = train.broadcast %k : tensor<2x2x1x4x8xbf16> -> tensor<2x2x3x4x8xbf16>
  return %r : tensor<2x2x3x4x8xbf16>
}

// A pipeline stage's exchange: a tensor sent, one received; one that only
// receives; the stage and its schedule on the function.
// CHECK-LABEL: func.func @stage
// CHECK-SAME: train.init = #train.init<normal, std = 2.000000e-02, stream = 17>
// CHECK-SAME: train.pipeline_stage = #train.pipeline<stage = 1, stages = 4, micro_batches = 8, schedule = interleaved, virtual = 2>
func.func @stage(%x: tensor<2x8xf32>, %w: tensor<8xf32> {train.param = "w", train.init = #train.init<normal, std = 2.0e-02, stream = 17>}) -> tensor<2x8xf32> attributes {train.pipeline_stage = #train.pipeline<stage = 1, stages = 4, micro_batches = 8, schedule = interleaved, virtual = 2>} {
  // CHECK: %{{.*}} = train.pipeline_exchange send %{{.*}} : tensor<2x8xf32> {recv_peers = array<i64: 0>, recv_tags = array<i64: 3>, send_peers = array<i64: 2>, send_tags = array<i64: 1>} -> tensor<2x8xf32>
  %g = train.pipeline_exchange send %x : tensor<2x8xf32> {send_peers = array<i64: 2>, send_tags = array<i64: 1>, recv_peers = array<i64: 0>, recv_tags = array<i64: 3>} -> tensor<2x8xf32>
  // CHECK: train.pipeline_exchange {recv_peers = array<i64: 2>, recv_tags = array<i64: 4>, send_peers = array<i64>, send_tags = array<i64>} -> tensor<2x8xf32>
  %h = train.pipeline_exchange {send_peers = array<i64>, send_tags = array<i64>, recv_peers = array<i64: 2>, recv_tags = array<i64: 4>} -> tensor<2x8xf32>
  %s = train.add %g, %h {train.micro_batch = 3 : i64, train.chunk = 5 : i64} : tensor<2x8xf32>
  return %s : tensor<2x8xf32>
}

// Copies between the arenas, one asynchronous (ended by its wait).
// CHECK-LABEL: func.func @transfers
func.func @transfers(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK: %[[H:.*]] = train.transfer %{{.*}} {to = #train.space<host>} : tensor<4x8xf32>
  %h = train.transfer %x {to = #train.space<host>} : tensor<4x8xf32>
  // CHECK: train.transfer_wait %[[H]] : tensor<4x8xf32>
  train.transfer_wait %h : tensor<4x8xf32>
  // CHECK: train.transfer %[[H]] {to = #train.space<device>} : tensor<4x8xf32>
  %d = train.transfer %h {to = #train.space<device>} : tensor<4x8xf32>
  return %d : tensor<4x8xf32>
}
