// Rope and Attention against naive double-precision references.
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "backends/cpu/attention_small.h"
#include "support/test_util.h"

namespace {

using namespace rlx;
using namespace rlx::testing;
using ::testing::HasSubstr;

Tolerance tol_for(DType t) {
  switch (t) {
    case DType::F64: return {1e-10, 1e-12};
    case DType::F16: return {3e-3, 3e-3};
    case DType::BF16: return {2e-2, 2e-2};
    default: return {1e-5, 1e-5};
  }
}

// ---------------------------------------------------------------------------------------
// Attention
struct Cfg {
  int64_t B = 1, Hq = 1, Hkv = 1, Sq = 1, Skv = 1, D = 4;
  MaskKind mask = MaskKind::None;
  int64_t window = 0;
  double scale = 0, softcap = 0;
  AttnLayout layout = AttnLayout::BSHD;
  DType dtype = DType::F32;
};

std::vector<int64_t> dims_of(const Cfg& c, int64_t s, int64_t h) {
  if (c.layout == AttnLayout::BSHD) return {c.B, s, h, c.D};
  return {c.B, h, s, c.D};
}

int64_t at(const Cfg& c, int64_t b, int64_t s, int64_t h, int64_t d, int64_t S, int64_t H) {
  if (c.layout == AttnLayout::BSHD) return ((b * S + s) * H + h) * c.D + d;
  return ((b * H + h) * S + s) * c.D + d;
}

ops::Attention attrs(const Cfg& c) {
  ops::Attention a;
  a.num_heads = c.Hq;
  a.num_kv_heads = c.Hkv;
  a.head_dim = c.D;
  a.mask_kind = c.mask;
  a.window = c.window;
  a.score_scale = c.scale;
  a.softcap = c.softcap;
  a.layout = c.layout;
  return a;
}

// Bias index of target (b, h, i, j) for bias dims right-aligned to (B, Hq, Sq, Skv).
int64_t bias_index(const std::vector<int64_t>& bd, const int64_t t[4]) {
  const int64_t r = static_cast<int64_t>(bd.size());
  int64_t idx = 0;
  for (int64_t i = 0; i < r; ++i) idx = idx * bd[i] + (bd[i] == 1 ? 0 : t[4 - r + i]);
  return idx;
}

std::vector<double> ref_attention(const Cfg& c, const std::vector<double>& q, const std::vector<double>& k,
                                  const std::vector<double>& v, const std::vector<double>& mask,
                                  const std::vector<int64_t>& mask_dims) {
  std::vector<double> out(static_cast<size_t>(c.B * c.Sq * c.Hq * c.D), 0.0);
  const double scale = c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.D));
  const double ninf = -std::numeric_limits<double>::infinity();
  const int64_t group = c.Hq / c.Hkv;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hq; ++h)
      for (int64_t i = 0; i < c.Sq; ++i) {
        const int64_t pos = c.Skv - c.Sq + i;
        std::vector<double> s(static_cast<size_t>(c.Skv), ninf);
        double mx = ninf;
        for (int64_t j = 0; j < c.Skv; ++j) {
          bool visible = true;
          if (c.mask == MaskKind::Causal) visible = j <= pos;
          if (c.mask == MaskKind::SlidingWindow) visible = j <= pos && j > pos - c.window;
          if (c.mask == MaskKind::Custom) visible = mask[static_cast<size_t>(b * c.Skv + j)] != 0;
          if (!visible) continue;
          double dot = 0;
          for (int64_t d = 0; d < c.D; ++d)
            dot += q[at(c, b, i, h, d, c.Sq, c.Hq)] * k[at(c, b, j, h / group, d, c.Skv, c.Hkv)];
          double x = dot * scale;
          if (c.softcap > 0) x = c.softcap * std::tanh(x / c.softcap);
          if (c.mask == MaskKind::Bias) {
            const int64_t t[4] = {b, h, i, j};
            x += mask[static_cast<size_t>(bias_index(mask_dims, t))];
          }
          s[j] = x;
          mx = std::max(mx, x);
        }
        if (mx == ninf) continue;  // zeros
        double sum = 0;
        for (double& x : s) {
          x = x == ninf ? 0.0 : std::exp(x - mx);
          sum += x;
        }
        for (int64_t d = 0; d < c.D; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < c.Skv; ++j) acc += s[j] / sum * v[at(c, b, j, h / group, d, c.Skv, c.Hkv)];
          out[at(c, b, i, h, d, c.Sq, c.Hq)] = acc;
        }
      }
  return out;
}

