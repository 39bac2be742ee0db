// RUN: trainmem-opt %s -split-input-file -train-tensor-parallel="size=2" 2>/dev/null | FileCheck %s
// RUN: trainmem-opt %s -split-input-file -train-tensor-parallel="size=2" -train-autodiff="optimizer=none" 2>/dev/null | FileCheck %s --check-prefix=GRAD
// RUN: trainmem-opt %s -split-input-file -train-tensor-parallel="size=2 sequence-parallel=true" 2>/dev/null | FileCheck %s --check-prefix=SEQ
// RUN: trainmem-opt %s -split-input-file -train-tensor-parallel="size=2" -train-autodiff -train-memory-report="output=-" -o /dev/null 2>/dev/null | FileCheck %s --check-prefix=REPORT
// RUN: trainmem-opt %s -split-input-file -verify-diagnostics -train-tensor-parallel="size=4" -o /dev/null
//
// Megatron's vocabulary parallelism over a group of 2: the token
// embedding's table and the head's weight hold V/t = 4 of the 8 rows
// (columns) each; a lookup of another rank's row gives zeros and g sums
// them; the head's input enters through f, its logits stay split, and the
// cross-entropy is the parallel one: the rows' maxima all-reduced by max,
// each rank's sums of exponentials and target logit all-reduced by sum,
// merged into the loss and the token count. No rank gathers the logits.

// Tied (GPT): one table [8, 6] for the lookup and the head, split by rows.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: %arg2: tensor<4x6xf32> {train.param = "wte", train.tensor_split = #train.split<dim = 0, parts = 2, grid = @tp, axis = 1>}
// CHECK: train.block embedding
// CHECK: %[[LOOKUP:.*]] = train.embedding %arg2, %arg0 {split = #train.split<dim = 0, parts = 2, grid = @tp, axis = 1>} : tensor<4x6xf32>, tensor<2x4xi32> -> tensor<2x4x6xf32>
// CHECK: shard.all_reduce %[[LOOKUP]] on @tp grid_axes = [1] : tensor<2x4x6xf32> -> tensor<2x4x6xf32>
// CHECK: train.block head
// CHECK: %[[IN:.*]] = train.grad_all_reduce %{{.*}} on @tp grid_axes = [1] : tensor<2x4x6xf32>
// CHECK: %[[LOGITS:.*]] = train.matmul %[[IN]], %arg2 {transpose_rhs} : tensor<2x4x6xf32>, tensor<4x6xf32> -> tensor<2x4x4xf32>
// CHECK: %[[ROWMAX:.*]] = train.row_max %[[LOGITS]] : tensor<2x4x4xf32> -> tensor<2x4xf32>
// CHECK: %[[MAX:.*]] = shard.all_reduce %[[ROWMAX]] on @tp grid_axes = [1] reduction = max : tensor<2x4xf32> -> tensor<2x4xf32>
// CHECK: %[[SE:.*]], %[[TL:.*]] = train.cross_entropy_part %[[LOGITS]], %arg1, %[[MAX]] {ignore_index = -100 : i64, split = #train.split<dim = 2, parts = 2, grid = @tp, axis = 1>}
// CHECK: %[[SES:.*]] = shard.all_reduce %[[SE]] on @tp grid_axes = [1] : tensor<2x4xf32> -> tensor<2x4xf32>
// CHECK: %[[TLS:.*]] = shard.all_reduce %[[TL]] on @tp grid_axes = [1] : tensor<2x4xf32> -> tensor<2x4xf32>
// CHECK: %[[SUM:.*]], %[[COUNT:.*]] = train.cross_entropy_merge %[[SES]], %[[TLS]], %[[MAX]], %arg1 {ignore_index = -100 : i64}
// CHECK: train.mean_loss %[[SUM]], %[[COUNT]]
// CHECK-NOT: train.cross_entropy {{.*}}

