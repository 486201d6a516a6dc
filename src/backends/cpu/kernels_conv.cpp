// CPU kernels: Conv (1-3 spatial dims: im2col + gemm; a 1x1 stride-1 conv is a gemm on the input
// as it lies; f32 2-d / 1-d convs of small and medium maps with sums below 1024 taps run
// without im2col (conv_direct.h); f32 convs of one group run on rlx's own tile kernel (conv_gemm.h), and take the
// executor's fused consumer step as an epilogue (conv_epilogue.h); a depthwise conv, one input
// channel per group, runs as a direct sliding-window loop, f32 2-d planes on zero-padded rows
// (depthwise_avx2.h)), ConvTranspose (2-d, gemm + col2im), Im2Col.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "backends/cpu/blas.h"
#include "backends/cpu/conv_direct.h"
#include "backends/cpu/conv_epilogue.h"
#include "backends/cpu/conv_gemm.h"
#include "backends/cpu/depthwise_avx2.h"
#include "backends/cpu/depthwise_channels_avx2.h"
#include "backends/cpu/im2col.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/vec_math.h"
#include "rlx/error.h"

#pragma GCC diagnostic ignored "-Wpsabi"  // 8-lane bodies only run inlined in AVX2 functions (vec_math.h)

namespace rlx::cpu {
namespace {

std::vector<int64_t> spatial(const std::vector<int64_t>& dims) { return {dims.begin() + 2, dims.end()}; }

// The gemm type of a storage type: double for f64, float for f32/f16/bf16.
template <class T> using gemm_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// `src` converted to the gemm type (no copy when it already is).
template <class T, class A = gemm_t<T>>
const A* as_gemm_type(const Tensor& t, std::vector<A>& buf) {
  const T* p = t.data<T>();
  if constexpr (std::is_same_v<T, A>) {
    return p;
  } else {
    buf.resize(static_cast<size_t>(t.numel()));
    convert_span(p, buf.data(), t.numel());
    return buf.data();
  }
}

// Runs fn(task, scratch) for task in [0, n). Tasks run in parallel when there are several and
// each chunk gets its own scratch; a single task runs inline (and may parallelize inside).
template <class Scratch, class Fn>
void for_tasks(int64_t n, int64_t cost_per_task, const Fn& fn) {
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, cost_per_task));
  parallel_for(n, grain, [&](int64_t b, int64_t e) {
    // Each thread keeps its scratch between calls (no page faults on fresh im2col buffers every
    // run); buffers above kKeepBytes are released after the call.
    thread_local Scratch scratch;
    for (int64_t t = b; t < e; ++t) fn(t, scratch, n == 1);
    scratch.trim();
  });
}

template <class A>
struct ConvScratch {
  std::vector<A> col, acc, xa;
  static constexpr size_t kKeepBytes = size_t{8} << 20;
  void trim() {
    for (auto* v : {&col, &acc, &xa})
      if (v->capacity() * sizeof(A) > kKeepBytes) std::vector<A>().swap(*v);
  }
};

// Depthwise conv, one output plane: y[o] = bias + sum over taps of w[tap] * x[window(o, tap)],
// accumulated in A over output rows (each tap adds a strided slice of an input row to the whole
// valid span of the output row: the inner loop runs over contiguous outputs and vectorizes).
// `acc` holds one output row when T is not A (else the row of y is the accumulator).
template <class T, class A>
RLX_VEC_INLINE void depthwise_plane_body(const T* x, const A* w, A bias, const Window3& win, T* y, A* acc) {
  const int64_t ow = win.out[2], ohw = win.out[1] * ow, sx = win.stride[2];
  for (int64_t oz = 0; oz < win.out[0]; ++oz)
    for (int64_t oy = 0; oy < win.out[1]; ++oy) {
      A* a;
      if constexpr (std::is_same_v<T, A>) a = y + oz * ohw + oy * ow;
      else a = acc;
      for (int64_t ox = 0; ox < ow; ++ox) a[ox] = bias;
      for (int64_t kz = 0; kz < win.k[0]; ++kz) {
        const int64_t iz = oz * win.stride[0] - win.pad[0] + kz * win.dil[0];
        if (iz < 0 || iz >= win.in[0]) continue;
        for (int64_t ky = 0; ky < win.k[1]; ++ky) {
          const int64_t iy = oy * win.stride[1] - win.pad[1] + ky * win.dil[1];
          if (iy < 0 || iy >= win.in[1]) continue;
          const T* row = x + (iz * win.in[1] + iy) * win.in[2];
          const A* wk = w + (kz * win.k[1] + ky) * win.k[2];
          for (int64_t kx = 0; kx < win.k[2]; ++kx) {
            int64_t lo, hi;
            win.valid_range(2, kx, lo, hi);
            const A wv = wk[kx];
            const T* src = row + lo * sx - win.pad[2] + kx * win.dil[2];
            A* dst = a + lo;
            const int64_t len = hi - lo;
            if (sx == 1) {
              for (int64_t i = 0; i < len; ++i) dst[i] += wv * A(load(src[i]));
            } else if (sx == 2) {
              for (int64_t i = 0; i < len; ++i) dst[i] += wv * A(load(src[2 * i]));
            } else {
              for (int64_t i = 0; i < len; ++i) dst[i] += wv * A(load(src[i * sx]));
            }
          }
        }
      }
      if constexpr (!std::is_same_v<T, A>) {
        T* yr = y + oz * ohw + oy * ow;
        for (int64_t ox = 0; ox < ow; ++ox) yr[ox] = store<T>(a[ox]);
      }
    }
}

