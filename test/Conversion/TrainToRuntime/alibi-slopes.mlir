// RUN: trainmem-opt %s -convert-train-to-runtime | FileCheck %s --implicit-check-not=train.
// RUN: trainmem-opt %s -convert-train-to-runtime -convert-to-llvm -reconcile-unrealized-casts -o /dev/null

// ALiBi slopes reach the kernels as a pointer to a constant global of the
// module (one per distinct array: the softmax and the fused attention
// share theirs); an op without them passes a null pointer.
// CHECK-DAG:   llvm.mlir.global internal constant @[[G:__tmrt_f64_2_[0-9A-F]+]](dense<[5.000000e-01, 1.250000e-01]> : tensor<2xf64>) {addr_space = 0 : i32} : !llvm.array<2 x f64>
// CHECK-NOT:   llvm.mlir.global internal
// CHECK-LABEL: func.func @train_step
// CHECK:         %[[A:.*]] = llvm.mlir.addressof @[[G]] : !llvm.ptr
// CHECK:         call @tmrt_softmax({{.*}}, %[[A]]) :
// CHECK:         %[[Z:.*]] = llvm.mlir.zero : !llvm.ptr
// CHECK:         call @tmrt_softmax({{.*}}, %[[Z]]) :
// CHECK:         %[[B:.*]] = llvm.mlir.addressof @[[G]] : !llvm.ptr
// CHECK:         call @tmrt_attention({{.*}}, %[[B]]) :
func.func @train_step(%x: tensor<1x2x8x8xf32> {train.input = "x"},
                      %q: tensor<1x2x8x4xf32> {train.input = "q"})
    -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x4xf32>) attributes {train.step} {
  %a = train.softmax %x {causal, alibi_slopes = array<f64: 0.5, 0.125>} : tensor<1x2x8x8xf32>
  %b = train.softmax %x {causal} : tensor<1x2x8x8xf32>
  %o, %lse = train.attention %q, %q, %q {causal, scale = 0.5 : f64, alibi_slopes = array<f64: 0.5, 0.125>} : tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32> -> tensor<1x2x8x4xf32>, tensor<1x2x8xf32>
  return %a, %b, %o : tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x4xf32>
}
