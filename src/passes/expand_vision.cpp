// Resize and Im2Col as Gather / Pad / elementwise graphs (see expand_vision.h). The index and
// weight tables are constants built here from the same definitions the CPU kernels use.
#include "passes/expand_vision.h"

#include <algorithm>
#include <limits>

#include "plan/schedule.h"

namespace rlx::passes {
namespace {

Value index_constant(Graph& g, std::vector<int64_t> shape, const std::vector<int64_t>& idx) {
  return g.constant(Tensor::i64(std::move(shape), idx));
}

// A per-output-index table along `axis` of a rank-`rank` tensor, broadcasting over the others.
Value axis_constant(Graph& g, const std::vector<double>& v, int64_t axis, int64_t rank, DType dt) {
  std::vector<int64_t> shape(static_cast<size_t>(rank), 1);
  shape[static_cast<size_t>(axis)] = static_cast<int64_t>(v.size());
  return g.constant(Tensor::f64(std::move(shape), v).cast(dt));
}

// Pads of a window op ([begins..., ends...], empty: none) that differ between the two ends of
// some axis.
bool asymmetric(const std::vector<int64_t>& pads) {
  const size_t nd = pads.size() / 2;
  for (size_t i = 0; i < nd; ++i)
    if (pads[i] != pads[nd + i]) return true;
  return false;
}

// x (N, C, spatial...) padded on the spatial axes by `pads` ([begins..., ends...]) with `value`.
Value pad_spatial(Graph& g, Value x, const std::vector<int64_t>& pads, double value) {
  const size_t nd = pads.size() / 2;
  ops::Pad p;
  p.value = value;
  p.pads = {0, 0};
  p.pads.insert(p.pads.end(), pads.begin(), pads.begin() + static_cast<std::ptrdiff_t>(nd));
  p.pads.insert(p.pads.end(), {0, 0});
  p.pads.insert(p.pads.end(), pads.begin() + static_cast<std::ptrdiff_t>(nd), pads.end());
  return g.apply(p, {x});
}

}  // namespace

std::optional<Value> expand_resize(Graph& g, const ops::Resize& op, Value x, const Shape& out) {
  const Shape xs = g.shape(x);
  const int64_t rank = xs.rank();
  const DType dt = xs.dtype;
  const bool half = dt == DType::F16 || dt == DType::BF16;
  const DType ct = half ? DType::F32 : dt;  // the interpolation's dtype
  bool widened = false;
  Value y = x;
  // The last axis first, as the CPU kernel interpolates it innermost.
  for (int64_t a = rank - 1; a >= 0; --a) {
    const Dim& di = xs[a];
    const Dim& dout = out[a];
    if (di.is_symbolic() || dout.is_symbolic()) {
      if (di == dout) continue;  // a symbolic dim only survives resize at scale 1: untouched
      return std::nullopt;
    }
    const int64_t in = di.value, n = dout.value;
    if (in == 0 && n == 0) continue;
    const plan::ResizeAxisTable t = plan::resize_axis_table(op, a, in, n);
    bool identity = n == in, blend = false, mixed = false;
    for (int64_t o = 0; o < n; ++o) {
      const size_t i = static_cast<size_t>(o);
      const bool w = t.w[i] != 0.0 && t.hi[i] != t.lo[i];
      identity = identity && t.lo[i] == o && !w;
      blend = blend || w;
      mixed = mixed || !w;
    }
    if (identity) continue;
    const Value lo_idx = index_constant(g, {n}, t.lo);
    if (!blend) {
      y = g.gather(y, lo_idx, a);
      continue;
    }
    if (half && !widened) y = g.cast(y, ct), widened = true;
    std::vector<double> w1(t.w.size());
    for (size_t i = 0; i < t.w.size(); ++i) w1[i] = 1.0 - t.w[i];
    const Value lo = g.gather(y, lo_idx, a);
    const Value hi = g.gather(y, index_constant(g, {n}, t.hi), a);
    Value v = g.add(g.mul(lo, axis_constant(g, w1, a, rank, ct)), g.mul(hi, axis_constant(g, t.w, a, rank, ct)));
    // Where an output takes one input alone it is that input exactly (no 0 * inf).
    if (mixed) {
      std::vector<int64_t> shape(static_cast<size_t>(rank), 1);
      shape[static_cast<size_t>(a)] = n;
      std::vector<uint8_t> keep(static_cast<size_t>(n));
      for (size_t i = 0; i < keep.size(); ++i) keep[i] = t.w[i] != 0.0 && t.hi[i] != t.lo[i];
      v = g.where(g.constant(Tensor::boolean(std::move(shape), keep)), v, lo);
    }
    y = v;
  }
  return widened ? g.cast(y, dt) : y;
}

Value expand_im2col(Graph& g, const ops::Im2Col& op, Value x) {
  const Shape xs = g.shape(x);
  auto attr = [](const std::vector<int64_t>& v, size_t n, int64_t def) {
    return v.empty() ? std::vector<int64_t>(n, def) : v;
  };
  const auto st = attr(op.stride, 2, 1), dl = attr(op.dilation, 2, 1), pd = attr(op.pads, 4, 0);
  const int64_t c = xs[1].value, kh = op.kernel[0], kw = op.kernel[1];
  const int64_t hp = xs[2].value + pd[0] + pd[2], wp = xs[3].value + pd[1] + pd[3];
  const int64_t oh = (hp - dl[0] * (kh - 1) - 1) / st[0] + 1, ow = (wp - dl[1] * (kw - 1) - 1) / st[1] + 1;
  Value p = x;
  if (std::any_of(pd.begin(), pd.end(), [](int64_t v) { return v != 0; })) {
    ops::Pad pad;
    pad.pads = {0, 0, pd[0], pd[1], 0, 0, pd[2], pd[3]};
    p = g.apply(pad, {x});
  }
  // idx[i * kw + j][oy * ow + ox]: the padded plane's element under kernel tap (i, j) of window (oy, ox).
  std::vector<int64_t> idx(static_cast<size_t>(kh * kw * oh * ow));
  size_t e = 0;
  for (int64_t i = 0; i < kh; ++i)
    for (int64_t j = 0; j < kw; ++j)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) idx[e++] = (oy * st[0] + i * dl[0]) * wp + ox * st[1] + j * dl[1];
  const Value plane = g.reshape(p, {xs[0], Dim(c), Dim(hp * wp)});
  const Value cols = g.gather(plane, index_constant(g, {kh * kw, oh * ow}, idx), 2);
  return g.reshape(cols, {xs[0], Dim(c * kh * kw), Dim(oh * ow)});
}

