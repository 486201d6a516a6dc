#pragma once
// Lowerings of the select op family of the CUDA backend (select_ops.cpp dispatches to them):
// lower_select.cpp (ArgMax/ArgMin, TopK, Sample), lower_scan.cpp (Cumsum), lower_random.cpp
// (RngUniform/RngNormal), lower_scatter.cpp (ScatterAdd, GroupedMatMul), lower_cache.cpp (CacheWrite).
#include <memory>
#include <string>

#include "backends/cuda/launch.h"
#include "backends/cuda/lower.h"
#include "codegen/language.h"

namespace rlx::cuda {

// Codes these kernels write to the device error flag: the shared ones of codegen/language.h.
using codegen::kErrExpertIndex;
using codegen::kErrSampleAllNegInf;
using codegen::kErrSampleNaN;
using codegen::kErrScatterIndex;

void lower_arg_reduce(LowerContext& cx, const plan::Step& st);
void lower_topk(LowerContext& cx, const plan::Step& st);
void lower_sample(LowerContext& cx, const plan::Step& st);
void lower_cumsum(LowerContext& cx, const plan::Step& st);
void lower_rng(LowerContext& cx, const plan::Step& st);
void lower_scatter_add(LowerContext& cx, const plan::Step& st);
void lower_grouped_matmul(LowerContext& cx, const plan::Step& st);
void lower_cache_write(LowerContext& cx, const plan::Step& st);

// Largest TopK k the CUDA kernel takes (its winners are sorted in shared memory).
inline constexpr int64_t kCudaTopKMax = 1024;

inline void push_launch(LowerContext& cx, std::shared_ptr<KernelLaunch> l) {
  cx.add([l](cudaStream_t s) { l->launch(s); });
}

}  // namespace rlx::cuda
