// ONNX sequence ops: RotaryEmbedding, CausalConvWithState (a concat and a depthwise Conv),
// LinearAttention (unrolled over its steps), and
// the recurrent RNN, GRU and LSTM as one IR Recurrent op
// each (the CPU runs it natively; backends without its kernel get it unrolled by the shared
// legalize, passes/expand_recurrent.h).
#include <cmath>
#include <limits>
#include <optional>

#include "io/onnx/importer.h"
#include "rlx/limits.h"

namespace rlx::onnx_io {
namespace {

using V = std::vector<Val>;

struct RnnSpec {
  RnnCell cell;
  int64_t gates;  // 1, 3, 4
};

// An activation by its ONNX name (Sigmoid, Tanh, Relu).
ActKind activation_kind(const NodeCtx& c, const std::string& name) {
  if (name == "Sigmoid") return ActKind::Sigmoid;
  if (name == "Tanh") return ActKind::Tanh;
  if (name == "Relu") return ActKind::Relu;
  c.fail("activation '" + name + "' is not supported (Sigmoid, Tanh, Relu)");
}

// Two dims that must be equal: equal, or one of them symbolic (checked again on concrete shapes).
bool dims_match(const std::vector<Dim>& a, const std::vector<Dim>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || a[i].is_symbolic() || b[i].is_symbolic())) return false;
  return true;
}

V recurrent(const NodeCtx& c, const RnnSpec& spec) {
  c.allow_only({"activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size",
                "input_forget", "layout", "linear_before_reset"});
  const char* op_type = spec.cell == RnnCell::Rnn ? "RNN" : spec.cell == RnnCell::Gru ? "GRU" : "LSTM";
  if (c.has("activation_alpha") || c.has("activation_beta"))
    c.fail("activation_alpha/beta are not supported (they only apply to activations rlx does not support here)");
  if (c.i("input_forget", 0) != 0) c.fail("input_forget=1 is not supported");
  if (spec.cell != RnnCell::Gru && c.i("linear_before_reset", 0) != 0)
    c.fail(std::string("linear_before_reset is a GRU attribute; ") + op_type + " has none (remove it or set it to 0)");
  const std::string dir = c.s("direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional") c.fail("direction '" + dir + "'");
  ops::Recurrent op;
  op.cell = spec.cell;
  op.direction = dir == "forward" ? RnnDirection::Forward : dir == "reverse" ? RnnDirection::Reverse
                                                                             : RnnDirection::Bidirectional;
  const int64_t dirs = op.directions();
  const int64_t layout = c.i("layout", 0);
  if (layout != 0 && layout != 1) c.fail("layout must be 0 (seq, batch, ...) or 1 (batch, seq, ...), got " + std::to_string(layout));
  op.batch_first = layout == 1;
  op.linear_before_reset = spec.cell == RnnCell::Gru && c.i("linear_before_reset", 0) != 0;
  op.clip = c.f("clip", 0.0);
  if (!(op.clip >= 0) || std::isinf(op.clip)) c.fail("clip must be a finite value >= 0 (0: none)");
  if (const auto* a = c.attr("activations")) {
    for (const auto& s : a->strings()) op.activations.push_back(activation_kind(c, s));
    const size_t per_dir = static_cast<size_t>(op.activations_per_direction());
    if (op.activations.size() != per_dir * static_cast<size_t>(dirs))
      c.fail("activations must list " + std::to_string(per_dir) + " per direction");
  }

  const Shape& xs = c.shape(0);
  if (xs.rank() != 3) c.fail("X must be a 3-d tensor, got " + xs.str());
  if (!is_float(xs.dtype)) c.fail("X must be a float tensor (float16, float, double), got " + xs.str());
  const Dim S = xs[op.batch_first ? 1 : 0], B = xs[op.batch_first ? 0 : 1], I = xs[2];
  const Shape& ws = c.shape(1);
  if (!ws.is_static() || ws.rank() != 3) c.fail("W must be a static 3-d tensor, got " + ws.str());
  const int64_t GH = ws.concrete()[1];
  const int64_t H = GH / spec.gates;
  if (H <= 0 || GH % spec.gates != 0)
    c.fail("W " + ws.str() + ": dim 1 must be " + std::to_string(spec.gates) + " x hidden_size with hidden_size >= 1");
  if (c.has("hidden_size") && c.i("hidden_size", 0) != H) c.fail("hidden_size does not match W");
  op.hidden_size = H;
  // Every operand's shape (ONNX: W [dirs, G*H, I], R [dirs, G*H, H], B [dirs, 2*G*H],
  // initial_h / initial_c [dirs, batch, H] ([batch, dirs, H] with layout 1), P [dirs, 3*H]).
  auto need_shape = [&](size_t i, const char* what, std::vector<Dim> want) {
    if (!c.present(i)) return;
    const Shape& s = c.shape(i);
    if (op.batch_first && (i == 5 || i == 6)) std::swap(want[0], want[1]);
    if (!dims_match(s.dims, want))
      c.fail(std::string(what) + " (input " + std::to_string(i) + ") must have shape " + dims_str(want) + ", got " + s.str());
    if (s.dtype != xs.dtype) c.fail(std::string(what) + " must have X's type " + dtype_name(xs.dtype) + ", got " + s.str());
  };
  need_shape(1, "W", {dirs, GH, I});
  need_shape(2, "R", {dirs, GH, H});
  need_shape(3, "B", {dirs, 2 * GH});
  need_shape(5, "initial_h", {dirs, B, H});
  if (spec.cell == RnnCell::Lstm) {
    need_shape(6, "initial_c", {dirs, B, H});
    need_shape(7, "P", {dirs, 3 * H});
  }
  if ((S.is_static() && S.value < 1) || (B.is_static() && B.value < 1))
    c.fail("X " + xs.str() + " has no time steps or no batch; both must be >= 1");
  if (c.present(4)) {
    if (!is_int(c.shape(4).dtype) || !dims_match(c.shape(4).dims, {B}))
      c.fail("sequence_lens (input 4) must be an integer tensor of shape [" + B.str() + "], got " + c.shape(4).str());
    if (S.is_symbolic())
      c.fail("sequence_lens is given and the sequence length '" + S.sym +
             "' is symbolic: rlx supports sequence_lens only when every length equals the sequence's, which it "
             "checks on a static sequence length");
    for (int64_t len : c.ints_input(4, "sequence_lens"))
      if (len != S.value) c.fail("sequence_lens shorter than the sequence are not supported");
  }

  std::vector<Value> ins{c.value(0), c.value(1), c.value(2)};
  auto take = [&](size_t i, bool& flag) {
    flag = c.present(i);
    if (flag) ins.push_back(c.value(i));
  };
  take(3, op.has_bias);
  take(5, op.has_initial_h);
  if (spec.cell == RnnCell::Lstm) {
    take(6, op.has_initial_c);
    take(7, op.has_peepholes);
  }
  const std::vector<Value> outs = c.g().apply_multi(op, ins);
  V result;
  for (size_t k = 0; k < outs.size() && k < c.num_outputs(); ++k) result.push_back(c.out(outs[k]));
  return result;
}

