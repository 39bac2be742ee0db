// RUN: not trainmem-opt %s -train-autodiff="optimizer=lion" 2>&1 | FileCheck %s --check-prefix=OPT
// RUN: not trainmem-opt %s -train-autodiff="function=model" 2>&1 | FileCheck %s --check-prefix=FUNC

// OPT: for the --optimizer option: Cannot find option named 'lion'!
// FUNC: error: train-autodiff: no function @model

func.func @forward(%w: tensor<2x2xf32> {train.param = "w"}, %t: tensor<2xi32> {train.input = "targets"}) -> tensor<f32> {
  %sum, %count = train.cross_entropy %w, %t {ignore_index = -100 : i64} : tensor<2x2xf32>, tensor<2xi32> -> tensor<f32>, tensor<i64>
  %l = train.mean_loss %sum, %count : tensor<f32>, tensor<i64>
  return %l : tensor<f32>
}
