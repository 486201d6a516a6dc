// CPU kernel: Pool (max / average over 1-3 spatial dims, pads, dilation, ceil_mode).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/im2col.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/pool_avx2.h"
#include "backends/cpu/vec_math.h"
#include "rlx/error.h"

namespace rlx::cpu {
namespace {

// Kernel taps kk in [lo, hi) whose position start + kk*dil lies in [begin, end).
inline void tap_range(int64_t start, int64_t dil, int64_t k, int64_t begin, int64_t end, int64_t& lo, int64_t& hi) {
  lo = std::clamp<int64_t>(ceil_div(begin - start, dil), 0, k);
  hi = std::clamp<int64_t>(ceil_div(end - start, dil), lo, k);
}

// Per-thread buffers of the max pooling paths.
struct MaxPoolScratch {
  std::vector<float> m, conv_row, hbuf, planes8;
  std::vector<const float*> tap_rows;
};

// Max pooling of float planes (same bits every way: taps in the generic loop's (kz, ky, kx)
// order with its NaN rule):
//  - small 2-d maps of f32, eight planes at a time on AVX2 (pool_avx2.h);
//  - separable (AVX2, x stride 1 or 2): each input row's maxima along x once (shared by the
//    output rows whose windows overlap), then combined down the (kz, ky) taps;
//  - one output row at a time: every valid tap row (converted to f32 once when T is not)
//    updates the row's running maxima over the output columns its taps reach, so the inner loop
//    runs over contiguous outputs with no index arithmetic per tap (AVX2, x stride 1 or 2:
//    pool_avx2.h).
// The vector paths give way to the next when the rows they read hold a NaN.
template <class T>
class MaxPoolRows {
 public:
  MaxPoolRows(const Window3& win, const T* xp, T* yp) : win_(win), xp_(xp), yp_(yp) {
    for (int64_t kx = 0; kx < win.k[2]; ++kx) {
      int64_t lo, hi;  // the output columns whose tap kx lies inside the row
      win.valid_range(2, kx, lo, hi);
      lo_.push_back(lo);
      hi_.push_back(hi);
    }
  }

  // Whether planes run eight at a time: f32, 2-d, output rows of at most 48 (1 thread, per
  // step, eight at a time / separable: 64 x 56x56 3x3 s2 53 / 91 us, 64 x 28x28 19 / 59 us,
  // 32 x 48x40 16 / 45 us, 32 x 64x64 2x2 s2 33 / 42 us, 8 x 20x20 5x5 s1 5.7 / 9.4 us; even at
  // 56 outputs a row, 64 x 112x112 3x3 s2 247 / 252 us; behind at 80, 16 x 160x160 2x2 s2 125
  // / 80 us).
  // The interleaved buffer stays under 4 MiB (a tall narrow map goes the separable way).
  bool planes8() const {
    if (!std::is_same_v<T, float> || !vec_ || win_.k[0] != 1 || win_.in[0] != 1 || win_.out[2] > 48) return false;
    return win_.read_extent(1) * win_.read_extent(2) * 8 <= (int64_t{1} << 20);
  }

  // Planes [p0, p0 + n), n <= 8, eight at a time.
  void run_planes8(int64_t p0, int64_t n, MaxPoolScratch& s) const {
    if constexpr (std::is_same_v<T, float>) {
      const int64_t in_sz = win_.in_size(), out_sz = win_.out_size();
      if (max_pool_planes8_avx2(xp_ + p0 * in_sz, in_sz, n, win_, yp_ + p0 * out_sz, out_sz, s.planes8)) return;
    }
    for (int64_t pl = p0; pl < p0 + n; ++pl) run_band(pl, 0, 0, win_.out[1], s);
  }

