// PENDING (this session): the select family's kernels.
#include "backends/vulkan/lower.h"

namespace rlx::vulkan {
namespace {
bool kind(std::string_view) { return false; }
bool node(const Graph&, const Node&, const DeviceInfo*, std::string* why) { return refuse(why, "pending"); }
}  // namespace

const FamilyClaims kSelectClaims{kind, node};

bool lower_select_family(LowerContext& cx, const plan::Step& st) { (void)cx, (void)st; return false; }

}  // namespace rlx::vulkan
