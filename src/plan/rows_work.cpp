#include "plan/rows_work.h"

#include <type_traits>

#include "plan/gpu_claims.h"
#include "rlx/error.h"

namespace rlx::plan {
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
