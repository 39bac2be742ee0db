// Megatron's MLP split over a tensor-parallel group of 2: the first matmuls
// by columns, the last by rows; f (train.grad_all_reduce) where the block's
// input enters the split part, g (shard.all_reduce of the partial
// products) before the last bias; the split parameters one rank's part,
// marked #train.split. The grid is data x tensor. These functions' heads
// are not a matmul by a weight: they keep the vocabulary whole
// (train-tensor-parallel-vocabulary.mlir splits it).
// RUN: trainmem-opt %s -split-input-file -train-tensor-parallel="size=2 vocabulary-parallel=false" 2>/dev/null | FileCheck %s
// RUN: trainmem-opt %s -split-input-file -train-tensor-parallel="size=2 data=3 vocabulary-parallel=false" 2>/dev/null | FileCheck %s --check-prefix=GRID
//
// train-autodiff builds the conjugates: the gradient of the block's input
// summed over the group (f's VJP), the partial products' gradient passed
// on as it is (g's).
// RUN: trainmem-opt %s -split-input-file -train-tensor-parallel="size=2 vocabulary-parallel=false" -train-autodiff 2>/dev/null | FileCheck %s --check-prefix=BACKWARD
//
// Clipping and loss scaling agree over the group: the global norm is the
// split gradients' squared norm summed over the tensor axis plus the whole
// ones' (counted once); the unscale's overflow check takes the split
// gradients' sum too, so every rank skips or clips alike.
// RUN: trainmem-opt %s -split-input-file -train-tensor-parallel="size=2 vocabulary-parallel=false" -train-autodiff="clip-norm=1.0" -train-loss-scale 2>/dev/null | FileCheck %s --check-prefix=CLIP
//
// ZeRO over the grid's data axis: train-zero{ranks=2} grows @tp to 2 x 2,
// scatters and gathers over axis 0, and sums the split gradients' squared
// norms over both axes, the whole ones' over the data axis.
// RUN: trainmem-opt %s -split-input-file -train-tensor-parallel="size=2 vocabulary-parallel=false" -train-autodiff="clip-norm=1.0" -train-zero="ranks=2 stage=2" 2>/dev/null | FileCheck %s --check-prefix=ZERO
// The report counts what each rank sends by axis: ZeRO's gathers and
// scatters over the data axis, the clip's split norms over both, the
// conjugates' sums over the tensor axis (the first function's figures).
// RUN: trainmem-opt %s -split-input-file -train-tensor-parallel="size=2 vocabulary-parallel=false" -train-autodiff="clip-norm=1.0" -train-zero="ranks=2 stage=2" -train-memory-report="output=-" -o /dev/null 2>/dev/null | FileCheck %s --check-prefix=AXES
// AXES-LABEL: memory of @train_step
// AXES: zero       stage 2, 2 ranks
// AXES: tensor     2 ranks per tensor-parallel group (per rank above)
// AXES: communication data        all_gather           6 ops                  148 elements                  592 B per rank and step
// AXES: communication data        reduce_scatter       6 ops                  148 elements                  592 B per rank and step
// AXES: communication data+tensor all_reduce           1 ops                   36 elements                  288 B per rank and step
// AXES: communication tensor      all_reduce           2 ops                  128 elements                  512 B per rank and step
//
// What stays whole is said (and without vocabulary-parallel=false, the
// head that is not a matmul by a weight is refused).
// RUN: trainmem-opt %s -split-input-file -train-tensor-parallel="size=2 vocabulary-parallel=false" -o /dev/null 2>&1 | FileCheck %s --check-prefix=REMARK
// RUN: not trainmem-opt %s -split-input-file -train-tensor-parallel="size=2" -o /dev/null 2>&1 | FileCheck %s --check-prefix=NOHEAD
// NOHEAD: error: train-tensor-parallel: the cross-entropy's logits are not the product of a matmul by a weight that it alone reads; vocabulary parallelism splits that weight (vocabulary-parallel=false keeps the head whole)
//
// One rank is the model as it is.
// RUN: trainmem-opt %s -split-input-file -o %t.plain.mlir
// RUN: trainmem-opt %s -split-input-file -train-tensor-parallel="size=1" -o %t.one.mlir
// RUN: diff %t.plain.mlir %t.one.mlir

