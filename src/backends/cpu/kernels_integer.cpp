// CPU kernels of the exact integer ops on 8-bit operands with zero points: MatMulInteger and
// ConvInteger (1-3 spatial dims, groups). Both run on the integer product of int_gemm.h: the
// zero points are subtracted while the operands are packed as i16 (the conv's input as im2col
// rows of the chunk of output positions a task computes, padding reading 0 after the
// subtraction), and sums are exact 32-bit integers (wrapping past the int32 range).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/im2col.h"
#include "backends/cpu/int_gemm.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "rlx/error.h"

namespace rlx::cpu {
namespace {

// Calls f.template operator()<TA, TB>() with the storage types of two u8/i8 dtypes.
template <class F>
void visit_int8_pair(DType a, DType b, const char* what, F&& f) {
  auto second = [&]<class TA>() {
    if (b == DType::U8) f.template operator()<TA, uint8_t>();
    else if (b == DType::I8) f.template operator()<TA, int8_t>();
    else throw Error(std::string(what) + ": operands must be u8 or i8, got " + dtype_name(b));
  };
  if (a == DType::U8) second.template operator()<uint8_t>();
  else if (a == DType::I8) second.template operator()<int8_t>();
  else throw Error(std::string(what) + ": operands must be u8 or i8, got " + dtype_name(a));
}

int64_t product_except(const std::vector<int64_t>& d, size_t skip) {
  int64_t p = 1;
  for (size_t i = 0; i < d.size(); ++i)
    if (i != skip) p *= d[i];
  return p;
}

// A zero point with `per` values (one per row / column / channel) or one value; its element stride.
int64_t zero_stride(const Tensor& z, int64_t per, const std::string& what) {
  if (z.numel() == 1) return 0;
  if (z.numel() == per) return 1;
  throw Error(what + " has " + std::to_string(z.numel()) + " values; it must have 1 or " + std::to_string(per));
}

// Runs fn(item, parallel_inside) for item in [0, n): items on the pool when there are several
// and each is small or they are many, else one after another with the pool inside each.
template <class Fn>
void for_items(int64_t n, int64_t work_per_item, const Fn& fn) {
  const bool outer = n > 1 && (n >= 2 * static_cast<int64_t>(num_threads()) || work_per_item < (int64_t{1} << 22));
  if (!outer) {
    for (int64_t i = 0; i < n; ++i) fn(i, true);
    return;
  }
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(1, work_per_item));
  parallel_for(n, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) fn(i, false);
  });
}

// i16 scratch per thread (the pack_b row buffers).
int16_t* row_scratch(size_t n) {
  thread_local std::vector<int16_t> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

template <class TA, class TB>
void matmul_integer_impl(const Tensor& a, const Tensor& b, const Tensor& za, const Tensor& zb, const plan::MatMulGeom& g,
                         int32_t* y) {
  const int64_t m = g.m, n = g.n, k = g.k;
  const auto& ad = a.shape();
  const auto& bd = b.shape();
  // Zero points: one value, or one per row of a (its dims but K) / per column of b (its dims but K).
  const int64_t sa = zero_stride(za, ad.size() >= 2 ? product_except(ad, ad.size() - 1) : 1, "a_zero");
  const int64_t sb = zero_stride(zb, bd.size() >= 2 ? product_except(bd, bd.size() - 2) : 1, "b_zero");
  // Element offsets of every batch item's a and b (the plan's broadcast strides).
  std::vector<int64_t> a_off(static_cast<size_t>(g.batch)), b_off(static_cast<size_t>(g.batch));
  std::vector<int64_t> idx(g.batch_dims.size(), 0);
  for (int64_t i = 0; i < g.batch; ++i) {
    int64_t oa = 0, ob = 0;
    for (size_t d = 0; d < idx.size(); ++d) {
      oa += idx[d] * g.a_batch_strides[d];
      ob += idx[d] * g.b_batch_strides[d];
    }
    a_off[static_cast<size_t>(i)] = oa;
    b_off[static_cast<size_t>(i)] = ob;
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < g.batch_dims[d]) break;
      idx[d] = 0;
    }
  }
  const TA* ap = a.data<TA>();
  const TB* bp = b.data<TB>();
  const TA* zap = za.data<TA>();
  const TB* zbp = zb.data<TB>();
  for_items(g.batch, m * n * std::max<int64_t>(k, 1), [&](int64_t i, bool parallel) {
    const int64_t ao = a_off[static_cast<size_t>(i)], bo = b_off[static_cast<size_t>(i)];
    // Row r of item i is row ao / k + r of a's storage; column j is column (bo / (k n)) n + j of b's.
    const int64_t a_row0 = k > 0 ? ao / k : 0;
    const int64_t b_col0 = k > 0 && n > 0 ? bo / (k * n) * n : 0;
    thread_local std::vector<int16_t> packed_a;
    packed_a.resize(static_cast<size_t>(int_packed_a_size(m, k)));
    pack_int_a<TA>(ap + ao, k, zap + a_row0 * sa, sa, m, k, packed_a.data());
    const TB* B = bp + bo;
    const TB* zcol = zbp + b_col0 * sb;
    IntGemm gm;
    gm.m = m, gm.n = n, gm.k = k;
    gm.a = packed_a.data();
    gm.c = y + i * m * n;
    gm.ldc = n;
    gm.pack_b = [&](int64_t j0, int64_t cols, int16_t* dst) {
      int16_t* tmp = row_scratch(static_cast<size_t>(2 * (cols + kIntCols)));
      pack_int_b_rows(k, cols, [&](int64_t kk, int16_t* out) {
        const TB* row = B + kk * n + j0;
        if (sb == 0) {
          int_widen(row, cols, zcol[0], out);
        } else {
          for (int64_t j = 0; j < cols; ++j) out[j] = static_cast<int16_t>(row[j] - zcol[j0 + j]);
        }
      }, tmp, dst);
    };
    int_gemm(gm, parallel);
  });
}

