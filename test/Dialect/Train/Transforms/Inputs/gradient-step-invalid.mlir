// Gradient steps train-add-optimizer refuses (train-add-optimizer.test).

// A result that is neither the loss nor a gradient.
func.func @train_step(%w: tensor<2xf32> {train.param = "w"}, %s: tensor<i64> {train.input = "step"}, %l: tensor<f32>) -> (tensor<f32> {train.loss}, tensor<2xf32>) attributes {train.step} {
  return %l, %w : tensor<f32>, tensor<2xf32>
}

// -----

// A parameter without its gradient.
func.func @train_step(%a: tensor<2xf32> {train.param = "a"}, %b: tensor<2xf32> {train.param = "b"}, %s: tensor<i64> {train.input = "step"}, %l: tensor<f32>) -> (tensor<f32> {train.loss}, tensor<2xf32> {train.grad = "a"}) attributes {train.step} {
  return %l, %a : tensor<f32>, tensor<2xf32>
}

// -----

// The gradient of something that is not a parameter.
func.func @train_step(%a: tensor<2xf32> {train.param = "a"}, %s: tensor<i64> {train.input = "step"}, %l: tensor<f32>) -> (tensor<f32> {train.loss}, tensor<2xf32> {train.grad = "c"}) attributes {train.step} {
  return %l, %a : tensor<f32>, tensor<2xf32>
}

// -----

// No step counter.
func.func @train_step(%a: tensor<2xf32> {train.param = "a"}, %l: tensor<f32>) -> (tensor<f32> {train.loss}, tensor<2xf32> {train.grad = "a"}) attributes {train.step} {
  return %l, %a : tensor<f32>, tensor<2xf32>
}
