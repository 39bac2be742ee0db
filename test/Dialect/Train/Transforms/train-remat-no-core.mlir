// A forward whose attention block yields its probabilities (the ·V matmul
// in the MLP block): selective recompute and the budget model name the
// missing attention core; the budget model crashed on the block's yield
// before (issue 49, found with a name-based import).
// RUN: not trainmem-opt %s -train-autodiff '-train-remat=policy=budget budget=1MB' -o /dev/null 2>&1 | FileCheck %s
// RUN: not trainmem-opt %s -train-autodiff -train-remat=policy=selective -o /dev/null 2>&1 | FileCheck %s
// CHECK: error: train-remat: the attention block of layer 0 has no attention core (matmul, softmax, matmul)

module attributes {train.model = {batch = 2 : i64, dtype = "f32", layers = 1 : i64, name = "Model", seq = 8 : i64, vocab = 256 : i64}} {
  func.func @forward(%tokens: tensor<2x8xi32> {train.input = "tokens"}, %targets: tensor<2x8xi32> {train.input = "targets"}, %p0: tensor<256x16xf32> {train.init = #train.init<normal, std = 0.9933812618255615>, train.param = "embed.weight"}, %p1: tensor<8x16xf32> {train.init = #train.init<normal, std = 0.9048373103141785>, train.param = "position.weight"}, %p2: tensor<16x16xf32> {train.init = #train.init<normal, std = 0.14303399622440338>, train.param = "layers.0.attn.q.weight"}, %p3: tensor<16xf32> {train.init = #train.init<normal, std = 0.13394780457019806>, train.param = "layers.0.attn.q.bias"}, %p4: tensor<16x16xf32> {train.init = #train.init<normal, std = 0.14230172336101532>, train.param = "layers.0.attn.k.weight"}, %p5: tensor<16xf32> {train.init = #train.init<normal, std = 0.15010227262973785>, train.param = "layers.0.attn.k.bias"}, %p6: tensor<16x16xf32> {train.init = #train.init<normal, std = 0.1450762003660202>, train.param = "layers.0.attn.v.weight"}, %p7: tensor<16xf32> {train.init = #train.init<normal, std = 0.1423623114824295>, train.param = "layers.0.attn.v.bias"}, %p8: tensor<48x16xf32> {train.init = #train.init<normal, std = 0.14382708072662354>, train.param = "layers.0.mlp.fc.weight"}, %p9: tensor<48xf32> {train.init = #train.init<normal, std = 0.12721842527389526>, train.param = "layers.0.mlp.fc.bias"}, %p10: tensor<16x16xf32> {train.init = #train.init<normal, std = 0.1437661051750183>, train.param = "layers.0.mlp.gate.weight"}, %p11: tensor<16xf32> {train.init = #train.init<normal, std = 0.14812856912612915>, train.param = "layers.0.mlp.gate.bias"}, %p12: tensor<16x64xf32> {train.init = #train.init<normal, std = 0.07267594337463379>, train.param = "layers.0.mlp.proj.weight"}, %p13: tensor<16xf32> {train.init = #train.init<normal, std = 0.05965663865208626>, train.param = "layers.0.mlp.proj.bias"}, %p14: tensor<256x16xf32> {train.init = #train.init<normal, std = 0.14449943602085114>, train.param = "head.weight"}) -> tensor<f32> {
    %b0 = train.block embedding -> tensor<2x8x16xf32> {
      %v1 = train.embedding %p0, %tokens : tensor<256x16xf32>, tensor<2x8xi32> -> tensor<2x8x16xf32>
      %v2 = train.iota : tensor<8xi32>
      %v3 = train.embedding %p1, %v2 : tensor<8x16xf32>, tensor<8xi32> -> tensor<8x16xf32>
      %v4 = train.bias_add %v1, %v3 : tensor<2x8x16xf32>, tensor<8x16xf32>
      train.yield %v4 : tensor<2x8x16xf32>
    }
    %b1:2 = train.block attention layer 0 -> tensor<2x8x16xf32>, tensor<2x8x8xf32> {
      %v5 = train.matmul %b0, %p2 {transpose_rhs} : tensor<2x8x16xf32>, tensor<16x16xf32> -> tensor<2x8x16xf32>
      %v6 = train.bias_add %v5, %p3 : tensor<2x8x16xf32>, tensor<16xf32>
      %v7 = train.matmul %b0, %p4 {transpose_rhs} : tensor<2x8x16xf32>, tensor<16x16xf32> -> tensor<2x8x16xf32>
      %v8 = train.bias_add %v7, %p5 : tensor<2x8x16xf32>, tensor<16xf32>
      %v9 = train.matmul %b0, %p6 {transpose_rhs} : tensor<2x8x16xf32>, tensor<16x16xf32> -> tensor<2x8x16xf32>
      %v10 = train.bias_add %v9, %p7 : tensor<2x8x16xf32>, tensor<16xf32>
      %v11 = train.matmul %v6, %v8 {transpose_rhs} : tensor<2x8x16xf32>, tensor<2x8x16xf32> -> tensor<2x8x8xf32>
      %v12 = train.scale %v11 {factor = 0.25 : f64} : tensor<2x8x8xf32>
      %v13 = train.softmax %v12 {causal} : tensor<2x8x8xf32>
      train.yield %v10, %v13 : tensor<2x8x16xf32>, tensor<2x8x8xf32>
    }
    %b2 = train.block mlp layer 0 -> tensor<2x8x16xf32> {
      %v14 = train.matmul %b1#1, %b1#0 : tensor<2x8x8xf32>, tensor<2x8x16xf32> -> tensor<2x8x16xf32>
      %v15 = train.add %b0, %v14 : tensor<2x8x16xf32>
      %v16 = train.matmul %v15, %p8 {transpose_rhs} : tensor<2x8x16xf32>, tensor<48x16xf32> -> tensor<2x8x48xf32>
      %v17 = train.bias_add %v16, %p9 : tensor<2x8x48xf32>, tensor<48xf32>
      %v18 = train.matmul %v15, %p10 {transpose_rhs} : tensor<2x8x16xf32>, tensor<16x16xf32> -> tensor<2x8x16xf32>
      %v19 = train.bias_add %v18, %p11 : tensor<2x8x16xf32>, tensor<16xf32>
      %v20 = train.slice_grad %v17 {dim = 2 : i64, offset = 0 : i64, whole = 64 : i64} : tensor<2x8x48xf32> -> tensor<2x8x64xf32>
      %v21 = train.slice_grad %v19 {dim = 2 : i64, offset = 48 : i64, whole = 64 : i64} : tensor<2x8x16xf32> -> tensor<2x8x64xf32>
      %v22 = train.add %v20, %v21 : tensor<2x8x64xf32>
      %v24 = train.gelu %v22 : tensor<2x8x64xf32>
      %v25 = train.matmul %v24, %p12 {transpose_rhs} : tensor<2x8x64xf32>, tensor<16x64xf32> -> tensor<2x8x16xf32>
      %v26 = train.bias_add %v25, %p13 : tensor<2x8x16xf32>, tensor<16xf32>
      %v27 = train.add %v15, %v26 : tensor<2x8x16xf32>
      train.yield %v27 : tensor<2x8x16xf32>
    }
    %b3 = train.block head -> tensor<f32> {
      %v28 = train.matmul %b2, %p14 {transpose_rhs} : tensor<2x8x16xf32>, tensor<256x16xf32> -> tensor<2x8x256xf32>
      %v29, %v30 = train.cross_entropy %v28, %targets {ignore_index = -100 : i64} : tensor<2x8x256xf32>, tensor<2x8xi32> -> tensor<f32>, tensor<i64>
      %v31 = train.mean_loss %v29, %v30 : tensor<f32>, tensor<i64>
      train.yield %v31 : tensor<f32>
    }
    return %b3 : tensor<f32>
  }
}
