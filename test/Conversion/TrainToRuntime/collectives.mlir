// RUN: trainmem-opt %s -split-input-file -convert-train-to-runtime | FileCheck %s --implicit-check-not=shard.
// RUN: trainmem-opt %s -split-input-file -convert-train-to-runtime -convert-to-llvm -reconcile-unrealized-casts -o /dev/null

// The shard collectives of a partitioned step are calls into the runtime's
// rings; the grid goes with them, and the lowered step says how many ranks
// it runs on. A reduce-scatter whose operand dies there may work in place.
// Each call ends with its process group: the whole grid of 4 ranks is the
// group of 4 ranks 1 apart.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: tmrt.ranks = 4 : i64
// CHECK: call @tmrt_all_reduce(%{{.*}}, %{{.*}}, %{{.*}}, %c8_i64{{[_0-9]*}}, %c1_i64{{[_0-9]*}}, %c4_i64{{[_0-9]*}}, %c1_i64{{[_0-9]*}})
// CHECK: call @tmrt_reduce_scatter(%{{.*}}, %{{.*}}, %{{.*}}, %c2_i64{{[_0-9]*}}, %c0_i64{{[_0-9]*}}, %c1_i64{{[_0-9]*}}, %c4_i64{{[_0-9]*}}, %c1_i64{{[_0-9]*}})
// CHECK: call @tmrt_all_gather(%{{.*}}, %{{.*}}, %{{.*}}, %c2_i64{{[_0-9]*}}, %c1_i64{{[_0-9]*}}, %c4_i64{{[_0-9]*}}, %c1_i64{{[_0-9]*}})
// CHECK: call @tmrt_all_slice(%{{.*}}, %{{.*}}, %{{.*}}, %c2_i64{{[_0-9]*}}, %c1_i64{{[_0-9]*}}, %c4_i64{{[_0-9]*}}, %c1_i64{{[_0-9]*}})
shard.grid @dp(shape = 4)
func.func @train_step(%a: tensor<8xf32> {train.input = "a"}) -> (tensor<8xf32>, tensor<8xf32>, tensor<2xf32>) attributes {train.step, train.zero = #train.zero<stage = 1, ranks = 4, bucket = 100>} {
  %r = shard.all_reduce %a on @dp grid_axes = [0] reduction = average : tensor<8xf32> -> tensor<8xf32>
  %s = shard.reduce_scatter %r on @dp grid_axes = [0] scatter_axis = 0 : tensor<8xf32> -> tensor<2xf32>
  %g = shard.all_gather %s on @dp grid_axes = [0] gather_axis = 0 : tensor<2xf32> -> tensor<8xf32>
  %l = shard.all_slice %g on @dp grid_axes = [0] slice_axis = 0 : tensor<8xf32> -> tensor<2xf32>
  return %r, %g, %l : tensor<8xf32>, tensor<8xf32>, tensor<2xf32>
}

// -----

// Sequence parallelism's collectives split [2, 4, 6] along dimension 1
// over 2 ranks: each rank's piece is 2 blocks (the batch rows) of 2 x 6;
// the runtime's `outer` is the 2 rows (n = 24 elements per piece). The
// targets' piece is an i32 slice.
// CHECK-LABEL: func.func @train_step
// CHECK: call @tmrt_all_slice(%{{.*}}, %{{.*}}, %{{.*}}, %c24_i64{{[_0-9]*}}, %c2_i64{{[_0-9]*}}, %c2_i64{{[_0-9]*}}, %c1_i64{{[_0-9]*}})
// CHECK: call @tmrt_all_gather(%{{.*}}, %{{.*}}, %{{.*}}, %c24_i64{{[_0-9]*}}, %c2_i64{{[_0-9]*}}, %c2_i64{{[_0-9]*}}, %c1_i64{{[_0-9]*}})
// CHECK: call @tmrt_reduce_scatter(%{{.*}}, %{{.*}}, %{{.*}}, %c24_i64{{[_0-9]*}}, %c0_i64{{[_0-9]*}}, %c2_i64{{[_0-9]*}}, %c2_i64{{[_0-9]*}}, %c1_i64{{[_0-9]*}})
// CHECK: call @tmrt_all_slice(%{{.*}}, %{{.*}}, %{{.*}}, %c4_i64{{[_0-9]*}}, %c2_i64{{[_0-9]*}}, %c2_i64{{[_0-9]*}}, %c1_i64{{[_0-9]*}})
shard.grid @tp(shape = 1x2)
func.func @train_step(%x: tensor<2x4x6xf32> {train.input = "x"}, %t: tensor<2x4xi32> {train.input = "targets"}) -> (tensor<2x2x6xf32>, tensor<2x2xi32>) attributes {train.step} {
  %piece = shard.all_slice %x on @tp grid_axes = [1] slice_axis = 1 : tensor<2x4x6xf32> -> tensor<2x2x6xf32>
  %whole = shard.all_gather %piece on @tp grid_axes = [1] gather_axis = 1 : tensor<2x2x6xf32> -> tensor<2x4x6xf32>
  %sum = shard.reduce_scatter %whole on @tp grid_axes = [1] scatter_axis = 1 : tensor<2x4x6xf32> -> tensor<2x2x6xf32>
  %targets = shard.all_slice %t on @tp grid_axes = [1] slice_axis = 1 : tensor<2x4xi32> -> tensor<2x2xi32>
  return %sum, %targets : tensor<2x2x6xf32>, tensor<2x2xi32>
}

// -----

// A (data, tensor) grid of 3 x 2 ranks, row-major: the tensor axis's
// groups are 2 ranks 1 apart, the data axis's 3 ranks 2 apart, both axes
// the 6 ranks.
// CHECK-LABEL: func.func @train_step
// CHECK: call @tmrt_all_reduce(%{{.*}}, %{{.*}}, %{{.*}}, %c8_i64{{[_0-9]*}}, %c0_i64{{[_0-9]*}}, %c2_i64{{[_0-9]*}}, %c1_i64{{[_0-9]*}})
// CHECK: call @tmrt_all_reduce(%{{.*}}, %{{.*}}, %{{.*}}, %c8_i64{{[_0-9]*}}, %c0_i64{{[_0-9]*}}, %c3_i64{{[_0-9]*}}, %c2_i64{{[_0-9]*}})
// CHECK: call @tmrt_all_reduce(%{{.*}}, %{{.*}}, %{{.*}}, %c8_i64{{[_0-9]*}}, %c0_i64{{[_0-9]*}}, %c6_i64{{[_0-9]*}}, %c1_i64{{[_0-9]*}})
shard.grid @grid(shape = 3x2)
func.func @train_step(%a: tensor<8xf32> {train.input = "a"}) -> tensor<8xf32> attributes {train.step} {
  %t = shard.all_reduce %a on @grid grid_axes = [1] : tensor<8xf32> -> tensor<8xf32>
  %d = shard.all_reduce %t on @grid grid_axes = [0] : tensor<8xf32> -> tensor<8xf32>
  %w = shard.all_reduce %d on @grid grid_axes = [0, 1] : tensor<8xf32> -> tensor<8xf32>
  return %w : tensor<8xf32>
}
