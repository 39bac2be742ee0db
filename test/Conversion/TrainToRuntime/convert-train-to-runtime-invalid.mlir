// RUN: trainmem-opt %s -split-input-file -convert-train-to-runtime -verify-diagnostics

func.func @train_step() -> tensor<4xf64> attributes {train.step} {
  // expected-error @+1 {{'arith.constant' op has a 'f64' tensor; the runtime's kernels take f32, bf16 and f16 (and integer) tensors}}
  %0 = arith.constant dense<1.0> : tensor<4xf64>
  return %0 : tensor<4xf64>
}

// -----

func.func @train_step(%m: tensor<64xbf16>) -> (tensor<64xi8>, tensor<1xf32>) attributes {train.step} {
  // expected-error @+1 {{'train.quantize' op has a 'bf16' operand; the runtime quantizes f32 only (cast it with train.cast)}}
  %codes, %absmax = train.quantize %m {block = 64 : i64, is_signed} : tensor<64xbf16> -> tensor<64xi8>, tensor<1xf32>
  return %codes, %absmax : tensor<64xi8>, tensor<1xf32>
}

// -----

func.func @train_step(%x: tensor<2x3xf32>) -> tensor<3x2xf32> attributes {train.step} {
  %t = train.transpose %x {permutation = array<i64: 1, 0>} : tensor<2x3xf32> -> tensor<3x2xf32>
  // expected-error @+1 {{'train.gelu' op reads a strided view; the runtime kernel of this op needs a row-major operand}}
  %0 = train.gelu %t : tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}

// -----

// Every op the kernels cannot take is named, inside a block too, and
// nothing else is reported.
func.func @train_step(%x: tensor<2x3xf32>) -> tensor<3x2xf32> attributes {train.step} {
  %t = train.transpose %x {permutation = array<i64: 1, 0>} : tensor<2x3xf32> -> tensor<3x2xf32>
  // expected-error @+1 {{'train.gelu' op reads a strided view; the runtime kernel of this op needs a row-major operand}}
  %0 = train.gelu %t : tensor<3x2xf32>
  %1 = train.block mlp layer 0 -> tensor<3x2xf32> {
    // expected-error @+1 {{'train.silu' op reads a strided view; the runtime kernel of this op needs a row-major operand}}
    %2 = train.silu %t : tensor<3x2xf32>
    train.yield %2 : tensor<3x2xf32>
  }
  %3 = train.add %0, %1 : tensor<3x2xf32>
  return %3 : tensor<3x2xf32>
}

// -----

