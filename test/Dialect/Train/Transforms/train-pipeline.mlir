// RUN: trainmem-opt %s -train-pipeline="stages=2" | FileCheck %s
// RUN: trainmem-opt %s -train-pipeline="stages=2 schedule=gpipe" | FileCheck %s --check-prefix=GPIPE
// RUN: trainmem-opt %s -train-pipeline="stages=2" | trainmem-opt | FileCheck %s

// Two layers on two stages, two micro-batches, 1F1B: stage 0 runs one
// forward ahead (p - k - 1 = 1), then forward and backward in turn; stage 1
// runs each micro-batch's forward and backward together. Each stage takes
// its inputs and its parameter; a layer's output goes to the next stage at
// the exchange after its forward, the gradient of its input comes back
// before the backward that reads it; the gradients are summed over the
// micro-batches in order on the stage that makes them.
// CHECK-LABEL: func.func @chain.stage0(
// CHECK-SAME:    %[[X:arg[0-9]+]]: tensor<4x2xf32> {train.input = "x"}, %[[W0:arg[0-9]+]]: tensor<2x2xf32> {train.param = "w0"}) -> (tensor<2x2xf32> {train.param = "w0"})
// CHECK-SAME:    train.pipeline_stage = #train.pipeline<stage = 0, stages = 2, micro_batches = 2, schedule = one_f_one_b, virtual = 1>
// CHECK:         %[[M0:.*]] = train.slice_rows %[[X]] {offset = 0 : i64}
// CHECK:         %[[F0:.*]] = train.block attention layer 0 -> tensor<2x2xf32> attributes {train.micro_batch = 0 : i64}
// CHECK:         train.pipeline_exchange send %[[F0]] : tensor<2x2xf32> {recv_peers = array<i64>, recv_tags = array<i64>, send_peers = array<i64: 1>, send_tags = array<i64: [[T0:[0-9]+]]>}
// CHECK:         %[[M1:.*]] = train.slice_rows %[[X]] {offset = 2 : i64}
// CHECK:         %[[F1:.*]] = train.block attention layer 0 -> tensor<2x2xf32> attributes {train.micro_batch = 1 : i64}
// CHECK:         %[[G0:.*]] = train.pipeline_exchange send %[[F1]] : tensor<2x2xf32> {recv_peers = array<i64: 1>, recv_tags = array<i64: [[GT0:[0-9]+]]>, send_peers = array<i64: 1>, send_tags = array<i64: [[T1:[0-9]+]]>} -> tensor<2x2xf32>
// CHECK:         %[[B0:.*]] = train.block attention layer 0 backward -> tensor<2x2xf32> attributes {train.micro_batch = 0 : i64}
// CHECK-NEXT:      train.matmul %[[M0]], %[[G0]] {transpose_lhs}
// CHECK:         %[[G1:.*]] = train.pipeline_exchange {recv_peers = array<i64: 1>, recv_tags = array<i64: [[GT1:[0-9]+]]>, send_peers = array<i64>, send_tags = array<i64>} -> tensor<2x2xf32>
// CHECK:         %[[B1:.*]] = train.block attention layer 0 backward -> tensor<2x2xf32> attributes {train.micro_batch = 1 : i64}
// CHECK-NEXT:      train.matmul %[[M1]], %[[G1]] {transpose_lhs}
// CHECK:         %[[S:.*]] = train.add %[[B0]], %[[B1]] {{{.*}}train.micro_batch_sum}
// CHECK-NEXT:    return %[[S]]
// CHECK-LABEL: func.func @chain.stage1(
// CHECK-SAME:    %{{.*}}: tensor<4x2xf32> {train.input = "x"}, %[[W1:arg[0-9]+]]: tensor<2x2xf32> {train.param = "w1"}) -> (tensor<2x2xf32> {train.param = "w1"})
// CHECK:         %[[A0:.*]] = train.pipeline_exchange {recv_peers = array<i64: 0>, recv_tags = array<i64: [[T0]]>, send_peers = array<i64>, send_tags = array<i64>}
// CHECK:         train.block attention layer 1 -> tensor<2x2xf32> attributes {train.micro_batch = 0 : i64}
// CHECK-NEXT:      train.matmul %[[A0]], %[[W1]]
// CHECK:         %[[D0:.*]]:2 = train.block attention layer 1 backward {{.*}} {train.micro_batch = 0 : i64}
// CHECK:         %[[A1:.*]] = train.pipeline_exchange send %[[D0]]#1 : tensor<2x2xf32> {recv_peers = array<i64: 0>, recv_tags = array<i64: [[T1]]>, send_peers = array<i64: 0>, send_tags = array<i64: [[GT0]]>}
// CHECK:         train.block attention layer 1 -> tensor<2x2xf32> attributes {train.micro_batch = 1 : i64}
// CHECK-NEXT:      train.matmul %[[A1]], %[[W1]]
// CHECK:         %[[D1:.*]]:2 = train.block attention layer 1 backward {{.*}} {train.micro_batch = 1 : i64}
// CHECK:         %[[S1:.*]] = train.add %[[D0]]#0, %[[D1]]#0
// CHECK:         train.pipeline_exchange send %[[D1]]#1 : tensor<2x2xf32> {recv_peers = array<i64>, recv_tags = array<i64>, send_peers = array<i64: 0>, send_tags = array<i64: [[GT1]]>}
// CHECK-NEXT:    return %[[S1]]

