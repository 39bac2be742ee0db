// RUN: trainmem-opt %s -train-quantize-optimizer-state='block=64 min-size=256' | FileCheck %s

// SGD with momentum: the buffer becomes codes on the signed map plus one
// absmax per block of 64; plain SGD (no state) and small tensors are left.

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[W:[^:]+]]: tensor<16x16xf32> {train.param = "w"}
// CHECK-SAME: %[[C:[^:]+]]: tensor<16x16xi8> {train.optimizer_state = #train.state<"w", momentum, codes, signed_dynamic, block = 64>}, %[[A:[^:]+]]: tensor<4xf32> {train.optimizer_state = #train.state<"w", momentum, absmax, signed_dynamic, block = 64>}
// CHECK-SAME: %{{[^:]+}}: tensor<16xf32> {train.optimizer_state = #train.state<"b", momentum>}
// CHECK-SAME: -> (tensor<16x16xf32> {train.param = "w"}, tensor<16x16xi8> {train.optimizer_state = #train.state<"w", momentum, codes, signed_dynamic, block = 64>}, tensor<4xf32> {train.optimizer_state = #train.state<"w", momentum, absmax, signed_dynamic, block = 64>}, tensor<16xf32> {train.param = "b"}, tensor<16xf32> {train.optimizer_state = #train.state<"b", momentum>}, tensor<16x16xf32> {train.param = "u"})
// CHECK: %[[P:[^,]+]], %[[NC:[^,]+]], %[[NA:[^ ]+]] = train.sgd_8bit %[[W]], %{{.+}}, %[[C]], %[[A]], %{{.+}} {block = 64 : i64, momentum = 9.000000e-01 : f64, nesterov, weight_decay = 1.000000e-02 : f64} : tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xi8>, tensor<4xf32>, tensor<f32>
// CHECK: train.sgd %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} {momentum
// CHECK: train.sgd %{{.+}}, %{{.+}}, %{{.+}} {momentum = 0.000000e+00
// CHECK: return %[[P]], %[[NC]], %[[NA]],
func.func @train_step(%w: tensor<16x16xf32> {train.param = "w"},
                      %b: tensor<16xf32> {train.param = "b"},
                      %u: tensor<16x16xf32> {train.param = "u"},
                      %wb: tensor<16x16xf32> {train.optimizer_state = #train.state<"w", momentum>},
                      %bb: tensor<16xf32> {train.optimizer_state = #train.state<"b", momentum>})
    -> (tensor<16x16xf32> {train.param = "w"},
        tensor<16x16xf32> {train.optimizer_state = #train.state<"w", momentum>},
        tensor<16xf32> {train.param = "b"},
        tensor<16xf32> {train.optimizer_state = #train.state<"b", momentum>},
        tensor<16x16xf32> {train.param = "u"}) attributes {train.step} {
  %lr = arith.constant dense<0.1> : tensor<f32>
  %gw = arith.constant dense<0.5> : tensor<16x16xf32>
  %gb = arith.constant dense<0.5> : tensor<16xf32>
  %p, %pb = train.sgd %w, %gw, %lr, %wb {momentum = 0.9 : f64, weight_decay = 0.01 : f64, nesterov} : (tensor<16x16xf32>, tensor<16x16xf32>, tensor<f32>, tensor<16x16xf32>) -> (tensor<16x16xf32>, tensor<16x16xf32>)
  %q, %qb = train.sgd %b, %gb, %lr, %bb {momentum = 0.9 : f64, weight_decay = 0.0 : f64} : (tensor<16xf32>, tensor<16xf32>, tensor<f32>, tensor<16xf32>) -> (tensor<16xf32>, tensor<16xf32>)
  %r = train.sgd %u, %gw, %lr {momentum = 0.0 : f64, weight_decay = 0.0 : f64} : (tensor<16x16xf32>, tensor<16x16xf32>, tensor<f32>) -> tensor<16x16xf32>
  return %p, %pb, %q, %qb, %r : tensor<16x16xf32>, tensor<16x16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16x16xf32>
}
