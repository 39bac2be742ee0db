// The input is the step train-autodiff makes of the forward below, checked
// in (Inputs/steps/train-zero.mlir, and -clip.mlir with clip-norm=1.0;
// scripts/regen-pass-inputs.sh writes them again), so that these tests run
// train-zero alone.
//
// Stage 0 (plain data parallel): every gradient the optimizer reads is
// averaged over the ranks by an all-reduce on the grid, before clipping,
// in buckets in the order the backward produces the gradients.
// RUN: trainmem-opt %S/Inputs/steps/train-zero-clip.mlir -train-zero="ranks=4 bucket=600" | FileCheck %s
// RUN: trainmem-opt %S/Inputs/steps/train-zero.mlir -train-zero="ranks=4 bucket=100" | FileCheck %s --check-prefix=SMALL
//
// One rank is the step as it is.
// RUN: trainmem-opt %S/Inputs/steps/train-zero.mlir -o %t.plain.mlir
// RUN: trainmem-opt %S/Inputs/steps/train-zero.mlir -train-zero="ranks=1 stage=3" -o %t.one.mlir
// RUN: diff %t.plain.mlir %t.one.mlir
//
// The memory report counts what the collectives send, from the IR: Ψ = 256
// parameters on N = 4 ranks, 2Ψ(N-1)/N = 384 elements of f32 per rank.
// RUN: trainmem-opt %S/Inputs/steps/train-zero.mlir -train-zero="ranks=4" -train-memory-report -o /dev/null | FileCheck %s --check-prefix=REPORT
// RUN: trainmem-opt %S/Inputs/steps/train-zero.mlir -train-zero="ranks=4" -train-memory-report=format=json -o /dev/null | FileCheck %s --check-prefix=JSON
//
// Stage 1: the optimizer state is the rank's shard (128 elements on 4
// ranks: 32; on 3 ranks padded to 129: 43); the gradient is reduce-scattered
// (averaged) into the rank's shard, the rank updates its slice of the
// weights and the new weights are all-gathered.
// RUN: trainmem-opt %S/Inputs/steps/train-zero.mlir -train-zero="ranks=4 stage=1" | FileCheck %s --check-prefix=STAGE1
// RUN: trainmem-opt %S/Inputs/steps/train-zero.mlir -train-zero="ranks=3 stage=1" | FileCheck %s --check-prefix=PADDED
// RUN: trainmem-opt %S/Inputs/steps/train-zero.mlir -train-zero="ranks=4 stage=1" -train-memory-report -o /dev/null | FileCheck %s --check-prefix=REPORT1
//
// Stage 2: each gradient is reduce-scattered as soon as the backward has
// completed its bucket (here one gradient per bucket), not before the
// update; the full gradient dies there and the rank keeps its shard (a new
// value, not tied to the full gradient's buffer as at stage 1).
// RUN: trainmem-opt %S/Inputs/steps/train-zero.mlir -train-zero="ranks=4 stage=2 bucket=100" | FileCheck %s --check-prefix=STAGE2
// RUN: trainmem-opt %S/Inputs/steps/train-zero.mlir -train-zero="ranks=4 stage=2" -train-memory-report -o /dev/null | FileCheck %s --check-prefix=REPORT2
//
// Stage 3: the weights are shards too (train.shard_of), each gathered right
// before the op that reads it, again before its backward use, and dead
// after that op (prefetch=0), except where the next op that reads weights
// reads the same (w2: the last forward matmul and the first backward one
// share one gather); prefetch=1 gathers one op (a block, in a model with
// blocks) ahead. The update writes the new shard; nothing is
// gathered after it. On 3 ranks the padding (128 -> 129 elements per
// tensor) shows in the report.
// RUN: trainmem-opt %S/Inputs/steps/train-zero.mlir -train-zero="ranks=4 stage=3 prefetch=0" | FileCheck %s --check-prefix=STAGE3
// RUN: trainmem-opt %S/Inputs/steps/train-zero.mlir -train-zero="ranks=4 stage=3 prefetch=0" | FileCheck %s --check-prefix=FREE
// RUN: trainmem-opt %S/Inputs/steps/train-zero.mlir -train-zero="ranks=4 stage=3" | FileCheck %s --check-prefix=PREFETCH
// RUN: trainmem-opt %S/Inputs/steps/train-zero.mlir -train-zero="ranks=3 stage=3" -train-memory-report -o /dev/null | FileCheck %s --check-prefix=REPORT3

