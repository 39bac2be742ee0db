// RUN: trainmem-opt %s -split-input-file -convert-train-to-runtime | FileCheck %s --implicit-check-not=shard.
// RUN: trainmem-opt %s -split-input-file -convert-train-to-runtime -convert-to-llvm -reconcile-unrealized-casts -o /dev/null

// The shard collectives of a partitioned step are calls into the runtime's
// rings; the grid goes with them, and the lowered step says how many ranks
// it runs on. A reduce-scatter whose operand dies there may work in place.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: tmrt.ranks = 4 : i64
// CHECK: call @tmrt_all_reduce(%{{.*}}, %{{.*}}, %{{.*}}, %c8_i64, %c1_i64)
// CHECK: call @tmrt_reduce_scatter(%{{.*}}, %{{.*}}, %{{.*}}, %c2_i64{{.*}}, %c0_i64
// CHECK: call @tmrt_all_gather(%{{.*}}, %{{.*}}, %{{.*}}, %c2_i64
// CHECK: call @tmrt_all_slice(%{{.*}}, %{{.*}}, %{{.*}}, %c2_i64
shard.grid @dp(shape = 4)
func.func @train_step(%a: tensor<8xf32> {train.input = "a"}) -> (tensor<8xf32>, tensor<8xf32>, tensor<2xf32>) attributes {train.step, train.zero = #train.zero<stage = 1, ranks = 4, bucket = 100>} {
  %r = shard.all_reduce %a on @dp grid_axes = [0] reduction = average : tensor<8xf32> -> tensor<8xf32>
  %s = shard.reduce_scatter %r on @dp grid_axes = [0] scatter_axis = 0 : tensor<8xf32> -> tensor<2xf32>
  %g = shard.all_gather %s on @dp grid_axes = [0] gather_axis = 0 : tensor<2xf32> -> tensor<8xf32>
  %l = shard.all_slice %g on @dp grid_axes = [0] slice_axis = 0 : tensor<8xf32> -> tensor<2xf32>
  return %r, %g, %l : tensor<8xf32>, tensor<8xf32>, tensor<2xf32>
}
