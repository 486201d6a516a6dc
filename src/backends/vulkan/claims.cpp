// What the Vulkan backend runs natively: leaves, and each family's claims (FamilyClaims in each
// lowering file), for dtypes the device can hold. Everything else is decomposed by the shared
// legalize or reported as unsupported with the reason.
#include <set>

#include "backends/vulkan/lower.h"
#include "codegen/language.h"

namespace rlx::vulkan {
namespace {

const FamilyClaims* const kFamilies[] = {&kElementwiseClaims, &kCopyClaims,   &kRopeClaims,
                                         &kMatmulClaims,      &kDequantClaims, &kRowsClaims,
                                         &kAttentionClaims,   &kSelectClaims,  &kSpatialClaims};

bool is_leaf(std::string_view name) { return name == "input" || name == "param" || name == "constant"; }

// Why device `info` cannot hold dtype t ("" when it can).
std::string dtype_gap(DType t, const DeviceInfo* info) {
  if (const std::string g = codegen::glsl_language().storage_gap(t); !g.empty()) return g;
  if (!info) return "";
  const std::string dev = "the Vulkan device " + info->name + " ";
  switch (t) {
    case DType::F16:
      return info->float16 ? "" : dev + "has no 16-bit float arithmetic or storage (shaderFloat16, storageBuffer16BitAccess)";
    case DType::BF16:
    case DType::I16:
      return info->int16 && info->storage16 ? "" : dev + "has no 16-bit integers or storage (shaderInt16, storageBuffer16BitAccess)";
    case DType::I8:
    case DType::U8:
    case DType::Bool:
      return info->storage8 ? "" : dev + "has no 8-bit integers or storage (shaderInt8, storageBuffer8BitAccess)";
    case DType::I64: return info->int64 ? "" : dev + "has no 64-bit integers (shaderInt64)";
    case DType::F64: return info->float64 ? "" : dev + "has no 64-bit floats (shaderFloat64)";
    default: return "";
  }
}

}  // namespace

bool refuse(std::string* why, const std::string& msg) {
  if (why) *why = msg;
  return false;
}

bool vulkan_claims_kind(std::string_view name) {
  if (is_leaf(name)) return true;
  for (const FamilyClaims* f : kFamilies)
    if (f->kind(name)) return true;
  return false;
}

bool vulkan_claims_node(const Graph& g, const Node& n, const DeviceInfo* info, std::string* why) {
  const std::string name = op_name(n.op);
  if (!vulkan_claims_kind(name)) return refuse(why, "the Vulkan backend has no kernel for '" + name + "'");
  std::set<DType> dtypes;
  for (const Value& v : n.inputs) dtypes.insert(g.shape(v).dtype);
  for (const Shape& s : n.outputs) {
    dtypes.insert(s.dtype);
    if (s.rank() > 8) return refuse(why, "the Vulkan backend supports tensors of rank <= 8");
  }
  for (DType t : dtypes)
    if (const std::string gap = dtype_gap(t, info); !gap.empty()) return refuse(why, gap);
  if (is_leaf(name)) return true;
  for (const FamilyClaims* f : kFamilies)
    if (f->kind(name)) return f->node(g, n, info, why);
  return refuse(why, "the Vulkan backend has no kernel for '" + name + "'");
}

}  // namespace rlx::vulkan