// Where row kk = (c, kz, ky, kx) of the im2col matrix of one group's channels reads: the
// channel's plane, the kernel offsets (dilation applied) and the output columns ox whose input
// column ox * stride - pad + kx * dilation lies inside an input row.
struct ConvRowSource {
  int64_t plane = 0, dz = 0, dy = 0, dx = 0, xlo = 0, xhi = 0;
};

std::vector<ConvRowSource> conv_row_sources(const Window3& w, int64_t cg) {
  std::vector<ConvRowSource> rows;
  rows.reserve(static_cast<size_t>(cg * w.k_size()));
  for (int64_t c = 0; c < cg; ++c)
    for (int64_t kz = 0; kz < w.k[0]; ++kz)
      for (int64_t ky = 0; ky < w.k[1]; ++ky)
        for (int64_t kx = 0; kx < w.k[2]; ++kx) {
          ConvRowSource r;
          r.plane = c * w.in_size();
          r.dz = kz * w.dil[0] - w.pad[0];
          r.dy = ky * w.dil[1] - w.pad[1];
          r.dx = kx * w.dil[2] - w.pad[2];
          w.valid_range(2, kx, r.xlo, r.xhi);
          rows.push_back(r);
        }
  return rows;
}

// A run of output positions along x: positions off, off + 1, ... (relative to the chunk's first)
// are (oz, oy, ox0), (oz, oy, ox0 + 1), ...
struct PositionRun {
  int64_t oz = 0, oy = 0, ox0 = 0, len = 0, off = 0;
};

void position_runs(const Window3& w, int64_t j0, int64_t cols, std::vector<PositionRun>& runs) {
  runs.clear();
  const int64_t ow = w.out[2], oh = w.out[1];
  int64_t oz = j0 / (oh * ow), oy = j0 / ow % oh, ox = j0 % ow;
  for (int64_t off = 0; off < cols;) {
    const int64_t len = std::min(ow - ox, cols - off);
    runs.push_back({oz, oy, ox, len, off});
    off += len;
    ox = 0;
    if (++oy == oh) oy = 0, ++oz;
  }
}

// Row `r` of the im2col matrix over the positions of `runs`: x - zero where the window reads the
// input, 0 where it reads padding (x_zero there, 0 after the subtraction).
template <class T>
void conv_row(const T* x, const Window3& w, const ConvRowSource& r, const std::vector<PositionRun>& runs, int zero,
              int16_t* out) {
  const int64_t sx = w.stride[2];
  for (const PositionRun& run : runs) {
    int16_t* o = out + run.off;
    const int64_t iz = run.oz * w.stride[0] + r.dz, iy = run.oy * w.stride[1] + r.dy;
    if (iz < 0 || iz >= w.in[0] || iy < 0 || iy >= w.in[1]) {
      std::fill(o, o + run.len, int16_t{0});
      continue;
    }
    const int64_t lo = std::clamp(r.xlo - run.ox0, int64_t{0}, run.len), hi = std::clamp(r.xhi - run.ox0, lo, run.len);
    std::fill(o, o + lo, int16_t{0});
    if (hi > lo) {
      const T* s = x + r.plane + (iz * w.in[1] + iy) * w.in[2] + (run.ox0 + lo) * sx + r.dx;
      if (sx == 1) {
        int_widen(s, hi - lo, zero, o + lo);
      } else {
        for (int64_t i = lo; i < hi; ++i) o[i] = static_cast<int16_t>(s[(i - lo) * sx] - zero);
      }
    }
    std::fill(o + hi, o + run.len, int16_t{0});
  }
}

