// RUN: trainmem-opt %s -train-tensor-parallel="size=2 sequence-parallel=true vocabulary-parallel=false" 2>/dev/null | FileCheck %s
// RUN: trainmem-opt %s -train-tensor-parallel="size=2 sequence-parallel=true vocabulary-parallel=false" -train-autodiff="optimizer=none" 2>/dev/null | FileCheck %s --check-prefix=GRAD
// RUN: trainmem-opt %s -train-tensor-parallel="size=2 sequence-parallel=true vocabulary-parallel=false" -train-autodiff -train-memory-report="output=-" -o /dev/null 2>/dev/null | FileCheck %s --check-prefix=REPORT
//
// Megatron's sequence parallelism on one layer (a norm, an MLP, its
// residual) between an embedding and a head: the residual stream [2, 4, 6]
// is split along the sequence (dimension 1) into [2, 2, 6] pieces.

// The norm's weight, the bias after the rows and the head's weight enter
// through f (their gradients are each rank's positions' parts).
// CHECK-LABEL: func.func @forward
// CHECK-DAG: %[[TARGETS:.*]] = shard.all_slice %arg1 on @tp grid_axes = [1] slice_axis = 1 : tensor<2x4xi32> -> tensor<2x2xi32>
// CHECK-DAG: %[[WTE:.*]] = train.grad_all_reduce %arg2 on @tp grid_axes = [1] : tensor<8x6xf32>
// CHECK-DAG: %[[GAMMA:.*]] = train.grad_all_reduce %arg3 on @tp grid_axes = [1] : tensor<6xf32>
// CHECK-DAG: %[[BIAS:.*]] = train.grad_all_reduce %arg6 on @tp grid_axes = [1] : tensor<6xf32>
// The embedding's result: this rank's piece of the sequence.
// CHECK: train.block embedding -> tensor<2x2x6xf32>
// CHECK: shard.all_slice %{{.*}} on @tp grid_axes = [1] slice_axis = 1 : tensor<2x4x6xf32> -> tensor<2x2x6xf32>
// The norm on the piece; the piece gathered (not f) for the columns.
// CHECK: train.block mlp layer 0 -> tensor<2x2x6xf32>
// CHECK: %[[LN:.*]] = train.layer_norm %{{.*}}, %[[GAMMA]], %{{.*}} : tensor<2x2x6xf32>
// CHECK: %[[WHOLE:.*]] = shard.all_gather %[[LN]] on @tp grid_axes = [1] gather_axis = 1 : tensor<2x2x6xf32> -> tensor<2x4x6xf32>
// CHECK: train.matmul %[[WHOLE]], %arg4 : tensor<2x4x6xf32>, tensor<6x2xf32> -> tensor<2x4x2xf32>
// The rows' partial products reduce-scattered (not g), then the bias,
// the dropout (drawing its piece of the whole mask) and the residual on
// the piece.
// CHECK: %[[ROWS:.*]] = train.matmul %{{.*}}, %arg5 : tensor<2x4x2xf32>, tensor<2x6xf32> -> tensor<2x4x6xf32>
// CHECK: %[[PIECE:.*]] = shard.reduce_scatter %[[ROWS]] on @tp grid_axes = [1] scatter_axis = 1 : tensor<2x4x6xf32> -> tensor<2x2x6xf32>
// CHECK: train.bias_add %[[PIECE]], %[[BIAS]] : tensor<2x2x6xf32>, tensor<6xf32>
// CHECK: train.dropout %{{.*}} {offset = 1 : i64, rate = 1.000000e-01 : f64, seed = 0 : i64, split = #train.split<dim = 1, parts = 2, grid = @tp, axis = 1>} : tensor<2x2x6xf32> -> tensor<2x2x6xi1>
// CHECK: train.add %{{.*}} : tensor<2x2x6xf32>
// The head on the piece: its loss and token count summed over the group.
// CHECK: train.block head
// CHECK: train.matmul %{{.*}}, %[[WTE]] {transpose_rhs} : tensor<2x2x6xf32>, tensor<8x6xf32> -> tensor<2x2x8xf32>
// CHECK: %[[SUM:.*]], %[[COUNT:.*]] = train.cross_entropy %{{.*}}, %[[TARGETS]] {ignore_index = -100 : i64} : tensor<2x2x8xf32>, tensor<2x2xi32>
// CHECK: %[[LOSS:.*]] = shard.all_reduce %[[SUM]] on @tp grid_axes = [1] : tensor<f32> -> tensor<f32>
// CHECK: %[[TOKENS:.*]] = shard.all_reduce %[[COUNT]] on @tp grid_axes = [1] : tensor<i64> -> tensor<i64>
// CHECK: train.mean_loss %[[LOSS]], %[[TOKENS]]

