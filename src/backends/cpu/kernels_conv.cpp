// CPU kernels: Conv (1-3 spatial dims, im2col + gemm), ConvTranspose (2-d, gemm + col2im), Im2Col.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "backends/cpu/blas.h"
#include "backends/cpu/im2col.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "rlx/error.h"

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
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = load(p[i]);
    return buf.data();
  }
}

// Runs fn(task, scratch) for task in [0, n). Tasks run in parallel when there are several and
// each chunk gets its own scratch; a single task runs inline (and may parallelize inside).
template <class Scratch, class Fn>
void for_tasks(int64_t n, int64_t cost_per_task, const Fn& fn) {
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, cost_per_task));
  parallel_for(n, grain, [&](int64_t b, int64_t e) {
    Scratch scratch;
    for (int64_t t = b; t < e; ++t) fn(t, scratch, n == 1);
  });
}

template <class A>
struct ConvScratch {
  std::vector<A> col, acc, xa;
};

template <class T>
void conv_impl(const ops::Conv& op, KernelContext& ctx) {
  using A = gemm_t<T>;
  const Tensor& x = ctx.in[0];
  const Tensor& w = ctx.in[1];
  Tensor& y = ctx.out[0];
  if (y.numel() == 0) return;
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
  const A* wp = as_gemm_type<T>(w, wbuf);
  const A* bp = ctx.in.size() > 2 ? as_gemm_type<T>(ctx.in[2], bbuf) : nullptr;
  const T* xp = x.data<T>();
  T* yp = y.data<T>();

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
    if (cgk > 0) gemm(false, false, coutg, p, cgk, A(1), wp + g * coutg * cgk, cgk, col, p, A(0), dst, p);
    else std::fill(dst, dst + coutg * p, A(0));
    if (bp)
      for (int64_t co = 0; co < coutg; ++co) {
        const A b = bp[g * coutg + co];
        for (A *d = dst + co * p, *e = d + p; d < e; ++d) *d += b;
      }
    if constexpr (!std::is_same_v<T, A>)
      for (int64_t i = 0; i < coutg * p; ++i) yg[i] = store<T>(dst[i]);
  });
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
