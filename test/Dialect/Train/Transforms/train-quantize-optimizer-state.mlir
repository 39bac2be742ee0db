// RUN: trainmem-opt %s -train-quantize-optimizer-state | FileCheck %s
// RUN: trainmem-opt %s -train-quantize-optimizer-state='block=2048' | FileCheck %s --check-prefix=BLOCK
// RUN: trainmem-opt %s -train-quantize-optimizer-state='min-size=100000' | FileCheck %s --check-prefix=NONE
// RUN: trainmem-opt %s -train-quantize-optimizer-state='min-size=64' | FileCheck %s --check-prefix=ALL

// A step with one 64x64 weight (4096 elements: 8-bit state at the default
// min-size) and one 64-element bias (f32 state).

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[W:[^:]+]]: tensor<64x64xf32> {train.param = "w"}
// CHECK-SAME: %[[MC:[^:]+]]: tensor<64x64xi8> {train.optimizer_state = #train.state<"w", m, codes, signed_dynamic, block = 256>}
// CHECK-SAME: %[[MA:[^:]+]]: tensor<16xf32> {train.optimizer_state = #train.state<"w", m, absmax, signed_dynamic, block = 256>}
// CHECK-SAME: %[[VC:[^:]+]]: tensor<64x64xi8> {train.optimizer_state = #train.state<"w", v, codes, unsigned_dynamic, block = 256>}
// CHECK-SAME: %[[VA:[^:]+]]: tensor<16xf32> {train.optimizer_state = #train.state<"w", v, absmax, unsigned_dynamic, block = 256>}
// CHECK-SAME: %[[BM:[^:]+]]: tensor<64xf32> {train.optimizer_state = #train.state<"b", m>}
// CHECK-SAME: %[[BV:[^:]+]]: tensor<64xf32> {train.optimizer_state = #train.state<"b", v>}
// CHECK-SAME: -> (tensor<f32> {train.loss}, tensor<64x64xf32> {train.param = "w"},
// CHECK-SAME: tensor<64x64xi8> {train.optimizer_state = #train.state<"w", m, codes, signed_dynamic, block = 256>}, tensor<16xf32> {train.optimizer_state = #train.state<"w", m, absmax, signed_dynamic, block = 256>},
// CHECK-SAME: tensor<64x64xi8> {train.optimizer_state = #train.state<"w", v, codes, unsigned_dynamic, block = 256>}, tensor<16xf32> {train.optimizer_state = #train.state<"w", v, absmax, unsigned_dynamic, block = 256>},
// CHECK-SAME: tensor<64xf32> {train.param = "b"}, tensor<64xf32> {train.optimizer_state = #train.state<"b", m>}, tensor<64xf32> {train.optimizer_state = #train.state<"b", v>})
// CHECK: %[[OPT:.+]]:8 = train.block optimizer
// CHECK: %[[NP:[^,]+]], %[[NMC:[^,]+]], %[[NMA:[^,]+]], %[[NVC:[^,]+]], %[[NVA:[^ ]+]] = train.adamw_8bit %[[W]], %{{.+}}, %[[MC]], %[[MA]], %[[VC]], %[[VA]], %{{.+}}, %{{.+}} {beta1 = 9.000000e-01 : f64, beta2 = 0.9{{[0-9]+}} : f64, block = 256 : i64, epsilon = 1.000000e-08 : f64, weight_decay = 1.000000e-01 : f64}
// CHECK: %[[NB:[^,]+]], %[[NBM:[^,]+]], %[[NBV:[^ ]+]] = train.adamw %{{.+}}, %{{.+}}, %[[BM]], %[[BV]]
// CHECK-NOT: train.adamw
// CHECK: train.yield %[[NP]], %[[NB]], %[[NBM]], %[[NBV]], %[[NMC]], %[[NMA]], %[[NVC]], %[[NVA]] :
// CHECK: return %{{.+}}, %[[OPT]]#0, %[[OPT]]#4, %[[OPT]]#5, %[[OPT]]#6, %[[OPT]]#7, %[[OPT]]#1, %[[OPT]]#2, %[[OPT]]#3 :

// BLOCK: tensor<64x64xi8> {train.optimizer_state = #train.state<"w", m, codes, signed_dynamic, block = 2048>}, %{{.+}}: tensor<2xf32> {train.optimizer_state = #train.state<"w", m, absmax, signed_dynamic, block = 2048>}
// BLOCK: train.adamw_8bit {{.*}}block = 2048 : i64

// NONE-NOT: train.adamw_8bit
// NONE-NOT: codes

// ALL: tensor<64xi8> {train.optimizer_state = #train.state<"b", m, codes, signed_dynamic, block = 256>}, %{{.+}}: tensor<1xf32> {train.optimizer_state = #train.state<"b", m, absmax, signed_dynamic, block = 256>}
// ALL-COUNT-2: train.adamw_8bit
// ALL-NOT: train.adamw %


func.func @train_step(%x: tensor<64xf32> {train.input = "x"},
                      %w: tensor<64x64xf32> {train.param = "w"},
                      %b: tensor<64xf32> {train.param = "b"},
                      %step: tensor<i64> {train.input = "step"},
                      %wm: tensor<64x64xf32> {train.optimizer_state = #train.state<"w", m>},
                      %wv: tensor<64x64xf32> {train.optimizer_state = #train.state<"w", v>},
                      %bm: tensor<64xf32> {train.optimizer_state = #train.state<"b", m>},
                      %bv: tensor<64xf32> {train.optimizer_state = #train.state<"b", v>})
    -> (tensor<f32> {train.loss},
        tensor<64x64xf32> {train.param = "w"},
        tensor<64x64xf32> {train.optimizer_state = #train.state<"w", m>},
        tensor<64x64xf32> {train.optimizer_state = #train.state<"w", v>},
        tensor<64xf32> {train.param = "b"},
        tensor<64xf32> {train.optimizer_state = #train.state<"b", m>},
        tensor<64xf32> {train.optimizer_state = #train.state<"b", v>}) attributes {train.step} {
  %loss = arith.constant dense<1.0> : tensor<f32>
  %lr = arith.constant dense<1.0e-3> : tensor<f32>
  %gw = arith.constant dense<0.5> : tensor<64x64xf32>
  %r:6 = train.block optimizer -> tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32> {
    %p, %m, %v = train.adamw %w, %gw, %wm, %wv, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-08 : f64, weight_decay = 0.1 : f64} : tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<f32>, tensor<i64>
    %bp, %bm2, %bv2 = train.adamw %b, %x, %bm, %bv, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-08 : f64, weight_decay = 0.1 : f64} : tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<f32>, tensor<i64>
    train.yield %p, %m, %v, %bp, %bm2, %bv2 : tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>
  }
  return %loss, %r#0, %r#1, %r#2, %r#3, %r#4, %r#5 : tensor<f32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>
}
