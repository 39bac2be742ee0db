// Two functions marked as the training step: nothing says which to train.
func.func @train_step(%x: tensor<4xf32>) -> tensor<4xf32> attributes {train.step} {
  return %x : tensor<4xf32>
}
func.func @other_step(%x: tensor<4xf32>) -> tensor<4xf32> attributes {train.step} {
  return %x : tensor<4xf32>
}
