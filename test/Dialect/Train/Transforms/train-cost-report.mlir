// RUN: trainmem-opt %s -split-input-file -train-cost-report -o /dev/null | FileCheck %s
// RUN: trainmem-opt %s -split-input-file -train-cost-report="format=json" -o /dev/null | FileCheck %s --check-prefix=JSON
// RUN: not trainmem-opt %s -split-input-file -train-cost-report="format=yaml" -o /dev/null 2>&1 | FileCheck %s --check-prefix=BADFORMAT
// RUN: trainmem-opt %s -train-cost-report="output=%t.json format=json" | FileCheck %s --check-prefix=IR
// RUN: FileCheck %s --check-prefix=JSON < %t.json

// Hand-counted: matmul [2x3]·[3x4] = 2·(2·4)·3 = 48 FLOPs, reads 18 f32
// (72 B), writes 8 f32 (32 B); gelu 8 FLOPs per element on 8 elements = 64
// FLOPs, 32 B each way; the reshape is a view (0 / 0 / 0). Parameters: the
// 3x4 weight and the 4-vector bias, 16 elements, 64 bytes.

// CHECK-LABEL: function @mlp
// CHECK-NEXT:   parameters  {{ *}}16 (64 bytes)
// CHECK-NEXT:   flops       {{ *}}112
// CHECK-NEXT:   bytes read  {{ *}}104
// CHECK-NEXT:   bytes written {{ *}}64
// CHECK-NEXT:   mlp        flops {{ *}}112  read {{ *}}104  written {{ *}}64
// CHECK-NEXT:   other      flops {{ *}}0  read {{ *}}0  written {{ *}}0

// JSON:      "by_kind": {
// JSON-NEXT:   "mlp": {
// JSON-NEXT:     "bytes_read": 104,
// JSON-NEXT:     "bytes_written": 64,
// JSON-NEXT:     "flops": 112
// JSON:      "function": "mlp",
// JSON-NEXT: "parameter_bytes": 64,
// JSON-NEXT: "parameters": 16

// BADFORMAT: for the --format option: Cannot find option named 'yaml'!

// The pass only reads the IR.
// IR-LABEL: func.func @mlp
// IR: train.block mlp layer 0

func.func @mlp(%x: tensor<2x3xf32> {train.input = "x"},
               %w: tensor<3x4xf32> {train.param = "w"},
               %b: tensor<4xf32> {train.param = "b"}) -> tensor<8xf32> {
  %0 = train.block mlp layer 0 -> tensor<2x4xf32> {
    %m = train.matmul %x, %w : tensor<2x3xf32>, tensor<3x4xf32> -> tensor<2x4xf32>
    %g = train.gelu %m : tensor<2x4xf32>
    train.yield %g : tensor<2x4xf32>
  }
  %r = train.reshape %0 : tensor<2x4xf32> -> tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

// An embedding reads the ids and the rows it gathers, not its whole table:
// 4 i32 ids (16 B) + 4 rows of 8 bf16 (64 B).

// CHECK-LABEL: function @gather
// CHECK-NEXT:   parameters  {{ *}}8192 (16384 bytes)
// CHECK:        embedding  flops {{ *}}0  read {{ *}}80  written {{ *}}64

func.func @gather(%t: tensor<1024x8xbf16> {train.param = "wte"},
                  %ids: tensor<4xi32> {train.input = "tokens"}) -> tensor<4x8xbf16> {
  %0 = train.block embedding -> tensor<4x8xbf16> {
    %e = train.embedding %t, %ids : tensor<1024x8xbf16>, tensor<4xi32> -> tensor<4x8xbf16>
    train.yield %e : tensor<4x8xbf16>
  }
  return %0 : tensor<4x8xbf16>
}