  // Output rows [oy0, oy1) of output z `oz` of plane `plane`.
  void run_band(int64_t plane, int64_t oz, int64_t oy0, int64_t oy1, MaxPoolScratch& s) const {
    const int64_t ow = win_.out[2], oh = win_.out[1], od = win_.out[0], iw = win_.in[2], ih = win_.in[1];
    const int64_t row0 = (plane * od + oz) * oh, width = max_pool_hrow_width(ow);
    s.m.resize(static_cast<size_t>(width));
    if constexpr (!std::is_same_v<T, float>) s.conv_row.resize(static_cast<size_t>(iw * win_.k[0] * win_.k[1]));
    if (vec_) {
      // The input rows the band reads, per valid kz: [iy0, iy1).
      const int64_t iy0 = std::max<int64_t>(0, oy0 * win_.stride[1] - win_.pad[1]);
      const int64_t iy1 = std::clamp<int64_t>((oy1 - 1) * win_.stride[1] - win_.pad[1] + win_.tap_extent(1), iy0, ih);
      const int64_t n_in = iy1 - iy0;
      s.hbuf.resize(static_cast<size_t>(win_.k[0] * std::max<int64_t>(n_in, 1) * width));
      bool ok = true;
      for (int64_t kz = 0; kz < win_.k[0] && ok; ++kz) {
        const int64_t iz = iz_of(oz, kz);
        if (iz < 0) continue;
        for (int64_t iy = iy0; iy < iy1 && ok; ++iy)
          ok = max_pool_hrow_avx2(f32_row(plane, iz, iy, 0, s), iw, ow, win_.k[2], win_.stride[2], win_.pad[2],
                                  win_.dil[2], s.hbuf.data() + (kz * n_in + iy - iy0) * width);
      }
      if (ok) {
        for (int64_t oy = oy0; oy < oy1; ++oy) {
          s.tap_rows.clear();
          for_tap_rows(oz, oy, [&](int64_t kz, int64_t, int64_t iy) {
            s.tap_rows.push_back(s.hbuf.data() + (kz * n_in + iy - iy0) * width);
          });
          float* out = out_row(row0 + oy, s);
          max_pool_vrow_avx2(s.tap_rows.data(), static_cast<int64_t>(s.tap_rows.size()), ow, out);
          store(out, row0 + oy);
        }
        return;
      }
    }
    // A NaN in the band's rows (or no AVX2): one row at a time.
    for (int64_t oy = oy0; oy < oy1; ++oy) {
      // The valid tap rows in (kz, ky) order, converted to f32 once.
      s.tap_rows.clear();
      for_tap_rows(oz, oy, [&](int64_t, int64_t iz, int64_t iy) {
        s.tap_rows.push_back(f32_row(plane, iz, iy, static_cast<int64_t>(s.tap_rows.size()), s));
      });
      float* out = out_row(row0 + oy, s);
      if (vec_) {
        max_pool_row_avx2(s.tap_rows.data(), static_cast<int64_t>(s.tap_rows.size()), iw, ow, win_.k[2],
                          win_.stride[2], win_.pad[2], win_.dil[2], out);
      } else {
        std::fill(out, out + ow, -std::numeric_limits<float>::infinity());
        for (const float* row : s.tap_rows)
          for (int64_t kx = 0; kx < win_.k[2]; ++kx) {
            const int64_t a = lo_[static_cast<size_t>(kx)], z = hi_[static_cast<size_t>(kx)];
            const float* base = row - win_.pad[2] + kx * win_.dil[2];
            for (int64_t ox = a; ox < z; ++ox) {
              const float v = base[ox * win_.stride[2]];
              out[ox] = (v > out[ox] || v != v) ? v : out[ox];
            }
          }
      }
      store(out, row0 + oy);
    }
  }

