// CPU kernel of Recurrent (ONNX RNN / GRU / LSTM over a whole sequence, ops.h).
//
// The input projection of every time step and direction is one GEMM, x (S*B, I) x W^T
// (I, D*G*H), onto rows that start as the biases that can be added up front (Wb + Rb; for GRU
// with linear_before_reset only Wb on the h gate). Then each direction walks its steps: a GEMM
// h (B, H) x R^T (H, G*H) accumulates onto that step's rows, and one loop over each batch row
// applies clip, the activations and the cell update on vector lanes (f32: 8 lanes in an AVX2
// function where the CPU has AVX2, else 4; the activations' formulas of codegen/formula.h through
// vec_formula.h, the bits of the Activation kernel), writing h straight into y, where the next
// step's GEMM reads it. GRU without linear_before_reset computes (r * h) x Rh^T as a second GEMM
// after its z and r gates. The two directions of a bidirectional layer run on two threads when
// the budget has them. f64 computes in double (scalar lanes, the libm formulas); f16 / bf16 are
// widened to f32, computed as f32 and rounded on store (h and c stay f32 between steps).
// Scratch (the projection, the cell state, GRU's temporaries) is thread-local and reused across
// runs: nothing is allocated per step.
#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/blas.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/vec_formula.h"
#include "backends/cpu/vec_math.h"
#include "codegen/formula.h"

#pragma GCC diagnostic ignored "-Wpsabi"  // 8-lane bodies only run inlined in AVX2 functions (vec_math.h)

