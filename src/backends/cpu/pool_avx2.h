#pragma once
// Internal to the CPU Pool kernel: f32 max pooling on AVX2 lanes.
#include <cstdint>
#include <vector>

#include "backends/cpu/im2col.h"

namespace rlx::cpu {

// y[ox] for ox < ow: the maximum over the n_rows input rows (iw floats each, in the order given)
// and the taps kx < kw of column ox * sx - px + kx * dx, columns outside [0, iw) skipped; -inf
// when no tap is inside. The scalar rule of max_pool_rows lane by lane, taps in (row, kx)
// order: a tap v replaces the running m when v > m or v is NaN (same bits; a skipped tap acts
// as -inf, which never replaces). sx must be 1 or 2; call it only when vec::has_avx2()
// (vec_math.h).
void max_pool_row_avx2(const float* const* rows, int64_t n_rows, int64_t iw, int64_t ow, int64_t kw, int64_t sx,
                       int64_t px, int64_t dx, float* y);

// Separable max pooling of rows holding no NaN: each input row's taps along x first
// (max_pool_hrow_avx2), then those rows' results combined down the (z, y) taps
// (max_pool_vrow_avx2). For numbers the rule above keeps the first largest value of a run of
// taps, so the two passes give the single pass's bits; vmaxps does the replacing.
//
// The row length max_pool_vrow_avx2 reads (ow rounded up to 8; max_pool_hrow_avx2 writes ow).
inline int64_t max_pool_hrow_width(int64_t ow) { return (ow + 7) / 8 * 8; }
// h[ox] for ox < ow: the maximum of row[ox * sx - px + kx * dx] over kx < kw in kx order,
// columns outside [0, iw) skipped (-inf when all are); h holds max_pool_hrow_width(ow) floats.
// sx must be 1 or 2. Returns false (h is then unspecified) when the columns it reads hold a NaN,
// or the row is too long for 32-bit column indices.
bool max_pool_hrow_avx2(const float* row, int64_t iw, int64_t ow, int64_t kw, int64_t sx, int64_t px, int64_t dx,
                        float* h);
// y[ox] for ox < ow: rows[0..n) (results of max_pool_hrow_avx2) combined in order; -inf when n = 0.
void max_pool_vrow_avx2(const float* const* rows, int64_t n, int64_t ow, float* y);

// Eight planes at once, for small maps (where a plane's rows are a few vectors, mostly ends):
// the planes' pixels interleaved, 8 floats a pixel, into a buffer padded with -inf by 8 x 8
// transposes, so every output pixel is its taps' vmaxps on whole vectors in (ky, kx) order,
// and 8 output pixels are transposed back into the planes' rows. 2-d windows (win.k[0] ==
// win.in[0] == 1). x + c * in_plane is plane c < nch (1..8), y + c * out_plane its output.
// Returns false, writing nothing, when the planes hold a NaN in the rows the windows read.
bool max_pool_planes8_avx2(const float* x, int64_t in_plane, int64_t nch, const Window3& win, float* y,
                           int64_t out_plane, std::vector<float>& scratch);

}  // namespace rlx::cpu