func.func @train_step(%x: tensor<4xf32>) -> tensor<4xf32> attributes {train.step} {
  // expected-error @+1 {{'tensor.empty' op has no lowering to the trainmem runtime}}
  %0 = tensor.empty() : tensor<4xf32>
  %1 = train.add %x, %0 : tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// expected-error @+1 {{convert-train-to-runtime: no function marked train.step (run train-autodiff first)}}
module {
  func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}

// -----

// An all-reduce sums, averages or takes the maximum.
shard.grid @dp(shape = 2)
func.func @train_step(%a: tensor<8xf32> {train.input = "a"}) -> tensor<8xf32> attributes {train.step} {
  // expected-error @+1 {{'shard.all_reduce' op reduces by min; the runtime's all-reduce sums, averages or takes the maximum}}
  %r = shard.all_reduce %a on @dp grid_axes = [0] reduction = min : tensor<8xf32> -> tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

// A reduce-scatter sums or averages.
shard.grid @dp(shape = 2)
func.func @train_step(%a: tensor<8xf32> {train.input = "a"}) -> tensor<4xf32> attributes {train.step} {
  // expected-error @+1 {{'shard.reduce_scatter' op reduces by max; the runtime's rings sum or average}}
  %r = shard.reduce_scatter %a on @dp grid_axes = [0] reduction = max scatter_axis = 0 : tensor<8xf32> -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// i64 buffers (exact sums of squares) are summed, never averaged.
shard.grid @dp(shape = 2)
func.func @train_step(%a: tensor<24xi64> {train.input = "a"}) -> tensor<24xi64> attributes {train.step} {
  // expected-error @+1 {{'shard.all_reduce' op reduces i64 values by average; the runtime sums them (average or take the maximum of floats)}}
  %r = shard.all_reduce %a on @dp grid_axes = [0] reduction = average : tensor<24xi64> -> tensor<24xi64>
  return %r : tensor<24xi64>
}

// -----

// Other integers the runtime does not reduce.
shard.grid @dp(shape = 2)
func.func @train_step(%a: tensor<8xi32> {train.input = "a"}) -> tensor<8xi32> attributes {train.step} {
  // expected-error @+1 {{'shard.all_reduce' op reduces 'i32' values; the runtime reduces f32, bf16, f16 and i64}}
  %r = shard.all_reduce %a on @dp grid_axes = [0] : tensor<8xi32> -> tensor<8xi32>
  return %r : tensor<8xi32>
}

// -----

// The runtime's process groups are ranks a stride apart: consecutive axes
// of the grid.
shard.grid @dp2(shape = 2x2x2)
func.func @train_step(%a: tensor<8xf32> {train.input = "a"}) -> tensor<8xf32> attributes {train.step} {
  // expected-error @+1 {{'shard.all_reduce' op runs over consecutive axes of a static grid (the runtime's groups are ranks a stride apart)}}
  %r = shard.all_reduce %a on @dp2 grid_axes = [0, 2] : tensor<8xf32> -> tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

// A local slice copies floats and i32 (a sequence-parallel step's
// targets), not i64.
shard.grid @dp3(shape = 2)
func.func @train_step(%a: tensor<4x2xi64> {train.input = "a"}) -> tensor<4x1xi64> attributes {train.step} {
  // expected-error @+1 {{'shard.all_slice' op slices 'i64' values; the runtime slices floats and i32}}
  %s = shard.all_slice %a on @dp3 grid_axes = [0] slice_axis = 1 : tensor<4x2xi64> -> tensor<4x1xi64>
  return %s : tensor<4x1xi64>
}

// -----

// A vocabulary split lowers on a static group of its parts only.
shard.grid @tp(shape = 1x?)
func.func @train_step(%t: tensor<4x6xf32> {train.input = "t"}, %ids: tensor<4xi32> {train.input = "ids"}) -> tensor<4x6xf32> attributes {train.step} {
  // expected-error @+1 {{'train.embedding' op its split's grid axis is not a static group of 2 ranks}}
  %e = train.embedding %t, %ids {split = #train.split<dim = 0, parts = 2, grid = @tp, axis = 1>} : tensor<4x6xf32>, tensor<4xi32> -> tensor<4x6xf32>
  return %e : tensor<4x6xf32>
}

// -----

func.func @train_step(%x: tensor<1x1x1x1x1x2x8xf32>) -> tensor<1x1x1x1x1x2x4xf32> attributes {train.step} {
  // expected-error @+1 {{'train.slice' op slices a rank-7 tensor; the runtime supports up to 6}}
  %0 = train.slice %x {dim = 6 : i64, offset = 4 : i64, size = 4 : i64} : tensor<1x1x1x1x1x2x8xf32> -> tensor<1x1x1x1x1x2x4xf32>
  return %0 : tensor<1x1x1x1x1x2x4xf32>
}

// -----

func.func @train_step(%g: tensor<1x1x1x1x1x2x4xf32>) -> tensor<1x1x1x1x1x2x8xf32> attributes {train.step} {
  // expected-error @+1 {{'train.slice_grad' op places a rank-7 gradient; the runtime supports up to 6}}
  %0 = train.slice_grad %g {dim = 6 : i64, offset = 4 : i64, whole = 8 : i64} : tensor<1x1x1x1x1x2x4xf32> -> tensor<1x1x1x1x1x2x8xf32>
  return %0 : tensor<1x1x1x1x1x2x8xf32>
}

// -----

func.func @train_step(%g: tensor<4x2xf32>) -> tensor<2x8xf32> attributes {train.step} {
  %t = train.transpose %g {permutation = array<i64: 1, 0>} : tensor<4x2xf32> -> tensor<2x4xf32>
  // expected-error @+1 {{'train.slice_grad' op reads a strided view; the runtime kernel of this op needs a row-major operand}}
  %0 = train.slice_grad %t {dim = 1 : i64, offset = 4 : i64, whole = 8 : i64} : tensor<2x4xf32> -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// -----

// A context split lowers on a static group of its parts only.
shard.grid @cp(shape = 1x3)
func.func @train_step(%ids: tensor<1x8xi32> {train.input = "tokens"}) -> tensor<1x4xi32> attributes {train.step} {
  // expected-error @+1 {{'train.context_slice' op its context split's grid axis is not a static group of 2 ranks}}
  %0 = train.context_slice %ids {dim = 1 : i64, context_parallel = #train.context<parts = 2, grid = @cp, axis = 1, balanced>} : tensor<1x8xi32> -> tensor<1x4xi32>
  return %0 : tensor<1x4xi32>
}
