// Model cases spelled the way ONNX exporters write them (op by op: MatMul / Div / Add-mask /
// Softmax / MatMul attention, written-out LayerNorm and erf GELU, x * sigmoid(x) SwiGLU): every
// device's optimizer turns them into its fused ops (passes/fuse_exporter, fuse_attention), and
// the result must still match the CPU oracle run on the graph as written.
#include <cmath>

#include "models/transformer.h"
#include "parity/parity_cases.h"
#include "support/test_util.h"

namespace rlx::testing {
namespace {

std::string dt(DType t) { return dtype_name(t); }

// x [.., E] @ w [E, N] + b [N].
Value linear(Graph& g, Value x, const std::string& name, int64_t in, int64_t out, DType t) {
  return g.add(g.matmul(x, g.param(name + ".weight", Shape::of({in, out}, t))), g.param(name + ".bias", Shape::of({out}, t)));
}

// LayerNorm as exporters write it: mean, centred square mean, + eps, sqrt, divide, scale, shift.
Value written_layer_norm(Graph& g, Value x, const std::string& name, int64_t e, DType t) {
  const Value d = g.sub(x, g.mean(x, {-1}, true));
  const Value var = g.mean(g.pow(d, g.scalar(2.0, t)), {-1}, true);
  const Value n = g.div(d, g.act(ActKind::Sqrt, g.add(var, g.scalar(1e-12, t))));
  return g.add(g.mul(n, g.param(name + ".weight", Shape::of({e}, t))), g.param(name + ".bias", Shape::of({e}, t)));
}

CaseGraph exported_bert_layer_case(DType t) {
  const int64_t b = 2, s = 24, e = 128, h = 4, d = e / h, f = 512;
  Graph g;
  const Value x = g.input("hidden", Shape::of({b, s, e}, t));
  const Value mask = g.input("mask", Shape::of({b, 1, 1, s}, t));  // 0 or a large negative, as exporters pass it
  auto heads = [&](Value v, bool keys) {
    const Value r = g.reshape(v, {b, s, h, d});
    return keys ? g.transpose(r, {0, 2, 3, 1}) : g.transpose(r, {0, 2, 1, 3});
  };
  const Value q = heads(linear(g, x, "q", e, e, t), false);
  const Value kt = heads(linear(g, x, "k", e, e, t), true);
  const Value v = heads(linear(g, x, "v", e, e, t), false);
  const Value scores = g.add(g.div(g.matmul(q, kt), g.scalar(std::sqrt(double(d)), t)), mask);
  const Value ctx = g.reshape(g.transpose(g.matmul(g.softmax(scores, -1), v), {0, 2, 1, 3}), {b, s, e});
  const Value h1 = written_layer_norm(g, g.add(linear(g, ctx, "o", e, e, t), x), "ln1", e, t);
  const Value up = linear(g, h1, "up", e, f, t);
  const Value gelu = g.mul(g.mul(up, g.scalar(0.5, t)),
                           g.add(g.scalar(1.0, t), g.act(ActKind::Erf, g.div(up, g.scalar(1.4142135623730951, t)))));
  g.add_output(written_layer_norm(g, g.add(linear(g, gelu, "down", f, e, t), h1), "ln2", e, t));

  ParityOptions o;
  o.fixed_params = models::random_weights(g, 17);
  std::vector<double> m(static_cast<size_t>(b * s), 0.0);
  for (int64_t j = s - 5; j < s; ++j) m[static_cast<size_t>(s + j)] = -10000.0;  // the second sequence is padded
  o.fixed_inputs.emplace_back("mask", from_doubles(t, {b, 1, 1, s}, m));
  return {"", std::move(g), std::move(o)};
}

// A Llama MLP as exported: RMSNorm written out (x * rsqrt(mean(x^2) + eps) * w), SiLU as
// x * sigmoid(x), gate * up, down projection, residual.
CaseGraph exported_llama_mlp_case(DType t) {
  const int64_t b = 2, s = 16, e = 128, f = 352;
  Graph g;
  const Value x = g.input("hidden", Shape::of({b, s, e}, t));
  const Value ms = g.mean(g.mul(x, x), {-1}, true);
  const Value n = g.mul(g.mul(x, g.act(ActKind::Rsqrt, g.add(ms, g.scalar(1e-6, t)))),
                        g.param("norm.weight", Shape::of({e}, t)));
  const Value gate = g.matmul(n, g.param("gate.weight", Shape::of({e, f}, t)));
  const Value up = g.matmul(n, g.param("up.weight", Shape::of({e, f}, t)));
  const Value act = g.mul(g.mul(gate, g.sigmoid(gate)), up);
  g.add_output(g.add(g.matmul(act, g.param("down.weight", Shape::of({f, e}, t))), x));
  ParityOptions o;
  o.fixed_params = models::random_weights(g, 23);
  return {"", std::move(g), std::move(o)};
}

}  // namespace

void add_exported_cases(CaseList& l) {
  for (DType t : {DType::F32, DType::F16}) {
    add_case(l, "model", "exported_bert_layer_" + dt(t), [t] { CaseGraph c = exported_bert_layer_case(t); return one(std::move(c.graph), std::move(c.options)); });
    add_case(l, "model", "exported_llama_mlp_" + dt(t), [t] { CaseGraph c = exported_llama_mlp_case(t); return one(std::move(c.graph), std::move(c.options)); });
  }
}

}  // namespace rlx::testing
