// RUN: trainmem-opt %s -split-input-file -verify-diagnostics

// train.pipeline_exchange and #train.pipeline: each verifier message.

func.func @peers(%x: tensor<4xf32>) {
  // expected-error @+1 {{'train.pipeline_exchange' op has 1 sends but 2 send_peers and 1 send_tags}}
  train.pipeline_exchange send %x : tensor<4xf32> {send_peers = array<i64: 1, 2>, send_tags = array<i64: 0>, recv_peers = array<i64>, recv_tags = array<i64>}
  return
}

// -----

func.func @results() {
  // expected-error @+1 {{'train.pipeline_exchange' op has 1 results but 0 recv_peers and 0 recv_tags}}
  %r = train.pipeline_exchange {send_peers = array<i64>, send_tags = array<i64>, recv_peers = array<i64>, recv_tags = array<i64>} -> tensor<4xf32>
  return
}

// -----

func.func @itself(%x: tensor<4xf32>) attributes {train.pipeline_stage = #train.pipeline<stage = 1, stages = 2, micro_batches = 2, schedule = gpipe, virtual = 1>} {
  // expected-error @+1 {{'train.pipeline_exchange' op stage 1 exchanges with itself: a value stays in its stage's function}}
  train.pipeline_exchange send %x : tensor<4xf32> {send_peers = array<i64: 1>, send_tags = array<i64: 0>, recv_peers = array<i64>, recv_tags = array<i64>}
  return
}

// -----

func.func @outside(%x: tensor<4xf32>) attributes {train.pipeline_stage = #train.pipeline<stage = 0, stages = 2, micro_batches = 2, schedule = gpipe, virtual = 1>} {
  // expected-error @+1 {{'train.pipeline_exchange' op peer stage 2 is not a stage of the pipeline (2 stages)}}
  train.pipeline_exchange send %x : tensor<4xf32> {send_peers = array<i64: 2>, send_tags = array<i64: 0>, recv_peers = array<i64>, recv_tags = array<i64>}
  return
}

// -----

func.func @tags(%x: tensor<4xf32>) {
  // expected-error @+1 {{'train.pipeline_exchange' op tag 0 is negative or repeated: each crossing tensor has a tag of its own}}
  %r = train.pipeline_exchange send %x : tensor<4xf32> {send_peers = array<i64: 1>, send_tags = array<i64: 0>, recv_peers = array<i64: 1>, recv_tags = array<i64: 0>} -> tensor<4xf32>
  return
}

// -----

// expected-error @+1 {{#train.pipeline: stage 2 is not one of 2 stages}}
func.func @stage() attributes {train.pipeline_stage = #train.pipeline<stage = 2, stages = 2, micro_batches = 2, schedule = gpipe, virtual = 1>} {
  return
}

// -----

// expected-error @+1 {{#train.pipeline: virtual = 2 with schedule one_f_one_b (more than one chunk per stage is the interleaved schedule's)}}
func.func @chunks() attributes {train.pipeline_stage = #train.pipeline<stage = 0, stages = 2, micro_batches = 2, schedule = one_f_one_b, virtual = 2>} {
  return
}

// -----

// expected-error @+1 {{#train.pipeline: micro_batches must be >= 1, got 0}}
func.func @none() attributes {train.pipeline_stage = #train.pipeline<stage = 0, stages = 2, micro_batches = 0, schedule = gpipe, virtual = 1>} {
  return
}

// -----

func.func @marks(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'train.add' op 'train.micro_batch' is an index (an integer >= 0), got -1 : i64}}
  %y = train.add %x, %x {train.micro_batch = -1 : i64} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// expected-error @+1 {{'func.func' op 'train.pipeline_stage' is a #train.pipeline on a stage function, got 1 : i64}}
func.func @wrong() attributes {train.pipeline_stage = 1 : i64} {
  return
}