namespace rlx::cpu {
namespace {

// ---- lanes: f32 vectors (vec_math.h) or one double ----------------------------------------

template <class V> struct Lane {
  using T = float;
  static constexpr int64_t n = vec::kLanes<V>;
};
template <> struct Lane<double> {
  using T = double;
  static constexpr int64_t n = 1;
};

// m (<= lanes) values from p; the missing lanes are 0.
template <class V> RLX_VEC_INLINE V ld(const typename Lane<V>::T* p, int64_t m) {
  if constexpr (std::is_same_v<V, double>) {
    (void)m;
    return *p;
  } else {
    if (m == Lane<V>::n) return vec::load<V>(p);
    float buf[Lane<V>::n] = {};
    std::memcpy(buf, p, static_cast<size_t>(m) * sizeof(float));
    return vec::load<V>(buf);
  }
}
template <class V> RLX_VEC_INLINE void st(typename Lane<V>::T* p, const V& v, int64_t m) {
  if constexpr (std::is_same_v<V, double>) {
    (void)m;
    *p = v;
  } else {
    if (m == Lane<V>::n) return vec::store(p, v);
    float buf[Lane<V>::n];
    vec::store(buf, v);
    std::memcpy(p, buf, static_cast<size_t>(m) * sizeof(float));
  }
}
template <class V> RLX_VEC_INLINE V splat(typename Lane<V>::T v) {
  if constexpr (std::is_same_v<V, double>) return v;
  else return vec::splat<V>(v);
}

// Activation k (Sigmoid, Tanh or Relu; the op's inference allows no other).
template <class V> RLX_VEC_INLINE V act(ActKind k, const V& v) {
  if constexpr (std::is_same_v<V, double>) {
    switch (k) {
      case ActKind::Sigmoid: return codegen::ActFormula<ActKind::Sigmoid>::eval(v);
      case ActKind::Tanh: return codegen::ActFormula<ActKind::Tanh>::eval(v);
      default: return codegen::ActFormula<ActKind::Relu>::eval(v);
    }
  } else {
    switch (k) {
      case ActKind::Sigmoid: return eval_activation<ActKind::Sigmoid>(v);
      case ActKind::Tanh: return eval_activation<ActKind::Tanh>(v);
      default: return eval_activation<ActKind::Relu>(v);
    }
  }
}

// min(max(v, -c), c) when c > 0 (the graph's Max then Min; NaN stays NaN).
template <class V> RLX_VEC_INLINE V clipped(const V& v, typename Lane<V>::T c) {
  if (!(c > 0)) return v;
  if constexpr (std::is_same_v<V, double>) {
    const double lo = v < -c ? -c : v;
    return lo > c ? c : lo;
  } else {
    const V lo = vec::select<V>(v < -c, splat<V>(-c), v);
    return vec::select<V>(lo > c, splat<V>(c), lo);
  }
}

// The chunk bodies below are lambdas inlined into their walk (so the 8-lane one is AVX2 code).
#define RLX_LANES_INLINE __attribute__((always_inline))

// Calls f(j, m) for chunks of m <= lanes values covering [0, n).
template <class V, class F> RLX_VEC_INLINE void chunks(int64_t n, F&& f) {
  constexpr int64_t L = Lane<V>::n;
  int64_t j = 0;
  for (; j + L <= n; j += L) f(j, L);
  if (j < n) f(j, n - j);
}

// ---- one layer ------------------------------------------------------------------------------

// The operands of one run in compute type T, contiguous; b / h0 / c0 / p null when absent,
// yc null for rnn / gru.
template <class T> struct Args {
  const ops::Recurrent* op = nullptr;
  int64_t S = 0, B = 0, I = 0, H = 0, G = 0, D = 1;
  const T *x = nullptr, *w = nullptr, *r = nullptr, *b = nullptr, *h0 = nullptr, *c0 = nullptr, *p = nullptr;
  T *y = nullptr, *yh = nullptr, *yc = nullptr;

  bool batch_first() const { return op->batch_first; }
  // Row of x (and of the projection) of time t, batch 0, and the step between batch rows.
  int64_t x_row(int64_t t) const { return batch_first() ? t : t * B; }
  int64_t x_row_step() const { return batch_first() ? S : 1; }
  // Element offset of y's row (t, d, batch 0) and the step between batch rows.
  int64_t y_at(int64_t t, int64_t d) const { return batch_first() ? (t * D + d) * H : (t * D + d) * B * H; }
  int64_t y_step() const { return batch_first() ? S * D * H : H; }
  // Element offset of a state's (initial_h, y_h, ...) row (d, batch 0) and the step between batch rows.
  int64_t state_at(int64_t d) const { return batch_first() ? d * H : d * B * H; }
  int64_t state_step() const { return batch_first() ? D * H : H; }
};

// Per-thread scratch of one direction's walk (grown once, reused across runs).
template <class T> struct DirScratch {
  std::vector<T> c, tmp, hn, rbh;
};
template <class T> DirScratch<T>& dir_scratch() {
  thread_local DirScratch<T> s;
  return s;
}
template <class T> void fit(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

// Walks direction d over its S steps. xw: the projection with the up-front biases, rows of
// D * G * H (ld_xw), this direction's G * H columns at d * G * H.
template <class V, class T>
RLX_VEC_INLINE void walk(const Args<T>& a, int64_t d, T* xw) {
  const ops::Recurrent& op = *a.op;
  const int64_t S = a.S, B = a.B, H = a.H, GH = a.G * a.H, D = a.D;
  const bool reverse = op.direction == RnnDirection::Reverse || d == 1;
  const RnnCell cell = op.cell;
  const ActKind f = op.activation(d, 0);
  const ActKind g = cell == RnnCell::Rnn ? f : op.activation(d, 1);
  const ActKind hk = cell == RnnCell::Lstm ? op.activation(d, 2) : f;
  const T clip = static_cast<T>(op.clip);
  const T* r = a.r + d * GH * H;  // (G*H, H): R^T is its transpose
  const int64_t ldg = a.x_row_step() * D * GH, ldy = a.y_step(), lds = a.state_step();

  DirScratch<T>& s = dir_scratch<T>();
  T* c = nullptr;
  if (cell == RnnCell::Lstm) {
    fit(s.c, B * H);
    c = s.c.data();
    for (int64_t b = 0; b < B; ++b)
      if (a.c0) std::memcpy(c + b * H, a.c0 + a.state_at(d) + b * lds, static_cast<size_t>(H) * sizeof(T));
      else std::fill(c + b * H, c + (b + 1) * H, T(0));
  }
  const bool gru = cell == RnnCell::Gru, lbr = gru && op.linear_before_reset;
  const T* rbh = nullptr;  // GRU linear_before_reset: Rb of the h gate (zeros without biases)
  if (gru) {
    fit(s.tmp, B * H);
    if (lbr) {
      fit(s.hn, B * H);
      fit(s.rbh, H);
      for (int64_t j = 0; j < H; ++j) s.rbh[static_cast<size_t>(j)] = a.b ? a.b[d * 2 * GH + GH + 2 * H + j] : T(0);
      rbh = s.rbh.data();
    }
  }
  const T* peep = a.p ? a.p + d * 3 * H : nullptr;  // i, o, f

  // h of the previous step: initial_h, or nothing (zeros) at the first step.
  const T* hp = a.h0 ? a.h0 + a.state_at(d) : nullptr;
  int64_t ldh = lds;
  for (int64_t k = 0; k < S; ++k) {
    const int64_t t = reverse ? S - 1 - k : k;
    T* gates = xw + a.x_row(t) * D * GH + d * GH;
    T* hy = a.y + a.y_at(t, d);
    if (gru) {
      // z and r: h R^T on their 2H columns, then the activations; tmp = r * h.
      if (hp) gemm(false, true, B, 2 * H, H, T(1), hp, ldh, r, H, T(1), gates, ldg);
      if (hp && lbr) gemm(false, true, B, H, H, T(1), hp, ldh, r + 2 * H * H, H, T(0), s.hn.data(), H);
      for (int64_t b = 0; b < B; ++b) {
        T* gz = gates + b * ldg;
        T* tr = s.tmp.data() + b * H;
        const T* hb = hp ? hp + b * ldh : nullptr;
        chunks<V>(H, [&](int64_t j, int64_t m) RLX_LANES_INLINE {
          const V z = act(f, clipped(ld<V>(gz + j, m), clip));
          const V rr = act(f, clipped(ld<V>(gz + H + j, m), clip));
          st(gz + j, z, m);
          st(gz + H + j, rr, m);
          if (hb) st(tr + j, rr * ld<V>(hb + j, m), m);
        });
      }
      if (hp && !lbr) gemm(false, true, B, H, H, T(1), s.tmp.data(), H, r + 2 * H * H, H, T(1), gates + 2 * H, ldg);
      for (int64_t b = 0; b < B; ++b) {
        const T* gz = gates + b * ldg;
        const T* hb = hp ? hp + b * ldh : nullptr;
        const T* hnb = hp && lbr ? s.hn.data() + b * H : nullptr;
        T* out = hy + b * ldy;
        chunks<V>(H, [&](int64_t j, int64_t m) RLX_LANES_INLINE {
          const V z = ld<V>(gz + j, m);
          V pre = ld<V>(gz + 2 * H + j, m);
          if (lbr) {
            const V hr = hnb ? ld<V>(hnb + j, m) + ld<V>(rbh + j, m) : ld<V>(rbh + j, m);
            pre = pre + ld<V>(gz + H + j, m) * hr;
          }
          const V n = act(g, clipped(pre, clip));
          const V hprev = hb ? ld<V>(hb + j, m) : splat<V>(T(0));
          st(out + j, (splat<V>(T(1)) - z) * n + z * hprev, m);
        });
      }
    } else {
      if (hp) gemm(false, true, B, GH, H, T(1), hp, ldh, r, H, T(1), gates, ldg);
      for (int64_t b = 0; b < B; ++b) {
        const T* gb = gates + b * ldg;
        T* out = hy + b * ldy;
        if (cell == RnnCell::Rnn) {
          chunks<V>(H, [&](int64_t j, int64_t m) RLX_LANES_INLINE { st(out + j, act(f, clipped(ld<V>(gb + j, m), clip)), m); });
          continue;
        }
        T* cb = c + b * H;
        chunks<V>(H, [&](int64_t j, int64_t m) RLX_LANES_INLINE {
          // Gate order i, o, f, c; peepholes i, o, f.
          const V cprev = ld<V>(cb + j, m);
          V pi = ld<V>(gb + j, m), po = ld<V>(gb + H + j, m), pf = ld<V>(gb + 2 * H + j, m);
          if (peep) {
            pi = pi + ld<V>(peep + j, m) * cprev;
            pf = pf + ld<V>(peep + 2 * H + j, m) * cprev;
          }
          const V it = act(f, clipped(pi, clip));
          const V ft = act(f, clipped(pf, clip));
          const V ct = act(g, clipped(ld<V>(gb + 3 * H + j, m), clip));
          const V cn = ft * cprev + it * ct;
          st(cb + j, cn, m);
          if (peep) po = po + ld<V>(peep + H + j, m) * cn;
          const V ot = act(f, clipped(po, clip));
          st(out + j, ot * act(hk, cn), m);
        });
      }
    }
    hp = hy;
    ldh = ldy;
  }
  // y_h: the last step's h (initial_h, or zeros, without steps); y_c: the cell state.
  for (int64_t b = 0; b < B; ++b) {
    T* yh = a.yh + a.state_at(d) + b * lds;
    if (hp) std::memcpy(yh, hp + b * ldh, static_cast<size_t>(H) * sizeof(T));
    else std::fill(yh, yh + H, T(0));
    if (a.yc) std::memcpy(a.yc + a.state_at(d) + b * lds, c + b * H, static_cast<size_t>(H) * sizeof(T));
  }
}

// One instantiation per lane type: the f32 walk with 8 lanes is compiled for AVX2.
template <class T> void walk_generic(const Args<T>& a, int64_t d, T* xw) {
  if constexpr (std::is_same_v<T, double>) walk<double>(a, d, xw);
  else walk<vec::f32x4>(a, d, xw);
}
#if RLX_VEC_X86
RLX_VEC_AVX2 void walk_avx2(const Args<float>& a, int64_t d, float* xw) { walk<vec::f32x8>(a, d, xw); }
#endif

template <class T> void walk_direction(const Args<T>& a, int64_t d, T* xw) {
#if RLX_VEC_X86
  if constexpr (std::is_same_v<T, float>)
    if (vec::has_avx2()) return walk_avx2(a, d, xw);
#endif
  walk_generic(a, d, xw);
}

template <class T> void run_layer(const Args<T>& a) {
  const ops::Recurrent& op = *a.op;
  const int64_t rows = a.S * a.B, GH = a.G * a.H, cols = a.D * GH;
  // The projection's rows start as the biases that can be added before the recurrence:
  // Wb + Rb, except the GRU h gate's Rb under linear_before_reset (it is multiplied by r).
  thread_local std::vector<T> xw_buf, bias_row;
  fit(xw_buf, rows * cols);
  T* xw = xw_buf.data();
  if (a.b) {
    fit(bias_row, cols);
    for (int64_t d = 0; d < a.D; ++d) {
      const T* wb = a.b + d * 2 * GH;
      const T* rb = wb + GH;
      for (int64_t j = 0; j < GH; ++j) {
        const bool keep_rb = op.cell == RnnCell::Gru && op.linear_before_reset && j >= 2 * a.H;
        bias_row[static_cast<size_t>(d * GH + j)] = keep_rb ? wb[j] : wb[j] + rb[j];
      }
    }
    for (int64_t i = 0; i < rows; ++i) std::memcpy(xw + i * cols, bias_row.data(), static_cast<size_t>(cols) * sizeof(T));
  } else {
    std::fill(xw, xw + rows * cols, T(0));
  }
  if (rows > 0 && a.I > 0) gemm(false, true, rows, cols, a.I, T(1), a.x, a.I, a.w, a.I, T(1), xw, cols);
  if (a.D == 2 && num_threads() > 1 && rows > 0) {
    parallel_for(2, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t d = lo; d < hi; ++d) walk_direction(a, d, xw);
    });
  } else {
    for (int64_t d = 0; d < a.D; ++d) walk_direction(a, d, xw);
  }
}

// f16 / bf16: widened to f32 buffers, computed in f32, rounded on store.
template <class H16> void run_half(Args<float> a, std::span<const Tensor> in, std::span<Tensor> out) {
  thread_local std::vector<std::vector<float>> wide;
  wide.resize(in.size() + out.size());
  auto widen = [&](size_t i) -> const float* {
    const Tensor& t = in[i];
    std::vector<float>& v = wide[i];
    fit(v, t.numel());
    const H16* p = t.data<H16>();
    for (int64_t k = 0; k < t.numel(); ++k) v[static_cast<size_t>(k)] = static_cast<float>(p[k]);
    return v.data();
  };
  auto scratch = [&](size_t o) {
    std::vector<float>& v = wide[in.size() + o];
    fit(v, out[o].numel());
    return v.data();
  };
  const ops::Recurrent& op = *a.op;
  a.x = widen(0), a.w = widen(1), a.r = widen(2);
  if (op.has_bias) a.b = widen(static_cast<size_t>(op.bias_input()));
  if (op.has_initial_h) a.h0 = widen(static_cast<size_t>(op.initial_h_input()));
  if (op.has_initial_c) a.c0 = widen(static_cast<size_t>(op.initial_c_input()));
  if (op.has_peepholes) a.p = widen(static_cast<size_t>(op.peepholes_input()));
  a.y = scratch(0), a.yh = scratch(1);
  if (out.size() > 2) a.yc = scratch(2);
  run_layer(a);
  for (size_t o = 0; o < out.size(); ++o) {
    const float* v = wide[in.size() + o].data();
    H16* q = out[o].data<H16>();
    for (int64_t k = 0; k < out[o].numel(); ++k) q[k] = H16(v[k]);
  }
}

template <class T> void run_typed(Args<T> a, std::span<const Tensor> in, std::span<Tensor> out) {
  const ops::Recurrent& op = *a.op;
  auto data = [&](int index) { return index < 0 ? nullptr : in[static_cast<size_t>(index)].data<T>(); };
  a.x = in[0].data<T>(), a.w = in[1].data<T>(), a.r = in[2].data<T>();
  a.b = data(op.bias_input()), a.h0 = data(op.initial_h_input());
  a.c0 = data(op.initial_c_input()), a.p = data(op.peepholes_input());
  a.y = out[0].data<T>(), a.yh = out[1].data<T>();
  if (out.size() > 2) a.yc = out[2].data<T>();
  run_layer(a);
}

}  // namespace

