// RUN: trainmem-opt %s -split-input-file -verify-diagnostics -train-tensor-parallel="size=2 sequence-parallel=true" -o /dev/null

// The group's size must divide the sequence.
func.func @forward(%tokens: tensor<2x3xi32> {train.input = "tokens"},
                   %wte: tensor<8x6xf32> {train.param = "wte"},
                   %fc: tensor<6x4xf32> {train.param = "fc.weight"},
                   %proj: tensor<4x6xf32> {train.param = "proj.weight"}) -> tensor<2x3x6xf32> {
  // expected-error @+1 {{train-tensor-parallel sequence-parallel=true: 2 ranks do not divide the sequence (3)}}
  %x = train.block embedding -> tensor<2x3x6xf32> {
    %e = train.embedding %wte, %tokens : tensor<8x6xf32>, tensor<2x3xi32> -> tensor<2x3x6xf32>
    train.yield %e : tensor<2x3x6xf32>
  }
  %y = train.block mlp layer 0 -> tensor<2x3x6xf32> {
    %h = train.matmul %x, %fc : tensor<2x3x6xf32>, tensor<6x4xf32> -> tensor<2x3x4xf32>
    %p = train.matmul %h, %proj : tensor<2x3x4xf32>, tensor<4x6xf32> -> tensor<2x3x6xf32>
    train.yield %p : tensor<2x3x6xf32>
  }
  return %y : tensor<2x3x6xf32>
}

// -----

// The sequence splits from the embedding block's result.
// expected-error @+1 {{train-tensor-parallel sequence-parallel=true: @forward has no embedding block (its result is what the sequence splits from)}}
func.func @forward(%x: tensor<2x4x6xf32> {train.input = "x"},
                   %fc: tensor<6x4xf32> {train.param = "fc.weight"},
                   %proj: tensor<4x6xf32> {train.param = "proj.weight"}) -> tensor<2x4x6xf32> {
  %y = train.block mlp layer 0 -> tensor<2x4x6xf32> {
    %h = train.matmul %x, %fc : tensor<2x4x6xf32>, tensor<6x4xf32> -> tensor<2x4x4xf32>
    %p = train.matmul %h, %proj : tensor<2x4x4xf32>, tensor<4x6xf32> -> tensor<2x4x6xf32>
    train.yield %p : tensor<2x4x6xf32>
  }
  return %y : tensor<2x4x6xf32>
}

// -----

// An op that mixes positions cannot run on a piece of the sequence.
func.func @forward(%tokens: tensor<2x4xi32> {train.input = "tokens"},
                   %wte: tensor<8x6xf32> {train.param = "wte"},
                   %fc: tensor<6x4xf32> {train.param = "fc.weight"},
                   %proj: tensor<4x6xf32> {train.param = "proj.weight"}) -> tensor<2x4x6xf32> {
  %x = train.block embedding -> tensor<2x4x6xf32> {
    %e = train.embedding %wte, %tokens : tensor<8x6xf32>, tensor<2x4xi32> -> tensor<2x4x6xf32>
    train.yield %e : tensor<2x4x6xf32>
  }
  %y = train.block mlp layer 0 -> tensor<2x4x6xf32> {
    // expected-error @+1 {{train-tensor-parallel sequence-parallel=true: 'train.softmax' reads a piece of the sequence and is not position-wise (a norm, an element-wise op, dropout, a matmul by a weight)}}
    %s = train.softmax %x : tensor<2x4x6xf32>
    %h = train.matmul %s, %fc : tensor<2x4x6xf32>, tensor<6x4xf32> -> tensor<2x4x4xf32>
    %p = train.matmul %h, %proj : tensor<2x4x4xf32>, tensor<4x6xf32> -> tensor<2x4x6xf32>
    train.yield %p : tensor<2x4x6xf32>
  }
  return %y : tensor<2x4x6xf32>
}

// -----