// RotaryEmbedding (opset 23): rotates the first rotary_embedding_dim dims of each head, halves
// (x1, x2) = (first half, second half), or interleaved pairs (even, odd) when interleaved=1.
V rotary_embedding(const NodeCtx& c) {
  c.allow_only({"interleaved", "num_heads", "rotary_embedding_dim"});
  auto& g = c.g();
  const Shape& xs = c.shape(0);
  if (!xs.is_static() || (xs.rank() != 3 && xs.rank() != 4)) c.fail("X must be a static 3-d or 4-d tensor");
  const auto d = xs.concrete();
  Value x = c.value(0);
  int64_t B = d[0], S, H, D;
  if (xs.rank() == 4) {  // (B, H, S, D) -> (B, S, H, D)
    H = d[1], S = d[2], D = d[3];
    x = g.transpose(x, {0, 2, 1, 3});
  } else {
    const int64_t heads = c.i("num_heads", 0);
    if (heads <= 0 || d[2] % heads != 0) c.fail("3-d input needs num_heads dividing the hidden size");
    S = d[1], H = heads, D = d[2] / heads;
    x = g.reshape(x, {B, S, H, D});
  }
  const int64_t rot = c.i("rotary_embedding_dim", 0) > 0 ? c.i("rotary_embedding_dim", 0) : D;
  if (c.i("rotary_embedding_dim", 0) < 0) c.fail("rotary_embedding_dim must be >= 0");
  if (rot > D || rot % 2 != 0) c.fail("rotary_embedding_dim must be even and at most the head size");
  const int64_t half = rot / 2;
  Value cosv = c.value(1), sinv = c.value(2);
  const int64_t want_rank = c.present(3) ? 2 : 3;
  for (size_t i : {size_t{1}, size_t{2}})
    if (c.shape(i).rank() != want_rank)
      c.fail(std::string(i == 1 ? "cos_cache" : "sin_cache") + " (input " + std::to_string(i) + ") must be " +
             (want_rank == 2 ? "2-d (max_position, rotary_dim/2) with position_ids" : "3-d (B, S, rotary_dim/2) without position_ids") +
             ", got " + c.shape(i).str());
  if (c.present(3) && (!is_int(c.shape(3).dtype) || c.shape(3).rank() != 2))
    c.fail("position_ids (input 3) must be a 2-d (B, S) integer tensor, got " + c.shape(3).str());
  if (c.present(3)) {  // caches (max_pos, rot/2) indexed by position_ids (B, S)
    Value pos = c.cast_to(c.value(3), DType::I64);
    cosv = g.gather(cosv, pos, 0);
    sinv = g.gather(sinv, pos, 0);
  }
  cosv = g.reshape(g.narrow(cosv, -1, 0, half), {B, S, 1, half});
  sinv = g.reshape(g.narrow(sinv, -1, 0, half), {B, S, 1, half});
  Value xr = g.narrow(x, 3, 0, rot);
  const bool interleaved = c.i("interleaved", 0) != 0;
  Value x1, x2;
  if (interleaved) {
    std::vector<int64_t> even, odd;
    for (int64_t i = 0; i < half; ++i) {
      even.push_back(2 * i);
      odd.push_back(2 * i + 1);
    }
    x1 = g.gather(xr, g.constant(Tensor::i64({half}, even)), 3);
    x2 = g.gather(xr, g.constant(Tensor::i64({half}, odd)), 3);
  } else {
    x1 = g.narrow(xr, 3, 0, half);
    x2 = g.narrow(xr, 3, half, half);
  }
  Value re = g.sub(g.mul(cosv, x1), g.mul(sinv, x2));
  Value im = g.add(g.mul(sinv, x1), g.mul(cosv, x2));
  Value rotated = interleaved ? g.reshape(g.concat({g.reshape(re, {B, S, H, half, 1}), g.reshape(im, {B, S, H, half, 1})}, 4),
                                          {B, S, H, rot})
                              : g.concat({re, im}, 3);
  Value y = rot < D ? g.concat({rotated, g.narrow(x, 3, rot, D - rot)}, 3) : rotated;
  if (xs.rank() == 4) y = g.transpose(y, {0, 2, 1, 3});
  else y = g.reshape(y, {B, S, H * D});
  return {c.out(y)};
}

}  // namespace