Tensor run_attention(const Cfg& c, const Tensor& q, const Tensor& k, const Tensor& v,
                     const std::optional<Tensor>& mask) {
  Graph g;
  const Value qi = g.input("q", q.shape_info());
  const Value ki = g.input("k", k.shape_info());
  const Value vi = g.input("v", v.shape_info());
  std::optional<Value> mi;
  NamedTensors feeds{{"q", q}, {"k", k}, {"v", v}};
  if (mask) {
    mi = g.input("mask", mask->shape_info());
    feeds.emplace_back("mask", *mask);
  }
  g.add_output(g.attention(qi, ki, vi, mi, attrs(c)));
  return run_cpu1(g, feeds);
}

struct Inputs {
  Tensor q, k, v;
};
Inputs make_inputs(const Cfg& c, uint64_t seed, double amp = 1.0) {
  return {random_tensor(c.dtype, dims_of(c, c.Sq, c.Hq), seed, -amp, amp),
          random_tensor(c.dtype, dims_of(c, c.Skv, c.Hkv), seed + 1, -amp, amp),
          random_tensor(c.dtype, dims_of(c, c.Skv, c.Hkv), seed + 2)};
}

// Runs one configuration with random q/k/v and compares against the reference.
Tensor check(const Cfg& c, const std::optional<Tensor>& mask = std::nullopt, uint64_t seed = 7, double amp = 1.0) {
  const Inputs in = make_inputs(c, seed, amp);
  const Tensor out = run_attention(c, in.q, in.k, in.v, mask);
  const std::vector<double> m = mask ? to_doubles(*mask) : std::vector<double>{};
  const std::vector<int64_t> md = mask ? mask->shape() : std::vector<int64_t>{};
  const auto want = ref_attention(c, to_doubles(in.q), to_doubles(in.k), to_doubles(in.v), m, md);
  EXPECT_EQ(out.dtype(), c.dtype);
  EXPECT_TRUE(all_close(out, dims_of(c, c.Sq, c.Hq), want, tol_for(c.dtype)));
  return out;
}

Tensor key_mask(DType t, int64_t B, int64_t Skv, uint64_t seed) {
  std::vector<double> m(static_cast<size_t>(B * Skv));
  for (size_t i = 0; i < m.size(); ++i) m[i] = ((i * 7 + seed) % 3 == 0) ? 0.0 : 1.0 + static_cast<double>(i % 2);
  if (t == DType::Bool)
    for (double& x : m) x = x != 0 ? 1.0 : 0.0;
  m[0] = 1;  // keep at least one key per batch row in batch 0
  return from_doubles(t, {B, Skv}, m);
}

TEST(Attention, NoMaskBothLayouts) {
  for (AttnLayout l : {AttnLayout::BSHD, AttnLayout::BHSD}) {
    Cfg c;
    c.B = 2, c.Hq = 3, c.Hkv = 3, c.Sq = 5, c.Skv = 6, c.D = 8, c.layout = l;
    check(c);
  }
}

TEST(Attention, CausalSquareAndKvCacheOffset) {
  for (auto [sq, skv] : {std::pair<int64_t, int64_t>{6, 6}, {3, 7}}) {
    Cfg c;
    c.B = 2, c.Hq = 2, c.Hkv = 2, c.Sq = sq, c.Skv = skv, c.D = 4, c.mask = MaskKind::Causal;
    check(c);
  }
}

TEST(Attention, SlidingWindow) {
  for (int64_t w : {1, 2, 5, 100}) {
    Cfg c;
    c.B = 1, c.Hq = 2, c.Hkv = 1, c.Sq = 7, c.Skv = 9, c.D = 4, c.mask = MaskKind::SlidingWindow, c.window = w;
    check(c);
  }
}

TEST(Attention, ManyQueryBlocksCausalAndWindow) {
  // Sq > the kernel's 64-row block: column ranges differ per block.
  Cfg c;
  c.B = 1, c.Hq = 2, c.Hkv = 1, c.Sq = 150, c.Skv = 160, c.D = 4, c.mask = MaskKind::SlidingWindow, c.window = 40;
  check(c);
  c.mask = MaskKind::Causal, c.window = 0, c.layout = AttnLayout::BHSD;
  check(c);
}

TEST(Attention, CustomMaskAnyDtype) {
  for (DType mt : {DType::Bool, DType::I32, DType::F32, DType::U8, DType::F16, DType::I64}) {
    Cfg c;
    c.B = 2, c.Hq = 2, c.Hkv = 2, c.Sq = 4, c.Skv = 6, c.D = 4, c.mask = MaskKind::Custom;
    check(c, key_mask(mt, c.B, c.Skv, 1));
  }
}

