// RUN: not trainmem-opt %s -train-autodiff="optimizer=adam" 2>&1 | FileCheck %s --check-prefix=OPT
// RUN: not trainmem-opt %s -train-autodiff="optimizer=lion eps=1e-6" 2>&1 | FileCheck %s --check-prefix=NOTREAD
// RUN: not trainmem-opt %s -train-autodiff="function=model" 2>&1 | FileCheck %s --check-prefix=FUNC

// OPT: train-autodiff: unknown optimizer 'adam' (expected adamw, lion, sgd or sophia, or none)
// NOTREAD: train-autodiff: optimizer=lion has no option eps (it reads beta1, beta2, weight-decay)
// FUNC: error: train-autodiff: no function @model

func.func @forward(%w: tensor<2x2xf32> {train.param = "w"}, %t: tensor<2xi32> {train.input = "targets"}) -> tensor<f32> {
  %sum, %count = train.cross_entropy %w, %t {ignore_index = -100 : i64} : tensor<2x2xf32>, tensor<2xi32> -> tensor<f32>, tensor<i64>
  %l = train.mean_loss %sum, %count : tensor<f32>, tensor<i64>
  return %l : tensor<f32>
}
