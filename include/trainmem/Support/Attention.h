//===- Attention.h - a fused attention's index arithmetic -------*- C++ -*-===//
//
// Where train.attention's rows, scores and log-sum-exps are, and which
// scores its dropout keeps: header-only and free of LLVM, so the reference
// evaluator and the runtime's kernels agree on them by construction.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_SUPPORT_ATTENTION_H
#define TRAINMEM_SUPPORT_ATTENTION_H

#include "trainmem/Support/ContextChunks.h"
#include "trainmem/Support/Philox.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace trainmem {

/// q [batch, heads, queries, dim], k and v [batch, kvHeads, keys, dim |
/// valueDim]; the output [batch, heads, queries, valueDim] or, transposed,
/// [batch, queries, heads, valueDim]; the log-sum-exp [batch, heads,
/// queries].
struct AttentionLayout {
  int64_t batch = 0, heads = 0, kvHeads = 0, queries = 0, keys = 0, dim = 0,
          valueDim = 0;
  bool transposeOutput = false, causal = false;
  /// ALiBi: one slope per query head (memory the kernel can read: device
  /// memory on a GPU), or null.
  const double *alibiSlopes = nullptr;
  /// Context parallelism: the queries are this rank's rows of the
  /// sequence, the keys the group's rows gathered in rank order
  /// (ContextChunks.h); whole when `context.parts` is 1.
  ContextChunks context;
  /// The ring form (RingAttention.h): the keys are the rows of the rank at
  /// this place in the group, not the group's gathered; -1: gathered.
  int64_t keyBlock = -1;

  /// The layout of the runtime kernels' arguments (the lowering's order).
  static AttentionLayout of(int64_t batch, int64_t heads, int64_t kvHeads,
                            int64_t queries, int64_t keys, int64_t dim,
                            int64_t valueDim, int64_t transposeOutput,
                            int64_t causal) {
    return {batch,       heads,   kvHeads,         queries,
            keys,        dim,     valueDim,        transposeOutput != 0,
            causal != 0, nullptr, ContextChunks{}, -1};
  }

  /// Query heads per key/value head.
  TRAINMEM_HD int64_t group() const { return heads / kvHeads; }
  /// The key/value head query head `h` reads.
  TRAINMEM_HD int64_t kvHead(int64_t h) const { return h / group(); }
  /// The place of query `i` and of key `j` in the whole sequence.
  TRAINMEM_HD int64_t queryPosition(int64_t i) const {
    return context.wholeRow(i, queries);
  }
  TRAINMEM_HD int64_t keyPosition(int64_t j) const {
    if (keyBlock >= 0)
      return ContextChunks{context.parts, keyBlock, context.balanced}.wholeRow(
          j, keys);
    return context.gatheredRow(j, keys);
  }
  /// Keys consecutive in the whole sequence: the kernels take key tiles
  /// within such a run, where the keys a query sees are a prefix.
  TRAINMEM_HD int64_t keyRun() const {
    return keyBlock >= 0 ? context.localRun(keys) : context.gatheredRun(keys);
  }
  /// The keys of the whole sequence (a ring block's are one rank's).
  TRAINMEM_HD int64_t wholeKeys() const {
    return keyBlock >= 0 ? keys * context.parts : keys;
  }
  /// Whether query `i` sees key `j`: a causal mask hides later positions.
  TRAINMEM_HD bool visible(int64_t i, int64_t j) const {
    return !causal || keyPosition(j) <= queryPosition(i);
  }
  /// The keys past which query `i` sees none: i + 1 under a causal mask on
  /// the whole sequence (a context-parallel rank's visible keys are not a
  /// prefix of the gathered ones: all of them, each tested by visible()).
  TRAINMEM_HD int64_t keyEnd(int64_t i) const {
    return causal && context.isWhole() ? i + 1 : keys;
  }
  /// How many of the `cols` keys from `k0` (inside one run) query `i`
  /// sees: a prefix of them.
  TRAINMEM_HD int64_t visibleIn(int64_t i, int64_t k0, int64_t cols) const {
    if (!causal)
      return cols;
    int64_t seen = queryPosition(i) - keyPosition(k0) + 1;
    return seen < 0 ? 0 : (seen > cols ? cols : seen);
  }
  /// The bias score (h, i, j) gets after the scale: ALiBi's
  /// m_h · (j - i), or 0.
  TRAINMEM_HD float bias(int64_t h, int64_t i, int64_t j) const {
    return alibiSlopes ? static_cast<float>(alibiSlopes[h] *
                                            static_cast<double>(j - i))
                       : 0.0f;
  }
  /// Index of row (b, h, i) of the log-sum-exp.
  TRAINMEM_HD int64_t row(int64_t b, int64_t h, int64_t i) const {
    return (b * heads + h) * queries + i;
  }
  /// Where output row (b, h, i) starts.
  TRAINMEM_HD int64_t outRow(int64_t b, int64_t h, int64_t i) const {
    return (transposeOutput ? (b * queries + i) * heads + h : row(b, h, i)) *
           valueDim;
  }
  /// Position of score (b, h, i, j) among the batch · heads · queries ·
  /// keys scores (row-major; the whole sequence's under context
  /// parallelism): what its dropout draw is keyed by.
  TRAINMEM_HD uint64_t score(int64_t b, int64_t h, int64_t i, int64_t j) const {
    if (context.isWhole())
      return static_cast<uint64_t>(row(b, h, i) * keys + j);
    // A context-parallel rank's scores sit at their positions in the whole
    // [batch, heads, queries · parts, keys] tensor.
    int64_t wholeRow =
        (b * heads + h) * queries * context.parts + queryPosition(i);
    return static_cast<uint64_t>(wholeRow * wholeKeys() + keyPosition(j));
  }
};

