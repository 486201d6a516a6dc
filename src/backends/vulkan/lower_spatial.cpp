// PENDING (this session): the spatial family's kernels.
#include "backends/vulkan/lower.h"

namespace rlx::vulkan {
namespace {
bool kind(std::string_view) { return false; }
bool node(const Graph&, const Node&, const DeviceInfo*, std::string* why) { return refuse(why, "pending"); }
}  // namespace

const FamilyClaims kSpatialClaims{kind, node};

bool lower_spatial_family(LowerContext& cx, const plan::Step& st) { (void)cx, (void)st; return false; }

}  // namespace rlx::vulkan
