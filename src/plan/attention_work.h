#pragma once
// The 32-bit index checks of an Attention step that the shader-language GPU backends share.
#include <cstdint>
#include <string_view>

#include "plan/schedule.h"

namespace rlx::plan {

// rlx::Error naming the node when `n` (the count of the step's `what`) is 2^31 or more: the
// `backend`'s attention kernel indexes with 32 bits.
void check_attention_index(const Step& st, const char* what, int64_t n, std::string_view backend);
// The same for q, k, v, the output and (for a Custom or Bias mask, geometry AttentionGeom) the mask.
void check_attention_operands(const Step& st, std::string_view backend);

}  // namespace rlx::plan
