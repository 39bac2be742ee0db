func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = train.add %a, %a {train.memory_space = #train.space<host>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}
// -----
func.func @g(%a: tensor<4xf32> {train.memory_space = "host"}) -> tensor<4xf32> {
  return %a : tensor<4xf32>
}
