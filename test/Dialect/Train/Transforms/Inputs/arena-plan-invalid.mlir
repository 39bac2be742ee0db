// Arena plans convert-train-to-runtime refuses (train-plan-arena.test).

// The sum is placed on its first operand, which is live at the add.
func.func @train_step(%a: tensor<16xf32> {train.offset = 0 : i64}, %b: tensor<16xf32> {train.offset = 64 : i64}) -> tensor<16xf32> attributes {train.step, train.arena_bytes = 192 : i64} {
  %c = train.add %a, %b {train.offsets = array<i64: 0>} : tensor<16xf32>
  return %c : tensor<16xf32>
}

// -----

// A buffer past the end of the arena.
func.func @train_step(%a: tensor<16xf32> {train.offset = 0 : i64}, %b: tensor<16xf32> {train.offset = 64 : i64}) -> tensor<16xf32> attributes {train.step, train.arena_bytes = 160 : i64} {
  %c = train.add %a, %b {train.offsets = array<i64: 128>} : tensor<16xf32>
  return %c : tensor<16xf32>
}

// -----

// An offset off the 64-byte grid.
func.func @train_step(%a: tensor<16xf32> {train.offset = 0 : i64}, %b: tensor<16xf32> {train.offset = 64 : i64}) -> tensor<16xf32> attributes {train.step, train.arena_bytes = 256 : i64} {
  %c = train.add %a, %b {train.offsets = array<i64: 32>} : tensor<16xf32>
  return %c : tensor<16xf32>
}

// -----

// A view planned away from the buffer it views.
func.func @train_step(%a: tensor<4x4xf32> {train.offset = 0 : i64}) -> tensor<4x4xf32> attributes {train.step, train.arena_bytes = 256 : i64} {
  %t = train.transpose %a {permutation = array<i64: 1, 0>, train.offsets = array<i64: 64>} : tensor<4x4xf32> -> tensor<4x4xf32>
  %c = train.add %t, %t {train.offsets = array<i64: 128>} : tensor<4x4xf32>
  return %c : tensor<4x4xf32>
}
