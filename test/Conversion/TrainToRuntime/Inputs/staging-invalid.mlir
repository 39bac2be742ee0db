// train.staging_offsets: one device offset per operand of an optimizer
// update, -1 for none.
func.func @not_an_update(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'train.staging_offsets' is on an optimizer update one device offset per operand (array<i64>, 2 values, -1 for none), got array<i64: 0, 64>}}
  %0 = train.add %a, %a {train.staging_offsets = array<i64: 0, 64>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}
// -----
func.func @wrong_count(%p: tensor<4xf32>, %g: tensor<4xf32>, %m: tensor<4xf32>, %v: tensor<4xf32>, %lr: tensor<f32>, %step: tensor<i64>) -> tensor<4xf32> {
  // expected-error @+1 {{'train.staging_offsets' is on an optimizer update one device offset per operand (array<i64>, 6 values, -1 for none), got array<i64: -1, -1, 0>}}
  %np, %nm, %nv = train.adamw %p, %g, %m, %v, %lr, %step {beta1 = 9.000000e-01 : f64, beta2 = 0.999 : f64, epsilon = 1.000000e-08 : f64, weight_decay = 0.0 : f64, train.staging_offsets = array<i64: -1, -1, 0>} : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>
  return %np : tensor<4xf32>
}
