// What the WebGPU backend runs natively: leaves, and each family's claims (FamilyClaims in each
// lowering file), for dtypes WGSL can hold (codegen/lang_wgsl.cpp: one 32-bit word per element).
// Everything else is decomposed by the shared legalize or reported as unsupported with the reason.
#include <set>

#include "backends/webgpu/lower.h"
#include "codegen/language.h"

namespace rlx::webgpu {
namespace {

const FamilyClaims* const kFamilies[] = {
    &kElementwiseClaims,
    &kCopyClaims,
    &kMatmulClaims,
    &kRowsClaims,
    &kRopeClaims,
    &kAttentionClaims,
    &kSpatialClaims,
    &kSelectClaims,
    &kScanClaims,
    &kScatterClaims,
    &kRandomClaims,
};

bool is_leaf(std::string_view name) { return name == "input" || name == "param" || name == "constant"; }

}  // namespace

bool refuse(std::string* why, const std::string& msg) {
  if (why) *why = msg;
  return false;
}

bool webgpu_claims_kind(std::string_view name) {
  if (is_leaf(name)) return true;
  for (const FamilyClaims* f : kFamilies)
    if (f->kind(name)) return true;
  return false;
}

bool webgpu_claims_node(const Graph& g, const Node& n, const DeviceInfo* info, std::string* why) {
  const std::string name = op_name(n.op);
  if (!webgpu_claims_kind(name)) return refuse(why, "the WebGPU backend has no kernel for '" + name + "' yet");
  std::set<DType> dtypes;
  for (const Value& v : n.inputs) dtypes.insert(g.shape(v).dtype);
  for (const Shape& s : n.outputs) {
    dtypes.insert(s.dtype);
    if (s.rank() > 8) return refuse(why, "the WebGPU backend supports tensors of rank <= 8");
  }
  for (DType t : dtypes)
    if (const std::string gap = codegen::wgsl_language().storage_gap(t); !gap.empty()) return refuse(why, gap);
  if (is_leaf(name)) return true;
  for (const FamilyClaims* f : kFamilies)
    if (f->kind(name)) return f->node(g, n, info, why);
  return refuse(why, "the WebGPU backend has no kernel for '" + name + "' yet");
}

}  // namespace rlx::webgpu