void kernel(const ops::Recurrent& op, KernelContext& ctx) {
  const auto* geom = std::get_if<plan::RecurrentGeom>(&ctx.step.geom);
  if (!geom) throw Error("recurrent: the step has no recurrent geometry (internal)");
  if (ctx.out.size() != op.num_outputs())
    throw Error("recurrent: expected " + std::to_string(op.num_outputs()) + " outputs, got " +
                std::to_string(ctx.out.size()) + " (internal)");
  const DType t = ctx.in[0].dtype();
  Args<float> af;
  af.op = &op;
  af.S = geom->seq, af.B = geom->batch, af.I = geom->input, af.H = geom->hidden, af.G = geom->gates, af.D = geom->dirs;
  switch (t) {
    case DType::F32: return run_typed<float>(af, ctx.in, ctx.out);
    case DType::F16: return run_half<f16>(af, ctx.in, ctx.out);
    case DType::BF16: return run_half<bf16>(af, ctx.in, ctx.out);
    case DType::F64: {
      Args<double> ad;
      ad.op = &op;
      ad.S = af.S, ad.B = af.B, ad.I = af.I, ad.H = af.H, ad.G = af.G, ad.D = af.D;
      return run_typed<double>(ad, ctx.in, ctx.out);
    }
    default:
      throw Error(std::string("recurrent: x must be a float tensor (f32, f16, bf16, f64), got ") + dtype_name(t));
  }
}

}  // namespace rlx::cpu

#undef RLX_LANES_INLINE
