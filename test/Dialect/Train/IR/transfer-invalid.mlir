// RUN: trainmem-opt %s -split-input-file -verify-diagnostics

// train.transfer_wait (asynchronous train.transfer, train-offload-
// activations async=true): each verifier message.

func.func @not_a_copy(%x: tensor<4xf32>) {
  // expected-error @+1 {{'train.transfer_wait' op waits for a train.transfer's copy; its operand is not one}}
  train.transfer_wait %x : tensor<4xf32>
  return
}

// -----

func.func @reader_before_wait(%x: tensor<4xf32>) -> tensor<4xf32> {
  %h = train.transfer %x {to = #train.space<host>} : tensor<4xf32>
  // expected-note @+1 {{the reader}}
  %d = train.transfer %h {to = #train.space<device>} : tensor<4xf32>
  // expected-error @+1 {{'train.transfer_wait' op comes after a reader of its copy, which would read it before the copy has finished}}
  train.transfer_wait %h : tensor<4xf32>
  return %d : tensor<4xf32>
}

// -----

func.func @two_waits(%x: tensor<4xf32>) {
  %h = train.transfer %x {to = #train.space<host>} : tensor<4xf32>
  // expected-error @+1 {{'train.transfer_wait' op is one of two waits of one copy}}
  train.transfer_wait %h : tensor<4xf32>
  train.transfer_wait %h : tensor<4xf32>
  return
}

// -----

func.func @other_block(%x: tensor<4xf32>) {
  %h = train.transfer %x {to = #train.space<host>} : tensor<4xf32>
  %r = train.block attention layer 0 -> tensor<4xf32> {
    // expected-error @+1 {{'train.transfer_wait' op must be in the block of the train.transfer it waits for}}
    train.transfer_wait %h : tensor<4xf32>
    train.yield %x : tensor<4xf32>
  }
  return
}
