// The conv op family of the CUDA backend (see lower.h). It claims no op kind yet, so the shared
// legalize decomposes these ops or reports them unsupported on CUDA.
#include "backends/cuda/lower.h"

namespace rlx::cuda {

bool claims_kind_conv(std::string_view) { return false; }

bool claims_node_conv(const Graph&, const Node&, std::string* why) {
  if (why) *why = "the CUDA backend has no kernel for this op";
  return false;
}

bool lower_conv_family(LowerContext&, const plan::Step&) { return false; }

}  // namespace rlx::cuda
