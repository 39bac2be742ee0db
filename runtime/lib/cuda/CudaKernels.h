//===- CudaKernels.h - the kernels of the CUDA table ------------*- C++ -*-===//
//
// The kernels of Kernels.def that CudaState.cu, CudaAttention.cu and
// CudaCollectives.cu define, for the table in CudaBackend.cu: declared from
// Kernels.def's own parameter lists, so a prototype cannot drift from it.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_RUNTIME_CUDA_CUDAKERNELS_H
#define TRAINMEM_RUNTIME_CUDA_CUDAKERNELS_H

#include "CudaCommon.h"

namespace tmrt {
namespace cuda {

// Every kernel of Kernels.def as tmrt::cuda::<name>; the table names the
// ones built for CUDA (an undefined one fails to link, not to run).
#define TMRT_KERNEL(name, parameters, arguments) void name parameters;
#include "trainmem-runtime/Kernels.def"

/// Ends the context's NCCL communicator, if it has one (CudaCollectives.cu).
void closeNccl(CudaState &state);
/// Loads NCCL and finds every call the collectives make, without making a
/// communicator (no device needed); what it found or lacks in `report`.
bool loadNccl(std::string &report);

} // namespace cuda
} // namespace tmrt

#endif // TRAINMEM_RUNTIME_CUDA_CUDAKERNELS_H
