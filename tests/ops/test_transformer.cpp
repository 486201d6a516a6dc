// FusedSwiGLU, FusedAttentionBlock and FusedTransformerLayer against references composed
// here in double precision.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "support/test_util.h"

namespace {

using namespace rlx;
using namespace rlx::testing;
using ::testing::HasSubstr;
using Vec = std::vector<double>;

Tolerance tol_for(DType t) {
  switch (t) {
    case DType::F64: return {1e-10, 1e-10};
    case DType::F16: return {3e-3, 3e-3};
    case DType::BF16: return {2e-2, 2e-2};
    default: return {3e-5, 3e-5};
  }
}

double silu(double x) { return x / (1.0 + std::exp(-x)); }

// ---------------------------------------------------------------------------------------
// FusedSwiGLU
void check_swiglu(DType t, const std::vector<int64_t>& dims, bool gate_first) {
  const Tensor x = random_tensor(t, dims, 17, -3, 3);
  const Tensor out = run_op(ops::FusedSwiGLU{gate_first}, {x});
  const Vec xv = to_doubles(x);
  const int64_t n = dims.back() / 2;
  std::vector<int64_t> od = dims;
  od.back() = n;
  Vec want(static_cast<size_t>(product(od)));
  for (size_t i = 0; i < want.size(); ++i) {
    const size_t row = i / static_cast<size_t>(n), col = i % static_cast<size_t>(n);
    const double a = xv[row * 2 * n + col], b = xv[row * 2 * n + n + col];
    want[i] = gate_first ? silu(a) * b : a * silu(b);
  }
  EXPECT_TRUE(all_close(out, od, want, tol_for(t)));
}

TEST(FusedSwiGLU, MatchesReference) {
  for (bool gf : {false, true})
    for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + (gf ? " gate_first" : " gate_last"));
      check_swiglu(t, {6}, gf);
      check_swiglu(t, {2, 3, 8}, gf);
    }
}

TEST(FusedSwiGLU, GateFirstMatters) {
  const Tensor x = Tensor::f32({2}, std::vector<float>{1.0f, 2.0f});
  EXPECT_NEAR(to_doubles(run_op(ops::FusedSwiGLU{true}, {x}))[0], silu(1.0) * 2.0, 1e-6);
  EXPECT_NEAR(to_doubles(run_op(ops::FusedSwiGLU{false}, {x}))[0], 1.0 * silu(2.0), 1e-6);
}

TEST(FusedSwiGLU, ZeroSizeAndLarge) {
  check_swiglu(DType::F32, {0, 4}, false);
  check_swiglu(DType::F32, {3, 0}, true);
  check_swiglu(DType::F32, {64, 1024}, true);  // several parallel chunks
}

TEST(FusedSwiGLU, RejectsBadInputs) {
  auto err = [](const Shape& s) { return error_message([&] { infer_op(ops::FusedSwiGLU{}, std::vector<Shape>{s}); }); };
  EXPECT_THAT(err(Shape::of({2, 5})), HasSubstr("even"));
  EXPECT_THAT(err(Shape::of({2, 4}, DType::I32)), HasSubstr("float"));
  EXPECT_THAT(err(Shape::of({})), HasSubstr("rank >= 1"));
  EXPECT_THAT(err(Shape({2, Dim::symbol("n")})), HasSubstr("static"));
  const auto ok = infer_op(ops::FusedSwiGLU{}, std::vector<Shape>{Shape({Dim::symbol("b"), 8}, DType::F16)});
  EXPECT_EQ(ok.at(0), Shape({Dim::symbol("b"), 4}, DType::F16));
}

// ---------------------------------------------------------------------------------------
// Double references for the fused blocks.
struct Dims {
  int64_t B, S, H, D;
  int64_t E() const { return H * D; }
};

// y (m, n) = x (m, k) @ w (k, n) + b (n)?
Vec linear(const Vec& x, int64_t m, int64_t k, const Vec& w, int64_t n, const Vec* b) {
  Vec y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = b ? (*b)[j] : 0.0;
      for (int64_t p = 0; p < k; ++p) acc += x[i * k + p] * w[p * n + j];
      y[i * n + j] = acc;
    }
  return y;
}

