/*===- Runtime.h - the trainmem runtime C ABI ----------------------------===*
 *
 * What compiled training steps call. Every tensor lives in one arena owned by
 * the context, at a byte offset the compiler's static memory plan chose;
 * kernels take offsets, element counts and shapes as 64-bit integers and the
 * context as their first argument. Token ids are i32 or i64 (`id_bits`);
 * dropout masks one byte per element.
 *
 * A float tensor is passed as a reference: its byte offset in the low 56
 * bits and its element type in the bits above (TMRT_DTYPE_*; f32 is 0, so
 * an f32 reference is its offset). bf16 and f16 tensors are stored in 16
 * bits; the kernels read them as f32, compute in f32 or double, and round
 * what they store to the nearest 16-bit value, ties to even. Operands of one
 * kernel share an element type unless its comment says otherwise (the
 * optimizers' gradients, cross-entropy's f32 loss, tmrt_convert).
 *
 * A context has a second arena for host memory (the optimizer state
 * train-offload-optimizer moved there), planned apart by the compiler: a
 * reference, or an offset given to tmrt_arena_write/read/copy/touch, with
 * TMRT_HOST_MEMORY set names a byte of the host arena. On the CPU backend
 * both arenas are host memory and any kernel reads either; a device backend
 * moves host memory only with tmrt_transfer (its kernels read the device).
 *
 * A kernel never aborts: a bad input (an id outside a table) is recorded in
 * the context and reported by tmrt_context_error() after the step.
 *
 *===----------------------------------------------------------------------===*/

#ifndef TRAINMEM_RUNTIME_RUNTIME_H
#define TRAINMEM_RUNTIME_RUNTIME_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tmrt_context tmrt_context;

#define TMRT_DTYPE_SHIFT 56
#define TMRT_DTYPE_F32 0
#define TMRT_DTYPE_BF16 1
#define TMRT_DTYPE_F16 2
/* The bit of a reference that names the host arena; offsets are below it. */
#define TMRT_HOST_MEMORY ((int64_t)1 << 55)
/* The reference of the tensor at byte `offset` with element type `dtype`. */
static inline int64_t tmrt_tensor_ref(int64_t offset, int64_t dtype) {
  return offset | (dtype << TMRT_DTYPE_SHIFT);
}

/* Context: a backend by name ("cpu", always built; "cuda" when built with
 * it), 1 to 1024 threads. Returns null and sets *error on failure (valid
 * until the calling thread's next failed create). Results do not depend on
 * the thread count. Every kernel below runs on the context's backend. */
tmrt_context *tmrt_context_create(const char *backend, int64_t threads,
                                  const char **error);
/* The same on device `device` of a backend that has devices (cuda); -1
 * lets the backend choose (cuda: TMRT_CUDA_DEVICE, else the process's rank
 * on its node under mpirun, one process per GPU, else device 0). A device
 * the machine lacks, or any device for a backend without devices (cpu),
 * is an error. */
tmrt_context *tmrt_context_create_on_device(const char *backend, int64_t device,
                                            int64_t threads,
                                            const char **error);
void tmrt_context_destroy(tmrt_context *ctx);
/* The name of the context's backend. */
const char *tmrt_context_backend(tmrt_context *ctx);
/* Whether a backend can be created: 1 built in, 0 known but not built
 * (cuda without CUDA), -1 unknown. */
int32_t tmrt_backend_status(const char *name);
/* The backends built in, comma-separated ("cpu"). */
const char *tmrt_backend_names(void);
/* The first error a kernel recorded since the last clear, or null. */
const char *tmrt_context_error(tmrt_context *ctx);
void tmrt_context_clear_error(tmrt_context *ctx);

/* Arena: allocated once; returns 0, or -1 when it cannot be allocated. */
int32_t tmrt_arena_alloc(tmrt_context *ctx, uint64_t bytes);
/* The host arena (TMRT_HOST_MEMORY references): host memory on every
 * backend, allocated once; 0, or -1 when it cannot be allocated. */
int32_t tmrt_host_arena_alloc(tmrt_context *ctx, uint64_t bytes);
uint64_t tmrt_host_arena_bytes(tmrt_context *ctx);
/* Highest host-arena byte written (+1): its measured peak. */
uint64_t tmrt_host_arena_high_water(tmrt_context *ctx);
/* Bytes tmrt_transfer moved between the arenas so far. */
uint64_t tmrt_transfer_bytes(tmrt_context *ctx);

/* Copies between host memory and an arena (the arena may be device memory;
 * TMRT_HOST_MEMORY in the offset: the host arena); a write marks the region
 * written. Return 0, or -1 for a range outside its arena. */
int32_t tmrt_arena_write(tmrt_context *ctx, uint64_t offset,
                         const void *source, uint64_t bytes);
int32_t tmrt_arena_read(tmrt_context *ctx, uint64_t offset, void *destination,
                        uint64_t bytes);
