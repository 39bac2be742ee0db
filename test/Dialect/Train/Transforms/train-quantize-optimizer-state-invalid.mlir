// RUN: not trainmem-opt %s -split-input-file -train-quantize-optimizer-state='block=100' 2>&1 | FileCheck %s --check-prefix=BLOCK
// RUN: not trainmem-opt %s -split-input-file -train-quantize-optimizer-state='function=step' 2>&1 | FileCheck %s --check-prefix=NOFUNC
// RUN: trainmem-opt %s -split-input-file -train-quantize-optimizer-state='min-size=16' -verify-diagnostics

// BLOCK: error: train-quantize-optimizer-state: block must be a power of two, got 100
// NOFUNC: error: train-quantize-optimizer-state: no function @step; the training step here is @train_step (give the pass function=train_step)

// m is not an argument of the step: it cannot be stored.
func.func @train_step(%w: tensor<16xf32> {train.param = "w"}, %g: tensor<16xf32>,
                      %step: tensor<i64> {train.input = "step"},
                      %v: tensor<16xf32> {train.optimizer_state = #train.state<"w", v>}) -> tensor<16xf32> attributes {train.step} {
  %lr = arith.constant dense<1.0e-3> : tensor<f32>
  %m = arith.constant dense<0.0> : tensor<16xf32>
  // expected-error @+1 {{train-quantize-optimizer-state: the update's m is not an argument of @train_step marked train.optimizer_state; only state the step reads and returns can be stored in 8 bits}}
  %p, %m2, %v2 = train.adamw %w, %g, %m, %v, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-08 : f64, weight_decay = 0.0 : f64} : tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<f32>, tensor<i64>
  return %p : tensor<16xf32>
}

// -----

// v is an argument, but a parameter, not optimizer state.
func.func @train_step(%w: tensor<16xf32> {train.param = "w"}, %g: tensor<16xf32>,
                      %step: tensor<i64> {train.input = "step"},
                      %m: tensor<16xf32> {train.optimizer_state = #train.state<"w", m>},
                      %v: tensor<16xf32> {train.param = "v"}) -> tensor<16xf32> attributes {train.step} {
  %lr = arith.constant dense<1.0e-3> : tensor<f32>
  // expected-error @+1 {{train-quantize-optimizer-state: the update's v is not an argument of @train_step marked train.optimizer_state}}
  %p, %m2, %v2 = train.adamw %w, %g, %m, %v, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-08 : f64, weight_decay = 0.0 : f64} : tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<f32>, tensor<i64>
  return %p : tensor<16xf32>
}

// -----

// One state tensor fed to two updates.
func.func @train_step(%w: tensor<16xf32> {train.param = "w"}, %g: tensor<16xf32>,
                      %step: tensor<i64> {train.input = "step"},
                      %m: tensor<16xf32> {train.optimizer_state = #train.state<"w", m>},
                      %v: tensor<16xf32> {train.optimizer_state = #train.state<"w", v>}) -> tensor<16xf32> attributes {train.step} {
  %lr = arith.constant dense<1.0e-3> : tensor<f32>
  // expected-error @+1 {{train-quantize-optimizer-state: the update shares its state with another update}}
  %p, %m2, %v2 = train.adamw %w, %g, %m, %m, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-08 : f64, weight_decay = 0.0 : f64} : tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<f32>, tensor<i64>
  return %p : tensor<16xf32>
}

// -----

// SGD's momentum buffer must be step state as well.
func.func @train_step(%w: tensor<16xf32> {train.param = "w"}, %g: tensor<16xf32>) -> tensor<16xf32> attributes {train.step} {
  %lr = arith.constant dense<1.0e-3> : tensor<f32>
  // expected-error @+1 {{train-quantize-optimizer-state: the update's momentum buffer is not an argument of @train_step marked train.optimizer_state}}
  %p, %b = train.sgd %w, %g, %lr, %g {momentum = 0.9 : f64, weight_decay = 0.0 : f64} : (tensor<16xf32>, tensor<16xf32>, tensor<f32>, tensor<16xf32>) -> (tensor<16xf32>, tensor<16xf32>)
  return %p : tensor<16xf32>
}

// -----

// An f32 tensor marked as 8-bit codes: its marker contradicts the update.
func.func @train_step(%w: tensor<16xf32> {train.param = "w"}, %g: tensor<16xf32>,
                      %step: tensor<i64> {train.input = "step"},
                      %m: tensor<16xf32> {train.optimizer_state = #train.state<"w", m, codes, signed_dynamic, block = 256>},
                      %v: tensor<16xf32> {train.optimizer_state = #train.state<"w", v>}) -> tensor<16xf32> attributes {train.step} {
  %lr = arith.constant dense<1.0e-3> : tensor<f32>
  // expected-error @+1 {{train-quantize-optimizer-state: the update's m is already 8-bit (#train.state<"w", m, codes, signed_dynamic, block = 256>)}}
  %p, %m2, %v2 = train.adamw %w, %g, %m, %v, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-08 : f64, weight_decay = 0.0 : f64} : tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<f32>, tensor<i64>
  return %p : tensor<16xf32>
}