template <class TX, class TW>
void conv_integer_impl(const ops::ConvInteger& op, const Tensor& x, const Tensor& w, const Tensor& zx,
                       const Tensor& zw, Tensor& y) {
  const auto& xs = x.shape();
  const auto& ys = y.shape();
  const int64_t n_batch = xs[0], c = xs[1], cout = ys[1], groups = op.groups;
  const int64_t cg = c / groups, coutg = cout / groups;
  const std::vector<int64_t> xsp(xs.begin() + 2, xs.end()), ysp(ys.begin() + 2, ys.end());
  const std::vector<int64_t> ksp(w.shape().begin() + 2, w.shape().end());
  const Window3 win = make_window(xsp, ysp, ksp, op.stride, op.pads, op.dilation);
  const int64_t k = cg * win.k_size(), p = win.out_size(), in_sz = win.in_size();
  if (zx.numel() != 1) throw Error("x_zero must be one value, got " + std::to_string(zx.numel()));
  const int64_t sw = zero_stride(zw, cout, "w_zero");
  const int zero_x = zx.data<TX>()[0];
  // Packed weights of every group (each group's rows start a block).
  const int64_t per_group = int_packed_a_size(coutg, k);
  std::vector<int16_t> packed(static_cast<size_t>(per_group * groups));
  for (int64_t gi = 0; gi < groups; ++gi)
    pack_int_a<TW>(w.data<TW>() + gi * coutg * k, k, zw.data<TW>() + gi * coutg * sw, sw, coutg, k,
                   packed.data() + gi * per_group);
  const std::vector<ConvRowSource> sources = conv_row_sources(win, cg);
  const TX* xp = x.data<TX>();
  int32_t* yp = y.data<int32_t>();
  for_items(n_batch * groups, coutg * p * std::max<int64_t>(k, 1), [&](int64_t item, bool parallel) {
    const int64_t nb = item / groups, gi = item % groups;
    const TX* xg = xp + (nb * c + gi * cg) * in_sz;
    IntGemm gm;
    gm.m = coutg, gm.n = p, gm.k = k;
    gm.a = packed.data() + gi * per_group;
    gm.c = yp + (nb * cout + gi * coutg) * p;
    gm.ldc = p;
    gm.pack_b = [&](int64_t j0, int64_t cols, int16_t* dst) {
      int16_t* tmp = row_scratch(static_cast<size_t>(2 * (cols + kIntCols)));
      thread_local std::vector<PositionRun> runs;
      position_runs(win, j0, cols, runs);
      pack_int_b_rows(k, cols, [&](int64_t kk, int16_t* out) {
        conv_row<TX>(xg, win, sources[static_cast<size_t>(kk)], runs, zero_x, out);
      }, tmp, dst);
    };
    int_gemm(gm, parallel);
  });
}

}  // namespace

void kernel(const ops::MatMulInteger&, KernelContext& ctx) {
  const Tensor& a = ctx.in[0];
  const Tensor& b = ctx.in[1];
  Tensor& y = ctx.out[0];
  const auto& g = std::get<plan::MatMulGeom>(ctx.step.geom);
  if (y.numel() != g.batch * g.m * g.n)
    throw Error("matmul_integer: output buffer has " + std::to_string(y.numel()) + " elements, expected " +
                std::to_string(g.batch * g.m * g.n));
  if (ctx.in[2].dtype() != a.dtype() || ctx.in[3].dtype() != b.dtype())
    throw Error("matmul_integer: each zero point must have its operand's dtype");
  if (y.numel() == 0) return;
  visit_int8_pair(a.dtype(), b.dtype(), "matmul_integer", [&]<class TA, class TB>() {
    matmul_integer_impl<TA, TB>(a, b, ctx.in[2], ctx.in[3], g, y.data<int32_t>());
  });
}

void kernel(const ops::ConvInteger& op, KernelContext& ctx) {
  const Tensor& x = ctx.in[0];
  const Tensor& w = ctx.in[1];
  Tensor& y = ctx.out[0];
  if (ctx.in[2].dtype() != x.dtype() || ctx.in[3].dtype() != w.dtype())
    throw Error("conv_integer: each zero point must have its operand's dtype");
  if (y.numel() == 0) return;
  visit_int8_pair(x.dtype(), w.dtype(), "conv_integer", [&]<class TX, class TW>() {
    conv_integer_impl<TX, TW>(op, x, w, ctx.in[2], ctx.in[3], y);
  });
}

}  // namespace rlx::cpu