// NB * kV outputs of the f32 depthwise plane from column ox on, stride SX (1 or 2) along x:
// bias, then the taps in (kz, ky, kx) order, as depthwise_plane_f32_body's scalar sums. Every
// load must lie inside its input row (stride 2 loads 2 kV floats per block and keeps the even
// ones). NB blocks at once keep NB independent add chains in flight.
template <class V, int NB, int SX>
RLX_VEC_INLINE void depthwise_block(int64_t ox, float bias, int64_t nr, const float* const* rows,
                                    const float* const* wrows, int64_t kx_n, int64_t dx, int64_t px, float* yr) {
  constexpr int L = vec::kLanes<V>;
  V a[NB];
  for (int j = 0; j < NB; ++j) a[j] = vec::splat<V>(bias);
  for (int64_t r = 0; r < nr; ++r) {
    const float* src = rows[r] + ox * SX - px;
    const float* wr = wrows[r];
    for (int64_t kx = 0; kx < kx_n; ++kx) {
      const V wv = vec::splat<V>(wr[kx]);
      const float* s = src + kx * dx;
      for (int j = 0; j < NB; ++j) {
        if constexpr (SX == 1) {
          a[j] += wv * vec::load<V>(s + j * L);
        } else {
          const V lo = vec::load<V>(s + 2 * j * L), hi = vec::load<V>(s + 2 * j * L + L);
          V v;
          if constexpr (L == 8) v = __builtin_shufflevector(lo, hi, 0, 2, 4, 6, 8, 10, 12, 14);
          else v = __builtin_shufflevector(lo, hi, 0, 2, 4, 6);
          a[j] += wv * v;
        }
      }
    }
  }
  for (int j = 0; j < NB; ++j) vec::store<V>(yr + ox + j * L, a[j]);
}

// Vector blocks over the output columns [xa, xb) (every load inside the rows; xb - xa >= L):
// 4, 2, then 1 block of kV at a time, the last block moved back to end at xb (its overlapping
// outputs get the same bits again).
template <class V, int SX>
RLX_VEC_INLINE void depthwise_span(int64_t xa, int64_t xb, float bias, int64_t nr, const float* const* rows,
                                   const float* const* wrows, int64_t kx_n, int64_t dx, int64_t px, float* yr) {
  constexpr int64_t L = vec::kLanes<V>;
  int64_t ox = xa;
  for (; ox + 4 * L <= xb; ox += 4 * L) depthwise_block<V, 4, SX>(ox, bias, nr, rows, wrows, kx_n, dx, px, yr);
  for (; ox + 2 * L <= xb; ox += 2 * L) depthwise_block<V, 2, SX>(ox, bias, nr, rows, wrows, kx_n, dx, px, yr);
  for (; ox + L <= xb; ox += L) depthwise_block<V, 1, SX>(ox, bias, nr, rows, wrows, kx_n, dx, px, yr);
  if (ox < xb) depthwise_block<V, 1, SX>(xb - L, bias, nr, rows, wrows, kx_n, dx, px, yr);
}