std::optional<Value> expand_conv(Graph& g, const ops::Conv& op, const std::vector<Value>& in, const Shape& out) {
  const Shape xs = g.shape(in[0]), ws = g.shape(in[1]);
  const int64_t nd = xs.rank() - 2;
  if (asymmetric(op.pads)) {
    ops::Conv c = op;
    c.pads.clear();
    std::vector<Value> args = in;
    args[0] = pad_spatial(g, in[0], op.pads, 0.0);
    return g.apply(c, args);
  }
  if (nd > 2) return std::nullopt;
  for (int64_t i = 2; i < xs.rank(); ++i)
    if (xs[i].is_symbolic()) return std::nullopt;
  const Dim n = xs[0];
  const int64_t c = xs[1].value, cout = ws[0].value, groups = op.groups;
  auto attr = [&](const std::vector<int64_t>& v, size_t i, int64_t def) { return v.empty() ? def : v[i]; };
  // A 1-d conv is a 2-d one of height 1.
  Value x = in[0];
  ops::Im2Col ic;
  int64_t kk = 1;
  if (nd == 1) {
    const int64_t w = xs[2].value, k = ws[2].value;
    x = g.reshape(x, {n, Dim(c), Dim(1), Dim(w)});
    ic.kernel = {1, k};
    ic.stride = {1, attr(op.stride, 0, 1)};
    ic.dilation = {1, attr(op.dilation, 0, 1)};
    ic.pads = {0, attr(op.pads, 0, 0), 0, attr(op.pads, 1, 0)};
    kk = k;
  } else {
    ic.kernel = {ws[2].value, ws[3].value};
    ic.stride = {attr(op.stride, 0, 1), attr(op.stride, 1, 1)};
    ic.dilation = {attr(op.dilation, 0, 1), attr(op.dilation, 1, 1)};
    ic.pads = {attr(op.pads, 0, 0), attr(op.pads, 1, 0), attr(op.pads, 2, 0), attr(op.pads, 3, 0)};
    kk = ws[2].value * ws[3].value;
  }
  const Value cols = g.apply(ic, {x});  // (N, C * kk, L)
  const Dim l = g.shape(cols)[2];
  const int64_t k = c / groups * kk;
  const Value wm = g.reshape(in[1], {Dim(groups), Dim(cout / groups), Dim(k)});
  Value y = g.matmul(wm, g.reshape(cols, {n, Dim(groups), Dim(k), l}));  // (N, G, Cout / G, L)
  y = g.reshape(y, {n, Dim(cout), l});
  if (in.size() > 2) y = g.add(y, g.reshape(in[2], {Dim(cout), Dim(1)}));
  return g.reshape(y, out.dims);
}