TEST(Attention, BiasBroadcastShapes) {
  Cfg c;
  c.B = 2, c.Hq = 2, c.Hkv = 1, c.Sq = 3, c.Skv = 5, c.D = 4, c.mask = MaskKind::Bias;
  const std::vector<std::vector<int64_t>> shapes{{1, 1, 3, 5}, {2, 2, 3, 5}, {5}, {2, 1, 1, 5}, {3, 1}, {2, 2, 1, 1}};
  uint64_t seed = 40;
  for (const auto& s : shapes) {
    SCOPED_TRACE(dims_str(s));
    check(c, random_tensor(DType::F32, s, seed++, -2.0, 2.0));
  }
  c.layout = AttnLayout::BHSD;
  check(c, random_tensor(DType::F32, {2, 2, 3, 5}, seed));
}

// A KV cache masked to its valid prefix: -inf bias on leading and trailing keys, which the CPU
// kernel skips (per batch and row; one row sees nothing), and a -inf key in the middle.
TEST(Attention, BiasMinusInfPrefixAndSuffix) {
  Cfg c;
  c.B = 2, c.Hq = 4, c.Hkv = 2, c.Sq = 3, c.Skv = 40, c.D = 8, c.mask = MaskKind::Bias;
  const double ninf = -std::numeric_limits<double>::infinity();
  std::vector<double> bias(static_cast<size_t>(2 * 3 * 40), ninf);
  const int64_t lo[2] = {0, 5}, hi[2][3] = {{7, 8, 9}, {0, 21, 30}};  // batch 1 row 0: no key
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = lo[b]; j < hi[b][i]; ++j) bias[static_cast<size_t>((b * 3 + i) * 40 + j)] = j == 12 ? ninf : 0.1 * j;
  const auto out = to_doubles(check(c, from_doubles(DType::F32, {2, 1, 3, 40}, bias)));
  for (int64_t h = 0; h < c.Hq; ++h)
    for (int64_t d = 0; d < c.D; ++d) ASSERT_EQ(out[static_cast<size_t>(at(c, 1, 0, h, d, c.Sq, c.Hq))], 0.0);
  c.Sq = 1;  // decode: one row
  std::vector<double> row(40, ninf);
  for (int64_t j = 0; j < 17; ++j) row[static_cast<size_t>(j)] = 0.0;
  check(c, from_doubles(DType::F32, {1, 1, 1, 40}, row));
}

TEST(Attention, GqaAndMqa) {
  for (int64_t hkv : {4, 2, 1}) {
    for (AttnLayout l : {AttnLayout::BSHD, AttnLayout::BHSD}) {
      Cfg c;
      c.B = 2, c.Hq = 4, c.Hkv = hkv, c.Sq = 3, c.Skv = 5, c.D = 8, c.mask = MaskKind::Causal, c.layout = l;
      check(c);
    }
  }
}

TEST(Attention, DecodeSingleQueryLongKv) {
  Cfg c;
  c.B = 2, c.Hq = 4, c.Hkv = 2, c.Sq = 1, c.Skv = 300, c.D = 16, c.mask = MaskKind::Causal;
  check(c);
  c.mask = MaskKind::SlidingWindow, c.window = 32;
  check(c);
  c.mask = MaskKind::Custom, c.window = 0;
  check(c, key_mask(DType::Bool, c.B, c.Skv, 2));
}

// One query row with 3 query heads per KV head: the CPU kernel runs a KV head's query heads as
// one product (decode), except under a bias that differs per head; every mask kind, softcap,
// both layouts, a single KV head (MQA), f64.
TEST(Attention, DecodeGroupedQueryHeadsEveryMask) {
  for (AttnLayout l : {AttnLayout::BSHD, AttnLayout::BHSD})
    for (int64_t hkv : {2, 1})
      for (double softcap : {0.0, 3.0}) {
        Cfg c;
        c.B = 2, c.Hq = 3 * hkv, c.Hkv = hkv, c.Sq = 1, c.Skv = 37, c.D = 16, c.layout = l, c.softcap = softcap;
        SCOPED_TRACE(::testing::Message() << "layout " << static_cast<int>(l) << " hkv " << hkv << " softcap " << softcap);
        for (MaskKind m : {MaskKind::None, MaskKind::Causal, MaskKind::SlidingWindow}) {
          c.mask = m, c.window = m == MaskKind::SlidingWindow ? 9 : 0;
          check(c, std::nullopt, 11, 3.0);
        }
        c.mask = MaskKind::Custom, c.window = 0;
        check(c, key_mask(DType::Bool, c.B, c.Skv, 1));
        c.mask = MaskKind::Bias;
        check(c, random_tensor(DType::F32, {c.B, 1, 1, c.Skv}, 5, -2.0, 2.0));       // shared by the heads
        check(c, random_tensor(DType::F32, {c.B, c.Hq, 1, c.Skv}, 6, -2.0, 2.0));    // one row per head
        c.mask = MaskKind::Causal, c.dtype = DType::F64;
        check(c);
      }
}

