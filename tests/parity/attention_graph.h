#pragma once
// One Attention step's shapes and attributes as a graph of inputs q, k, v (and "mask" / "bias"),
// for the shared parity cases and the CUDA kernel-path tests.
#include <string>

#include "rlx/rlx.h"

namespace rlx::testing {

struct AttnCase {
  AttnLayout layout;
  MaskKind mask;
  int64_t b, sq, skv, h, hkv, d;
  double scale = 0, softcap = 0;
  int64_t window = 0;
  DType mask_type = DType::Bool;  // Custom: the keep mask's dtype
  bool bias_per_row = true;       // Bias: [1, h, sq, skv], else [b, 1, 1, skv]
};

// A graph of inputs q, k, v (and "mask" / "bias") running that Attention in dtype t.
Graph attention_case_graph(const AttnCase& c, DType t);

// "bshd_causal_b2_q70_kv70_h8x2_d64" (plus scale / softcap / window when set): a test-name part.
std::string attention_case_name(const AttnCase& c);

}  // namespace rlx::testing