Value expand_conv_transpose(Graph& g, const ops::ConvTranspose& op, const std::vector<Value>& in) {
  const Shape xs = g.shape(in[0]), ws = g.shape(in[1]);
  const Dim n = xs[0];
  const int64_t cin = ws[0].value, cout_g = ws[1].value, groups = op.groups;
  const int64_t k[2] = {ws[2].value, ws[3].value};
  auto attr = [](const std::vector<int64_t>& v, size_t i, int64_t def) { return v.empty() ? def : v[i]; };
  int64_t s[2], d[2];
  for (size_t i = 0; i < 2; ++i) s[i] = attr(op.stride, i, 1), d[i] = attr(op.dilation, i, 1);
  // Zeros between the input's elements: (N, C, H, 1, W, 1) padded to (N, C, H, sh, W, sw); the
  // s - 1 zeros after the last element are taken back by the end pads below.
  Value x = in[0];
  if (s[0] > 1 || s[1] > 1) {
    const Dim h = xs[2], w = xs[3];
    x = g.reshape(x, {n, xs[1], h, Dim(1), w, Dim(1)});
    ops::Pad z;
    z.pads = {0, 0, 0, 0, 0, 0, 0, 0, 0, s[0] - 1, 0, s[1] - 1};
    x = g.apply(z, {x});
    // An axis with stride > 1 is static (shape inference); a symbolic one keeps its dim.
    x = g.reshape(x, {n, xs[1], s[0] == 1 ? h : Dim(h.value * s[0]), s[1] == 1 ? w : Dim(w.value * s[1])});
  }
  // Each output position sees the kernel's full reach: d (k - 1) - pads before, plus the
  // output padding after (negative: a crop).
  std::vector<int64_t> pads(4);
  for (size_t i = 0; i < 2; ++i) {
    const int64_t reach = d[i] * (k[i] - 1);
    pads[i] = reach - attr(op.pads, i, 0);
    pads[2 + i] = reach - attr(op.pads, 2 + i, 0) + attr(op.output_padding, i, 0) - (s[i] - 1);
  }
  if (std::any_of(pads.begin(), pads.end(), [](int64_t v) { return v != 0; })) x = pad_spatial(g, x, pads, 0.0);
  // The kernel flipped on both spatial axes, input and output channels swapped in each group:
  // (Cin, Cout/G, kh, kw) -> (G, Cin/G, Cout/G, kh, kw) -> (G, Cout/G, Cin/G, kh, kw).
  Value wt = g.reshape(in[1], {Dim(groups), Dim(cin / groups), Dim(cout_g), Dim(k[0]), Dim(k[1])});
  wt = g.transpose(wt, {0, 2, 1, 3, 4});
  wt = g.reshape(wt, {Dim(groups * cout_g), Dim(cin / groups), Dim(k[0]), Dim(k[1])});
  wt = g.reverse(wt, {2, 3});
  ops::Conv c;
  c.dilation = {d[0], d[1]};
  c.groups = groups;
  std::vector<Value> args{x, wt};
  if (in.size() > 2) args.push_back(in[2]);
  return g.apply(c, args);
}