TEST(Attention, BshdAndBhsdAgree) {
  Cfg a;
  a.B = 2, a.Hq = 4, a.Hkv = 2, a.Sq = 5, a.Skv = 7, a.D = 6, a.mask = MaskKind::Causal;
  Cfg b = a;
  b.layout = AttnLayout::BHSD;
  const Inputs in = make_inputs(a, 3);
  // Transposes (B, S, H, D) doubles to (B, H, S, D).
  auto to_bhsd = [&](const Tensor& t) {
    const auto& s = t.shape();
    const auto src = to_doubles(t);
    std::vector<double> dst(src.size());
    for (int64_t i = 0; i < static_cast<int64_t>(src.size()); ++i) {
      const auto idx = unravel(i, s);
      dst[ravel({idx[0], idx[2], idx[1], idx[3]}, {s[0], s[2], s[1], s[3]})] = src[i];
    }
    return from_doubles(t.dtype(), {s[0], s[2], s[1], s[3]}, dst);
  };
  const Tensor oa = run_attention(a, in.q, in.k, in.v, std::nullopt);
  const Tensor ob = run_attention(b, to_bhsd(in.q), to_bhsd(in.k), to_bhsd(in.v), std::nullopt);
  const Tensor oa_t = to_bhsd(oa);
  EXPECT_TRUE(all_close(ob, oa_t.shape(), to_doubles(oa_t), {1e-6, 1e-6}));
}

TEST(Attention, ScoreScaleAndSoftcapHonoured) {
  Cfg c;
  c.B = 1, c.Hq = 2, c.Hkv = 2, c.Sq = 4, c.Skv = 4, c.D = 8;
  c.scale = 0.9;
  const Tensor plain = check(c, std::nullopt, 11, 3.0);
  c.softcap = 0.5;  // strongly compresses the large scores
  const Tensor capped = check(c, std::nullopt, 11, 3.0);
  const auto a = to_doubles(plain), b = to_doubles(capped);
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::abs(a[i] - b[i]));
  EXPECT_GT(diff, 1e-2);  // softcap changed the result
  // softcap together with bias and causal-free mask kinds
  c.mask = MaskKind::Bias;
  check(c, random_tensor(DType::F32, {1, 2, 4, 4}, 5, -1, 1), 11, 3.0);
  c.mask = MaskKind::Causal;
  check(c, std::nullopt, 11, 3.0);
}

TEST(Attention, FullyMaskedRowsAreZero) {
  // Custom: batch 1 has no visible key.
  Cfg c;
  c.B = 2, c.Hq = 2, c.Hkv = 2, c.Sq = 3, c.Skv = 4, c.D = 4, c.mask = MaskKind::Custom;
  std::vector<uint8_t> m{1, 0, 1, 1, 0, 0, 0, 0};
  const Tensor out = check(c, Tensor::boolean({2, 4}, m));
  const auto o = to_doubles(out);
  for (size_t i = o.size() / 2; i < o.size(); ++i) ASSERT_EQ(o[i], 0.0);
  // Causal with Sq > Skv: queries at negative positions see nothing.
  Cfg d;
  d.B = 1, d.Hq = 1, d.Hkv = 1, d.Sq = 5, d.Skv = 3, d.D = 4, d.mask = MaskKind::Causal;
  const auto od = to_doubles(check(d));
  for (size_t i = 0; i < 2 * 4; ++i) ASSERT_EQ(od[i], 0.0);
  EXPECT_NE(od[2 * 4], 0.0);
  // Bias of -inf over a whole row.
  Cfg e = d;
  e.mask = MaskKind::Bias, e.Sq = 3;
  const double ninf = -std::numeric_limits<double>::infinity();
  const Tensor bias = from_doubles(DType::F32, {3, 3}, {0, 1, 0, ninf, ninf, ninf, 0.5, ninf, 0});
  const auto oe = to_doubles(check(e, bias));
  for (size_t i = 4; i < 8; ++i) ASSERT_EQ(oe[i], 0.0);
  // No keys at all (Skv = 0).
  Cfg z;
  z.B = 2, z.Hq = 2, z.Hkv = 1, z.Sq = 2, z.Skv = 0, z.D = 4;
  for (double x : to_doubles(check(z))) ASSERT_EQ(x, 0.0);
}