/* Copies bytes within an arena or between the two (the regions may
 * overlap); marks the destination written. */
int32_t tmrt_arena_copy(tmrt_context *ctx, uint64_t from, uint64_t to,
                        uint64_t bytes);
/* The arena's host address: only for a backend whose arena is host memory
 * (cpu); null otherwise. Prefer tmrt_arena_write/read. */
uint8_t *tmrt_arena_base(tmrt_context *ctx);
uint64_t tmrt_arena_bytes(tmrt_context *ctx);
/* Highest arena byte any kernel has written (+1): the measured peak. */
uint64_t tmrt_arena_high_water(tmrt_context *ctx);
/* Marks a region as written by the host (inputs, initial state). */
void tmrt_arena_touch(tmrt_context *ctx, uint64_t offset, uint64_t bytes);

/* Counters. */
uint64_t tmrt_kernel_calls(tmrt_context *ctx);
/* How the context runs bf16 GEMMs, in words: "cblas_sbgemm" when the
 * environment says TMRT_BF16_GEMM=sbgemm (bf16 products on AVX512_BF16
 * where the CPU has it; the sums' order, and so the bits, depend on the
 * CPU), else tiles widened to f32 and cblas_sgemm (the default: the same
 * bits on every CPU, as f32). f16 GEMMs always widen (OpenBLAS has no half
 * GEMM). */
const char *tmrt_bf16_gemm(tmrt_context *ctx);
/* The vector code of the 8-bit optimizer-state kernels (quantize,
 * dequantize, the fused 8-bit AdamW): "avx512-vbmi", "avx2" or "scalar",
 * the best the CPU has unless TMRT_NO_AVX512 or TMRT_NO_AVX2 is set; every
 * path gives the same bits. */
const char *tmrt_state8_kernels(tmrt_context *ctx);
/* 16-bit matmul calls so far that went through cblas_sbgemm (sbgemm = 1)
 * or through widened tiles (0). */
uint64_t tmrt_gemm16_calls(tmrt_context *ctx, int32_t sbgemm);

/* Kernel profile: with it on, each kernel call's wall time is added to its
 * kernel's total (a device backend synchronizes its stream after each call,
 * so the time is the kernel's, not its launch's). Off by default; turning
 * it on clears the totals. Kernels are numbered 0 to
 * tmrt_profile_kernels() - 1 in Kernels.def's order. */
void tmrt_profile_enable(tmrt_context *ctx, int32_t on);
int64_t tmrt_profile_kernels(void);
/* The kernel's name (Kernels.def's, without tmrt_), or null. */
const char *tmrt_profile_name(int64_t kernel);
uint64_t tmrt_profile_calls(tmrt_context *ctx, int64_t kernel);
double tmrt_profile_seconds(tmrt_context *ctx, int64_t kernel);
/* The profile by call: tmrt_profile_step_begin numbers the kernel calls
 * that follow from 0 (a step's calls, in program order); the seconds of
 * call i are summed over every step begun so far. */
void tmrt_profile_step_begin(tmrt_context *ctx);
int64_t tmrt_profile_step_calls(tmrt_context *ctx);
double tmrt_profile_call_seconds(tmrt_context *ctx, int64_t call);

/* Fills, copies and conversions. `out` of fill and both of copy may be of
 * any float element type (copy: the same one); convert reads `in` of one
 * and writes `out` of another, rounding to nearest even. */
void tmrt_fill(tmrt_context *ctx, int64_t out, int64_t n, double value);
void tmrt_fill_i64(tmrt_context *ctx, int64_t out, int64_t n, int64_t value);
void tmrt_iota(tmrt_context *ctx, int64_t out, int64_t n, int64_t id_bits);
void tmrt_copy(tmrt_context *ctx, int64_t in, int64_t out, int64_t n);
/* A context-parallel rank's rows of ids (train.context_slice): `in` is
 * [outer, rows, inner] integers of id_bits (32 or 64), `out` [outer,
 * rows / parts, inner] this rank's rows, the rank at place p = (rank /
 * stride) mod parts of its group taking rows [p·n, (p + 1)·n), or with
 * balanced chunks p and 2·parts - 1 - p of 2·parts
 * (trainmem/Support/ContextChunks.h). */
void tmrt_context_slice(tmrt_context *ctx, int64_t in, int64_t out,
                        int64_t outer, int64_t rows, int64_t inner,
                        int64_t id_bits, int64_t parts, int64_t stride,
                        int64_t balanced);
/* Copies `bytes` from reference `from` to reference `to`, the two in either
 * arena: how a step moves host memory (TMRT_HOST_MEMORY) to the device and
 * back (train-offload-optimizer's staging copies). Counted in
 * tmrt_transfer_bytes. */