 private:
  // The input z of tap kz at output z oz, or -1 outside the input.
  int64_t iz_of(int64_t oz, int64_t kz) const {
    const int64_t iz = oz * win_.stride[0] - win_.pad[0] + kz * win_.dil[0];
    return iz >= 0 && iz < win_.in[0] ? iz : -1;
  }
  // f(kz, iz, iy) for the taps (kz, ky) of output row (oz, oy) inside the input, in order.
  template <class F>
  void for_tap_rows(int64_t oz, int64_t oy, F&& f) const {
    for (int64_t kz = 0; kz < win_.k[0]; ++kz) {
      const int64_t iz = iz_of(oz, kz);
      if (iz < 0) continue;
      for (int64_t ky = 0; ky < win_.k[1]; ++ky) {
        const int64_t iy = oy * win_.stride[1] - win_.pad[1] + ky * win_.dil[1];
        if (iy >= 0 && iy < win_.in[1]) f(kz, iz, iy);
      }
    }
  }
  // The input row (z, y) of plane as f32 (converted into slot `at` of conv_row when T is not).
  const float* f32_row(int64_t plane, int64_t iz, int64_t iy, int64_t at, MaxPoolScratch& s) const {
    const T* src = xp_ + plane * win_.in_size() + (iz * win_.in[1] + iy) * win_.in[2];
    if constexpr (std::is_same_v<T, float>) {
      return src;
    } else {
      float* dst = s.conv_row.data() + at * win_.in[2];
      convert_span(src, dst, win_.in[2]);
      return dst;
    }
  }
  // Output row r: written in place when T is float, else through s.m.
  float* out_row(int64_t r, MaxPoolScratch& s) const {
    if constexpr (std::is_same_v<T, float>) return yp_ + r * win_.out[2];
    else return s.m.data();
  }
  void store(const float* out, int64_t r) const {
    if constexpr (!std::is_same_v<T, float>) convert_span(out, yp_ + r * win_.out[2], win_.out[2]);
  }

  const Window3& win_;
  const T* xp_;
  T* yp_;
  std::vector<int64_t> lo_, hi_;
  const bool vec_ = vec::has_avx2() && (win_.stride[2] == 1 || win_.stride[2] == 2);
};

template <class T>
void max_pool_rows(const Window3& win, int64_t planes, const T* xp, T* yp) {
  const MaxPoolRows<T> mp(win, xp, yp);
  if (mp.planes8()) {
    parallel_for(ceil_div(planes, 8), 1, [&](int64_t b, int64_t e) {
      thread_local MaxPoolScratch s;
      for (int64_t g = b; g < e; ++g) mp.run_planes8(8 * g, std::min<int64_t>(8, planes - 8 * g), s);
    });
    return;
  }
  // Tasks of (plane, output z, band of output rows): bands of ~16K outputs, split further to
  // give each thread ~4 tasks.
  const int64_t oh = win.out[1], od = win.out[0], units = planes * od, want = 4 * num_threads();
  int64_t band = std::clamp<int64_t>(16384 / std::max<int64_t>(1, win.out[2]), 1, oh);
  if (units * ceil_div(oh, band) < want) band = std::max<int64_t>(1, ceil_div(oh, ceil_div(want, units)));
  const int64_t bands = ceil_div(oh, band);
  parallel_for(units * bands, 1, [&](int64_t b, int64_t e) {
    thread_local MaxPoolScratch s;
    for (int64_t task = b; task < e; ++task) {
      const int64_t plane = task / (od * bands), oz = (task / bands) % od, oy0 = task % bands * band;
      mp.run_band(plane, oz, oy0, std::min(oh, oy0 + band), s);
    }
  });
}

template <class T>
void pool_impl(const ops::Pool& op, KernelContext& ctx) {
  using C = compute_t<T>;
  const Tensor& x = ctx.in[0];
  Tensor& y = ctx.out[0];
  if (y.numel() == 0) return;
  const auto& xs = x.shape();
  const auto& ys = y.shape();
  const size_t nd = xs.size() - 2;
  const std::vector<int64_t> in_sp(xs.begin() + 2, xs.end()), out_sp(ys.begin() + 2, ys.end());
  const Window3 win = make_window(in_sp, out_sp, op.kernel, op.stride, op.pads, op.dilation);
  int64_t pad_end[3] = {0, 0, 0};
  for (size_t i = 0; i < nd && !op.pads.empty(); ++i) pad_end[3 - nd + i] = op.pads[nd + i];
  const int64_t p = win.out_size(), in_sz = win.in_size();
  const bool is_max = op.kind == PoolKind::Max;
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, f16> || std::is_same_v<T, bf16>) {
    if (is_max) {
      max_pool_rows(win, xs[0] * xs[1], xp, yp);
      return;
    }
  }