// CausalConvWithState (opset 27): a depthwise causal 1-d convolution that carries its last
// K - 1 inputs as state, for streaming convolutional sequence models. [input (B, C, L),
// weight (C, 1, K), bias (C)?, past_state (B, C, K - 1)? (zeros when omitted)] -> output
// (B, C, L) = conv(concat(past_state, input), groups C) (+ SiLU with activation silu / swish),
// present_state = the last K - 1 columns of that concatenation.
V causal_conv_with_state(const NodeCtx& c) {
  c.allow_only({"activation"});
  auto& g = c.g();
  const Shape& x = c.shape(0);
  const Shape& w = c.shape(1);
  if (x.rank() != 3) c.fail("input must be (batch, channels, length), got " + x.str());
  if (w.rank() != 3 || !w.dims[2].is_static() || w.dims[1] != Dim(1) || w.dims[0] != x.dims[1])
    c.fail("weight must be (channels, 1, kernel) with the input's " + x.dims[1].str() + " channels and a static kernel, got " +
           w.str());
  if (w.dtype != x.dtype) c.fail("weight and input dtypes differ: " + w.str() + ", " + x.str());
  const std::string act = c.s("activation", "none");
  if (act != "none" && act != "silu" && act != "swish")
    c.fail("attribute 'activation' is '" + act + "'; the op defines none, silu and swish");
  if (!x.dims[1].is_static()) c.fail("the channel count must be static, got " + x.str());
  const int64_t k = w.dims[2].value, channels = x.dims[1].value;
  const std::vector<Dim> state_dims{x.dims[0], x.dims[1], Dim(k - 1)};
  Value past;
  if (c.present(3)) {
    const Shape& ps = c.shape(3);
    if (ps.rank() != 3 || ps.dims[1] != x.dims[1] || ps.dims[2] != Dim(k - 1) || ps.dtype != x.dtype)
      c.fail("past_state must be " + Shape(state_dims, x.dtype).str() + ", got " + ps.str());
    past = c.value(3);
  } else {
    past = g.expand(c.scalar_like(0.0, x.dtype), state_dims);
  }
  const Value padded = g.concat({past, c.value(0)}, 2);
  ops::Conv op{{1}, {0, 0}, {1}, channels};
  std::vector<Value> ins{padded, c.value(1)};
  if (c.present(2)) {
    if (c.shape(2).rank() != 1 || c.shape(2).dims[0] != x.dims[1] || c.shape(2).dtype != x.dtype)
      c.fail("bias must be (channels) of the input's dtype, got " + c.shape(2).str());
    ins.push_back(c.value(2));
  }
  Value y = g.apply(op, ins);
  if (act != "none") y = g.silu(y);
  const Dim len = g.shape(padded).dims[2];
  if (!len.is_static()) c.fail("the input length must be static for present_state, got " + x.str());
  V outs{c.out(y)};
  if (c.num_outputs() > 1) outs.push_back(c.out(g.narrow(padded, 2, len.value - (k - 1), k - 1)));
  return outs;
}

