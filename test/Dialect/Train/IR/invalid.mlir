// RUN: trainmem-opt %s -split-input-file -verify-diagnostics

func.func @embedding_table_rank(%t: tensor<16xf32>, %ids: tensor<4xi32>) {
  // expected-error @+1 {{table must have rank 2 ([vocab, hidden]), got rank 1}}
  %0 = train.embedding %t, %ids : tensor<16xf32>, tensor<4xi32> -> tensor<4x16xf32>
  return
}

// -----

func.func @embedding_result_shape(%t: tensor<16x8xf32>, %ids: tensor<4xi32>) {
  // expected-error @+1 {{result shape must be [4x8] (ids shape, then hidden), got [4x16]}}
  %0 = train.embedding %t, %ids : tensor<16x8xf32>, tensor<4xi32> -> tensor<4x16xf32>
  return
}

// -----

func.func @embedding_result_type(%t: tensor<16x8xf32>, %ids: tensor<4xi32>) {
  // expected-error @+1 {{result element type must match the table's}}
  %0 = train.embedding %t, %ids : tensor<16x8xf32>, tensor<4xi32> -> tensor<4x8xbf16>
  return
}

// -----

func.func @embedding_float_ids(%t: tensor<16x8xf32>, %ids: tensor<4xf32>) {
  // expected-error @+1 {{operand #1 must be statically shaped tensor of 32-bit signless integer or 64-bit signless integer values}}
  %0 = train.embedding %t, %ids : tensor<16x8xf32>, tensor<4xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @iota_rank() {
  // expected-error @+1 {{result must have rank 1}}
  %0 = train.iota : tensor<2x2xi32>
  return
}

// -----

func.func @matmul_dtype(%a: tensor<2x3xf32>, %b: tensor<3x4xbf16>) {
  // expected-error @+1 {{operand and result element types must match}}
  %0 = train.matmul %a, %b : tensor<2x3xf32>, tensor<3x4xbf16> -> tensor<2x4xf32>
  return
}

// -----

func.func @matmul_rank(%a: tensor<3xf32>, %b: tensor<3x4xf32>) {
  // expected-error @+1 {{operands must have rank >= 2}}
  %0 = train.matmul %a, %b : tensor<3xf32>, tensor<3x4xf32> -> tensor<4xf32>
  return
}

// -----

func.func @matmul_contraction(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) {
  // expected-error @+1 {{contraction dimensions differ (3 vs 4)}}
  %0 = train.matmul %a, %b : tensor<2x3xf32>, tensor<4x5xf32> -> tensor<2x5xf32>
  return
}

// -----

func.func @matmul_transposed_contraction(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) {
  // expected-error @+1 {{contraction dimensions differ (3 vs 4)}}
  %0 = train.matmul %a, %b {transpose_rhs} : tensor<2x3xf32>, tensor<3x4xf32> -> tensor<2x3xf32>
  return
}

// -----

func.func @matmul_batch(%a: tensor<2x2x3xf32>, %b: tensor<3x3x4xf32>) {
  // expected-error @+1 {{batch dimensions [2] and [3] do not broadcast}}
  %0 = train.matmul %a, %b : tensor<2x2x3xf32>, tensor<3x3x4xf32> -> tensor<2x2x4xf32>
  return
}

// -----

func.func @matmul_result(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) {
  // expected-error @+1 {{result shape must be [2x4], got [4x2]}}
  %0 = train.matmul %a, %b : tensor<2x3xf32>, tensor<3x4xf32> -> tensor<4x2xf32>
  return
}

// -----

func.func @add_types(%a: tensor<2xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{requires the same type for all operands and results}}
  %0 = "train.add"(%a, %b) : (tensor<2xf32>, tensor<3xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @unsupported_dtype(%a: tensor<2xf64>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float values}}
  %0 = train.gelu %a : tensor<2xf64>
  return
}

// -----

func.func @dynamic_shape(%a: tensor<?xf32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor}}
  %0 = train.gelu %a : tensor<?xf32>
  return
}

// -----

func.func @scale_finite(%a: tensor<2xf32>) {
  // expected-error @+1 {{factor must be finite}}
  %0 = train.scale %a {factor = 0x7FF0000000000000 : f64} : tensor<2xf32>
  return
}

// -----

func.func @bias_dtype(%x: tensor<2x4xf32>, %b: tensor<4xbf16>) {
  // expected-error @+1 {{bias element type must match the input's}}
  %0 = train.bias_add %x, %b : tensor<2x4xf32>, tensor<4xbf16>
  return
}

// -----

func.func @bias_shape(%x: tensor<2x4xf32>, %b: tensor<2xf32>) {
  // expected-error @+1 {{bias shape [2] must equal the trailing dimensions of input shape [2x4]}}
  %0 = train.bias_add %x, %b : tensor<2x4xf32>, tensor<2xf32>
  return
}

// -----

func.func @norm_rank(%x: tensor<f32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{input must have rank >= 1}}
  %0 = train.rms_norm %x, %g {epsilon = 1.0e-05 : f64} : tensor<f32>, tensor<4xf32>
  return
}

// -----

func.func @layer_norm_gamma(%x: tensor<2x8xf32>, %g: tensor<4xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{gamma must be a vector of the last dimension's size (8), got [4]}}
  %0 = train.layer_norm %x, %g, %b {epsilon = 1.0e-05 : f64} : tensor<2x8xf32>, tensor<4xf32>, tensor<8xf32>
  return
}

// -----

func.func @layer_norm_beta(%x: tensor<2x8xf32>, %g: tensor<8xf32>, %b: tensor<2x8xf32>) {
  // expected-error @+1 {{beta must be a vector of the last dimension's size (8), got [2x8]}}
  %0 = train.layer_norm %x, %g, %b {epsilon = 1.0e-05 : f64} : tensor<2x8xf32>, tensor<8xf32>, tensor<2x8xf32>
  return
}

// -----

func.func @layer_norm_gamma_dtype(%x: tensor<2x8xf32>, %g: tensor<8xbf16>, %b: tensor<8xf32>) {
  // expected-error @+1 {{gamma element type 'bf16' differs from input element type 'f32'}}
  %0 = train.layer_norm %x, %g, %b {epsilon = 1.0e-05 : f64} : tensor<2x8xf32>, tensor<8xbf16>, tensor<8xf32>
  return
}

// -----

func.func @layer_norm_epsilon(%x: tensor<2x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{epsilon must be > 0, got 0}}
  %0 = train.layer_norm %x, %g, %b {epsilon = 0.0 : f64} : tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>
  return
}

// -----

func.func @rms_norm_epsilon(%x: tensor<2x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{epsilon must be > 0, got -1}}
  %0 = train.rms_norm %x, %g {epsilon = -1.0 : f64} : tensor<2x8xf32>, tensor<8xf32>
  return
}

// -----

func.func @rms_norm_gain_offset(%x: tensor<2x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{gain_offset must be finite, got nan}}
  %0 = train.rms_norm %x, %g {epsilon = 1.0e-05 : f64, gain_offset = 0x7FF8000000000000 : f64} : tensor<2x8xf32>, tensor<8xf32>
  return
}

// -----

func.func @rms_norm_grad_gain_offset(%dy: tensor<2x8xf32>, %x: tensor<2x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{gain_offset must be finite, got INF}}
  %0:2 = train.rms_norm_grad %dy, %x, %g {epsilon = 1.0e-05 : f64, gain_offset = 0x7FF0000000000000 : f64} : tensor<2x8xf32>, tensor<2x8xf32>, tensor<8xf32> -> tensor<2x8xf32>, tensor<8xf32>
  return
}

// -----

func.func @softmax_rank(%x: tensor<f32>) {
  // expected-error @+1 {{input must have rank >= 1}}
  %0 = train.softmax %x : tensor<f32>
  return
}

// -----

func.func @softmax_causal_rank(%x: tensor<4xf32>) {
  // expected-error @+1 {{causal softmax needs rank >= 2 (query, key)}}
  %0 = train.softmax %x {causal} : tensor<4xf32>
  return
}

// -----

func.func @softmax_causal_square(%x: tensor<2x3x4xf32>) {
  // expected-error @+1 {{causal softmax needs as many queries as keys, got 3 queries and 4 keys}}
  %0 = train.softmax %x {causal} : tensor<2x3x4xf32>
  return
}

// -----

func.func @softmax_alibi_rank(%x: tensor<4x4xf32>) {
  // expected-error @+1 {{ALiBi softmax needs rank >= 3 (heads, query, key)}}
  %0 = train.softmax %x {causal, alibi_slopes = array<f64: 0.5>} : tensor<4x4xf32>
  return
}

// -----

func.func @softmax_alibi_heads(%x: tensor<1x3x4x4xf32>) {
  // expected-error @+1 {{has 2 ALiBi slopes for 3 heads (the dimensions before query and key, from the back)}}
  %0 = train.softmax %x {causal, alibi_slopes = array<f64: 0.5, 0.25>} : tensor<1x3x4x4xf32>
  return
}

// -----

func.func @softmax_alibi_finite(%x: tensor<1x2x4x4xf32>) {
  // expected-error @+1 {{has an ALiBi slope that is not finite}}
  %0 = train.softmax %x {alibi_slopes = array<f64: 0.5, 0x7FF0000000000000>} : tensor<1x2x4x4xf32>
  return
}

// -----

func.func @softmax_alibi_overflow(%x: tensor<1x2x4x4xf32>) {
  // expected-error @+1 {{has an ALiBi slope whose bias over 4 keys is not finite}}
  %0 = train.softmax %x {alibi_slopes = array<f64: 0.5, 1.0e308>} : tensor<1x2x4x4xf32>
  return
}

// -----

func.func @softmax_alibi_empty(%x: tensor<1x2x4x4xf32>) {
  // expected-error @+1 {{has 0 ALiBi slopes for 2 heads}}
  %0 = train.softmax %x {alibi_slopes = array<f64>} : tensor<1x2x4x4xf32>
  return
}

// -----

func.func @attention_alibi_heads(%q: tensor<1x2x8x4xf32>) {
  // expected-error @+1 {{has 1 ALiBi slopes for 2 query heads}}
  %o, %lse = train.attention %q, %q, %q {causal, scale = 0.5 : f64, alibi_slopes = array<f64: 0.5>} : tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32> -> tensor<1x2x8x4xf32>, tensor<1x2x8xf32>
  return
}

// -----

func.func @dropout_rate(%x: tensor<4xf32>) {
  // expected-error @+1 {{rate must be in [0, 1), got 1}}
  %0, %m = train.dropout %x {rate = 1.0 : f64, seed = 0 : i64, offset = 0 : i64} : tensor<4xf32> -> tensor<4xi1>
  return
}

// -----

func.func @dropout_mask(%x: tensor<4xf32>) {
  // expected-error @+1 {{mask shape must equal the input shape}}
  %0, %m = train.dropout %x {rate = 0.1 : f64, seed = 0 : i64, offset = 0 : i64} : tensor<4xf32> -> tensor<2xi1>
  return
}

