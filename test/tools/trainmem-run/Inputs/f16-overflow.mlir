// An f16 model whose gradients overflow f16 (the embedding scaled by 2^21
// before the tied head): trained without loss scaling, its first step's
// weight gradient is infinite.
func.func @forward(%tokens: tensor<2x8xi32> {train.input = "tokens"},
                   %targets: tensor<2x8xi32> {train.input = "targets"},
                   %wte: tensor<256x16xf16> {train.param = "wte", train.init = #train.init<normal, std = 0.02>})
    -> tensor<f32> {
  %x = train.embedding %wte, %tokens : tensor<256x16xf16>, tensor<2x8xi32> -> tensor<2x8x16xf16>
  %big = train.scale %x {factor = 2097152.0 : f64} : tensor<2x8x16xf16>
  %logits = train.matmul %big, %wte {transpose_rhs} : tensor<2x8x16xf16>, tensor<256x16xf16> -> tensor<2x8x256xf16>
  %sum, %count = train.cross_entropy %logits, %targets {ignore_index = -100 : i64} : tensor<2x8x256xf16>, tensor<2x8xi32> -> tensor<f32>, tensor<i64>
  %loss = train.mean_loss %sum, %count : tensor<f32>, tensor<i64>
  return %loss : tensor<f32>
}