// GELU: fc [8, 32] by columns (and its bias), proj [32, 8] by rows.
// CHECK: shard.grid @tp(shape = 1x2)
// CHECK-LABEL: func.func @forward
// CHECK-SAME: %[[FC:[^:]*]]: tensor<8x16xf32> {train.param = "fc.weight", train.tensor_split = #train.split<dim = 1, parts = 2, grid = @tp, axis = 1>}
// CHECK-SAME: %[[FCB:[^:]*]]: tensor<16xf32> {train.param = "fc.bias", train.tensor_split = #train.split<dim = 0, parts = 2, grid = @tp, axis = 1>}
// CHECK-SAME: %[[PROJ:[^:]*]]: tensor<16x8xf32> {train.param = "proj.weight", train.tensor_split = #train.split<dim = 0, parts = 2, grid = @tp, axis = 1>}
// CHECK-SAME: %[[PB:[^:]*]]: tensor<8xf32> {train.param = "proj.bias"}
// CHECK: train.block mlp
// CHECK: %[[IN:.*]] = train.grad_all_reduce %{{.*}} on @tp grid_axes = [1] : tensor<2x4x8xf32>
// CHECK-NEXT: %[[H:.*]] = train.matmul %[[IN]], %[[FC]] : tensor<2x4x8xf32>, tensor<8x16xf32> -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[HB:.*]] = train.bias_add %[[H]], %[[FCB]] : tensor<2x4x16xf32>, tensor<16xf32>
// CHECK-NEXT: %[[G:.*]] = train.gelu %[[HB]] : tensor<2x4x16xf32>
// CHECK-NEXT: %[[P:.*]] = train.matmul %[[G]], %[[PROJ]] : tensor<2x4x16xf32>, tensor<16x8xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[SUM:.*]] = shard.all_reduce %[[P]] on @tp grid_axes = [1] : tensor<2x4x8xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT: train.bias_add %[[SUM]], %[[PB]] : tensor<2x4x8xf32>, tensor<8xf32>
// GRID: shard.grid @tp(shape = 3x2)
// BACKWARD-LABEL: func.func @train_step
// BACKWARD: train.grad_all_reduce
// BACKWARD: shard.all_reduce %{{.*}} on @tp grid_axes = [1] : tensor<2x4x8xf32>
// BACKWARD: shard.all_reduce %{{.*}} on @tp grid_axes = [1] : tensor<2x4x8xf32>
// BACKWARD: train.layer_norm_grad
// REMARK: remark: train-tensor-parallel: the head blocks' weights stay whole on every rank (vocabulary-parallel=false)
// ZERO: shard.grid @tp(shape = 2x2)
// ZERO-LABEL: func.func @train_step
// ZERO: shard.reduce_scatter %{{.*}} on @tp grid_axes = [0] reduction =  average scatter_axis = 0
// ZERO: %[[SPLIT:.*]] = train.squared_norm %{{.*}} -> tensor<24xi64>
// ZERO-NEXT: %[[BOTH:.*]] = shard.all_reduce %[[SPLIT]] on @tp grid_axes = [0, 1] : tensor<24xi64> -> tensor<24xi64>
// ZERO-NEXT: %[[WHOLE:.*]] = train.squared_norm %{{.*}} -> tensor<24xi64>
// ZERO-NEXT: %[[DATA:.*]] = shard.all_reduce %[[WHOLE]] on @tp grid_axes = [0] : tensor<24xi64> -> tensor<24xi64>
// ZERO-NEXT: train.clip_grad_norm {{.*}} squared_norm(%[[BOTH]], %[[DATA]])
// ZERO: shard.all_gather %{{.*}} on @tp grid_axes = [0] gather_axis = 0
// CLIP-LABEL: func.func @train_step
// CLIP: train.block optimizer
// CLIP-NEXT: %[[SPLIT:.*]] = train.squared_norm %[[G4:[^,]*]], %[[G5:[^,]*]], %[[G6:[^ ]*]] : tensor<8x16xf32>, tensor<16xf32>, tensor<16x8xf32> -> tensor<24xi64>
// CLIP-NEXT: %[[GROUP:.*]] = shard.all_reduce %[[SPLIT]] on @tp grid_axes = [1] : tensor<24xi64> -> tensor<24xi64>
// CLIP-NEXT: %[[U:.*]]:6, %{{.*}} = train.unscale_gradients {{.*}} squared_norm(%[[GROUP]] : tensor<24xi64>)
// CLIP: %[[SPLIT2:.*]] = train.squared_norm %[[U]]#2, %[[U]]#3, %[[U]]#4 : tensor<8x16xf32>, tensor<16xf32>, tensor<16x8xf32> -> tensor<24xi64>
// CLIP-NEXT: %[[GROUP2:.*]] = shard.all_reduce %[[SPLIT2]] on @tp grid_axes = [1] : tensor<24xi64> -> tensor<24xi64>
// CLIP-NEXT: %[[WHOLE:.*]] = train.squared_norm %[[U]]#0, %[[U]]#1, %[[U]]#5 : tensor<8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<24xi64>
// CLIP-NEXT: train.clip_grad_norm %[[U]]#0, %[[U]]#1, %[[U]]#2, %[[U]]#3, %[[U]]#4, %[[U]]#5 squared_norm(%[[GROUP2]], %[[WHOLE]]) {max_norm = 1.000000e+00 : f64}
func.func @forward(%x: tensor<2x4x8xf32> {train.input = "x"},
                   %t: tensor<2x4xi32> {train.input = "targets"},
                   %g: tensor<8xf32> {train.param = "ln.weight"},
                   %b: tensor<8xf32> {train.param = "ln.bias"},
                   %fc: tensor<8x32xf32> {train.param = "fc.weight"},
                   %fcb: tensor<32xf32> {train.param = "fc.bias"},
                   %proj: tensor<32x8xf32> {train.param = "proj.weight"},
                   %pb: tensor<8xf32> {train.param = "proj.bias"}) -> tensor<f32> {
  %y = train.block mlp layer 0 -> tensor<2x4x8xf32> {
    %n = train.layer_norm %x, %g, %b {epsilon = 1.0e-05 : f64} : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
    %h = train.matmul %n, %fc : tensor<2x4x8xf32>, tensor<8x32xf32> -> tensor<2x4x32xf32>
    %hb = train.bias_add %h, %fcb : tensor<2x4x32xf32>, tensor<32xf32>
    %a = train.gelu %hb : tensor<2x4x32xf32>
    %p = train.matmul %a, %proj : tensor<2x4x32xf32>, tensor<32x8xf32> -> tensor<2x4x8xf32>
    %pbias = train.bias_add %p, %pb : tensor<2x4x8xf32>, tensor<8xf32>
    %r = train.add %x, %pbias : tensor<2x4x8xf32>
    train.yield %r : tensor<2x4x8xf32>
  }
  %loss = train.block head -> tensor<f32> {
    %sum, %count = train.cross_entropy %y, %t {ignore_index = -100 : i64} : tensor<2x4x8xf32>, tensor<2x4xi32> -> tensor<f32>, tensor<i64>
    %l = train.mean_loss %sum, %count : tensor<f32>, tensor<i64>
    train.yield %l : tensor<f32>
  }
  return %loss : tensor<f32>
}

