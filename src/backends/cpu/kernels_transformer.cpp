// CPU kernels: FusedSwiGLU, FusedAttentionBlock, FusedTransformerLayer.
// f16/bf16 inputs are widened to f32 once and the intermediates live in f32 buffers, but every
// intermediate is rounded to the storage type where the unfused graph stores it (each product,
// each bias add, the attention output, the residual sum, the norm outputs, the activation), so
// the fused op computes what the graph it replaces computes: an f16 product that overflows is
// inf here too. Activations are the standalone Activation kernel's (NaN stays NaN through Relu).
#include <algorithm>
#include <cmath>
#include <optional>
#include <type_traits>
#include <vector>

#include "backends/cpu/attention_core.h"
#include "backends/cpu/blas.h"
#include "backends/cpu/elementwise_core.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"

namespace rlx::cpu {
namespace {

constexpr int64_t kGrain = 1 << 14;

int64_t row_grain(int64_t row_len) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(row_len, 1)); }

// Rounds n compute-type values to the storage type T in place (a no-op when T is the compute
// type): the value the unfused graph would have stored in a tensor of dtype T.
template <class T>
void round_to(compute_t<T>* x, int64_t n) {
  if constexpr (!std::is_same_v<T, compute_t<T>>) {
    parallel_for(n, kGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) x[i] = load(store<T>(x[i]));
    });
  } else {
    (void)x;
    (void)n;
  }
}

// Calls f.template operator()<T>() for the float storage types; throws for the rest.
template <class F>
void visit_float(const char* op, DType t, F&& f) {
  visit_dtype(t, [&]<DType D>() {
    if constexpr (D == DType::F32 || D == DType::F64 || D == DType::F16 || D == DType::BF16)
      f.template operator()<typename dtype_storage<D>::type>();
    else
      throw Error(std::string(op) + ": unsupported dtype " + dtype_name(D));
  });
}

// Output of storage type T written through a compute-type buffer when they differ.
template <class T>
class OutBuf {
 public:
  using C = compute_t<T>;
  explicit OutBuf(Tensor& t) : t_(t) {
    if constexpr (std::is_same_v<T, C>) {
      ptr_ = t.data<T>();
    } else {
      buf_.resize(static_cast<size_t>(t.numel()));
      ptr_ = buf_.data();
    }
  }
  C* get() { return ptr_; }
  void finish() {
    if constexpr (!std::is_same_v<T, C>) {
      T* dst = t_.data<T>();
      parallel_for(t_.numel(), kGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) dst[i] = store<T>(buf_[static_cast<size_t>(i)]);
      });
    }
  }

 private:
  Tensor& t_;
  std::vector<C> buf_;
  C* ptr_ = nullptr;
};

// y (m, n) = x (m, k) @ w (k, n) + bias (n)?, the product and the sum each rounded to T.
template <class T, class C = compute_t<T>>
void linear(const C* x, int64_t m, int64_t k, const C* w, int64_t n, const C* bias, C* y) {
  gemm(false, false, m, n, k, C(1), x, k, w, n, C(0), y, n);
  round_to<T>(y, m * n);
  if (!bias) return;
  parallel_for(m, row_grain(n), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r)
      for (int64_t j = 0; j < n; ++j) y[r * n + j] += bias[j];
  });
  round_to<T>(y, m * n);
}

// y = LayerNorm(x + res) over rows of length n (y may alias x or res). The sum is rounded to T
// (as the unfused Add stores it), statistics in double, the result rounded to T: the same
// arithmetic as the FusedResidualLN / LayerNorm kernels.
template <class T, class C = compute_t<T>>
void residual_layer_norm(const C* x, const C* res, const C* g, const C* b, double eps, int64_t m, int64_t n,
                         C* y) {
  parallel_for(m, row_grain(n), [&](int64_t lo, int64_t hi) {
    std::vector<double> t(static_cast<size_t>(n));
    for (int64_t r = lo; r < hi; ++r) {
      double mean = 0;
      for (int64_t j = 0; j < n; ++j) {
        t[static_cast<size_t>(j)] = static_cast<double>(load(store<T>(x[r * n + j] + res[r * n + j])));
        mean += t[static_cast<size_t>(j)];
      }
      mean /= static_cast<double>(n);
      double var = 0;
      for (int64_t j = 0; j < n; ++j) {
        const double c = t[static_cast<size_t>(j)] - mean;
        var += c * c;
      }
      var /= static_cast<double>(n);
      const double inv = 1.0 / std::sqrt(var + eps);
      for (int64_t j = 0; j < n; ++j)
        y[r * n + j] = load(store<T>(static_cast<C>((t[static_cast<size_t>(j)] - mean) * inv *
                                                        static_cast<double>(g[j]) + static_cast<double>(b[j]))));
    }
  });
}