// The f32 plane on lanes of V (and of 4 lanes for narrow spans): for each output row the valid
// (kz, ky) tap rows are listed; the columns whose every load lies inside the input (the
// interior; for stride 2 also the second load of each block) are summed in vector registers
// (depthwise_span); the other columns, and every column of other strides, run the same sums one
// output at a time.
template <class V>
RLX_VEC_INLINE void depthwise_plane_f32_body(const float* x, const float* w, float bias, const Window3& win, float* y,
                                             const float** rows, const float** wrows) {
  constexpr int64_t L = vec::kLanes<V>;
  const int64_t ow = win.out[2], ohw = win.out[1] * ow, sx = win.stride[2], kx_n = win.k[2], dx = win.dil[2];
  const int64_t px = win.pad[2], iw = win.in[2];
  int64_t xa = 0, xb = ow;  // the interior columns
  for (int64_t kx = 0; kx < kx_n; ++kx) {
    int64_t lo, hi;
    win.valid_range(2, kx, lo, hi);
    xa = std::max(xa, lo);
    xb = std::min(xb, hi);
  }
  // Stride 2: a block ending at column e loads up to index 2e - px + (kx_n - 1) dx - 1.
  if (sx == 2) xb = std::min(xb, floor_div(iw + px - (kx_n - 1) * dx, 2));
  if (xb < xa || (sx != 1 && sx != 2)) xb = xa;
  const int64_t lanes = xb - xa >= L ? L : xb - xa >= 4 ? 4 : 0;  // 0: no vector span
  if (lanes == 0) xb = xa;
  for (int64_t oz = 0; oz < win.out[0]; ++oz)
    for (int64_t oy = 0; oy < win.out[1]; ++oy) {
      int64_t nr = 0;
      for (int64_t kz = 0; kz < win.k[0]; ++kz) {
        const int64_t iz = oz * win.stride[0] - win.pad[0] + kz * win.dil[0];
        if (iz < 0 || iz >= win.in[0]) continue;
        for (int64_t ky = 0; ky < win.k[1]; ++ky) {
          const int64_t iy = oy * win.stride[1] - win.pad[1] + ky * win.dil[1];
          if (iy < 0 || iy >= win.in[1]) continue;
          rows[nr] = x + (iz * win.in[1] + iy) * iw;
          wrows[nr++] = w + (kz * win.k[1] + ky) * kx_n;
        }
      }
      float* yr = y + oz * ohw + oy * ow;
      if (lanes == L) {
        if (sx == 1) depthwise_span<V, 1>(xa, xb, bias, nr, rows, wrows, kx_n, dx, px, yr);
        else depthwise_span<V, 2>(xa, xb, bias, nr, rows, wrows, kx_n, dx, px, yr);
      } else if (lanes == 4) {
        if (sx == 1) depthwise_span<vec::f32x4, 1>(xa, xb, bias, nr, rows, wrows, kx_n, dx, px, yr);
        else depthwise_span<vec::f32x4, 2>(xa, xb, bias, nr, rows, wrows, kx_n, dx, px, yr);
      }
      for (int64_t ox = 0; ox < ow; ++ox) {
        if (ox == xa && xb > xa) ox = xb;
        if (ox >= ow) break;
        float a = bias;
        for (int64_t r = 0; r < nr; ++r)
          for (int64_t kx = 0; kx < kx_n; ++kx) {
            const int64_t ix = ox * sx - px + kx * dx;
            if (ix >= 0 && ix < iw) a += wrows[r][kx] * rows[r][ix];
          }
        yr[ox] = a;
      }
    }
}

template <class T, class A>
void depthwise_plane(const T* x, const A* w, A bias, const Window3& win, T* y, A* acc) {
  depthwise_plane_body(x, w, bias, win, y, acc);
}
void depthwise_plane_f32(const float* x, const float* w, float bias, const Window3& win, float* y, const float** rows,
                         const float** wrows) {
  depthwise_plane_f32_body<vec::f32x4>(x, w, bias, win, y, rows, wrows);
}
#if RLX_VEC_X86
// The same loops compiled for AVX2 (8-lane vectors; no contraction, so the same bits).
template <class T, class A>
RLX_VEC_AVX2 void depthwise_plane_avx2(const T* x, const A* w, A bias, const Window3& win, T* y, A* acc) {
  depthwise_plane_body(x, w, bias, win, y, acc);
}
RLX_VEC_AVX2 void depthwise_plane_f32_avx2(const float* x, const float* w, float bias, const Window3& win, float* y,
                                           const float** rows, const float** wrows) {
  depthwise_plane_f32_body<vec::f32x8>(x, w, bias, win, y, rows, wrows);
}
#endif

// Conv whose groups each read one input channel (depthwise; groups == C, any channel multiplier
// Cout / C): output channel o reads input channel o / (Cout / C). Planes run in parallel.
template <class T>
void depthwise_impl(const Window3& win, int64_t n_batch, int64_t c, int64_t cout, const T* xp, const gemm_t<T>* wp,
                    const gemm_t<T>* bp, T* yp, const ConvEpilogue* epi) {
  using A = gemm_t<T>;
  const int64_t mult = cout / c, k = win.k_size(), p = win.out_size(), in_sz = win.in_size();
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, k * p));
#if RLX_VEC_X86
  const bool avx2 = vec::has_avx2();
