// RUN: trainmem-opt %s -split-input-file -verify-diagnostics -train-tensor-parallel="size=2" -o /dev/null
//
// Vocabulary parallelism splits parameters: a lookup of the step's ids in
// a table that is not one is refused, as is a table a tied head reads with
// the vocabulary along its other dimension; both name the option that
// keeps the vocabulary whole or the layout that works.

func.func @forward(%tokens: tensor<2x4xi32> {train.input = "tokens"},
                   %table: tensor<8x6xf32> {train.input = "table"},
                   %gamma: tensor<6xf32> {train.param = "gamma"}) -> tensor<2x4x6xf32> {
  %x = train.block embedding -> tensor<2x4x6xf32> {
    // expected-error @+1 {{train-tensor-parallel: the token embedding's table is not a parameter; vocabulary parallelism splits it (vocabulary-parallel=false keeps it whole)}}
    %e = train.embedding %table, %tokens : tensor<8x6xf32>, tensor<2x4xi32> -> tensor<2x4x6xf32>
    train.yield %e : tensor<2x4x6xf32>
  }
  return %x : tensor<2x4x6xf32>
}

// -----

// A square table looked up by rows and multiplied by the head untransposed
// (its columns would be the vocabulary).
func.func @forward(%tokens: tensor<2x4xi32> {train.input = "tokens"},
                   %targets: tensor<2x4xi32> {train.input = "targets"},
                   %w: tensor<8x8xf32> {train.param = "w"}) -> tensor<f32> {
  %x = train.block embedding -> tensor<2x4x8xf32> {
    // expected-error @+1 {{train-tensor-parallel: a tied embedding and head read their weight with the vocabulary along different dimensions}}
    %e = train.embedding %w, %tokens : tensor<8x8xf32>, tensor<2x4xi32> -> tensor<2x4x8xf32>
    train.yield %e : tensor<2x4x8xf32>
  }
  %loss = train.block head -> tensor<f32> {
    %logits = train.matmul %x, %w : tensor<2x4x8xf32>, tensor<8x8xf32> -> tensor<2x4x8xf32>
    %sum, %count = train.cross_entropy %logits, %targets {ignore_index = -100 : i64} : tensor<2x4x8xf32>, tensor<2x4xi32> -> tensor<f32>, tensor<i64>
    %mean = train.mean_loss %sum, %count : tensor<f32>, tensor<i64>
    train.yield %mean : tensor<f32>
  }
  return %loss : tensor<f32>
}
