#pragma once
// Internal to the CPU conv kernels: the f32 depthwise conv eight channels at a time on AVX2
// (depthwise_channels_avx2.cpp). The plane kernels (depthwise_avx2.h) put one plane's output
// columns in the vector lanes, which leaves lanes idle and costs a padded copy per plane when
// the planes are small (MobileNetV3's 7x7 and 14x14 maps). Here the lanes hold eight channels:
// their planes are interleaved into one zero-padded buffer of 8-float pixels, every output
// pixel is its taps' FMAs on whole vectors, and the results are de-interleaved into the eight
// output planes (contiguous in NCHW). Sums are bias, then the taps in (ky, kx) order, one FMA
// each: the bits of depthwise_padded_avx2.
#include <cstdint>
#include <vector>

#include "backends/cpu/im2col.h"

namespace rlx::cpu {

// 2-d or 1-d windows (win.k[0] == win.out[0] == win.in[0] == 1) on a CPU with AVX2 and FMA.
bool depthwise_channels_usable(const Window3& win);
// Whether this geometry runs faster eight channels at a time than plane by plane.
bool depthwise_channels_preferred(const Window3& win);

// Per-thread buffers of the kernel (grown on demand, never shrunk).
struct DepthwiseChannelsScratch {
  std::vector<float> in, out, w;
  // The layout `in` was last zeroed for (padded size, input origin and extent): a call with the
  // same one writes the same positions, so the padding around them is still zero.
  int64_t layout[6] = {-1, -1, -1, -1, -1, -1};
};

// y[j * out_size + q] for the `nch` (1..8) channels whose input planes are x + j * in_size,
// weights w + j * k_size and bias bias[j] (bias may be null: zero).
void depthwise_channels_avx2(const float* x, int64_t nch, const float* w, const float* bias, const Window3& win,
                             float* y, DepthwiseChannelsScratch& s);

}  // namespace rlx::cpu