Vec ref_block(const Dims& d, const Vec& hidden, const Vec& qkv_w, const Vec& out_w, const Vec& mask,
              const Vec* qkv_b, const Vec* out_b, const Vec* cos, const Vec* sin) {
  const int64_t E = d.E(), M = d.B * d.S, half = d.D / 2;
  Vec qkv = linear(hidden, M, E, qkv_w, 3 * E, qkv_b);
  if (cos) {
    for (int64_t t = 0; t < M; ++t)
      for (int64_t part = 0; part < 2; ++part)
        for (int64_t h = 0; h < d.H; ++h) {
          double* x = &qkv[t * 3 * E + part * E + h * d.D];
          const int64_t s = t % d.S;
          for (int64_t i = 0; i < half; ++i) {
            const double c = (*cos)[s * half + i], sn = (*sin)[s * half + i];
            const double x1 = x[i], x2 = x[i + half];
            x[i] = x1 * c - x2 * sn;
            x[i + half] = x2 * c + x1 * sn;
          }
        }
  }
  Vec ctx(static_cast<size_t>(M * E), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d.D));
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h)
      for (int64_t i = 0; i < d.S; ++i) {
        const double* q = &qkv[(b * d.S + i) * 3 * E + h * d.D];
        Vec p(static_cast<size_t>(d.S), 0.0);
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < d.S; ++j) {
          if (mask[b * d.S + j] == 0) continue;
          const double* k = &qkv[(b * d.S + j) * 3 * E + E + h * d.D];
          double dot = 0;
          for (int64_t c = 0; c < d.D; ++c) dot += q[c] * k[c];
          p[j] = dot * scale;
          mx = std::max(mx, p[j]);
        }
        if (mx == -INFINITY) continue;
        for (int64_t j = 0; j < d.S; ++j) {
          p[j] = mask[b * d.S + j] == 0 ? 0.0 : std::exp(p[j] - mx);
          sum += p[j];
        }
        for (int64_t c = 0; c < d.D; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < d.S; ++j) acc += p[j] / sum * qkv[(b * d.S + j) * 3 * E + 2 * E + h * d.D + c];
          ctx[(b * d.S + i) * E + h * d.D + c] = acc;
        }
      }
  return linear(ctx, M, E, out_w, E, out_b);
}

Vec layer_norm(const Vec& x, int64_t m, int64_t n, const Vec& g, const Vec& b, double eps) {
  Vec y(x.size());
  for (int64_t r = 0; r < m; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < n; ++j) mean += x[r * n + j];
    mean /= static_cast<double>(n);
    for (int64_t j = 0; j < n; ++j) var += (x[r * n + j] - mean) * (x[r * n + j] - mean);
    var /= static_cast<double>(n);
    for (int64_t j = 0; j < n; ++j) y[r * n + j] = (x[r * n + j] - mean) / std::sqrt(var + eps) * g[j] + b[j];
  }
  return y;
}

double act(ActKind k, double x) {
  switch (k) {
    case ActKind::Gelu: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case ActKind::GeluApprox:
      return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case ActKind::Relu: return x > 0 ? x : 0.0;
    case ActKind::Silu: return silu(x);
    default: ADD_FAILURE() << "no reference for " << enum_name(k); return 0;
  }
}

Tensor padding_mask(DType t, const Dims& d, bool pad_whole_batch) {
  Vec m(static_cast<size_t>(d.B * d.S), 1.0);
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t s = d.S - b; s < d.S; ++s) m[b * d.S + s] = 0.0;  // batch b pads its last b tokens
  if (pad_whole_batch)
    for (int64_t s = 0; s < d.S; ++s) m[(d.B - 1) * d.S + s] = 0.0;
  return from_doubles(t, {d.B, d.S}, m);
}