// The backward: the merge's gradient seeds the parts' (the maxima have
// none); the head's input gradient summed over the group (f); the table's
// gradient is this rank's rows of the lookup's and the head's.
// GRAD-LABEL: func.func @train_step
// GRAD: %[[DSE:.*]], %[[DTL:.*]] = train.cross_entropy_merge_grad %{{.*}}, %{{.*}}, %arg1 {ignore_index = -100 : i64} : tensor<f32>, tensor<2x4xf32>, tensor<2x4xi32> -> tensor<2x4xf32>, tensor<2x4xf32>
// GRAD: train.cross_entropy_part_grad %[[DSE]], %[[DTL]], %{{.*}}, %{{.*}}, %arg1 {ignore_index = -100 : i64, split = #train.split<dim = 2, parts = 2, grid = @tp, axis = 1>}
// GRAD: train.embedding_grad %{{.*}}, %arg0 {split = #train.split<dim = 0, parts = 2, grid = @tp, axis = 1>} : tensor<2x4x6xf32>, tensor<2x4xi32> -> tensor<4x6xf32>

// With sequence parallelism, the embedding block's sum is reduce-scattered
// along the sequence when it yields it directly (as here), and the head's
// input is gathered (in place of f).
// SEQ-LABEL: func.func @forward
// SEQ: %[[LOOKUP:.*]] = train.embedding %arg2, %arg0 {split = #train.split<dim = 0, parts = 2, grid = @tp, axis = 1>}
// SEQ: shard.reduce_scatter %[[LOOKUP]] on @tp grid_axes = [1] scatter_axis = 1 : tensor<2x4x6xf32> -> tensor<2x2x6xf32>
// SEQ: train.block head
// SEQ: %[[IN:.*]] = shard.all_gather %{{.*}} on @tp grid_axes = [1] gather_axis = 1 : tensor<2x2x6xf32> -> tensor<2x4x6xf32>
// SEQ: train.matmul %[[IN]], %arg2 {transpose_rhs} : tensor<2x4x6xf32>, tensor<4x6xf32> -> tensor<2x4x4xf32>
// SEQ: train.cross_entropy_merge

// The report: the lookup's sum (48 elements, 2 x half each way), the rows'
// maxima, sums of exponentials and target logits (8 each), and f's
// gradient of the head's input (48).
// REPORT-LABEL: memory of @train_step
// REPORT: communication tensor      all_reduce           5 ops                  120 elements                  480 B per rank and step
func.func @forward(%tokens: tensor<2x4xi32> {train.input = "tokens"},
                   %targets: tensor<2x4xi32> {train.input = "targets"},
                   %wte: tensor<8x6xf32> {train.param = "wte"}) -> tensor<f32> {
  %x = train.block embedding -> tensor<2x4x6xf32> {
    %e = train.embedding %wte, %tokens : tensor<8x6xf32>, tensor<2x4xi32> -> tensor<2x4x6xf32>
    train.yield %e : tensor<2x4x6xf32>
  }
  %loss = train.block head -> tensor<f32> {
    %logits = train.matmul %x, %wte {transpose_rhs} : tensor<2x4x6xf32>, tensor<8x6xf32> -> tensor<2x4x8xf32>
    %sum, %count = train.cross_entropy %logits, %targets {ignore_index = -100 : i64} : tensor<2x4x8xf32>, tensor<2x4xi32> -> tensor<f32>, tensor<i64>
    %mean = train.mean_loss %sum, %count : tensor<f32>, tensor<i64>
    train.yield %mean : tensor<f32>
  }
  return %loss : tensor<f32>
}

// -----

