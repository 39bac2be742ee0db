// RUN: trainmem-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(sharding-propagation))' | FileCheck %s
// RUN: trainmem-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(sharding-propagation,shard-partition))' -verify-diagnostics | FileCheck %s --check-prefix=PART
//
// Upstream's ShardingInterface on the train ops (ShardingModels.cpp):
// sharding-propagation carries a sharding through matmul, bias_add, the
// element-wise ops and the norms; shard-partition partitions what needs no
// collective and refuses a sharded reduction.

// Megatron's MLP split, found by propagation from the first weight's
// columns: its bias and the GELU on the columns, the second weight by rows
// (the contraction over the split columns), the product whole.
// CHECK-LABEL: func.func @mlp
// CHECK: %[[COLS:.*]] = shard.sharding @tp split_axes = {{\[\[}}], [0]] : !shard.sharding
// CHECK: train.matmul
// CHECK: shard.sharding @tp split_axes = {{\[\[}}0]] : !shard.sharding
// CHECK: train.bias_add
// CHECK: shard.sharding @tp split_axes = {{\[\[}}], [0]] : !shard.sharding
// CHECK: train.gelu
// CHECK: %[[ROWS:.*]] = shard.sharding @tp split_axes = {{\[\[}}0]] : !shard.sharding
// CHECK-NEXT: shard.shard %arg3 to %[[ROWS]] annotate_for_users : tensor<16x8xf32>
// CHECK: train.matmul
shard.grid @tp(shape = 2)
func.func @mlp(%x: tensor<4x8xf32>, %fc: tensor<8x16xf32>, %b: tensor<16xf32>, %proj: tensor<16x8xf32>) -> tensor<4x8xf32> {
  %s = shard.sharding @tp split_axes = [[], [0]] : !shard.sharding
  %fc_s = shard.shard %fc to %s annotate_for_users : tensor<8x16xf32>
  %h = train.matmul %x, %fc_s : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  %hb = train.bias_add %h, %b : tensor<4x16xf32>, tensor<16xf32>
  %a = train.gelu %hb : tensor<4x16xf32>
  // (shard-partition stops here: g is train-tensor-parallel's.)
  // expected-error @+1 {{'train.matmul' op has a sharded reduction loop}}
  %y = train.matmul %a, %proj : tensor<4x16xf32>, tensor<16x8xf32> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// Rows split over a data axis: the norm and GELU partition to each rank's
// rows (their weights whole).
// PART-LABEL: func.func @rows
// PART-SAME: (%[[X:.*]]: tensor<2x8xf32>, %[[W:.*]]: tensor<8xf32>, %[[B:.*]]: tensor<8xf32>) -> tensor<2x8xf32>
// PART-NEXT: %[[N:.*]] = train.layer_norm %[[X]], %[[W]], %[[B]] {epsilon = 1.000000e-05 : f64} : tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>
// PART-NEXT: %[[A:.*]] = train.gelu %[[N]] : tensor<2x8xf32>
// PART-NEXT: return %[[A]] : tensor<2x8xf32>
shard.grid @dp(shape = 2)
func.func @rows(%x: tensor<4x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %s = shard.sharding @dp split_axes = [[0]] : !shard.sharding
  %xs = shard.shard %x to %s annotate_for_users : tensor<4x8xf32>
  %n = train.layer_norm %xs, %w, %b {epsilon = 1.0e-05 : f64} : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>
  %a = train.gelu %n : tensor<4x8xf32>
  %r = shard.shard %a to %s : tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}

// -----

// A contraction over a split dimension needs g: refused, naming it.
shard.grid @tp(shape = 2)
func.func @rows_of_proj(%a: tensor<4x16xf32>, %proj: tensor<16x8xf32>) -> tensor<4x8xf32> {
  %s = shard.sharding @tp split_axes = [[], [0]] : !shard.sharding
  %as = shard.shard %a to %s annotate_for_users : tensor<4x16xf32>
  // expected-error @+1 {{'train.matmul' op has a sharded reduction loop: its partial results need collectives (train-tensor-parallel inserts them for a split contraction)}}
  %y = train.matmul %as, %proj : tensor<4x16xf32>, tensor<16x8xf32> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// A norm over a split dimension is not a sum of the ranks' parts: refused.
shard.grid @tp(shape = 2)
func.func @norm_of_columns(%x: tensor<4x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %s = shard.sharding @tp split_axes = [[], [0]] : !shard.sharding
  %xs = shard.shard %x to %s annotate_for_users : tensor<4x8xf32>
  // expected-error @+1 {{'train.layer_norm' op has a sharded reduction loop}}
  %n = train.layer_norm %xs, %w, %b {epsilon = 1.0e-05 : f64} : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>
  return %n : tensor<4x8xf32>
}

// -----

// Fused attention split by heads: propagation carries the heads' sharding
// of q, k and v to the output and the log-sum-exp; shard-partition gives
// each rank its heads' attention.
// CHECK-LABEL: func.func @attention_heads
// CHECK: %[[HEADS:.*]] = shard.sharding @tp split_axes = {{\[\[}}], [0]] : !shard.sharding
// CHECK: train.attention
// CHECK: shard.shard %{{.*}} to %[[HEADS]] : tensor<2x4x8x16xf32>
// CHECK: shard.shard %{{.*}} to %[[HEADS]] : tensor<2x4x8xf32>
// PART-LABEL: func.func @attention_heads
// PART: train.attention %{{.*}}, %{{.*}}, %{{.*}} {causal, scale = 2.500000e-01 : f64} : tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32> -> tensor<2x2x8x16xf32>, tensor<2x2x8xf32>
shard.grid @tp(shape = 2)
func.func @attention_heads(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8xf32>) {
  %s = shard.sharding @tp split_axes = [[], [0]] : !shard.sharding
  %qs = shard.shard %q to %s annotate_for_users : tensor<2x4x8x16xf32>
  %ks = shard.shard %k to %s annotate_for_users : tensor<2x4x8x16xf32>
  %vs = shard.shard %v to %s annotate_for_users : tensor<2x4x8x16xf32>
  %o, %lse = train.attention %qs, %ks, %vs {causal, scale = 0.25 : f64} : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32> -> tensor<2x4x8x16xf32>, tensor<2x4x8xf32>
  %or = shard.shard %o to %s : tensor<2x4x8x16xf32>
  %lr = shard.shard %lse to %s : tensor<2x4x8xf32>
  return %or, %lr : tensor<2x4x8x16xf32>, tensor<2x4x8xf32>
}

// -----

// Grouped-query attention (4 query heads on 2 K/V heads) over a data axis:
// the batch's sharding reaches the output; partitioning it is refused (its
// heads map by a division, which upstream's trivial partition cannot
// take).
// CHECK-LABEL: func.func @attention_rows
// CHECK: train.attention
// CHECK: %[[ROWS:.*]] = shard.sharding @dp split_axes = {{\[\[}}0]] : !shard.sharding
// CHECK-NEXT: shard.shard %{{.*}} to %[[ROWS]] : tensor<4x4x8xf32>
shard.grid @dp(shape = 2)
func.func @attention_rows(%q: tensor<4x4x8x16xf32>, %k: tensor<4x2x8x16xf32>, %v: tensor<4x2x8x16xf32>) -> (tensor<4x4x8x16xf32>, tensor<4x4x8xf32>) {
  %s = shard.sharding @dp split_axes = [[0]] : !shard.sharding
  %qs = shard.shard %q to %s annotate_for_users : tensor<4x4x8x16xf32>
  %ks = shard.shard %k to %s annotate_for_users : tensor<4x2x8x16xf32>
  %vs = shard.shard %v to %s annotate_for_users : tensor<4x2x8x16xf32>
  // expected-error @+1 {{'train.attention' op partitions a grouped-query attention}}
  %o, %lse = train.attention %qs, %ks, %vs {scale = 0.25 : f64} : tensor<4x4x8x16xf32>, tensor<4x2x8x16xf32>, tensor<4x2x8x16xf32> -> tensor<4x4x8x16xf32>, tensor<4x4x8xf32>
  %or = shard.shard %o to %s : tensor<4x4x8x16xf32>
  return %or, %lse : tensor<4x4x8x16xf32>, tensor<4x4x8xf32>
}

// -----

// Dropout on a sharded part would draw the whole tensor's first elements:
// refused (train-tensor-parallel marks the draw's split).
shard.grid @tp(shape = 2)
func.func @attention_dropout(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32> {
  %s = shard.sharding @tp split_axes = [[], [0]] : !shard.sharding
  %qs = shard.shard %q to %s annotate_for_users : tensor<2x4x8x16xf32>
  %ks = shard.shard %k to %s annotate_for_users : tensor<2x4x8x16xf32>
  %vs = shard.shard %v to %s annotate_for_users : tensor<2x4x8x16xf32>
  // expected-error @+1 {{'train.attention' op draws dropout on a sharded part}}
  %o, %lse = train.attention %qs, %ks, %vs {scale = 0.25 : f64, rate = 0.1 : f64, seed = 1 : i64} : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32> -> tensor<2x4x8x16xf32>, tensor<2x4x8xf32>
  %or = shard.shard %o to %s : tensor<2x4x8x16xf32>
  return %or : tensor<2x4x8x16xf32>
}
