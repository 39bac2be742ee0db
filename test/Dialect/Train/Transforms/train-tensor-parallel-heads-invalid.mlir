// RUN: trainmem-opt %s -verify-diagnostics -train-tensor-parallel="size=2" -o /dev/null

// Grouped-query attention: t must divide the K/V heads (one K/V head of 4
// columns would be split inside the head).
func.func @forward(%x: tensor<1x4x8xf32> {train.input = "x"},
                   %wq: tensor<8x8xf32> {train.param = "q"},
                   %wk: tensor<8x4xf32> {train.param = "k"},
                   %wo: tensor<8x8xf32> {train.param = "o"}) -> tensor<1x4x8xf32> {
  %y = train.block attention layer 0 -> tensor<1x4x8xf32> {
    %q = train.matmul %x, %wq : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32>
    %k = train.matmul %x, %wk : tensor<1x4x8xf32>, tensor<8x4xf32> -> tensor<1x4x4xf32>
    %qh = train.reshape %q : tensor<1x4x8xf32> -> tensor<1x4x2x4xf32>
    %kh = train.reshape %k : tensor<1x4x4xf32> -> tensor<1x4x1x4xf32>
    // expected-error @+1 {{train-tensor-parallel: would sum over a split dimension (for attention: 2 must divide the heads and the K/V heads)}}
    %s = train.matmul %qh, %kh {transpose_rhs} : tensor<1x4x2x4xf32>, tensor<1x4x1x4xf32> -> tensor<1x4x2x1xf32>
    %o = train.matmul %q, %wo : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32>
    train.yield %o : tensor<1x4x8xf32>
  }
  return %y : tensor<1x4x8xf32>
}