#endif
  // f32 with stride 1 along x and some output columns reading the x padding: each input plane
  // is first copied into rows padded with zeros on both sides (no x padding left in the
  // geometry `pwin`), so that every column runs on vectors (a padding tap adds w * 0, as the
  // im2col path's zero columns do). Stride 2 reads few padding columns: measured faster
  // without the copy (MobileNet 112x112 -> 56x56: 0.34 vs 0.39 ms; 56x56 stride 1: 0.30 -> 0.28).
  Window3 pwin = win;
  bool pad_x = false;
  if constexpr (std::is_same_v<T, float>) {
    const int64_t sx = win.stride[2], ext = (win.k[2] - 1) * win.dil[2];
    bool border = false;
    for (int64_t kx = 0; kx < win.k[2]; ++kx) {
      int64_t lo, hi;
      win.valid_range(2, kx, lo, hi);
      border = border || lo > 0 || hi < win.out[2];
    }
    if (border && sx == 1 && win.out[2] >= 4) {
      pad_x = true;
      pwin.in[2] = std::max(win.in[2] + win.pad[2], sx * win.out[2] + ext) + 1;
      pwin.pad[2] = 0;
    }
  }
  // f32 2-d / 1-d planes with x stride 1 or 2 on AVX2: every plane copied into zero-padded rows
  // and summed on vectors only (depthwise_avx2.h; MobileNet's 7x7 and 14x14 planes ran ~3x
  // slower through the per-row border handling below).
  bool padded_all = false;
  PaddedPlane pg;
  if constexpr (std::is_same_v<T, float>) {
    padded_all = depthwise_padded_usable(win);
    if (padded_all) {
      pg = depthwise_padded_geometry(win);
      pad_x = false;
    }
  }
  if constexpr (std::is_same_v<T, float>) {
    // Small planes: eight channels in the vector lanes (depthwise_channels_avx2.h). MobileNetV3
    // export, 8x7 and 4x4 maps: its 5x5 depthwise steps 104 -> 53 ms over 330 runs.
    if (mult == 1 && depthwise_channels_usable(win) && depthwise_channels_preferred(win)) {
      const int64_t blocks = (c + 7) / 8;
      const int64_t block_grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, 8 * k * p));
      parallel_for(n_batch * blocks, block_grain, [&](int64_t b, int64_t e) {
        thread_local DepthwiseChannelsScratch scratch;
        thread_local std::vector<float> staged;  // the block's planes before the epilogue
        for (int64_t t = b; t < e; ++t) {
          const int64_t n = t / blocks, c0 = (t % blocks) * 8, nch = std::min<int64_t>(8, c - c0);
          const int64_t first = (n * cout + c0) * p;
          float* yt = yp + first;
          if (epi) {
            staged.resize(static_cast<size_t>(8 * p));
            yt = staged.data();
          }
          depthwise_channels_avx2(xp + (n * c + c0) * in_sz, nch, wp + c0 * k, bp ? bp + c0 : nullptr, win, yt, scratch);
          if (epi) epi->apply(yt, first, nch * p);
        }
      });
      return;
    }
  }
  parallel_for(n_batch * cout, grain, [&](int64_t b, int64_t e) {
    std::vector<float> padded;
    if (pad_x) padded.assign(static_cast<size_t>(pwin.in[0] * pwin.in[1] * pwin.in[2]), 0.f);
    if (padded_all) padded.assign(static_cast<size_t>(pg.width * pg.height), 0.f);
    int64_t padded_plane = -1;  // the input plane `padded` holds
    std::vector<A> acc;
    if constexpr (!std::is_same_v<T, A>) acc.resize(static_cast<size_t>(win.out[2]));
    // With an epilogue: consecutive output planes (contiguous in y) gather here and go through
    // it ~4K values at once.
    std::vector<float> plane_out;
    const int64_t batch_planes = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, p));
    int64_t pending = 0, first = b;
    if (epi) plane_out.resize(static_cast<size_t>(batch_planes * p));
    std::vector<const float*> rows, wrows;  // the f32 path's tap rows of one output row
    if constexpr (std::is_same_v<T, float>) {
      rows.resize(static_cast<size_t>(win.k[0] * win.k[1]));
      wrows.resize(rows.size());
    }
    for (int64_t t = b; t < e; ++t) {
      const int64_t n = t / cout, o = t % cout;
      const T* x = xp + (n * c + o / mult) * in_sz;
      const A bias = bp ? bp[o] : A(0);
      if constexpr (std::is_same_v<T, float>) {
        const Window3* g = &win;
        float* yt = epi ? plane_out.data() + pending * p : yp + t * p;
        if (padded_all) {
          const int64_t plane = n * c + o / mult, iw = win.in[2];
          if (plane != padded_plane) {  // zeros stay in the pads
            for (int64_t r = 0; r < win.in[1]; ++r)
              std::copy(x + r * iw, x + (r + 1) * iw, padded.data() + (r + win.pad[1]) * pg.width + win.pad[2]);
            padded_plane = plane;
          }
          depthwise_padded_avx2(padded.data(), pg, wp + o * k, bias, win, yt);
        } else if (pad_x) {
          const int64_t plane = n * c + o / mult, iw = win.in[2], pw = pwin.in[2], lp = win.pad[2];
          if (plane != padded_plane) {  // zeros stay in the pads; the data lands at column lp
            for (int64_t r = 0; r < win.in[0] * win.in[1]; ++r)
              std::copy(x + r * iw, x + (r + 1) * iw, padded.data() + r * pw + lp);
            padded_plane = plane;
          }
          x = padded.data();
          g = &pwin;
        }
        if (!padded_all) {
#if RLX_VEC_X86
          if (avx2) depthwise_plane_f32_avx2(x, wp + o * k, bias, *g, yt, rows.data(), wrows.data());
          else
#endif
            depthwise_plane_f32(x, wp + o * k, bias, *g, yt, rows.data(), wrows.data());
        }
        if (epi && (++pending == batch_planes || t + 1 == e)) {
          epi->apply(plane_out.data(), first * p, pending * p);
          first = t + 1;
          pending = 0;
        }
        continue;
      }
#if RLX_VEC_X86
      if (avx2) {
        depthwise_plane_avx2<T, A>(x, wp + o * k, bias, win, yp + t * p, acc.data());
        continue;
      }
#endif
      depthwise_plane<T, A>(x, wp + o * k, bias, win, yp + t * p, acc.data());
    }
  });
}