// -----

func.func @dropout_offset(%x: tensor<4xf32>) {
  // expected-error @+1 {{offset must be >= 0}}
  %0, %m = train.dropout %x {rate = 0.1 : f64, seed = 0 : i64, offset = -1 : i64} : tensor<4xf32> -> tensor<4xi1>
  return
}

// -----

func.func @rope_rank(%x: tensor<4xf32>) {
  // expected-error @+1 {{input must have rank >= 2 ([..., position, dim])}}
  %0 = train.rope %x {theta = 10000.0 : f64} : tensor<4xf32>
  return
}

// -----

func.func @rope_odd(%x: tensor<4x3xf32>) {
  // expected-error @+1 {{last dimension must be even, got 3}}
  %0 = train.rope %x {theta = 10000.0 : f64} : tensor<4x3xf32>
  return
}

// -----

func.func @rope_theta(%x: tensor<4x4xf32>) {
  // expected-error @+1 {{theta must be > 0}}
  %0 = train.rope %x {theta = 0.0 : f64} : tensor<4x4xf32>
  return
}

// -----

func.func @reshape_dtype(%x: tensor<4xf32>) {
  // expected-error @+1 {{element type must not change}}
  %0 = train.reshape %x : tensor<4xf32> -> tensor<2x2xbf16>
  return
}

// -----

func.func @reshape_count(%x: tensor<4xf32>) {
  // expected-error @+1 {{element count must not change (4 vs 6)}}
  %0 = train.reshape %x : tensor<4xf32> -> tensor<2x3xf32>
  return
}

// -----

func.func @transpose_length(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{permutation must have one entry per dimension (2), got 3}}
  %0 = train.transpose %x {permutation = array<i64: 0, 1, 2>} : tensor<2x3xf32> -> tensor<2x3xf32>
  return
}

// -----

func.func @transpose_perm(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{permutation must hold each of 0..1 once}}
  %0 = train.transpose %x {permutation = array<i64: 1, 1>} : tensor<2x3xf32> -> tensor<3x3xf32>
  return
}

// -----

func.func @transpose_result(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{result shape must be [3x2], got [2x3]}}
  %0 = train.transpose %x {permutation = array<i64: 1, 0>} : tensor<2x3xf32> -> tensor<2x3xf32>
  return
}

// -----

func.func @cross_entropy_targets(%l: tensor<2x4x16xf32>, %t: tensor<2x5xi32>) {
  // expected-error @+1 {{targets shape [2x5] must equal the logits shape without its last dimension [2x4x16]}}
  %s, %c = train.cross_entropy %l, %t {ignore_index = -100 : i64} : tensor<2x4x16xf32>, tensor<2x5xi32> -> tensor<f32>, tensor<i64>
  return
}

// -----

func.func @cross_entropy_smoothing(%l: tensor<2x4x16xf32>, %t: tensor<2x4xi32>) {
  // expected-error @+1 {{'label_smoothing' must be from 0 to 1, got 1.5}}
  %s, %c = train.cross_entropy %l, %t {ignore_index = -100 : i64, label_smoothing = 1.5 : f64} : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>, tensor<i64>
  return
}

// -----

func.func @cross_entropy_grad_smoothing(%g: tensor<f32>, %l: tensor<2x4x16xf32>, %t: tensor<2x4xi32>) {
  // expected-error @+1 {{'label_smoothing' must be from 0 to 1, got -5.000000e-01}}
  %d = train.cross_entropy_grad %g, %l, %t {ignore_index = -100 : i64, label_smoothing = -0.5 : f64} : tensor<f32>, tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<2x4x16xf32>
  return
}

// -----

func.func @cross_entropy_loss_type(%l: tensor<4x16xbf16>, %t: tensor<4xi32>) {
  // expected-error @+1 {{result #0 must be 0D tensor of 32-bit float values}}
  %s, %c = train.cross_entropy %l, %t {ignore_index = -100 : i64} : tensor<4x16xbf16>, tensor<4xi32> -> tensor<bf16>, tensor<i64>
  return
}

// -----

func.func @embedding_grad_rank(%g: tensor<4x8xf32>, %ids: tensor<4xi32>) {
  // expected-error @+1 {{result must have rank 2 ([vocab, hidden])}}
  %0 = train.embedding_grad %g, %ids : tensor<4x8xf32>, tensor<4xi32> -> tensor<128xf32>
  return
}

// -----

func.func @embedding_grad_shape(%g: tensor<4x8xf32>, %ids: tensor<5xi32>) {
  // expected-error @+1 {{grad shape must be [5x8] (ids shape, then hidden), got [4x8]}}
  %0 = train.embedding_grad %g, %ids : tensor<4x8xf32>, tensor<5xi32> -> tensor<16x8xf32>
  return
}

// -----

func.func @sum_to_shape(%x: tensor<2x4xf32>) {
  // expected-error @+1 {{result shape [3] must broadcast to the input shape [2x4]}}
  %0 = train.sum_to %x : tensor<2x4xf32> -> tensor<3xf32>
  return
}

// -----

func.func @layer_norm_grad_shapes(%dy: tensor<2x8xf32>, %x: tensor<3x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{grad and input shapes must match}}
  %0:3 = train.layer_norm_grad %dy, %x, %g {epsilon = 1.0e-05 : f64} : tensor<2x8xf32>, tensor<3x8xf32>, tensor<8xf32> -> tensor<3x8xf32>, tensor<8xf32>, tensor<8xf32>
  return
}

// -----

func.func @rms_norm_grad_shapes(%dy: tensor<2x8xf32>, %x: tensor<3x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{grad and input shapes must match}}
  %0:2 = train.rms_norm_grad %dy, %x, %g {epsilon = 1.0e-05 : f64} : tensor<2x8xf32>, tensor<3x8xf32>, tensor<8xf32> -> tensor<3x8xf32>, tensor<8xf32>
  return
}

// -----

// The gradients have the shapes of what they are gradients of.
func.func @layer_norm_grad_input_grad_shape(%dy: tensor<2x8xf32>, %x: tensor<2x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{input_grad shape must equal the input shape}}
  %0:3 = train.layer_norm_grad %dy, %x, %g {epsilon = 1.0e-05 : f64} : tensor<2x8xf32>, tensor<2x8xf32>, tensor<8xf32> -> tensor<16xf32>, tensor<8xf32>, tensor<8xf32>
  return
}

// -----

func.func @layer_norm_grad_beta_grad_shape(%dy: tensor<2x8xf32>, %x: tensor<2x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{beta_grad shape must equal the gamma shape}}
  %0:3 = train.layer_norm_grad %dy, %x, %g {epsilon = 1.0e-05 : f64} : tensor<2x8xf32>, tensor<2x8xf32>, tensor<8xf32> -> tensor<2x8xf32>, tensor<8xf32>, tensor<4xf32>
  return
}

// -----

func.func @rms_norm_grad_gamma_grad_shape(%dy: tensor<2x8xf32>, %x: tensor<2x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{gamma_grad shape must equal the gamma shape}}
  %0:2 = train.rms_norm_grad %dy, %x, %g {epsilon = 1.0e-05 : f64} : tensor<2x8xf32>, tensor<2x8xf32>, tensor<8xf32> -> tensor<2x8xf32>, tensor<2x4xf32>
  return
}

// -----

func.func @dropout_grad_mask(%dy: tensor<4xf32>, %m: tensor<2xi1>) {
  // expected-error @+1 {{mask shape must equal the grad shape}}
  %0 = train.dropout_grad %dy, %m {rate = 0.1 : f64} : tensor<4xf32>, tensor<2xi1>
  return
}

// -----

func.func @dropout_grad_rate(%dy: tensor<4xf32>, %m: tensor<4xi1>) {
  // expected-error @+1 {{rate must be in [0, 1), got -5.000000e-01}}
  %0 = train.dropout_grad %dy, %m {rate = -0.5 : f64} : tensor<4xf32>, tensor<4xi1>
  return
}

// -----

func.func @cross_entropy_grad_result(%g: tensor<f32>, %l: tensor<4x16xf32>, %t: tensor<4xi32>) {
  // expected-error @+1 {{result shape must equal the logits shape}}
  %0 = train.cross_entropy_grad %g, %l, %t {ignore_index = -100 : i64} : tensor<f32>, tensor<4x16xf32>, tensor<4xi32> -> tensor<4x8xf32>
  return
}

// -----

func.func @block_layer_missing(%x: tensor<4xf32>) {
  // expected-error @+1 {{block of kind 'attention' needs a layer index}}
  %0 = train.block attention -> tensor<4xf32> {
    train.yield %x : tensor<4xf32>
  }
  return
}

// -----

func.func @block_layer_negative(%x: tensor<4xf32>) {
  // expected-error @+1 {{layer index must be >= 0, got -2}}
  %0 = train.block mlp layer -2 -> tensor<4xf32> {
    train.yield %x : tensor<4xf32>
  }
  return
}

// -----

// A block in a block (issue 31, item 10: train-autodiff crashed on it).
func.func @block_nested(%x: tensor<4xf32>) {
  %0 = train.block mlp layer 0 -> tensor<4xf32> {
    // expected-error @+1 {{'train.block' op is nested in another train.block (mlp); blocks partition the step: put them side by side}}
    %1 = train.block attention layer 0 -> tensor<4xf32> {
      train.yield %x : tensor<4xf32>
    }
    train.yield %1 : tensor<4xf32>
  }
  return
}

// -----

func.func @block_yield_types(%x: tensor<4xf32>) {
  // expected-error @+1 {{yielded types must equal the block's result types}}
  %0 = train.block head -> tensor<2xf32> {
    train.yield %x : tensor<4xf32>
  }
  return
}

// -----

func.func @block_empty() {
  // expected-error @+1 {{expects a non-empty block}}
  "train.block"() ({
  ^bb0:
  }) {kind = 3 : i32} : () -> ()
  return
}

// -----

func.func @block_without_yield(%x: tensor<4xf32>) {
  // expected-error @+1 {{body must end with train.yield}}
  "train.block"() ({
    %0 = train.iota : tensor<2xi32>
  }) {kind = 3 : i32} : () -> ()
  return
}

// -----

func.func @yield_outside_block(%x: tensor<4xf32>) {
  // expected-error @+1 {{expects parent op to be one of 'train.block, train.remat, train.accumulate'}}
  train.yield %x : tensor<4xf32>
}

// -----

func.func @adamw_shapes(%p: tensor<8xf32>, %g: tensor<4xf32>, %lr: tensor<f32>, %t: tensor<i64>) {
  // expected-error @+1 {{grad, m and v must have the parameter's shape [8]}}
  %0:3 = train.adamw %p, %g, %p, %p, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-08 : f64, weight_decay = 0.0 : f64} : tensor<8xf32>, tensor<4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<i64>
  return
}

// -----

func.func @adamw_state_dtype(%p: tensor<8xbf16>, %lr: tensor<f32>, %t: tensor<i64>) {
  // expected-error @+1 {{m and v must be f32}}
  %0:3 = train.adamw %p, %p, %p, %p, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-08 : f64, weight_decay = 0.0 : f64} : tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<f32>, tensor<i64>
  return
}

