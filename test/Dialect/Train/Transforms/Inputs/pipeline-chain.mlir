func.func @chain(%x: tensor<4x2xf32> {train.input = "x"}, %w0: tensor<2x2xf32> {train.param = "w0"}, %w1: tensor<2x2xf32> {train.param = "w1"}) -> (tensor<2x2xf32> {train.param = "w0"}, tensor<2x2xf32> {train.param = "w1"}) attributes {train.step} {
  %g:2 = train.accumulate %x steps 2 padding [0] : (tensor<4x2xf32>) -> (tensor<2x2xf32>, tensor<2x2xf32>) {
  ^bb0(%m: tensor<2x2xf32>):
    %h0 = train.block attention layer 0 -> tensor<2x2xf32> {
      %y = train.matmul %m, %w0 : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
      train.yield %y : tensor<2x2xf32>
    }
    %h1 = train.block attention layer 1 -> tensor<2x2xf32> {
      %y = train.matmul %h0, %w1 : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
      train.yield %y : tensor<2x2xf32>
    }
    %d1:2 = train.block attention layer 1 backward -> tensor<2x2xf32>, tensor<2x2xf32> {
      %gw = train.matmul %h0, %h1 {transpose_lhs} : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
      %gx = train.matmul %h1, %w1 {transpose_rhs} : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
      train.yield %gw, %gx : tensor<2x2xf32>, tensor<2x2xf32>
    }
    %d0 = train.block attention layer 0 backward -> tensor<2x2xf32> {
      %gw = train.matmul %m, %d1#1 {transpose_lhs} : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
      train.yield %gw : tensor<2x2xf32>
    }
    train.yield %d0, %d1#0 : tensor<2x2xf32>, tensor<2x2xf32>
  }
  return %g#0, %g#1 : tensor<2x2xf32>, tensor<2x2xf32>
}
