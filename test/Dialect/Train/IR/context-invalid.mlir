// RUN: trainmem-opt %s -split-input-file -verify-diagnostics

// train.context_slice and #train.context (train-context-parallel): each
// verifier message.

shard.grid @cp(shape = 1x2)
func.func @parts(%ids: tensor<1x8xi32>) {
  // expected-error @+1 {{#train.context: parts must be >= 1 and axis >= 0, got parts = 0, axis = 1}}
  %0 = train.context_slice %ids {dim = 1 : i64, context_parallel = #train.context<parts = 0, grid = @cp, axis = 1, balanced>} : tensor<1x8xi32> -> tensor<1x8xi32>
  return
}

// -----

shard.grid @cp(shape = 1x2)
func.func @dim(%ids: tensor<1x8xi32>) {
  // expected-error @+1 {{'train.context_slice' op dim 2 is not a dimension of 'tensor<1x8xi32>' (and of the result)}}
  %0 = train.context_slice %ids {dim = 2 : i64, context_parallel = #train.context<parts = 2, grid = @cp, axis = 1, balanced>} : tensor<1x8xi32> -> tensor<1x8xi32>
  return
}

// -----

shard.grid @cp(shape = 1x3)
func.func @divide(%ids: tensor<1x8xi32>) {
  // expected-error @+1 {{'train.context_slice' op 3 ranks do not divide the 8 rows of dim 1}}
  %0 = train.context_slice %ids {dim = 1 : i64, context_parallel = #train.context<parts = 3, grid = @cp, axis = 1, contiguous>} : tensor<1x8xi32> -> tensor<1x2xi32>
  return
}

// -----

shard.grid @cp(shape = 1x3)
func.func @divide_balanced(%ids: tensor<1x9xi32>) {
  // expected-error @+1 {{'train.context_slice' op 3 ranks (balanced: 2 chunks each) do not divide the 9 rows of dim 1}}
  %0 = train.context_slice %ids {dim = 1 : i64, context_parallel = #train.context<parts = 3, grid = @cp, axis = 1, balanced>} : tensor<1x9xi32> -> tensor<1x3xi32>
  return
}

// -----

shard.grid @cp(shape = 1x2)
func.func @result(%ids: tensor<1x8xi32>) {
  // expected-error @+1 {{'train.context_slice' op result must be 'tensor<1x8xi32>' with 4 rows of dim 1}}
  %0 = train.context_slice %ids {dim = 1 : i64, context_parallel = #train.context<parts = 2, grid = @cp, axis = 1, balanced>} : tensor<1x8xi32> -> tensor<1x2xi32>
  return
}

// -----

shard.grid @cp(shape = 1x2)
func.func @element(%ids: tensor<1x8xi32>) {
  // expected-error @+1 {{'train.context_slice' op element type must not change}}
  %0 = train.context_slice %ids {dim = 1 : i64, context_parallel = #train.context<parts = 2, grid = @cp, axis = 1, balanced>} : tensor<1x8xi32> -> tensor<1x4xi64>
  return
}

// -----

shard.grid @cp(shape = 1x2)
func.func @keys(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>) {
  // expected-error @+1 {{'train.attention' op a context-parallel rank's 4 queries need the group's 2 x 4 keys, got 4}}
  %o, %lse = train.attention %q, %k, %k {causal, scale = 0.5 : f64, context_parallel = #train.context<parts = 2, grid = @cp, axis = 1, balanced>} : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>, tensor<1x2x4xf32>
  return
}

// -----

shard.grid @cp(shape = 1x2)
func.func @odd(%q: tensor<1x2x3x8xf32>, %k: tensor<1x2x6x8xf32>) {
  // expected-error @+1 {{'train.attention' op balanced context needs an even number of a rank's queries (two chunks), got 3}}
  %o, %lse = train.attention %q, %k, %k {causal, scale = 0.5 : f64, context_parallel = #train.context<parts = 2, grid = @cp, axis = 1, balanced>} : tensor<1x2x3x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32> -> tensor<1x2x3x8xf32>, tensor<1x2x3xf32>
  return
}

// -----

shard.grid @cp(shape = 1x2)
func.func @alibi(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'train.attention' op ALiBi's bias is not placed by a context split}}
  %o, %lse = train.attention %q, %k, %k {causal, scale = 0.5 : f64, alibi_slopes = array<f64: 0.5, 0.25>, context_parallel = #train.context<parts = 2, grid = @cp, axis = 1, balanced>} : tensor<1x2x4x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32> -> tensor<1x2x4x8xf32>, tensor<1x2x4xf32>
  return
}

// -----

shard.grid @cp(shape = 1x2)
func.func @gradient_keys(%g: tensor<1x2x4x8xf32>, %q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %lse: tensor<1x2x4xf32>) {
  // expected-error @+1 {{'train.attention_grad' op a context-parallel rank's 4 queries need the group's 2 x 4 keys, got 4}}
  %dq, %dk, %dv = train.attention_grad %g, %q, %k, %k, %g, %lse {causal, scale = 0.5 : f64, context_parallel = #train.context<parts = 2, grid = @cp, axis = 1, balanced>} : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4xf32>
  return
}

// -----

// The ring form (exchange=ring): a rank's own keys, in a context group.

func.func @ring_without_context(%q: tensor<1x2x4x8xf32>) {
  // expected-error @+1 {{'train.attention' op ring needs context_parallel (the group whose ranks pass their keys and values around)}}
  %o, %lse = train.attention %q, %q, %q {causal, scale = 0.5 : f64, ring} : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>, tensor<1x2x4xf32>
  return
}

// -----

shard.grid @cp(shape = 1x2)
func.func @ring_gathered_keys(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'train.attention' op a ring's rank attends with its 4 queries to blocks of as many keys (its own, then its peers'), got 8}}
  %o, %lse = train.attention %q, %k, %k {causal, scale = 0.5 : f64, ring, context_parallel = #train.context<parts = 2, grid = @cp, axis = 1, balanced>} : tensor<1x2x4x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32> -> tensor<1x2x4x8xf32>, tensor<1x2x4xf32>
  return
}

// -----

shard.grid @cp(shape = 1x2)
func.func @ring_gradient_keys(%g: tensor<1x2x4x8xf32>, %q: tensor<1x2x4x8xf32>, %k: tensor<1x2x8x8xf32>, %lse: tensor<1x2x4xf32>) {
  // expected-error @+1 {{'train.attention_grad' op a ring's rank attends with its 4 queries to blocks of as many keys (its own, then its peers'), got 8}}
  %dq, %dk, %dv = train.attention_grad %g, %q, %k, %k, %g, %lse {causal, scale = 0.5 : f64, ring, context_parallel = #train.context<parts = 2, grid = @cp, axis = 1, balanced>} : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4xf32>
  return
}

// -----

shard.grid @cp(shape = 1x2)
func.func @workspace_offset(%q: tensor<1x2x4x8xf32>) {
  // expected-error @+1 {{'train.context_slice' op 'train.workspace_offset' is on an op with a workspace its arena offset (i64 >= 0), got 64 : i64}}
  %0 = "train.context_slice"(%q) {dim = 2 : i64, context_parallel = #train.context<parts = 2, grid = @cp, axis = 1, balanced>, train.workspace_offset = 64 : i64} : (tensor<1x2x4x8xf32>) -> tensor<1x2x2x8xf32>
  return
}
