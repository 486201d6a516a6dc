// ONNX sequence ops: RotaryEmbedding, and the recurrent RNN, GRU and LSTM unrolled over the (static) sequence at import time
// into IR matmuls and elementwise ops. The input projection of every step is one matmul.
#include <cmath>
#include <limits>

#include "rlx/limits.h"

#include "io/onnx/importer.h"

namespace rlx::onnx_io {
namespace {

using V = std::vector<Val>;

enum class Cell { Rnn, Gru, Lstm };

struct RnnSpec {
  Cell cell;
  int64_t gates;                 // 1, 3, 4
  std::vector<std::string> acts;  // defaults
};

// One activation by its ONNX name (Sigmoid, Tanh, Relu).
Value activate(const NodeCtx& c, const std::string& name, Value x) {
  auto& g = c.g();
  if (name == "Sigmoid") return g.sigmoid(x);
  if (name == "Tanh") return g.tanh(x);
  if (name == "Relu") return g.relu(x);
  c.fail("activation '" + name + "' is not supported (Sigmoid, Tanh, Relu)");
}

V recurrent(const NodeCtx& c, const RnnSpec& spec) {
  c.allow_only({"activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size",
                "input_forget", "layout", "linear_before_reset"});
  auto& g = c.g();
  if (c.has("activation_alpha") || c.has("activation_beta"))
    c.fail("activation_alpha/beta are not supported (they only apply to activations rlx does not support here)");
  if (c.i("input_forget", 0) != 0) c.fail("input_forget=1 is not supported");
  const std::string dir = c.s("direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional") c.fail("direction '" + dir + "'");
  const int64_t dirs = dir == "bidirectional" ? 2 : 1;
  const bool batch_first = c.i("layout", 0) != 0;
  const bool lbr = c.i("linear_before_reset", 0) != 0;
  const double clip = c.f("clip", 0.0);
  std::vector<std::string> acts;
  if (const auto* a = c.attr("activations"))
    for (const auto& s : a->strings()) acts.push_back(s);
  const size_t per_dir = spec.acts.size();
  if (acts.empty())
    for (int64_t d = 0; d < dirs; ++d) acts.insert(acts.end(), spec.acts.begin(), spec.acts.end());
  if (acts.size() != per_dir * static_cast<size_t>(dirs)) c.fail("activations must list " + std::to_string(per_dir) + " per direction");

  Value x = c.value(0);
  const Shape& xs = c.shape(0);
  if (!xs.is_static() || xs.rank() != 3) c.fail("X must be a static 3-d tensor");
  if (batch_first) x = g.transpose(x, {1, 0, 2});
  const auto xd = g.shape(x).concrete();
  const int64_t S = xd[0], B = xd[1], I = xd[2];
  const Shape& ws = c.shape(1);
  if (!ws.is_static() || ws.rank() != 3) c.fail("W must be a static 3-d tensor, got " + ws.str());
  const int64_t GH = ws.concrete()[1];
  const int64_t H = GH / spec.gates;
  if (H <= 0 || GH % spec.gates != 0)
    c.fail("W " + ws.str() + ": dim 1 must be " + std::to_string(spec.gates) + " x hidden_size with hidden_size >= 1");
  if (c.has("hidden_size") && c.i("hidden_size", 0) != H) c.fail("hidden_size does not match W");
  // Every operand's shape before any of its dims is read (ONNX: W [dirs, G*H, I], R [dirs, G*H, H],
  // B [dirs, 2*G*H], initial_h / initial_c [dirs, batch, H], P [dirs, 3*H]).
  auto need_shape = [&](size_t i, const char* what, const std::vector<int64_t>& want) {
    if (!c.present(i)) return;
    const Shape& s = c.shape(i);
    std::vector<Dim> wd(want.begin(), want.end());
    if (batch_first && (i == 5 || i == 6)) std::swap(wd[0], wd[1]);
    if (s.dims != wd)
      c.fail(std::string(what) + " (input " + std::to_string(i) + ") must have shape " + dims_str(wd) + ", got " + s.str());
    if (s.dtype != xs.dtype) c.fail(std::string(what) + " must have X's type " + dtype_name(xs.dtype) + ", got " + s.str());
  };
  need_shape(1, "W", {dirs, GH, I});
  need_shape(2, "R", {dirs, GH, H});
  need_shape(3, "B", {dirs, 2 * GH});
  need_shape(5, "initial_h", {dirs, B, H});
  if (spec.cell == Cell::Lstm) {
    need_shape(6, "initial_c", {dirs, B, H});
    need_shape(7, "P", {dirs, 3 * H});
  }
  if (S < 1 || B < 1) c.fail("X " + xs.str() + " has no time steps or no batch; both must be >= 1");
  const int64_t max_steps = active_limits().max_unroll_steps;
  if (S > max_steps)
    c.fail("the sequence has " + std::to_string(S) + " time steps; rlx unrolls " + c.node().op_type() +
           " at import time and allows at most " + std::to_string(max_steps) +
           " steps (raise OnnxImportOptions::limits.max_unroll_steps, or Limits::max_unroll_steps of the process defaults)");
  if (c.present(4)) {
    if (!is_int(c.shape(4).dtype) || c.shape(4).dims != std::vector<Dim>{Dim(B)})
      c.fail("sequence_lens (input 4) must be an integer tensor of shape [" + std::to_string(B) + "], got " +
             c.shape(4).str());
    for (int64_t len : c.ints_input(4, "sequence_lens"))
      if (len != S) c.fail("sequence_lens shorter than the sequence are not supported");
  }
  const DType dt = xs.dtype;
  if (!(clip >= 0) || std::isinf(clip)) c.fail("clip must be a finite value >= 0 (0: none)");
  // Constants every step uses are made once: per-step copies would all be same-shaped
  // constants, which the optimizer's CSE compares pairwise (quadratic in the steps).
  const Value clip_lo = c.scalar_like(-clip, dt), clip_hi = c.scalar_like(clip, dt), one = c.scalar_like(1.0, dt);
  auto clipv = [&](Value v) {
    if (clip <= 0) return v;
    return g.min(g.max(v, clip_lo), clip_hi);
  };
  // Splits v (S, ...) into its S steps (1, ...) by halving: every value is narrowed at most
  // twice. (S narrows of one value, differing only in their start, would make the optimizer's
  // CSE compare every pair: import + compile time quadratic in the steps.)
  auto split_steps = [&](Value v) {
    std::vector<Value> out(static_cast<size_t>(S));
    auto rec = [&](auto&& self, Value part, int64_t lo, int64_t n) -> void {
      if (n == 1) {
        out[static_cast<size_t>(lo)] = part;
        return;
      }
      const int64_t mid = n / 2;
      self(self, g.narrow(part, 0, 0, mid), lo, mid);
      self(self, g.narrow(part, 0, mid, n - mid), lo + mid, n - mid);
    };
    if (S > 0) rec(rec, v, 0, S);
    return out;
  };
  auto gate = [&](Value v, int64_t k) { return g.narrow(v, -1, k * H, H); };

  // initial_h / initial_c as (dirs, B, H) whatever the layout.
  auto state_in = [&](size_t i) { return batch_first ? g.transpose(c.value(i), {1, 0, 2}) : c.value(i); };
  std::vector<Value> ys, hs, cs;
  for (int64_t d = 0; d < dirs; ++d) {
    const bool reverse = dir == "reverse" || d == 1;
    Value w = g.reshape(g.narrow(c.value(1), 0, d, 1), {GH, I});
    Value r = g.reshape(g.narrow(c.value(2), 0, d, 1), {GH, H});
    Value wt = g.transpose(w, {1, 0}), rt = g.transpose(r, {1, 0});
    std::optional<Value> wb, rb;
    if (c.present(3)) {
      Value b = g.reshape(g.narrow(c.value(3), 0, d, 1), {2 * GH});
      wb = g.narrow(b, 0, 0, GH);
      rb = g.narrow(b, 0, GH, GH);
    }
    // The input projection of every step at once: (S, B, GH).
    Value xw = g.matmul(x, wt);
    if (wb) xw = g.add(xw, *wb);
    Value h = c.present(5) ? g.reshape(g.narrow(state_in(5), 0, d, 1), {B, H}) : g.expand(c.scalar_like(0.0, dt), {B, H});
    Value cell = c.present(6) && spec.cell == Cell::Lstm ? g.reshape(g.narrow(state_in(6), 0, d, 1), {B, H})
                                                         : g.expand(c.scalar_like(0.0, dt), {B, H});
    std::optional<Value> peep_i, peep_o, peep_f;
    if (spec.cell == Cell::Lstm && c.present(7)) {
      Value peep = g.reshape(g.narrow(c.value(7), 0, d, 1), {3 * H});
      peep_i = g.narrow(peep, 0, 0, H);
      peep_o = g.narrow(peep, 0, H, H);
      peep_f = g.narrow(peep, 0, 2 * H, H);
    }
    // GRU's h-gate slices of R and Rb (the other cells have no third gate).
    std::optional<Value> rt_h, rb_h;
    if (spec.cell == Cell::Gru) {
      rt_h = g.narrow(rt, 1, 2 * H, H);
      if (rb) rb_h = g.narrow(*rb, 0, 2 * H, H);
    }
    const std::vector<Value> xsteps = split_steps(xw);
    const auto* a = &acts[static_cast<size_t>(d) * per_dir];
    std::vector<Value> steps(static_cast<size_t>(S));
    for (int64_t k = 0; k < S; ++k) {
      const int64_t t = reverse ? S - 1 - k : k;
      Value xt = g.reshape(xsteps[static_cast<size_t>(t)], {B, GH});
      if (spec.cell == Cell::Rnn) {
        Value pre = g.add(xt, g.matmul(h, rt));
        if (rb) pre = g.add(pre, *rb);
        h = activate(c, a[0], clipv(pre));
      } else if (spec.cell == Cell::Gru) {
        // W/R gate order: z, r, h.
        Value hr = g.matmul(h, rt);
        if (rb) hr = g.add(hr, *rb);
        Value z = activate(c, a[0], clipv(g.add(gate(xt, 0), gate(hr, 0))));
        Value rr = activate(c, a[0], clipv(g.add(gate(xt, 1), gate(hr, 1))));
        Value hh;
        if (lbr) {
          hh = g.add(gate(xt, 2), g.mul(rr, gate(hr, 2)));
        } else {
          Value rh = g.matmul(g.mul(rr, h), *rt_h);
          if (rb_h) rh = g.add(rh, *rb_h);
          hh = g.add(gate(xt, 2), rh);
        }
        hh = activate(c, a[1], clipv(hh));
        h = g.add(g.mul(g.sub(one, z), hh), g.mul(z, h));
      } else {
        // W/R gate order: i, o, f, c; peepholes: i, o, f.
        Value pre = g.add(xt, g.matmul(h, rt));
        if (rb) pre = g.add(pre, *rb);
        Value pi = gate(pre, 0), po = gate(pre, 1), pf = gate(pre, 2), pc = gate(pre, 3);
        if (peep_i) {
          pi = g.add(pi, g.mul(*peep_i, cell));
          pf = g.add(pf, g.mul(*peep_f, cell));
        }
        Value it = activate(c, a[0], clipv(pi));
        Value ft = activate(c, a[0], clipv(pf));
        Value ct = activate(c, a[1], clipv(pc));
        cell = g.add(g.mul(ft, cell), g.mul(it, ct));
        if (peep_o) po = g.add(po, g.mul(*peep_o, cell));
        Value ot = activate(c, a[0], clipv(po));
        h = g.mul(ot, activate(c, a[2], cell));
      }
      steps[static_cast<size_t>(t)] = g.reshape(h, {1, 1, B, H});
    }
    ys.push_back(g.concat(steps, 0));  // (S, 1, B, H)
    hs.push_back(g.reshape(h, {1, B, H}));
    cs.push_back(g.reshape(cell, {1, B, H}));
  }
  Value y = dirs == 1 ? ys[0] : g.concat(ys, 1);
  Value yh = dirs == 1 ? hs[0] : g.concat(hs, 0);
  Value yc = dirs == 1 ? cs[0] : g.concat(cs, 0);
  if (batch_first) {
    y = g.transpose(y, {2, 0, 1, 3});
    yh = g.transpose(yh, {1, 0, 2});
    yc = g.transpose(yc, {1, 0, 2});
  }
  V outs{c.out(y), c.out(yh)};
  if (spec.cell == Cell::Lstm) outs.push_back(c.out(yc));
  while (outs.size() > c.num_outputs()) outs.pop_back();
  return outs;
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

void register_rnn(ConverterTable& t) {
  t["RNN"] = [](const NodeCtx& c) { return recurrent(c, {Cell::Rnn, 1, {"Tanh"}}); };
  t["GRU"] = [](const NodeCtx& c) { return recurrent(c, {Cell::Gru, 3, {"Sigmoid", "Tanh"}}); };
  t["LSTM"] = [](const NodeCtx& c) { return recurrent(c, {Cell::Lstm, 4, {"Sigmoid", "Tanh", "Tanh"}}); };
  t["RotaryEmbedding"] = rotary_embedding;
}

}  // namespace rlx::onnx_io
