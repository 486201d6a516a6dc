// The select op family of the CUDA backend (see lower.h): ArgMax/ArgMin, TopK, Sample, Cumsum,
// ScatterAdd, RngUniform/RngNormal and GroupedMatMul: which nodes run natively, and the
// dispatch of their steps to the lowerings of select_lower.h.
#include <set>

#include "backends/cuda/cuda_types.h"
#include "backends/cuda/select_lower.h"
#include "rlx/error.h"

namespace rlx::cuda {
namespace {

bool fail(std::string* why, const std::string& msg) {
  if (why) *why = msg;
  return false;
}

bool is_integer(DType t) { return !cuda_float(t) && t != DType::Bool && t != DType::F64; }

// Row lengths whose indices fit the 32-bit index words of the TopK / Sample kernels.
constexpr int64_t kMaxRow = int64_t{1} << 31;

}  // namespace

bool claims_kind_select(std::string_view name) {
  static const std::set<std::string_view> kinds = {"argmax", "argmin",      "topk",        "sample",
                                                   "cumsum", "scatter_add", "rng_uniform", "rng_normal",
                                                   "grouped_matmul", "cache_write"};
  return kinds.count(name) > 0;
}

bool claims_node_select(const Graph& g, const Node& n, std::string* why) {
  const auto in = [&](size_t i) -> const Shape& { return g.shape(n.inputs.at(i)); };
  const auto offset_ok = [&](size_t i) { return n.inputs.size() <= i || in(i).dtype == DType::I64; };
  return std::visit(
      [&]<class T>(const T& op) -> bool {
        if constexpr (std::is_same_v<T, ops::ArgMax> || std::is_same_v<T, ops::ArgMin>) {
          (void)op;
          return true;  // every dtype (f64 compared in double)
        } else if constexpr (std::is_same_v<T, ops::TopK>) {
          if (op.k > kCudaTopKMax)
            return fail(why, "CUDA topk supports k <= " + std::to_string(kCudaTopKMax) + " (got k = " +
                                 std::to_string(op.k) + ")");
          const Shape& x = in(0);
          const int64_t axis = normalize_axis(op.axis, x.rank(), "topk axis");
          if (x.dims.at(static_cast<size_t>(axis)).is_static() && x.dims[static_cast<size_t>(axis)].value >= kMaxRow)
            return fail(why, "CUDA topk supports axes shorter than 2^31 elements");
          return true;
        } else if constexpr (std::is_same_v<T, ops::Sample>) {
          (void)op;
          if (!cuda_float(in(0).dtype)) return fail(why, "CUDA sample needs f32/f16/bf16 logits");
          const Dim& v = in(0).dims.back();
          if (v.is_static() && v.value >= kMaxRow) return fail(why, "CUDA sample supports vocabularies below 2^31");
          return offset_ok(1) ? true : fail(why, "CUDA sample needs an i64 offset");
        } else if constexpr (std::is_same_v<T, ops::Cumsum>) {
          (void)op;
          return in(0).dtype != DType::Bool ? true : fail(why, "cumsum does not take bool input");
        } else if constexpr (std::is_same_v<T, ops::ScatterAdd>) {
          (void)op;
          if (in(0).dtype == DType::Bool) return fail(why, "scatter_add does not take bool data");
          if (in(2).dtype != in(0).dtype) return fail(why, "CUDA scatter_add needs updates in data's dtype");
          return is_integer(in(1).dtype) ? true : fail(why, "scatter_add needs integer indices");
        } else if constexpr (std::is_same_v<T, ops::CacheWrite>) {
          (void)op;
          if (in(1).dtype != in(0).dtype) return fail(why, "CUDA cache_write needs rows of the cache's dtype");
          return in(2).dtype == DType::I32 || in(2).dtype == DType::I64
                     ? true
                     : fail(why, "CUDA cache_write takes i32 or i64 positions");
        } else if constexpr (std::is_same_v<T, ops::RngUniform> || std::is_same_v<T, ops::RngNormal>) {
          (void)op;
          if (!cuda_float(n.outputs.at(0).dtype)) return fail(why, "CUDA random ops produce f32/f16/bf16");
          return offset_ok(0) ? true : fail(why, "CUDA random ops need an i64 offset");
        } else if constexpr (std::is_same_v<T, ops::GroupedMatMul>) {
          (void)op;
          if (!cuda_float(in(0).dtype) || in(1).dtype != in(0).dtype)
            return fail(why, "CUDA grouped_matmul needs x and w of one dtype among f32/f16/bf16");
          return is_integer(in(2).dtype) ? true : fail(why, "grouped_matmul needs integer expert indices");
        } else {
          (void)op;
          return fail(why, "not an op of the CUDA select family");
        }
      },
      n.op);
}

bool lower_select_family(LowerContext& cx, const plan::Step& st) {
  const Op& op = st.op;
  if (std::holds_alternative<ops::ArgMax>(op) || std::holds_alternative<ops::ArgMin>(op)) {
    lower_arg_reduce(cx, st);
  } else if (std::holds_alternative<ops::TopK>(op)) {
    lower_topk(cx, st);
  } else if (std::holds_alternative<ops::Sample>(op)) {
    lower_sample(cx, st);
  } else if (std::holds_alternative<ops::Cumsum>(op)) {
    lower_cumsum(cx, st);
  } else if (std::holds_alternative<ops::RngUniform>(op) || std::holds_alternative<ops::RngNormal>(op)) {
    lower_rng(cx, st);
  } else if (std::holds_alternative<ops::ScatterAdd>(op)) {
    lower_scatter_add(cx, st);
  } else if (std::holds_alternative<ops::GroupedMatMul>(op)) {
    lower_grouped_matmul(cx, st);
  } else if (std::holds_alternative<ops::CacheWrite>(op)) {
    lower_cache_write(cx, st);
  } else {
    return false;
  }
  return true;
}

}  // namespace rlx::cuda
