func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = train.add %a, %a {train.memory_space = #train.space<host>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}
// -----
func.func @g(%a: tensor<4xf32> {train.memory_space = "host"}) -> tensor<4xf32> {
  return %a : tensor<4xf32>
}
// -----
func.func @h(%x: tensor<4x8xi32>, %w: tensor<2xf32>) -> tensor<2xf32> {
  %0 = train.accumulate %x steps 2 padding [0] host_sums [true, false] : (tensor<4x8xi32>) -> tensor<2xf32> {
  ^bb0(%t: tensor<2x8xi32>):
    train.yield %w : tensor<2xf32>
  }
  return %0 : tensor<2xf32>
}