// -----

func.func @adamw_type_count(%p: tensor<8xf32>, %lr: tensor<f32>, %t: tensor<i64>) {
  // expected-error @+1 {{expected 6 operand types, got 5}}
  %0:3 = train.adamw %p, %p, %p, %p, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-08 : f64, weight_decay = 0.0 : f64} : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<f32>
  return
}

// -----

func.func @adamw_missing_attribute(%p: tensor<8xf32>, %lr: tensor<f32>, %t: tensor<i64>) {
  // expected-error @+1 {{requires attribute 'weight_decay'}}
  %0:3 = train.adamw %p, %p, %p, %p, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-08 : f64} : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<i64>
  return
}

// -----

func.func @adamw_8bit_operand_count(%p: tensor<8xf32>, %c: tensor<8xi8>, %a: tensor<1xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{expected 8 operands}}
  %0:5 = train.adamw_8bit %p, %p, %c, %a, %c, %a, %lr {beta1 = 0.9 : f64, beta2 = 0.999 : f64, block = 8 : i64, epsilon = 1.0e-08 : f64, weight_decay = 0.0 : f64} : tensor<8xf32>, tensor<8xf32>, tensor<8xi8>, tensor<1xf32>, tensor<8xi8>, tensor<1xf32>, tensor<f32>
  return
}

// -----

func.func @adamw_beta1(%p: tensor<8xf32>, %lr: tensor<f32>, %t: tensor<i64>) {
  // expected-error @+1 {{beta1 must be in [0, 1), got 1}}
  %0:3 = train.adamw %p, %p, %p, %p, %lr, %t {beta1 = 1.0 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-08 : f64, weight_decay = 0.0 : f64} : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<i64>
  return
}

// -----

func.func @adamw_beta2(%p: tensor<8xf32>, %lr: tensor<f32>, %t: tensor<i64>) {
  // expected-error @+1 {{beta2 must be in [0, 1), got -5.000000e-01}}
  %0:3 = train.adamw %p, %p, %p, %p, %lr, %t {beta1 = 0.9 : f64, beta2 = -0.5 : f64, epsilon = 1.0e-08 : f64, weight_decay = 0.0 : f64} : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<i64>
  return
}

// -----

func.func @adamw_epsilon(%p: tensor<8xf32>, %lr: tensor<f32>, %t: tensor<i64>) {
  // expected-error @+1 {{epsilon must be > 0, got 0}}
  %0:3 = train.adamw %p, %p, %p, %p, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 0.0 : f64, weight_decay = 0.0 : f64} : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<i64>
  return
}

// -----

func.func @adamw_decay(%p: tensor<8xf32>, %lr: tensor<f32>, %t: tensor<i64>) {
  // expected-error @+1 {{weight_decay must be >= 0}}
  %0:3 = train.adamw %p, %p, %p, %p, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-08 : f64, weight_decay = -0.1 : f64} : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<i64>
  return
}

// -----

func.func @sgd_grad_shape(%p: tensor<8xf32>, %g: tensor<4xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{grad must have the parameter's shape}}
  %0 = train.sgd %p, %g, %lr {momentum = 0.0 : f64, weight_decay = 0.0 : f64} : (tensor<8xf32>, tensor<4xf32>, tensor<f32>) -> tensor<8xf32>
  return
}

// -----

func.func @sgd_result(%p: tensor<8xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{new_param type must equal the parameter type}}
  %0 = train.sgd %p, %p, %lr {momentum = 0.0 : f64, weight_decay = 0.0 : f64} : (tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> tensor<8xbf16>
  return
}

// -----

func.func @sgd_momentum_range(%p: tensor<8xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{momentum must be in [0, 1), got 1.500000e+00}}
  %0, %1 = train.sgd %p, %p, %lr, %p {momentum = 1.5 : f64, weight_decay = 0.0 : f64} : (tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @sgd_decay(%p: tensor<8xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{weight_decay must be >= 0}}
  %0 = train.sgd %p, %p, %lr {momentum = 0.0 : f64, weight_decay = -1.0 : f64} : (tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  return
}

// -----

func.func @sgd_missing_buffer(%p: tensor<8xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{a momentum buffer is needed exactly when momentum > 0}}
  %0 = train.sgd %p, %p, %lr {momentum = 0.9 : f64, weight_decay = 0.0 : f64} : (tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  return
}

// -----

func.func @sgd_missing_new_buffer(%p: tensor<8xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{new_momentum_buffer must be present exactly when the momentum buffer is}}
  %0 = train.sgd %p, %p, %lr, %p {momentum = 0.9 : f64, weight_decay = 0.0 : f64} : (tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<8xf32>) -> tensor<8xf32>
  return
}

// -----

func.func @sgd_buffer_shape(%p: tensor<8xf32>, %b: tensor<4xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{momentum buffer must have the parameter's shape in and out}}
  %0, %1 = train.sgd %p, %p, %lr, %b {momentum = 0.9 : f64, weight_decay = 0.0 : f64} : (tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<4xf32>) -> (tensor<8xf32>, tensor<4xf32>)
  return
}

// -----

func.func @sgd_nesterov(%p: tensor<8xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{nesterov needs momentum > 0}}
  %0 = train.sgd %p, %p, %lr {momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov} : (tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  return
}

// -----

func.func @clip_count(%a: tensor<8xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{must return one clipped gradient per gradient and the norm}}
  %0, %n = train.clip_grad_norm %a, %b {max_norm = 1.0 : f64} : (tensor<8xf32>, tensor<4xf32>) -> (tensor<8xf32>, tensor<f32>)
  return
}

// -----

func.func @clip_types(%a: tensor<8xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{clipped gradient types must equal the gradients'}}
  %0, %1, %n = train.clip_grad_norm %a, %b {max_norm = 1.0 : f64} : (tensor<8xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<8xf32>, tensor<f32>)
  return
}

// -----

func.func @clip_max_norm(%a: tensor<8xf32>) {
  // expected-error @+1 {{max_norm must be > 0}}
  %0, %n = train.clip_grad_norm %a {max_norm = 0.0 : f64} : (tensor<8xf32>) -> (tensor<8xf32>, tensor<f32>)
  return
}

// -----

func.func @lr_peak(%t: tensor<i64>) {
  // expected-error @+1 {{peak_lr must be > 0}}
  %0 = train.lr_schedule %t {peak_lr = 0.0 : f64, min_lr = 0.0 : f64, warmup_steps = 10 : i64, total_steps = 100 : i64} : tensor<i64> -> tensor<f32>
  return
}

// -----

func.func @lr_min(%t: tensor<i64>) {
  // expected-error @+1 {{min_lr must be in [0, peak_lr]}}
  %0 = train.lr_schedule %t {peak_lr = 1.0e-03 : f64, min_lr = 1.0e-02 : f64, warmup_steps = 10 : i64, total_steps = 100 : i64} : tensor<i64> -> tensor<f32>
  return
}

// -----

func.func @lr_warmup(%t: tensor<i64>) {
  // expected-error @+1 {{warmup_steps must be >= 0}}
  %0 = train.lr_schedule %t {peak_lr = 1.0e-03 : f64, min_lr = 0.0 : f64, warmup_steps = -1 : i64, total_steps = 100 : i64} : tensor<i64> -> tensor<f32>
  return
}

// -----

func.func @lr_total(%t: tensor<i64>) {
  // expected-error @+1 {{total_steps must be > warmup_steps}}
  %0 = train.lr_schedule %t {peak_lr = 1.0e-03 : f64, min_lr = 0.0 : f64, warmup_steps = 100 : i64, total_steps = 100 : i64} : tensor<i64> -> tensor<f32>
  return
}

// -----

func.func @cast_shape(%x: tensor<4xf32>) {
  // expected-error @+1 {{requires the same shape for all operands and results}}
  %0 = train.cast %x : tensor<4xf32> -> tensor<2x2xbf16>
  return
}

// -----

func.func @dropout_mask_rate() {
  // expected-error @+1 {{rate must be in [0, 1), got 2.000000e+00}}
  %0 = train.dropout_mask {rate = 2.0 : f64, seed = 0 : i64, offset = 0 : i64} : tensor<4xi1>
  return
}

// -----

func.func @dropout_mask_offset() {
  // expected-error @+1 {{offset must be >= 0}}
  %0 = train.dropout_mask {rate = 0.5 : f64, seed = 0 : i64, offset = -3 : i64} : tensor<4xi1>
  return
}

// -----

func.func @remat_side_effect(%x: tensor<4xf32>) {
  // expected-error @+1 {{'train.remat' op cannot recompute 'func.call': it has side effects}}
  %0 = train.remat -> tensor<4xf32> {
    %1 = func.call @log(%x) : (tensor<4xf32>) -> tensor<4xf32>
    train.yield %1 : tensor<4xf32>
  }
  return
}
func.func private @log(tensor<4xf32>) -> tensor<4xf32>

// -----

func.func @remat_yield_types(%x: tensor<4xf32>) {
  // expected-error @+1 {{'train.remat' op yielded types must equal the region's result types}}
  %0 = train.remat -> tensor<2xf32> {
    train.yield %x : tensor<4xf32>
  }
  return
}

// -----

func.func @remat_without_yield(%x: tensor<4xf32>) {
  // expected-error @+1 {{'train.remat' op body must end with train.yield}}
  "train.remat"() ({
    %0 = train.gelu %x : tensor<4xf32>
  }) : () -> ()
  return
}

// -----

func.func @slice_rows_shape(%x: tensor<4x8xi32>) {
  // expected-error @+1 {{result must be input rows: same rank, element type and dimensions after the first}}
  %0 = train.slice_rows %x {offset = 0 : i64} : tensor<4x8xi32> -> tensor<2x4xi32>
  return
}

// -----

func.func @slice_rows_offset(%x: tensor<4x8xi32>) {
  // expected-error @+1 {{offset must be >= 0}}
  %0 = train.slice_rows %x {offset = -1 : i64} : tensor<4x8xi32> -> tensor<2x8xi32>
  return
}

// -----

func.func @accumulate_steps(%x: tensor<4x8xi32>) {
  // expected-error @+1 {{steps must be >= 1, got 0}}
  train.accumulate %x steps 0 padding [0] : (tensor<4x8xi32>) -> () {
  ^bb0(%t: tensor<4x8xi32>):
    train.yield
  }
  return
}

// -----

func.func @accumulate_too_many_steps(%x: tensor<4x8xi32>) {
  // expected-error @+1 {{steps (5) must not exceed the batch (4 rows)}}
  train.accumulate %x steps 5 padding [0] : (tensor<4x8xi32>) -> () {
  ^bb0(%t: tensor<1x8xi32>):
    train.yield
  }
  return
}

// -----

func.func @accumulate_padding(%x: tensor<4x8xi32>) {
  // expected-error @+1 {{needs one padding value per input}}
  train.accumulate %x steps 2 padding [0, 1] : (tensor<4x8xi32>) -> () {
  ^bb0(%t: tensor<2x8xi32>):
    train.yield
  }
  return
}

// -----

func.func @accumulate_no_inputs() {
  // expected-error @+1 {{needs at least one input to split}}
  train.accumulate steps 1 padding [] : () -> () {
  ^bb0:
    train.yield
  }
  return
}

// -----

func.func @accumulate_arg_count(%x: tensor<4x8xi32>, %y: tensor<4x8xi32>) {
  // expected-error @+1 {{body must take one micro-batch per input}}
  train.accumulate %x, %y steps 2 padding [0, 0] : (tensor<4x8xi32>, tensor<4x8xi32>) -> () {
  ^bb0(%t: tensor<2x8xi32>):
    train.yield
  }
  return
}

// -----

func.func @accumulate_rows(%x: tensor<4x8xi32>, %y: tensor<3x8xi32>) {
  // expected-error @+1 {{inputs must share their first dimension}}
  train.accumulate %x, %y steps 2 padding [0, 0] : (tensor<4x8xi32>, tensor<3x8xi32>) -> () {
  ^bb0(%t: tensor<2x8xi32>, %u: tensor<2x8xi32>):
    train.yield
  }
  return
}

// -----

func.func @accumulate_arg_type(%x: tensor<4x8xi32>) {
  // expected-error @+1 {{body argument must be a micro-batch of 2 rows of its input}}
  train.accumulate %x steps 2 padding [0] : (tensor<4x8xi32>) -> () {
  ^bb0(%t: tensor<4x8xi32>):
    train.yield
  }
  return
}

// -----

func.func @accumulate_results(%x: tensor<4x8xi32>, %w: tensor<2xf32>) {
  // expected-error @+1 {{results must be sums of the yielded float tensors, in f32 or in the yielded value's own type}}
  %0 = train.accumulate %x steps 2 padding [0] : (tensor<4x8xi32>) -> tensor<2xbf16> {
  ^bb0(%t: tensor<2x8xi32>):
    train.yield %w : tensor<2xf32>
  }
  return
}

// -----

func.func @accumulate_results_other_16bit(%x: tensor<4x8xi32>, %w: tensor<2xf16>) {
  // expected-error @+1 {{results must be sums of the yielded float tensors, in f32 or in the yielded value's own type}}
  %0 = train.accumulate %x steps 2 padding [0] : (tensor<4x8xi32>) -> tensor<2xbf16> {
  ^bb0(%t: tensor<2x8xi32>):
    train.yield %w : tensor<2xf16>
  }
  return
}

// -----

func.func @accumulate_result_count(%x: tensor<4x8xi32>, %w: tensor<2xf32>) {
  // expected-error @+1 {{must have one result per yielded value}}
  train.accumulate %x steps 2 padding [0] : (tensor<4x8xi32>) -> () {
  ^bb0(%t: tensor<2x8xi32>):
    train.yield %w : tensor<2xf32>
  }
  return
}

// -----

func.func @accumulate_without_yield(%x: tensor<4x8xi32>) {
  // expected-error @+1 {{body must end with train.yield}}
  "train.accumulate"(%x) <{steps = 2 : i64, padding = array<i64: 0>}> ({
  ^bb0(%t: tensor<2x8xi32>):
    %0 = train.iota : tensor<2xi32>
  }) : (tensor<4x8xi32>) -> ()
  return
}

// -----

func.func @accumulate_share_type(%x: tensor<4x8xi32>) {
  // expected-error @+1 {{the share argument must be a tensor<f32>}}
  train.accumulate %x steps 2 padding [0] weighted : (tensor<4x8xi32>) -> () {
  ^bb0(%t: tensor<2x8xi32>, %w: tensor<i64>):
    train.yield
  }
  return
}

// -----

func.func @quantize_block_power_of_two(%x: tensor<300xf32>) {
  // expected-error @+1 {{block must be a power of two, got 100}}
  %c, %a = train.quantize %x {block = 100 : i64} : tensor<300xf32> -> tensor<300xi8>, tensor<3xf32>
  return
}

// -----

func.func @quantize_absmax_per_block(%x: tensor<300xf32>) {
  // expected-error @+1 {{absmax must hold one value per block (2), got [1]}}
  %c, %a = train.quantize %x {block = 256 : i64} : tensor<300xf32> -> tensor<300xi8>, tensor<1xf32>
  return
}

// -----

func.func @quantize_codes_shape(%x: tensor<300xf32>) {
  // expected-error @+1 {{codes must have the input's shape}}
  %c, %a = train.quantize %x {block = 256 : i64} : tensor<300xf32> -> tensor<3x100xi8>, tensor<2xf32>
  return
}

// -----

func.func @dequantize_result_shape(%c: tensor<300xi8>, %a: tensor<2xf32>) {
  // expected-error @+1 {{result must have the codes' shape}}
  %x = train.dequantize %c, %a {block = 256 : i64} : tensor<300xi8>, tensor<2xf32> -> tensor<301xf32>
  return
}

// -----

func.func @adamw_8bit_codes_shape(%p: tensor<300xf32>, %c: tensor<200xi8>, %a: tensor<2xf32>, %lr: tensor<f32>, %t: tensor<i64>) {
  // expected-error @+1 {{grad and state codes must have the parameter's shape [300]}}
  %r:5 = train.adamw_8bit %p, %p, %c, %a, %c, %a, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-08 : f64, weight_decay = 0.0 : f64, block = 256 : i64} : tensor<300xf32>, tensor<300xf32>, tensor<200xi8>, tensor<2xf32>, tensor<200xi8>, tensor<2xf32>, tensor<f32>, tensor<i64>
  return
}

// -----

func.func @sgd_8bit_momentum(%p: tensor<300xf32>, %c: tensor<300xi8>, %a: tensor<2xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{momentum must be in (0, 1), got 0}}
  %r:3 = train.sgd_8bit %p, %p, %c, %a, %lr {momentum = 0.0 : f64, weight_decay = 0.0 : f64, block = 256 : i64} : tensor<300xf32>, tensor<300xf32>, tensor<300xi8>, tensor<2xf32>, tensor<f32>
  return
}

