// RUN: trainmem-opt %s -split-input-file -convert-train-to-runtime -verify-diagnostics

func.func @train_step(%x: tensor<4xbf16>) -> tensor<4xbf16> attributes {train.step} {
  // expected-error @+1 {{'train.gelu' op has a 'bf16' tensor; the runtime's kernels are f32 (write the model with --dtype f32)}}
  %0 = train.gelu %x : tensor<4xbf16>
  return %0 : tensor<4xbf16>
}

// -----

func.func @train_step(%x: tensor<2x3xf32>) -> tensor<3x2xf32> attributes {train.step} {
  %t = train.transpose %x {permutation = array<i64: 1, 0>} : tensor<2x3xf32> -> tensor<3x2xf32>
  // expected-error @+1 {{'train.gelu' op reads a strided view; the runtime kernel of this op needs a row-major operand}}
  %0 = train.gelu %t : tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}

// -----

// expected-error @+1 {{convert-train-to-runtime: no function marked train.step (run train-autodiff first)}}
module {
  func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}

// -----

// The runtime's rings sum or average.
shard.grid @dp(shape = 2)
func.func @train_step(%a: tensor<8xf32> {train.input = "a"}) -> tensor<8xf32> attributes {train.step} {
  // expected-error @+1 {{'shard.all_reduce' op reduces by max; the runtime's rings sum or average}}
  %r = shard.all_reduce %a on @dp grid_axes = [0] reduction = max : tensor<8xf32> -> tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

// Over the process world: a grid of one axis.
shard.grid @dp2(shape = 2x2)
func.func @train_step(%a: tensor<8xf32> {train.input = "a"}) -> tensor<8xf32> attributes {train.step} {
  // expected-error @+1 {{'shard.all_reduce' op runs on the runtime's process world: its grid must have one axis}}
  %r = shard.all_reduce %a on @dp2 grid_axes = [0] : tensor<8xf32> -> tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

// The rings work on flat buffers (train-zero flattens what it shards).
shard.grid @dp3(shape = 2)
func.func @train_step(%a: tensor<4x2xf32> {train.input = "a"}) -> tensor<2x2xf32> attributes {train.step} {
  // expected-error @+1 {{'shard.reduce_scatter' op works on 1-D buffers (train-zero flattens them)}}
  %s = shard.reduce_scatter %a on @dp3 grid_axes = [0] scatter_axis = 0 : tensor<4x2xf32> -> tensor<2x2xf32>
  return %s : tensor<2x2xf32>
}
