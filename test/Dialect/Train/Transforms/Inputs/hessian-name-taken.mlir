func.func @forward(%w: tensor<2x2xf32> {train.param = "w"}, %x: tensor<2xi32> {train.input = "tokens"}, %t: tensor<2xi32> {train.input = "targets"}) -> tensor<f32> {
  %s, %c = train.cross_entropy %w, %t {ignore_index = -100 : i64} : tensor<2x2xf32>, tensor<2xi32> -> tensor<f32>, tensor<i64>
  %l = train.mean_loss %s, %c : tensor<f32>, tensor<i64>
  return %l : tensor<f32>
}
func.func @train_step_hessian() {
  return
}
