#include "plan/matmul_work.h"

#include <algorithm>
#include <cstdint>

#include "plan/gpu_claims.h"
#include "rlx/error.h"

namespace rlx::plan {

std::pair<int64_t, int64_t> k_splits(int64_t tiles, int64_t k, int64_t quantum, int64_t target) {
  if (tiles >= target) return {1, k};
  int64_t splits = std::min<int64_t>((target + tiles - 1) / tiles, (k + quantum - 1) / quantum);
  const int64_t kchunk = ((k + splits - 1) / splits + quantum - 1) / quantum * quantum;
  splits = (k + kchunk - 1) / kchunk;
  return {splits, kchunk};
}

void check_matmul_index(const TensorRef& r, const std::string& what, const char* which, std::string_view backend) {
  if (r.numel() >= (int64_t{1} << 31))
    throw Error(what + ": the " + std::string(backend) + " matmul kernels index with 32 bits; " + which + " has " +
                std::to_string(r.numel()) +
                " elements (2^31 or more): split the product or run it on the CPU or CUDA backend");
}

void check_grouped_matmul(const Step& st, std::string_view backend) {
  const std::string what = step_node_label(st);
  const auto& g = std::get<GroupedMatMulGeom>(st.geom);
  check_matmul_index(st.in.at(0), what, "x", backend);
  check_matmul_index(st.in.at(1), what, "w", backend);
  check_matmul_index(st.out.at(0), what, "the result", backend);
  if (g.experts > INT32_MAX) throw Error(what + ": more than 2^31 experts");
}

MatmulOperands matmul_operands(const Step& st, std::string_view backend) {
  const std::string be(backend);
  const std::string what = step_node_label(st);
  MatmulOperands m;
  m.fused = std::get_if<ops::FusedMatMulBiasAct>(&st.op);
  if (!m.fused && !std::holds_alternative<ops::MatMul>(st.op))
    throw Error(what + ": the " + be + " backend has no kernel for this op (it should have been legalized)");
  const auto& g = std::get<MatMulGeom>(st.geom);
  const TensorRef& c = st.out.at(0);
  for (const TensorRef& r : st.in)
    if (r.dtype != c.dtype) throw Error(what + ": " + be + " matmul needs every operand in the result's dtype");
  if (!matmul_product_dtype(c.dtype))
    throw Error(what + ": " + be + " matmul: " + dtype_name(c.dtype) + " products are not supported (floats and integers only)");
  check_matmul_index(st.in.at(0), what, "A", backend);
  check_matmul_index(st.in.at(1), what, "B", backend);
  check_matmul_index(c, what, "the result", backend);
  if (m.fused) {
    if (m.fused->has_bias(st.in.size())) {
      m.bias = &st.in.at(2);
      m.bias_len = g.bias_len;
      if (m.bias_len != 1 && m.bias_len != g.n)
        throw Error(what + ": the bias has " + std::to_string(m.bias_len) + " elements, expected 1 or " +
                    std::to_string(g.n) + " (one per column)");
    }
    if (m.fused->residual) {
      m.residual = &st.in.back();
      if (m.residual->numel() != c.numel())
        throw Error(what + ": the residual has " + std::to_string(m.residual->numel()) + " elements, expected " +
                    std::to_string(c.numel()));
    }
  }
  return m;
}

}  // namespace rlx::plan
