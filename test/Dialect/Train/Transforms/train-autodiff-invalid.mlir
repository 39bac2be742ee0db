// RUN: trainmem-opt %s -split-input-file -train-autodiff -verify-diagnostics

// expected-error @+1 {{train-autodiff: @forward must return its loss, one tensor<f32>; it returns 1 values}}
func.func @forward(%w: tensor<4xf32> {train.param = "w"}) -> tensor<4xf32> {
  return %w : tensor<4xf32>
}

// -----

// expected-error @+1 {{train-autodiff: @forward must return its loss, one tensor<f32>; it returns 0 values}}
func.func @forward(%w: tensor<4xf32> {train.param = "w"}) {
  return
}

// -----

func.func @forward(%w: tensor<2x2xf32> {train.param = "w"}, %t: tensor<2xi32> {train.input = "targets"}) -> tensor<f32> {
  // expected-error @+1 {{'arith.addf' op has no VJP (it does not implement DifferentiableOpInterface) but the loss depends on it}}
  %y = arith.addf %w, %w : tensor<2x2xf32>
  %sum, %count = train.cross_entropy %y, %t {ignore_index = -100 : i64} : tensor<2x2xf32>, tensor<2xi32> -> tensor<f32>, tensor<i64>
  %l = train.mean_loss %sum, %count : tensor<f32>, tensor<i64>
  return %l : tensor<f32>
}

// -----

// A gradient op in a forward pass: never differentiated, said so.
func.func @forward(%w: tensor<2x2xf32> {train.param = "w"}, %t: tensor<2xi32> {train.input = "targets"}) -> tensor<f32> {
  // expected-error @+1 {{'train.gelu_grad' op is never differentiated (a gradient, optimizer, loss-scaling, index or mask op: NotDifferentiated) but the loss depends on it; a forward pass is written with forward ops}}
  %y = train.gelu_grad %w, %w : tensor<2x2xf32>
  %sum, %count = train.cross_entropy %y, %t {ignore_index = -100 : i64} : tensor<2x2xf32>, tensor<2xi32> -> tensor<f32>, tensor<i64>
  %l = train.mean_loss %sum, %count : tensor<f32>, tensor<i64>
  return %l : tensor<f32>
}

// -----

// expected-error @+1 {{train-autodiff: @forward has no parameters (arguments marked train.param)}}
func.func @forward(%s: tensor<f32>) -> tensor<f32> {
  return %s : tensor<f32>
}

// -----

// expected-error @+1 {{train-autodiff: no function @forward}}
module {
  func.func @step(%s: tensor<f32>) -> tensor<f32> {
    return %s : tensor<f32>
  }
}

// -----

// Sequence parallelism's reduce-scatter is differentiated as a sum (its
// gradient gathered); another reduction has no gradient.
shard.grid @tp(shape = 1x2)
func.func @forward(%x: tensor<2x4x6xf32> {train.param = "x"}, %targets: tensor<2x2xi32> {train.input = "targets"}) -> tensor<f32> {
  // expected-error @+2 {{'shard.reduce_scatter' op is differentiated as a sum (the sequence-parallel reduce-scatter); reduction max has no gradient here}}
  // expected-error @+1 {{'shard.reduce_scatter' op failed to build its VJP}}
  %s = shard.reduce_scatter %x on @tp grid_axes = [1] reduction = max scatter_axis = 1 : tensor<2x4x6xf32> -> tensor<2x2x6xf32>
  %sum, %count = train.cross_entropy %s, %targets {ignore_index = -100 : i64} : tensor<2x2x6xf32>, tensor<2x2xi32> -> tensor<f32>, tensor<i64>
  %loss = train.mean_loss %sum, %count : tensor<f32>, tensor<i64>
  return %loss : tensor<f32>
}
