// RUN: trainmem-opt %s -split-input-file -train-unroll-accum | FileCheck %s
// RUN: trainmem-opt %s -split-input-file -verify-diagnostics -train-memory-report -o /dev/null

// A loop summed in groups (train.accumulate ... groups G): unrolled, each
// group's micro-batches are added in order, then the groups' sums. Plain
// groups are consecutive micro-batches (0 1 | 2 3): the order in which 2
// ranks that each accumulate 2 micro-batches reduce after the loop.
// CHECK-LABEL: func.func @consecutive
// CHECK:       %[[M0:.*]] = train.slice_rows %{{.*}} {offset = 0 : i64}
// CHECK-NEXT:  %[[M1:.*]] = train.slice_rows %{{.*}} {offset = 1 : i64}
// CHECK-NEXT:  %[[G0:.*]] = train.add %[[M0]], %[[M1]]
// CHECK-NEXT:  %[[M2:.*]] = train.slice_rows %{{.*}} {offset = 2 : i64}
// CHECK-NEXT:  %[[M3:.*]] = train.slice_rows %{{.*}} {offset = 3 : i64}
// CHECK-NEXT:  %[[G1:.*]] = train.add %[[M2]], %[[M3]]
// CHECK-NEXT:  %[[T:.*]] = train.add %[[G0]], %[[G1]]
// CHECK-NEXT:  return %[[T]]
func.func @consecutive(%x: tensor<4x2xf32> {train.input = "x"}) -> tensor<1x2xf32> attributes {train.step} {
  // expected-error @+1 {{train-memory-report: a train.accumulate summed in groups is analyzed unrolled (its groups' partial sums are ops then): run train-unroll-accum first}}
  %s = train.accumulate %x steps 4 padding [0] groups 2 : (tensor<4x2xf32>) -> tensor<1x2xf32> {
  ^bb0(%m: tensor<1x2xf32>):
    train.yield %m : tensor<1x2xf32>
  }
  return %s : tensor<1x2xf32>
}

// -----

// Interleaved groups are micro-batches j, j + G, ... (0 2 | 1 3): the order
// in which 2 ranks reduce-scatter each of 2 micro-batches inside the loop
// (ZeRO stages 2-3). The copies run in that order too, so that one group's
// sums are live at a time.
// CHECK-LABEL: func.func @interleaved
// CHECK:       %[[M0:.*]] = train.slice_rows %{{.*}} {offset = 0 : i64}
// CHECK-NEXT:  %[[M2:.*]] = train.slice_rows %{{.*}} {offset = 2 : i64}
// CHECK-NEXT:  %[[G0:.*]] = train.add %[[M0]], %[[M2]]
// CHECK-NEXT:  %[[M1:.*]] = train.slice_rows %{{.*}} {offset = 1 : i64}
// CHECK-NEXT:  %[[M3:.*]] = train.slice_rows %{{.*}} {offset = 3 : i64}
// CHECK-NEXT:  %[[G1:.*]] = train.add %[[M1]], %[[M3]]
// CHECK-NEXT:  %[[T:.*]] = train.add %[[G0]], %[[G1]]
// CHECK-NEXT:  return %[[T]]
func.func @interleaved(%x: tensor<4x2xf32> {train.input = "x"}) -> tensor<1x2xf32> attributes {train.step} {
  // expected-error @+1 {{train-memory-report: a train.accumulate summed in groups}}
  %s = train.accumulate %x steps 4 padding [0] groups 2 interleaved : (tensor<4x2xf32>) -> tensor<1x2xf32> {
  ^bb0(%m: tensor<1x2xf32>):
    train.yield %m : tensor<1x2xf32>
  }
  return %s : tensor<1x2xf32>
}