void tmrt_transfer(tmrt_context *ctx, int64_t from, int64_t to, int64_t bytes);
/* An asynchronous tmrt_transfer (train.transfer with a
 * train.transfer_wait): the copy into `to` starts here and has finished
 * at tmrt_transfer_wait(to); the kernels in between may run beside it.
 * The CPU backend copies at the start; the CUDA backend copies on a side
 * stream (the host arena pinned) and makes its stream wait at the wait. */
void tmrt_transfer_start(tmrt_context *ctx, int64_t from, int64_t to,
                         int64_t bytes);
void tmrt_transfer_wait(tmrt_context *ctx, int64_t to);
/* A pipeline stage's exchange (train.pipeline_exchange): after
 * tmrt_exchange_begin, each tmrt_exchange_send (`bytes` at `in` to the rank
 * `peer` ranks from this one, with `tag`) and tmrt_exchange_recv (into
 * `out` from that rank, the message with `tag`) is noted; at
 * tmrt_exchange_end they all start together and it returns when every one
 * has arrived and left (MPI: tagged isend/irecv, watched for
 * TMRT_MPI_TIMEOUT seconds; CUDA: one NCCL group of send/recv). The bytes
 * count in tmrt_bytes_sent / tmrt_bytes_received. */
void tmrt_exchange_begin(tmrt_context *ctx);
void tmrt_exchange_send(tmrt_context *ctx, int64_t in, int64_t bytes,
                        int64_t peer, int64_t tag);
void tmrt_exchange_recv(tmrt_context *ctx, int64_t out, int64_t bytes,
                        int64_t peer, int64_t tag);
void tmrt_exchange_end(tmrt_context *ctx);
void tmrt_convert(tmrt_context *ctx, int64_t in, int64_t out, int64_t n);

/* Copies a strided view (rank <= 6, padded with size 1) into a row-major
 * buffer. */
void tmrt_copy_strided(tmrt_context *ctx, int64_t in, int64_t out,
                       int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                       int64_t d4, int64_t d5, int64_t s0, int64_t s1,
                       int64_t s2, int64_t s3, int64_t s4, int64_t s5);

/* The inverse: a row-major buffer [d0..d5] written into a strided view of
 * `out` (element strides s0..s5); the rest of `out` untouched
 * (train.slice_grad places a gradient into zeros). */
void tmrt_place_strided(tmrt_context *ctx, int64_t in, int64_t out, int64_t d0,
                        int64_t d1, int64_t d2, int64_t d3, int64_t d4,
                        int64_t d5, int64_t s0, int64_t s1, int64_t s2,
                        int64_t s3, int64_t s4, int64_t s5);

/* C[b] = op(A)[b] · op(B)[b] for up to 4 batch dims (c0..c3, padded with 1),
 * with per-dim batch strides of A and B in elements (0 where they
 * broadcast), and each matrix given by row and column strides. C is
 * row-major [M, N] per batch, batches contiguous. */
void tmrt_matmul(tmrt_context *ctx, int64_t a, int64_t b, int64_t c,
                 int64_t m, int64_t n, int64_t k, int64_t a_rs, int64_t a_cs,
                 int64_t b_rs, int64_t b_cs, int64_t c0, int64_t c1,
                 int64_t c2, int64_t c3, int64_t a0, int64_t a1, int64_t a2,
                 int64_t a3, int64_t b0, int64_t b1, int64_t b2, int64_t b3);

/* Elementwise. */
void tmrt_add(tmrt_context *ctx, int64_t a, int64_t b, int64_t out, int64_t n);
void tmrt_mul(tmrt_context *ctx, int64_t a, int64_t b, int64_t out, int64_t n);
void tmrt_scale(tmrt_context *ctx, int64_t in, int64_t out, int64_t n,
                double factor);
void tmrt_bias_add(tmrt_context *ctx, int64_t in, int64_t bias, int64_t out,
                   int64_t n, int64_t bias_n);
/* gelu(in + bias) and its gradient dy · gelu'(x + bias), the bias
 * broadcast over rows of bias_n, the sum rounded to the element type first:
 * the bits of tmrt_bias_add then tmrt_gelu (tmrt_gelu_grad). */
void tmrt_bias_gelu(tmrt_context *ctx, int64_t in, int64_t bias, int64_t out,
                    int64_t n, int64_t bias_n);
void tmrt_bias_gelu_grad(tmrt_context *ctx, int64_t dy, int64_t x, int64_t bias,
                         int64_t out, int64_t n, int64_t bias_n);
/* The activations of Activations.def: out = f(in) and out = dy · f'(x);
 * among them tmrt_gelu (GELU's tanh form) and tmrt_gelu_exact (0.5 x (1 +
 * erf(x / sqrt(2))), gradient dy · (Phi(x) + x phi(x)): train.gelu
 * {exact}). */