// ---------------------------------------------------------------------------------------
// FusedAttentionBlock
void check_block(DType t, const Dims& d, bool has_bias, bool has_rope, bool pad_whole_batch = false) {
  SCOPED_TRACE(std::string(dtype_name(t)) + " bias=" + std::to_string(has_bias) + " rope=" + std::to_string(has_rope));
  const int64_t E = d.E();
  const Tensor hidden = random_tensor(t, {d.B, d.S, E}, 1);
  const Tensor qkv_w = random_tensor(t, {E, 3 * E}, 2, -0.5, 0.5);
  const Tensor out_w = random_tensor(t, {E, E}, 3, -0.5, 0.5);
  const Tensor mask = padding_mask(DType::I64, d, pad_whole_batch);
  std::vector<Tensor> ins{hidden, qkv_w, out_w, mask};
  std::optional<Vec> qkv_b, out_b, cs, sn;
  if (has_bias) {
    ins.push_back(random_tensor(t, {3 * E}, 4));
    ins.push_back(random_tensor(t, {E}, 5));
    qkv_b = to_doubles(ins[4]);
    out_b = to_doubles(ins[5]);
  }
  if (has_rope) {
    Vec c, s;
    for (int64_t p = 0; p < d.S; ++p)
      for (int64_t i = 0; i < d.D / 2; ++i) {
        const double ang = static_cast<double>(p) * std::pow(100.0, -2.0 * static_cast<double>(i) / static_cast<double>(d.D));
        c.push_back(std::cos(ang));
        s.push_back(std::sin(ang));
      }
    ins.push_back(from_doubles(t, {d.S, d.D / 2}, c));
    ins.push_back(from_doubles(t, {d.S, d.D / 2}, s));
    cs = to_doubles(ins[ins.size() - 2]);
    sn = to_doubles(ins.back());
  }
  ops::FusedAttentionBlock op;
  op.num_heads = d.H, op.head_dim = d.D, op.has_bias = has_bias, op.has_rope = has_rope;
  const Tensor out = run_op(op, ins);
  const Vec want = ref_block(d, to_doubles(hidden), to_doubles(qkv_w), to_doubles(out_w), to_doubles(mask),
                             qkv_b ? &*qkv_b : nullptr, out_b ? &*out_b : nullptr, cs ? &*cs : nullptr,
                             sn ? &*sn : nullptr);
  EXPECT_TRUE(all_close(out, {d.B, d.S, E}, want, tol_for(t)));
}

TEST(FusedAttentionBlock, BiasAndRopeCombinations) {
  const Dims d{2, 5, 2, 4};
  for (bool bias : {false, true})
    for (bool rope : {false, true}) check_block(DType::F32, d, bias, rope);
}

TEST(FusedAttentionBlock, FullyPaddedBatchGivesOutputBias) {
  const Dims d{3, 4, 2, 4};
  check_block(DType::F32, d, true, false, true);
  check_block(DType::F32, d, false, true, true);
}

TEST(FusedAttentionBlock, OtherDtypes) {
  const Dims d{2, 6, 3, 4};
  for (DType t : {DType::F64, DType::F16, DType::BF16}) check_block(t, d, true, true);
}

TEST(FusedAttentionBlock, LongerSequence) { check_block(DType::F32, Dims{1, 70, 2, 8}, true, true); }

