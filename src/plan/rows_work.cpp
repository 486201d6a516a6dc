#include "plan/rows_work.h"

#include <type_traits>

#include "plan/gpu_claims.h"
#include "rlx/error.h"

namespace rlx::plan {
uint32_t rows_u32(int64_t v, const std::string& what, std::string_view backend) {
  if (v < 0 || v >= (int64_t{1} << 31))
    throw Error(what + ": the " + std::string(backend) + " rows kernels index with 32 bits; a size of " +
                std::to_string(v) + " (2^31 or more) does not fit: use the CPU or CUDA backend for tensors this large");
  return static_cast<uint32_t>(v);
}

ReduceWalk reduce_walk(const Step& st, std::string_view backend) {
  const std::string what = step_node_label(st);
  const auto& g = std::get<ReduceGeom>(st.geom);
  const DType t = st.in.at(0).dtype;
  const bool minmax = g.kind == ReduceKind::Max || g.kind == ReduceKind::Min;
  if (g.count == 0 && (minmax || (g.kind == ReduceKind::Mean && !is_float(t))))
    throw Error(what + ": " + enum_name(g.kind) + " reduces zero elements (an empty reduced axis); only sum, prod " +
                "and float mean allow that");
  ReduceWalk w;
  auto &kd = w.kept_dims, &ks = w.kept_strides, &rd = w.reduced_dims, &rs = w.reduced_strides;
  int64_t stride = 1;
  for (size_t d = g.dims.size(); d-- > 0;) {
    (g.reduced[d] ? rd : kd).insert((g.reduced[d] ? rd : kd).begin(), rows_u32(g.dims[d], what, backend));
    (g.reduced[d] ? rs : ks).insert((g.reduced[d] ? rs : ks).begin(), rows_u32(stride, what, backend));
    stride *= g.dims[d];
  }
  if (kd.size() > 4 || rd.size() > 4)
    throw Error(what + ": the " + std::string(backend) + " reduce walks at most 4 kept and 4 reduced axis groups; " +
                "this one has " + std::to_string(kd.size()) + " and " + std::to_string(rd.size()));
  w.row_first = g.dims.empty() || g.reduced.back() || kd.empty();
  w.outputs = rows_u32(st.out.at(0).numel(), what, backend);
  w.count = rows_u32(g.count, what, backend);
  return w;
}

RowsWork rows_work(const Step& st, std::string_view backend) {
  return std::visit(
      [&]<class T>(const T& op) -> RowsWork {
        if constexpr (std::is_same_v<T, ops::Reduce>) {
          return ReduceWork{};
        } else if constexpr (std::is_same_v<T, ops::Softmax> || std::is_same_v<T, ops::LogSoftmax>) {
          return SoftmaxWork{std::is_same_v<T, ops::LogSoftmax>};
        } else if constexpr (std::is_same_v<T, ops::LayerNorm> || std::is_same_v<T, ops::RmsNorm>) {
          const auto& g = std::get<AxisGeom>(st.geom);
          NormWork n;
          n.rms = std::is_same_v<T, ops::RmsNorm>;
          n.beta = st.in.size() > 2;
          n.eps = op.eps, n.rows = g.outer, n.len = g.axis;
          return n;
        } else if constexpr (std::is_same_v<T, ops::FusedResidualLN> || std::is_same_v<T, ops::FusedResidualRmsNorm>) {
          const auto& g = std::get<AxisGeom>(st.geom);
          if (op.has_bias != (st.in.size() > 3))
            throw Error(step_node_label(st) + ": has_bias does not agree with the presence of the beta input");
          NormWork n;
          n.rms = std::is_same_v<T, ops::FusedResidualRmsNorm>;
          n.res = true, n.beta = op.has_bias;
          n.eps = op.eps, n.rows = g.outer, n.len = g.axis;
          return n;
        } else if constexpr (std::is_same_v<T, ops::GroupNorm>) {
          const auto& g = std::get<ChannelGeom>(st.geom);
          if (g.groups <= 0 || g.channels % g.groups != 0)
            throw Error(step_node_label(st) + ": groups=" + std::to_string(g.groups) + " does not divide C=" +
                        std::to_string(g.channels));
          NormWork n;
          n.beta = true;
          n.eps = op.eps;
          n.rows = g.n * g.groups;
          n.len = g.channels / g.groups * g.spatial;
          n.gmod = g.groups, n.gmul = g.channels / g.groups, n.gdiv = g.spatial;
          return n;
        } else if constexpr (std::is_same_v<T, ops::FusedSwiGLU>) {
          return SwiGLUWork{op.gate_first};
        } else {
          (void)op;
          throw Error(step_node_label(st) + ": the " + std::string(backend) +
                      " backend has no rows kernel for this op (it should have been legalized)");
        }
      },
      st.op);
}

bool rows_claims_kind(std::string_view name) {
  return name == "reduce" || name == "softmax" || name == "log_softmax" || name == "layer_norm" ||
         name == "rms_norm" || name == "fused_residual_ln" || name == "fused_residual_rms_norm" ||
         name == "fused_swiglu" || name == "group_norm";
}

bool rows_claims_dtypes_agree(const Graph& g, const Node& n, std::string_view backend, std::string* why) {
  const std::string name = op_name(n.op);
  const DType t = g.shape(n.inputs.at(0)).dtype;
  for (const Value& v : n.inputs)
    if (g.shape(v).dtype != t)
      return claim_refuse(why, std::string(backend) + " " + name + " needs all its operands in one dtype");
  for (const Shape& s : n.outputs)
    if (s.dtype != t)
      return claim_refuse(why, std::string(backend) + " " + name + " needs its output in its input's dtype");
  return true;
}

bool rows_claims_attributes(const Graph& g, const Node& n, std::string* why) {
  if (const auto* f = std::get_if<ops::FusedResidualLN>(&n.op); f && f->has_bias != (n.inputs.size() > 3))
    return claim_refuse(why, "fused_residual_ln: has_bias does not agree with the presence of the beta input");
  if (const auto* f = std::get_if<ops::FusedResidualRmsNorm>(&n.op); f && f->has_bias != (n.inputs.size() > 3))
    return claim_refuse(why, "fused_residual_rms_norm: has_bias does not agree with the presence of the beta input");
  if (std::holds_alternative<ops::GroupNorm>(n.op) && g.shape(n.inputs[0]).rank() < 2)
    return claim_refuse(why, "group_norm needs x of rank >= 2 (N, C, ...)");
  return true;
}

}  // namespace rlx::plan