#define TMRT_ACTIVATION_KERNEL(kernel, Name) TMRT_ACTIVATION(kernel, Name)
#define TMRT_ACTIVATION(kernel, Name)                                          \
  void tmrt_##kernel(tmrt_context *ctx, int64_t in, int64_t out, int64_t n);   \
  void tmrt_##kernel##_grad(tmrt_context *ctx, int64_t dy, int64_t x,          \
                            int64_t out, int64_t n);
#include "trainmem-runtime/Activations.def"

/* Rows of the last dimension. */
void tmrt_layer_norm(tmrt_context *ctx, int64_t in, int64_t gamma,
                     int64_t beta, int64_t out, int64_t rows, int64_t cols,
                     double eps);
void tmrt_layer_norm_grad(tmrt_context *ctx, int64_t dy, int64_t x,
                          int64_t gamma, int64_t dx, int64_t dgamma,
                          int64_t dbeta, int64_t rows, int64_t cols,
                          double eps);
/* The scale is gamma + gain_offset (0; Gemma's norm: 1). */
void tmrt_rms_norm(tmrt_context *ctx, int64_t in, int64_t gamma, int64_t out,
                   int64_t rows, int64_t cols, double eps,
                   double gain_offset);
void tmrt_rms_norm_grad(tmrt_context *ctx, int64_t dy, int64_t x,
                        int64_t gamma, int64_t dx, int64_t dgamma,
                        int64_t rows, int64_t cols, double eps,
                        double gain_offset);
/* queries: size of the second-to-last dim (causal rows are row % queries).
 * alibi_slopes (null for none): one slope per head (heads of them); row
 * r's score c gets slope[(r / queries) % heads] * (c - r % queries) added
 * before the softmax (ALiBi). */
void tmrt_softmax(tmrt_context *ctx, int64_t in, int64_t out, int64_t rows,
                  int64_t cols, int64_t queries, int64_t causal, int64_t heads,
                  const double *alibi_slopes);
void tmrt_softmax_grad(tmrt_context *ctx, int64_t dy, int64_t y, int64_t out,
                       int64_t rows, int64_t cols);

/* Dropout on the Philox stream keyed by seed + key (key: offset of an i64
 * scalar, or -1 for none) at counter offset; see Support/Philox.h. Element
 * i draws at position first + rank * rank_elements + part * part_elements
 * + i in the stream (part: offset of an i64 scalar, or -1 for 0; rank: the
 * data rank, tmrt_rank / rank_stride, rank_stride the tensor-parallel
 * group's size or 1): its place in the whole global batch. A draw on
 * one rank's part of a tensor-parallel tensor (split_block > 0: the part's
 * elements from its split dimension on) draws its elements' positions in
 * the whole tensor, splitDrawIndex(i, split_block, split_parts, p) for i,
 * p = (tmrt_rank / split_stride) % split_parts the rank's part; 0, 1, 1
 * for a whole draw. With split_balanced (a context-parallel rank's
 * positions, train-context-parallel) the part is chunks p and
 * 2·split_parts - 1 - p of 2·split_parts, each split_block / 2. */
/* The layout, flags and dropout stream of a fused attention (the fields
 * of AttentionShape.def, each an int64_t): a descriptor the compiler places
 * as a constant, passed by address. */
typedef struct tmrt_attention_shape {
#define TMRT_ATTENTION_FIELD(name) int64_t name;
#include "trainmem-runtime/AttentionShape.def"
} tmrt_attention_shape;

/* Fused attention (train.attention): q [batch, heads, queries, dim], k and
 * v [batch, kv_heads, keys, dim|value_dim] read through element strides
 * (q0..q3: views of a projection are fine); out [batch, heads, queries,
 * value_dim], or [batch, queries, heads, value_dim] with transpose_output,
 * and lse [batch, heads, queries] (f32) written row-major. Query head h
 * reads key/value head h / (heads / kv_heads). Causal masks key j > query
 * i. Dropout (rate > 0) draws tmrt_dropout's mask for the score element
 * ((b·heads + h)·queries + i)·keys + j (with split_block > 0, a rank's
 * heads of a tensor-parallel attention: that element's place in the whole
 * tensor, as tmrt_dropout's split). alibi_slopes (null for none, host
 * memory): one per query head, score (h, i, j) gets slope[h] * (j - i)
 * after the scale (ALiBi). Sums in double, in a fixed order: the same bits
 * on any thread count. */
void tmrt_attention(tmrt_context *ctx, int64_t q, int64_t k, int64_t v,
                    int64_t out, int64_t lse, int64_t key, int64_t part,
                    double scale, double rate,
                    const tmrt_attention_shape *shape,
                    const double *alibi_slopes);
/* The gradients of tmrt_attention's q, k and v (dq, dk, dv row-major)
 * from the output's gradient dout (read through element strides g0..g3 of
 * its batch, head, query and value dimensions: a view is fine), q, k, v,
 * out and lse: the scores recomputed, the mask drawn again. */