// No mask, f32 (the kernel's unmasked path): a query whose scores are all -inf (an infinite
// query component against negative keys) outputs zeros; so does one whose scores are all NaN
// (no score exceeds -inf: the masked path's rule), and the other rows match the reference.
TEST(Attention, UnmaskedRowsAllMinusInfAreZeroAndTheRestMatch) {
  Cfg c;
  c.B = 1, c.Hq = 2, c.Hkv = 2, c.Sq = 70, c.Skv = 19, c.D = 4;  // two query blocks
  Inputs in = make_inputs(c, 41);
  std::vector<double> q = to_doubles(in.q), k = to_doubles(in.k);
  for (int64_t j = 0; j < c.Skv; ++j)  // key component 0 negative everywhere
    for (int64_t h = 0; h < c.Hkv; ++h) k[static_cast<size_t>(at(c, 0, j, h, 0, c.Skv, c.Hkv))] = -0.5 - 0.01 * j;
  const double inf = std::numeric_limits<double>::infinity();
  auto qat = [&](int64_t i, int64_t h, int64_t d) -> double& { return q[static_cast<size_t>(at(c, 0, i, h, d, c.Sq, c.Hq))]; };
  for (int64_t d = 0; d < c.D; ++d) qat(3, 1, d) = d == 0 ? inf : 0.0;  // scores all -inf
  qat(66, 0, 2) = std::numeric_limits<double>::quiet_NaN();               // scores all NaN
  const Tensor qt = from_doubles(DType::F32, dims_of(c, c.Sq, c.Hq), q);
  const Tensor kt = from_doubles(DType::F32, dims_of(c, c.Skv, c.Hkv), k);
  const auto o = to_doubles(run_attention(c, qt, kt, in.v, std::nullopt));
  const auto want = ref_attention(c, q, k, to_doubles(in.v), {}, {});
  for (int64_t i = 0; i < c.Sq; ++i)
    for (int64_t h = 0; h < c.Hq; ++h)
      for (int64_t d = 0; d < c.D; ++d) {
        const size_t idx = static_cast<size_t>(at(c, 0, i, h, d, c.Sq, c.Hq));
        if (i == 3 && h == 1) ASSERT_EQ(o[idx], 0.0);
        else if (i == 66 && h == 0) ASSERT_EQ(o[idx], 0.0);
        else ASSERT_NEAR(o[idx], want[idx], 1e-5) << i << " " << h << " " << d;
      }
}

TEST(Attention, AllFloatDtypes) {
  for (DType t : {DType::F64, DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    Cfg c;
    c.B = 2, c.Hq = 4, c.Hkv = 2, c.Sq = 5, c.Skv = 6, c.D = 8, c.mask = MaskKind::Causal, c.dtype = t;
    check(c);
    c.mask = MaskKind::Bias, c.layout = AttnLayout::BHSD;
    check(c, random_tensor(t, {1, 4, 1, 6}, 9));
    c.mask = MaskKind::Custom;
    check(c, key_mask(DType::I32, c.B, c.Skv, 0));
  }
}

TEST(Attention, ZeroSizeBatch) {
  Cfg c;
  c.B = 0, c.Hq = 2, c.Hkv = 1, c.Sq = 3, c.Skv = 4, c.D = 4;
  const Tensor out = check(c);
  EXPECT_EQ(out.numel(), 0);
  c.B = 1, c.Sq = 0;
  EXPECT_EQ(check(c).numel(), 0);
}

TEST(Attention, SymbolicDimsPassThrough) {
  const Dim b = Dim::symbol("batch"), s = Dim::symbol("seq"), t = Dim::symbol("kv");
  ops::Attention a;
  a.num_heads = 4, a.num_kv_heads = 2, a.head_dim = 8, a.mask_kind = MaskKind::Custom;
  const std::vector<Shape> in{Shape({b, s, 4, 8}), Shape({b, t, 2, 8}), Shape({b, t, 2, 8}),
                              Shape({b, t}, DType::Bool)};
  const auto out = infer_op(a, in);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], in[0]);
}

std::string attn_error(const Cfg& c, const std::vector<Shape>& in) {
  return error_message([&] { infer_op(attrs(c), in); });
}