// -----

func.func @sgd_8bit_block(%p: tensor<300xf32>, %c: tensor<300xi8>, %a: tensor<1xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{absmax must hold one value per block (3), got [1]}}
  %r:3 = train.sgd_8bit %p, %p, %c, %a, %lr {momentum = 0.9 : f64, weight_decay = 0.0 : f64, block = 128 : i64} : tensor<300xf32>, tensor<300xf32>, tensor<300xi8>, tensor<1xf32>, tensor<f32>
  return
}

// -----

func.func @sgd_8bit_codes_shape(%p: tensor<300xf32>, %c: tensor<30x10xi8>, %a: tensor<2xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{grad and buffer codes must have the parameter's shape [300]}}
  %r:3 = train.sgd_8bit %p, %p, %c, %a, %lr {momentum = 0.9 : f64, weight_decay = 0.0 : f64, block = 256 : i64} : tensor<300xf32>, tensor<300xf32>, tensor<30x10xi8>, tensor<2xf32>, tensor<f32>
  return
}

// -----

func.func @sgd_8bit_weight_decay(%p: tensor<300xf32>, %c: tensor<300xi8>, %a: tensor<2xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{weight_decay must be >= 0}}
  %r:3 = train.sgd_8bit %p, %p, %c, %a, %lr {momentum = 0.9 : f64, weight_decay = -1.0 : f64, block = 256 : i64} : tensor<300xf32>, tensor<300xf32>, tensor<300xi8>, tensor<2xf32>, tensor<f32>
  return
}

// -----

func.func @adamw_8bit_weight_decay(%p: tensor<300xf32>, %c: tensor<300xi8>, %a: tensor<2xf32>, %lr: tensor<f32>, %t: tensor<i64>) {
  // expected-error @+1 {{weight_decay must be >= 0}}
  %r:5 = train.adamw_8bit %p, %p, %c, %a, %c, %a, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-08 : f64, weight_decay = -0.5 : f64, block = 256 : i64} : tensor<300xf32>, tensor<300xf32>, tensor<300xi8>, tensor<2xf32>, tensor<300xi8>, tensor<2xf32>, tensor<f32>, tensor<i64>
  return
}

// -----

// Two arguments with one parameter name: a checkpoint keyed by name would
// hold one of them.
// expected-error @+1 {{'func.func' op arguments 0 and 1 are both "train.param" = "w"; each state tensor needs a name of its own}}
func.func @duplicate_param(%a: tensor<4xf32> {train.param = "w"}, %b: tensor<4xf32> {train.param = "w"}) {
  return
}

// -----