void tmrt_attention_grad(tmrt_context *ctx, int64_t dout, int64_t q, int64_t k,
                         int64_t v, int64_t out, int64_t lse, int64_t dq,
                         int64_t dk, int64_t dv, int64_t key, int64_t part,
                         double scale, double rate,
                         const tmrt_attention_shape *shape,
                         const double *alibi_slopes);
void tmrt_dropout(tmrt_context *ctx, int64_t in, int64_t out, int64_t mask,
                  int64_t n, double rate, int64_t seed, int64_t offset,
                  int64_t key, int64_t first, int64_t part,
                  int64_t part_elements, int64_t rank_elements,
                  int64_t rank_stride, int64_t split_block, int64_t split_parts,
                  int64_t split_stride, int64_t split_balanced);
void tmrt_dropout_grad(tmrt_context *ctx, int64_t dy, int64_t mask,
                       int64_t out, int64_t n, double rate);
void tmrt_dropout_mask(tmrt_context *ctx, int64_t mask, int64_t n, double rate,
                       int64_t seed, int64_t offset, int64_t key, int64_t first,
                       int64_t part, int64_t part_elements,
                       int64_t rank_elements, int64_t rank_stride,
                       int64_t split_block, int64_t split_parts,
                       int64_t split_stride, int64_t split_balanced);

/* Rotary embedding of a rank-4 strided view [n0, n1, S, D] into a row-major
 * output: pairs (2i, 2i + 1), or (i, i + D/2) with halves; inverse rotates
 * by the negated angle. With context_parts > 1 the S rows are a
 * context-parallel rank's (tmrt_context_slice's rows of the whole
 * sequence), each rotated at its place in the whole. */
void tmrt_rope(tmrt_context *ctx, int64_t in, int64_t out, int64_t n0,
               int64_t n1, int64_t s, int64_t d, int64_t s0, int64_t s1,
               int64_t ss, int64_t sd, double theta, int64_t inverse,
               int64_t halves, int64_t context_parts, int64_t context_stride,
               int64_t context_balanced);

/* Embeddings. The table (its gradient) is this rank's `vocab` rows of
 * `split_parts · vocab`, from row ((rank / split_stride) mod split_parts)
 * · vocab of the whole (1 and 1: the whole table): ids outside them look
 * up zeros (add nothing); ids outside the whole table are errors. */
void tmrt_embedding(tmrt_context *ctx, int64_t table, int64_t ids, int64_t out,
                    int64_t num_ids, int64_t hidden, int64_t vocab,
                    int64_t id_bits, int64_t split_parts, int64_t split_stride);
void tmrt_embedding_grad(tmrt_context *ctx, int64_t dy, int64_t ids,
                         int64_t out, int64_t num_ids, int64_t hidden,
                         int64_t vocab, int64_t id_bits, int64_t split_parts,
                         int64_t split_stride);

/* Sums a row-major input of shape d0..d5 into an output read through
 * strides o0..o5 (0 on reduced dims). */
void tmrt_sum_to(tmrt_context *ctx, int64_t in, int64_t out, int64_t out_n,
                 int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t d4,
                 int64_t d5, int64_t o0, int64_t o1, int64_t o2, int64_t o3,
                 int64_t o4, int64_t o5);

/* Loss. count is an i64 scalar. label_smoothing ε: against
   (1 - ε) onehot(target) + ε / vocab (0: the plain cross-entropy). */
void tmrt_cross_entropy(tmrt_context *ctx, int64_t logits, int64_t targets,
                        int64_t loss_sum, int64_t count, int64_t rows,
                        int64_t vocab, int64_t ignore_index, int64_t id_bits,
                        double label_smoothing);
void tmrt_cross_entropy_grad(tmrt_context *ctx, int64_t dloss,
                             int64_t logits, int64_t targets, int64_t out,
                             int64_t rows, int64_t vocab, int64_t ignore_index,
                             int64_t id_bits, double label_smoothing);
/* Vocabulary parallelism (train.cross_entropy_part and _merge): the
 * logits are this rank's `vocab` columns of `split_parts · vocab`, at
 * column ((rank / split_stride) mod split_parts) · vocab of the whole (1
 * and 1: whole logits); max, sum_exp, target_logit and their gradients are
 * f32 per row. row_max: the maximum of each row of `cols`, in f32. */
void tmrt_row_max(tmrt_context *ctx, int64_t in, int64_t out, int64_t rows,
                  int64_t cols);
void tmrt_cross_entropy_part(tmrt_context *ctx, int64_t logits, int64_t targets,
                             int64_t max, int64_t sum_exp, int64_t target_logit,
                             int64_t rows, int64_t vocab, int64_t ignore_index,
                             int64_t id_bits, int64_t split_parts,
                             int64_t split_stride);