TEST(Attention, RejectsBadInputs) {
  Cfg c;
  c.Hq = 4, c.Hkv = 2, c.D = 8;
  const Shape q = Shape::of({1, 3, 4, 8}), kv = Shape::of({1, 5, 2, 8});
  EXPECT_THAT(attn_error(c, {Shape::of({1, 3, 4, 6}), kv, kv}), HasSubstr("head_dim"));
  Cfg h = c;
  h.Hkv = 3;
  EXPECT_THAT(attn_error(h, {q, Shape::of({1, 5, 3, 8}), Shape::of({1, 5, 3, 8})}), HasSubstr("divisible"));
  EXPECT_THAT(attn_error(c, {q, Shape::of({1, 5, 4, 8}), kv}), HasSubstr("num_kv_heads"));
  EXPECT_THAT(attn_error(c, {q, kv, Shape::of({1, 6, 2, 8})}), HasSubstr("sequence length"));
  EXPECT_THAT(attn_error(c, {q, kv, kv, Shape::of({1, 5})}), HasSubstr("takes no mask"));
  Cfg cu = c;
  cu.mask = MaskKind::Custom;
  EXPECT_THAT(attn_error(cu, {q, kv, kv}), HasSubstr("needs a 4th input"));
  EXPECT_THAT(attn_error(cu, {q, kv, kv, Shape::of({1, 4})}), HasSubstr("key length"));
  EXPECT_THAT(attn_error(cu, {q, kv, kv, Shape::of({5})}), HasSubstr("rank 2"));
  Cfg bi = c;
  bi.mask = MaskKind::Bias;
  EXPECT_THAT(attn_error(bi, {q, kv, kv}), HasSubstr("needs a 4th input"));
  EXPECT_THAT(attn_error(bi, {q, kv, kv, Shape::of({1, 4, 3, 5}, DType::F16)}), HasSubstr("dtype"));
  EXPECT_THAT(attn_error(bi, {q, kv, kv, Shape::of({1, 4, 2, 5})}), HasSubstr("broadcast"));
  EXPECT_THAT(attn_error(bi, {q, kv, kv, Shape::of({1, 1, 4, 3, 5})}), HasSubstr("broadcast"));
  Cfg sw = c;
  sw.mask = MaskKind::SlidingWindow;
  EXPECT_THAT(attn_error(sw, {q, kv, kv}), HasSubstr("window > 0"));
  Cfg wn = c;
  wn.window = 3;
  EXPECT_THAT(attn_error(wn, {q, kv, kv}), HasSubstr("only meaningful"));
  Cfg sc = c;
  sc.softcap = -1;
  EXPECT_THAT(attn_error(sc, {q, kv, kv}), HasSubstr("softcap"));
  sc.softcap = 0, sc.scale = std::numeric_limits<double>::infinity();
  EXPECT_THAT(attn_error(sc, {q, kv, kv}), HasSubstr("score_scale"));
  EXPECT_THAT(attn_error(c, {Shape::of({1, 3, 4, 8}, DType::I32), kv, kv}), HasSubstr("float"));
  EXPECT_THAT(attn_error(c, {q, Shape::of({1, 5, 2, 8}, DType::F64), kv}), HasSubstr("dtype"));
  EXPECT_THAT(attn_error(c, {q, Shape::of({2, 5, 2, 8}), kv}), HasSubstr("batch"));
  EXPECT_THAT(attn_error(c, {Shape::of({3, 4, 8}), kv, kv}), HasSubstr("rank 4"));
  Cfg zero = c;
  zero.D = 0;
  EXPECT_THAT(attn_error(zero, {q, kv, kv}), HasSubstr("head_dim must be positive"));
  // Through the graph builder: the node is named.
  Graph g;
  const Value qi = g.input("q", q), ki = g.input("k", kv);
  EXPECT_THAT(error_message([&] { g.attention(qi, ki, ki, std::nullopt, attrs(h)); }), HasSubstr("attention"));
}

// ---------------------------------------------------------------------------------------
// Rope
std::vector<double> ref_rope(const std::vector<double>& x, const std::vector<int64_t>& xd,
                             const std::vector<double>& cs, const std::vector<double>& sn, bool per_batch,
                             int64_t n_rot, RopeStyle style) {
  const int64_t B = xd[0], S = xd[1], H = xd[2], hd = xd[3], half = n_rot / 2;
  std::vector<double> out = x;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t base = ((b * S + s) * H + h) * hd;
        const int64_t t = ((per_batch ? b * S : 0) + s) * half;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t a = style == RopeStyle::NeoX ? i : 2 * i;
          const int64_t c = style == RopeStyle::NeoX ? i + half : 2 * i + 1;
          const double x1 = x[base + a], x2 = x[base + c];
          out[base + a] = x1 * cs[t + i] - x2 * sn[t + i];
          out[base + c] = x2 * cs[t + i] + x1 * sn[t + i];
        }
      }
  return out;
}