// The f32 conv of one group (groups == 1) on conv_gemm: a pointwise conv reads the input as it
// lies, others unfold it first (im2col). Images run in parallel; one image splits its product.
void conv_f32_gemm(const Window3& win, bool pointwise, int64_t n_batch, int64_t c, int64_t cout, const float* xp,
                   const float* wp, const float* bp, float* yp, const ConvEpilogue* epi) {
  const int64_t k = win.k_size(), ck = c * k, p = win.out_size(), in_sz = win.in_size();
  for_tasks<ConvScratch<float>>(n_batch, cout * ck * p + ck * p, [&](int64_t n, ConvScratch<float>& s, bool alone) {
    const float* xn = xp + n * c * in_sz;
    const float* col = xn;
    if (!pointwise && ck > 0) {
      s.col.resize(static_cast<size_t>(ck * p));
      float* colp = s.col.data();
      if (alone && c > 1) {
        parallel_for(c, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, k * p)), [&](int64_t b, int64_t e) {
          for (int64_t ci = b; ci < e; ++ci) im2col(xn + ci * in_sz, 1, win, colp + ci * k * p);
        });
      } else {
        im2col(xn, c, win, colp);
      }
      col = colp;
    }
    ConvGemm g;
    g.m = cout;
    g.n = p;
    g.k = ck;
    g.w = wp;
    g.b = col;
    g.ldb = p;
    g.bias = bp;
    g.y = yp + n * cout * p;
    g.y_offset = n * cout * p;
    g.epi = epi;
    conv_gemm(g, alone);
  });
}

// A conv whose unfolded input (cgk x p values per group) would exceed this many bytes runs in
// bands of output columns (conv_banded); below it one im2col matrix per task is cheaper.
constexpr int64_t kBandedColBytes = int64_t{4} << 20;
// Bytes of one band's unfolded columns: large enough for an efficient product, small enough
// to stay in L2 with the weights streaming past.
constexpr int64_t kBandBytes = int64_t{512} << 10;

// A conv with a large unfolded input (high resolution, e.g. 64 channels x 3x3 at 512x512: a
// 600 MB im2col matrix) as bands of output columns: each band of each (image, group) unfolds
// only its columns (im2col_cols) into the thread's scratch and multiplies them on one BLAS
// thread into the band's columns of y (f32) or of an A accumulator stored to T; bands run in
// parallel. The epilogue (f32 only) runs on each finished band, row segment by row segment.
template <class T, class A>
void conv_banded(const Window3& win, int64_t n_batch, int64_t groups, int64_t cg, int64_t coutg, const T* xp,
                 const A* wp, const A* bp, T* yp, const ConvEpilogue* epi) {
  const int64_t k = win.k_size(), cgk = cg * k, p = win.out_size(), in_sz = win.in_size();
  const int64_t band = std::min(p, std::max<int64_t>(64, kBandBytes / (static_cast<int64_t>(sizeof(A)) * cgk) / 16 * 16));
  const int64_t nbands = (p + band - 1) / band, tasks = n_batch * groups * nbands;
  parallel_for(tasks, 1, [&](int64_t b, int64_t e) {
    thread_local ConvScratch<A> s;
    for (int64_t t = b; t < e; ++t) {
      const int64_t ng = t / nbands, j0 = (t % nbands) * band, j1 = std::min(p, j0 + band), nb = j1 - j0;
      const int64_t n = ng / groups, g = ng % groups;
      s.col.resize(static_cast<size_t>(cgk * nb));
      im2col_cols(xp + (n * groups + g) * cg * in_sz, cg, win, j0, j1, s.col.data());
      const int64_t y0 = (n * groups + g) * coutg * p;  // flat index of this (image, group)'s y
      // Straight into y, or (another storage type, or an epilogue: y is then not written) into
      // the band's accumulator.
      bool direct = false;
      A* dst;
      int64_t ldd;
      if constexpr (std::is_same_v<T, A>) direct = !epi;
      if (direct) {
        dst = reinterpret_cast<A*>(yp) + y0 + j0, ldd = p;
      } else {
        s.acc.resize(static_cast<size_t>(coutg * nb));
        dst = s.acc.data(), ldd = nb;
      }
      for (int64_t co = 0; co < coutg; ++co) std::fill(dst + co * ldd, dst + co * ldd + nb, bp ? bp[g * coutg + co] : A(0));
      gemm(false, false, coutg, nb, cgk, A(1), wp + g * coutg * cgk, cgk, s.col.data(), nb, A(1), dst, ldd);
      if (epi) {
        if constexpr (std::is_same_v<A, float>)
          for (int64_t co = 0; co < coutg; ++co) epi->apply(dst + co * nb, y0 + co * p + j0, nb);
      } else if (!direct) {
        for (int64_t co = 0; co < coutg; ++co) convert_span(dst + co * nb, yp + y0 + co * p + j0, nb);
      }
    }
    s.trim();
  });
}

