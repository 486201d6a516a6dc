#pragma once
// Internal to the CPU vision kernels: sliding-window geometry for 1-3 spatial dims and the
// im2col / col2im loops shared by Conv, ConvTranspose, Pool and Im2Col.
//
// Every geometry is lifted to 3 spatial dims: missing leading dims get size 1, kernel 1,
// stride 1, pad 0, dilation 1, so one set of loops serves 1-d, 2-d and 3-d.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backends/cpu/vec_rows.h"
#include "rlx/dtype.h"

namespace rlx::cpu {

// The attribute `v` when set, else `n` copies of `def` (shape inference validated sizes).
inline std::vector<int64_t> attr_or(const std::vector<int64_t>& v, size_t n, int64_t def) {
  return v.empty() ? std::vector<int64_t>(n, def) : v;
}

// Floor / ceil division for any signs of `a` (b > 0).
inline int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
inline int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

struct Window3 {
  int64_t in[3] = {1, 1, 1};
  int64_t out[3] = {1, 1, 1};
  int64_t k[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1};
  int64_t pad[3] = {0, 0, 0};  // begin pads (end pads only matter for the output size)
  int64_t dil[3] = {1, 1, 1};

  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
  int64_t k_size() const { return k[0] * k[1] * k[2]; }
  // Along axis a: the input span of one window, and the padded input span all outputs read.
  int64_t tap_extent(int a) const { return (k[a] - 1) * dil[a] + 1; }
  int64_t read_extent(int a) const { return (out[a] - 1) * stride[a] + tap_extent(a); }