void check_rope(DType dt, std::vector<int64_t> xd, int64_t n_rot, RopeStyle style, bool per_batch, uint64_t seed) {
  const int64_t half = n_rot / 2;
  std::vector<int64_t> td = per_batch ? std::vector<int64_t>{xd[0], xd[1], half} : std::vector<int64_t>{xd[1], half};
  // Real rotary tables: angle = pos * theta_i (+ a per-batch offset).
  std::vector<double> cs, sn;
  for (int64_t i = 0; i < product(td); ++i) {
    const auto idx = unravel(i, td);
    const double pos = static_cast<double>(idx[idx.size() - 2]) + (per_batch ? 3.0 * static_cast<double>(idx[0]) : 0.0);
    const double ang = pos * std::pow(10000.0, -2.0 * static_cast<double>(idx.back()) / static_cast<double>(n_rot));
    cs.push_back(std::cos(ang));
    sn.push_back(std::sin(ang));
  }
  const Tensor x = random_tensor(dt, xd, seed);
  const Tensor c = from_doubles(dt, td, cs), s = from_doubles(dt, td, sn);
  Graph g;
  const Value xi = g.input("x", x.shape_info());
  const Value ci = g.input("cos", c.shape_info());
  const Value si = g.input("sin", s.shape_info());
  g.add_output(g.rope(xi, ci, si, xd[3], n_rot, style));
  const Tensor out = run_cpu1(g, {{"x", x}, {"cos", c}, {"sin", s}});
  const auto want = ref_rope(to_doubles(x), xd, to_doubles(c), to_doubles(s), per_batch, n_rot, style);
  EXPECT_TRUE(all_close(out, xd, want, tol_for(dt)));
  // Dims past n_rot pass through bit for bit.
  const auto xv = to_doubles(x), ov = to_doubles(out);
  for (size_t i = 0; i < xv.size(); ++i) {
    if (static_cast<int64_t>(i) % xd[3] >= n_rot) {
      ASSERT_EQ(xv[i], ov[i]) << "element " << i;
    }
  }
}

TEST(Rope, BothStylesPartialRotation) {
  for (RopeStyle st : {RopeStyle::NeoX, RopeStyle::GptJ}) {
    for (int64_t n_rot : {8, 4, 2}) {
      SCOPED_TRACE(std::string(enum_name(st)) + " n_rot=" + std::to_string(n_rot));
      check_rope(DType::F32, {2, 5, 3, 8}, n_rot, st, false, 1);
      check_rope(DType::F32, {2, 5, 3, 8}, n_rot, st, true, 2);
    }
  }
}

TEST(Rope, StylesDiffer) {
  const Tensor x = random_tensor(DType::F32, {1, 1, 1, 4}, 3);
  const Tensor c = Tensor::f32({1, 2}, std::vector<float>{0.0f, 1.0f});
  const Tensor s = Tensor::f32({1, 2}, std::vector<float>{1.0f, 0.0f});
  auto run = [&](RopeStyle st) {
    Graph g;
    g.add_output(g.rope(g.input("x", x.shape_info()), g.input("c", c.shape_info()), g.input("s", s.shape_info()), 4,
                        4, st));
    return to_doubles(run_cpu1(g, {{"x", x}, {"c", c}, {"s", s}}));
  };
  const auto xv = to_doubles(x);
  // Pair 0 rotated by 90 degrees, pair 1 untouched.
  const auto neox = run(RopeStyle::NeoX);  // pairs (0, 2), (1, 3)
  EXPECT_NEAR(neox[0], -xv[2], 1e-7);
  EXPECT_NEAR(neox[2], xv[0], 1e-7);
  EXPECT_NEAR(neox[1], xv[1], 1e-7);
  EXPECT_NEAR(neox[3], xv[3], 1e-7);
  const auto gptj = run(RopeStyle::GptJ);  // pairs (0, 1), (2, 3)
  EXPECT_NEAR(gptj[0], -xv[1], 1e-7);
  EXPECT_NEAR(gptj[1], xv[0], 1e-7);
  EXPECT_NEAR(gptj[2], xv[2], 1e-7);
  EXPECT_NEAR(gptj[3], xv[3], 1e-7);
}