void tmrt_cross_entropy_part_grad(tmrt_context *ctx, int64_t d_sum_exp,
                                  int64_t d_target_logit, int64_t logits,
                                  int64_t max, int64_t targets, int64_t out,
                                  int64_t rows, int64_t vocab,
                                  int64_t ignore_index, int64_t id_bits,
                                  int64_t split_parts, int64_t split_stride);
void tmrt_cross_entropy_merge(tmrt_context *ctx, int64_t sum_exp,
                              int64_t target_logit, int64_t max,
                              int64_t targets, int64_t loss_sum, int64_t count,
                              int64_t rows, int64_t ignore_index,
                              int64_t id_bits);
void tmrt_cross_entropy_merge_grad(tmrt_context *ctx, int64_t dloss,
                                   int64_t sum_exp, int64_t targets,
                                   int64_t d_sum_exp, int64_t d_target_logit,
                                   int64_t rows, int64_t ignore_index,
                                   int64_t id_bits);
/* out = scale * weight * loss_sum / max(count, 1); weight: offset of an
 * f32 scalar, or -1 for 1. */
void tmrt_mean_loss(tmrt_context *ctx, int64_t loss_sum, int64_t count,
                    int64_t out, int64_t weight, double scale);
/* out (i64 scalar) = number of the n targets that are not ignore_index. */
void tmrt_count_valid(tmrt_context *ctx, int64_t targets, int64_t out,
                      int64_t n, int64_t ignore_index, int64_t id_bits);
/* Rows offset..offset+rows of a tensor of `available` rows of row_elems
 * elements each (element kind: 0 f32, 32 i32, 64 i64), rows past the end
 * filled with padding. */
void tmrt_slice_rows(tmrt_context *ctx, int64_t in, int64_t out,
                     int64_t offset, int64_t rows, int64_t available,
                     int64_t row_elems, int64_t kind, int64_t padding);

/* Optimizer (in place when out offsets equal in offsets). step: i64 scalar;
 * lr: f32 scalar. */
void tmrt_adamw(tmrt_context *ctx, int64_t param, int64_t grad, int64_t m,
                int64_t v, int64_t lr, int64_t step, int64_t new_param,
                int64_t new_m, int64_t new_v, int64_t n, double beta1,
                double beta2, double eps, double weight_decay);
/* Block-wise 8-bit dynamic quantization (Support/DynamicMap.h): codes are
 * one byte per element, absmax one f32 per block. */
void tmrt_quantize(tmrt_context *ctx, int64_t in, int64_t codes,
                   int64_t absmax, int64_t n, int64_t block,
                   int64_t is_signed);
void tmrt_dequantize(tmrt_context *ctx, int64_t codes, int64_t absmax,
                     int64_t out, int64_t n, int64_t block, int64_t is_signed);
/* AdamW on 8-bit m (signed map) and v (unsigned map), block by block; a
 * non-finite gradient element skips the whole tensor's update. */
void tmrt_adamw_8bit(tmrt_context *ctx, int64_t param, int64_t grad,
                     int64_t m_codes, int64_t m_absmax, int64_t v_codes,
                     int64_t v_absmax, int64_t lr, int64_t step,
                     int64_t new_param, int64_t new_m_codes,
                     int64_t new_m_absmax, int64_t new_v_codes,
                     int64_t new_v_absmax, int64_t n, int64_t block,
                     double beta1, double beta2, double eps,
                     double weight_decay);
/* SGD with momentum on an 8-bit buffer (signed map), block by block; a
 * non-finite gradient element skips the whole tensor's update. */
void tmrt_sgd_8bit(tmrt_context *ctx, int64_t param, int64_t grad,
                   int64_t codes, int64_t absmax, int64_t lr,
                   int64_t new_param, int64_t new_codes, int64_t new_absmax,
                   int64_t n, int64_t block, double momentum,
                   double weight_decay, int64_t nesterov);
/* The optimizers of Optimizers.def (Lion: trainmem/Support/AdamW.h,
 * LionStep): one f32 state m, or m on the signed 8-bit map, block by block;
 * a non-finite gradient element skips the whole tensor's update. */
#include "trainmem-runtime/ForEach.h"
#define TMRT_ONE_STATE_OPTIMIZER(kernel, Name, Step, parameters, arguments)    \
  void tmrt_##kernel(tmrt_context *ctx, int64_t param, int64_t grad,           \
                     int64_t m, int64_t lr, int64_t new_param, int64_t new_m,  \
                     int64_t n, TMRT_UNPAREN(parameters));                     \
  void tmrt_##kernel##_8bit(tmrt_context *ctx, int64_t param, int64_t grad,    \
                            int64_t m_codes, int64_t m_absmax, int64_t lr,     \
                            int64_t new_param, int64_t new_m_codes,            \
                            int64_t new_m_absmax, int64_t n, int64_t block,    \
                            TMRT_UNPAREN(parameters));
