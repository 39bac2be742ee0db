func.func @forward(%w: tensor<2x2xf32> {train.param = "w"}, %x: tensor<2xi32> {train.input = "tokens"}, %t: tensor<2xi32> {train.input = "targets"}) -> tensor<f32> {
  %s1, %c1 = train.cross_entropy %w, %t {ignore_index = -100 : i64} : tensor<2x2xf32>, tensor<2xi32> -> tensor<f32>, tensor<i64>
  %s2, %c2 = train.cross_entropy %w, %x {ignore_index = -100 : i64} : tensor<2x2xf32>, tensor<2xi32> -> tensor<f32>, tensor<i64>
  %s = train.add %s1, %s2 : tensor<f32>
  %l = train.mean_loss %s, %c1 : tensor<f32>, tensor<i64>
  return %l : tensor<f32>
}