// CHECK: shard.grid @dp(shape = 4)
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: train.zero = #train.zero<stage = 0, ranks = 4, bucket = 600>
// CHECK: %[[G2:.*]] = train.matmul %{{.*}}, %{{.*}} {transpose_lhs} : tensor<4x16xf32>, tensor<4x8xf32> -> tensor<16x8xf32>
// CHECK: %[[G1:.*]] = train.matmul %{{.*}}, %{{.*}} {transpose_lhs} : tensor<4x8xf32>, tensor<4x16xf32> -> tensor<8x16xf32>
// CHECK-NEXT: %[[R2:.*]] = shard.all_reduce %[[G2]] on @dp grid_axes = [0] reduction = average {train.bucket = 0 : i64} : tensor<16x8xf32> -> tensor<16x8xf32>
// CHECK-NEXT: %[[R1:.*]] = shard.all_reduce %[[G1]] on @dp grid_axes = [0] reduction = average {train.bucket = 0 : i64} : tensor<8x16xf32> -> tensor<8x16xf32>
// CHECK-NEXT: train.block optimizer
// CHECK: train.clip_grad_norm %[[R1]], %[[R2]]

// With 100-byte buckets each gradient is its own bucket, reduced as soon
// as the backward has produced it.
// SMALL: %[[G2:.*]] = train.matmul {{.*}} {transpose_lhs} : tensor<4x16xf32>, tensor<4x8xf32> -> tensor<16x8xf32>
// SMALL-NEXT: shard.all_reduce %[[G2]] {{.*}} {train.bucket = 0 : i64}
// SMALL: %[[G1:.*]] = train.matmul {{.*}} {transpose_lhs} : tensor<4x8xf32>, tensor<4x16xf32> -> tensor<8x16xf32>
// SMALL-NEXT: shard.all_reduce %[[G1]] {{.*}} {train.bucket = 1 : i64}

// REPORT: zero       stage 0, 4 ranks (per rank above); global batch 8 = 2 per rank x 4 ranks
// REPORT: communication data        all_reduce           2 ops                  384 elements                 1536 B per rank and step

// JSON: "communication": {
// JSON-NEXT: "all_reduce": {
// JSON-NEXT: "bytes_per_rank": 1536,
// JSON-NEXT: "elements_per_rank": 384,
// JSON-NEXT: "ops": 2
// JSON: "global_batch": 8,
// JSON: "rank_batch": 2,
// JSON: "ranks": 4,
// JSON: "zero_stage": 0

// STAGE1-LABEL: func.func @train_step
// STAGE1-SAME: %[[W1:[a-z0-9]+]]: tensor<8x16xf32> {train.init = #train.init<normal, std = 2.000000e-02>, train.param = "w1"}
// STAGE1-SAME: %[[M1:[a-z0-9]+]]: tensor<32xf32> {train.optimizer_state = #train.state<"w1", m>, train.shard_of = tensor<8x16xf32>}, %{{.*}}: tensor<32xf32> {train.optimizer_state = #train.state<"w1", v>, train.shard_of = tensor<8x16xf32>}
// STAGE1-SAME: -> (tensor<f32> {train.loss}, tensor<8x16xf32> {train.param = "w1"}, tensor<32xf32> {train.optimizer_state = #train.state<"w1", m>, train.shard_of = tensor<8x16xf32>}
// STAGE1-SAME: train.zero = #train.zero<stage = 1, ranks = 4, bucket = 500000000>
// STAGE1: train.block optimizer
// STAGE1: %[[FLAT:.*]] = train.reshape %{{.*}} : tensor<8x16xf32> -> tensor<128xf32>
// STAGE1-NEXT: %[[G:.*]] = shard.reduce_scatter %[[FLAT]] on @dp grid_axes = [0] reduction = average scatter_axis = 0 {train.in_place} : tensor<128xf32> -> tensor<32xf32>
// STAGE1-NEXT: %[[WFLAT:.*]] = train.reshape %[[W1]] : tensor<8x16xf32> -> tensor<128xf32>
// STAGE1-NEXT: %[[WS:.*]] = shard.all_slice %[[WFLAT]] on @dp grid_axes = [0] slice_axis = 0 : tensor<128xf32> -> tensor<32xf32>
// STAGE1-NEXT: %[[NEW:.*]], %{{.*}}, %{{.*}} = train.adamw %[[WS]], %[[G]], %[[M1]]
// STAGE1-NEXT: %[[ALL:.*]] = shard.all_gather %[[NEW]] on @dp grid_axes = [0] gather_axis = 0 : tensor<32xf32> -> tensor<128xf32>
// STAGE1-NEXT: train.reshape %[[ALL]] : tensor<128xf32> -> tensor<8x16xf32>

