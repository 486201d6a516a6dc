// CPU kernels: Resize (nearest / n-linear, ONNX coordinate transforms) and Pad (constant,
// reflect, edge; negative pads crop).
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "rlx/error.h"

namespace rlx::cpu {
namespace {

// Calls fn(row, base_index) for rows [b, e) of an index space `dims` whose last axis is the
// row, where base_index is the multi-index of the row's first element (last entry 0).
template <class Fn>
void for_rows(const std::vector<int64_t>& dims, int64_t b, int64_t e, const Fn& fn) {
  const size_t r = dims.size();
  std::vector<int64_t> idx(r, 0);
  int64_t rem = b;
  for (size_t a = r - 1; a-- > 0;) {
    idx[a] = rem % dims[a];
    rem /= dims[a];
  }
  for (int64_t row = b; row < e; ++row) {
    fn(row, idx);
    for (size_t a = r - 1; a-- > 0;) {
      if (++idx[a] < dims[a]) break;
      idx[a] = 0;
    }
  }
}

// ---- Resize ----------------------------------------------------------------

// Linear f32 resize whose axes before the last two never blend two inputs (batch and channel
// axes): each output row is one or two input rows, each interpolated along the last axis, then
// weighted. The interpolated input rows are computed once and kept (two per thread: an
// upsampled row reuses the rows the previous output row read), where the generic loop redid
// them for every output element of every row. Same operations in the same order as the generic
// loop (v = s[lo] * (1 - w) + s[hi] * w, or s[lo] where w is 0; acc = 0 + c0 * v0 (+ c1 * v1)):
// the same bits. False (nothing done) when the shape does not fit.
bool resize_linear_rows_f32(const std::vector<plan::ResizeAxisTable>& tab, const std::vector<int64_t>& xs,
                            const std::vector<int64_t>& ys, const std::vector<int64_t>& xstr, const float* xp,
                            float* yp) {
  const size_t r = xs.size();
  if (r < 2) return false;
  for (size_t a = 0; a + 2 < r; ++a)
    for (size_t o = 0; o < tab[a].w.size(); ++o)
      if (tab[a].w[o] != 0.0 && tab[a].lo[o] != tab[a].hi[o]) return false;
  const int64_t width = ys[r - 1], rows = product(ys) / width;
  const plan::ResizeAxisTable& last = tab[r - 1];
  const plan::ResizeAxisTable& vert = tab[r - 2];
  std::vector<float> wh(static_cast<size_t>(width)), omw(static_cast<size_t>(width));
  for (int64_t o = 0; o < width; ++o) {
    wh[static_cast<size_t>(o)] = static_cast<float>(last.w[static_cast<size_t>(o)]);
    omw[static_cast<size_t>(o)] = 1.f - wh[static_cast<size_t>(o)];
  }
  parallel_for(rows, std::max<int64_t>(1, 16384 / width), [&](int64_t b, int64_t e) {
    thread_local std::vector<float> cache[2];
    int64_t key[2] = {-1, -1};  // input offset of the row each slot holds
    for (auto& c : cache) c.resize(static_cast<size_t>(width));
    // The interpolated input row at offset `off`, computed into a slot other than `keep`.
    auto row_at = [&](int64_t off, int keep) -> const float* {
      for (int i = 0; i < 2; ++i)
        if (key[i] == off) return cache[i].data();
      const int slot = keep == 0 ? 1 : 0;
      float* v = cache[slot].data();
      const float* src = xp + off;
      for (int64_t o = 0; o < width; ++o) {
        const size_t u = static_cast<size_t>(o);
        const float a = src[last.lo[u]];
        v[o] = wh[u] == 0.f ? a : a * omw[u] + src[last.hi[u]] * wh[u];
      }
      key[slot] = off;
      return v;
    };
    for_rows(ys, b, e, [&](int64_t row, const std::vector<int64_t>& idx) {
      int64_t base = 0;
      for (size_t a = 0; a + 2 < r; ++a) base += tab[a].lo[static_cast<size_t>(idx[a])] * xstr[a];
      const size_t oy = static_cast<size_t>(idx[r - 2]);
      const float wy = static_cast<float>(vert.w[oy]);
      float* dst = yp + row * width;
      const float* v0 = row_at(base + vert.lo[oy] * xstr[r - 2], -1);
      if (wy == 0.f || vert.lo[oy] == vert.hi[oy]) {
        for (int64_t o = 0; o < width; ++o) dst[o] = 0.f + 1.f * v0[o];
        return;
      }
      const int slot0 = v0 == cache[0].data() ? 0 : 1;
      const float* v1 = row_at(base + vert.hi[oy] * xstr[r - 2], slot0);
      const float c0 = 1.f * (1.f - wy), c1 = 1.f * wy;
      for (int64_t o = 0; o < width; ++o) dst[o] = (0.f + c0 * v0[o]) + c1 * v1[o];
    });
  });
  return true;
}

template <class T>
void resize_impl(const ops::Resize& op, const Tensor& x, Tensor& y) {
  using C = compute_t<T>;
  const auto& xs = x.shape();
  const auto& ys = y.shape();
  const size_t r = xs.size();
  std::vector<plan::ResizeAxisTable> tab(r);
  for (size_t a = 0; a < r; ++a) tab[a] = plan::resize_axis_table(op, static_cast<int64_t>(a), xs[a], ys[a]);
  std::vector<int64_t> xstr(r, 1);
  for (size_t a = r - 1; a-- > 0;) xstr[a] = xstr[a + 1] * xs[a + 1];
  const int64_t width = ys[r - 1];
  const int64_t rows = y.numel() / width;
  const plan::ResizeAxisTable& last = tab[r - 1];
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  if constexpr (std::is_same_v<T, float>)
    if (op.mode != ResizeMode::Nearest && resize_linear_rows_f32(tab, xs, ys, xstr, xp, yp)) return;
  parallel_for(rows, std::max<int64_t>(1, 16384 / width), [&](int64_t b, int64_t e) {
    std::vector<std::pair<int64_t, C>> corners;  // (offset, weight) over the leading axes
    for_rows(ys, b, e, [&](int64_t row, const std::vector<int64_t>& idx) {
      corners.assign(1, {0, C(1)});
      for (size_t a = 0; a + 1 < r; ++a) {
        const plan::ResizeAxisTable& t = tab[a];
        const int64_t o = idx[a];
        const C wh = static_cast<C>(t.w[o]);
        if (wh == C(0) || t.lo[o] == t.hi[o]) {
          for (auto& c : corners) c.first += t.lo[o] * xstr[a];
          continue;
        }
        const size_t n = corners.size();
        for (size_t i = 0; i < n; ++i) {
          auto c = corners[i];
          corners[i] = {c.first + t.lo[o] * xstr[a], c.second * (C(1) - wh)};
          corners.push_back({c.first + t.hi[o] * xstr[a], c.second * wh});
        }
      }
      T* dst = yp + row * width;
      if (op.mode == ResizeMode::Nearest) {  // one corner, a plain copy (any dtype)
        const T* s = xp + corners[0].first;
        for (int64_t o = 0; o < width; ++o) dst[o] = s[last.lo[o]];
        return;
      }
      if constexpr (std::is_floating_point_v<C>) {
        for (int64_t o = 0; o < width; ++o) {
          const C wh = static_cast<C>(last.w[o]);
          C acc = 0;
          for (const auto& c : corners) {
            const T* s = xp + c.first;
            C v = load(s[last.lo[o]]);
            if (wh != C(0)) v = v * (C(1) - wh) + load(s[last.hi[o]]) * wh;
            acc += c.second * v;
          }
          dst[o] = store<T>(acc);
        }
      }
    });
  });
}

// ---- Pad -------------------------------------------------------------------

template <class T>
T pad_value(double v) {
  if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) return T(static_cast<float>(v));
  else return static_cast<T>(v);
}

template <class T>
void pad_impl(const ops::Pad& op, const Tensor& x, Tensor& y, T fill) {
  const auto& xs = x.shape();
  const auto& ys = y.shape();
  const size_t r = xs.size();
  const T* xp = static_cast<const T*>(x.raw());
  T* yp = static_cast<T*>(y.raw());
  if (r == 0) {
    yp[0] = xp[0];
    return;
  }
  // src[a][o]: input index feeding output index o along axis a, or -1 for the constant.
  const std::vector<std::vector<int64_t>> src = plan::pad_source_index(op, xs, ys);
  std::vector<int64_t> xstr(r, 1);
  for (size_t a = r - 1; a-- > 0;) xstr[a] = xstr[a + 1] * xs[a + 1];
  const int64_t width = ys[r - 1];
  const int64_t rows = y.numel() / width;
  const std::vector<int64_t>& last = src[r - 1];
  parallel_for(rows, std::max<int64_t>(1, 16384 / width), [&](int64_t b, int64_t e) {
    for_rows(ys, b, e, [&](int64_t row, const std::vector<int64_t>& idx) {
      T* dst = yp + row * width;
      int64_t base = 0;
      for (size_t a = 0; a + 1 < r; ++a) {
        const int64_t s = src[a][idx[a]];
        if (s < 0) {
          std::fill(dst, dst + width, fill);
          return;
        }
        base += s * xstr[a];
      }
      const T* s = xp + base;
      for (int64_t o = 0; o < width; ++o) dst[o] = last[o] < 0 ? fill : s[last[o]];
    });
  });
}

}  // namespace

void kernel(const ops::Resize& op, KernelContext& ctx) {
  const Tensor& x = ctx.in[0];
  Tensor& y = ctx.out[0];
  check(op.mode == ResizeMode::Nearest || is_float(x.dtype()),
        std::string("resize: linear mode needs a float tensor, got ") + dtype_name(x.dtype()));
  if (y.numel() == 0) return;
  visit_dtype(x.dtype(), [&]<DType D>() { resize_impl<typename dtype_storage<D>::type>(op, x, y); });
}

void kernel(const ops::Pad& op, KernelContext& ctx) {
  const Tensor& x = ctx.in[0];
  Tensor& y = ctx.out[0];
  if (y.numel() == 0) return;
  visit_dtype(x.dtype(), [&]<DType D>() {
    using T = typename dtype_storage<D>::type;
    T fill{};
    if (op.mode == PadMode::Constant) {
      if constexpr (D == DType::Bool) fill = op.value != 0.0 ? 1 : 0;
      else fill = pad_value<T>(op.value);
    }
    pad_impl<T>(op, x, y, fill);
  });
}

}  // namespace rlx::cpu
