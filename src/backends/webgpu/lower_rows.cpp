// The rows family on WebGPU (in progress).
#include "backends/webgpu/lower.h"
#include "rlx/error.h"

namespace rlx::webgpu {
namespace {
bool kind(std::string_view) { return false; }
bool node(const Graph&, const Node&, const DeviceInfo*, std::string* why) { return refuse(why, "not yet"); }
}  // namespace

const FamilyClaims kRowsClaims{kind, node};

void lower_rows(LowerContext&, const plan::Step& st) {
  throw Error(step_label(st) + ": the WebGPU backend has no rows kernel yet");
}

}  // namespace rlx::webgpu
