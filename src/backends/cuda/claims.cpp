// What the CUDA backend runs natively. Everything else is decomposed by the shared legalize
// (fused attention/transformer blocks, GroupNorm, ...) or reported as unsupported.
#include <set>

#include "backends/cuda/cuda_types.h"
#include "backends/cuda/elementwise_codegen.h"
#include "backends/cuda/lower.h"
#include "codegen/language.h"
#include "plan/step_family.h"

namespace rlx::cuda {
namespace {

bool fail(std::string* why, const std::string& msg) {
  if (why) *why = msg;
  return false;
}

}  // namespace

bool cuda_claims_kind(std::string_view name) {
  static const std::set<std::string_view> kinds = {
      "input", "param", "constant",
      "binary", "compare", "where", "activation", "cast", "elementwise_region",
      "reshape", "stop_gradient", "transpose", "narrow", "concat", "expand", "reverse", "gather", "pad",
      "matmul", "fused_matmul_bias_act", "dequant_matmul",
      "softmax", "log_softmax", "reduce",
      "layer_norm", "rms_norm", "fused_residual_ln", "fused_residual_rms_norm", "fused_swiglu",
      "rope", "attention"};
  return kinds.count(name) > 0 || claims_kind_select(name) || claims_kind_conv(name);
}

bool cuda_claims_node(const Graph& g, const Node& n, std::string* why) {
  const std::string name = op_name(n.op);
  if (!cuda_claims_kind(name)) return fail(why, "the CUDA backend has no kernel for '" + name + "'");
  std::vector<DType> in;
  for (const Value& v : n.inputs) in.push_back(g.shape(v).dtype);
  for (const Shape& s : n.outputs) {
    if (s.rank() > 8) return fail(why, "the CUDA backend supports tensors of rank <= 8");
  }
  // u16, u64 and the storage-only dtypes (float8, float4, int4, ...) run on the CPU only.
  std::vector<DType> held = in;
  for (const Shape& s : n.outputs) held.push_back(s.dtype);
  for (DType t : held)
    if (const std::string gap = codegen::cuda_language().storage_gap(t); !gap.empty()) return fail(why, gap);
  if (claims_kind_select(name)) return claims_node_select(g, n, why);
  if (claims_kind_conv(name)) return claims_node_conv(g, n, why);
  const DType out = n.outputs.empty() ? DType::F32 : n.outputs[0].dtype;
  auto all_float = [&] {
    for (DType t : in)
      if (!cuda_float(t)) return false;
    return cuda_float(out);
  };
  auto same_dtype = [&] {
    for (DType t : in)
      if (t != out) return false;
    return true;
  };
  return std::visit(
      [&]<class T>(const T& op) -> bool {
        if constexpr (std::is_same_v<T, ops::Binary> || std::is_same_v<T, ops::Compare> ||
                      std::is_same_v<T, ops::Where> || std::is_same_v<T, ops::Activation> ||
                      std::is_same_v<T, ops::Cast> || std::is_same_v<T, ops::ElementwiseRegion>) {
          return elementwise_supported(single_step_chain(n.op), in, why);
        } else if constexpr (std::is_same_v<T, ops::MatMul> || std::is_same_v<T, ops::FusedMatMulBiasAct>) {
          if (!(all_float() || out == DType::F64) || !same_dtype())
            return fail(why, "CUDA matmul needs f32/f16/bf16/f64 operands of one dtype");
          if (g.shape(n.inputs[0]).rank() < 1 || g.shape(n.inputs[1]).rank() < 1) return fail(why, "rank-0 matmul operand");
          return true;
        } else if constexpr (std::is_same_v<T, ops::DequantMatMul>) {
          (void)op;
          return claims_node_dequant(g, n, why);
        } else if constexpr (std::is_same_v<T, ops::Reduce>) {
          // Every dtype the CPU reduces: floats (f64 in double), integers in 64 bits, bool Max /
          // Min (the graph refuses the other bool kinds).
          (void)op;
          return same_dtype() ? true : fail(why, "CUDA reduce needs its input and output of one dtype");
        } else if constexpr (std::is_same_v<T, ops::Softmax> || std::is_same_v<T, ops::LogSoftmax>) {
          (void)op;
          // f64 rows accumulate in double.
          return all_float() || (out == DType::F64 && same_dtype()) ? true
                                                                    : fail(why, "CUDA " + name + " needs f32/f16/bf16/f64");
        } else if constexpr (std::is_same_v<T, ops::FusedSwiGLU>) {
          (void)op;
          return all_float() ? true : fail(why, "CUDA " + name + " needs f32/f16/bf16");
        } else if constexpr (std::is_same_v<T, ops::LayerNorm> || std::is_same_v<T, ops::RmsNorm> ||
                             std::is_same_v<T, ops::FusedResidualLN> || std::is_same_v<T, ops::FusedResidualRmsNorm>) {
          return all_float() && same_dtype() ? true : fail(why, "CUDA norms need f32/f16/bf16 operands of one dtype");
        } else if constexpr (std::is_same_v<T, ops::Rope>) {
          if (!all_float()) return fail(why, "CUDA rope needs f32/f16/bf16");
          return in.at(1) == in.at(2) ? true : fail(why, "CUDA rope needs cos and sin of one dtype");
        } else if constexpr (std::is_same_v<T, ops::Attention>) {
          if (!cuda_float(in.at(0)) || in.at(0) != in.at(1) || in.at(0) != in.at(2))
            return fail(why, "CUDA attention needs q, k, v of one float dtype");
          if (op.head_dim % 4 != 0 || op.head_dim > 256)
            return fail(why, "CUDA attention needs head_dim a multiple of 4 and <= 256");
          return true;
        } else if constexpr (std::is_same_v<T, ops::Gather>) {
          return (in.at(1) == DType::I32 || in.at(1) == DType::I64) ? true : fail(why, "CUDA gather needs i32/i64 indices");
        } else {
          (void)op;
          return true;  // leaves and data movement: any supported dtype
        }
      },
      n.op);
}

std::string step_label(const plan::Step& st) { return "node " + std::to_string(st.node) + " (" + op_name(st.op) + ")"; }

void lower_step(LowerContext& cx, const plan::Step& st) {
  if (!cuda_claims_kind(op_name(st.op)))
    throw Error(step_label(st) + ": the CUDA backend has no kernel for this op (it should have been legalized)");
  switch (plan::step_family(st.op)) {
    case plan::StepFamily::Leaf: return;  // no work: their bytes are uploaded by the variant
    case plan::StepFamily::Elementwise: lower_elementwise(cx, st); return;
    case plan::StepFamily::Matmul:
      if (std::holds_alternative<ops::GroupedMatMul>(st.op)) lower_select_family(cx, st);  // select_ops.cpp's
      else if (std::holds_alternative<ops::DequantMatMul>(st.op)) lower_dequant_matmul(cx, st);
      else lower_matmul(cx, st);
      return;
    case plan::StepFamily::Rows: lower_rows(cx, st); return;
    case plan::StepFamily::Copy:
    case plan::StepFamily::Rope: lower_shape(cx, st); return;
    case plan::StepFamily::Attention: lower_attention(cx, st); return;
    case plan::StepFamily::Select:
    case plan::StepFamily::Scan:
    case plan::StepFamily::Scatter:
    case plan::StepFamily::Random:
      if (lower_select_family(cx, st)) return;
      break;
    case plan::StepFamily::Spatial:
      if (lower_conv_family(cx, st)) return;
      break;
    case plan::StepFamily::Control: break;
  }
  throw Error(step_label(st) + ": the CUDA backend has no kernel for this op (it should have been legalized)");
}

}  // namespace rlx::cuda
