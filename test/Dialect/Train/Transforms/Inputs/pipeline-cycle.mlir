// Layer 0's MLP reads what layer 1 makes of layer 0's attention: on two
// stages, each would wait for the other before its first forward.
func.func @cycle(%x: tensor<4x2xf32> {train.input = "x"}, %w0: tensor<2x2xf32> {train.param = "w0"}, %w1: tensor<2x2xf32> {train.param = "w1"}) -> (tensor<2x2xf32> {train.param = "w0"}) attributes {train.step} {
  %g = train.accumulate %x steps 2 padding [0] : (tensor<4x2xf32>) -> tensor<2x2xf32> {
  ^bb0(%m: tensor<2x2xf32>):
    %a = train.block attention layer 0 -> tensor<2x2xf32> {
      %y = train.matmul %m, %w0 : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
      train.yield %y : tensor<2x2xf32>
    }
    %b = train.block attention layer 1 -> tensor<2x2xf32> {
      %y = train.matmul %a, %w1 : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
      train.yield %y : tensor<2x2xf32>
    }
    %c = train.block mlp layer 0 -> tensor<2x2xf32> {
      %y = train.matmul %b, %w0 : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
      train.yield %y : tensor<2x2xf32>
    }
    train.yield %c : tensor<2x2xf32>
  }
  return %g : tensor<2x2xf32>
}