// GPipe: every forward, then every backward, on both stages.
// GPIPE-LABEL: func.func @chain.stage0(
// GPIPE-SAME:    schedule = gpipe
// GPIPE:         train.block attention layer 0 -> {{.*}} {train.micro_batch = 0 : i64}
// GPIPE:         train.block attention layer 0 -> {{.*}} {train.micro_batch = 1 : i64}
// GPIPE:         train.block attention layer 0 backward -> {{.*}} {train.micro_batch = 0 : i64}
// GPIPE:         train.block attention layer 0 backward -> {{.*}} {train.micro_batch = 1 : i64}
// GPIPE-LABEL: func.func @chain.stage1(
// GPIPE:         train.block attention layer 1 -> {{.*}} {train.micro_batch = 0 : i64}
// GPIPE:         train.block attention layer 1 -> {{.*}} {train.micro_batch = 1 : i64}
// GPIPE:         train.block attention layer 1 backward -> {{.*}} {train.micro_batch = 0 : i64}
// GPIPE:         train.block attention layer 1 backward -> {{.*}} {train.micro_batch = 1 : i64}
func.func @chain(%x: tensor<4x2xf32> {train.input = "x"}, %w0: tensor<2x2xf32> {train.param = "w0"}, %w1: tensor<2x2xf32> {train.param = "w1"}) -> (tensor<2x2xf32> {train.param = "w0"}, tensor<2x2xf32> {train.param = "w1"}) attributes {train.step} {
  %g:2 = train.accumulate %x steps 2 padding [0] : (tensor<4x2xf32>) -> (tensor<2x2xf32>, tensor<2x2xf32>) {
  ^bb0(%m: tensor<2x2xf32>):
    %h0 = train.block attention layer 0 -> tensor<2x2xf32> {
      %y = train.matmul %m, %w0 : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
      train.yield %y : tensor<2x2xf32>
    }
    %h1 = train.block attention layer 1 -> tensor<2x2xf32> {
      %y = train.matmul %h0, %w1 : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
      train.yield %y : tensor<2x2xf32>
    }
    %d1:2 = train.block attention layer 1 backward -> tensor<2x2xf32>, tensor<2x2xf32> {
      %gw = train.matmul %h0, %h1 {transpose_lhs} : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
      %gx = train.matmul %h1, %w1 {transpose_rhs} : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
      train.yield %gw, %gx : tensor<2x2xf32>, tensor<2x2xf32>
    }
    %d0 = train.block attention layer 0 backward -> tensor<2x2xf32> {
      %gw = train.matmul %m, %d1#1 {transpose_lhs} : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
      train.yield %gw : tensor<2x2xf32>
    }
    train.yield %d0, %d1#0 : tensor<2x2xf32>, tensor<2x2xf32>
  }
  return %g#0, %g#1 : tensor<2x2xf32>, tensor<2x2xf32>
}