// Untied (Llama): the table split by rows, the head's [6, 8] weight by its
// columns (the vocabulary); a position table looked up by train.iota stays
// whole.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: %arg2: tensor<4x6xf32> {train.param = "tok_embeddings", train.tensor_split = #train.split<dim = 0, parts = 2, grid = @tp, axis = 1>}
// CHECK-SAME: %arg3: tensor<6x4xf32> {train.param = "output", train.tensor_split = #train.split<dim = 1, parts = 2, grid = @tp, axis = 1>}
// CHECK-SAME: %arg4: tensor<4x6xf32> {train.param = "wpe"}
// CHECK: train.embedding %arg4, %{{.*}} : tensor<4x6xf32>, tensor<4xi32> -> tensor<4x6xf32>
// CHECK: train.matmul %{{.*}}, %arg3 : tensor<2x4x6xf32>, tensor<6x4xf32> -> tensor<2x4x4xf32>
// CHECK: train.cross_entropy_merge
// With sequence parallelism the lookups' sum is reduce-scattered and the
// position rows added to it sliced along their sequence (dimension 0).
// SEQ-LABEL: func.func @forward
// SEQ: %[[LOOKUP:.*]] = train.embedding %arg2, %arg0 {split = #train.split<dim = 0, parts = 2, grid = @tp, axis = 1>}
// SEQ: %[[PIECE:.*]] = shard.reduce_scatter %[[LOOKUP]] on @tp grid_axes = [1] scatter_axis = 1 : tensor<2x4x6xf32> -> tensor<2x2x6xf32>
// SEQ: %[[ROWS:.*]] = train.embedding %arg4, %{{.*}} : tensor<4x6xf32>, tensor<4xi32> -> tensor<4x6xf32>
// SEQ: %[[ROWPIECE:.*]] = shard.all_slice %[[ROWS]] on @tp grid_axes = [1] slice_axis = 0 : tensor<4x6xf32> -> tensor<2x6xf32>
// SEQ: train.bias_add %[[PIECE]], %[[ROWPIECE]] : tensor<2x2x6xf32>, tensor<2x6xf32>
// SEQ: train.yield %{{.*}} : tensor<2x2x6xf32>
func.func @forward(%tokens: tensor<2x4xi32> {train.input = "tokens"},
                   %targets: tensor<2x4xi32> {train.input = "targets"},
                   %table: tensor<8x6xf32> {train.param = "tok_embeddings"},
                   %out: tensor<6x8xf32> {train.param = "output"},
                   %wpe: tensor<4x6xf32> {train.param = "wpe"}) -> tensor<f32> {
  %x = train.block embedding -> tensor<2x4x6xf32> {
    %e = train.embedding %table, %tokens : tensor<8x6xf32>, tensor<2x4xi32> -> tensor<2x4x6xf32>
    %i = train.iota : tensor<4xi32>
    %p = train.embedding %wpe, %i : tensor<4x6xf32>, tensor<4xi32> -> tensor<4x6xf32>
    %s = train.bias_add %e, %p : tensor<2x4x6xf32>, tensor<4x6xf32>
    train.yield %s : tensor<2x4x6xf32>
  }
  %loss = train.block head -> tensor<f32> {
    %logits = train.matmul %x, %out : tensor<2x4x6xf32>, tensor<6x8xf32> -> tensor<2x4x8xf32>
    %sum, %count = train.cross_entropy %logits, %targets {ignore_index = -100 : i64} : tensor<2x4x8xf32>, tensor<2x4xi32> -> tensor<f32>, tensor<i64>
    %mean = train.mean_loss %sum, %count : tensor<f32>, tensor<i64>
    train.yield %mean : tensor<f32>
  }
  return %loss : tensor<f32>
}

// -----

// A vocabulary the group does not divide is refused, naming the option
// that keeps it whole (size=4 here; 2 divides the others above).
func.func @forward(%tokens: tensor<2x4xi32> {train.input = "tokens"},
                   %targets: tensor<2x4xi32> {train.input = "targets"},
                   %wte: tensor<6x4xf32> {train.param = "wte"}) -> tensor<f32> {
  %x = train.block embedding -> tensor<2x4x4xf32> {
    %e = train.embedding %wte, %tokens : tensor<6x4xf32>, tensor<2x4xi32> -> tensor<2x4x4xf32>
    train.yield %e : tensor<2x4x4xf32>
  }
  %loss = train.block head -> tensor<f32> {
    // expected-error @+1 {{train-tensor-parallel: 4 ranks do not divide the vocabulary (6) of 'wte' (pad it to a multiple of 4, or vocabulary-parallel=false keeps it whole)}}
    %logits = train.matmul %x, %wte {transpose_rhs} : tensor<2x4x4xf32>, tensor<6x4xf32> -> tensor<2x4x6xf32>
    %sum, %count = train.cross_entropy %logits, %targets {ignore_index = -100 : i64} : tensor<2x4x6xf32>, tensor<2x4xi32> -> tensor<f32>, tensor<i64>
    %mean = train.mean_loss %sum, %count : tensor<f32>, tensor<i64>
    train.yield %mean : tensor<f32>
  }
  return %loss : tensor<f32>
}
