// ONNX reductions: Reduce* (incl. L1, L2, SumSquare, LogSum, LogSumExp), Softmax,
// LogSoftmax, Hardmax, ArgMax/ArgMin, TopK, CumSum.
#include <numeric>

#include "io/onnx/importer.h"

namespace rlx::onnx_io {
namespace {

using V = std::vector<Val>;

enum class Post { None, L1, L2, SumSquare, LogSum, LogSumExp };

Converter reduce(ReduceKind kind, Post post, int64_t axes_input_since) {
  return [=](const NodeCtx& c) -> V {
    c.allow_only({"axes", "keepdims", "noop_with_empty_axes"});
    const bool keep = c.i("keepdims", 1) != 0;
    std::vector<int64_t> axes;
    if (c.opset() >= axes_input_since) {
      if (c.present(1)) axes = c.ints_input(1, "axes");
    } else {
      axes = c.ints("axes");
    }
    auto& g = c.g();
    Value x = c.value(0);
    if (axes.empty() && c.i("noop_with_empty_axes", 0) != 0) return {c.out(g.expand(x, c.shape(0).dims))};
    if (axes.empty())
      for (int64_t i = 0; i < c.shape(0).rank(); ++i) axes.push_back(i);
    const DType dt = c.shape(0).dtype;
    switch (post) {
      case Post::None: return {c.out(g.reduce(kind, x, axes, keep))};
      case Post::L1: return {c.out(g.reduce(ReduceKind::Sum, g.act(ActKind::Abs, x), axes, keep))};
      case Post::SumSquare: return {c.out(g.reduce(ReduceKind::Sum, g.mul(x, x), axes, keep))};
      case Post::L2: {
        Value s = g.reduce(ReduceKind::Sum, g.mul(x, x), axes, keep);
        if (!is_float(dt)) return {c.out(g.cast(g.act(ActKind::Sqrt, g.cast(s, DType::F64)), dt))};
        return {c.out(g.act(ActKind::Sqrt, s))};
      }
      case Post::LogSum: return {c.out(g.act(ActKind::Log, g.reduce(ReduceKind::Sum, x, axes, keep)))};
      case Post::LogSumExp: {
        Value m = g.reduce(ReduceKind::Max, x, axes, true);
        // Rows that are all -inf keep a finite shift.
        Value finite = g.compare(CompareKind::Eq, g.sub(m, m), g.sub(m, m));
        m = g.where(finite, m, c.scalar_like(0.0, dt));
        Value s = g.reduce(ReduceKind::Sum, g.exp(g.sub(x, m)), axes, keep);
        Value shift = keep ? m : g.reduce(ReduceKind::Max, m, axes, false);
        return {c.out(g.add(g.act(ActKind::Log, s), shift))};
      }
    }
    c.fail("unknown reduction");
  };
}

// Softmax-family before opset 13 works on the input coerced to 2-d at `axis`.
template <class F>
V coerced(const NodeCtx& c, int64_t def_axis_old, F f) {
  c.allow_only({"axis"});
  const auto& dims = c.shape(0).dims;
  const int64_t r = static_cast<int64_t>(dims.size());
  auto& g = c.g();
  if (c.opset() >= 13) return {c.out(f(c.value(0), normalize_axis(c.i("axis", -1), r, "axis")))};
  const int64_t axis = normalize_axis(c.i("axis", def_axis_old), std::max<int64_t>(r, 1), "axis");
  if (!c.shape(0).is_static()) c.fail("opset < 13 needs static input dims");
  const auto d = c.shape(0).concrete();
  const int64_t outer = std::accumulate(d.begin(), d.begin() + axis, int64_t{1}, std::multiplies<>());
  const int64_t inner = std::accumulate(d.begin() + axis, d.end(), int64_t{1}, std::multiplies<>());
  Value x = g.reshape(c.value(0), {outer, inner});
  std::vector<Dim> back(dims.begin(), dims.end());
  return {c.out(g.reshape(f(x, 1), back))};
}

V hardmax_of(const NodeCtx& c, Value x, int64_t axis) {
  auto& g = c.g();
  const Shape& s = g.shape(x);
  const Dim& n = s.dims[static_cast<size_t>(axis)];
  if (n.is_symbolic()) c.fail("Hardmax over a symbolic dim");
  Value am = g.argmax(x, axis, true);
  std::vector<int64_t> iota(static_cast<size_t>(n.value));
  std::iota(iota.begin(), iota.end(), 0);
  std::vector<Dim> ishape(s.dims.size(), Dim(1));
  ishape[static_cast<size_t>(axis)] = n;
  Value idx = g.reshape(g.constant(Tensor::i64({n.value}, iota)), ishape);
  return {c.out(g.cast(g.compare(CompareKind::Eq, am, idx), s.dtype))};
}

Converter arg(bool is_max) {
  return [is_max](const NodeCtx& c) -> V {
    c.allow_only({"axis", "keepdims", "select_last_index"});
    const bool keep = c.i("keepdims", 1) != 0;
    const int64_t axis = c.i("axis", 0);
    if (is_max) {
      ops::ArgMax a{axis, keep, c.i("select_last_index", 0) != 0};
      return {c.out(c.g().apply(a, {c.value(0)}))};
    }
    ops::ArgMin a{axis, keep, c.i("select_last_index", 0) != 0};
    return {c.out(c.g().apply(a, {c.value(0)}))};
  };
}

V topk(const NodeCtx& c) {
  c.allow_only({"axis", "largest", "sorted", "k"});
  int64_t k;
  if (c.opset() < 10) {
    k = c.i("k", -1);
  } else {
    const auto kv = c.ints_input(1, "k");
    if (kv.size() != 1) c.fail("k must hold one value");
    k = kv[0];
  }
  if (k < 0) c.fail("k must be >= 0");
  if (c.i("sorted", 1) == 0) c.fail("sorted=0 is not supported (rlx always sorts)");
  auto [vals, idx] = c.g().topk(c.value(0), k, c.i("axis", -1), c.i("largest", 1) != 0);
  return {c.out(vals), c.out(idx)};
}

V cumsum(const NodeCtx& c) {
  c.allow_only({"exclusive", "reverse"});
  const auto a = c.ints_input(1, "axis");
  if (a.size() != 1) c.fail("axis must hold one value");
  return {c.out(c.g().cumsum(c.value(0), a[0], c.i("exclusive", 0) != 0, c.i("reverse", 0) != 0))};
}

// Negative log-likelihood of log-probabilities `x` (N, C, d...) at `target` (N, d...).
Value nll(const NodeCtx& c, Value x, Value target, std::optional<Value> weight) {
  auto& g = c.g();
  const Shape& xs = g.shape(x);
  if (!xs.is_static() || xs.rank() < 2) c.fail("needs a static (N, C, ...) input, got " + xs.str());
  const auto d = xs.concrete();
  const int64_t C = d[1];
  if (C < 1) c.fail("the class dim is empty");
  const DType tt = g.shape(target).dtype;
  if (tt != DType::I32 && tt != DType::I64)
    c.fail("target (input 1) must be int32 or int64, got " + g.shape(target).str());
  std::vector<Dim> want_t{xs.dims[0]};
  want_t.insert(want_t.end(), xs.dims.begin() + 2, xs.dims.end());
  if (g.shape(target).dims != want_t)
    c.fail("target " + g.shape(target).str() + " must have shape (N, d...) = " + dims_str(want_t));
  if (weight && g.shape(*weight).dims != std::vector<Dim>{Dim(C)})
    c.fail("weight (input 2) must have shape [" + std::to_string(C) + "], got " + g.shape(*weight).str());
  const int64_t M = product(d) / std::max<int64_t>(C, 1);
  const DType dt = xs.dtype;
  target = c.cast_to(target, DType::I64);
  const auto tdims = g.shape(target).dims;
  std::optional<Value> valid;
  if (c.has("ignore_index")) {
    valid = g.compare(CompareKind::Ne, target, g.constant(Tensor::scalar_i64(c.i("ignore_index", 0))));
    target = g.where(*valid, target, g.constant(Tensor::scalar_i64(0)));
  }
  // (N, C, d...) -> (N, d..., C) -> (M, C); pick column target[m] of row m.
  std::vector<int64_t> perm{0};
  for (int64_t i = 2; i < xs.rank(); ++i) perm.push_back(i);
  perm.push_back(1);
  Value rows = g.reshape(g.transpose(x, perm), {M * C});
  std::vector<int64_t> base(static_cast<size_t>(M));
  for (int64_t m = 0; m < M; ++m) base[static_cast<size_t>(m)] = m * C;
  Value flat_t = g.reshape(target, {M});
  Value picked = g.gather(rows, g.add(g.constant(Tensor::i64({M}, base)), flat_t), 0);
  Value w = weight ? g.gather(*weight, flat_t, 0) : g.expand(c.scalar_like(1.0, dt), {M});
  if (valid) w = g.where(g.reshape(*valid, {M}), w, c.scalar_like(0.0, dt));
  Value loss = g.mul(g.act(ActKind::Neg, picked), w);
  const std::string red = c.s("reduction", "mean");
  if (red == "none") return g.reshape(loss, tdims);
  if (red == "sum") return g.sum(loss, {0}, false);
  if (red == "mean") return g.div(g.sum(loss, {0}, false), g.sum(w, {0}, false));
  c.fail("reduction '" + red + "' is not one of none, sum, mean");
}

V nll_loss(const NodeCtx& c) {
  c.allow_only({"ignore_index", "reduction"});
  std::optional<Value> w;
  if (c.present(2)) w = c.value(2);
  return {c.out(nll(c, c.value(0), c.value(1), w))};
}

V softmax_cross_entropy(const NodeCtx& c) {
  c.allow_only({"ignore_index", "reduction"});
  Value logp = c.g().log_softmax(c.value(0), 1);
  std::optional<Value> w;
  if (c.present(2)) w = c.value(2);
  V outs{c.out(nll(c, logp, c.value(1), w))};
  if (c.num_outputs() > 1) outs.push_back(c.out(logp));
  return outs;
}

}  // namespace

void register_reduce(ConverterTable& t) {
  t["ReduceSum"] = reduce(ReduceKind::Sum, Post::None, 13);
  t["ReduceMean"] = reduce(ReduceKind::Mean, Post::None, 18);
  t["ReduceMax"] = reduce(ReduceKind::Max, Post::None, 18);
  t["ReduceMin"] = reduce(ReduceKind::Min, Post::None, 18);
  t["ReduceProd"] = reduce(ReduceKind::Prod, Post::None, 18);
  t["ReduceL1"] = reduce(ReduceKind::Sum, Post::L1, 18);
  t["ReduceL2"] = reduce(ReduceKind::Sum, Post::L2, 18);
  t["ReduceSumSquare"] = reduce(ReduceKind::Sum, Post::SumSquare, 18);
  t["ReduceLogSum"] = reduce(ReduceKind::Sum, Post::LogSum, 18);
  t["ReduceLogSumExp"] = reduce(ReduceKind::Sum, Post::LogSumExp, 18);
  t["Softmax"] = [](const NodeCtx& c) {
    return coerced(c, 1, [&](Value x, int64_t axis) { return c.g().softmax(x, axis); });
  };
  t["LogSoftmax"] = [](const NodeCtx& c) {
    return coerced(c, 1, [&](Value x, int64_t axis) { return c.g().log_softmax(x, axis); });
  };
  t["Hardmax"] = [](const NodeCtx& c) {
    return coerced(c, 1, [&](Value x, int64_t axis) { return *hardmax_of(c, x, axis)[0].value; });
  };
  t["ArgMax"] = arg(true);
  t["ArgMin"] = arg(false);
  t["TopK"] = topk;
  t["CumSum"] = cumsum;
  t["NegativeLogLikelihoodLoss"] = nll_loss;
  t["SoftmaxCrossEntropyLoss"] = softmax_cross_entropy;
}

}  // namespace rlx::onnx_io
