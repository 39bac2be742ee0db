// A fused attention read through a transpose that is not its own: the
// gradient of its output reaches the backward as a view (the transpose's
// VJP), which the runtime kernel reads through its strides.
func.func @forward(%tokens: tensor<2x8xi32> {train.input = "tokens"}, %targets: tensor<2x8xi32> {train.input = "targets"}, %x: tensor<2x4x8x64xf32> {train.param = "x", train.init = #train.init<normal, std = 0.5>}) -> tensor<f32> {
  %o, %lse = train.attention %x, %x, %x {causal, scale = 0.125 : f64} : tensor<2x4x8x64xf32>, tensor<2x4x8x64xf32>, tensor<2x4x8x64xf32> -> tensor<2x4x8x64xf32>, tensor<2x4x8xf32>
  %tr = train.transpose %o {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x4x8x64xf32> -> tensor<2x8x4x64xf32>
  %r = train.reshape %tr : tensor<2x8x4x64xf32> -> tensor<2x8x256xf32>
  %loss_sum, %count = train.cross_entropy %r, %targets {ignore_index = -100 : i64} : tensor<2x8x256xf32>, tensor<2x8xi32> -> tensor<f32>, tensor<i64>
  %loss = train.mean_loss %loss_sum, %count : tensor<f32>, tensor<i64>
  return %loss : tensor<f32>
}
