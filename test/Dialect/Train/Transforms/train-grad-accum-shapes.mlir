// train-grad-accum re-types the body's ops for a micro-batch by asking them
// (InferTypeOpInterface, InferShapedTypeOpInterface), never by matching an
// operand's shape: a layer_norm_grad's gradients take the shapes of what
// they are gradients of and keep their element types (f32 of a bf16
// input); an embedding table's gradient keeps the table's shape, although
// here it has the shape of its incoming gradient (vocabulary 4 = batch 4),
// which a guess from the operands would have halved.
// RUN: trainmem-opt %s -train-grad-accum="steps=2 normalize=mean" | FileCheck %s

// CHECK-LABEL: func.func @train_step
// CHECK:         train.accumulate
// CHECK-NEXT:    ^bb0(%[[X:.*]]: tensor<2x8xbf16>, %[[IDS:.*]]: tensor<2xi32>, %{{.*}}: tensor<f32>):
// CHECK:           %[[DX:[^,]*]], %{{.*}}, %{{.*}} = train.layer_norm_grad %[[X]], %[[X]], %{{.*}} {epsilon = 1.000000e-05 : f64} : tensor<2x8xbf16>, tensor<2x8xbf16>, tensor<8xbf16> -> tensor<2x8xf32>, tensor<8xbf16>, tensor<8xbf16>
// CHECK:           train.embedding_grad %[[DX]], %[[IDS]] : tensor<2x8xf32>, tensor<2xi32> -> tensor<4x8xf32>
func.func @train_step(%x: tensor<4x8xbf16> {train.input = "x"},
                      %ids: tensor<4xi32> {train.input = "tokens"},
                      %g: tensor<8xbf16> {train.param = "g"})
    -> (tensor<8xbf16>, tensor<8xbf16>, tensor<4x8xf32>) attributes {train.step} {
  %dx, %dg, %db = train.layer_norm_grad %x, %x, %g {epsilon = 1.0e-05 : f64}
      : tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<8xbf16>
     -> tensor<4x8xf32>, tensor<8xbf16>, tensor<8xbf16>
  %dtable = train.embedding_grad %dx, %ids
      : tensor<4x8xf32>, tensor<4xi32> -> tensor<4x8xf32>
  return %dg, %db, %dtable : tensor<8xbf16>, tensor<8xbf16>, tensor<4x8xf32>
}
