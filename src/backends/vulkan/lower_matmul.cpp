// PENDING (this session): the matmul family's kernels.
#include "backends/vulkan/lower.h"
#include "rlx/error.h"

namespace rlx::vulkan {
namespace {
bool kind(std::string_view) { return false; }
bool node(const Graph&, const Node&, const DeviceInfo*, std::string* why) { return refuse(why, "pending"); }
}  // namespace

const FamilyClaims kMatmulClaims{kind, node};

void lower_matmul(LowerContext& cx, const plan::Step& st) { (void)cx; throw Error(step_label(st) + ": pending"); }

}  // namespace rlx::vulkan
