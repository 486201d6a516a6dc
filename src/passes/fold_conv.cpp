// fold_conv_affine: Conv followed by BatchNormInference or per-channel Mul/Div/Add/Sub with
// Constant operands becomes one Conv with new Constant weight and bias. A weight (or bias) that
// is a Param (the ONNX importer makes every initializer over 4 KiB one) is scaled by a Mul with
// a per-channel Constant instead: the node depends on a Param and Constants alone, so the session
// computes it once in the weight prologue (passes/hoist.h), not per run.
#include "passes/canonical.h"
#include "passes/exporter.h"
#include "passes/exporter_util.h"
#include "passes/rewriter.h"

namespace rlx::passes {
namespace {

using namespace exporter;

const Tensor* constant_of(const Graph& g, Value v) {
  const auto* c = op_as<ops::Constant>(g, v);
  return c ? &c->value : nullptr;
}

// The values of a Constant `t` that broadcasts against an (N, C, ...) tensor of rank `rank`
// along the channel axis only, one per channel (nullopt when it varies along another axis).
std::optional<std::vector<double>> per_channel(const Tensor& t, int64_t rank, int64_t channels) {
  if (t.rank() > rank || !is_float(t.dtype())) return std::nullopt;
  const int64_t off = rank - t.rank();  // t's axis i aligns with axis off + i
  int64_t stride = 0;                   // of the channel axis within t (0: broadcast)
  int64_t inner = 1;
  for (int64_t i = t.rank() - 1; i >= 0; --i) {
    const int64_t d = t.dim(i);
    if (off + i == 1 && d == channels) stride = inner;
    else if (d != 1) return std::nullopt;
    inner *= d;
  }
  const std::vector<double> v = t.to_f64();
  std::vector<double> out(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) out[static_cast<size_t>(c)] = v[static_cast<size_t>(c * stride)];
  return out;
}

std::optional<std::vector<double>> vector_const(const Graph& g, Value v, int64_t channels) {
  const Tensor* t = constant_of(g, v);
  if (!t || t->rank() != 1 || t->dim(0) != channels || !is_float(t->dtype())) return std::nullopt;
  return t->to_f64();
}

}  // namespace

Graph fold_conv_affine(const Graph& g, const PassContext& ctx) {
  if (!any_node(g, [](const Node& n) { return op_as<ops::Conv>(n) != nullptr; })) return g;
  const Uses uses(g);
  bool fired = false;
  Graph out = rewrite_each(g, [&](Rewriter& rw, const Node& n) {
    const auto* conv = op_as<ops::Conv>(n);
    if (!conv) return false;
    const Tensor* w = constant_of(g, n.inputs[1]);
    const Tensor* b = n.inputs.size() > 2 ? constant_of(g, n.inputs[2]) : nullptr;
    const bool w_param = !w && op_as<ops::Param>(g, n.inputs[1]);
    const bool b_param = n.inputs.size() > 2 && !b && op_as<ops::Param>(g, n.inputs[2]);
    if ((!w && !w_param) || (n.inputs.size() > 2 && !b && !b_param)) return false;
    const Shape& ws = g.shape(n.inputs[1]);
    if (!is_float(ws.dtype) || ws.rank() < 3 || !ws.is_static()) return false;
    const Shape& ys = n.outputs[0];
    const int64_t cout = ws.dims[0].value, rank = ys.rank();
    if (cout <= 0 || ws.numel() == 0 || rank < 3 || ys.dims[1] != Dim(cout) || ys.dtype != ws.dtype) return false;
    if (b && (b->rank() != 1 || b->dim(0) != cout || b->dtype() != ws.dtype)) return false;
    if (b_param) {
      const Shape& bs = g.shape(n.inputs[2]);
      if (bs.rank() != 1 || bs.dims[0] != Dim(cout) || bs.dtype != ws.dtype) return false;
    }
    // y = a * conv(x, w) + t, per output channel (a Param bias b adds a * b to t at the end).
    std::vector<double> a(static_cast<size_t>(cout), 1.0), t(static_cast<size_t>(cout), 0.0);
    if (b) t = b->to_f64();
    std::vector<NodeId> chain;
    Value cur{n.id, 0};
    while (uses.single_use(cur)) {
      const Node& u = uses.sole_user(cur);
      if (u.outputs.size() != 1 || u.outputs[0] != ys) break;
      std::vector<double> na = a, nt = t;
      if (const auto* bn = op_as<ops::BatchNormInference>(u)) {
        if (u.inputs[0] != cur) break;
        const auto scale = vector_const(g, u.inputs[1], cout), bias = vector_const(g, u.inputs[2], cout),
                   mean = vector_const(g, u.inputs[3], cout), var = vector_const(g, u.inputs[4], cout);
        if (!scale || !bias || !mean || !var) break;
        bool ok = true;
        for (size_t c = 0; c < a.size(); ++c) {
          const double s = (*scale)[c] / std::sqrt((*var)[c] + bn->eps);
          ok = ok && std::isfinite(s);
          na[c] *= s;
          nt[c] = (nt[c] - (*mean)[c]) * s + (*bias)[c];
        }
        if (!ok) break;
      } else if (const auto* bin = op_as<ops::Binary>(u)) {
        const bool left = u.inputs[0] == cur;
        const Value kv = left ? u.inputs[1] : u.inputs[0];
        if (kv == cur) break;
        const Tensor* kt = constant_of(g, kv);
        const auto k = kt ? per_channel(*kt, rank, cout) : std::nullopt;
        if (!k) break;
        const BinaryKind kind = bin->kind;
        const bool lhs_only = kind == BinaryKind::Div || kind == BinaryKind::Sub;
        if (kind != BinaryKind::Mul && kind != BinaryKind::Div && kind != BinaryKind::Add && kind != BinaryKind::Sub)
          break;
        if (lhs_only && !left) break;
        bool ok = true;
        for (size_t c = 0; c < a.size(); ++c) {
          const double kc = (*k)[c];
          if (kind == BinaryKind::Mul) {
            na[c] *= kc;
            nt[c] *= kc;
          } else if (kind == BinaryKind::Div) {
            ok = ok && kc != 0;
            na[c] /= kc;
            nt[c] /= kc;
          } else if (kind == BinaryKind::Add) {
            nt[c] += kc;
          } else {
            nt[c] -= kc;
          }
        }
        if (!ok) break;
      } else {
        break;
      }
      a = std::move(na);
      t = std::move(nt);
      chain.push_back(u.id);
      cur = Value{u.id, 0};
    }
    if (chain.empty()) return false;
    for (double v : a)
      if (!std::isfinite(v)) return false;
    for (double v : t)
      if (!std::isfinite(v)) return false;
    const DType dt = ws.dtype;
    const Tensor b2 = Tensor::f64({cout}, t).cast(dt);
    if (!backend_runs(ctx, *conv, {g.shape(n.inputs[0]), ws, b2.shape_info()}, &ys)) return false;
    Value new_w, new_b;
    if (w) {  // new weight: w[o, ...] * a[o]
      const std::vector<double> wv = w->to_f64();
      std::vector<double> nw(wv.size());
      const size_t per_out = wv.size() / static_cast<size_t>(cout);
      for (size_t i = 0; i < wv.size(); ++i) nw[i] = wv[i] * a[i / per_out];
      for (double v : nw)
        if (!std::isfinite(v)) return false;
      new_w = rw.out().constant(Tensor::f64(w->shape(), nw).cast(dt));
    } else {  // Mul(w, a as (cout, 1, ...)): hoisted into the weight prologue
      std::vector<int64_t> as(static_cast<size_t>(ws.rank()), 1);
      as[0] = cout;
      new_w = rw.out().mul(rw.map(n.inputs[1]), rw.out().constant(Tensor::f64(as, a).cast(dt)));
    }
    if (b_param)  // a * b + t
      new_b = rw.out().add(rw.out().mul(rw.map(n.inputs[2]), rw.out().constant(Tensor::f64({cout}, a).cast(dt))),
                           rw.out().constant(b2));
    else
      new_b = rw.out().constant(b2);
    const Value out = rw.emit(*conv, {rw.map(n.inputs[0]), new_w, new_b});
    rw.replace(chain.back(), {out});
    rw.absorb(n.id);
    for (size_t i = 0; i + 1 < chain.size(); ++i) rw.absorb(chain[i]);
    fired = true;
    return true;
  });
  return fired ? dce(out) : out;
}

}  // namespace rlx::passes