// LinearAttention (opset 27): recurrent linear attention with a matrix state per KV head,
// unrolled over the (static) sequence. [query (B, T, Hq*Dk), key (B, T, Hkv*Dk), value
// (B, T, Hkv*Dv), past_state (B, Hkv, Dk, Dv)? (zeros), decay (B, T, Hkv*Dk | Hkv)? (log of the
// per-step state decay), beta (B, T, Hkv | 1)?] -> output (B, T, Hq*Dv), present_state. Per step,
// in f32: the gated rules first scale the state by exp(decay); "linear" / "gated" then add k v^T,
// "delta" / "gated_delta" (the default) add k (beta (v - S^T k))^T; the output is
// scale * q^T S (scale 1/sqrt(Dk) unless given), query head h reading KV head h / (Hq / Hkv).
V linear_attention(const NodeCtx& c) {
  c.allow_only({"q_num_heads", "kv_num_heads", "update_rule", "scale"});
  auto& g = c.g();
  const int64_t hq = c.i("q_num_heads", 0), hkv = c.i("kv_num_heads", 0);
  if (hq <= 0 || hkv <= 0 || hq % hkv != 0)
    c.fail("q_num_heads (" + std::to_string(hq) + ") and kv_num_heads (" + std::to_string(hkv) +
           ") must be positive, q_num_heads a multiple of kv_num_heads");
  const std::string rule = c.s("update_rule", "gated_delta");
  if (rule != "linear" && rule != "gated" && rule != "delta" && rule != "gated_delta")
    c.fail("attribute 'update_rule' is '" + rule + "'; the op defines linear, gated, delta and gated_delta");
  const bool gated = rule == "gated" || rule == "gated_delta", delta = rule == "delta" || rule == "gated_delta";
  if (gated != c.present(4)) c.fail("update_rule " + rule + (gated ? " needs the decay input" : " takes no decay input"));
  if (delta != c.present(5)) c.fail("update_rule " + rule + (delta ? " needs the beta input" : " takes no beta input"));
  const Shape &qs = c.shape(0), &ks = c.shape(1), &vs = c.shape(2);
  for (const Shape* sh : {&qs, &ks, &vs})
    if (sh->rank() != 3 || !sh->dims[1].is_static() || !sh->dims[2].is_static() || !is_float(sh->dtype) ||
        sh->dtype != qs.dtype)
      c.fail("query, key and value must be float (batch, seq, features) tensors of one dtype with static seq and "
             "features, got " + qs.str() + ", " + ks.str() + ", " + vs.str());
  const int64_t steps = qs.dims[1].value, dk = qs.dims[2].value / hq, dv = vs.dims[2].value / hkv;
  if (qs.dims[2].value % hq != 0 || ks.dims[2] != Dim(hkv * dk) || vs.dims[2].value % hkv != 0 || ks.dims[1] != qs.dims[1] ||
      vs.dims[1] != qs.dims[1])
    c.fail("query " + qs.str() + " must hold " + std::to_string(hq) + " heads, key " + ks.str() + " and value " + vs.str() +
           " " + std::to_string(hkv) + " heads of the query's head size, over the same steps");
  if (steps > active_limits().max_unroll_steps)
    c.fail(std::to_string(steps) + " steps exceed the unroll limit of " + std::to_string(active_limits().max_unroll_steps) +
           " (Limits::max_unroll_steps)");
  const Dim b = qs.dims[0];
  const double scale = c.has("scale") ? c.f("scale", 0.0) : 1.0 / std::sqrt(static_cast<double>(dk));
  const DType f32 = DType::F32;
  // (B, T, H * d) -> (B, H, T, d) in f32.
  auto heads = [&](Value x, int64_t h) {
    const int64_t d = g.shape(x).dims[2].value / h;
    return g.transpose(g.reshape(c.cast_to(x, f32), {b, Dim(steps), Dim(h), Dim(d)}), {0, 2, 1, 3});
  };
  const Value q4 = heads(c.value(0), hq), k4 = heads(c.value(1), hkv), v4 = heads(c.value(2), hkv);
  std::optional<Value> decay4, beta4;
  if (gated) {
    const Dim last = c.shape(4).rank() == 3 ? c.shape(4).dims[2] : Dim(-1);
    if (c.shape(4).rank() != 3 || (last != Dim(hkv * dk) && last != Dim(hkv)))
      c.fail("decay must be (batch, seq, kv_num_heads * head_size | kv_num_heads), got " + c.shape(4).str());
    decay4 = g.act(ActKind::Exp, heads(c.value(4), hkv));  // (B, Hkv, T, Dk | 1)
  }
  if (delta) {
    const Dim last = c.shape(5).rank() == 3 ? c.shape(5).dims[2] : Dim(-1);
    if (c.shape(5).rank() != 3 || (last != Dim(hkv) && last != Dim(1)))
      c.fail("beta must be (batch, seq, kv_num_heads | 1), got " + c.shape(5).str());
    beta4 = heads(c.value(5), last.value);  // (B, Hkv | 1, T, 1)
  }
  const std::vector<Dim> state_dims{b, Dim(hkv), Dim(dk), Dim(dv)};
  Value st;
  if (c.present(3)) {
    if (c.shape(3).rank() != 4 || c.shape(3).dims[1] != Dim(hkv) || c.shape(3).dims[2] != Dim(dk) || c.shape(3).dims[3] != Dim(dv))
      c.fail("past_state must be (batch, " + std::to_string(hkv) + ", " + std::to_string(dk) + ", " + std::to_string(dv) +
             "), got " + c.shape(3).str());
    st = c.cast_to(c.value(3), f32);
  } else {
    st = g.expand(c.scalar_like(0.0, f32), state_dims);
  }
  const int64_t group = hq / hkv;
  std::vector<Value> outs;
  for (int64_t t = 0; t < steps; ++t) {
    const Value kt = g.narrow(k4, 2, t, 1), vt = g.narrow(v4, 2, t, 1);  // rows (B, Hkv, 1, d)
    const Value kcol = g.transpose(kt, {0, 1, 3, 2});
    if (gated) st = g.mul(st, g.transpose(g.narrow(*decay4, 2, t, 1), {0, 1, 3, 2}));
    Value write = vt;
    if (delta) write = g.mul(g.narrow(*beta4, 2, t, 1), g.sub(vt, g.matmul(kt, st)));
    st = g.add(st, g.matmul(kcol, write));
    Value read = st;
    if (group > 1)
      read = g.reshape(g.expand(g.reshape(st, {b, Dim(hkv), Dim(1), Dim(dk), Dim(dv)}), {b, Dim(hkv), Dim(group), Dim(dk), Dim(dv)}),
                       {b, Dim(hq), Dim(dk), Dim(dv)});
    outs.push_back(g.matmul(g.narrow(q4, 2, t, 1), read));  // (B, Hq, 1, Dv)
  }
  Value o = g.mul(steps == 1 ? outs[0] : g.concat(outs, 2), c.scalar_like(scale, f32));
  o = g.reshape(g.transpose(o, {0, 2, 1, 3}), {b, Dim(steps), Dim(hq * dv)});
  V res{c.out(c.cast_to(o, qs.dtype))};
  if (c.num_outputs() > 1) res.push_back(c.out(c.cast_to(st, c.present(3) ? c.shape(3).dtype : qs.dtype)));
  return res;
}

void register_rnn(ConverterTable& t) {
  t["LinearAttention"] = linear_attention;
  t["CausalConvWithState"] = causal_conv_with_state;
  t["RNN"] = [](const NodeCtx& c) { return recurrent(c, {RnnCell::Rnn, 1}); };
  t["GRU"] = [](const NodeCtx& c) { return recurrent(c, {RnnCell::Gru, 3}); };
  t["LSTM"] = [](const NodeCtx& c) { return recurrent(c, {RnnCell::Lstm, 4}); };
  t["RotaryEmbedding"] = rotary_embedding;
}

}  // namespace rlx::onnx_io
