// RUN: trainmem-opt %s -convert-train-to-runtime | FileCheck %s --implicit-check-not=train.

// A squared norm (ZeRO: one rank's part of the global gradient norm) is the
// clip's exact sum of squares stored as its 24 i64 words; a clip given its
// squared norm loads them instead of summing its operands. The ranks' sums
// add exactly, as integers.
// CHECK-LABEL: func.func @train_step
// CHECK:         call @tmrt_clip_begin(
// CHECK:         call @tmrt_clip_accumulate(%{{.*}}, %{{.*}}, %c8_i64)
// CHECK:         call @tmrt_clip_accumulate(%{{.*}}, %{{.*}}, %c4_i64)
// CHECK:         call @tmrt_clip_store_sum(%{{.*}}, %[[S:.*]]) :
// CHECK:         call @tmrt_all_reduce_i64(%{{.*}}, %{{.*}}, %{{.*}}, %c24_i64, %c2_i64, %c1_i64)
// CHECK-NOT:     call @tmrt_clip_accumulate(
// CHECK:         call @tmrt_clip_load_sum(
// CHECK:         call @tmrt_clip_finish(
// CHECK:         call @tmrt_clip_apply(
// CHECK:         return
shard.grid @dp(shape = 2)
func.func @train_step(%a: tensor<8xf32> {train.input = "a"},
                      %b: tensor<4xf32> {train.input = "b"}) -> (tensor<8xf32>, tensor<f32>) attributes {train.step} {
  %s = train.squared_norm %a, %b : tensor<8xf32>, tensor<4xf32> -> tensor<24xi64>
  %all = shard.all_reduce %s on @dp grid_axes = [0] : tensor<24xi64> -> tensor<24xi64>
  %c:2 = train.clip_grad_norm %a squared_norm(%all) {max_norm = 1.0 : f64} : (tensor<8xf32>, tensor<24xi64>) -> (tensor<8xf32>, tensor<f32>)
  return %c#0, %c#1 : tensor<8xf32>, tensor<f32>
}