TEST(FusedAttentionBlock, RejectsBadInputs) {
  ops::FusedAttentionBlock op;
  op.num_heads = 2, op.head_dim = 4, op.has_bias = true, op.has_rope = false;
  const Shape h = Shape::of({2, 5, 8}), qw = Shape::of({8, 24}), ow = Shape::of({8, 8}), m = Shape::of({2, 5}, DType::Bool);
  const Shape qb = Shape::of({24}), ob = Shape::of({8});
  auto err = [&](const ops::FusedAttentionBlock& o, std::vector<Shape> in) {
    return error_message([&] { infer_op(o, in); });
  };
  EXPECT_EQ(infer_op(op, std::vector<Shape>{h, qw, ow, m, qb, ob}).at(0), h);
  EXPECT_THAT(err(op, {h, qw, ow, m}), HasSubstr("expects 6 inputs"));
  EXPECT_THAT(err(op, {Shape::of({2, 5, 6}), qw, ow, m, qb, ob}), HasSubstr("num_heads * head_dim"));
  EXPECT_THAT(err(op, {h, Shape::of({8, 16}), ow, m, qb, ob}), HasSubstr("qkv_w"));
  EXPECT_THAT(err(op, {h, qw, Shape::of({8, 8}, DType::F16), m, qb, ob}), HasSubstr("dtype"));
  EXPECT_THAT(err(op, {h, qw, ow, Shape::of({2, 4}), qb, ob}), HasSubstr("key-padding mask"));
  EXPECT_THAT(err(op, {h, qw, ow, m, Shape::of({8}), ob}), HasSubstr("qkv_b"));
  EXPECT_THAT(err(op, {Shape::of({2, 5, 8}, DType::I32), qw, ow, m, qb, ob}), HasSubstr("float"));
  ops::FusedAttentionBlock r = op;
  r.has_bias = false, r.has_rope = true;
  EXPECT_THAT(err(r, {h, qw, ow, m, Shape::of({5, 3}), Shape::of({5, 3})}), HasSubstr("(S, head_dim/2)"));
  EXPECT_THAT(err(r, {h, qw, ow, m, Shape::of({4, 2}), Shape::of({4, 2})}), HasSubstr("cos"));
  ops::FusedAttentionBlock odd = r;
  odd.num_heads = 8, odd.head_dim = 1;
  EXPECT_THAT(err(odd, {h, qw, ow, m, Shape::of({5, 0}), Shape::of({5, 0})}), HasSubstr("even head_dim"));
  ops::FusedAttentionBlock zero = op;
  zero.num_heads = 0;
  EXPECT_THAT(err(zero, {h, qw, ow, m, qb, ob}), HasSubstr("num_heads must be positive"));
  // Symbolic batch and sequence pass through.
  const Dim b = Dim::symbol("b"), s = Dim::symbol("s");
  const Shape hs({b, s, 8});
  EXPECT_EQ(infer_op(op, std::vector<Shape>{hs, qw, ow, Shape({b, s}, DType::I32), qb, ob}).at(0), hs);
}

// ---------------------------------------------------------------------------------------
// FusedTransformerLayer
void check_layer(DType t, const Dims& d, int64_t F, ActKind a, double eps = 1e-5) {
  SCOPED_TRACE(std::string(dtype_name(t)) + " " + enum_name(a));
  const int64_t E = d.E(), M = d.B * d.S;
  std::vector<Tensor> ins{
      random_tensor(t, {d.B, d.S, E}, 1),                 // hidden
      random_tensor(t, {E, 3 * E}, 2, -0.5, 0.5),         // qkv_w
      random_tensor(t, {3 * E}, 3),                       // qkv_b
      random_tensor(t, {E, E}, 4, -0.5, 0.5),             // out_w
      random_tensor(t, {E}, 5),                           // out_b
      random_tensor(t, {E}, 6, 0.5, 1.5),                 // ln1_g
      random_tensor(t, {E}, 7),                           // ln1_b
      random_tensor(t, {E, F}, 8, -0.5, 0.5),             // fc1_w
      random_tensor(t, {F}, 9),                           // fc1_b
      random_tensor(t, {F, E}, 10, -0.5, 0.5),            // fc2_w
      random_tensor(t, {E}, 11),                          // fc2_b
      random_tensor(t, {E}, 12, 0.5, 1.5),                // ln2_g
      random_tensor(t, {E}, 13),                          // ln2_b
      padding_mask(DType::Bool, d, false)};               // mask
  std::vector<Vec> v;
  for (const Tensor& x : ins) v.push_back(to_doubles(x));
  ops::FusedTransformerLayer op;
  op.num_heads = d.H, op.head_dim = d.D, op.eps = eps, op.activation = a;
  const Tensor out = run_op(op, ins);

  const Vec attn = ref_block(d, v[0], v[1], v[3], v[13], &v[2], &v[4], nullptr, nullptr);
  Vec r1(v[0].size());
  for (size_t i = 0; i < r1.size(); ++i) r1[i] = v[0][i] + attn[i];
  const Vec h = layer_norm(r1, M, E, v[5], v[6], eps);
  Vec f = linear(h, M, E, v[7], F, &v[8]);
  for (double& x : f) x = act(a, x);
  const Vec f2 = linear(f, M, F, v[9], E, &v[10]);
  Vec r2(h.size());
  for (size_t i = 0; i < r2.size(); ++i) r2[i] = h[i] + f2[i];
  const Vec want = layer_norm(r2, M, E, v[11], v[12], eps);
  EXPECT_TRUE(all_close(out, {d.B, d.S, E}, want, tol_for(t)));
}

