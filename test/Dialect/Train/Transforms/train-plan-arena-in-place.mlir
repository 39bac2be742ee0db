// RUN: trainmem-opt %s -split-input-file -train-plan-arena | FileCheck %s

// An op that writes its result over its operand (here a rank's slice along
// dimension 0, which the runtime leaves at the start of its buffer) may do
// so only where nothing reads that memory afterwards: through a view of
// the weights, the weights' own later reads count. The slice gets memory
// of its own while the matmul still reads %w (it was written over the
// weights, and rank 1 read its own shard where the weights' first rows
// were).
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %arg0: tensor<4x4xf32> {train.offset = [[W:[0-9]+]] : i64, train.param = "w"}
// CHECK: train.reshape %arg0 {train.offsets = array<i64: [[W]]>}
// CHECK-NOT: shard.all_slice {{.*}}train.offsets = array<i64: [[W]]>}
// CHECK: train.matmul %arg1, %arg0
shard.grid @dp(shape = 2)
func.func @train_step(%w: tensor<4x4xf32> {train.param = "w"}, %x: tensor<4x4xf32> {train.input = "x"}) -> (tensor<8xf32>, tensor<4x4xf32>) attributes {train.step} {
  %v = train.reshape %w : tensor<4x4xf32> -> tensor<16xf32>
  %s = shard.all_slice %v on @dp grid_axes = [0] slice_axis = 0 : tensor<16xf32> -> tensor<8xf32>
  %y = train.matmul %x, %w : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  return %s, %y : tensor<8xf32>, tensor<4x4xf32>
}

// -----

// After the weights' last read the slice writes over them, through the
// view, in place.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %arg0: tensor<4x4xf32> {train.offset = [[W:[0-9]+]] : i64, train.param = "w"}
// CHECK: train.matmul %arg1, %arg0
// CHECK: train.reshape %arg0 {train.offsets = array<i64: [[W]]>}
// CHECK: shard.all_slice {{.*}}train.offsets = array<i64: [[W]]>}
shard.grid @dp(shape = 2)
func.func @train_step(%w: tensor<4x4xf32> {train.param = "w"}, %x: tensor<4x4xf32> {train.input = "x"}) -> (tensor<8xf32>, tensor<4x4xf32>) attributes {train.step} {
  %y = train.matmul %x, %w : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  %v = train.reshape %w : tensor<4x4xf32> -> tensor<16xf32>
  %s = shard.all_slice %v on @dp grid_axes = [0] slice_axis = 0 : tensor<16xf32> -> tensor<8xf32>
  return %s, %y : tensor<8xf32>, tensor<4x4xf32>
}
