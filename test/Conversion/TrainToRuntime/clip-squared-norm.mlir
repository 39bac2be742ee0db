// RUN: trainmem-opt %s -convert-train-to-runtime | FileCheck %s --implicit-check-not=train.

// A squared norm (ZeRO: one rank's part of the global gradient norm) is the
// clip's sum of squares stored as an f32; a clip given its squared norm
// loads it instead of summing its operands.
// CHECK-LABEL: func.func @train_step
// CHECK:         call @tmrt_clip_begin(
// CHECK:         call @tmrt_clip_accumulate(%{{.*}}, %{{.*}}, %c8_i64)
// CHECK:         call @tmrt_clip_accumulate(%{{.*}}, %{{.*}}, %c4_i64)
// CHECK:         call @tmrt_clip_store_sum(%{{.*}}, %[[S:.*]]) :
// CHECK-NOT:     call @tmrt_clip_accumulate(
// CHECK:         call @tmrt_clip_load_sum(
// CHECK:         call @tmrt_clip_finish(
// CHECK:         call @tmrt_clip_apply(
// CHECK:         return
func.func @train_step(%a: tensor<8xf32> {train.input = "a"},
                      %b: tensor<4xf32> {train.input = "b"}) -> (tensor<8xf32>, tensor<f32>) attributes {train.step} {
  %s = train.squared_norm %a, %b : tensor<8xf32>, tensor<4xf32> -> tensor<f32>
  %c:2 = train.clip_grad_norm %a squared_norm(%s) {max_norm = 1.0 : f64} : (tensor<8xf32>, tensor<f32>) -> (tensor<8xf32>, tensor<f32>)
  return %c#0, %c#1 : tensor<8xf32>, tensor<f32>
}