// The backward: the reduce-scatter's gradient gathered, the piece gathered
// again for the columns' weight gradients (each rank keeps its piece, not
// the gathered input), the gather's gradient reduce-scattered, the slice's
// gathered; f's gradients all-reduced.
// GRAD-LABEL: func.func @train_step
// GRAD: train.block mlp layer 0 backward
// GRAD: shard.all_gather %{{.*}} on @tp grid_axes = [1] gather_axis = 1 : tensor<2x2x6xf32> -> tensor<2x4x6xf32>
// GRAD: %[[AGAIN:.*]] = shard.all_gather %{{.*}} on @tp grid_axes = [1] gather_axis = 1 : tensor<2x2x6xf32> -> tensor<2x4x6xf32>
// GRAD: %[[ROWS:.*]] = train.reshape %[[AGAIN]] : tensor<2x4x6xf32> -> tensor<8x6xf32>
// GRAD: train.matmul %[[ROWS]], %{{.*}} {transpose_lhs} : tensor<8x6xf32>, tensor<8x2xf32> -> tensor<6x2xf32>
// GRAD: shard.reduce_scatter %{{.*}} on @tp grid_axes = [1] scatter_axis = 1 : tensor<2x4x6xf32> -> tensor<2x2x6xf32>
// GRAD: train.block embedding backward
// GRAD: shard.all_gather %{{.*}} on @tp grid_axes = [1] gather_axis = 1 : tensor<2x2x6xf32> -> tensor<2x4x6xf32>
// GRAD: shard.all_reduce %{{.*}} on @tp grid_axes = [1] : tensor<6xf32> -> tensor<6xf32>
func.func @forward(%tokens: tensor<2x4xi32> {train.input = "tokens"},
                   %targets: tensor<2x4xi32> {train.input = "targets"},
                   %wte: tensor<8x6xf32> {train.param = "wte"},
                   %gamma: tensor<6xf32> {train.param = "ln.weight"},
                   %fc: tensor<6x4xf32> {train.param = "fc.weight"},
                   %proj: tensor<4x6xf32> {train.param = "proj.weight"},
                   %bias: tensor<6xf32> {train.param = "proj.bias"},
                   %beta: tensor<6xf32> {train.param = "ln.bias"}) -> tensor<f32> {
  %x = train.block embedding -> tensor<2x4x6xf32> {
    %e = train.embedding %wte, %tokens : tensor<8x6xf32>, tensor<2x4xi32> -> tensor<2x4x6xf32>
    train.yield %e : tensor<2x4x6xf32>
  }
  %y = train.block mlp layer 0 -> tensor<2x4x6xf32> {
    %n = train.layer_norm %x, %gamma, %beta {epsilon = 1.0e-05 : f64} : tensor<2x4x6xf32>, tensor<6xf32>, tensor<6xf32>
    %h = train.matmul %n, %fc : tensor<2x4x6xf32>, tensor<6x4xf32> -> tensor<2x4x4xf32>
    %a = train.gelu %h : tensor<2x4x4xf32>
    %p = train.matmul %a, %proj : tensor<2x4x4xf32>, tensor<4x6xf32> -> tensor<2x4x6xf32>
    %b = train.bias_add %p, %bias : tensor<2x4x6xf32>, tensor<6xf32>
    %d, %mask = train.dropout %b {rate = 0.1 : f64, seed = 0 : i64, offset = 1 : i64} : tensor<2x4x6xf32> -> tensor<2x4x6xi1>
    %r = train.add %x, %d : tensor<2x4x6xf32>
    train.yield %r : tensor<2x4x6xf32>
  }
  %loss = train.block head -> tensor<f32> {
    %logits = train.matmul %y, %wte {transpose_rhs} : tensor<2x4x6xf32>, tensor<8x6xf32> -> tensor<2x4x8xf32>
    %sum, %count = train.cross_entropy %logits, %targets {ignore_index = -100 : i64} : tensor<2x4x8xf32>, tensor<2x4xi32> -> tensor<f32>, tensor<i64>
    %mean = train.mean_loss %sum, %count : tensor<f32>, tensor<i64>
    train.yield %mean : tensor<f32>
  }
  return %loss : tensor<f32>
}

// The report's communication by axis, per rank and step, f32: each
// all-gather and reduce-scatter of the [2, 4, 6] stream sends half of it
// (24 elements): 4 gathers (the MLP's input, again in the backward, the
// reduce-scatter's gradient, the embedding slice's gradient), 2
// reduce-scatters (the rows, the gather's gradient); the all-reduces sum
// f's gradients (wte 48, three vectors of 6: each 2 x half) and the loss's
// sum and count (2 elements each, i64 count: 8 B).
// REPORT: tensor     2 ranks per tensor-parallel group (per rank above)
// REPORT: communication tensor      all_gather           4 ops                   96 elements                  384 B per rank and step
// REPORT: communication tensor      all_reduce           6 ops                   70 elements                  288 B per rank and step
// REPORT: communication tensor      all_slice            2 ops                    0 elements                    0 B per rank and step
// REPORT: communication tensor      reduce_scatter       2 ops                   48 elements                  192 B per rank and step
