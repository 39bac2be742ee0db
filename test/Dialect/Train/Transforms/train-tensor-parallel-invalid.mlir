// RUN: trainmem-opt %s -split-input-file -verify-diagnostics -train-tensor-parallel="size=3" -o /dev/null

// The group's size must divide the inner size of the MLP.
func.func @forward(%x: tensor<2x8xf32> {train.input = "x"},
                   %fc: tensor<8x32xf32> {train.param = "fc.weight"},
                   %proj: tensor<32x8xf32> {train.param = "proj.weight"}) -> tensor<2x8xf32> {
  %y = train.block mlp layer 0 -> tensor<2x8xf32> {
    // expected-error @+1 {{train-tensor-parallel: 3 ranks do not divide dimension 1 (32) of 'fc.weight'}}
    %h = train.matmul %x, %fc : tensor<2x8xf32>, tensor<8x32xf32> -> tensor<2x32xf32>
    %a = train.gelu %h : tensor<2x32xf32>
    %p = train.matmul %a, %proj : tensor<2x32xf32>, tensor<32x8xf32> -> tensor<2x8xf32>
    train.yield %p : tensor<2x8xf32>
  }
  return %y : tensor<2x8xf32>
}

// -----

// It runs before train-autodiff.
// expected-error @+1 {{train-tensor-parallel: runs on the forward pass (before train-autodiff); @train_step is already a training step}}
func.func @train_step(%x: tensor<2x8xf32> {train.input = "x"}) -> tensor<2x8xf32> attributes {train.step} {
  return %x : tensor<2x8xf32>
}

// -----

// A split parameter is read by its MLP only.
func.func @forward(%x: tensor<2x6xf32> {train.input = "x"},
                   %fc: tensor<6x6xf32> {train.param = "fc.weight"},
                   %proj: tensor<6x6xf32> {train.param = "proj.weight"}) -> tensor<2x6xf32> {
  %y = train.block mlp layer 0 -> tensor<2x6xf32> {
    %h = train.matmul %x, %fc : tensor<2x6xf32>, tensor<6x6xf32> -> tensor<2x6xf32>
    %p = train.matmul %h, %proj : tensor<2x6xf32>, tensor<6x6xf32> -> tensor<2x6xf32>
    train.yield %p : tensor<2x6xf32>
  }
  %z = train.block attention layer 0 -> tensor<2x6xf32> {
    // expected-error @+1 {{train-tensor-parallel: parameter 'fc.weight' is split for its block and read here too}}
    %q = train.matmul %y, %fc : tensor<2x6xf32>, tensor<6x6xf32> -> tensor<2x6xf32>
    train.yield %q : tensor<2x6xf32>
  }
  return %z : tensor<2x6xf32>
}

// -----

// An MLP is matmuls by weights, element-wise ops and a last matmul.
func.func @forward(%x: tensor<2x6xf32> {train.input = "x"},
                   %fc: tensor<6x6xf32> {train.param = "fc.weight"}) -> tensor<2x6xf32> {
  // expected-error @+1 {{train-tensor-parallel: the mlp block of layer 0 is not matmuls by weights, element-wise ops and a last matmul by a weight}}
  %y = train.block mlp layer 0 -> tensor<2x6xf32> {
    %h = train.matmul %x, %fc : tensor<2x6xf32>, tensor<6x6xf32> -> tensor<2x6xf32>
    %a = train.gelu %h : tensor<2x6xf32>
    train.yield %a : tensor<2x6xf32>
  }
  return %y : tensor<2x6xf32>
}

// -----

// A split value stays in the split part.
func.func @forward(%x: tensor<2x6xf32> {train.input = "x"},
                   %fc: tensor<6x6xf32> {train.param = "fc.weight"},
                   %proj: tensor<6x6xf32> {train.param = "proj.weight"}) -> (tensor<2x6xf32>, tensor<2x6xf32>) {
  %y:2 = train.block mlp layer 0 -> tensor<2x6xf32>, tensor<2x6xf32> {
    %h = train.matmul %x, %fc : tensor<2x6xf32>, tensor<6x6xf32> -> tensor<2x6xf32>
    %p = train.matmul %h, %proj : tensor<2x6xf32>, tensor<6x6xf32> -> tensor<2x6xf32>
    // expected-error @+1 {{train-tensor-parallel: the mlp block of layer 0 uses a split value outside the split part}}
    train.yield %p, %h : tensor<2x6xf32>, tensor<2x6xf32>
  }
  return %y#0, %y#1 : tensor<2x6xf32>, tensor<2x6xf32>
}