// The standalone Activation kernel's arithmetic (activation_span on the compute type, then
// rounded to T), so NaN, inf and -0.0 come out as the unfused graph's Activation gives them.
template <class T, class C = compute_t<T>>
void activate(ActKind kind, C* x, int64_t n) {
  if (kind != ActKind::Gelu && kind != ActKind::GeluApprox && kind != ActKind::Relu && kind != ActKind::Silu)
    throw Error(std::string("fused_transformer_layer: unsupported activation ") + enum_name(kind) +
                " (gelu, gelu_approx, relu or silu)");
  parallel_for(n, kGrain, [&](int64_t lo, int64_t hi) { activation_span(kind, dtype_of<C>(), x + lo, x + lo, hi - lo); });
  round_to<T>(x, n);
}

template <class C>
struct BlockArgs {
  const C *hidden = nullptr, *qkv_w = nullptr, *qkv_b = nullptr, *out_w = nullptr, *out_b = nullptr;
  const C *cos = nullptr, *sin = nullptr;  // (S, head_dim/2) when rope is on
  const uint8_t* keep = nullptr;           // (B, S)
  int64_t batch = 0, seq = 0, heads = 0, head_dim = 0;
};

// out (B*S, E) = attention_block(hidden); see ops::FusedAttentionBlock.
template <class T, class C = compute_t<T>>
void attention_block(const BlockArgs<C>& a, C* out) {
  const int64_t d = a.head_dim, e = a.heads * d, m = a.batch * a.seq;
  std::vector<C> qkv(static_cast<size_t>(m * 3 * e));
  linear<T>(a.hidden, m, e, a.qkv_w, 3 * e, a.qkv_b, qkv.data());

  if (a.cos) {
    const int64_t half = d / 2;
    // Rows (token, q/k, head), rotated in place (NeoX over the full head_dim).
    parallel_for(m * 2 * a.heads, row_grain(d), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t tok = r / (2 * a.heads);
        const int64_t rest = r % (2 * a.heads);  // which * heads + head
        C* row = qkv.data() + tok * 3 * e + rest * d;
        const int64_t off = (tok % a.seq) * half;
        attn::rotate_head(row, row, a.cos + off, a.sin + off, d, d, RopeStyle::NeoX);
      }
    });
    round_to<T>(qkv.data(), m * 3 * e);
  }

  std::vector<C> ctx_buf(static_cast<size_t>(m * e));
  attn::Problem<C> p;
  p.batch = a.batch, p.num_heads = a.heads, p.num_kv_heads = a.heads;
  p.q_len = a.seq, p.kv_len = a.seq, p.head_dim = d;
  const attn::View<const C> packed{qkv.data(), a.seq * 3 * e, 3 * e, d};
  p.q = packed;
  p.k = packed;
  p.k.data += e;
  p.v = packed;
  p.v.data += 2 * e;
  p.out = attn::View<C>{ctx_buf.data(), a.seq * e, e, d};
  p.scale = static_cast<C>(1.0 / std::sqrt(static_cast<double>(d)));
  p.mask = MaskKind::Custom;
  p.keep = a.keep;
  p.keep_batch = a.seq;
  attn::run(p);
  round_to<T>(ctx_buf.data(), m * e);

  linear<T>(ctx_buf.data(), m, e, a.out_w, e, a.out_b, out);
}

template <class T>
void swiglu_typed(const ops::FusedSwiGLU& op, KernelContext& ctx) {
  using C = compute_t<T>;
  const Tensor& x = ctx.in[0];
  const int64_t n = ctx.out[0].dim(ctx.out[0].rank() - 1);
  const int64_t total = ctx.out[0].numel();
  if (total == 0) return;
  const T* src = x.data<T>();
  T* dst = ctx.out[0].data<T>();
  const int64_t gate_off = op.gate_first ? 0 : n;
  const int64_t up_off = op.gate_first ? n : 0;
  // silu through the Activation kernel's span (vector lanes on f32), stored in T first, then the
  // product: the unfused graph's arithmetic, bit for bit.
  const int64_t rows = total / n;
  parallel_for(rows, std::max<int64_t>(1, kGrain / n), [&](int64_t lo, int64_t hi) {
    std::vector<T> act(static_cast<size_t>(n));
    for (int64_t row = lo; row < hi; ++row) {
      const T* r = src + row * 2 * n;
      activation_span(ActKind::Silu, dtype_of<T>(), r + gate_off, act.data(), n);
      T* d = dst + row * n;
      for (int64_t col = 0; col < n; ++col)
        d[col] = store<T>(static_cast<C>(load(act[static_cast<size_t>(col)]) * load(r[up_off + col])));
    }
  });
}

}  // namespace