// expected-error @+1 {{'func.func' op arguments 1 and 2 are both "train.optimizer_state" = #train.state<"w", m>}}
func.func @duplicate_state(%w: tensor<4xf32> {train.param = "w"}, %m: tensor<4xf32> {train.optimizer_state = #train.state<"w", m>}, %m2: tensor<4xf32> {train.optimizer_state = #train.state<"w", m>}) {
  return
}

// -----

// expected-error @+1 {{'func.func' op results 0 and 1 are both "train.param" = "w"}}
func.func @duplicate_result(%w: tensor<4xf32> {train.param = "w"}) -> (tensor<4xf32> {train.param = "w"}, tensor<4xf32> {train.param = "w"}) {
  return %w, %w : tensor<4xf32>, tensor<4xf32>
}

// -----

// A name that is not a string would drop the parameter silently.
// expected-error @+1 {{'func.func' op argument 0: 'train.param' must be a non-empty string naming the tensor, got 3 : i64}}
func.func @param_not_a_name(%w: tensor<4xf32> {train.param = 3}) {
  return
}

// -----

// expected-error @+1 {{#train.state needs the parameter's name}}
func.func @empty_state_name(%w: tensor<4xf32> {train.optimizer_state = #train.state<"", m>}) {
  return
}

// -----

// State named by a string (the old form) says what it must be.
// expected-error @+1 {{'func.func' op argument 0: 'train.optimizer_state' must be a #train.state, got "w.m"}}
func.func @state_as_string(%w: tensor<4xf32> {train.optimizer_state = "w.m"}) {
  return
}

// -----

// expected-error @+1 {{#train.state: 8-bit codes need a map}}
func.func @state_codes_without_map(%w: tensor<4xi8> {train.optimizer_state = #train.state<"w", m, codes, none, block = 256>}) {
  return
}

// -----

// expected-error @+1 {{#train.state: block must be a power of two, got 100}}
func.func @state_block(%w: tensor<4xi8> {train.optimizer_state = #train.state<"w", v, codes, unsigned_dynamic, block = 100>}) {
  return
}

// -----

// expected-error @+1 {{#train.state: a plain value has no map or block}}
func.func @state_value_with_map(%w: tensor<4xf32> {train.optimizer_state = #train.state<"w", v, value, unsigned_dynamic, block = 256>}) {
  return
}

// -----

// expected-error @+1 {{'func.func' op argument 0: 'train.init' must be a #train.init, got "normal"}}
func.func @init_as_string(%w: tensor<4xf32> {train.param = "w", train.init = "normal"}) {
  return
}

// -----

// expected-error @+1 {{#train.init: normal needs std > 0, got}}
func.func @init_normal_without_std(%w: tensor<4xf32> {train.param = "w", train.init = #train.init<normal>}) {
  return
}

// -----

// expected-error @+1 {{#train.init: only normal takes a std}}
func.func @init_ones_with_std(%w: tensor<4xf32> {train.param = "w", train.init = #train.init<ones, std = 2.0>}) {
  return
}

// -----

// A stream (train-pipeline's: a parameter's place in the whole model) is
// an index, and only a normal init draws from one.
// expected-error @+1 {{#train.init: stream must be >= 0, got -2}}
func.func @init_negative_stream(%w: tensor<4xf32> {train.param = "w", train.init = #train.init<normal, std = 2.0e-02, stream = -2>}) {
  return
}

// -----

// expected-error @+1 {{#train.init: only normal draws from a stream}}
func.func @init_ones_with_stream(%w: tensor<4xf32> {train.param = "w", train.init = #train.init<ones, std = 0.0, stream = 3>}) {
  return
}

// -----

// expected-error @+1 {{'func.func' op result 0: 'train.init' belongs on arguments}}
func.func @init_on_result(%w: tensor<4xf32>) -> (tensor<4xf32> {train.init = #train.init<zeros>}) {
  return %w : tensor<4xf32>
}

// -----

// expected-error @+1 {{'func.func' op result 0: 'train.loss' is a unit attribute, got "x"}}
func.func @loss_with_value(%w: tensor<f32>) -> (tensor<f32> {train.loss = "x"}) {
  return %w : tensor<f32>
}

// -----

// expected-error @+1 {{'func.func' op argument 0: 'train.loss' belongs on results}}
func.func @loss_on_argument(%w: tensor<f32> {train.loss}) {
  return
}

// -----

// expected-error @+1 {{'func.func' op result 0: 'train.input' belongs on arguments}}
func.func @input_on_result(%w: tensor<f32>) -> (tensor<f32> {train.input = "step"}) {
  return %w : tensor<f32>
}

// -----

// A parameter and its state may share a name across kinds; and the same
// name on an argument and a result is the state before and after the step.
func.func @same_name_other_kind(%w: tensor<4xf32> {train.param = "w"}, %s: tensor<4xf32> {train.optimizer_state = #train.state<"w", m>}, %v: tensor<4xf32> {train.optimizer_state = #train.state<"w", v>}) -> (tensor<4xf32> {train.param = "w"}) {
  return %w : tensor<4xf32>
}

// -----

func.func @dropout_part_without_size(%x: tensor<4xf32>, %j: tensor<i64>) {
  // expected-error @+1 {{a part operand needs part_elements > 0 (the elements of one part)}}
  %y, %m = train.dropout %x part(%j : tensor<i64>) {rate = 0.1 : f64, seed = 0 : i64, offset = 0 : i64} : tensor<4xf32> -> tensor<4xi1>
  return
}

// -----

func.func @dropout_size_without_part(%x: tensor<4xf32>) {
  // expected-error @+1 {{part_elements without a part operand}}
  %y, %m = train.dropout %x {rate = 0.1 : f64, seed = 0 : i64, offset = 0 : i64, part_elements = 4 : i64} : tensor<4xf32> -> tensor<4xi1>
  return
}

// -----

func.func @dropout_negative_rank_elements(%x: tensor<4xf32>) {
  // expected-error @+1 {{rank_elements must be >= 0, got -8}}
  %y, %m = train.dropout %x {rate = 0.1 : f64, seed = 0 : i64, offset = 0 : i64, rank_elements = -8 : i64} : tensor<4xf32> -> tensor<4xi1>
  return
}

// -----

func.func @dropout_mask_negative_first() {
  // expected-error @+1 {{first must be >= 0, got -4}}
  %m = train.dropout_mask {rate = 0.1 : f64, seed = 0 : i64, offset = 0 : i64, first = -4 : i64} : tensor<4xi1>
  return
}

// -----

func.func @accumulate_index_type(%x: tensor<4x8xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{the index argument must be a tensor<i64>}}
  %sum = train.accumulate %x steps 2 padding [0] indexed : (tensor<4x8xf32>) -> tensor<2x8xf32> {
  ^bb0(%m: tensor<2x8xf32>, %j: tensor<f32>):
    train.yield %m : tensor<2x8xf32>
  }
  return %sum : tensor<2x8xf32>
}

// -----

// expected-error @+1 {{'func.func' op 'train.step' is a unit attribute, got 3 : i64}}
func.func @step_with_value(%x: tensor<4xf32>) -> tensor<4xf32> attributes {train.step = 3} {
  return %x : tensor<4xf32>
}

// -----

// expected-error @+1 {{'builtin.module' op 'train.step' marks a function (the step), not a 'builtin.module'}}
module attributes {train.step} {
}

// -----

// The arena plan (train-plan-arena): one offset per result.
func.func @plan_offsets_count(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'train.add' op 'train.offsets' holds one arena offset per result (array<i64>, 1 values), got array<i64: 0, 64>}}
  %c = train.add %a, %a {train.offsets = array<i64: 0, 64>} : tensor<4xf32>
  return %c : tensor<4xf32>
}

// -----

func.func @plan_offsets_negative(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'train.add' op 'train.offsets': result 0 has offset -1 (a tensor's is >= 0, any other result's -1)}}
  %c = train.add %a, %a {train.offsets = array<i64: -1>} : tensor<4xf32>
  return %c : tensor<4xf32>
}

// -----

// expected-error @+1 {{'func.func' op 'train.arena_bytes' is the arena's size on the step (an integer >= 0), got -5 : i64}}
func.func @plan_arena_negative(%a: tensor<4xf32>) -> tensor<4xf32> attributes {train.arena_bytes = -5} {
  return %a : tensor<4xf32>
}

// -----

// expected-error @+1 {{'func.func' op 'train.host_arena_bytes' is the arena's size on the step (an integer >= 0), got "64"}}
func.func @plan_host_arena_not_integer(%a: tensor<4xf32>) -> tensor<4xf32> attributes {train.arena_bytes = 64, train.host_arena_bytes = "64"} {
  return %a : tensor<4xf32>
}

// -----

// expected-error @+1 {{'func.func' op argument 0: 'train.offset' is an argument's byte offset in the arena (an integer >= 0), got "zero"}}
func.func @plan_offset_string(%a: tensor<4xf32> {train.offset = "zero"}) -> tensor<4xf32> {
  return %a : tensor<4xf32>
}

// -----

// expected-error @+1 {{'func.func' op result 0: 'train.offset' is an argument's byte offset in the arena (an integer >= 0), got 0 : i64}}
func.func @plan_offset_on_result(%a: tensor<4xf32>) -> (tensor<4xf32> {train.offset = 0}) {
  return %a : tensor<4xf32>
}

// -----

// expected-error @+1 {{'func.func' op 'train.zero' is a #train.zero on the step, got 3 : i64}}
func.func @zero_not_an_attr(%a: tensor<4xf32>) -> tensor<4xf32> attributes {train.zero = 3} {
  return %a : tensor<4xf32>
}

// -----

// expected-error @+1 {{'func.func' op argument 0: 'train.shard_of' is the static tensor type the value is a shard of, got 3 : i64}}
func.func @shard_of_not_a_type(%a: tensor<4xf32> {train.shard_of = 3}) -> tensor<4xf32> attributes {train.zero = #train.zero<stage = 3, ranks = 2, bucket = 100>} {
  return %a : tensor<4xf32>
}

// -----

// expected-error @+1 {{'func.func' op argument 0: 'train.shard_of' marks a shard, but the function is not partitioned (no 'train.zero')}}
func.func @shard_of_unpartitioned(%a: tensor<4xf32> {train.shard_of = tensor<8xf32>}) -> tensor<4xf32> {
  return %a : tensor<4xf32>
}

// -----

// expected-error @+1 {{'func.func' op result 0: 'train.shard_of' needs a 1-D static tensor of 'f32', got 'tensor<2x2xf32>'}}
func.func @shard_of_not_flat(%a: tensor<2x2xf32>) -> (tensor<2x2xf32> {train.shard_of = tensor<8xf32>}) attributes {train.zero = #train.zero<stage = 3, ranks = 2, bucket = 100>} {
  return %a : tensor<2x2xf32>
}

// -----

// expected-error @+1 {{'func.func' op argument 0: 'train.shard_of' shards of 3 elements on 2 ranks cannot hold the 8 elements of 'tensor<8xf32>'}}
func.func @shard_of_too_small(%a: tensor<3xf32> {train.shard_of = tensor<8xf32>}) -> tensor<3xf32> attributes {train.zero = #train.zero<stage = 3, ranks = 2, bucket = 100>} {
  return %a : tensor<3xf32>
}

// -----

func.func @squared_norm_of_nothing() -> tensor<24xi64> {
  // expected-error @+1 {{'train.squared_norm' op needs at least one tensor to take the norm of}}
  %s = "train.squared_norm"() : () -> tensor<24xi64>
  return %s : tensor<24xi64>
}

// -----

func.func @squared_norm_rounded(%g: tensor<8xf32>) -> tensor<4xi64> {
  // expected-error @+1 {{'train.squared_norm' op result must be tensor<24xi64> (an exact sum of squares: 22 limbs, the infinite and NaN counts), not 'tensor<4xi64>'}}
  %s = train.squared_norm %g : tensor<8xf32> -> tensor<4xi64>
  return %s : tensor<4xi64>
}

// -----

func.func @clip_by_a_float_squared_norm(%g: tensor<8xf32>, %s: tensor<f32>) -> tensor<8xf32> {
  // expected-error @+1 {{'train.clip_grad_norm' op operand #1 must be variadic of statically shaped tensor of 64-bit signless integer values, but got 'tensor<f32>'}}
  %c:2 = train.clip_grad_norm %g squared_norm(%s) {max_norm = 1.0 : f64} : (tensor<8xf32>, tensor<f32>) -> (tensor<8xf32>, tensor<f32>)
  return %c#0 : tensor<8xf32>
}

// -----

func.func @clip_by_a_short_squared_norm(%g: tensor<8xf32>, %s: tensor<23xi64>) -> tensor<8xf32> {
  // expected-error @+1 {{'train.clip_grad_norm' op squared_norm must be tensor<24xi64> (an exact sum of squares: 22 limbs, the infinite and NaN counts), not 'tensor<23xi64>'}}
  %c:2 = train.clip_grad_norm %g squared_norm(%s) {max_norm = 1.0 : f64} : (tensor<8xf32>, tensor<23xi64>) -> (tensor<8xf32>, tensor<f32>)
  return %c#0 : tensor<8xf32>
}

// -----

func.func @loss_scale_state_shape(%state: tensor<2xi64>) -> tensor<f32> {
  // expected-error @+1 {{'train.loss_scale' op loss-scale state must be tensor<3xi64> (log2 of the scale over the initial one, clean steps, skipped steps), got 'tensor<2xi64>'}}
  %s = train.loss_scale %state {initial = 65536.0 : f64} : tensor<2xi64> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

func.func @loss_scale_initial(%state: tensor<3xi64>) -> tensor<f32> {
  // expected-error @+1 {{'train.loss_scale' op initial loss scale must be a positive normal f32 (from 2^-126 to below 2^128), got -1.000000e+00}}
  %s = train.loss_scale %state {initial = -1.0 : f64} : tensor<3xi64> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

func.func @loss_scale_zero_in_f32(%state: tensor<3xi64>) -> tensor<f32> {
  // expected-error @+1 {{'train.loss_scale' op initial loss scale must be a positive normal f32 (from 2^-126 to below 2^128), got 1.000000e-46}}
  %s = train.loss_scale %state {initial = 1.0e-46 : f64} : tensor<3xi64> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

func.func @unscaled_not_f32(%g: tensor<8xf16>, %state: tensor<3xi64>) {
  // expected-error @+1 {{'train.unscale_gradients' op an unscaled gradient is f32 of its gradient's shape, got 'tensor<8xf16>' for 'tensor<8xf16>'}}
  %u:2 = train.unscale_gradients %g scale(%state) {initial = 1.0 : f64, growth_interval = 10 : i64} : (tensor<8xf16>), tensor<3xi64> -> (tensor<8xf16>), tensor<3xi64>
  return
}

// -----

func.func @unscale_count(%g: tensor<8xf16>, %state: tensor<3xi64>) {
  // expected-error @+1 {{'train.unscale_gradients' op must return one unscaled gradient per gradient}}
  %u:3 = train.unscale_gradients %g scale(%state) {initial = 1.0 : f64, growth_interval = 10 : i64} : (tensor<8xf16>), tensor<3xi64> -> (tensor<8xf32>, tensor<8xf32>), tensor<3xi64>
  return
}

// -----

func.func @unscale_growth(%g: tensor<8xf16>, %state: tensor<3xi64>) {
  // expected-error @+1 {{'train.unscale_gradients' op growth_interval must be >= 1, got 0}}
  %u:2 = train.unscale_gradients %g scale(%state) {initial = 1.0 : f64, growth_interval = 0 : i64} : (tensor<8xf16>), tensor<3xi64> -> (tensor<8xf32>), tensor<3xi64>
  return
}

// -----

func.func @unscale_state_type(%g: tensor<8xf16>, %state: tensor<3xi64>) {
  // expected-error @+1 {{'train.unscale_gradients' op new state must have the state's type}}
  %u:2 = train.unscale_gradients %g scale(%state) {initial = 1.0 : f64, growth_interval = 10 : i64} : (tensor<8xf16>), tensor<3xi64> -> (tensor<8xf32>), tensor<4xi64>
  return
}

// -----

func.func @unscale_nothing(%state: tensor<3xi64>) {
  // expected-error @+1 {{'train.unscale_gradients' op needs at least one gradient}}
  %u = "train.unscale_gradients"(%state) {initial = 1.0 : f64, growth_interval = 10 : i64, operandSegmentSizes = array<i32: 0, 1, 0>} : (tensor<3xi64>) -> tensor<3xi64>
  return
}

// -----

func.func @unscale_by_a_short_squared_norm(%g: tensor<8xf16>, %state: tensor<3xi64>, %s: tensor<23xi64>) {
  // expected-error @+1 {{'train.unscale_gradients' op squared_norm must be tensor<24xi64> (an exact sum of squares: 22 limbs, the infinite and NaN counts), not 'tensor<23xi64>'}}
  %u:2 = train.unscale_gradients %g scale(%state) squared_norm(%s : tensor<23xi64>) {initial = 1.0 : f64, growth_interval = 10 : i64} : (tensor<8xf16>), tensor<3xi64> -> (tensor<8xf32>), tensor<3xi64>
  return
}

// -----

func.func @attention_heads(%q: tensor<1x6x8x4xf32>, %kv: tensor<1x4x8x4xf32>) {
  // expected-error @+1 {{'train.attention' op the query heads (6) must be a multiple of the key/value heads (4)}}
  %o, %lse = "train.attention"(%q, %kv, %kv) {scale = 0.5 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>} : (tensor<1x6x8x4xf32>, tensor<1x4x8x4xf32>, tensor<1x4x8x4xf32>) -> (tensor<1x6x8x4xf32>, tensor<1x6x8xf32>)
  return
}

// -----

func.func @attention_causal_keys(%q: tensor<1x2x8x4xf32>, %kv: tensor<1x2x6x4xf32>) {
  // expected-error @+1 {{'train.attention' op causal attention needs as many keys as queries, got 6 and 8}}
  %o, %lse = "train.attention"(%q, %kv, %kv) {causal, scale = 0.5 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>} : (tensor<1x2x8x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>) -> (tensor<1x2x8x4xf32>, tensor<1x2x8xf32>)
  return
}

// -----

func.func @attention_rate(%q: tensor<1x2x8x4xf32>) {
  // expected-error @+1 {{'train.attention' op rate must be in [0, 1), got 1.000000e+00}}
  %o, %lse = train.attention %q, %q, %q {causal, scale = 0.5 : f64, rate = 1.0 : f64} : tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32> -> tensor<1x2x8x4xf32>, tensor<1x2x8xf32>
  return
}

// -----

func.func @attention_counters(%q: tensor<1x2x8x4xf32>) {
  // expected-error @+1 {{'train.attention' op has dropout counters (key, part, seed, offset, first, part_elements, rank_elements) but no dropout (rate 0)}}
  %o, %lse = train.attention %q, %q, %q {causal, scale = 0.5 : f64, seed = 3 : i64} : tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32> -> tensor<1x2x8x4xf32>, tensor<1x2x8xf32>
  return
}

// -----

func.func @attention_scale(%q: tensor<1x2x8x4xf32>) {
  // expected-error @+1 {{'train.attention' op scale must be finite and > 0, got -1}}
  %o, %lse = train.attention %q, %q, %q {causal, scale = -1.0 : f64} : tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32> -> tensor<1x2x8x4xf32>, tensor<1x2x8xf32>
  return
}

// -----

func.func @attention_head_dim(%q: tensor<1x2x8x4xf32>, %k: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'train.attention' op q and k must have one head dimension, got 4 and 8}}
  %o, %lse = "train.attention"(%q, %k, %k) {scale = 0.5 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>} : (tensor<1x2x8x4xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8xf32>)
  return
}

// -----

func.func @attention_output(%q: tensor<1x2x8x4xf32>) {
  // expected-error @+1 {{'train.attention' op output must be 'tensor<1x8x2x4xf32>'}}
  %o, %lse = "train.attention"(%q, %q, %q) {scale = 0.5 : f64, transpose_output, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>} : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> (tensor<1x2x8x4xf32>, tensor<1x2x8xf32>)
  return
}

// -----

func.func @attention_grad_types(%q: tensor<1x2x8x4xf32>, %lse: tensor<1x2x8xf32>) {
  // expected-error @+1 {{'train.attention_grad' op gradients must have the types of q, k and v}}
  %dq, %dk, %dv = "train.attention_grad"(%q, %q, %q, %q, %q, %lse) {scale = 0.5 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 0, 0>} : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8xf32>) -> (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x8xf32>)
  return
}

// -----

func.func @attention_rank(%q: tensor<2x8x4xf32>) {
  // expected-error @+1 {{'train.attention' op q, k and v must be rank-4 tensors [batch, heads, sequence, head dim]}}
  %o, %lse = "train.attention"(%q, %q, %q) {scale = 0.5 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>} : (tensor<2x8x4xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> (tensor<2x8x4xf32>, tensor<2x8xf32>)
  return
}

// -----

func.func @attention_element_types(%q: tensor<1x2x8x4xf32>, %kv: tensor<1x2x8x4xbf16>) {
  // expected-error @+1 {{'train.attention' op q, k and v must have one element type}}
  %o, %lse = "train.attention"(%q, %kv, %kv) {scale = 0.5 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>} : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xbf16>, tensor<1x2x8x4xbf16>) -> (tensor<1x2x8x4xf32>, tensor<1x2x8xf32>)
  return
}

// -----

func.func @attention_batch(%q: tensor<1x2x8x4xf32>, %kv: tensor<2x2x8x4xf32>) {
  // expected-error @+1 {{'train.attention' op q, k and v must have one batch size}}
  %o, %lse = "train.attention"(%q, %kv, %kv) {scale = 0.5 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>} : (tensor<1x2x8x4xf32>, tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>) -> (tensor<1x2x8x4xf32>, tensor<1x2x8xf32>)
  return
}

// -----

func.func @attention_kv(%q: tensor<1x2x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x6x4xf32>) {
  // expected-error @+1 {{'train.attention' op k and v must have the same heads and sequence, got 'tensor<1x2x8x4xf32>' and 'tensor<1x2x6x4xf32>'}}
  %o, %lse = "train.attention"(%q, %k, %v) {scale = 0.5 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>} : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x6x4xf32>) -> (tensor<1x2x8x4xf32>, tensor<1x2x8xf32>)
  return
}

// -----

func.func @attention_lse(%q: tensor<1x2x8x4xf32>) {
  // expected-error @+1 {{'train.attention' op lse must be 'tensor<1x2x8xf32>'}}
  %o, %lse = "train.attention"(%q, %q, %q) {scale = 0.5 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>} : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> (tensor<1x2x8x4xf32>, tensor<1x8x2xf32>)
  return
}

// -----

func.func @attention_grad_output(%q: tensor<1x2x8x4xf32>, %o: tensor<1x8x2x4xf32>, %lse: tensor<1x2x8xf32>) {
  // expected-error @+1 {{'train.attention_grad' op output and its gradient must be 'tensor<1x2x8x4xf32>'}}
  %dq, %dk, %dv = "train.attention_grad"(%o, %q, %q, %q, %o, %lse) {scale = 0.5 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 0, 0>} : (tensor<1x8x2x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x8x2x4xf32>, tensor<1x2x8xf32>) -> (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>)
  return
}

// -----

func.func @attention_grad_lse(%q: tensor<1x2x8x4xf32>, %lse: tensor<1x2x4xf32>) {
  // expected-error @+1 {{'train.attention_grad' op lse must be 'tensor<1x2x8xf32>'}}
  %dq, %dk, %dv = "train.attention_grad"(%q, %q, %q, %q, %q, %lse) {scale = 0.5 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 0, 0>} : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x4xf32>) -> (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>)
  return
}

// -----

func.func @bias_gelu_bias_shape(%x: tensor<4x8xf32>, %b: tensor<4xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'train.bias_gelu' op bias shape [4] must equal the trailing dimensions of input shape [4x8]}}
  %y = train.bias_gelu %x, %b : tensor<4x8xf32>, tensor<4xf32>
  return %y : tensor<4x8xf32>
}

// -----

func.func @bias_gelu_grad_bias_type(%dy: tensor<4x8xf32>, %x: tensor<4x8xf32>, %b: tensor<8xbf16>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'train.bias_gelu_grad' op bias element type must match the input's}}
  %y = train.bias_gelu_grad %dy, %x, %b : tensor<4x8xf32>, tensor<8xbf16>
  return %y : tensor<4x8xf32>
}

// -----

func.func @dropout_mask_negative_part_elements() {
  // expected-error @+1 {{part_elements must be >= 0, got -2}}
  %m = train.dropout_mask {rate = 0.1 : f64, seed = 0 : i64, offset = 0 : i64, part_elements = -2 : i64} : tensor<4xi1>
  return
}

// -----

shard.grid @tp(shape = 1x2)
func.func @grad_all_reduce_no_axis(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'train.grad_all_reduce' op sums the gradient over at least one grid axis}}
  %y = train.grad_all_reduce %x on @tp grid_axes = [] : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

shard.grid @tp(shape = 1x2)
func.func @grad_all_reduce_axes_order(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'train.grad_all_reduce' op grid axes must be increasing and non-negative}}
  %y = train.grad_all_reduce %x on @tp grid_axes = [1, 0] : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// expected-error @+1 {{#train.split: dim and axis must be >= 0 and parts >= 1, got dim = 0, parts = 0, axis = 1}}