/// Scales a row of `n` scores (dot products) by `scale` in place, adds the
/// ALiBi bias `slope · (j - query)` when `slope` is not 0, and returns
/// their log-sum-exp, with the row's largest score taken out first so that
/// no exponential overflows.
inline double scaleRowAndLogSumExp(double *scores, int64_t n, double scale,
                                   double slope = 0.0, int64_t query = 0) {
  double most = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    scores[j] = scale * scores[j];
    if (slope != 0.0)
      scores[j] += slope * static_cast<double>(j - query);
    most = std::max(most, scores[j]);
  }
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j)
    sum += std::exp(scores[j] - most);
  return most + std::log(sum);
}

/// train.dropout's draw on the probabilities: score `index` is kept when
/// the Philox word at stream position `base + index` says so.
struct AttentionDropout {
  double rate = 0.0, keepScale = 1.0;
  uint64_t seed = 0, offset = 0, base = 0;
  uint32_t threshold = 0;
  /// A rank's heads of a tensor-parallel attention (Philox.h's
  /// splitDrawIndex): the elements of one block of its heads, the parts
  /// and this rank's position; block 0: the whole tensor.
  uint64_t splitBlock = 0, splitParts = 1, splitPosition = 0;

  /// Element `index` of this rank's draw in the whole tensor's.
  TRAINMEM_HD uint64_t wholeIndex(uint64_t index) const {
    return splitDrawIndex(index, splitBlock, splitParts, splitPosition);
  }

  /// No dropout for rate 0; `seed` already includes the step key, `base`
  /// is `first + part · part_elements`.
  static AttentionDropout make(double rate, uint64_t seed, uint64_t offset,
                               uint64_t base) {
    AttentionDropout d;
    if (!(rate > 0.0))
      return d;
    d.rate = rate;
    d.keepScale = 1.0 / (1.0 - rate);
    d.seed = seed;
    d.offset = offset;
    d.base = base;
    d.threshold = dropoutKeepThreshold(rate);
    return d;
  }
  TRAINMEM_HD bool keep(uint64_t index) const {
    return rate == 0.0 ||
           dropoutKeep(seed, offset, base + wholeIndex(index), threshold);
  }
  /// keep(first + j) for j < n into `kept`, drawing each Philox block of
  /// four words once (the same words keep() draws one at a time). A run is
  /// one row of keys, inside one split block (a block is whole heads).
  void keepRun(uint64_t first, int64_t n, uint8_t *kept) const {
    if (rate == 0.0) {
      for (int64_t j = 0; j < n; ++j)
        kept[j] = 1;
      return;
    }
    PhiloxKey key = {static_cast<uint32_t>(seed),
                     static_cast<uint32_t>(seed >> 32)};
    uint64_t begin = base + wholeIndex(first),
             end = begin + static_cast<uint64_t>(n);
    for (uint64_t block = begin / 4; block * 4 < end; ++block) {
      PhiloxCounter words = philox4x32_10(
          {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
           static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32)},
          key);
      for (uint64_t w = 0; w < 4; ++w) {
        uint64_t position = block * 4 + w;
        if (position >= begin && position < end)
          kept[position - begin] = (words[w] >> 8) < threshold;
      }
    }
  }
};

} // namespace trainmem

#endif // TRAINMEM_SUPPORT_ATTENTION_H
