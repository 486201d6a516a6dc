#pragma once
// Direct integer-loop references of the 8-bit integer ops (MatMulInteger, ConvInteger) for the
// tests: int64 sums of (x - x_zero) * (w - w_zero), wrapped to int32 as the ops store them.
#include <cstdint>
#include <vector>

#include "rlx/tensor.h"

namespace rlx::testing {

// The values of an integer tensor as int64.
std::vector<int64_t> int_values(const Tensor& t);
// Uniform integers in [lo, hi] as a tensor of `t`, reproducible by seed.
Tensor random_ints(DType t, std::vector<int64_t> shape, uint64_t seed, int lo, int hi);
// The full range of u8 / i8.
Tensor random_int8(DType t, std::vector<int64_t> shape, uint64_t seed);
// v modulo 2^32 as int32.
int32_t wrap32(int64_t v);

// numpy matmul of (a - a_zero) @ (b - b_zero) over dims `ad` @ `bd` (rank >= 1, batch dims
// broadcast). a_zero: one value, or one per row of a's storage (a's dims without K); b_zero: one
// value or one per column of b's storage (b's dims without K). Sets `out` to the result dims.
std::vector<int32_t> ref_matmul_integer(const std::vector<int64_t>& ad, const std::vector<int64_t>& a,
                                        const std::vector<int64_t>& bd, const std::vector<int64_t>& b,
                                        const std::vector<int64_t>& a_zero, const std::vector<int64_t>& b_zero,
                                        std::vector<int64_t>& out);

// Conv of (x - x_zero) with (w - w_zero) (w_zero one value or one per output channel); padding
// reads x_zero. stride / dilation empty -> 1, pads empty -> 0 (begins, then ends).
struct ConvGeometry {
  std::vector<int64_t> stride, pads, dilation;
  int64_t groups = 1;
};
std::vector<int32_t> ref_conv_integer(const std::vector<int64_t>& xd, const std::vector<int64_t>& x,
                                      const std::vector<int64_t>& wd, const std::vector<int64_t>& w, int64_t x_zero,
                                      const std::vector<int64_t>& w_zero, const ConvGeometry& geo,
                                      std::vector<int64_t>& out);

}  // namespace rlx::testing
