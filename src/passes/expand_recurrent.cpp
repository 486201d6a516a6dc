// Recurrent unrolled over its time steps (expand_recurrent.h).
#include "passes/expand_recurrent.h"

#include "rlx/limits.h"

namespace rlx::passes {

std::vector<Value> expand_recurrent(Graph& g, const ops::Recurrent& op, const std::vector<Value>& in,
                                    const std::string& where) {
  const Shape xs = g.shape(in[0]);
  const DType dt = xs.dtype;
  const Dim s_dim = xs[op.batch_first ? 1 : 0];
  const std::string cell_name = enum_name(op.cell);
  if (s_dim.is_symbolic())
    throw Error(where + " (" + cell_name + " cell): the sequence length '" + s_dim.sym +
                "' is symbolic; backends without a recurrent kernel run the layer unrolled over a static number of "
                "time steps: bind the dim (rlx run --dim " + s_dim.sym + "=N, OnnxImportOptions::dims, or inputs of "
                "static shape), or run on Device::Cpu, which runs any sequence length");
  const int64_t S = s_dim.value;
  const int64_t max_steps = active_limits().max_unroll_steps;
  if (S > max_steps)
    throw Error(where + " (" + cell_name + " cell): the sequence has " + std::to_string(S) +
                " time steps; backends without a recurrent kernel run the layer unrolled, at most " +
                std::to_string(max_steps) +
                " steps (raise CompileOptions::limits.max_unroll_steps, or Limits::max_unroll_steps of the process "
                "defaults; or run on Device::Cpu)");

  const int64_t H = op.hidden_size, G = op.gates(), GH = G * H, dirs = op.directions();
  const Dim B = xs[op.batch_first ? 0 : 1], I = xs[2];
  Value x = op.batch_first ? g.transpose(in[0], {1, 0, 2}) : in[0];  // (S, B, I)
  // Constants every step uses are made once: per-step copies would all be same-shaped
  // constants, which the optimizer's CSE compares pairwise (quadratic in the steps).
  const Value clip_lo = g.scalar(-op.clip, dt), clip_hi = g.scalar(op.clip, dt), one = g.scalar(1.0, dt);
  const Value zeros = g.expand(g.scalar(0.0, dt), {B, Dim(H)});
  auto clipv = [&](Value v) { return op.clip > 0 ? g.min(g.max(v, clip_lo), clip_hi) : v; };
  auto activate = [&](ActKind k, Value v) { return g.act(k, clipv(v)); };
  // Splits v (S, ...) into its S steps (1, ...) by halving: every value is narrowed at most
  // twice. (S narrows of one value, differing only in their start, would make the optimizer's
  // CSE compare every pair: compile time quadratic in the steps.)
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
  auto state_in = [&](int index) {
    const Value v = in[static_cast<size_t>(index)];
    return op.batch_first ? g.transpose(v, {1, 0, 2}) : v;
  };
  const std::optional<Value> h0 = op.has_initial_h ? std::optional<Value>(state_in(op.initial_h_input())) : std::nullopt;
  const std::optional<Value> c0 = op.has_initial_c ? std::optional<Value>(state_in(op.initial_c_input())) : std::nullopt;

  std::vector<Value> ys, hs, cs;
  for (int64_t d = 0; d < dirs; ++d) {
    const bool reverse = op.direction == RnnDirection::Reverse || d == 1;
    const Value w = g.reshape(g.narrow(in[1], 0, d, 1), {Dim(GH), I});
    const Value r = g.reshape(g.narrow(in[2], 0, d, 1), {Dim(GH), Dim(H)});
    const Value wt = g.transpose(w, {1, 0}), rt = g.transpose(r, {1, 0});
    std::optional<Value> wb, rb;
    if (op.has_bias) {
      const Value b = g.reshape(g.narrow(in[static_cast<size_t>(op.bias_input())], 0, d, 1), {Dim(2 * GH)});
      wb = g.narrow(b, 0, 0, GH);
      rb = g.narrow(b, 0, GH, GH);
    }
    // The input projection of every step at once: (S, B, GH).
    Value xw = g.matmul(x, wt);
    if (wb) xw = g.add(xw, *wb);
    Value h = h0 ? g.reshape(g.narrow(*h0, 0, d, 1), {B, Dim(H)}) : zeros;
    Value cell = c0 ? g.reshape(g.narrow(*c0, 0, d, 1), {B, Dim(H)}) : zeros;
    std::optional<Value> peep_i, peep_o, peep_f;
    if (op.has_peepholes) {
      const Value p = g.reshape(g.narrow(in[static_cast<size_t>(op.peepholes_input())], 0, d, 1), {Dim(3 * H)});
      peep_i = g.narrow(p, 0, 0, H);
      peep_o = g.narrow(p, 0, H, H);
      peep_f = g.narrow(p, 0, 2 * H, H);
    }
    // GRU's h-gate slices of R and Rb (the other cells have no third gate).
    std::optional<Value> rt_h, rb_h;
    if (op.cell == RnnCell::Gru) {
      rt_h = g.narrow(rt, 1, 2 * H, H);
      if (rb) rb_h = g.narrow(*rb, 0, 2 * H, H);
    }
    const ActKind f = op.activation(d, 0);
    const ActKind ga = op.cell == RnnCell::Rnn ? f : op.activation(d, 1);
    const ActKind ha = op.cell == RnnCell::Lstm ? op.activation(d, 2) : f;
    const std::vector<Value> xsteps = split_steps(xw);
    std::vector<Value> steps(static_cast<size_t>(S));
    for (int64_t k = 0; k < S; ++k) {
      const int64_t t = reverse ? S - 1 - k : k;
      const Value xt = g.reshape(xsteps[static_cast<size_t>(t)], {B, Dim(GH)});
      if (op.cell == RnnCell::Rnn) {
        Value pre = g.add(xt, g.matmul(h, rt));
        if (rb) pre = g.add(pre, *rb);
        h = activate(f, pre);
      } else if (op.cell == RnnCell::Gru) {
        // W/R gate order: z, r, h.
        Value hr = g.matmul(h, rt);
        if (rb) hr = g.add(hr, *rb);
        const Value z = activate(f, g.add(gate(xt, 0), gate(hr, 0)));
        const Value rr = activate(f, g.add(gate(xt, 1), gate(hr, 1)));
        Value hh;
        if (op.linear_before_reset) {
          hh = g.add(gate(xt, 2), g.mul(rr, gate(hr, 2)));
        } else {
          Value rh = g.matmul(g.mul(rr, h), *rt_h);
          if (rb_h) rh = g.add(rh, *rb_h);
          hh = g.add(gate(xt, 2), rh);
        }
        hh = activate(ga, hh);
        h = g.add(g.mul(g.sub(one, z), hh), g.mul(z, h));
      } else {
        // W/R gate order: i, o, f, c; peepholes: i, o, f.
        Value pre = g.add(xt, g.matmul(h, rt));
        if (rb) pre = g.add(pre, *rb);
        Value pi = gate(pre, 0), po = gate(pre, 1), pf = gate(pre, 2);
        const Value pc = gate(pre, 3);
        if (peep_i) {
          pi = g.add(pi, g.mul(*peep_i, cell));
          pf = g.add(pf, g.mul(*peep_f, cell));
        }
        const Value it = activate(f, pi);
        const Value ft = activate(f, pf);
        const Value ct = activate(ga, pc);
        cell = g.add(g.mul(ft, cell), g.mul(it, ct));
        if (peep_o) po = g.add(po, g.mul(*peep_o, cell));
        const Value ot = activate(f, po);
        h = g.mul(ot, g.act(ha, cell));
      }
      steps[static_cast<size_t>(t)] = g.reshape(h, {Dim(1), Dim(1), B, Dim(H)});
    }
    // (S, 1, B, H); no steps: empty.
    ys.push_back(S == 0 ? g.expand(g.scalar(0.0, dt), {Dim(0), Dim(1), B, Dim(H)}) : S == 1 ? steps[0] : g.concat(steps, 0));
    hs.push_back(g.reshape(h, {Dim(1), B, Dim(H)}));
    cs.push_back(g.reshape(cell, {Dim(1), B, Dim(H)}));
  }
  Value y = dirs == 1 ? ys[0] : g.concat(ys, 1);
  Value yh = dirs == 1 ? hs[0] : g.concat(hs, 0);
  Value yc = dirs == 1 ? cs[0] : g.concat(cs, 0);
  if (op.batch_first) {
    y = g.transpose(y, {2, 0, 1, 3});
    yh = g.transpose(yh, {1, 0, 2});
    yc = g.transpose(yc, {1, 0, 2});
  }
  std::vector<Value> outs{y, yh};
  if (op.cell == RnnCell::Lstm) outs.push_back(yc);
  return outs;
}

}  // namespace rlx::passes