TEST(Rope, AllFloatDtypes) {
  for (DType t : {DType::F64, DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    check_rope(t, {2, 4, 2, 6}, 4, RopeStyle::NeoX, false, 5);
    check_rope(t, {2, 4, 2, 6}, 6, RopeStyle::GptJ, true, 6);
  }
}

TEST(Rope, ZeroSize) {
  check_rope(DType::F32, {0, 4, 2, 4}, 4, RopeStyle::NeoX, false, 1);
  check_rope(DType::F32, {2, 0, 2, 4}, 2, RopeStyle::GptJ, true, 1);
}

std::string rope_error(int64_t head_dim, int64_t n_rot, const Shape& x, const Shape& cs, const Shape& sn) {
  return error_message([&] { infer_op(ops::Rope{head_dim, n_rot, RopeStyle::NeoX}, std::vector<Shape>{x, cs, sn}); });
}

TEST(Rope, RejectsBadInputs) {
  const Shape x = Shape::of({2, 5, 3, 8}), t = Shape::of({5, 3});
  EXPECT_THAT(rope_error(8, 5, x, t, t), HasSubstr("even"));
  EXPECT_THAT(rope_error(8, 10, x, Shape::of({5, 5}), Shape::of({5, 5})), HasSubstr("n_rot"));
  EXPECT_THAT(rope_error(8, 0, x, Shape::of({5, 0}), Shape::of({5, 0})), HasSubstr("n_rot"));
  EXPECT_THAT(rope_error(6, 6, x, t, t), HasSubstr("head_dim"));
  EXPECT_THAT(rope_error(8, 6, x, Shape::of({5, 4}), Shape::of({5, 4})), HasSubstr("n_rot/2"));
  EXPECT_THAT(rope_error(8, 6, x, Shape::of({4, 3}), Shape::of({4, 3})), HasSubstr("sequence"));
  EXPECT_THAT(rope_error(8, 6, x, Shape::of({3, 5, 3}), Shape::of({3, 5, 3})), HasSubstr("batch"));
  EXPECT_THAT(rope_error(8, 6, x, t, Shape::of({5, 3}, DType::F16)), HasSubstr("dtype"));
  EXPECT_THAT(rope_error(8, 6, x, t, Shape::of({2, 5, 3})), HasSubstr("same shape"));
  EXPECT_THAT(rope_error(8, 6, Shape::of({5, 3, 8}), t, t), HasSubstr("rank 4"));
  EXPECT_THAT(rope_error(8, 6, Shape::of({2, 5, 3, 8}, DType::I32), t, t), HasSubstr("float"));
}

TEST(Rope, SymbolicDims) {
  const Dim b = Dim::symbol("b"), s = Dim::symbol("s");
  const Shape x({b, s, 4, 8});
  const auto out = infer_op(ops::Rope{8, 8, RopeStyle::GptJ}, std::vector<Shape>{x, Shape({s, 4}), Shape({s, 4})});
  EXPECT_EQ(out.at(0), x);
}

// The few-row attention products (attention_small.h) against loops in double: head sizes with
// and without a 64-value remainder, key counts around the 8-key blocks, 1..8 rows, strided rows.
TEST(AttentionSmallProducts, MatchDoubleLoops) {
  for (int64_t d : {8, 64, 72, 136}) {
    if (!cpu::attn::small_products_native(d)) GTEST_SKIP() << "no AVX2/FMA on this CPU";
    for (int64_t ncol : {0, 1, 7, 8, 9, 100}) {
      for (int64_t rows : {1, 3, 8}) {
        SCOPED_TRACE("d=" + std::to_string(d) + " ncol=" + std::to_string(ncol) + " rows=" + std::to_string(rows));
        const int64_t q_ld = d + 5, k_ld = 2 * d + 3, ld = ncol + 2, o_ld = d + 1;
        const Tensor qt = random_tensor(DType::F32, {rows * q_ld}, 1);
        const Tensor kt = random_tensor(DType::F32, {std::max<int64_t>(ncol, 1) * k_ld}, 2);
        const Tensor vt = random_tensor(DType::F32, {std::max<int64_t>(ncol, 1) * k_ld}, 3);
        const float* q = qt.data<float>();
        const float* k = kt.data<float>();
        const float* v = vt.data<float>();
        std::vector<float> sc(static_cast<size_t>(rows * ld), -7.0f), o(static_cast<size_t>(rows * o_ld), -7.0f);
        cpu::attn::small_qk(rows, ncol, d, 0.125f, q, q_ld, k, k_ld, sc.data(), ld);
        cpu::attn::small_pv(rows, d, ncol, sc.data(), ld, v, k_ld, o.data(), o_ld);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t j = 0; j < ncol; ++j) {
            double want = 0;
            for (int64_t e = 0; e < d; ++e) want += double(q[r * q_ld + e]) * k[j * k_ld + e];
            EXPECT_NEAR(sc[static_cast<size_t>(r * ld + j)], 0.125 * want, 1e-5 * d) << r << "," << j;
          }
          EXPECT_EQ(sc[static_cast<size_t>(r * ld + ncol)], -7.0f);  // nothing past ncol
          for (int64_t e = 0; e < d; ++e) {
            double want = 0;
            for (int64_t j = 0; j < ncol; ++j) want += double(sc[static_cast<size_t>(r * ld + j)]) * v[j * k_ld + e];
            EXPECT_NEAR(o[static_cast<size_t>(r * o_ld + e)], want, 1e-5 * (ncol + 1)) << r << "," << e;
          }
          EXPECT_EQ(o[static_cast<size_t>(r * o_ld + d)], -7.0f);
        }
      }
    }
  }
}

}  // namespace
