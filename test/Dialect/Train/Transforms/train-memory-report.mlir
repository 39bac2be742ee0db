// RUN: trainmem-opt %s -train-memory-report -o /dev/null | FileCheck %s
// RUN: trainmem-opt %s -train-memory-report="format=json" -o /dev/null | FileCheck %s --check-prefix=JSON
// RUN: not trainmem-opt %s -train-memory-report="format=xml" -o /dev/null 2>&1 | FileCheck %s --check-prefix=BAD

// A step small enough to count by hand (f32, 4 bytes per element).
// Program points: 0 entry; 1 block; 2 matmul a; 3 gelu g; 4 yield; 5 block;
// 6 gelu_grad dg; 7 matmul dw; 8 yield; 9 block; 10 adamw; 11 yield;
// 12 return.
// Buffers and lifetimes:
//   w 512 B, m 512 B, v 512 B   state, live throughout (adamw updates in place)
//   lr 4 B, step 8 B            inputs, [0, 10]        temporaries
//   x 64 B                      input, [0, 7]          activation (read by the backward)
//   a 128 B                     [2, 6]                 activation
//   g 128 B                     [3, 6]                 activation
//   dg 128 B                    [6, 7]                 temporary
//   dw 512 B                    [7, 10]                gradient (feeds adamw)
// Point 6: 1536 + 12 + 64 + 128 + 128 + 128 = 1996.
// Point 7: 1536 + 12 + 64 + 128 + 512 = 2252 = the peak, at the dw matmul:
//   weights 512, gradients 512, optimizer 1024, activations 64 (x),
//   temporaries 140 (lr, step, dg).
// FLOPs: forward 2·2·16·8 + 8·32 = 768; backward 12·32 + 2·8·16·2 = 896;
// optimizer 12·128 = 1536. Layer 0 saves a and g for its MLP: 256 B (x is
// an activation too, but it is data, not something a layer saved).

// CHECK-LABEL: memory of @train_step
// CHECK-NEXT:  parameters 128
// CHECK-NEXT:  peak 2252 B {{.*}} at 'train.matmul' in mlp layer 0 backward
// CHECK-NEXT:  arena plan {{[0-9]+}} B {{.*}}x the peak (greedy by size, 64-B aligned)
// CHECK-NEXT:  category at peak (B) totals (B)
// CHECK-NEXT:  weights 512 512
// CHECK-NEXT:  gradients 512 512
// CHECK-NEXT:  optimizer 1024 1024
// CHECK-NEXT:  activations 64 320
// CHECK-NEXT:  temporaries 140 140
// CHECK-NEXT:  gradients live at once, at most 512 B
// CHECK-NEXT:  optimizer state m 512 B 4.0000 B/param
// CHECK-NEXT:  optimizer state v 512 B 4.0000 B/param
// CHECK-NEXT:  model states (weights + gradients + optimizer) 16.0000 B/param
// CHECK-NEXT:  flops      forward 768  backward 896  optimizer 1536  recompute 0
// CHECK-NEXT:  saved activations per layer (B)
// CHECK-NEXT:  layer attention mlp norm total
// CHECK-NEXT:  0 0 256 0 256

// JSON:      "at_peak": {
// JSON-NEXT:   "activations": 64,
// JSON-NEXT:   "gradients": 512,
// JSON-NEXT:   "optimizer": 1024,
// JSON-NEXT:   "temporaries": 140,
// JSON-NEXT:   "weights": 512
// JSON-NEXT: },
// JSON-NEXT: "flops": {
// JSON-NEXT:   "backward": 896,
// JSON-NEXT:   "forward": 768,
// JSON-NEXT:   "optimizer": 1536,
// JSON-NEXT:   "recompute": 0
// JSON-NEXT: },
// JSON-NEXT: "function": "train_step",
// JSON-NEXT: "layers": [
// JSON-NEXT:   {
// JSON-NEXT:     "attention": 0,
// JSON-NEXT:     "host_bytes": 0,
// JSON-NEXT:     "index": 0,
// JSON-NEXT:     "mlp": 256,
// JSON-NEXT:     "norm": 0,
// JSON-NEXT:     "saved_activation_bytes": 256
// JSON-NEXT:   }
// JSON-NEXT: ],
// JSON-NEXT: "model_states_bytes_per_parameter": 16,
// JSON-NEXT: "most_live_gradients": 512,
// JSON-NEXT: "optimizer_state": {
// JSON-NEXT:   "m": 512,
// JSON-NEXT:   "v": 512
// JSON-NEXT: },
// JSON-NEXT: "parameters": 128,
// JSON-NEXT: "peak_bytes": 2252,
// JSON-NEXT: "peak_op": {
// JSON-NEXT:   "block": "mlp",
// JSON-NEXT:   "layer": 0,
// JSON-NEXT:   "name": null,
// JSON-NEXT:   "op": "train.matmul",
// JSON-NEXT:   "phase": "backward",
// JSON-NEXT:   "text": "'train.matmul' in mlp layer 0 backward"
// JSON-NEXT: },
// JSON-NEXT: "plan": {
// JSON-NEXT:   "algorithm": "greedy-by-size",
// JSON-NEXT:   "alignment": 64,
// JSON-NEXT:   "arena_bytes": {{[0-9]+}},
// JSON-NEXT:   "source": "report"
// JSON-NEXT: },
// JSON-NEXT: "totals": {
// JSON-NEXT:   "activations": 320,
// JSON-NEXT:   "gradients": 512,
// JSON-NEXT:   "optimizer": 1024,
// JSON-NEXT:   "temporaries": 140,
// JSON-NEXT:   "weights": 512
// JSON-NEXT: }

// BAD: for the --format option: Cannot find option named 'xml'!

func.func @train_step(%x: tensor<2x8xf32> {train.input = "x"},
                      %w: tensor<8x16xf32> {train.param = "w"},
                      %m: tensor<8x16xf32> {train.optimizer_state = #train.state<"w", m>},
                      %v: tensor<8x16xf32> {train.optimizer_state = #train.state<"w", v>},
                      %lr: tensor<f32> {train.input = "lr"},
                      %step: tensor<i64> {train.input = "step"})
    -> (tensor<8x16xf32> {train.param = "w"},
        tensor<8x16xf32> {train.optimizer_state = #train.state<"w", m>},
        tensor<8x16xf32> {train.optimizer_state = #train.state<"w", v>}) attributes {train.step} {
  %h:2 = train.block mlp layer 0 -> tensor<2x16xf32>, tensor<2x16xf32> {
    %a = train.matmul %x, %w : tensor<2x8xf32>, tensor<8x16xf32> -> tensor<2x16xf32>
    %g = train.gelu %a : tensor<2x16xf32>
    train.yield %g, %a : tensor<2x16xf32>, tensor<2x16xf32>
  }
  %dw = train.block mlp layer 0 backward -> tensor<8x16xf32> {
    %dg = train.gelu_grad %h#0, %h#1 : tensor<2x16xf32>
    %d = train.matmul %x, %dg {transpose_lhs} : tensor<2x8xf32>, tensor<2x16xf32> -> tensor<8x16xf32>
    train.yield %d : tensor<8x16xf32>
  }
  %new:3 = train.block optimizer -> tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32> {
    %p, %m2, %v2 = train.adamw %w, %dw, %m, %v, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-08 : f64, weight_decay = 0.0 : f64} : tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<f32>, tensor<i64>
    train.yield %p, %m2, %v2 : tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>
  }
  return %new#0, %new#1, %new#2 : tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>
}
