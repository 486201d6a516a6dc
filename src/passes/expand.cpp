// Decompositions used by the shared legalize (and by unfuse): each emits primitives into the
// rewriter's output graph with the same numbers as the op's definition in include/rlx/ops.h.
#include <numeric>

#include "passes/expand_cache.h"
#include "passes/expand_recurrent.h"
#include "passes/expand_vision.h"
#include "passes/legalize.h"
#include "passes/uses.h"

namespace rlx::passes {
namespace {

Value scalar_of(Graph& g, double v, DType dt) { return g.constant(Tensor::f64({}, std::span<const double>(&v, 1)).cast(dt)); }

// act(x @ w + b) from new values; b and act optional.
Value linear(Graph& g, Value x, Value w, const Value* b, std::optional<ActKind> act = std::nullopt) {
  Value y = g.matmul(x, w);
  if (b) y = g.add(y, *b);
  if (act) y = g.act(*act, y);
  return y;
}

// The attention block of FusedAttentionBlock / FusedTransformerLayer from new values.
Value attention_block(Graph& g, Value hidden, Value qkv_w, const Value* qkv_b, Value out_w, const Value* out_b,
                      Value mask, int64_t heads, int64_t head_dim, const Value* cos, const Value* sin) {
  const Shape hs = g.shape(hidden);
  const Dim b = hs[0], s = hs[1];
  const int64_t e = heads * head_dim;
  const Value qkv = linear(g, hidden, qkv_w, qkv_b);
  auto head = [&](int64_t i) { return g.reshape(g.narrow(qkv, 2, i * e, e), {b, s, heads, head_dim}); };
  Value q = head(0), k = head(1), v = head(2);
  if (cos) {
    q = g.rope(q, *cos, *sin, head_dim, head_dim, RopeStyle::NeoX);
    k = g.rope(k, *cos, *sin, head_dim, head_dim, RopeStyle::NeoX);
  }
  ops::Attention at;
  at.num_heads = heads;
  at.num_kv_heads = heads;
  at.head_dim = head_dim;
  at.mask_kind = MaskKind::Custom;
  at.layout = AttnLayout::BSHD;
  const Value ctx = g.reshape(g.attention(q, k, v, mask, at), {b, s, e});
  return linear(g, ctx, out_w, out_b);
}

}  // namespace

std::optional<std::vector<Value>> inline_subgraph(Graph& g, const Graph& sub, const std::vector<Value>& args) {
  std::vector<std::vector<Value>> vals(sub.size());
  size_t next_arg = 0;
  for (const Node& n : sub.nodes()) {
    if (std::holds_alternative<ops::Input>(n.op)) {
      if (next_arg >= args.size()) return std::nullopt;
      vals[n.id] = {args[next_arg++]};
    } else if (const auto* p = std::get_if<ops::Param>(&n.op)) {
      auto it = sub.weights().find(p->name);
      if (it == sub.weights().end()) return std::nullopt;
      vals[n.id] = {g.constant(it->second)};
    } else {
      std::vector<Value> ins;
      for (Value v : n.inputs) ins.push_back(vals[v.node][v.port]);
      vals[n.id] = g.apply_multi(n.op, ins);
    }
  }
  std::vector<Value> outs;
  for (Value v : sub.outputs()) outs.push_back(vals[v.node][v.port]);
  return outs;
}

namespace {

// perm moving `axes` (normalized, any order) to the end, keeping the others in order.
std::vector<int64_t> axes_last_perm(int64_t rank, const std::vector<int64_t>& axes) {
  std::vector<int64_t> perm;
  std::vector<bool> moved(static_cast<size_t>(rank), false);
  for (int64_t a : axes) moved[static_cast<size_t>(a)] = true;
  for (int64_t i = 0; i < rank; ++i)
    if (!moved[static_cast<size_t>(i)]) perm.push_back(i);
  for (int64_t a : axes) perm.push_back(a);
  return perm;
}
std::vector<int64_t> inverse_perm(const std::vector<int64_t>& p) {
  std::vector<int64_t> inv(p.size());
  for (size_t i = 0; i < p.size(); ++i) inv[static_cast<size_t>(p[i])] = static_cast<int64_t>(i);
  return inv;
}
Value transpose_if(Graph& g, Value x, const std::vector<int64_t>& perm) {
  return is_identity_perm(perm) ? x : g.transpose(x, perm);
}
// Product of dims as one Dim: static product, the single dim itself, or nullopt (symbolic mix).
std::optional<Dim> fold_dims(const std::vector<Dim>& dims) {
  if (dims.size() == 1) return dims[0];
  int64_t p = 1;
  for (const Dim& d : dims) {
    if (d.is_symbolic()) return std::nullopt;
    p *= d.value;
  }
  return Dim(p);
}

// Applies a one-axis op over axis `axis` of x by moving that axis last, `f(x_t)` with axis -1,
// and (when `restore`) moving it back.
template <class F>
Value along_last(Graph& g, Value x, int64_t axis, bool restore, F&& f) {
  const int64_t r = g.shape(x).rank();
  const auto perm = axes_last_perm(r, {axis});
  Value y = f(transpose_if(g, x, perm));
  return restore ? transpose_if(g, y, inverse_perm(perm)) : y;
}

std::optional<Value> expand_dot_general(Graph& g, const ops::DotGeneral& d, Value lhs, Value rhs) {
  const Shape ls = g.shape(lhs), rs = g.shape(rhs);
  auto norm = [](std::vector<int64_t> axes, int64_t r) {
    for (auto& a : axes) a = normalize_axis(a, r, "dot_general");
    return axes;
  };
  const auto lb = norm(d.lhs_batch, ls.rank()), lc = norm(d.lhs_contract, ls.rank());
  const auto rb = norm(d.rhs_batch, rs.rank()), rc = norm(d.rhs_contract, rs.rank());
  auto free_axes = [](int64_t r, const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
    std::vector<int64_t> f;
    for (int64_t i = 0; i < r; ++i)
      if (std::find(a.begin(), a.end(), i) == a.end() && std::find(b.begin(), b.end(), i) == b.end()) f.push_back(i);
    return f;
  };
  const auto lf = free_axes(ls.rank(), lb, lc), rf = free_axes(rs.rank(), rb, rc);
  auto dims_of = [](const Shape& s, const std::vector<int64_t>& axes) {
    std::vector<Dim> v;
    for (int64_t a : axes) v.push_back(s[a]);
    return v;
  };
  const auto m = fold_dims(dims_of(ls, lf).empty() ? std::vector<Dim>{Dim(1)} : dims_of(ls, lf));
  const auto k = fold_dims(dims_of(ls, lc).empty() ? std::vector<Dim>{Dim(1)} : dims_of(ls, lc));
  const auto n = fold_dims(dims_of(rs, rf).empty() ? std::vector<Dim>{Dim(1)} : dims_of(rs, rf));
  if (!m || !k || !n) return std::nullopt;
  std::vector<Dim> batch = dims_of(ls, lb);
  std::vector<int64_t> lp = lb, rp = rb;
  lp.insert(lp.end(), lf.begin(), lf.end());
  lp.insert(lp.end(), lc.begin(), lc.end());
  rp.insert(rp.end(), rc.begin(), rc.end());
  rp.insert(rp.end(), rf.begin(), rf.end());
  std::vector<Dim> l2 = batch, r2 = batch, out = batch;
  l2.push_back(*m);
  l2.push_back(*k);
  r2.push_back(*k);
  r2.push_back(*n);
  for (const Dim& x : dims_of(ls, lf)) out.push_back(x);
  for (const Dim& x : dims_of(rs, rf)) out.push_back(x);
  const Value a = g.reshape(transpose_if(g, lhs, lp), l2);
  const Value b = g.reshape(transpose_if(g, rhs, rp), r2);
  return g.reshape(g.matmul(a, b), out);
}

// Reduce over arbitrary axes as one last-axis reduction.
Value expand_reduce(Graph& g, const ops::Reduce& r, Value x) {
  const Shape xs = g.shape(x);
  const int64_t rank = xs.rank();
  std::vector<int64_t> axes;
  if (r.axes.empty()) {
    axes.resize(static_cast<size_t>(rank));
    std::iota(axes.begin(), axes.end(), int64_t{0});
  } else {
    for (int64_t a : r.axes) axes.push_back(normalize_axis(a, rank, "reduce"));
    std::sort(axes.begin(), axes.end());
  }
  const auto perm = axes_last_perm(rank, axes);
  Value t = transpose_if(g, x, perm);
  std::vector<Dim> kept, reduced;
  for (int64_t i = 0; i < rank; ++i)
    (std::find(axes.begin(), axes.end(), i) == axes.end() ? kept : reduced).push_back(xs[i]);
  std::vector<Dim> flat = kept;
  flat.push_back(*fold_dims(reduced.empty() ? std::vector<Dim>{Dim(1)} : reduced));
  t = g.reshape(t, flat);
  Value y = g.reduce(r.kind, t, {-1}, false);
  if (r.keep_dims) {
    std::vector<Dim> kd = xs.dims;
    for (int64_t a : axes) kd[static_cast<size_t>(a)] = Dim(1);
    y = g.reshape(y, kd);
  }
  return y;
}

// LayerNorm/RmsNorm over [axis, rank) with several dims: flatten those dims into one.
template <class Norm>
std::optional<Value> expand_trailing_norm(Graph& g, const Norm& op, const std::vector<Value>& ins) {
  const Shape xs = g.shape(ins[0]);
  const int64_t axis = normalize_axis(op.axis, xs.rank(), op.kName);
  std::vector<Dim> lead(xs.dims.begin(), xs.dims.begin() + axis), trail(xs.dims.begin() + axis, xs.dims.end());
  const auto f = fold_dims(trail);
  if (!f) return std::nullopt;
  std::vector<Dim> flat = lead;
  flat.push_back(*f);
  std::vector<Value> nins{g.reshape(ins[0], flat)};
  for (size_t i = 1; i < ins.size(); ++i) nins.push_back(g.reshape(ins[i], {*f}));
  Norm n2 = op;
  n2.axis = -1;
  return g.reshape(g.apply(n2, nins), xs.dims);
}

// Per-channel parameter (C) reshaped to broadcast against x (N, C, ...).
Value channel(Graph& g, Value p, int64_t rank) {
  std::vector<Dim> d{g.shape(p)[0]};
  for (int64_t i = 2; i < rank; ++i) d.push_back(Dim(1));
  return g.reshape(p, d);
}

}  // namespace

// Shared with unfuse_elementwise_regions.
Value expand_region(Graph& g, const ops::ElementwiseRegion& r, const std::vector<Value>& ins) {
  std::vector<Value> steps;
  auto arg = [&](int32_t a) { return a >= 0 ? ins.at(static_cast<size_t>(a)) : steps.at(static_cast<size_t>(-a - 1)); };
  for (const RegionStep& s : r.steps) {
    switch (s.kind) {
      case RegionStepKind::Binary: steps.push_back(g.binary(static_cast<BinaryKind>(s.op), arg(s.args[0]), arg(s.args[1]))); break;
      case RegionStepKind::Compare: steps.push_back(g.compare(static_cast<CompareKind>(s.op), arg(s.args[0]), arg(s.args[1]))); break;
      case RegionStepKind::Activation: steps.push_back(g.act(static_cast<ActKind>(s.op), arg(s.args[0]))); break;
      case RegionStepKind::Cast: steps.push_back(g.cast(arg(s.args[0]), s.to)); break;
      case RegionStepKind::Where: steps.push_back(g.where(arg(s.args[0]), arg(s.args[1]), arg(s.args[2]))); break;
    }
  }
  return steps.back();
}

bool expand_node(Rewriter& rw, const Node& n) {
  Graph& g = rw.out();
  const std::vector<Value> in = rw.map(n.inputs);
  auto done = [&](Value v) {
    rw.replace(n.id, {v});
    return true;
  };
  return std::visit([&](const auto& op) -> bool {
    using T = std::decay_t<decltype(op)>;
    if constexpr (std::is_same_v<T, ops::FusedMatMulBiasAct>) {
      const Value y = linear(g, in[0], in[1], op.has_bias(in.size()) ? &in[2] : nullptr, op.activation);
      return done(op.residual ? g.add(y, in.back()) : y);
    } else if constexpr (std::is_same_v<T, ops::FusedResidualLN>) {
      return done(g.layer_norm(g.add(in[0], in[1]), in[2], op.has_bias ? std::optional<Value>(in[3]) : std::nullopt, op.eps, -1));
    } else if constexpr (std::is_same_v<T, ops::FusedResidualRmsNorm>) {
      return done(g.rms_norm(g.add(in[0], in[1]), in[2], op.has_bias ? std::optional<Value>(in[3]) : std::nullopt, op.eps, -1));
    } else if constexpr (std::is_same_v<T, ops::FusedSwiGLU>) {
      const Shape xs = g.shape(in[0]);
      const int64_t last = xs.rank() - 1, half = xs[last].value / 2;
      const Value a = g.narrow(in[0], last, 0, half), b = g.narrow(in[0], last, half, half);
      return done(op.gate_first ? g.mul(g.silu(a), b) : g.mul(a, g.silu(b)));
    } else if constexpr (std::is_same_v<T, ops::LoraMatMul>) {
      const Value low = g.matmul(g.matmul(in[0], in[2]), in[3]);
      return done(g.add(g.matmul(in[0], in[1]), g.mul(low, scalar_of(g, op.scale, g.shape(low).dtype))));
    } else if constexpr (std::is_same_v<T, ops::FusedAttentionBlock>) {
      const size_t rope = 4 + (op.has_bias ? 2 : 0);
      return done(attention_block(g, in[0], in[1], op.has_bias ? &in[4] : nullptr, in[2],
                                  op.has_bias ? &in[5] : nullptr, in[3], op.num_heads, op.head_dim,
                                  op.has_rope ? &in[rope] : nullptr, op.has_rope ? &in[rope + 1] : nullptr));
    } else if constexpr (std::is_same_v<T, ops::FusedTransformerLayer>) {
      // [hidden, qkv_w, qkv_b, out_w, out_b, ln1_g, ln1_b, fc1_w, fc1_b, fc2_w, fc2_b, ln2_g, ln2_b, mask]
      const Value a = attention_block(g, in[0], in[1], &in[2], in[3], &in[4], in[13], op.num_heads, op.head_dim,
                                      nullptr, nullptr);
      const Value h = g.layer_norm(g.add(in[0], a), in[5], in[6], op.eps, -1);
      const Value f = linear(g, linear(g, h, in[7], &in[8], op.activation), in[9], &in[10]);
      return done(g.layer_norm(g.add(h, f), in[11], in[12], op.eps, -1));
    } else if constexpr (std::is_same_v<T, ops::ElementwiseRegion>) {
      return done(expand_region(g, op, in));
    } else if constexpr (std::is_same_v<T, ops::DotGeneral>) {
      auto v = expand_dot_general(g, op, in[0], in[1]);
      return v ? done(*v) : false;
    } else if constexpr (std::is_same_v<T, ops::If>) {
      const std::vector<Value> args(in.begin() + 1, in.end());
      auto t = inline_subgraph(g, *op.then_branch, args);
      auto e = inline_subgraph(g, *op.else_branch, args);
      if (!t || !e) return false;
      std::vector<Value> outs;
      for (size_t i = 0; i < t->size(); ++i) outs.push_back(g.where(in[0], (*t)[i], (*e)[i]));
      rw.replace(n.id, outs);
      return true;
    } else if constexpr (std::is_same_v<T, ops::GroupNorm>) {
      const Shape xs = g.shape(in[0]);
      const DType dt = xs.dtype;
      const Value x = g.reshape(in[0], {xs[0], Dim(op.groups), Dim(-1)});
      const Value d = g.sub(x, g.mean(x, {-1}, true));
      const Value var = g.mean(g.mul(d, d), {-1}, true);
      const Value y = g.reshape(g.mul(d, g.act(ActKind::Rsqrt, g.add(var, scalar_of(g, op.eps, dt)))), xs.dims);
      return done(g.add(g.mul(y, channel(g, in[1], xs.rank())), channel(g, in[2], xs.rank())));
    } else if constexpr (std::is_same_v<T, ops::BatchNormInference>) {
      const Shape xs = g.shape(in[0]);
      const int64_t r = xs.rank();
      const Value inv = g.act(ActKind::Rsqrt, g.add(in[4], scalar_of(g, op.eps, xs.dtype)));
      const Value scale = channel(g, g.mul(in[1], inv), r);
      return done(g.add(g.mul(g.sub(in[0], channel(g, in[3], r)), scale), channel(g, in[2], r)));
    } else if constexpr (std::is_same_v<T, ops::LayerNorm2d>) {
      const Value t = g.transpose(in[0], {0, 2, 3, 1});
      return done(g.transpose(g.layer_norm(t, in[1], in[2], op.eps, -1), {0, 3, 1, 2}));
    } else if constexpr (std::is_same_v<T, ops::Reduce>) {
      // First as one last-axis reduction. One that is already that and still not run, an integer
      // or bool Max / Min, runs in a float type that holds every value exactly (f32 up to 16-bit
      // integers, f64 for 32-bit ones), then back.
      const Shape xs = g.shape(in[0]);
      const DType t = xs.dtype;
      const bool small = t == DType::Bool || t == DType::I8 || t == DType::U8 || t == DType::I16;
      const bool last_only = op.axes.size() == 1 && is_last_axis(op.axes[0], xs.rank()) && !op.keep_dims;
      if (last_only && (small || t == DType::I32 || t == DType::U32) &&
          (op.kind == ReduceKind::Max || op.kind == ReduceKind::Min))
        return done(g.cast(g.reduce(op.kind, g.cast(in[0], small ? DType::F32 : DType::F64), op.axes, op.keep_dims), t));
      return done(expand_reduce(g, op, in[0]));
    } else if constexpr (std::is_same_v<T, ops::Softmax> || std::is_same_v<T, ops::LogSoftmax>) {
      const int64_t axis = normalize_axis(op.axis, g.shape(in[0]).rank(), op.kName);
      return done(along_last(g, in[0], axis, true, [&](Value t) {
        T o = op;
        o.axis = -1;
        return g.apply(o, {t});
      }));
    } else if constexpr (std::is_same_v<T, ops::Cumsum>) {
      const int64_t axis = normalize_axis(op.axis, g.shape(in[0]).rank(), op.kName);
      return done(along_last(g, in[0], axis, true, [&](Value t) {
        T o = op;
        o.axis = -1;
        return g.apply(o, {t});
      }));
    } else if constexpr (std::is_same_v<T, ops::ArgMax> || std::is_same_v<T, ops::ArgMin>) {
      const Shape xs = g.shape(in[0]);
      const int64_t axis = normalize_axis(op.axis, xs.rank(), op.kName);
      Value y = along_last(g, in[0], axis, false, [&](Value t) {
        T o = op;
        o.axis = -1;
        o.keep_dims = false;
        return g.apply(o, {t});
      });
      if (op.keep_dims) {
        std::vector<Dim> kd = xs.dims;
        kd[static_cast<size_t>(axis)] = Dim(1);
        y = g.reshape(y, kd);
      }
      return done(y);
    } else if constexpr (std::is_same_v<T, ops::LayerNorm> || std::is_same_v<T, ops::RmsNorm>) {
      auto v = expand_trailing_norm(g, op, in);
      return v ? done(*v) : false;
    } else if constexpr (std::is_same_v<T, ops::Resize>) {
      auto v = expand_resize(g, op, in[0], n.outputs.at(0));
      return v ? done(*v) : false;
    } else if constexpr (std::is_same_v<T, ops::Im2Col>) {
      return done(expand_im2col(g, op, in[0]));
    } else if constexpr (std::is_same_v<T, ops::Conv>) {
      auto v = expand_conv(g, op, in, n.outputs.at(0));
      return v ? done(*v) : false;
    } else if constexpr (std::is_same_v<T, ops::ConvTranspose>) {
      return done(expand_conv_transpose(g, op, in));
    } else if constexpr (std::is_same_v<T, ops::Pool>) {
      auto v = expand_pool(g, op, in[0], n.outputs.at(0));
      return v ? done(*v) : false;
    } else if constexpr (std::is_same_v<T, ops::CacheWrite>) {
      auto v = expand_cache_write(g, in);
      return v ? done(*v) : false;
    } else if constexpr (std::is_same_v<T, ops::Attention>) {
      if (op.mask_kind != MaskKind::Positions) return false;
      auto v = expand_positions_attention(g, op, in);
      return v ? done(*v) : false;
    } else if constexpr (std::is_same_v<T, ops::Recurrent>) {
      rw.replace(n.id, expand_recurrent(g, op, in, node_label(n)));
      return true;
    } else {
      return false;
    }
  }, n.op);
}

}  // namespace rlx::passes
