#pragma once
// Internal to the CPU conv kernels: the f32 depthwise plane on AVX2 over an input plane copied
// into zero-padded rows (depthwise_avx2.cpp). No tap reads outside the buffer, so every output
// runs on 8-lane vectors, four vectors (of one row, or of consecutive rows when rows are short)
// in flight. Sums are bias, then the taps in (ky, kx) order, one FMA each (so not the bits of
// the scalar depthwise loop: within float rounding of it). Needs AVX2 and FMA.
#include <cstdint>

#include "backends/cpu/im2col.h"

namespace rlx::cpu {

// The padded buffer for `win` (2-d or 1-d: win.k[0] == win.out[0] == 1; x stride 1 or 2):
// rows of `width` floats, `height` rows; input row iy goes to row iy + win.pad[1], column
// ix to column ix + win.pad[2]; everything else stays zero.
struct PaddedPlane {
  int64_t width = 0, height = 0;
};
bool depthwise_padded_usable(const Window3& win);
PaddedPlane depthwise_padded_geometry(const Window3& win);

// y[oy * ow + ox] for the whole output plane, from the padded input plane `p`.
void depthwise_padded_avx2(const float* p, const PaddedPlane& g, const float* w, float bias, const Window3& win,
                           float* y);

}  // namespace rlx::cpu
