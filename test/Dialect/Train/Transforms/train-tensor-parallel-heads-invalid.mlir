// RUN: trainmem-opt %s -split-input-file -verify-diagnostics -train-tensor-parallel="size=2" -o /dev/null

// K/V heads are told from the queries' by their projections' heads: here
// the queries' projection has another reader, so no K/V heads are
// replicated and the product over one K/V head of 4 columns, split, is
// refused.
func.func @forward(%x: tensor<1x4x8xf32> {train.input = "x"},
                   %wq: tensor<8x8xf32> {train.param = "q"},
                   %wk: tensor<8x4xf32> {train.param = "k"},
                   %wo: tensor<8x8xf32> {train.param = "o"}) -> tensor<1x4x8xf32> {
  %y = train.block attention layer 0 -> tensor<1x4x8xf32> {
    %q = train.matmul %x, %wq : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32>
    %k = train.matmul %x, %wk : tensor<1x4x8xf32>, tensor<8x4xf32> -> tensor<1x4x4xf32>
    %qh = train.reshape %q : tensor<1x4x8xf32> -> tensor<1x4x2x4xf32>
    %kh = train.reshape %k : tensor<1x4x4xf32> -> tensor<1x4x1x4xf32>
    // expected-error @+1 {{train-tensor-parallel: would sum over a split dimension (for attention: 2 must divide the heads, and divide the K/V heads or be a multiple of them)}}
    %s = train.matmul %qh, %kh {transpose_rhs} : tensor<1x4x2x4xf32>, tensor<1x4x1x4xf32> -> tensor<1x4x2x1xf32>
    %o = train.matmul %q, %wo : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32>
    train.yield %o : tensor<1x4x8xf32>
  }
  return %y : tensor<1x4x8xf32>
}

// -----

// Neither divides the other: 2 ranks and 3 K/V heads.
func.func @forward(%x: tensor<1x4x12xf32> {train.input = "x"},
                   %wq: tensor<12x12xf32> {train.param = "q"},
                   %wk: tensor<12x6xf32> {train.param = "k"},
                   %wo: tensor<12x12xf32> {train.param = "o"}) -> tensor<1x4x12xf32> {
  %y = train.block attention layer 0 -> tensor<1x4x12xf32> {
    %q = train.matmul %x, %wq : tensor<1x4x12xf32>, tensor<12x12xf32> -> tensor<1x4x12xf32>
    %k = train.matmul %x, %wk : tensor<1x4x12xf32>, tensor<12x6xf32> -> tensor<1x4x6xf32>
    %qh = train.reshape %q : tensor<1x4x12xf32> -> tensor<1x4x6x2xf32>
    // expected-error @+1 {{train-tensor-parallel: cannot split this reshape: no dimension of its result holds the split dimension's outer part in 2 parts}}
    %kh = train.reshape %k : tensor<1x4x6xf32> -> tensor<1x4x3x2xf32>
    %s = train.matmul %qh, %qh {transpose_rhs} : tensor<1x4x6x2xf32>, tensor<1x4x6x2xf32> -> tensor<1x4x6x6xf32>
    %o = train.matmul %q, %wo : tensor<1x4x12xf32>, tensor<12x12xf32> -> tensor<1x4x12xf32>
    train.yield %o : tensor<1x4x12xf32>
  }
  return %y : tensor<1x4x12xf32>
}

// -----

// Replicated K/V heads are taken in the grouped-query form [batch, kv, 1,
// seq, dim] the product broadcasts; here the one K/V head meets the
// queries in another layout.
func.func @forward(%x: tensor<1x4x8xf32> {train.input = "x"},
                   %wq: tensor<8x8xf32> {train.param = "q"},
                   %wk: tensor<8x4xf32> {train.param = "k"},
                   %wo: tensor<2x8xf32> {train.param = "o"}) -> tensor<1x4x8xf32> {
  %y = train.block attention layer 0 -> tensor<1x4x8xf32> {
    %q = train.matmul %x, %wq : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32>
    %k = train.matmul %x, %wk : tensor<1x4x8xf32>, tensor<8x4xf32> -> tensor<1x4x4xf32>
    %qh = train.reshape %q : tensor<1x4x8xf32> -> tensor<1x4x2x4xf32>
    %kh = train.reshape %k : tensor<1x4x4xf32> -> tensor<1x4x1x4xf32>
    // expected-error @+1 {{train-tensor-parallel: cannot replicate the K/V heads (2 ranks share 1): their operand of this product is not [batch, 1, 1, seq, dim] but 'tensor<1x4x1x4xf32>'}}
    %s = train.matmul %qh, %kh {transpose_rhs} : tensor<1x4x2x4xf32>, tensor<1x4x1x4xf32> -> tensor<1x4x2x1xf32>
    %r = train.reshape %s : tensor<1x4x2x1xf32> -> tensor<1x4x2xf32>
    %c = train.matmul %r, %wo : tensor<1x4x2xf32>, tensor<2x8xf32> -> tensor<1x4x8xf32>
    train.yield %c : tensor<1x4x8xf32>
  }
  return %y : tensor<1x4x8xf32>
}