std::optional<Value> expand_pool(Graph& g, const ops::Pool& op, Value x, const Shape& out) {
  const Shape xs = g.shape(x);
  const DType dt = xs.dtype;
  if (!is_float(dt)) {
    // A max pool of small integers is exact in f32.
    if (op.kind != PoolKind::Max || (dt != DType::U8 && dt != DType::I8 && dt != DType::I16)) return std::nullopt;
    return g.cast(g.apply(op, {g.cast(x, DType::F32)}), dt);
  }
  const size_t nd = static_cast<size_t>(xs.rank() - 2);
  for (int64_t i = 2; i < xs.rank(); ++i)
    if (xs[i].is_symbolic() || out[i].is_symbolic()) return std::nullopt;
  auto attr = [](const std::vector<int64_t>& v, size_t i, int64_t def) { return v.empty() ? def : v[i]; };
  const bool padded = std::any_of(op.pads.begin(), op.pads.end(), [](int64_t v) { return v != 0; });
  if (!padded && !op.ceil_mode) {
    // Already plain (e.g. dilated, which cuDNN cannot run): every window's taps gathered from the
    // flattened spatial dims ([taps, outputs] of indices), then a max or mean over the taps.
    int64_t in_size = 1, out_size = 1, taps = 1;
    for (size_t a = 0; a < nd; ++a) {
      in_size *= xs[static_cast<int64_t>(a) + 2].value;
      out_size *= out[static_cast<int64_t>(a) + 2].value;
      taps *= op.kernel[a];
    }
    std::vector<int64_t> idx(static_cast<size_t>(taps * out_size));
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t o = 0; o < out_size; ++o) {
        int64_t tr = t, orem = o, flat = 0, mul = 1;
        for (size_t a = nd; a-- > 0;) {
          const int64_t k = op.kernel[a], n = out[static_cast<int64_t>(a) + 2].value;
          const int64_t pos = (orem % n) * attr(op.stride, a, 1) + (tr % k) * attr(op.dilation, a, 1);
          flat += pos * mul;
          mul *= xs[static_cast<int64_t>(a) + 2].value;
          tr /= k, orem /= n;
        }
        idx[static_cast<size_t>(t * out_size + o)] = flat;
      }
    const Value plane = g.reshape(x, {xs[0], xs[1], Dim(in_size)});
    const Value cols = g.gather(plane, index_constant(g, {taps, out_size}, idx), 2);  // (N, C, taps, P)
    const Value y = g.reduce(op.kind == PoolKind::Max ? ReduceKind::Max : ReduceKind::Mean, cols, {2});
    return g.reshape(y, out.dims);
  }
  // Pads that hold every window, the ceil_mode ones running past the end included.
  std::vector<int64_t> pads(2 * nd);
  std::vector<std::vector<double>> count(nd);  // per axis and output index: the taps the divisor counts
  for (size_t a = 0; a < nd; ++a) {
    const int64_t in = xs[static_cast<int64_t>(a) + 2].value, n = out[static_cast<int64_t>(a) + 2].value;
    const int64_t k = op.kernel[a], st = attr(op.stride, a, 1), dl = attr(op.dilation, a, 1);
    const int64_t pb = attr(op.pads, a, 0), pe = attr(op.pads, nd + a, 0);
    pads[a] = pb;
    pads[nd + a] = std::max(pe, (n - 1) * st - pb + dl * (k - 1) + 1 - in);
    // Taps at start + t * dl (t < k) inside [lo, hi).
    auto taps = [&](int64_t start, int64_t lo, int64_t hi) {
      int64_t c = 0;
      for (int64_t t = 0; t < k; ++t) c += start + t * dl >= lo && start + t * dl < hi;
      return c;
    };
    for (int64_t o = 0; o < n; ++o) {
      const int64_t start = o * st - pb;
      count[a].push_back(static_cast<double>(op.count_include_pad ? taps(start, -pb, in + pe) : taps(start, 0, in)));
    }
  }
  ops::Pool p = op;
  p.pads.clear();
  p.ceil_mode = false;
  p.count_include_pad = false;  // no pads left: the divisor is the kernel size
  if (op.kind == PoolKind::Max)
    return g.apply(p, {pad_spatial(g, x, pads, -std::numeric_limits<double>::infinity())});
  // The average of the whole window times (kernel size / the taps the op counts).
  const Value avg = g.apply(p, {pad_spatial(g, x, pads, 0.0)});
  std::vector<int64_t> shape(2, 1);
  int64_t total = 1;
  double ksize = 1;
  for (size_t a = 0; a < nd; ++a) {
    shape.push_back(static_cast<int64_t>(count[a].size()));
    total *= static_cast<int64_t>(count[a].size());
    ksize *= static_cast<double>(op.kernel[a]);
  }
  std::vector<double> factor(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) {
    double c = 1;
    int64_t rem = i;
    for (size_t a = nd; a-- > 0;) {
      const int64_t n = static_cast<int64_t>(count[a].size());
      c *= count[a][static_cast<size_t>(rem % n)];
      rem /= n;
    }
    factor[static_cast<size_t>(i)] = ksize / c;
  }
  return g.mul(avg, g.constant(Tensor::f64(std::move(shape), factor).cast(dt)));
}

}  // namespace rlx::passes
