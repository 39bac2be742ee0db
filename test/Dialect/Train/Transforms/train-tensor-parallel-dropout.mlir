// RUN: trainmem-opt %s -train-tensor-parallel="size=2" 2>/dev/null | FileCheck %s
// RUN: trainmem-model --preset tiny --layers 1 --hidden 8 --heads 2 --ffn 16 --seq 4 --batch 2 --dropout 0.1 | trainmem-opt -train-tensor-parallel="size=2" -train-fuse-attention -train-autodiff 2>/dev/null | FileCheck %s --check-prefix=FUSED
//
// A dropout on a rank's part (here an MLP's inner activations) draws its
// part of the whole tensor's mask: it is marked with the split.
// CHECK-LABEL: func.func @forward_dropout
// CHECK: train.dropout %{{.*}} {offset = 1 : i64, rate = 1.000000e-01 : f64, seed = 0 : i64, split = #train.split<dim = 1, parts = 2, grid = @tp, axis = 1>} : tensor<2x3xf32> -> tensor<2x3xi1>
func.func @forward_dropout(%x: tensor<2x6xf32> {train.input = "x"},
                           %fc: tensor<6x6xf32> {train.param = "fc.weight"},
                           %proj: tensor<6x6xf32> {train.param = "proj.weight"}) -> tensor<2x6xf32> {
  %y = train.block mlp layer 0 -> tensor<2x6xf32> {
    %h = train.matmul %x, %fc : tensor<2x6xf32>, tensor<6x6xf32> -> tensor<2x6xf32>
    %d, %mask = train.dropout %h {rate = 0.1 : f64, seed = 0 : i64, offset = 1 : i64} : tensor<2x6xf32> -> tensor<2x6xi1>
    %p = train.matmul %d, %proj : tensor<2x6xf32>, tensor<6x6xf32> -> tensor<2x6xf32>
    train.yield %p : tensor<2x6xf32>
  }
  return %y : tensor<2x6xf32>
}

// Fused attention on a rank's heads (1 of 2) keeps the dropout's split: it
// draws its heads' part of the whole [2, 2, 4, 4] mask, forward and
// backward.
// FUSED: train.attention {{.*}}split = #train.split<dim = 1, parts = 2, grid = @tp, axis = 1>{{.*}} : tensor<2x1x4x4xf32>
// FUSED: train.attention_grad {{.*}}split = #train.split<dim = 1, parts = 2, grid = @tp, axis = 1>
