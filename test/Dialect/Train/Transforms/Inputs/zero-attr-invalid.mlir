// A #train.zero with a stage that does not exist (train-zero-invalid.test).
func.func @train_step(%x: tensor<4xf32>) -> tensor<4xf32> attributes {train.step, train.zero = #train.zero<stage = 5, ranks = 2, bucket = 100>} {
  return %x : tensor<4xf32>
}