  parallel_for(y.numel(), std::max<int64_t>(1, 16384 / std::max<int64_t>(1, win.k_size())), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t plane = i / p;
      int64_t rem = i % p;
      int64_t o[3];
      o[2] = rem % win.out[2];
      rem /= win.out[2];
      o[1] = rem % win.out[1];
      o[0] = rem / win.out[1];
      int64_t start[3], lo[3], hi[3];
      int64_t padded_count = 1;  // taps inside [-pad_begin, in + pad_end)
      for (int a = 0; a < 3; ++a) {
        start[a] = o[a] * win.stride[a] - win.pad[a];
        tap_range(start[a], win.dil[a], win.k[a], 0, win.in[a], lo[a], hi[a]);
        if (!is_max && op.count_include_pad) {
          int64_t plo, phi;
          tap_range(start[a], win.dil[a], win.k[a], -win.pad[a], win.in[a] + pad_end[a], plo, phi);
          padded_count *= phi - plo;
        }
      }
      const T* src = xp + plane * in_sz;
      if (is_max) {
        C m;
        if constexpr (std::is_floating_point_v<C>) m = -std::numeric_limits<C>::infinity();
        else m = std::numeric_limits<C>::lowest();
        for (int64_t kz = lo[0]; kz < hi[0]; ++kz)
          for (int64_t ky = lo[1]; ky < hi[1]; ++ky) {
            const int64_t iz = start[0] + kz * win.dil[0], iy = start[1] + ky * win.dil[1];
            const T* row = src + (iz * win.in[1] + iy) * win.in[2];
            for (int64_t kx = lo[2]; kx < hi[2]; ++kx) {
              const C v = load(row[start[2] + kx * win.dil[2]]);
              if constexpr (std::is_floating_point_v<C>) {
                if (v > m || std::isnan(v)) m = v;  // NaN propagates
              } else if (v > m) {
                m = v;
              }
            }
          }
        yp[i] = store<T>(m);
      } else {
        double sum = 0;
        for (int64_t kz = lo[0]; kz < hi[0]; ++kz)
          for (int64_t ky = lo[1]; ky < hi[1]; ++ky) {
            const int64_t iz = start[0] + kz * win.dil[0], iy = start[1] + ky * win.dil[1];
            const T* row = src + (iz * win.in[1] + iy) * win.in[2];
            for (int64_t kx = lo[2]; kx < hi[2]; ++kx) sum += static_cast<double>(load(row[start[2] + kx * win.dil[2]]));
          }
        const int64_t count = op.count_include_pad ? padded_count : (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]);
        yp[i] = store<T>(static_cast<C>(sum / static_cast<double>(count)));
      }
    }
  });
}

}  // namespace

void kernel(const ops::Pool& op, KernelContext& ctx) {
  const DType t = ctx.in[0].dtype();
  check(op.kind == PoolKind::Max || op.kind == PoolKind::Avg, "pool: invalid kind value");
  check(op.kind == PoolKind::Max ? (is_float(t) || is_int(t)) : is_float(t),
        std::string("pool: unsupported dtype ") + dtype_name(t) + " for " + enum_name(op.kind) + " pooling");
  visit_dtype(t, [&]<DType D>() {
    if constexpr (D != DType::Bool) pool_impl<typename dtype_storage<D>::type>(op, ctx);
  });
}

}  // namespace rlx::cpu
