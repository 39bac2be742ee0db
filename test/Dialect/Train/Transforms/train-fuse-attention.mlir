// RUN: trainmem-opt %s -split-input-file -train-fuse-attention | FileCheck %s

// Multi-head attention with dropout, read heads-last by the output
// projection: one train.attention writing [B, S, H, D], the dropout's
// counters carried over.
// CHECK-LABEL: func @gpt
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x8x16xf32>, %[[K:.*]]: tensor<2x4x8x16xf32>, %[[V:.*]]: tensor<2x4x8x16xf32>, %[[STEP:.*]]: tensor<i64>)
// CHECK-NEXT: %[[O:.*]], %{{.*}} = train.attention %[[Q]], %[[K]], %[[V]] key(%[[STEP]] : tensor<i64>) {causal, offset = 3 : i64, rate = 1.000000e-01 : f64, scale = 2.500000e-01 : f64, seed = 5 : i64, transpose_output} : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32> -> tensor<2x8x4x16xf32>, tensor<2x4x8xf32>
// CHECK-NEXT: %[[R:.*]] = train.reshape %[[O]] : tensor<2x8x4x16xf32> -> tensor<2x8x64xf32>
// CHECK-NEXT: return %[[R]]
func.func @gpt(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>, %step: tensor<i64>) -> tensor<2x8x64xf32> {
  %s = train.matmul %q, %k {transpose_rhs} : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32> -> tensor<2x4x8x8xf32>
  %ss = train.scale %s {factor = 0.25 : f64} : tensor<2x4x8x8xf32>
  %p = train.softmax %ss {causal} : tensor<2x4x8x8xf32>
  %pd, %mask = train.dropout %p key(%step : tensor<i64>) {rate = 0.1 : f64, seed = 5 : i64, offset = 3 : i64} : tensor<2x4x8x8xf32> -> tensor<2x4x8x8xi1>
  %o = train.matmul %pd, %v : tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32> -> tensor<2x4x8x16xf32>
  %t = train.transpose %o {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x4x8x16xf32> -> tensor<2x8x4x16xf32>
  %r = train.reshape %t : tensor<2x8x4x16xf32> -> tensor<2x8x64xf32>
  return %r : tensor<2x8x64xf32>
}

// -----

// Grouped-query heads (8 query heads over 2 key/value heads, as Llama
// writes them): reshaped to heads for the op, output heads-last.
// CHECK-LABEL: func @gqa
// CHECK-DAG: %[[Q4:.*]] = train.reshape %{{.*}} : tensor<1x2x4x8x16xbf16> -> tensor<1x8x8x16xbf16>
// CHECK-DAG: %[[K4:.*]] = train.reshape %{{.*}} : tensor<1x2x1x8x16xbf16> -> tensor<1x2x8x16xbf16>
// CHECK-DAG: %[[V4:.*]] = train.reshape %{{.*}} : tensor<1x2x1x8x16xbf16> -> tensor<1x2x8x16xbf16>
// CHECK: %[[O:.*]], %{{.*}} = train.attention %[[Q4]], %[[K4]], %[[V4]] {causal, scale = 2.500000e-01 : f64, transpose_output} : tensor<1x8x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16> -> tensor<1x8x8x16xbf16>, tensor<1x8x8xf32>
// CHECK-NEXT: train.reshape %[[O]] : tensor<1x8x8x16xbf16> -> tensor<1x8x128xbf16>
// CHECK-NOT: train.softmax
func.func @gqa(%q: tensor<1x2x4x8x16xbf16>, %k: tensor<1x2x1x8x16xbf16>, %v: tensor<1x2x1x8x16xbf16>) -> tensor<1x8x128xbf16> {
  %s = train.matmul %q, %k {transpose_rhs} : tensor<1x2x4x8x16xbf16>, tensor<1x2x1x8x16xbf16> -> tensor<1x2x4x8x8xbf16>
  %ss = train.scale %s {factor = 0.25 : f64} : tensor<1x2x4x8x8xbf16>
  %p = train.softmax %ss {causal} : tensor<1x2x4x8x8xbf16>
  %o = train.matmul %p, %v : tensor<1x2x4x8x8xbf16>, tensor<1x2x1x8x16xbf16> -> tensor<1x2x4x8x16xbf16>
  %h = train.reshape %o : tensor<1x2x4x8x16xbf16> -> tensor<1x8x8x16xbf16>
  %t = train.transpose %h {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x8x8x16xbf16> -> tensor<1x8x8x16xbf16>
  %r = train.reshape %t : tensor<1x8x8x16xbf16> -> tensor<1x8x128xbf16>
  return %r : tensor<1x8x128xbf16>
}

// -----

// Without the transpose after it (and without causality), the output keeps
// [B, H, S, D].
// CHECK-LABEL: func @bidirectional
// CHECK: %[[O:.*]], %{{.*}} = train.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 1.250000e-01 : f64} : tensor<2x4x8x16xf32>, tensor<2x4x6x16xf32>, tensor<2x4x6x16xf32> -> tensor<2x4x8x16xf32>, tensor<2x4x8xf32>
// CHECK-NEXT: return %[[O]]
func.func @bidirectional(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x6x16xf32>, %v: tensor<2x4x6x16xf32>) -> tensor<2x4x8x16xf32> {
  %s = train.matmul %q, %k {transpose_rhs} : tensor<2x4x8x16xf32>, tensor<2x4x6x16xf32> -> tensor<2x4x8x6xf32>
  %ss = train.scale %s {factor = 0.125 : f64} : tensor<2x4x8x6xf32>
  %p = train.softmax %ss : tensor<2x4x8x6xf32>
  %o = train.matmul %p, %v : tensor<2x4x8x6xf32>, tensor<2x4x6x16xf32> -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// The probabilities are read elsewhere (as after train-autodiff, by the
// backward): the score tensor exists anyway, nothing fuses.
// CHECK-LABEL: func @probabilities_used
// CHECK-NOT: train.attention
// CHECK: train.softmax
func.func @probabilities_used(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x8xf32>) {
  %s = train.matmul %q, %k {transpose_rhs} : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32> -> tensor<2x4x8x8xf32>
  %ss = train.scale %s {factor = 0.25 : f64} : tensor<2x4x8x8xf32>
  %p = train.softmax %ss {causal} : tensor<2x4x8x8xf32>
  %o = train.matmul %p, %v : tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32> -> tensor<2x4x8x16xf32>
  return %o, %p : tensor<2x4x8x16xf32>, tensor<2x4x8x8xf32>
}

// -----

// A product that is not attention (no softmax): untouched.
// CHECK-LABEL: func @plain_matmul
// CHECK-NOT: train.attention
func.func @plain_matmul(%a: tensor<4x8xf32>, %b: tensor<8x4xf32>) -> tensor<4x4xf32> {
  %0 = train.matmul %a, %b : tensor<4x8xf32>, tensor<8x4xf32> -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

// ALiBi slopes go with the softmax onto the fused op (its verifier checks
// one per query head); grouped-query scores [B, KVH, G, S, S] carry them
// for the KVH · G query heads in order.
// CHECK-LABEL: func @alibi
// CHECK: train.attention {{.*}} {alibi_slopes = array<f64: 5.000000e-01, 2.500000e-01, 1.250000e-01, 6.250000e-02>, causal, scale = 2.500000e-01 : f64, transpose_output}
// CHECK-NOT: train.softmax
func.func @alibi(%q: tensor<1x2x2x8x16xf32>, %k: tensor<1x2x1x8x16xf32>, %v: tensor<1x2x1x8x16xf32>) -> tensor<1x8x64xf32> {
  %s = train.matmul %q, %k {transpose_rhs} : tensor<1x2x2x8x16xf32>, tensor<1x2x1x8x16xf32> -> tensor<1x2x2x8x8xf32>
  %ss = train.scale %s {factor = 0.25 : f64} : tensor<1x2x2x8x8xf32>
  %p = train.softmax %ss {causal, alibi_slopes = array<f64: 0.5, 0.25, 0.125, 0.0625>} : tensor<1x2x2x8x8xf32>
  %o = train.matmul %p, %v : tensor<1x2x2x8x8xf32>, tensor<1x2x1x8x16xf32> -> tensor<1x2x2x8x16xf32>
  %h = train.reshape %o : tensor<1x2x2x8x16xf32> -> tensor<1x4x8x16xf32>
  %t = train.transpose %h {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x4x8x16xf32> -> tensor<1x8x4x16xf32>
  %r = train.reshape %t : tensor<1x8x4x16xf32> -> tensor<1x8x64xf32>
  return %r : tensor<1x8x64xf32>
}
