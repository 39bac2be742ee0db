func.func @forward(%x: tensor<4x8xf32>, %w: tensor<8x8xbf16> {train.param = "w"}) -> tensor<4x8xf32> {
  %0 = train.matmul %x, %w : tensor<4x8xf32>, tensor<8x8xbf16> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}
