#pragma once
// Internal to the CPU Pool kernel: one output row of f32 max pooling on AVX2 lanes.
#include <cstdint>

namespace rlx::cpu {

// y[ox] for ox < ow: the maximum over the n_rows input rows (iw floats each, in the order given)
// and the taps kx < kw of column ox * sx - px + kx * dx, columns outside [0, iw) skipped; -inf
// when no tap is inside. The scalar rule of max_pool_rows lane by lane, taps in (row, kx)
// order: a tap v replaces the running m when v > m or v is NaN (same bits; a skipped tap acts
// as -inf, which never replaces). sx must be 1 or 2; call it only when vec::has_avx2()
// (vec_math.h).
void max_pool_row_avx2(const float* const* rows, int64_t n_rows, int64_t iw, int64_t ow, int64_t kw, int64_t sx,
                       int64_t px, int64_t dx, float* y);

}  // namespace rlx::cpu