template <class T>
void conv_impl(const ops::Conv& op, KernelContext& ctx) {
  using A = gemm_t<T>;
  const Tensor& x = ctx.in[0];
  const Tensor& w = ctx.in[1];
  Tensor& y = ctx.out[0];
  if (y.numel() == 0) return;
  const ConvEpilogue* epi = ctx.epilogue;
  if (epi && !std::is_same_v<T, float>) throw Error("conv: internal: a fused epilogue on a conv that is not f32");
  const auto& xs = x.shape();
  const auto& ys = y.shape();
  const int64_t n_batch = xs[0], c = xs[1], cout = ys[1], groups = op.groups;
  const int64_t cg = c / groups, coutg = cout / groups;
  const Window3 win = make_window(spatial(xs), spatial(ys), spatial(w.shape()), op.stride, op.pads, op.dilation);
  const int64_t k = win.k_size(), cgk = cg * k, p = win.out_size(), in_sz = win.in_size();
  const bool pointwise = k == 1 && win.pad[0] == 0 && win.pad[1] == 0 && win.pad[2] == 0 &&
                         win.stride[0] == 1 && win.stride[1] == 1 && win.stride[2] == 1 &&
                         win.out[0] == win.in[0] && win.out[1] == win.in[1] && win.out[2] == win.in[2];
  std::vector<A> wbuf, bbuf;
  const A* wp = nullptr;
  if constexpr (!std::is_same_v<T, A> && std::is_same_v<A, float>) {
    // Weights in another dtype (f16, bf16): converted once per params generation when fixed.
    if (ctx.weight_cache) {
      DerivedOperand& dw = ctx.weight_cache->weights;
      const bool fresh = dw.fresh(w.raw(), ctx.params_generation) && dw.data.size() == static_cast<size_t>(w.numel());
      wp = fresh ? dw.data.data() : as_gemm_type<T>(w, dw.data);
    }
  }
  if (!wp) wp = as_gemm_type<T>(w, wbuf);
  const A* bp = ctx.in.size() > 2 ? as_gemm_type<T>(ctx.in[2], bbuf) : nullptr;
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  if (cg == 1 && groups > 1 && k > 1) {
    depthwise_impl<T>(win, n_batch, c, cout, xp, wp, bp, yp, epi);
    return;
  }
  // Bytes of one (image, group)'s unfolded input: above kBandedColBytes the conv runs in bands.
  const bool large = cgk * p * static_cast<int64_t>(sizeof(A)) > kBandedColBytes;
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, f16>) {
    ConvOperands co;
    co.win = win;
    co.n_batch = n_batch;
    co.groups = groups;
    co.cg = cg;
    co.coutg = coutg;
    co.w = wp;
    co.bias = bp;
    co.epi = epi;
    co.weight_cache = ctx.weight_cache;
    co.params_generation = ctx.params_generation;
    constexpr bool f16_values = std::is_same_v<T, f16>;
    if constexpr (!f16_values) {
      if (!pointwise && !large && conv_direct_usable(win, cg, coutg)) {
        ConvDirect d;
        static_cast<ConvOperands&>(d) = co;
        d.x = xp;
        d.y = yp;
        conv_direct(d);
        return;
      }
    }
    // Large f32 maps and every f16 conv (2-d / 1-d windows): the direct path in bands of output
    // rows, no im2col (ISNet medium, f16 at 1024 x 1024: the im2col bands unfolded every value
    // 9 times).
    if (!pointwise && (large || f16_values) && conv_direct_bands_usable(win, cg, coutg)) {
      ConvBands b;
      static_cast<ConvOperands&>(b) = co;
      b.x = xp;
      b.x_f16 = f16_values;
      b.y = yp;
      b.y_f16 = f16_values;
      conv_direct_bands(b);
      return;
    }
  }
  if (large && !(pointwise && std::is_same_v<T, A>)) {
    conv_banded<T, A>(win, n_batch, groups, cg, coutg, xp, wp, bp, yp, epi);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    // A pointwise conv of 1x1 maps (a squeeze-excite block's FCs): one product over the batch,
    // y[n, co] = bias[co] + sum_c x[n, c] w[co, c] (per image, a 1-column tile product wasted
    // 15 of its 16 lanes: MobileNetV3's 72 -> 288 at 2 images 18 us).
    if (pointwise && p == 1 && groups == 1) {
      thread_local std::vector<float> staged;
      float* dst = yp;
      if (epi) {
        staged.resize(static_cast<size_t>(n_batch * cout));
        dst = staged.data();
      }
      for (int64_t n = 0; n < n_batch; ++n)
        for (int64_t co = 0; co < cout; ++co) dst[n * cout + co] = bp ? bp[co] : 0.f;
      gemm(false, true, n_batch, cout, c, 1.f, xp, c, wp, c, 1.f, dst, cout);
      if (epi) epi->apply(dst, 0, n_batch * cout);
      return;
    }
    if (groups == 1 && (epi || conv_gemm_avx2_usable())) {
      conv_f32_gemm(win, pointwise, n_batch, c, cout, xp, wp, bp, yp, epi);
      return;
    }
  }
  // Other layouts with an epilogue: the conv into a buffer, then the epilogue over it.
  std::vector<T> unfused;
  if (epi) {
    unfused.resize(static_cast<size_t>(y.numel()));
    yp = unfused.data();
  }

  for_tasks<ConvScratch<A>>(n_batch * groups, coutg * cgk * p + cgk * p, [&](int64_t task, ConvScratch<A>& s, bool alone) {
    const int64_t n = task / groups, g = task % groups;
    const T* xg = xp + (n * c + g * cg) * in_sz;
    const A* col = nullptr;
    if constexpr (std::is_same_v<T, A>) {
      if (pointwise) col = xg;
    }
    if (!col && cgk > 0) {
      s.col.resize(static_cast<size_t>(cgk * p));
      A* colp = s.col.data();
      if (alone && cg > 1) {  // one big task: spread the unfolding over the channels
        parallel_for(cg, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, k * p)), [&](int64_t b, int64_t e) {
          for (int64_t ci = b; ci < e; ++ci) im2col(xg + ci * in_sz, 1, win, colp + ci * k * p);
        });
      } else {
        im2col(xg, cg, win, colp);
      }
      col = colp;
    }
    T* yg = yp + (n * cout + g * coutg) * p;
    A* dst;
    if constexpr (std::is_same_v<T, A>) {
      dst = yg;
    } else {
      s.acc.resize(static_cast<size_t>(coutg * p));
      dst = s.acc.data();
    }
    // The bias is written first and the gemm accumulates onto it (beta 1): no zero-fill pass
    // and no bias pass over the output. One task alone (a single image and group) whose output
    // is much wider than tall splits its columns over the pool's threads, each running a
    // one-thread gemm on its slice (2 threads, 16 -> 64 channels at 112x112: 0.79-0.97 ms with
    // the BLAS's threads, 0.59-0.71 ms split); taller products (672 x 196) keep the BLAS's.
    auto columns = [&](int64_t j0, int64_t j1) {
      for (int64_t co = 0; co < coutg; ++co)
        std::fill(dst + co * p + j0, dst + co * p + j1, bp ? bp[g * coutg + co] : A(0));
      if (cgk > 0)
        gemm(false, false, coutg, j1 - j0, cgk, A(1), wp + g * coutg * cgk, cgk, col + j0, p, A(1), dst + j0, p);
    };
    constexpr int64_t kColBlock = 64;
    const int64_t nblk = (p + kColBlock - 1) / kColBlock;
    const int threads = num_threads();
    if (alone && threads > 1 && p >= 8 * coutg && nblk >= 2 * threads) {
      const int64_t per = std::max<int64_t>(1, nblk / (4 * threads));  // ~4 slices per thread
      const int64_t grain = std::max<int64_t>(per, (int64_t{1} << 17) / std::max<int64_t>(1, coutg * cgk * kColBlock));
      parallel_for(nblk, grain, [&](int64_t b, int64_t e) { columns(b * kColBlock, std::min(p, e * kColBlock)); });
    } else {
      columns(0, p);
    }
    if constexpr (!std::is_same_v<T, A>)
      for (int64_t i = 0; i < coutg * p; ++i) yg[i] = store<T>(dst[i]);
  });
  if constexpr (std::is_same_v<T, float>) {
    if (epi)
      parallel_for(y.numel(), int64_t{1} << 14, [&](int64_t b, int64_t e) { epi->apply(yp + b, b, e - b); });
  }
}

