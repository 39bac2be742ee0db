//===- Collectives.h - the CPU backend's collectives ------------*- C++ -*-===//
//
// The kernels of Kernels.def's collectives for the CPU backend: rings over
// the context's communicator (Collectives.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_RUNTIME_CPU_COLLECTIVES_H
#define TRAINMEM_RUNTIME_CPU_COLLECTIVES_H

#include "trainmem-runtime/Runtime.h"

namespace tmrt {
namespace cpu {

void all_reduce(tmrt_context *ctx, int64_t in, int64_t out, int64_t n,
                int64_t reduction, int64_t group_size, int64_t group_stride);
void all_reduce_i64(tmrt_context *ctx, int64_t in, int64_t out, int64_t n,
                    int64_t group_size, int64_t group_stride);
void reduce_scatter(tmrt_context *ctx, int64_t in, int64_t out, int64_t n,
                    int64_t average, int64_t outer, int64_t group_size,
                    int64_t group_stride);
void all_gather(tmrt_context *ctx, int64_t in, int64_t out, int64_t n,
                int64_t outer, int64_t group_size, int64_t group_stride);
void all_slice(tmrt_context *ctx, int64_t in, int64_t out, int64_t n,
               int64_t outer, int64_t group_size, int64_t group_stride);
void broadcast(tmrt_context *ctx, int64_t buffer, int64_t n, int64_t root);
void barrier(tmrt_context *ctx);

} // namespace cpu
} // namespace tmrt

#endif // TRAINMEM_RUNTIME_CPU_COLLECTIVES_H
