#include "plan/gpu_claims.h"

#include <vector>

#include "rlx/error.h"

namespace rlx::plan {

std::string step_node_label(const Step& st) { return "node " + std::to_string(st.node) + " (" + op_name(st.op) + ")"; }

bool claim_refuse(std::string* why, const std::string& msg) {
  if (why) *why = msg;
  return false;
}

bool elementwise_claims_kind(std::string_view name) {
  return name == "binary" || name == "compare" || name == "where" || name == "activation" || name == "cast" ||
         name == "elementwise_region";
}

bool elementwise_claims_node(const codegen::Language& lang, const Graph& g, const Node& n, std::string* why) {
  std::vector<DType> in;
  for (const Value& v : n.inputs) in.push_back(g.shape(v).dtype);
  std::string reason;
  if (codegen::chain_supported(lang, codegen::single_step_chain(n.op), in, &reason)) return true;
  return claim_refuse(why, reason);
}

DType matmul_epilogue_dtype(DType t) { return t == DType::F16 || t == DType::BF16 ? DType::F32 : t; }

std::vector<DType> matmul_epilogue_inputs(DType t, bool bias, bool residual) {
  return std::vector<DType>(1 + (bias ? 1 : 0) + (residual ? 1 : 0), matmul_epilogue_dtype(t));
}

bool matmul_product_dtype(DType t) { return is_float(t) || is_int(t); }

codegen::ElementwisePlan matmul_epilogue_plan(DType t, bool bias, std::optional<ActKind> act, bool residual) {
  codegen::ElementwisePlan plan;
  plan.steps = codegen::matmul_epilogue_chain(bias, act, residual);
  if (plan.steps.empty()) return plan;
  plan.in_dtypes = matmul_epilogue_inputs(t, bias, residual);
  plan.step_dtypes = codegen::chain_step_dtypes(plan.steps, plan.in_dtypes);
  plan.out_dtype = plan.step_dtypes.back();
  return plan;
}

codegen::ElementwisePlan elementwise_plan_32(const std::vector<RegionStep>& steps, const std::vector<DType>& in_dtypes,
                                             DType out_dtype, const ElementwiseGeom& geom, const std::string& what,
                                             std::string_view backend) {
  codegen::ElementwisePlan p = codegen::plan_elementwise(steps, in_dtypes, out_dtype, geom, 1);
  if (p.wide_index)
    throw Error(what + ": the " + std::string(backend) + " elementwise kernel indexes with 32 bits; this tensor has " +
                std::to_string(geom.numel) + " elements (2^31 or more)");
  return p;
}

bool matmul_claims_kind(std::string_view name) {
  return name == "matmul" || name == "fused_matmul_bias_act" || name == "grouped_matmul";
}

bool matmul_claims_node(const codegen::Language& lang, std::string_view backend, const Graph& g, const Node& n,
                        std::string* why) {
  const std::string be(backend);
  const std::string name = op_name(n.op);
  const DType out = n.outputs.at(0).dtype;
  auto dt = [&](size_t i) { return g.shape(n.inputs.at(i)).dtype; };
  if (!matmul_product_dtype(out))
    return claim_refuse(why, be + " " + name + ": " + dtype_name(out) + " products are not supported (floats and integers only)");
  if (std::holds_alternative<ops::GroupedMatMul>(n.op)) {
    if (dt(0) != out || dt(1) != out)
      return claim_refuse(why, be + " grouped_matmul needs x and w in the result's dtype, got " + std::string(dtype_name(dt(0))) +
                             " and " + dtype_name(dt(1)));
    if (!is_int(dt(2)))
      return claim_refuse(why, be + " grouped_matmul needs integer expert indices, got " + std::string(dtype_name(dt(2))));
    if (g.shape(n.inputs[0]).rank() != 2 || g.shape(n.inputs[1]).rank() != 3 || g.shape(n.inputs[2]).rank() != 1)
      return claim_refuse(why, be + " grouped_matmul needs x (M, K), w (E, K, N) and idx (M)");
    return true;
  }
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (dt(i) != out)
      return claim_refuse(why, be + " " + name + " needs every operand in the result's dtype (" + dtype_name(out) +
                             "), operand " + std::to_string(i) + " is " + dtype_name(dt(i)));
  if (g.shape(n.inputs[0]).rank() < 1 || g.shape(n.inputs[1]).rank() < 1)
    return claim_refuse(why, be + " " + name + ": rank-0 operand");
  if (const auto* f = std::get_if<ops::FusedMatMulBiasAct>(&n.op)) {
    const bool bias = f->has_bias(n.inputs.size());
    const auto chain = codegen::matmul_epilogue_chain(bias, f->activation, f->residual);
    std::string reason;
    if (!chain.empty() && !codegen::chain_supported(lang, chain, matmul_epilogue_inputs(out, bias, f->residual), &reason))
      return claim_refuse(why, be + " fused_matmul_bias_act epilogue: " + reason);
  }
  return true;
}

}  // namespace rlx::plan
