// conv_direct in bands of output rows (conv_direct.h: ConvBands).
#include <algorithm>
#include <vector>

#include "backends/cpu/conv_direct.h"
#include "backends/cpu/conv_epilogue.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/vec_rows.h"

namespace rlx::cpu {
namespace {

// Input floats of one band (all cg channels): about this many, so that the band's phase buffer
// and output stay in L2 while the tile kernels run over them.
constexpr int64_t kBandFloats = int64_t{256} << 10;

// The window of output rows [oy0, oy1) over input rows [iy0, iy1) of the whole window `win`.
Window3 band_window(const Window3& win, int64_t oy0, int64_t oy1, int64_t iy0, int64_t iy1) {
  Window3 b = win;
  b.in[1] = iy1 - iy0;
  b.out[1] = oy1 - oy0;
  b.pad[1] = iy0 + win.pad[1] - oy0 * win.stride[1];  // >= 0: iy0 >= oy0 * sy - pad
  return b;
}

// The input rows output rows [oy0, oy1) read, clipped to the image.
void band_rows(const Window3& win, int64_t oy0, int64_t oy1, int64_t& iy0, int64_t& iy1) {
  iy0 = std::max<int64_t>(0, oy0 * win.stride[1] - win.pad[1]);
  iy1 = std::min(win.in[1], (oy1 - 1) * win.stride[1] - win.pad[1] + (win.k[1] - 1) * win.dil[1] + 1);
}

int64_t band_height(const Window3& win, int64_t cg) {
  const int64_t per_row = std::max<int64_t>(1, cg * win.in[2] * win.stride[1]);
  return std::clamp<int64_t>(kBandFloats / per_row, 1, win.out[1]);
}

}  // namespace

bool conv_direct_bands_usable(const Window3& win, int64_t cg, int64_t coutg) {
  if (win.in[0] != 1 || win.out[0] != 1 || win.k[0] != 1 || win.pad[1] < 0) return false;
  // A band of the usual height, reading as many input rows as a band can.
  Window3 band = win;
  band.out[1] = band_height(win, cg);
  band.in[1] = std::min(win.in[1], (band.out[1] - 1) * win.stride[1] + (win.k[1] - 1) * win.dil[1] + 1);
  band.pad[1] = 0;
  return conv_direct_usable(band, cg, coutg);
}

void conv_direct_bands(const ConvBands& b) {
  const Window3& win = b.win;
  const int64_t oh = win.out[1], ow = win.out[2], p = win.out_size(), in_sz = win.in_size(), w = win.in[2];
  const int64_t rows = band_height(win, b.cg), nbands = (oh + rows - 1) / rows;
  const int64_t cgk = b.cg * win.k_size();
  const int64_t tasks = b.n_batch * b.groups * nbands;
  const int64_t cout = b.groups * b.coutg;
  auto band = [&](int64_t t) {
    thread_local std::vector<float> xin, out;
    const int64_t ng = t / nbands, n = ng / b.groups, g = ng % b.groups;
    const int64_t oy0 = (t % nbands) * rows, oy1 = std::min(oh, oy0 + rows), bp = (oy1 - oy0) * ow;
    int64_t iy0, iy1;
    band_rows(win, oy0, oy1, iy0, iy1);
    out.resize(static_cast<size_t>(b.coutg * bp));
    const float* bias = b.bias ? b.bias + g * b.coutg : nullptr;
    if (iy1 <= iy0) {  // the band reads only padding: its outputs are the bias
      for (int64_t co = 0; co < b.coutg; ++co) std::fill(out.begin() + co * bp, out.begin() + (co + 1) * bp, bias ? bias[co] : 0.f);
    } else {
      ConvDirect d;
      static_cast<ConvOperands&>(d) = b;
      d.win = band_window(win, oy0, oy1, iy0, iy1);
      d.n_batch = 1;
      d.groups = 1;
      d.epi = nullptr;
      const int64_t first_plane = (n * b.groups + g) * b.cg;
      if (b.x_f16) {  // the band's rows of each channel, in f32, planes back to back
        const int64_t band_in = (iy1 - iy0) * w;
        xin.resize(static_cast<size_t>(b.cg * band_in));
        const f16* x = static_cast<const f16*>(b.x) + first_plane * in_sz + iy0 * w;
        for (int64_t c = 0; c < b.cg; ++c) f16_to_f32(x + c * in_sz, xin.data() + c * band_in, band_in);
        d.x = xin.data();
      } else {
        d.x = static_cast<const float*>(b.x) + first_plane * in_sz + iy0 * w;
        d.x_plane = in_sz;
      }
      d.w = b.w + g * b.coutg * cgk;
      d.bias = bias;
      d.y = out.data();
      d.weight_cache = b.groups == 1 ? b.weight_cache : nullptr;
      conv_direct(d);  // inside the pool's loop: on this thread
    }
    for (int64_t co = 0; co < b.coutg; ++co) {
      const int64_t at = (n * cout + g * b.coutg + co) * p + oy0 * ow;  // flat index of the band's first value
      const float* src = out.data() + co * bp;
      if (b.epi) b.epi->apply(src, at, bp);
      else if (b.y_f16) f32_to_f16(src, static_cast<f16*>(b.y) + at, bp);
      else std::copy(src, src + bp, static_cast<float*>(b.y) + at);
    }
  };
  if (tasks == 0) return;
  // The first band alone first: it fills the step's packed-weight cache, which the others only
  // read.
  band(0);
  parallel_for(tasks - 1, 1, [&](int64_t tb, int64_t te) {
    for (int64_t t = tb; t < te; ++t) band(t + 1);
  });
}

}  // namespace rlx::cpu
