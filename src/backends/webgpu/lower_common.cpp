// What every WebGPU lowering file shares: operand offsets and bindings, grid sizes and the step
// dispatch by family.
#include <algorithm>

#include "backends/webgpu/lower.h"
#include "plan/gpu_claims.h"
#include "plan/step_family.h"
#include "rlx/error.h"

namespace rlx::webgpu {

uint32_t Operand::elem() const {
  if (packed) throw Error("WebGPU: internal: a packed 16-bit operand is addressed as 32-bit words");
  if (offset % 4) throw Error("WebGPU: internal: an operand at byte " + std::to_string(offset) + " is not word-aligned");
  if (offset / 4 > UINT32_MAX) throw Error("WebGPU: internal: an operand offset does not fit 32 bits");
  return static_cast<uint32_t>(offset / 4);
}

uint32_t Operand::half() const {
  if (!packed) throw Error("WebGPU: internal: a 32-bit operand is addressed as 16-bit values");
  if (offset % 2) throw Error("WebGPU: internal: a packed operand at byte " + std::to_string(offset) + " is not 2-byte aligned");
  if (offset / 2 > UINT32_MAX) throw Error("WebGPU: internal: a packed operand offset does not fit 32 bits");
  return static_cast<uint32_t>(offset / 2);
}

Binds plan_binds(const std::vector<Operand>& ops, bool error_flag) {
  Binds b;
  std::vector<abi::Buffer> bufs;
  for (const Operand& o : ops) {
    auto it = std::find(bufs.begin(), bufs.end(), o.buffer);
    if (it == bufs.end()) {
      bufs.push_back(o.buffer);
      b.kinds.push_back(o.write ? BindingKind::ReadWrite : BindingKind::Read);
      b.binding_of.push_back(static_cast<int>(bufs.size()) - 1);
    } else {
      const int i = static_cast<int>(it - bufs.begin());
      if (o.write) b.kinds[static_cast<size_t>(i)] = BindingKind::ReadWrite;
      b.binding_of.push_back(i);
    }
  }
  b.error_flag = error_flag;
  if (error_flag) b.kinds.push_back(BindingKind::ReadWrite);
  b.kinds.push_back(BindingKind::Uniform);
  return b;
}

std::string Binds::decls(const std::vector<std::string>& params) const {
  std::string s;
  const size_t n_bufs = kinds.size() - 1 - (error_flag ? 1 : 0);
  for (size_t i = 0; i < n_bufs; ++i)
    s += "@group(0) @binding(" + std::to_string(i) + ") var<storage, " +
         (kinds[i] == BindingKind::ReadWrite ? "read_write" : "read") + "> rlx_b" + std::to_string(i) + ": array<u32>;\n";
  if (error_flag)
    s += "@group(0) @binding(" + std::to_string(flag_binding()) + ") var<storage, read_write> rlx_err: atomic<i32>;\n";
  s += "struct RlxP {";
  for (size_t k = 0; k < binding_of.size(); ++k) s += " o" + std::to_string(k) + ": u32,";
  for (const std::string& p : params) s += " " + p + ",";
  if (binding_of.empty() && params.empty()) s += " unused: u32,";
  s += " }\n@group(0) @binding(" + std::to_string(uniform_binding()) + ") var<uniform> rlx_p: RlxP;\n";
  return s;
}

std::string Binds::at(size_t k, const std::string& idx) const {
  return "rlx_b" + std::to_string(binding_of.at(k)) + "[rlx_p.o" + std::to_string(k) + " + (" + idx + ")]";
}

uint32_t LowerContext::groups_1d(uint64_t items, uint64_t per_group) const {
  const uint64_t g = (items + per_group - 1) / per_group;
  return static_cast<uint32_t>(
      std::clamp<uint64_t>(g, 1, std::min<uint32_t>(info().limits.max_compute_workgroups_per_dimension, kMaxGroups1d)));
}

std::string step_label(const plan::Step& st) { return plan::step_node_label(st); }

void lower_step(LowerContext& cx, const plan::Step& st) {
  if (!webgpu_claims_kind(op_name(st.op)))
    throw Error(step_label(st) + ": the WebGPU backend has no kernel for this op (it should have been legalized)");
  for (const auto& o : st.out)
    if (o.numel() == 0 && plan::step_family(st.op) != plan::StepFamily::Leaf) return;  // nothing to compute
  switch (plan::step_family(st.op)) {
    case plan::StepFamily::Leaf: return;  // their bytes are uploaded by the variant
    case plan::StepFamily::Elementwise: lower_elementwise(cx, st); return;
    case plan::StepFamily::Copy: lower_copy(cx, st); return;
    case plan::StepFamily::Matmul: lower_matmul(cx, st); return;
    case plan::StepFamily::Rows: lower_rows(cx, st); return;
    case plan::StepFamily::Rope: lower_rope(cx, st); return;
    case plan::StepFamily::Attention: lower_attention(cx, st); return;
    case plan::StepFamily::Spatial: lower_spatial(cx, st); return;
    case plan::StepFamily::Select: lower_select(cx, st); return;
    case plan::StepFamily::Scan: lower_scan(cx, st); return;
    case plan::StepFamily::Scatter: lower_scatter(cx, st); return;
    case plan::StepFamily::Random: lower_random(cx, st); return;
    default: break;
  }
  throw Error(step_label(st) + ": the WebGPU backend has no kernel for this op (it should have been legalized)");
}

}  // namespace rlx::webgpu
