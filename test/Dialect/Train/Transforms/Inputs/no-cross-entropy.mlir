// A model whose loss is not a cross-entropy: nothing to count tokens of.
func.func @forward(%x: tensor<4x2xf32> {train.input = "x"},
                   %w: tensor<2x1xf32> {train.param = "w"},
                   %u: tensor<1x2xf32> {train.param = "u"}) -> tensor<f32> {
  %a = train.matmul %x, %x {transpose_lhs} : tensor<4x2xf32>, tensor<4x2xf32> -> tensor<2x2xf32>
  %b = train.matmul %a, %w : tensor<2x2xf32>, tensor<2x1xf32> -> tensor<2x1xf32>
  %c = train.matmul %u, %b : tensor<1x2xf32>, tensor<2x1xf32> -> tensor<1x1xf32>
  %l = train.reshape %c : tensor<1x1xf32> -> tensor<f32>
  return %l : tensor<f32>
}
