#pragma once
// The backend-neutral checks of a MatMul / FusedMatMulBiasAct step that the shader-language GPU
// backends share before they pick a kernel: op kind, operand dtypes, 32-bit indexing, and the
// fused epilogue's bias and residual operands.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "plan/schedule.h"

namespace rlx::plan {

// Splits of K (each a multiple of `quantum` long) giving about `target` workgroups over `tiles`
// tiles of the result: {splits, kchunk}, {1, k} when the tiles alone reach the target.
std::pair<int64_t, int64_t> k_splits(int64_t tiles, int64_t k, int64_t quantum, int64_t target);

// The fused epilogue's operands of a matmul step (all null / 0 for a plain MatMul).
struct MatmulOperands {
  const ops::FusedMatMulBiasAct* fused = nullptr;
  const TensorRef* bias = nullptr;  // in[2] when the fused op has a bias
  int64_t bias_len = 0;             // its elements: 1 or n
  const TensorRef* residual = nullptr;  // in.back() when the fused op adds a residual
};

// Throws rlx::Error starting with `what` when `r` has 2^31 elements or more (the `backend`'s
// matmul kernels index with 32 bits); `which` names the operand.
void check_matmul_index(const TensorRef& r, const std::string& what, const char* which, std::string_view backend);

// Checks GroupedMatMul step `st` (geometry GroupedMatMulGeom): x, w and the result below 2^31
// elements, fewer than 2^31 experts; rlx::Error naming the node otherwise.
void check_grouped_matmul(const Step& st, std::string_view backend);

// Checks MatMul / FusedMatMulBiasAct step `st` (geometry MatMulGeom) and returns its epilogue
// operands. Throws rlx::Error naming the node, in this order: another op kind, an operand not in
// the result's dtype, a dtype that is no float or integer, an operand of 2^31 elements or more, a
// bias of neither 1 nor n elements, a residual of another size than the result. `backend`
// ("Vulkan") names who refuses.
MatmulOperands matmul_operands(const Step& st, std::string_view backend);

}  // namespace rlx::plan
