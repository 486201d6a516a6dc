#pragma once
// One straight-line CUDA kernel per elementwise chain (Binary, Compare, Where, Activation, Cast,
// ElementwiseRegion) and output geometry, from the shared kernel plan and its CUDA printer
// (codegen/elementwise.h): the output's coalesced dims and each input's broadcast strides are
// compile-time constants of the kernel; when every input is contiguous or a scalar the kernel
// moves `vec` elements per thread with vector loads and stores.
#include <cstdint>
#include <string>
#include <vector>

#include "codegen/language.h"
#include "plan/schedule.h"
#include "rlx/ops.h"

namespace rlx::cuda {

struct ElementwiseKernel {
  std::string entry, source;
  int vec = 1;          // elements per thread (vector width)
  int64_t items = 0;    // threads' work items (numel / vec)
  bool error_flag = false;  // the kernel takes the run's error flag last (integer Div/Mod/FMod/Pow)
  bool early_dependents = false;  // lets the next kernel launch before its own wait
};

// Codes the elementwise kernels write to the run's error flag, and their rlx::Error text ("" for
// any other code).
using codegen::kErrIntDivZero;
using codegen::kErrIntPowZero;
std::string elementwise_error_message(int code);

// The op of a single elementwise node as a one-step chain over inputs 0..n-1.
std::vector<RegionStep> single_step_chain(const Op& op);

// True when the chain has a CUDA implementation for these input dtypes (every dtype; f64 computes
// in double, f16/bf16 in f32).
bool elementwise_supported(const std::vector<RegionStep>& steps, const std::vector<DType>& in_dtypes,
                           std::string* why = nullptr);

// The f32 expression of activation `k` applied to the f32 expression `x` (for fused epilogues).
std::string float_activation_expr(ActKind k, const std::string& x);

// `max_vec`: the largest vector width the operands' alignment allows (1, 2, 4, 8 elements).
// A kernel of at most `early_max_items` work items (0: none) lets the next kernel of the stream
// launch before its own programmatic-launch wait instead of after it, and says so in
// `early_dependents` (see add_elementwise).
ElementwiseKernel make_elementwise_kernel(const std::vector<RegionStep>& steps, const std::vector<DType>& in_dtypes,
                                          DType out_dtype, const plan::ElementwiseGeom& geom, int max_vec,
                                          int64_t early_max_items = 0);

}  // namespace rlx::cuda