// PADDED: %{{.*}}: tensor<43xf32> {train.optimizer_state = #train.state<"w1", m>, train.shard_of = tensor<8x16xf32>}
// PADDED: %[[FLAT:.*]] = train.reshape %{{.*}} : tensor<8x16xf32> -> tensor<128xf32>
// PADDED-NEXT: %[[PAD:.*]] = train.slice_rows %[[FLAT]] {offset = 0 : i64} : tensor<128xf32> -> tensor<129xf32>
// PADDED-NEXT: shard.reduce_scatter %[[PAD]] {{.*}} : tensor<129xf32> -> tensor<43xf32>
// PADDED: %[[ALL:.*]] = shard.all_gather {{.*}} : tensor<43xf32> -> tensor<129xf32>
// PADDED-NEXT: %[[UNPAD:.*]] = train.slice_rows %[[ALL]] {offset = 0 : i64} : tensor<129xf32> -> tensor<128xf32>
// PADDED-NEXT: train.reshape %[[UNPAD]] : tensor<128xf32> -> tensor<8x16xf32>

// Stage 1 sends what stage 0 does (2Ψ(N-1)/N = 384 elements), in two
// halves; the optimizer state is 8Ψ/N = 512 B (m and v, 256 B each).
// REPORT1: optimizer state m {{ *}}256 B
// REPORT1: optimizer state v {{ *}}256 B
// REPORT1: communication data        all_gather           2 ops                  192 elements                  768 B per rank and step
// REPORT1: communication data        reduce_scatter       2 ops                  192 elements                  768 B per rank and step

// STAGE2-LABEL: func.func @train_step
// STAGE2-SAME: train.zero = #train.zero<stage = 2, ranks = 4, bucket = 100>
// STAGE2: %[[G2:.*]] = train.matmul {{.*}} {transpose_lhs} : tensor<4x16xf32>, tensor<4x8xf32> -> tensor<16x8xf32>
// STAGE2-NEXT: %[[F2:.*]] = train.reshape %[[G2]] : tensor<16x8xf32> -> tensor<128xf32>
// STAGE2-NEXT: %[[S2:.*]] = shard.reduce_scatter %[[F2]] on @dp grid_axes = [0] reduction = average scatter_axis = 0 {train.bucket = 0 : i64} : tensor<128xf32> -> tensor<32xf32>
// STAGE2: %[[G1:.*]] = train.matmul {{.*}} {transpose_lhs} : tensor<4x8xf32>, tensor<4x16xf32> -> tensor<8x16xf32>
// STAGE2-NEXT: %[[F1:.*]] = train.reshape %[[G1]] : tensor<8x16xf32> -> tensor<128xf32>
// STAGE2-NEXT: %[[S1:.*]] = shard.reduce_scatter %[[F1]] on @dp grid_axes = [0] reduction = average scatter_axis = 0 {train.bucket = 1 : i64} : tensor<128xf32> -> tensor<32xf32>
// STAGE2: train.block optimizer
// STAGE2-NOT: shard.reduce_scatter
// STAGE2: train.adamw %{{.*}}, %[[S1]]
// STAGE2: train.adamw %{{.*}}, %[[S2]]

// Stage 2 sends what stage 1 does; the gradients the rank keeps are its
// shards (2 x 32 elements of f32 = 256 B in total).
// REPORT2: gradients {{ *[0-9]+ *}} 256
// REPORT2: communication data        all_gather           2 ops                  192 elements                  768 B per rank and step
// REPORT2: communication data        reduce_scatter       2 ops                  192 elements                  768 B per rank and step

// STAGE3-LABEL: func.func @train_step
// STAGE3-SAME: %[[W1:[a-z0-9]+]]: tensor<32xf32> {train.init = #train.init<normal, std = 2.000000e-02>, train.param = "w1", train.shard_of = tensor<8x16xf32>}
// STAGE3-SAME: %[[W2:[a-z0-9]+]]: tensor<32xf32> {train.init = #train.init<normal, std = 2.000000e-02>, train.param = "w2", train.shard_of = tensor<16x8xf32>}
// STAGE3-SAME: -> (tensor<f32> {train.loss}, tensor<32xf32> {train.param = "w1", train.shard_of = tensor<8x16xf32>}
// STAGE3-SAME: train.zero = #train.zero<stage = 3, ranks = 4, bucket = 500000000>
// STAGE3-NEXT: %[[A1:.*]] = shard.all_gather %[[W1]] on @dp grid_axes = [0] gather_axis = 0 : tensor<32xf32> -> tensor<128xf32>
// STAGE3-NEXT: %[[F1:.*]] = train.reshape %[[A1]] : tensor<128xf32> -> tensor<8x16xf32>
// STAGE3-NEXT: train.matmul %{{.*}}, %[[F1]] : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
// STAGE3-NEXT: train.gelu
// STAGE3-NEXT: %[[A2:.*]] = shard.all_gather %[[W2]] on @dp grid_axes = [0] gather_axis = 0 : tensor<32xf32> -> tensor<128xf32>
// STAGE3-NEXT: %[[F2:.*]] = train.reshape %[[A2]] : tensor<128xf32> -> tensor<16x8xf32>
// STAGE3-NEXT: train.matmul %{{.*}}, %[[F2]] : tensor<4x16xf32>, tensor<16x8xf32> -> tensor<4x8xf32>
// STAGE3: train.cross_entropy_grad
// STAGE3-NEXT: train.matmul %{{.*}}, %[[F2]] {transpose_rhs}
// STAGE3: train.gelu_grad
// STAGE3-NEXT: %[[B1:.*]] = shard.all_gather %[[W1]] on @dp
// STAGE3-NEXT: %[[G1:.*]] = train.reshape %[[B1]] : tensor<128xf32> -> tensor<8x16xf32>
// STAGE3-NEXT: train.matmul %{{.*}}, %[[G1]] {transpose_rhs}
// STAGE3-NOT: shard.all_gather
// STAGE3: shard.reduce_scatter
// STAGE3: train.block optimizer
// STAGE3: train.adamw %[[W1]], %{{.*}} : tensor<32xf32>
// STAGE3-NOT: shard.all_gather
// STAGE3: return