#include "trainmem-runtime/Optimizers.def"
/* SophiaG (trainmem/Support/AdamW.h, SophiaStep): m is updated, h read
 * and copied to new_h (nothing when in place); batch: the step's tokens. */
void tmrt_sophia(tmrt_context *ctx, int64_t param, int64_t grad, int64_t m,
                 int64_t h, int64_t lr, int64_t new_param, int64_t new_m,
                 int64_t new_h, int64_t n, int64_t batch, double beta1,
                 double rho, double eps, double weight_decay);
/* SophiaG on 8-bit m (signed map) and h (unsigned map), block by block. */
void tmrt_sophia_8bit(tmrt_context *ctx, int64_t param, int64_t grad,
                      int64_t m_codes, int64_t m_absmax, int64_t h_codes,
                      int64_t h_absmax, int64_t lr, int64_t new_param,
                      int64_t new_m_codes, int64_t new_m_absmax,
                      int64_t new_h_codes, int64_t new_h_absmax, int64_t n,
                      int64_t block, int64_t batch, double beta1, double rho,
                      double eps, double weight_decay);
/* Sophia's Hessian estimate: new_h = beta2 h + (1 - beta2) grad^2; a
 * non-finite gradient element leaves h as it is. */
void tmrt_hessian_ema(tmrt_context *ctx, int64_t h, int64_t grad, int64_t new_h,
                      int64_t n, double beta2);
/* One class per row of `classes` logits drawn from their softmax
 * (trainmem/Support/Sample.h) with the Philox stream of (seed + the i64 at
 * `key`, offset), word `row`; key < 0: none. Labels are id_bits wide. */
void tmrt_sample(tmrt_context *ctx, int64_t logits, int64_t key, int64_t labels,
                 int64_t rows, int64_t classes, int64_t seed, int64_t offset,
                 int64_t id_bits);
/* buffer < 0: no momentum buffer. */
void tmrt_sgd(tmrt_context *ctx, int64_t param, int64_t grad, int64_t lr,
              int64_t buffer, int64_t new_param, int64_t new_buffer,
              int64_t n, double momentum, double weight_decay,
              int64_t nesterov);
/* Global-norm clipping in three calls: accumulate Σg² over every gradient
 * (exactly: the norm does not depend on the order of the terms), finish
 * (writes the norm), then scale each gradient. */
void tmrt_clip_begin(tmrt_context *ctx);
void tmrt_clip_accumulate(tmrt_context *ctx, int64_t grad, int64_t n);
/// The sum of squares accumulated since tmrt_clip_begin, exactly, as the
/// 24 i64 words at `out` (train.squared_norm; trainmem/Support/ExactSum.h).
void tmrt_clip_store_sum(tmrt_context *ctx, int64_t out);
/// Takes the sum of squares from the 24 i64 words at `sum` instead (the
/// ranks' summed exact sums, train.clip_grad_norm ... squared_norm(...)).
void tmrt_clip_load_sum(tmrt_context *ctx, int64_t sum);
/// Adds the 24 i64 words at `sum` to the loaded ones (a norm whose parts
/// are summed over different groups: a tensor-parallel step's split
/// gradients over their group, its whole ones once).
void tmrt_clip_merge_sum(tmrt_context *ctx, int64_t sum);
void tmrt_clip_finish(tmrt_context *ctx, int64_t norm, double max_norm);
void tmrt_clip_apply(tmrt_context *ctx, int64_t grad, int64_t out, int64_t n);
void tmrt_lr_schedule(tmrt_context *ctx, int64_t step, int64_t out,
                      double peak_lr, double min_lr, int64_t warmup_steps,
                      int64_t total_steps);

/* Dynamic loss scaling (train.loss_scale, train.unscale_gradients).
 * `state` is i64[3]: [log2(scale / initial), clean steps, skipped steps].
 * loss_scale writes the f32 scale initial · 2^state[0] to `out`.
 * finite_begin, then finite_check on every gradient, records whether all
 * are finite; unscale writes grad / scale (f32 `out`), or NaN everywhere
 * when one was not; loss_scale_update then writes the new state: halved
 * scale and one more skipped step after an overflow, doubled after
 * `growth_interval` clean steps. */
void tmrt_loss_scale(tmrt_context *ctx, int64_t state, int64_t out,
                     double initial);
void tmrt_finite_begin(tmrt_context *ctx);
void tmrt_finite_check(tmrt_context *ctx, int64_t grad, int64_t n);
/* A partitioned step: the ranks' summed exact squared norm (kExactSumWords
 * i64 at `sum`) counts as a gradient: not finite when any rank overflowed. */
void tmrt_finite_check_sum(tmrt_context *ctx, int64_t sum);
void tmrt_unscale(tmrt_context *ctx, int64_t grad, int64_t out, int64_t n,
                  int64_t state, double initial);
