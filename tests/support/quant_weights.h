#pragma once
// Block-quantized weight bytes for DequantMatMul tests on any backend.
#include <cstdint>
#include <vector>

#include "rlx/ops.h"

namespace rlx::testing {

// n x k weight bytes of format f (n rows of k / block values): Gaussian values quantized where rlx
// has a quantizer for the format; else (Q2_K, Q3_K) random bytes with small f16 scales written
// over each block's scale fields, so that products stay of the order of the inputs.
std::vector<uint8_t> random_quant_weight(QuantFormat f, int64_t n, int64_t k, uint64_t seed);

}  // namespace rlx::testing
