#include "plan/attention_work.h"

#include <string>

#include "plan/gpu_claims.h"
#include "rlx/error.h"

namespace rlx::plan {

void check_attention_index(const Step& st, const char* what, int64_t n, std::string_view backend) {
  if (n > INT32_MAX)
    throw Error(step_node_label(st) + ": the " + std::string(backend) + " attention kernel indexes with 32 bits; its " +
                what + " has " + std::to_string(n) +
                " elements (2^31 or more): split the batch or use the CUDA/CPU backend");
}

void check_attention_operands(const Step& st, std::string_view backend) {
  const auto& g = std::get<AttentionGeom>(st.geom);
  check_attention_index(st, "q", st.in[0].numel(), backend);
  check_attention_index(st, "k", st.in[1].numel(), backend);
  check_attention_index(st, "v", st.in[2].numel(), backend);
  check_attention_index(st, "output", st.out.at(0).numel(), backend);
  if (g.mask == MaskKind::Custom || g.mask == MaskKind::Bias || g.mask == MaskKind::Positions)
    check_attention_index(st, "mask", st.in.at(3).numel(), backend);
}

}  // namespace rlx::plan