TEST(FusedTransformerLayer, EveryActivation) {
  for (ActKind a : {ActKind::Gelu, ActKind::GeluApprox, ActKind::Relu, ActKind::Silu})
    check_layer(DType::F32, Dims{2, 5, 2, 4}, 16, a);
}

TEST(FusedTransformerLayer, OtherDtypesAndEps) {
  check_layer(DType::F64, Dims{2, 4, 2, 4}, 12, ActKind::Gelu, 1e-12);
  check_layer(DType::F16, Dims{2, 4, 2, 4}, 12, ActKind::GeluApprox);
  check_layer(DType::BF16, Dims{2, 4, 2, 4}, 12, ActKind::Relu);
  check_layer(DType::F32, Dims{1, 3, 1, 8}, 8, ActKind::Silu, 0.5);  // a large eps shows in the output
}

TEST(FusedTransformerLayer, RejectsBadInputs) {
  const int64_t E = 8, F = 16;
  std::vector<Shape> in{Shape::of({2, 5, E}), Shape::of({E, 3 * E}), Shape::of({3 * E}), Shape::of({E, E}),
                        Shape::of({E}),       Shape::of({E}),         Shape::of({E}),     Shape::of({E, F}),
                        Shape::of({F}),       Shape::of({F, E}),      Shape::of({E}),     Shape::of({E}),
                        Shape::of({E}),       Shape::of({2, 5}, DType::U8)};
  ops::FusedTransformerLayer op;
  op.num_heads = 2, op.head_dim = 4;
  EXPECT_EQ(infer_op(op, in).at(0), in[0]);
  auto err = [&](const ops::FusedTransformerLayer& o, const std::vector<Shape>& s) {
    return error_message([&] { infer_op(o, s); });
  };
  for (ActKind bad : {ActKind::Sigmoid, ActKind::Tanh, ActKind::Exp}) {
    ops::FusedTransformerLayer b = op;
    b.activation = bad;
    EXPECT_THAT(err(b, in), HasSubstr("activation must be"));
  }
  ops::FusedTransformerLayer neg = op;
  neg.eps = -1;
  EXPECT_THAT(err(neg, in), HasSubstr("eps"));
  auto with = [&](size_t i, Shape s) {
    auto c = in;
    c[i] = std::move(s);
    return c;
  };
  EXPECT_THAT(err(op, with(8, Shape::of({F + 1}))), HasSubstr("fc1_b"));
  EXPECT_THAT(err(op, with(9, Shape::of({F, E + 1}))), HasSubstr("fc2_w"));
  EXPECT_THAT(err(op, with(5, Shape::of({E + 1}))), HasSubstr("ln1_g"));
  EXPECT_THAT(err(op, with(12, Shape::of({E}, DType::F64))), HasSubstr("dtype"));
  EXPECT_THAT(err(op, with(13, Shape::of({2, 6}))), HasSubstr("key-padding mask"));
  EXPECT_THAT(err(op, with(7, Shape({E, Dim::symbol("f")}))), HasSubstr("static"));
  ops::FusedTransformerLayer wrong = op;
  wrong.head_dim = 3;
  EXPECT_THAT(err(wrong, in), HasSubstr("num_heads * head_dim"));
}

}  // namespace