// -----

// SwiGLU: gate and up [8, 24] by columns, one f for both, down by rows.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: tensor<8x12xf32> {train.param = "gate", train.tensor_split = #train.split<dim = 1, parts = 2, grid = @tp, axis = 1>}
// CHECK-SAME: tensor<8x12xf32> {train.param = "up", train.tensor_split = #train.split<dim = 1, parts = 2, grid = @tp, axis = 1>}
// CHECK-SAME: tensor<12x8xf32> {train.param = "down", train.tensor_split = #train.split<dim = 0, parts = 2, grid = @tp, axis = 1>}
// CHECK: %[[IN:.*]] = train.grad_all_reduce
// CHECK-NOT: train.grad_all_reduce
// CHECK: train.matmul %[[IN]], %{{.*}} -> tensor<2x4x12xf32>
// CHECK: train.matmul %[[IN]], %{{.*}} -> tensor<2x4x12xf32>
// CHECK: train.silu %{{.*}} : tensor<2x4x12xf32>
// CHECK: train.mul %{{.*}}, %{{.*}} : tensor<2x4x12xf32>
// CHECK: %[[D:.*]] = train.matmul %{{.*}}, %{{.*}} : tensor<2x4x12xf32>, tensor<12x8xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT: shard.all_reduce %[[D]] on @tp grid_axes = [1]
func.func @forward(%x: tensor<2x4x8xf32> {train.input = "x"},
                   %t: tensor<2x4xi32> {train.input = "targets"},
                   %gate: tensor<8x24xf32> {train.param = "gate"},
                   %up: tensor<8x24xf32> {train.param = "up"},
                   %down: tensor<24x8xf32> {train.param = "down"}) -> tensor<f32> {
  %y = train.block mlp layer 0 -> tensor<2x4x8xf32> {
    %gt = train.matmul %x, %gate : tensor<2x4x8xf32>, tensor<8x24xf32> -> tensor<2x4x24xf32>
    %u = train.matmul %x, %up : tensor<2x4x8xf32>, tensor<8x24xf32> -> tensor<2x4x24xf32>
    %s = train.silu %gt : tensor<2x4x24xf32>
    %m = train.mul %s, %u : tensor<2x4x24xf32>
    %d = train.matmul %m, %down : tensor<2x4x24xf32>, tensor<24x8xf32> -> tensor<2x4x8xf32>
    train.yield %d : tensor<2x4x8xf32>
  }
  %loss = train.block head -> tensor<f32> {
    %sum, %count = train.cross_entropy %y, %t {ignore_index = -100 : i64} : tensor<2x4x8xf32>, tensor<2x4xi32> -> tensor<f32>, tensor<i64>
    %l = train.mean_loss %sum, %count : tensor<f32>, tensor<i64>
    train.yield %l : tensor<f32>
  }
  return %loss : tensor<f32>
}

