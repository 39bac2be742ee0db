// RUN: trainmem-opt %s -train-quantize-optimizer-state='min-size=16' | FileCheck %s

// State read by other ops as well: they read it dequantized (m with the
// signed map, v with the unsigned one), and the step returns 8-bit state.

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[MC:[^:]+]]: tensor<16xi8> {train.optimizer_state = #train.state<"w", m, codes, signed_dynamic, block = 256>}, %[[MA:[^:]+]]: tensor<1xf32> {train.optimizer_state = #train.state<"w", m, absmax, signed_dynamic, block = 256>}
// CHECK-SAME: %[[VC:[^:]+]]: tensor<16xi8> {train.optimizer_state = #train.state<"w", v, codes, unsigned_dynamic, block = 256>}, %[[VA:[^:]+]]: tensor<1xf32> {train.optimizer_state = #train.state<"w", v, absmax, unsigned_dynamic, block = 256>}
// CHECK-DAG: %[[OLDV:.+]] = train.dequantize %[[VC]], %[[VA]] {block = 256 : i64} :
// CHECK-DAG: %[[OLDM:.+]] = train.dequantize %[[MC]], %[[MA]] {block = 256 : i64, is_signed} :
// CHECK: %[[P:[^,]+]], %[[NMC:[^,]+]], %[[NMA:[^,]+]], %[[NVC:[^,]+]], %[[NVA:[^ ]+]] = train.adamw_8bit
// CHECK: %[[NEWM:.+]] = train.dequantize %[[NMC]], %[[NMA]] {block = 256 : i64, is_signed}
// CHECK: %[[SUM:.+]] = train.add %[[OLDM]], %[[NEWM]]
// CHECK: return %[[P]], %[[NMC]], %[[NMA]], %[[NVC]], %[[NVA]], %[[SUM]], %[[OLDV]] :
func.func @train_step(%w: tensor<16xf32> {train.param = "w"}, %g: tensor<16xf32>,
                      %step: tensor<i64> {train.input = "step"},
                      %m: tensor<16xf32> {train.optimizer_state = #train.state<"w", m>},
                      %v: tensor<16xf32> {train.optimizer_state = #train.state<"w", v>})
    -> (tensor<16xf32> {train.param = "w"}, tensor<16xf32> {train.optimizer_state = #train.state<"w", m>},
        tensor<16xf32> {train.optimizer_state = #train.state<"w", v>}, tensor<16xf32>, tensor<16xf32>) attributes {train.step} {
  %lr = arith.constant dense<1.0e-3> : tensor<f32>
  %p, %m2, %v2 = train.adamw %w, %g, %m, %v, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-08 : f64, weight_decay = 0.0 : f64} : tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<f32>, tensor<i64>
  %x = train.add %m, %m2 : tensor<16xf32>
  return %p, %m2, %v2, %x, %v : tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>
}