void tmrt_loss_scale_update(tmrt_context *ctx, int64_t state,
                            int64_t new_state, int64_t growth_interval);
/* Optimizer updates skipped since the last clear because their gradient was
 * not finite (tmrt_adamw, tmrt_sgd, tmrt_lion and the 8-bit ones leave such a
 * tensor as it is), and the arena offset of the parameter of the i-th of them
 * (the first 64 are kept; with TMRT_HOST_MEMORY for one in the host arena). */
uint64_t tmrt_skipped_updates(tmrt_context *ctx);
int64_t tmrt_skipped_update_param(tmrt_context *ctx, uint64_t i);
void tmrt_clear_skipped_updates(tmrt_context *ctx);

/* Collectives, through the context's communicator: "single" (one process,
 * the default) or "mpi" (one rank per process under mpirun, built when MPI
 * is found). Rings over the communicator's send-receive, in a fixed order:
 * the same bits on every run with the same ranks. f32, bf16 or f16
 * buffers (input and result of one type; 16-bit ones travel in 16 bits
 * and are summed in f32 at each hop); `n` is the elements of the buffer (all-reduce) or of one rank's
 * shard (the rest); in == out works in place (a reduce-scatter leaves the
 * rank's shard at the start of the buffer). A communication failure is the
 * context's error (tmrt_context_error). */
int64_t tmrt_world_size(tmrt_context *ctx);
int64_t tmrt_rank(tmrt_context *ctx);
/* Selects the communicator by name; 0 on success, else -1 and *error. */
int tmrt_context_set_communicator(tmrt_context *ctx, const char *name,
                                  const char **error);
const char *tmrt_communicator_name(tmrt_context *ctx);
/* The communicators built in, comma-separated ("single, mpi"). */
const char *tmrt_communicator_names(void);
/* Ends every rank's process with `code` (MPI_Abort): a rank that fails
 * calls it so that no other waits for it; one process: nothing. */
void tmrt_abort(tmrt_context *ctx, int code);
/* Bytes this rank has sent and received through collectives. */
uint64_t tmrt_bytes_sent(tmrt_context *ctx);
uint64_t tmrt_bytes_received(tmrt_context *ctx);
/* Bytes this rank has sent in the process group of `group_size` ranks
 * `group_stride` apart (the collectives' last two arguments). */
uint64_t tmrt_group_bytes_sent(tmrt_context *ctx, int64_t group_size,
                               int64_t group_stride);
/* The collectives run in this rank's process group of `group_size` ranks
 * `group_stride` apart in the world (an axis of a row-major grid of ranks;
 * the world: its size and 1). An all-reduce's `reduction` is one of: */
enum {
  TMRT_REDUCE_SUM = 0,
  TMRT_REDUCE_AVERAGE = 1, /* the sum divided by the group's ranks */
  TMRT_REDUCE_MAX = 2
};
void tmrt_all_reduce(tmrt_context *ctx, int64_t in, int64_t out, int64_t n,
                     int64_t reduction, int64_t group_size,
                     int64_t group_stride);
void tmrt_all_reduce_i64(tmrt_context *ctx, int64_t in, int64_t out, int64_t n,
                         int64_t group_size, int64_t group_stride);
/* The sharded ones take `outer`: the whole buffer is `outer` equal blocks,
 * each holding every rank's run of n / outer elements in rank order (a
 * split along a dimension with `outer` elements before it; 1: each shard
 * is one contiguous run). */
void tmrt_reduce_scatter(tmrt_context *ctx, int64_t in, int64_t out, int64_t n,
                         int64_t average, int64_t outer, int64_t group_size,
                         int64_t group_stride);
void tmrt_all_gather(tmrt_context *ctx, int64_t in, int64_t out, int64_t n,
                     int64_t outer, int64_t group_size, int64_t group_stride);
void tmrt_all_slice(tmrt_context *ctx, int64_t in, int64_t out, int64_t n,
                    int64_t outer, int64_t group_size, int64_t group_stride);
void tmrt_broadcast(tmrt_context *ctx, int64_t buffer, int64_t n,
                        int64_t root);
void tmrt_barrier(tmrt_context *ctx);
/* Host values summed over the ranks, in rank order, the same on every rank
 * (a run's loss, for its mean): not a step's communication, not counted.
 * 0, or -1 with the context's error. */
int tmrt_host_sum_f64(tmrt_context *ctx, double *values, int64_t n);
/* The same in f32, ((v0 + v1) + v2) + ...: the ranks' losses added as one
 * process adds its micro-batches' (train.accumulate), for their mean. */
int tmrt_host_sum_f32(tmrt_context *ctx, float *values, int64_t n);

#ifdef __cplusplus
}
#endif

#endif /* TRAINMEM_RUNTIME_RUNTIME_H */