// -----

// Attention: q, k and v by heads (2 heads of 4 on 2 ranks: one each), the
// views, scores, softmax and product on a rank's heads, the output
// projection by rows.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: tensor<8x4xf32> {train.param = "q", train.tensor_split = #train.split<dim = 1, parts = 2, grid = @tp, axis = 1>}
// CHECK-SAME: tensor<8x4xf32> {train.param = "k", train.tensor_split = #train.split<dim = 1, parts = 2, grid = @tp, axis = 1>}
// CHECK-SAME: tensor<8x4xf32> {train.param = "v", train.tensor_split = #train.split<dim = 1, parts = 2, grid = @tp, axis = 1>}
// CHECK-SAME: tensor<4x8xf32> {train.param = "o", train.tensor_split = #train.split<dim = 0, parts = 2, grid = @tp, axis = 1>}
// CHECK: train.block attention
// CHECK: train.reshape %{{.*}} : tensor<1x4x4xf32> -> tensor<1x4x1x4xf32>
// CHECK: train.transpose %{{.*}} : tensor<1x4x1x4xf32> -> tensor<1x1x4x4xf32>
// CHECK: train.softmax %{{.*}} {causal} : tensor<1x1x4x4xf32>
// CHECK: train.reshape %{{.*}} : tensor<1x4x1x4xf32> -> tensor<1x4x4xf32>
// CHECK: %[[O:.*]] = train.matmul %{{.*}}, %{{.*}} : tensor<1x4x4xf32>, tensor<4x8xf32> -> tensor<1x4x8xf32>
// CHECK-NEXT: shard.all_reduce %[[O]] on @tp grid_axes = [1]
func.func @forward(%x: tensor<1x4x8xf32> {train.input = "x"},
                   %t: tensor<1x4xi32> {train.input = "targets"},
                   %wq: tensor<8x8xf32> {train.param = "q"},
                   %wk: tensor<8x8xf32> {train.param = "k"},
                   %wv: tensor<8x8xf32> {train.param = "v"},
                   %wo: tensor<8x8xf32> {train.param = "o"}) -> tensor<f32> {
  %y = train.block attention layer 0 -> tensor<1x4x8xf32> {
    %q = train.matmul %x, %wq : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32>
    %k = train.matmul %x, %wk : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32>
    %v = train.matmul %x, %wv : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32>
    %qh = train.reshape %q : tensor<1x4x8xf32> -> tensor<1x4x2x4xf32>
    %qt = train.transpose %qh {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x4x2x4xf32> -> tensor<1x2x4x4xf32>
    %kh = train.reshape %k : tensor<1x4x8xf32> -> tensor<1x4x2x4xf32>
    %kt = train.transpose %kh {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x4x2x4xf32> -> tensor<1x2x4x4xf32>
    %vh = train.reshape %v : tensor<1x4x8xf32> -> tensor<1x4x2x4xf32>
    %vt = train.transpose %vh {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x4x2x4xf32> -> tensor<1x2x4x4xf32>
    %s = train.matmul %qt, %kt {transpose_rhs} : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32> -> tensor<1x2x4x4xf32>
    %p = train.softmax %s {causal} : tensor<1x2x4x4xf32>
    %o = train.matmul %p, %vt : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32> -> tensor<1x2x4x4xf32>
    %ot = train.transpose %o {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x2x4x4xf32> -> tensor<1x4x2x4xf32>
    %or = train.reshape %ot : tensor<1x4x2x4xf32> -> tensor<1x4x8xf32>
    %out = train.matmul %or, %wo : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32>
    train.yield %out : tensor<1x4x8xf32>
  }
  %loss = train.block head -> tensor<f32> {
    %sum, %count = train.cross_entropy %y, %t {ignore_index = -100 : i64} : tensor<1x4x8xf32>, tensor<1x4xi32> -> tensor<f32>, tensor<i64>
    %l = train.mean_loss %sum, %count : tensor<f32>, tensor<i64>
    train.yield %l : tensor<f32>
  }
  return %loss : tensor<f32>
}