// Each gathered tensor is read by its op only, and dead after it: the
// backward gathers w1 anew.
// FREE-LABEL: func.func @train_step
// FREE: %[[A1:.*]] = shard.all_gather
// FREE-NEXT: %[[F1:.*]] = train.reshape %[[A1]]
// FREE-NEXT: train.matmul %{{.*}}, %[[F1]] :
// FREE-NOT: %[[F1]]{{[ ,]}}
// FREE: train.gelu_grad
// FREE-NEXT: %[[B1:.*]] = shard.all_gather %{{.*}} : tensor<32xf32> -> tensor<128xf32>
// FREE-NEXT: %[[G1:.*]] = train.reshape %[[B1]] : tensor<128xf32> -> tensor<8x16xf32>
// FREE-NEXT: train.matmul %{{.*}}, %[[G1]] {transpose_rhs}
// FREE-NOT: %[[G1]]{{[ ,]}}
// FREE: return

// PREFETCH-LABEL: func.func @train_step
// PREFETCH-NEXT: shard.all_gather %{{.*}} : tensor<32xf32> -> tensor<128xf32>
// PREFETCH-NEXT: train.reshape {{.*}} -> tensor<8x16xf32>
// PREFETCH-NEXT: shard.all_gather %{{.*}} : tensor<32xf32> -> tensor<128xf32>
// PREFETCH-NEXT: train.reshape {{.*}} -> tensor<16x8xf32>
// PREFETCH-NEXT: train.matmul
// PREFETCH-NEXT: train.gelu
// PREFETCH-NEXT: train.matmul
// PREFETCH: train.cross_entropy_grad
// PREFETCH-NEXT: shard.all_gather
// PREFETCH-NEXT: train.reshape {{.*}} -> tensor<8x16xf32>
// PREFETCH-NEXT: train.matmul

// The gathered weights have their own line: at most both tensors (the
// prefetch) unpadded, 2 x 512 B, and one padded as gathered, 516 B. Each
// 128-element tensor is held as 43-element shards on 3 ranks, one zero of
// padding per tensor: 2 weights + 4 states = 6 elements, 24 B.
// REPORT3: gathered {{ *[0-9]+ *}} 1540
// REPORT3: zero       stage 3, 3 ranks
// REPORT3: padding    6 elements, 24 B over all ranks' shards (8.0 B per rank; in the categories above)
// REPORT3: communication data        all_gather           3 ops                  258 elements                 1032 B per rank and step

func.func @forward(%x: tensor<4x8xf32> {train.input = "activations"}, %tokens: tensor<2x2xi32> {train.input = "tokens"}, %w1: tensor<8x16xf32> {train.param = "w1", train.init = #train.init<normal, std = 0.02>}, %w2: tensor<16x8xf32> {train.param = "w2", train.init = #train.init<normal, std = 0.02>}, %t: tensor<4xi32> {train.input = "targets"}) -> tensor<f32> {
  %h = train.matmul %x, %w1 : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  %a = train.gelu %h : tensor<4x16xf32>
  %y = train.matmul %a, %w2 : tensor<4x16xf32>, tensor<16x8xf32> -> tensor<4x8xf32>
  %sum, %count = train.cross_entropy %y, %t {ignore_index = -100 : i64} : tensor<4x8xf32>, tensor<4xi32> -> tensor<f32>, tensor<i64>
  %l = train.mean_loss %sum, %count : tensor<f32>, tensor<i64>
  return %l : tensor<f32>
}