func.func @split_parts(%w: tensor<4xf32> {train.param = "w", train.tensor_split = #train.split<dim = 0, parts = 0, grid = @tp, axis = 1>}) {
  return
}

// -----

shard.grid @tp(shape = 1x2)
// expected-error @+1 {{'func.func' op argument 0: 'train.tensor_split' is a #train.split of a dimension of a tensor argument, got #train.split<dim = 2, parts = 2, grid = @tp, axis = 1>}}
func.func @split_dim(%w: tensor<4xf32> {train.param = "w", train.tensor_split = #train.split<dim = 2, parts = 2, grid = @tp, axis = 1>}) {
  return
}

// -----

// expected-error @+1 {{'func.func' op 'train.tensor_split' names @tp, which is not a shard.grid in scope}}
func.func @split_no_grid(%w: tensor<4xf32> {train.param = "w", train.tensor_split = #train.split<dim = 0, parts = 2, grid = @tp, axis = 1>}) {
  return
}

// -----

shard.grid @tp(shape = 1x4)
// expected-error @+1 {{'func.func' op 'train.tensor_split' #train.split<dim = 0, parts = 2, grid = @tp, axis = 1> needs axis 1 of @tp to have 2 ranks}}
func.func @split_grid_parts(%w: tensor<4xf32> {train.param = "w", train.tensor_split = #train.split<dim = 0, parts = 2, grid = @tp, axis = 1>}) {
  return
}

// -----

shard.grid @tp(shape = 1x2)
func.func @dropout_split_dim(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'train.dropout' op split dimension 2 is not a dimension of the drawn 'tensor<4x8xi1>'}}
  %y, %m = train.dropout %x {rate = 0.1 : f64, seed = 0 : i64, offset = 0 : i64, split = #train.split<dim = 2, parts = 2, grid = @tp, axis = 1>} : tensor<4x8xf32> -> tensor<4x8xi1>
  return %y : tensor<4x8xf32>
}

// -----

shard.grid @tp(shape = 1x2)
func.func @dropout_mask_split_parts() -> tensor<4x8xi1> {
  // expected-error @+1 {{'train.dropout_mask' op 'split' #train.split<dim = 1, parts = 4, grid = @tp, axis = 1> needs axis 1 of @tp to have 4 ranks}}
  %m = train.dropout_mask {rate = 0.1 : f64, seed = 0 : i64, offset = 0 : i64, split = #train.split<dim = 1, parts = 4, grid = @tp, axis = 1>} : tensor<4x8xi1>
  return %m : tensor<4x8xi1>
}

// -----

func.func @dropout_rank_stride(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'train.dropout' op rank_stride must be >= 1, got 0}}
  %y, %m = train.dropout %x {rate = 0.1 : f64, seed = 0 : i64, offset = 0 : i64, rank_stride = 0 : i64} : tensor<4x8xf32> -> tensor<4x8xi1>
  return %y : tensor<4x8xf32>
}

// -----

// A fused attention's split is of the [B, H, S, S'] probabilities it draws.
shard.grid @tp(shape = 1x2)
func.func @attention_split_dim(%q: tensor<1x2x8x4xf32>) -> tensor<1x2x8x4xf32> {
  // expected-error @+1 {{'train.attention' op split dimension 4 is not a dimension of the drawn 'tensor<1x2x8x8xi1>'}}
  %o, %lse = train.attention %q, %q, %q {causal, scale = 0.5 : f64, rate = 0.1 : f64, split = #train.split<dim = 4, parts = 2, grid = @tp, axis = 1>} : tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32> -> tensor<1x2x8x4xf32>, tensor<1x2x8xf32>
  return %o : tensor<1x2x8x4xf32>
}

// -----

shard.grid @tp(shape = 1x2)
func.func @attention_grad_split_parts(%q: tensor<1x2x8x4xf32>, %lse: tensor<1x2x8xf32>) -> tensor<1x2x8x4xf32> {
  // expected-error @+1 {{'train.attention_grad' op 'split' #train.split<dim = 1, parts = 4, grid = @tp, axis = 1> needs axis 1 of @tp to have 4 ranks}}
  %dq, %dk, %dv = train.attention_grad %q, %q, %q, %q, %q, %lse {causal, scale = 0.5 : f64, rate = 0.1 : f64, split = #train.split<dim = 1, parts = 4, grid = @tp, axis = 1>} : tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8xf32>
  return %dq : tensor<1x2x8x4xf32>
}

// -----

shard.grid @tp(shape = 1x2)
func.func @embedding_split_dim(%t: tensor<8x6xf32>, %ids: tensor<4xi32>) -> tensor<4x6xf32> {
  // expected-error @+1 {{'train.embedding' op 'split' must split the table's rows (dimension 0, the vocabulary), got dimension 1}}
  %e = train.embedding %t, %ids {split = #train.split<dim = 1, parts = 2, grid = @tp, axis = 1>} : tensor<8x6xf32>, tensor<4xi32> -> tensor<4x6xf32>
  return %e : tensor<4x6xf32>
}

// -----

shard.grid @tp(shape = 1x2)
func.func @embedding_grad_split_grid(%g: tensor<4x6xf32>, %ids: tensor<4xi32>) -> tensor<8x6xf32> {
  // expected-error @+1 {{'train.embedding_grad' op 'split' #train.split<dim = 0, parts = 4, grid = @tp, axis = 1> needs axis 1 of @tp to have 4 ranks}}
  %d = train.embedding_grad %g, %ids {split = #train.split<dim = 0, parts = 4, grid = @tp, axis = 1>} : tensor<4x6xf32>, tensor<4xi32> -> tensor<8x6xf32>
  return %d : tensor<8x6xf32>
}

// -----

shard.grid @tp(shape = 1x2)
func.func @cross_entropy_part_split_dim(%l: tensor<2x4x8xf32>, %t: tensor<2x4xi32>, %m: tensor<2x4xf32>) {
  // expected-error @+1 {{'train.cross_entropy_part' op 'split' must split the logits' last dimension (the vocabulary, 2), got dimension 1}}
  %se, %tl = train.cross_entropy_part %l, %t, %m {ignore_index = -100 : i64, split = #train.split<dim = 1, parts = 2, grid = @tp, axis = 1>} : tensor<2x4x8xf32>, tensor<2x4xi32>, tensor<2x4xf32> -> tensor<2x4xf32>, tensor<2x4xf32>
  return
}

// -----

func.func @cross_entropy_part_max(%l: tensor<2x4x8xf32>, %t: tensor<2x4xi32>, %m: tensor<2x3xf32>) {
  // expected-error @+1 {{'train.cross_entropy_part' op max shape [2x3] must equal the targets shape [2x4]}}
  %se, %tl = train.cross_entropy_part %l, %t, %m {ignore_index = -100 : i64} : tensor<2x4x8xf32>, tensor<2x4xi32>, tensor<2x3xf32> -> tensor<2x4xf32>, tensor<2x4xf32>
  return
}

// -----

func.func @cross_entropy_merge_rows(%se: tensor<2x4xf32>, %tl: tensor<8xf32>, %m: tensor<2x4xf32>, %t: tensor<2x4xi32>) {
  // expected-error @+1 {{'train.cross_entropy_merge' op target_logit shape [8] must equal the targets shape [2x4]}}
  %sum, %count = train.cross_entropy_merge %se, %tl, %m, %t {ignore_index = -100 : i64} : tensor<2x4xf32>, tensor<8xf32>, tensor<2x4xf32>, tensor<2x4xi32> -> tensor<f32>, tensor<i64>
  return
}

// -----

func.func @cross_entropy_part_grad_rows(%d: tensor<2x4xf32>, %l: tensor<2x4x8xf32>, %m: tensor<2x4xf32>, %t: tensor<4x2xi32>) {
  // expected-error @+1 {{'train.cross_entropy_part_grad' op targets shape [4x2] must equal the logits shape without its last dimension [2x4x8]}}
  %dl = train.cross_entropy_part_grad %d, %d, %l, %m, %t {ignore_index = -100 : i64} : tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4x8xf32>, tensor<2x4xf32>, tensor<4x2xi32>
  return
}

// -----

func.func @broadcast_dim(%k: tensor<2x2x4xf32>) -> tensor<2x4x4xf32> {
  // expected-error @+1 {{'train.broadcast' op dimension 1 of the input (2) is not 1 and differs from the result's (4)}}
  %r = train.broadcast %k : tensor<2x2x4xf32> -> tensor<2x4x4xf32>
  return %r : tensor<2x4x4xf32>
}

// -----

func.func @broadcast_rank(%k: tensor<2x1x4xf32>) -> tensor<3x2x1x4xf32> {
  // expected-error @+1 {{'train.broadcast' op result rank 4 must equal the input's 3}}
  %r = train.broadcast %k : tensor<2x1x4xf32> -> tensor<3x2x1x4xf32>
  return %r : tensor<3x2x1x4xf32>
}

// -----

func.func @broadcast_type(%k: tensor<2x1x4xf32>) -> tensor<2x3x4xbf16> {
  // expected-error @+1 {{'train.broadcast' op result element type must match the input's}}
  %r = train.broadcast %k : tensor<2x1x4xf32> -> tensor<2x3x4xbf16>
  return %r : tensor<2x3x4xbf16>
}

// -----

func.func @cross_entropy_merge_grad_rows(%g: tensor<f32>, %se: tensor<8xf32>, %t: tensor<2x4xi32>) {
  // expected-error @+1 {{'train.cross_entropy_merge_grad' op sum_exp shape [8] must equal the targets shape [2x4]}}
  %dse, %dtl = train.cross_entropy_merge_grad %g, %se, %t {ignore_index = -100 : i64} : tensor<f32>, tensor<8xf32>, tensor<2x4xi32> -> tensor<8xf32>, tensor<8xf32>
  return
}

// -----

func.func @slice_outside(%x: tensor<2x24xf32>) {
  // expected-error @+1 {{'train.slice' op indices [20, 28) are not inside the 24 of dimension 1}}
  %r = train.slice %x {dim = 1 : i64, offset = 20 : i64, size = 8 : i64} : tensor<2x24xf32> -> tensor<2x8xf32>
  return
}

// -----

func.func @slice_dim(%x: tensor<2x24xf32>) {
  // expected-error @+1 {{'train.slice' op 'dim' 2 is not a dimension of the rank-2 tensor}}
  %r = train.slice %x {dim = 2 : i64, offset = 0 : i64, size = 8 : i64} : tensor<2x24xf32> -> tensor<2x8xf32>
  return
}

// -----

func.func @slice_type(%x: tensor<2x24xf32>) {
  // expected-error @+1 {{'train.slice' op the part must be 'tensor<2x8xf32>', got 'tensor<2x9xf32>'}}
  %r = train.slice %x {dim = 1 : i64, offset = 0 : i64, size = 8 : i64} : tensor<2x24xf32> -> tensor<2x9xf32>
  return
}

// -----

func.func @slice_grad_whole(%g: tensor<2x8xf32>) {
  // expected-error @+1 {{'train.slice_grad' op indices [20, 28) are not inside the 24 of dimension 1}}
  %r = train.slice_grad %g {dim = 1 : i64, offset = 20 : i64, whole = 24 : i64} : tensor<2x8xf32> -> tensor<2x24xf32>
  return
}

// -----

func.func @slice_grad_type(%g: tensor<2x8xf32>) {
  // expected-error @+1 {{'train.slice_grad' op the part must be 'tensor<3x8xf32>', got 'tensor<2x8xf32>'}}
  %r = train.slice_grad %g {dim = 1 : i64, offset = 0 : i64, whole = 24 : i64} : tensor<2x8xf32> -> tensor<3x24xf32>
  return
}

// -----

func.func @slice_grad_dim(%g: tensor<2x8xf32>) {
  // expected-error @+1 {{'train.slice_grad' op 'dim' 2 is not a dimension of the rank-2 gradient}}
  %r = train.slice_grad %g {dim = 2 : i64, offset = 0 : i64, whole = 24 : i64} : tensor<2x8xf32> -> tensor<2x24xf32>
  return
}

// -----

func.func @lion_m_f32(%p: tensor<8xf32>, %m: tensor<8xbf16>, %lr: tensor<f32>) {
  // expected-error @+1 {{m must be f32}}
  %r:2 = train.lion %p, %p, %m, %lr {beta1 = 0.9 : f64, beta2 = 0.99 : f64, weight_decay = 0.0 : f64} : tensor<8xf32>, tensor<8xf32>, tensor<8xbf16>, tensor<f32>
  return
}

// -----

func.func @lion_beta(%p: tensor<8xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{beta2 must be in [0, 1), got 1}}
  %r:2 = train.lion %p, %p, %p, %lr {beta1 = 0.9 : f64, beta2 = 1.0 : f64, weight_decay = 0.0 : f64} : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<f32>
  return
}

// -----

func.func @lion_8bit_block(%p: tensor<300xf32>, %c: tensor<300xi8>, %a: tensor<1xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{absmax must hold one value per block (3), got [1]}}
  %r:3 = train.lion_8bit %p, %p, %c, %a, %lr {beta1 = 0.9 : f64, beta2 = 0.99 : f64, weight_decay = 0.0 : f64, block = 128 : i64} : tensor<300xf32>, tensor<300xf32>, tensor<300xi8>, tensor<1xf32>, tensor<f32>
  return
}

// -----

func.func @sophia_rho(%p: tensor<8xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{rho must be a finite value > 0, got 0}}
  %r:3 = train.sophia %p, %p, %p, %p, %lr {beta1 = 0.965 : f64, rho = 0.0 : f64, epsilon = 1.0e-15 : f64, weight_decay = 0.1 : f64, batch = 64 : i64} : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<f32>
  return
}

// -----

func.func @sophia_batch(%p: tensor<8xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{batch (the tokens of a step) must be >= 1, got 0}}
  %r:3 = train.sophia %p, %p, %p, %p, %lr {beta1 = 0.965 : f64, rho = 0.04 : f64, epsilon = 1.0e-15 : f64, weight_decay = 0.1 : f64, batch = 0 : i64} : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<f32>
  return
}

// -----

func.func @sophia_h_shape(%p: tensor<8xf32>, %h: tensor<4xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{grad, m and h must have the parameter's shape [8]}}
  %r:3 = train.sophia %p, %p, %p, %h, %lr {beta1 = 0.965 : f64, rho = 0.04 : f64, epsilon = 1.0e-15 : f64, weight_decay = 0.1 : f64, batch = 64 : i64} : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<4xf32>, tensor<f32>
  return
}

// -----

func.func @sophia_8bit_eps(%p: tensor<300xf32>, %c: tensor<300xi8>, %a: tensor<2xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{epsilon must be > 0, got 0}}
  %r:5 = train.sophia_8bit %p, %p, %c, %a, %c, %a, %lr {beta1 = 0.965 : f64, rho = 0.04 : f64, epsilon = 0.0 : f64, weight_decay = 0.1 : f64, batch = 64 : i64, block = 256 : i64} : tensor<300xf32>, tensor<300xf32>, tensor<300xi8>, tensor<2xf32>, tensor<300xi8>, tensor<2xf32>, tensor<f32>
  return
}

// -----

func.func @hessian_ema_shape(%h: tensor<8xf32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{grad must have h's shape [8]}}
  %r = train.hessian_ema %h, %g {beta2 = 0.99 : f64} : tensor<8xf32>, tensor<4xf32>
  return
}

// -----

func.func @hessian_ema_beta(%h: tensor<8xf32>) {
  // expected-error @+1 {{beta2 must be in [0, 1), got 1.5}}
  %r = train.hessian_ema %h, %h {beta2 = 1.5 : f64} : tensor<8xf32>, tensor<8xf32>
  return
}

// -----

func.func @sample_labels(%x: tensor<4x8x16xf32>) {
  // expected-error @+1 {{labels must have the logits' shape without the class dimension [4x8]}}
  %y = train.sample %x {seed = 0 : i64, offset = 0 : i64} : tensor<4x8x16xf32> -> tensor<4x16xi32>
  return
}

// -----

func.func @hessian_step_every() attributes {train.hessian_step = #train.hessian_step<@train_step, every = 0>} {
  // expected-error @-1 {{a Hessian step runs every k >= 1 steps, got 0}}
  return
}

// -----

func.func @lion_shape(%p: tensor<8xf32>, %m: tensor<4xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{grad and m must have the parameter's shape [8]}}
  %r:2 = train.lion %p, %p, %m, %lr {beta1 = 0.9 : f64, beta2 = 0.99 : f64, weight_decay = 0.0 : f64} : tensor<8xf32>, tensor<8xf32>, tensor<4xf32>, tensor<f32>
  return
}

// -----

func.func @lion_8bit_codes_shape(%p: tensor<300xf32>, %c: tensor<30x10xi8>, %a: tensor<2xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{grad and m codes must have the parameter's shape [300]}}
  %r:3 = train.lion_8bit %p, %p, %c, %a, %lr {beta1 = 0.9 : f64, beta2 = 0.99 : f64, weight_decay = 0.0 : f64, block = 256 : i64} : tensor<300xf32>, tensor<300xf32>, tensor<30x10xi8>, tensor<2xf32>, tensor<f32>
  return
}

// -----

func.func @sophia_h_f32(%p: tensor<8xf32>, %h: tensor<8xbf16>, %lr: tensor<f32>) {
  // expected-error @+1 {{m and h must be f32}}
  %r:3 = train.sophia %p, %p, %p, %h, %lr {beta1 = 0.965 : f64, rho = 0.04 : f64, epsilon = 1.0e-15 : f64, weight_decay = 0.1 : f64, batch = 64 : i64} : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xbf16>, tensor<f32>
  return
}

// -----

func.func @sophia_8bit_codes_shape(%p: tensor<300xf32>, %c: tensor<30x10xi8>, %a: tensor<2xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{grad and state codes must have the parameter's shape [300]}}
  %r:5 = train.sophia_8bit %p, %p, %c, %a, %c, %a, %lr {beta1 = 0.965 : f64, rho = 0.04 : f64, epsilon = 1.0e-15 : f64, weight_decay = 0.1 : f64, batch = 64 : i64, block = 256 : i64} : tensor<300xf32>, tensor<300xf32>, tensor<30x10xi8>, tensor<2xf32>, tensor<30x10xi8>, tensor<2xf32>, tensor<f32>
  return
}

// -----

func.func @sample_no_classes(%x: tensor<4x0xf32>) {
  // expected-error @+1 {{logits must have a class dimension of at least 1}}
  %y = train.sample %x {seed = 0 : i64, offset = 0 : i64} : tensor<4x0xf32> -> tensor<4xi32>
  return
}

// -----

func.func @sample_offset(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{offset must be >= 0}}
  %y = train.sample %x {seed = 0 : i64, offset = -1 : i64} : tensor<4x8xf32> -> tensor<4xi32>
  return
}

// -----

// expected-error @+1 {{'train.hessian_step' is a #train.hessian_step on a function, got 3 : i64}}
func.func @hessian_marker_value() attributes {train.hessian_step = 3 : i64} {
  return
}

// -----

func.func @hessian_marker_on_op() -> tensor<f32> {
  // expected-error @+1 {{'train.hessian_step' is a #train.hessian_step on a function, got #train.hessian_step<@train_step, every = 2>}}
  %c = arith.constant {train.hessian_step = #train.hessian_step<@train_step, every = 2>} dense<0.0> : tensor<f32>
  return %c : tensor<f32>
}

// -----

// The arena plan of a micro-batch loop's arguments: on a train.accumulate.
func.func @plan_argument_offsets_owner(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'train.add' op 'train.argument_offsets' is on a train.accumulate one arena offset per argument of its body (array<i64>), got array<i64: 0>}}
  %c = train.add %a, %a {train.argument_offsets = array<i64: 0>} : tensor<4xf32>
  return %c : tensor<4xf32>
}

// -----

// One offset per argument of the body: a tensor's >= 0.
func.func @plan_argument_offsets_negative(%t: tensor<2x4xi32>) -> tensor<f32> {
  // expected-error @+1 {{'train.accumulate' op 'train.argument_offsets': argument 0 has offset -1 (a tensor's is >= 0, any other argument's -1)}}
  %sum = train.accumulate %t steps 2 padding [0] {train.argument_offsets = array<i64: -1>} : (tensor<2x4xi32>) -> (tensor<f32>) {
  ^bb0(%rows: tensor<1x4xi32>):
    %zero = arith.constant dense<0.0> : tensor<f32>
    train.yield %zero : tensor<f32>
  }
  return %sum : tensor<f32>
}