template <class T>
void conv_transpose_impl(const ops::ConvTranspose& op, KernelContext& ctx) {
  using A = gemm_t<T>;
  const Tensor& x = ctx.in[0];
  const Tensor& w = ctx.in[1];
  Tensor& y = ctx.out[0];
  if (y.numel() == 0) return;
  const auto& xs = x.shape();
  const auto& ys = y.shape();
  const auto& ws = w.shape();
  const int64_t n_batch = xs[0], cin = xs[1], cout = ys[1], groups = op.groups;
  const int64_t cing = cin / groups, coutg = cout / groups;
  // Columns run over the input grid and scatter into the output grid: the output plays the
  // role of im2col's input.
  const Window3 win = make_window(spatial(ys), spatial(xs), spatial(ws), op.stride, op.pads, op.dilation);
  const int64_t k = win.k_size(), hw = win.out_size(), out_sz = win.in_size(), rows = coutg * k;
  std::vector<A> wbuf, bbuf;
  const A* wp = as_gemm_type<T>(w, wbuf);
  const A* bp = ctx.in.size() > 2 ? as_gemm_type<T>(ctx.in[2], bbuf) : nullptr;
  const T* xp = x.data<T>();
  T* yp = y.data<T>();

  for_tasks<ConvScratch<A>>(n_batch * groups, rows * hw * (cing + 1), [&](int64_t task, ConvScratch<A>& s, bool) {
    const int64_t n = task / groups, g = task % groups;
    T* yg = yp + (n * cout + g * coutg) * out_sz;
    A* acc;
    if constexpr (std::is_same_v<T, A>) {
      acc = yg;
    } else {
      s.acc.resize(static_cast<size_t>(coutg * out_sz));
      acc = s.acc.data();
    }
    std::fill(acc, acc + coutg * out_sz, A(0));
    if (hw > 0 && cing > 0) {
      const T* xg = xp + (n * cin + g * cing) * hw;
      const A* xa;
      if constexpr (std::is_same_v<T, A>) {
        xa = xg;
      } else {
        s.xa.resize(static_cast<size_t>(cing * hw));
        for (int64_t i = 0; i < cing * hw; ++i) s.xa[i] = load(xg[i]);
        xa = s.xa.data();
      }
      s.col.resize(static_cast<size_t>(rows * hw));
      A* col = s.col.data();
      // col[(co, ky, kx), pos] = sum_ci w[ci, co, ky, kx] * x[ci, pos]
      gemm(true, false, rows, hw, cing, A(1), wp + g * cing * rows, rows, xa, hw, A(0), col, hw);
      col2im_add(col, coutg, win, acc);
    }
    if (bp)
      for (int64_t co = 0; co < coutg; ++co) {
        const A b = bp[g * coutg + co];
        for (A *d = acc + co * out_sz, *e = d + out_sz; d < e; ++d) *d += b;
      }
    if constexpr (!std::is_same_v<T, A>)
      for (int64_t i = 0; i < coutg * out_sz; ++i) yg[i] = store<T>(acc[i]);
  });
}