  // Output positions o along axis a whose input index o*stride - pad + kk*dil lies in [0, in):
  // returns [lo, hi) clipped to [0, out).
  void valid_range(int a, int64_t kk, int64_t& lo, int64_t& hi) const {
    int64_t off = pad[a] - kk * dil[a];
    lo = std::clamp<int64_t>(ceil_div(off, stride[a]), 0, out[a]);
    hi = std::clamp<int64_t>(ceil_div(in[a] + off, stride[a]), lo, out[a]);
  }
};

// Builds the lifted geometry. `in_sp` / `out_sp` / `kernel` have the same length (1..3);
// stride / dilation have that length or are empty; pads have twice that length or are empty.
inline Window3 make_window(const std::vector<int64_t>& in_sp, const std::vector<int64_t>& out_sp,
                           const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                           const std::vector<int64_t>& pads, const std::vector<int64_t>& dilation) {
  Window3 w;
  const size_t nd = in_sp.size();
  const size_t shift = 3 - nd;
  for (size_t i = 0; i < nd; ++i) {
    w.in[shift + i] = in_sp[i];
    w.out[shift + i] = out_sp[i];
    w.k[shift + i] = kernel[i];
    w.stride[shift + i] = stride.empty() ? 1 : stride[i];
    w.pad[shift + i] = pads.empty() ? 0 : pads[i];
    w.dil[shift + i] = dilation.empty() ? 1 : dilation[i];
  }
  return w;
}

template <class D, class S>
inline D convert_value(const S& v) {
  if constexpr (std::is_same_v<D, S>) return v;
  else return store<D>(load(v));
}

// dst[i] = src[i] converted, n values (f16 -> f32 on F16C lanes).
template <class S, class D>
inline void convert_span(const S* src, D* dst, int64_t n) {
  if constexpr (std::is_same_v<S, D>) std::copy(src, src + n, dst);
  else if constexpr (std::is_same_v<S, f16> && std::is_same_v<D, float>) f16_to_f32(src, dst, n);
  else if constexpr (std::is_same_v<S, float> && std::is_same_v<D, f16>) f32_to_f16(src, dst, n);
  else for (int64_t i = 0; i < n; ++i) dst[i] = convert_value<D>(src[i]);
}

// dy[ox] = s0[2 * ox] for ox in [a, b) four at a time (every load below s0 + 2b + 4): returns
// where it stopped (the caller finishes the rest one by one).
inline int64_t im2col_stride2_f32(const float* s0, float* dy, int64_t a, int64_t b) {
  typedef float v4 __attribute__((vector_size(16)));
  int64_t ox = a;
  for (; ox + 4 <= b; ox += 4) {
    v4 lo, hi;
    std::memcpy(&lo, s0 + 2 * ox, sizeof lo);
    std::memcpy(&hi, s0 + 2 * ox + 4, sizeof hi);
    const v4 even = __builtin_shufflevector(lo, hi, 0, 2, 4, 6);
    std::memcpy(dy + ox, &even, sizeof even);
  }
  return ox;
}

// One output row segment of an unfolded row: d[ox] = 0 for ox in [from, lo) and [hi, to), else
// s0[ox * sx] converted (s0 points at the row's input element for ox = 0, valid below
// s0 + row_end). Plain loops: rows of small planes are a few dozen values, where a memmove /
// memset call per segment costs more than the copying.
template <class S, class D>
inline void im2col_segment(const S* s0, int64_t sx, int64_t row_end, D* d, int64_t from, int64_t lo, int64_t hi,
                           int64_t to) {
  const D zero{};
  for (int64_t ox = from; ox < lo; ++ox) d[ox] = zero;
  if (sx == 1) {
    if constexpr (std::is_same_v<S, D>) {
      for (int64_t ox = lo; ox < hi; ++ox) d[ox] = s0[ox];
    } else {
      convert_span(s0 + lo, d + lo, hi - lo);
    }
  } else {
    int64_t ox = lo;
    // Stride 2 (stems): 4 outputs from two 4-float loads, even lanes kept, while the second
    // load ends inside the row.
    if constexpr (std::is_same_v<S, float> && std::is_same_v<D, float>)
      if (sx == 2) ox = im2col_stride2_f32(s0, d, lo, std::min(hi, (row_end - 4) / 2));
    for (; ox < hi; ++ox) d[ox] = convert_value<D>(s0[ox * sx]);
  }
  for (int64_t ox = hi; ox < to; ++ox) d[ox] = zero;
}

// x: C planes of w.in_size() elements. col: (C * k_size) rows of w.out_size() elements, row
// index (c, kz, ky, kx) row-major (torch unfold order), zero where the window reads padding.
template <class S, class D>
void im2col(const S* x, int64_t C, const Window3& w, D* col) {
  const int64_t P = w.out_size();
  const int64_t ohw = w.out[1] * w.out[2];
  const D zero{};
  for (int64_t c = 0; c < C; ++c) {
    const S* plane = x + c * w.in_size();
    for (int64_t kz = 0; kz < w.k[0]; ++kz)
      for (int64_t ky = 0; ky < w.k[1]; ++ky)
        for (int64_t kx = 0; kx < w.k[2]; ++kx) {
          const int64_t row = ((c * w.k[0] + kz) * w.k[1] + ky) * w.k[2] + kx;
          D* dst = col + row * P;
          int64_t zlo, zhi, ylo, yhi, xlo, xhi;
          w.valid_range(0, kz, zlo, zhi);
          w.valid_range(1, ky, ylo, yhi);
          w.valid_range(2, kx, xlo, xhi);
          const int64_t row_end = w.in[2] + w.pad[2] - kx * w.dil[2];  // an input row is s0[0, row_end)
          std::fill(dst, dst + zlo * ohw, zero);
          for (int64_t oz = zlo; oz < zhi; ++oz) {
            const int64_t iz = oz * w.stride[0] - w.pad[0] + kz * w.dil[0];
            D* dz = dst + oz * ohw;
            std::fill(dz, dz + ylo * w.out[2], zero);
            for (int64_t oy = ylo; oy < yhi; ++oy) {
              const int64_t iy = oy * w.stride[1] - w.pad[1] + ky * w.dil[1];
              const S* s0 = plane + (iz * w.in[1] + iy) * w.in[2] - w.pad[2] + kx * w.dil[2];
              im2col_segment(s0, w.stride[2], row_end, dz + oy * w.out[2], 0, xlo, xhi, w.out[2]);
            }
            std::fill(dz + yhi * w.out[2], dz + ohw, zero);
          }
          std::fill(dst + zhi * ohw, dst + P, zero);
        }
  }
}

// The columns [j0, j1) of im2col's matrix (output positions in flat order): col holds (C *
// k_size) rows of j1 - j0 elements, the same values im2col writes there. Lets a conv unfold one
// band of its output at a time (a cache-sized buffer instead of C * k * P elements).
template <class S, class D>
void im2col_cols(const S* x, int64_t C, const Window3& w, int64_t j0, int64_t j1, D* col) {
  const int64_t n = j1 - j0, ow = w.out[2], ohw = w.out[1] * ow;
  const D zero{};
  for (int64_t c = 0; c < C; ++c) {
    const S* plane = x + c * w.in_size();
    for (int64_t kz = 0; kz < w.k[0]; ++kz)
      for (int64_t ky = 0; ky < w.k[1]; ++ky)
        for (int64_t kx = 0; kx < w.k[2]; ++kx) {
          D* dst = col + (((c * w.k[0] + kz) * w.k[1] + ky) * w.k[2] + kx) * n;
          int64_t xlo, xhi;
          w.valid_range(2, kx, xlo, xhi);
          const int64_t row_end = w.in[2] + w.pad[2] - kx * w.dil[2];  // an input row is s0[0, row_end)
          for (int64_t j = j0; j < j1;) {  // one output row segment at a time
            const int64_t oz = j / ohw, oy = (j % ohw) / ow, ox0 = j % ow;
            const int64_t end = std::min(j1, j - ox0 + ow), ox1 = ox0 + (end - j);
            D* d = dst + (j - j0) - ox0;  // d[ox] is column (oz, oy, ox)
            const int64_t iz = oz * w.stride[0] - w.pad[0] + kz * w.dil[0];
            const int64_t iy = oy * w.stride[1] - w.pad[1] + ky * w.dil[1];
            if (iz < 0 || iz >= w.in[0] || iy < 0 || iy >= w.in[1]) {
              std::fill(d + ox0, d + ox1, zero);
            } else {
              const int64_t a = std::clamp(xlo, ox0, ox1), b = std::clamp(xhi, a, ox1);
              const S* s0 = plane + (iz * w.in[1] + iy) * w.in[2] - w.pad[2] + kx * w.dil[2];
              im2col_segment(s0, w.stride[2], row_end, d, ox0, a, b, ox1);
            }
            j = end;
          }
        }
  }
}

// Inverse scatter of im2col: out[c, position] += col[(c, kz, ky, kx), p] for every window
// position that lands inside the output. Here the roles swap: `w.out` is the grid the columns
// run over (the ConvTranspose input) and `w.in` the grid written (the ConvTranspose output).
template <class A>
void col2im_add(const A* col, int64_t C, const Window3& w, A* out) {
  const int64_t P = w.out_size();
  const int64_t ohw = w.out[1] * w.out[2];
  for (int64_t c = 0; c < C; ++c) {
    A* plane = out + c * w.in_size();
    for (int64_t kz = 0; kz < w.k[0]; ++kz)
      for (int64_t ky = 0; ky < w.k[1]; ++ky)
        for (int64_t kx = 0; kx < w.k[2]; ++kx) {
          const int64_t row = ((c * w.k[0] + kz) * w.k[1] + ky) * w.k[2] + kx;
          const A* src = col + row * P;
          int64_t zlo, zhi, ylo, yhi, xlo, xhi;
          w.valid_range(0, kz, zlo, zhi);
          w.valid_range(1, ky, ylo, yhi);
          w.valid_range(2, kx, xlo, xhi);
          for (int64_t oz = zlo; oz < zhi; ++oz) {
            const int64_t iz = oz * w.stride[0] - w.pad[0] + kz * w.dil[0];
            for (int64_t oy = ylo; oy < yhi; ++oy) {
              const int64_t iy = oy * w.stride[1] - w.pad[1] + ky * w.dil[1];
              A* dst = plane + (iz * w.in[1] + iy) * w.in[2];
              const A* s = src + oz * ohw + oy * w.out[2];
              const int64_t sx = w.stride[2];
              for (int64_t ox = xlo, ix = xlo * sx - w.pad[2] + kx * w.dil[2]; ox < xhi; ++ox, ix += sx)
                dst[ix] += s[ox];
            }
          }
        }
  }
}

}  // namespace rlx::cpu
