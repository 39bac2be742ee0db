//===- RingAttention.h - a ring attention's workspace and traffic -*- C++
//-*-===//
//
// The ring form of a context-parallel attention (train.attention and
// train.attention_grad with `ring`, train-context-parallel
// `exchange=ring`): each rank of a group of c keeps its own rows of K and
// V; the blocks pass around the ring (to the next member, from the
// previous), c - 1 exchanges, and each rank attends with its queries to
// the block it holds, the online softmax carried from block to block
// (Liu et al. 2023, Ring Attention; Megatron-Core's p2p context
// parallelism). The backward passes K and V around again with the
// blocks' dK and dV sums travelling beside them (in f32), one more
// exchange bringing each sum home: c - 1 exchanges of K and V and c of
// dK and dV.
//
// The blocks in flight and the running sums are arena memory the compiler
// plans (the op's workspace, WorkspaceOpInterface); the runtime's kernels
// lay it out as below. Header-only and free of LLVM, so the two agree by
// construction.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_SUPPORT_RINGATTENTION_H
#define TRAINMEM_SUPPORT_RINGATTENTION_H

#include <cstdint>

namespace trainmem {

/// Byte offsets of a ring attention's workspace regions, each 64-byte
/// aligned, and its size.
struct RingAttentionWorkspace {
  /// Forward: the running output (f32, [batch, heads, queries,
  /// valueDim]); backward: the running dQ (f32, [batch, heads, queries,
  /// dim]).
  uint64_t acc = 0;
  /// Forward: the running row maximum and sum (f32, [batch, heads,
  /// queries] each); unused (0 bytes) in the backward.
  uint64_t most = 0, sum = 0;
  /// Two K/V blocks (the one attended to and the one arriving), each K
  /// ([batch, kvHeads, keys, dim]) then V ([.., valueDim]) in the operands'
  /// element type, V at `valueAt` from the block's start.
  uint64_t blocks[2] = {0, 0};
  uint64_t valueAt = 0;
  /// Backward: two dK/dV sums (f32, the same shapes), dV at `gradValueAt`.
  uint64_t grads[2] = {0, 0};
  uint64_t gradValueAt = 0;
  uint64_t bytes = 0;

  static uint64_t align(uint64_t n) { return (n + 63) / 64 * 64; }

  /// The extents are train.attention's (RuntimeShape / AttentionLayout):
  /// `keys` the rank's own rows.
  static RingAttentionWorkspace of(bool backward, int64_t batch, int64_t heads,
                                   int64_t kvHeads, int64_t queries,
                                   int64_t keys, int64_t dim, int64_t valueDim,
                                   int64_t elementBytes) {
    auto n = [](int64_t a, int64_t b, int64_t c, int64_t d) {
      return static_cast<uint64_t>(a) * static_cast<uint64_t>(b) *
             static_cast<uint64_t>(c) * static_cast<uint64_t>(d);
    };
    RingAttentionWorkspace w;
    uint64_t at = 0;
    w.acc = at;
    at += align(n(batch, heads, queries, backward ? dim : valueDim) * 4);
    if (!backward) {
      w.most = at;
      at += align(n(batch, heads, queries, 1) * 4);
      w.sum = at;
      at += align(n(batch, heads, queries, 1) * 4);
    }
    uint64_t e = static_cast<uint64_t>(elementBytes);
    w.valueAt = align(n(batch, kvHeads, keys, dim) * e);
    uint64_t block = w.valueAt + align(n(batch, kvHeads, keys, valueDim) * e);
    for (uint64_t &b : w.blocks) {
      b = at;
      at += block;
    }
    if (backward) {
      w.gradValueAt = align(n(batch, kvHeads, keys, dim) * 4);
      uint64_t grad =
          w.gradValueAt + align(n(batch, kvHeads, keys, valueDim) * 4);
      for (uint64_t &g : w.grads) {
        g = at;
        at += grad;
      }
    }
    w.bytes = at;
    return w;
  }
};

} // namespace trainmem

#endif // TRAINMEM_SUPPORT_RINGATTENTION_H