template <class F>
void visit_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::F32: return f.template operator()<float>();
    case DType::F64: return f.template operator()<double>();
    case DType::F16: return f.template operator()<f16>();
    case DType::BF16: return f.template operator()<bf16>();
    default: throw Error(std::string(op) + ": unsupported dtype " + dtype_name(t) + " (expects f32, f64, f16 or bf16)");
  }
}

}  // namespace

void kernel(const ops::Conv& op, KernelContext& ctx) {
  visit_float(ctx.in[0].dtype(), "conv", [&]<class T>() { conv_impl<T>(op, ctx); });
}

void kernel(const ops::ConvTranspose& op, KernelContext& ctx) {
  check(ctx.in[0].rank() == 4, "conv_transpose: only 2-d (rank-4 input) is supported");
  visit_float(ctx.in[0].dtype(), "conv_transpose", [&]<class T>() { conv_transpose_impl<T>(op, ctx); });
}

void kernel(const ops::Im2Col& op, KernelContext& ctx) {
  const Tensor& x = ctx.in[0];
  Tensor& y = ctx.out[0];
  if (y.numel() == 0) return;
  const auto& xs = x.shape();
  const int64_t oh_ow = y.shape()[2];
  const std::vector<int64_t> in_sp = spatial(xs);
  // Recover (oh, ow) from the attributes (the output only holds their product).
  const auto st = attr_or(op.stride, 2, 1), dl = attr_or(op.dilation, 2, 1), pd = attr_or(op.pads, 4, 0);
  std::vector<int64_t> out_sp(2);
  for (int i = 0; i < 2; ++i)
    out_sp[i] = (in_sp[i] + pd[i] + pd[2 + i] - dl[i] * (op.kernel[i] - 1) - 1) / st[i] + 1;
  check(out_sp[0] * out_sp[1] == oh_ow, "im2col: output shape does not match the attributes");
  const Window3 win = make_window(in_sp, out_sp, op.kernel, op.stride, op.pads, op.dilation);
  const int64_t planes = xs[0] * xs[1], k = win.k_size(), in_sz = win.in_size(), p = win.out_size();
  visit_dtype(x.dtype(), [&]<DType D>() {
    using T = typename dtype_storage<D>::type;
    const T* xp = static_cast<const T*>(x.raw());
    T* yp = static_cast<T*>(y.raw());
    parallel_for(planes, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, k * p)), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) im2col(xp + i * in_sz, 1, win, yp + i * k * p);
    });
  });
}

}  // namespace rlx::cpu
