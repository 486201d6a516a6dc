// What every Vulkan lowering file shares: operand offsets, grid sizes, the step dispatch by
// family and the GLSL helpers of the kernel templates.
#include <algorithm>

#include "backends/vulkan/lower.h"
#include "backends/vulkan/spirv_coopmat.h"
#include "codegen/elementwise.h"
#include "codegen/language.h"
#include "plan/gpu_claims.h"
#include "plan/step_family.h"
#include "rlx/error.h"

namespace rlx::vulkan {

uint32_t Operand::elem(size_t elem_bytes) const {
  if (skip % elem_bytes != 0)
    throw Error("Vulkan: internal: an operand at byte " + std::to_string(offset + skip) + " is not aligned to its " +
                std::to_string(elem_bytes) + "-byte elements");
  const uint64_t e = skip / elem_bytes;
  if (e > UINT32_MAX) throw Error("Vulkan: internal: an operand offset does not fit 32 bits");
  return static_cast<uint32_t>(e);
}

uint32_t LowerContext::groups_1d(uint64_t items, uint64_t per_group) const {
  // At most 65535 (the limit every device guarantees; 16.7M invocations of 256 fill any GPU):
  // every device then takes the same grid-stride path, which the tests exercise on lavapipe.
  const uint64_t g = (items + per_group - 1) / per_group;
  return static_cast<uint32_t>(std::clamp<uint64_t>(g, 1, std::min<uint32_t>(info().max_groups[0], kMaxGroups1d)));
}

std::string step_label(const plan::Step& st) { return plan::step_node_label(st); }

void lower_step(LowerContext& cx, const plan::Step& st) {
  if (!vulkan_claims_kind(op_name(st.op)))
    throw Error(step_label(st) + ": the Vulkan backend has no kernel for this op (it should have been legalized)");
  for (const auto& o : st.out)
    if (o.numel() == 0 && plan::step_family(st.op) != plan::StepFamily::Leaf) return;  // nothing to compute
  switch (plan::step_family(st.op)) {
    case plan::StepFamily::Leaf: return;  // their bytes are uploaded by the variant
    case plan::StepFamily::Elementwise: lower_elementwise(cx, st); return;
    case plan::StepFamily::Copy: lower_copy(cx, st); return;
    case plan::StepFamily::Rope: lower_rope(cx, st); return;
    case plan::StepFamily::Matmul:
      if (std::holds_alternative<ops::DequantMatMul>(st.op)) lower_dequant(cx, st);
      else lower_matmul(cx, st);
      return;
    case plan::StepFamily::Rows: lower_rows(cx, st); return;
    case plan::StepFamily::Attention: lower_attention(cx, st); return;
    case plan::StepFamily::Select:
    case plan::StepFamily::Scan:
    case plan::StepFamily::Scatter:
    case plan::StepFamily::Random:
      if (lower_select_family(cx, st)) return;
      break;
    case plan::StepFamily::Spatial:
      if (lower_spatial_family(cx, st)) return;
      break;
    case plan::StepFamily::Control: break;
  }
  throw Error(step_label(st) + ": the Vulkan backend has no kernel for this op (it should have been legalized)");
}

std::string glsl_header(const std::vector<DType>& dtypes, bool subgroups) {
  std::string s = "#version 450\n" + codegen::glsl_extensions(std::set<DType>(dtypes.begin(), dtypes.end()));
  if (subgroups)
    s += "#extension GL_KHR_shader_subgroup_basic : require\n#extension GL_KHR_shader_subgroup_arithmetic : require\n";
  return s;
}

std::string glsl_buffer(int binding, const std::string& name, DType t, bool readonly, bool coherent) {
  const codegen::Language& L = codegen::glsl_language();
  const auto stored = L.storage_dtype(t);
  if (!stored) throw Error("Vulkan: " + L.storage_gap(t));
  return "layout(std430, set = 0, binding = " + std::to_string(binding) + ") " + (readonly ? "readonly " : "") +
         (coherent ? "coherent " : "") + "buffer B" + std::to_string(binding) + " { " + L.storage_type(*stored) + " data[]; } " + name + ";\n";
}

std::string glsl_load(DType t, const std::string& raw) { return codegen::glsl_language().load(t, raw); }
std::string glsl_store(DType t, const std::string& v) { return codegen::glsl_language().store(t, v); }
std::string glsl_compute_type(DType t) { return codegen::glsl_language().compute_type(t); }

std::string glsl_dtype_helpers(const std::vector<DType>& dtypes) {
  codegen::Helpers h;
  for (DType t : dtypes) codegen::glsl_language().dtype_helpers(t, h);
  return h.source();
}

std::string coopmat_directive(const LowerContext& cx, bool bf16) {
  if (bf16) return kKhrBf16Directive;
  return cx.info().coopmat_khr_f16 && cx.knobs().vulkan_coopmat_khr() ? kKhrDirective : "";
}

}  // namespace rlx::vulkan
