#include "support/quant_weights.h"

#include <cstring>
#include <random>

#include "quant/ggml_blocks.h"
#include "rlx/gguf.h"

namespace rlx::testing {

std::vector<uint8_t> random_quant_weight(QuantFormat f, int64_t n, int64_t k, uint64_t seed) {
  const GgmlType t = quant::ggml_type_of(f);
  std::mt19937_64 rng(seed);
  if (ggml_type_info(t).quantize) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(n * k));
    for (float& x : v) x = d(rng);
    return ggml_quantize(t, v);
  }
  const QuantBlock blk = quant_block(f);
  std::vector<uint8_t> b(static_cast<size_t>(n * k / blk.elements * blk.bytes));
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  const uint16_t d = f32_to_f16_bits(0.04f), dmin = f32_to_f16_bits(0.03f);
  for (size_t i = 0; i < b.size(); i += static_cast<size_t>(blk.bytes)) {
    const size_t at = f == QuantFormat::Q2_K ? 80 : 108;  // Q2_K: d, dmin at 80, 82; Q3_K: d at 108
    std::memcpy(&b[i + at], &d, 2);
    if (f == QuantFormat::Q2_K) std::memcpy(&b[i + 82], &dmin, 2);
  }
  return b;
}

}  // namespace rlx::testing