// A whole activation cannot meet a piece of the sequence.
func.func @forward(%tokens: tensor<2x4xi32> {train.input = "tokens"},
                   %noise: tensor<2x4x6xf32> {train.input = "noise"},
                   %wte: tensor<8x6xf32> {train.param = "wte"},
                   %fc: tensor<6x4xf32> {train.param = "fc.weight"},
                   %proj: tensor<4x6xf32> {train.param = "proj.weight"}) -> tensor<2x4x6xf32> {
  %x = train.block embedding -> tensor<2x4x6xf32> {
    %e = train.embedding %wte, %tokens : tensor<8x6xf32>, tensor<2x4xi32> -> tensor<2x4x6xf32>
    train.yield %e : tensor<2x4x6xf32>
  }
  %y = train.block mlp layer 0 -> tensor<2x4x6xf32> {
    %h = train.matmul %x, %fc : tensor<2x4x6xf32>, tensor<6x4xf32> -> tensor<2x4x4xf32>
    %p = train.matmul %h, %proj : tensor<2x4x4xf32>, tensor<4x6xf32> -> tensor<2x4x6xf32>
    // expected-error @+1 {{train-tensor-parallel sequence-parallel=true: reads a value every rank holds whole (not a parameter broadcast along the positions) with a piece of the sequence}}
    %r = train.add %p, %noise : tensor<2x4x6xf32>
    train.yield %r : tensor<2x4x6xf32>
  }
  return %y : tensor<2x4x6xf32>
}

// -----

// What the forward returns is whole (a loss summed over the group).
func.func @forward(%tokens: tensor<2x4xi32> {train.input = "tokens"},
                   %wte: tensor<8x6xf32> {train.param = "wte"},
                   %fc: tensor<6x4xf32> {train.param = "fc.weight"},
                   %proj: tensor<4x6xf32> {train.param = "proj.weight"}) -> tensor<2x4x6xf32> {
  %x = train.block embedding -> tensor<2x4x6xf32> {
    %e = train.embedding %wte, %tokens : tensor<8x6xf32>, tensor<2x4xi32> -> tensor<2x4x6xf32>
    train.yield %e : tensor<2x4x6xf32>
  }
  %y = train.block mlp layer 0 -> tensor<2x4x6xf32> {
    %h = train.matmul %x, %fc : tensor<2x4x6xf32>, tensor<6x4xf32> -> tensor<2x4x4xf32>
    %p = train.matmul %h, %proj : tensor<2x4x4xf32>, tensor<4x6xf32> -> tensor<2x4x6xf32>
    train.yield %p : tensor<2x4x6xf32>
  }
  // expected-error @+1 {{train-tensor-parallel sequence-parallel=true: returns a piece of the sequence (the loss must be summed over the group)}}
  return %y : tensor<2x4x6xf32>
}

// -----

// The embedding's result is the [batch, seq, hidden] stream that splits.
func.func @forward(%tokens: tensor<4xi32> {train.input = "tokens"},
                   %wte: tensor<8x6xf32> {train.param = "wte"},
                   %fc: tensor<6x4xf32> {train.param = "fc.weight"},
                   %proj: tensor<4x6xf32> {train.param = "proj.weight"}) -> tensor<4x6xf32> {
  // expected-error @+1 {{train-tensor-parallel sequence-parallel=true: the embedding block's result is not a static [batch, seq, hidden] tensor}}
  %x = train.block embedding -> tensor<4x6xf32> {
    %e = train.embedding %wte, %tokens : tensor<8x6xf32>, tensor<4xi32> -> tensor<4x6xf32>
    train.yield %e : tensor<4x6xf32>
  }
  %y = train.block mlp layer 0 -> tensor<4x6xf32> {
    %h = train.matmul %x, %fc : tensor<4x6xf32>, tensor<6x4xf32> -> tensor<4x4xf32>
    %p = train.matmul %h, %proj : tensor<4x4xf32>, tensor<4x6xf32> -> tensor<4x6xf32>
    train.yield %p : tensor<4x6xf32>
  }
  return %y : tensor<4x6xf32>
}
