// RUN: trainmem-opt %s -split-input-file -convert-train-to-runtime | FileCheck %s --implicit-check-not=train.
// RUN: trainmem-opt %s -split-input-file -convert-train-to-runtime -convert-to-llvm -reconcile-unrealized-casts | FileCheck %s --check-prefix=LLVM

// One runtime call per op, operands and results at planned arena offsets.
// Buffers (f32): x 32 B and w 48 B live throughout (inputs and state), m
// 24 B dies at the gelu, g 24 B at the return: the plan puts g where m was.

// CHECK-LABEL: func.func private @tmrt_matmul(!llvm.ptr, i64
// CHECK:       func.func @train_step(%[[CTX:.*]]: !llvm.ptr)
// CHECK-SAME:    tmrt.arena_bytes = 152 : i64
// The slots carry the step's markers and element types, typed.
// CHECK-SAME:    tmrt.arguments = [{bytes = 32 : i64, element_type = f32, input = "x", offset = [[X:[0-9]+]] : i64, shape = array<i64: 2, 4>},
// CHECK-SAME:                       {bytes = 48 : i64, element_type = f32, offset = [[W:[0-9]+]] : i64, param = "w", shape = array<i64: 4, 3>}]
// CHECK-SAME:    tmrt.results = [{bytes = 24 : i64, element_type = f32, offset = [[G:[0-9]+]] : i64, shape = array<i64: 2, 3>}]
// CHECK-DAG:     %[[XO:.*]] = arith.constant [[X]] : i64
// CHECK-DAG:     %[[WO:.*]] = arith.constant [[W]] : i64
// CHECK:         call @tmrt_matmul(%[[CTX]], %[[XO]], %[[WO]], %[[MO:[^,]*]],
// CHECK:         call @tmrt_gelu(%[[CTX]], %{{.*}}, %{{.*}}, %{{.*}}) : (!llvm.ptr, i64, i64, i64) -> ()
// CHECK-NEXT:    return

// LLVM-LABEL: llvm.func @train_step(%{{.*}}: !llvm.ptr)
// LLVM:         llvm.call @tmrt_matmul
// LLVM:         llvm.call @tmrt_gelu
// LLVM-NOT:     func.call

func.func @train_step(%x: tensor<2x4xf32> {train.input = "x"},
                      %w: tensor<4x3xf32> {train.param = "w"}) -> tensor<2x3xf32> attributes {train.step} {
  %m = train.matmul %x, %w : tensor<2x4xf32>, tensor<4x3xf32> -> tensor<2x3xf32>
  %g = train.gelu %m : tensor<2x3xf32>
  return %g : tensor<2x3xf32>
}

// -----

// Views of a row-major value cost nothing; a reshape of a strided view is a
// copy into its own buffer.

// CHECK-LABEL: {{//}} {{-----}}
// CHECK:       func.func @train_step
// CHECK-NOT:     call @tmrt_copy_strided
// CHECK:         call @tmrt_matmul
// CHECK:         call @tmrt_copy_strided
// CHECK-NOT:     call

func.func @train_step(%x: tensor<2x6x3x4xf32> {train.input = "x"}) -> tensor<2x6x12xf32> attributes {train.step} {
  %q = train.transpose %x {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x6x3x4xf32> -> tensor<2x3x6x4xf32>
  %s = train.matmul %q, %q {transpose_rhs} : tensor<2x3x6x4xf32>, tensor<2x3x6x4xf32> -> tensor<2x3x6x6xf32>
  %c = train.matmul %s, %q : tensor<2x3x6x6xf32>, tensor<2x3x6x4xf32> -> tensor<2x3x6x4xf32>
  %t = train.transpose %c {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x3x6x4xf32> -> tensor<2x6x3x4xf32>
  %r = train.reshape %t : tensor<2x6x3x4xf32> -> tensor<2x6x12xf32>
  return %r : tensor<2x6x12xf32>
}