void kernel(const ops::FusedSwiGLU& op, KernelContext& ctx) {
  visit_float("fused_swiglu", ctx.in[0].dtype(), [&]<class T>() { swiglu_typed<T>(op, ctx); });
}

void kernel(const ops::FusedAttentionBlock& op, KernelContext& ctx) {
  if (ctx.out[0].numel() == 0) return;
  visit_float("fused_attention_block", ctx.in[0].dtype(), [&]<class T>() {
    using B = attn::ComputeBuf<T>;
    const auto& in = ctx.in;
    const B hidden(in[0]), qkv_w(in[1]), out_w(in[2]);
    const std::vector<uint8_t> keep = attn::keep_flags(in[3]);
    size_t next = 4;
    std::optional<B> qkv_b, out_b, cos, sin;
    if (op.has_bias) {
      qkv_b.emplace(in[next]);
      out_b.emplace(in[next + 1]);
      next += 2;
    }
    if (op.has_rope) {
      cos.emplace(in[next]);
      sin.emplace(in[next + 1]);
    }
    BlockArgs<compute_t<T>> a;
    a.hidden = hidden.get(), a.qkv_w = qkv_w.get(), a.out_w = out_w.get();
    a.qkv_b = qkv_b ? qkv_b->get() : nullptr;
    a.out_b = out_b ? out_b->get() : nullptr;
    a.cos = cos ? cos->get() : nullptr;
    a.sin = sin ? sin->get() : nullptr;
    a.keep = keep.data();
    a.batch = in[0].dim(0), a.seq = in[0].dim(1), a.heads = op.num_heads, a.head_dim = op.head_dim;
    OutBuf<T> out(ctx.out[0]);
    attention_block<T>(a, out.get());
    out.finish();
  });
}

void kernel(const ops::FusedTransformerLayer& op, KernelContext& ctx) {
  if (ctx.out[0].numel() == 0) return;
  visit_float("fused_transformer_layer", ctx.in[0].dtype(), [&]<class T>() {
    using C = compute_t<T>;
    using B = attn::ComputeBuf<T>;
    const auto& in = ctx.in;
    const B hidden(in[0]), qkv_w(in[1]), qkv_b(in[2]), out_w(in[3]), out_b(in[4]), ln1_g(in[5]), ln1_b(in[6]),
        fc1_w(in[7]), fc1_b(in[8]), fc2_w(in[9]), fc2_b(in[10]), ln2_g(in[11]), ln2_b(in[12]);
    const std::vector<uint8_t> keep = attn::keep_flags(in[13]);
    const int64_t e = op.num_heads * op.head_dim, f = in[7].dim(1);
    const int64_t m = in[0].dim(0) * in[0].dim(1);

    BlockArgs<C> a;
    a.hidden = hidden.get(), a.qkv_w = qkv_w.get(), a.qkv_b = qkv_b.get();
    a.out_w = out_w.get(), a.out_b = out_b.get(), a.keep = keep.data();
    a.batch = in[0].dim(0), a.seq = in[0].dim(1), a.heads = op.num_heads, a.head_dim = op.head_dim;
    std::vector<C> h(static_cast<size_t>(m * e));
    attention_block<T>(a, h.data());
    residual_layer_norm<T>(hidden.get(), h.data(), ln1_g.get(), ln1_b.get(), op.eps, m, e, h.data());

    std::vector<C> f1(static_cast<size_t>(m * f));
    linear<T>(h.data(), m, e, fc1_w.get(), f, fc1_b.get(), f1.data());
    activate<T>(op.activation, f1.data(), m * f);
    OutBuf<T> out(ctx.out[0]);
    linear<T>(f1.data(), m, f, fc2_w.get(), e, fc2_b.get(), out.get());
    residual_layer_norm<T>(h.data(), out.get(), ln2_g.get(), ln2_b.get(), op.eps, m, e, out.get());
    out.finish();
  });
}

}  // namespace rlx::cpu
