// Binary, Compare, Where, Activation, Cast and ElementwiseRegion steps: one generated GLSL kernel
// each (the shared elementwise plan printed by codegen's GLSL printer).
#include "backends/vulkan/lower.h"
#include "codegen/elementwise.h"
#include "codegen/language.h"
#include "plan/gpu_claims.h"
#include "rlx/error.h"

namespace rlx::vulkan {

namespace {
constexpr uint64_t kWorkgroup = 256;  // the GLSL printer's local size
}

void add_elementwise(LowerContext& cx, const std::vector<RegionStep>& steps, const std::vector<DType>& in_dtypes,
                     DType out_dtype, const plan::ElementwiseGeom& geom, const Operand& out,
                     const std::vector<Operand>& ins, const std::string& what) {
  if (geom.numel == 0) return;
  const codegen::ElementwisePlan p = plan::elementwise_plan_32(steps, in_dtypes, out_dtype, geom, what, "Vulkan");
  std::vector<Operand> bind{out};
  std::vector<uint32_t> push{out.elem(dtype_size(out_dtype))};
  for (size_t k = 0; k < ins.size(); ++k) {
    bind.push_back(ins[k]);
    push.push_back(ins[k].elem(dtype_size(in_dtypes[k])));
  }
  if (p.error_flag) bind.push_back(cx.error_flag());
  cx.dispatch(Kernel{"elementwise", codegen::print_glsl_elementwise(p)}, bind, push, cx.groups_1d(p.items, kWorkgroup));
}

void lower_elementwise(LowerContext& cx, const plan::Step& st) {
  const auto& geom = std::get<plan::ElementwiseGeom>(st.geom);
  std::vector<DType> in_dtypes;
  std::vector<Operand> ins;
  for (const auto& r : st.in) {
    in_dtypes.push_back(r.dtype);
    ins.push_back(cx.in(r));
  }
  add_elementwise(cx, codegen::single_step_chain(st.op), in_dtypes, st.out.at(0).dtype, geom, cx.out(st.out.at(0)), ins,
                  step_label(st));
}

}  // namespace rlx::vulkan

namespace rlx::vulkan {
namespace {

bool kind(std::string_view name) { return plan::elementwise_claims_kind(name); }

bool node(const Graph& g, const Node& n, const DeviceInfo* info, std::string* why) {
  (void)info;
  return plan::elementwise_claims_node(codegen::glsl_language(), g, n, why);
}

}  // namespace

const FamilyClaims kElementwiseClaims{kind, node};

}  // namespace rlx::vulkan
