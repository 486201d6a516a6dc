// Contraction family: MatMul, DotGeneral, FusedMatMulBiasAct, LoraMatMul, GroupedMatMul,
// checked against naive double-precision references.
#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using namespace rlx::testing;

// Tolerance for products of short sums of values in [-1, 1).
Tolerance tol_for(DType t) {
  switch (t) {
    case DType::F32: return {1e-5, 1e-5};
    case DType::F16: return {2e-3, 2e-3};
    case DType::BF16: return {1.6e-2, 1e-2};
    default: return default_tolerance(t);
  }
}

Tensor rand_of(DType t, std::vector<int64_t> shape, uint64_t seed) {
  if (is_int(t)) return random_tensor(t, std::move(shape), seed, -5, 5);
  return random_tensor(t, std::move(shape), seed);
}

// numpy matmul reference.
std::vector<double> ref_matmul(const std::vector<double>& a, std::vector<int64_t> ad, const std::vector<double>& b,
                               std::vector<int64_t> bd, std::vector<int64_t>& out_dims) {
  const bool a1 = ad.size() == 1, b1 = bd.size() == 1;
  if (a1) ad.insert(ad.begin(), 1);
  if (b1) bd.push_back(1);
  const int64_t M = ad[ad.size() - 2], K = ad.back(), N = bd.back();
  std::vector<int64_t> abd(ad.begin(), ad.end() - 2), bbd(bd.begin(), bd.end() - 2);
  const size_t r = std::max(abd.size(), bbd.size());
  abd.insert(abd.begin(), r - abd.size(), 1);
  bbd.insert(bbd.begin(), r - bbd.size(), 1);
  std::vector<int64_t> ob(r);
  for (size_t i = 0; i < r; ++i) ob[i] = std::max(abd[i], bbd[i]);
  if (std::find(abd.begin(), abd.end(), 0) != abd.end() || std::find(bbd.begin(), bbd.end(), 0) != bbd.end())
    for (size_t i = 0; i < r; ++i) ob[i] = (abd[i] == 0 || bbd[i] == 0) ? 0 : ob[i];
  int64_t nb = 1;
  for (int64_t d : ob) nb *= d;
  std::vector<double> out(static_cast<size_t>(nb * M * N), 0.0);
  for (int64_t bi = 0; bi < nb; ++bi) {
    const auto idx = unravel(bi, ob);
    int64_t ia = 0, ib = 0;
    for (size_t d = 0; d < r; ++d) {
      ia = ia * abd[d] + (abd[d] == 1 ? 0 : idx[d]);
      ib = ib * bbd[d] + (bbd[d] == 1 ? 0 : idx[d]);
    }
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += a[(ia * M + i) * K + k] * b[(ib * K + k) * N + j];
        out[(bi * M + i) * N + j] = s;
      }
  }
  out_dims = ob;
  if (!a1) out_dims.push_back(M);
  if (!b1) out_dims.push_back(N);
  return out;
}

const DType kMatmulDTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64};

TEST(MatMul, NumpySemanticsEveryDType) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{4}, {4}},           {{4}, {4, 3}},       {{2, 4}, {4}},       {{3, 4}, {4, 5}},
      {{2, 1, 3, 4}, {5, 4, 6}}, {{3, 0}, {0, 2}}, {{0, 4}, {4, 3}},   {{2, 3, 4}, {4}},
      {{4}, {2, 4, 3}},     {{1}, {1, 5}},       {{2, 3, 4}, {1, 4, 2}}, {{3, 4}, {4, 0}},
      {{0, 3, 4}, {4, 2}}};
  uint64_t seed = 1;
  for (DType dt : kMatmulDTypes) {
    for (const auto& [ad, bd] : cases) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + dims_str(ad) + " @ " + dims_str(bd));
      Tensor a = rand_of(dt, ad, seed++), b = rand_of(dt, bd, seed++);
      std::vector<int64_t> od;
      auto ref = ref_matmul(to_doubles(a), ad, to_doubles(b), bd, od);
      Tensor out = run_op(ops::MatMul{}, {a, b});
      EXPECT_EQ(out.dtype(), dt);
      EXPECT_TRUE(all_close(out, od, ref, tol_for(dt)));
    }
  }
}

TEST(MatMul, SmallIntTypesWrapLikeTheStorageType) {
  // i8 products accumulate in 64 bits and are stored modulo 2^8.
  std::vector<double> av{100, 100}, bv{1, 1};
  Tensor a = from_doubles(DType::I8, {1, 2}, av), b = from_doubles(DType::I8, {2, 1}, bv);
  Tensor out = run_op(ops::MatMul{}, {a, b});
  EXPECT_TRUE(all_close(out, {1, 1}, {static_cast<double>(static_cast<int8_t>(200))}));
  Tensor u = random_tensor(DType::U8, {3, 5}, 3, 0, 9), v = random_tensor(DType::U8, {5, 2}, 4, 0, 3);
  std::vector<int64_t> od;
  auto ref = ref_matmul(to_doubles(u), {3, 5}, to_doubles(v), {5, 2}, od);
  for (double& x : ref) x = static_cast<double>(static_cast<uint8_t>(static_cast<int64_t>(x)));
  EXPECT_TRUE(all_close(run_op(ops::MatMul{}, {u, v}), od, ref));
}

TEST(MatMul, ManySmallBatchesAndLargerIntProduct) {
  // Exercises the batch-parallel BLAS path and the row-parallel integer loop.
  for (DType dt : {DType::F32, DType::BF16, DType::I32}) {
    SCOPED_TRACE(dtype_name(dt));
    const std::vector<int64_t> ad = dt == DType::I32 ? std::vector<int64_t>{64, 32} : std::vector<int64_t>{48, 8, 9};
    const std::vector<int64_t> bd = dt == DType::I32 ? std::vector<int64_t>{32, 40} : std::vector<int64_t>{48, 9, 7};
    Tensor a = rand_of(dt, ad, 11), b = rand_of(dt, bd, 12);
    std::vector<int64_t> od;
    auto ref = ref_matmul(to_doubles(a), ad, to_doubles(b), bd, od);
    EXPECT_TRUE(all_close(run_op(ops::MatMul{}, {a, b}), od, ref, tol_for(dt)));
  }
}

TEST(MatMul, SymbolicDimsPassThrough) {
  Shape a({Dim::symbol("batch"), Dim::symbol("seq"), 4});
  Shape b = Shape::of({4, 6});
  EXPECT_EQ(infer_node(ops::MatMul{}, {a, b}).str(), "f32[batch,seq,6]");
  Shape c({Dim::symbol("k"), 3});
  EXPECT_EQ(infer_node(ops::MatMul{}, {Shape::of({2, 5}), c}).str(), "f32[2,3]");
}

TEST(MatMul, RejectsBadOperands) {
  EXPECT_THAT(error_message([] { infer_node(ops::MatMul{}, {Shape::of({2, 3}), Shape::of({4, 5})}); }),
              HasSubstr("contracting dims differ"));
  EXPECT_THAT(error_message([] { infer_node(ops::MatMul{}, {Shape::of({3}), Shape::of({4})}); }),
              HasSubstr("K=3"));
  EXPECT_THAT(error_message([] { infer_node(ops::MatMul{}, {Shape::of({2, 3, 4}), Shape::of({3, 4, 5})}); }),
              HasSubstr("do not broadcast"));
  EXPECT_THAT(error_message([] { infer_node(ops::MatMul{}, {Shape::of({}), Shape::of({4, 5})}); }),
              HasSubstr("rank >= 1"));
  EXPECT_THAT(error_message([] {
                infer_node(ops::MatMul{}, {Shape::of({2, 3}), Shape::of({3, 2}, DType::F64)});
              }),
              HasSubstr("share a dtype"));
  EXPECT_THAT(error_message([] {
                infer_node(ops::MatMul{}, {Shape::of({2, 3}, DType::Bool), Shape::of({3, 2}, DType::Bool)});
              }),
              HasSubstr("bool"));
}

// ---- DotGeneral ------------------------------------------------------------------------
std::vector<double> ref_dot(const std::vector<double>& l, const std::vector<int64_t>& ld, const std::vector<double>& r,
                            const std::vector<int64_t>& rd, const ops::DotGeneral& dg, std::vector<int64_t>& od) {
  auto norm = [](std::vector<int64_t> v, size_t rank) {
    for (auto& a : v) a = a < 0 ? a + static_cast<int64_t>(rank) : a;
    return v;
  };
  const auto lb = norm(dg.lhs_batch, ld.size()), rb = norm(dg.rhs_batch, rd.size());
  const auto lc = norm(dg.lhs_contract, ld.size()), rc = norm(dg.rhs_contract, rd.size());
  auto frees = [](size_t rank, const std::vector<int64_t>& b, const std::vector<int64_t>& c) {
    std::vector<int64_t> f;
    for (int64_t d = 0; d < static_cast<int64_t>(rank); ++d)
      if (std::count(b.begin(), b.end(), d) == 0 && std::count(c.begin(), c.end(), d) == 0) f.push_back(d);
    return f;
  };
  const auto lf = frees(ld.size(), lb, lc), rf = frees(rd.size(), rb, rc);
  od.clear();
  for (auto a : lb) od.push_back(ld[a]);
  for (auto a : lf) od.push_back(ld[a]);
  for (auto a : rf) od.push_back(rd[a]);
  std::vector<int64_t> cd;
  for (auto a : lc) cd.push_back(ld[a]);
  int64_t nout = 1, ncon = 1;
  for (auto d : od) nout *= d;
  for (auto d : cd) ncon *= d;
  std::vector<double> out(static_cast<size_t>(nout));
  for (int64_t o = 0; o < nout; ++o) {
    const auto oi = unravel(o, od);
    std::vector<int64_t> li(ld.size()), ri(rd.size());
    size_t p = 0;
    for (size_t i = 0; i < lb.size(); ++i, ++p) li[lb[i]] = ri[rb[i]] = oi[p];
    for (size_t i = 0; i < lf.size(); ++i, ++p) li[lf[i]] = oi[p];
    for (size_t i = 0; i < rf.size(); ++i, ++p) ri[rf[i]] = oi[p];
    double s = 0;
    for (int64_t c = 0; c < ncon; ++c) {
      const auto ci = unravel(c, cd);
      for (size_t i = 0; i < lc.size(); ++i) li[lc[i]] = ri[rc[i]] = ci[i];
      s += l[ravel(li, ld)] * r[ravel(ri, rd)];
    }
    out[o] = s;
  }
  return out;
}

ops::DotGeneral dg(std::vector<int64_t> lb, std::vector<int64_t> rb, std::vector<int64_t> lc, std::vector<int64_t> rc) {
  ops::DotGeneral d;
  d.lhs_batch = std::move(lb);
  d.rhs_batch = std::move(rb);
  d.lhs_contract = std::move(lc);
  d.rhs_contract = std::move(rc);
  return d;
}

TEST(DotGeneral, BatchAndContractingDimsInAnyOrder) {
  struct Case {
    std::vector<int64_t> ld, rd;
    ops::DotGeneral d;
  };
  const std::vector<Case> cases = {
      // two contracting dims in swapped order, batch in the middle: out [2, 4, 6]
      {{3, 2, 4, 5}, {5, 6, 2, 3}, dg({1}, {2}, {3, 0}, {0, 3})},
      // plain batched matmul (no copies) and q @ k^T (rhs transposed in place)
      {{2, 3, 4}, {2, 4, 5}, dg({0}, {0}, {2}, {1})},
      {{2, 3, 4}, {2, 5, 4}, dg({0}, {0}, {-1}, {-1})},
      // lhs stored [B, K, M] (transposed in place)
      {{2, 4, 3}, {2, 4, 5}, dg({0}, {0}, {1}, {1})},
      // two batch dims given in reversed order, free dims on both sides
      {{2, 3, 4, 2}, {3, 2, 4, 5}, dg({1, 0}, {0, 1}, {2}, {2})},
      // outer product (nothing contracted) and full contraction
      {{3}, {4}, dg({}, {}, {}, {})},
      {{3, 4}, {4, 3}, dg({}, {}, {0, 1}, {1, 0})},
      // zero-size contraction and zero-size free dim
      {{2, 0}, {0, 3}, dg({}, {}, {1}, {0})},
      {{0, 4}, {4, 3}, dg({}, {}, {1}, {0})}};
  uint64_t seed = 100;
  for (DType dt : kMatmulDTypes) {
    for (const auto& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + dims_str(c.ld) + " . " + dims_str(c.rd) + " " +
                   op_attrs_str(c.d));
      Tensor l = rand_of(dt, c.ld, seed++), r = rand_of(dt, c.rd, seed++);
      std::vector<int64_t> od;
      auto ref = ref_dot(to_doubles(l), c.ld, to_doubles(r), c.rd, c.d, od);
      EXPECT_TRUE(all_close(run_op(c.d, {l, r}), od, ref, tol_for(dt)));
    }
  }
}

TEST(DotGeneral, RejectsBadDims) {
  const Shape l = Shape::of({2, 3, 4}), r = Shape::of({2, 4, 5});
  EXPECT_THAT(error_message([&] { infer_node(dg({0}, {}, {2}, {1}), {l, r}); }), HasSubstr("same length"));
  EXPECT_THAT(error_message([&] { infer_node(dg({0}, {0}, {2}, {2}), {l, r}); }),
              HasSubstr("contracting dim pair 0 differs"));
  EXPECT_THAT(error_message([&] { infer_node(dg({0}, {0}, {3}, {1}), {l, r}); }), HasSubstr("out of range"));
  EXPECT_THAT(error_message([&] { infer_node(dg({0}, {0}, {0}, {0}), {l, r}); }), HasSubstr("distinct"));
  EXPECT_THAT(error_message([&] { infer_node(dg({0}, {1}, {2}, {1}), {l, r}); }), HasSubstr("distinct"));
  EXPECT_THAT(error_message([&] { infer_node(dg({1}, {0}, {2}, {1}), {l, r}); }),
              HasSubstr("batch dim pair 0 differs"));
  EXPECT_EQ(infer_node(dg({0}, {0}, {2}, {1}), {l, r}).str(), "f32[2,3,5]");
}

// ---- FusedMatMulBiasAct -----------------------------------------------------------------
double ref_act(ActKind k, double x) {
  switch (k) {
    case ActKind::Relu: return x > 0 ? x : 0;
    case ActKind::Gelu: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case ActKind::GeluApprox: return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case ActKind::Silu: return x / (1 + std::exp(-x));
    case ActKind::Sigmoid: return 1 / (1 + std::exp(-x));
    case ActKind::Tanh: return std::tanh(x);
    case ActKind::Softplus: return std::log(1 + std::exp(x));
    case ActKind::Neg: return -x;
    case ActKind::Abs: return std::fabs(x);
    case ActKind::Sign: return x > 0 ? 1 : (x < 0 ? -1 : 0);
    case ActKind::Exp: return std::exp(x);
    case ActKind::Sin: return std::sin(x);
    case ActKind::Atan: return std::atan(x);
    case ActKind::Erf: return std::erf(x);
    default: ADD_FAILURE() << "no reference for " << enum_name(k); return 0;
  }
}

TEST(FusedMatMulBiasAct, MatchesComposedReference) {
  const std::vector<std::optional<ActKind>> acts = {std::nullopt,   ActKind::Relu, ActKind::Gelu,
                                                    ActKind::GeluApprox, ActKind::Silu, ActKind::Sigmoid,
                                                    ActKind::Tanh,  ActKind::Softplus, ActKind::Neg,
                                                    ActKind::Abs,   ActKind::Exp,  ActKind::Sin,
                                                    ActKind::Atan,  ActKind::Erf};
  // bias: none, [N], [1], scalar
  const std::vector<std::optional<std::vector<int64_t>>> biases = {std::nullopt, std::vector<int64_t>{5},
                                                                   std::vector<int64_t>{1}, std::vector<int64_t>{}};
  uint64_t seed = 300;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    for (const auto& act : acts) {
      for (const auto& bshape : biases) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " act=" + (act ? enum_name(*act) : "none") +
                     " bias=" + (bshape ? dims_str(*bshape) : "none"));
        Tensor x = rand_of(dt, {2, 3, 4}, seed++), w = rand_of(dt, {4, 5}, seed++);
        std::vector<Tensor> ins{x, w};
        std::vector<double> bv;
        if (bshape) {
          ins.push_back(rand_of(dt, *bshape, seed++));
          bv = to_doubles(ins.back());
        }
        std::vector<int64_t> od;
        auto ref = ref_matmul(to_doubles(x), {2, 3, 4}, to_doubles(w), {4, 5}, od);
        for (size_t i = 0; i < ref.size(); ++i) {
          double v = ref[i] + (bv.empty() ? 0.0 : bv[bv.size() == 1 ? 0 : i % 5]);
          ref[i] = act ? ref_act(*act, v) : v;
        }
        ops::FusedMatMulBiasAct op;
        op.activation = act;
        EXPECT_TRUE(all_close(run_op(op, ins), od, ref, tol_for(dt)));
      }
    }
  }
}

TEST(FusedMatMulBiasAct, IntegerWithReluAnd1dOperands) {
  Tensor x = rand_of(DType::I32, {3, 4}, 7), w = rand_of(DType::I32, {4, 6}, 8), b = rand_of(DType::I32, {6}, 9);
  std::vector<int64_t> od;
  auto ref = ref_matmul(to_doubles(x), {3, 4}, to_doubles(w), {4, 6}, od);
  auto bv = to_doubles(b);
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = std::max(0.0, ref[i] + bv[i % 6]);
  ops::FusedMatMulBiasAct op;
  op.activation = ActKind::Relu;
  EXPECT_TRUE(all_close(run_op(op, {x, w, b}), od, ref));
  // 1-d @ 1-d gives a scalar; a scalar bias is the only bias allowed then.
  Tensor u = rand_of(DType::F32, {4}, 10), v = rand_of(DType::F32, {4}, 11), s = rand_of(DType::F32, {}, 12);
  auto ref1 = ref_matmul(to_doubles(u), {4}, to_doubles(v), {4}, od);
  ref1[0] = std::tanh(ref1[0] + to_doubles(s)[0]);
  op.activation = ActKind::Tanh;
  EXPECT_TRUE(all_close(run_op(op, {u, v, s}), od, ref1, tol_for(DType::F32)));
}

TEST(FusedMatMulBiasAct, RejectsBadBiasAndActivation) {
  ops::FusedMatMulBiasAct op;
  const Shape x = Shape::of({3, 4}), w = Shape::of({4, 5});
  EXPECT_THAT(error_message([&] { infer_node(op, {x, w, Shape::of({3, 5})}); }), HasSubstr("rank <= 1"));
  EXPECT_THAT(error_message([&] { infer_node(op, {x, w, Shape::of({4})}); }), HasSubstr("last dim"));
  EXPECT_THAT(error_message([&] { infer_node(op, {x, w, Shape::of({5}, DType::F64)}); }), HasSubstr("dtype"));
  EXPECT_THAT(error_message([&] { infer_node(op, {Shape::of({4}), Shape::of({4}), Shape::of({1})}); }),
              HasSubstr("scalar"));
  op.activation = ActKind::Not;
  EXPECT_THAT(error_message([&] { infer_node(op, {x, w}); }), HasSubstr("not"));
  op.activation = ActKind::Gelu;
  EXPECT_THAT(error_message([&] { infer_node(op, {Shape::of({3, 4}, DType::I32), Shape::of({4, 5}, DType::I32)}); }),
              HasSubstr("needs float"));
  EXPECT_THAT(error_message([&] { infer_node(op, {x, Shape::of({5, 4})}); }), HasSubstr("contracting dims differ"));
}

// ---- LoraMatMul ------------------------------------------------------------------------
TEST(LoraMatMul, MatchesComposedReference) {
  uint64_t seed = 500;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    for (double scale : {0.5, 0.0, -2.0}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " scale=" + std::to_string(scale));
      Tensor x = rand_of(dt, {2, 3, 4}, seed++), w = rand_of(dt, {4, 5}, seed++);
      Tensor a = rand_of(dt, {4, 2}, seed++), b = rand_of(dt, {2, 5}, seed++);
      std::vector<int64_t> od, td;
      auto main = ref_matmul(to_doubles(x), {2, 3, 4}, to_doubles(w), {4, 5}, od);
      auto t = ref_matmul(to_doubles(x), {2, 3, 4}, to_doubles(a), {4, 2}, td);
      auto up = ref_matmul(t, td, to_doubles(b), {2, 5}, td);
      for (size_t i = 0; i < main.size(); ++i) main[i] += scale * up[i];
      EXPECT_TRUE(all_close(run_op(ops::LoraMatMul{scale}, {x, w, a, b}), od, main, tol_for(dt)));
    }
  }
}

TEST(LoraMatMul, RejectsMismatchedAdapters) {
  const Shape x = Shape::of({3, 4}), w = Shape::of({4, 5});
  EXPECT_THAT(error_message([&] { infer_node(ops::LoraMatMul{}, {x, w, Shape::of({4, 2}), Shape::of({2, 6})}); }),
              HasSubstr("(x @ a) @ b has shape"));
  EXPECT_THAT(error_message([&] { infer_node(ops::LoraMatMul{}, {x, w, Shape::of({4, 2}), Shape::of({3, 5})}); }),
              HasSubstr("contracting dims differ"));
  EXPECT_THAT(error_message([&] {
                auto i = [](std::initializer_list<int64_t> d) { return Shape::of(d, DType::I32); };
                infer_node(ops::LoraMatMul{}, {i({3, 4}), i({4, 5}), i({4, 2}), i({2, 5})});
              }),
              HasSubstr("float"));
}

// ---- GroupedMatMul ---------------------------------------------------------------------
TEST(GroupedMatMul, RowsUseTheirExpert) {
  const std::vector<int64_t> experts{2, 0, 2, 1, 0, 2};
  uint64_t seed = 700;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I32}) {
    for (DType it : {DType::I32, DType::I64, DType::U8}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " idx " + dtype_name(it));
      Tensor x = rand_of(dt, {6, 4}, seed++), w = rand_of(dt, {3, 4, 5}, seed++);
      std::vector<double> iv(experts.begin(), experts.end());
      Tensor idx = from_doubles(it, {6}, iv);
      const auto xv = to_doubles(x), wv = to_doubles(w);
      std::vector<double> ref(30);
      for (int m = 0; m < 6; ++m)
        for (int n = 0; n < 5; ++n) {
          double s = 0;
          for (int k = 0; k < 4; ++k) s += xv[m * 4 + k] * wv[(experts[m] * 4 + k) * 5 + n];
          ref[m * 5 + n] = s;
        }
      EXPECT_TRUE(all_close(run_op(ops::GroupedMatMul{}, {x, w, idx}), {6, 5}, ref, tol_for(dt)));
    }
  }
  // zero rows
  Tensor out = run_op(ops::GroupedMatMul{}, {rand_of(DType::F32, {0, 4}, 1), rand_of(DType::F32, {2, 4, 3}, 2),
                                             Tensor::i64({0}, std::vector<int64_t>{})});
  EXPECT_EQ(out.shape(), (std::vector<int64_t>{0, 3}));
}

TEST(GroupedMatMul, RejectsBadShapesAndIndices) {
  Tensor x = rand_of(DType::F32, {3, 4}, 1), w = rand_of(DType::F32, {2, 4, 5}, 2);
  EXPECT_THAT(error_message([&] { run_op(ops::GroupedMatMul{}, {x, w, Tensor::i64({3}, std::vector<int64_t>{0, 2, 1})}); }),
              HasSubstr("idx[1] = 2 is out of range for 2 experts"));
  EXPECT_THAT(error_message([&] { run_op(ops::GroupedMatMul{}, {x, w, Tensor::i32({3}, std::vector<int32_t>{0, 1, -1})}); }),
              HasSubstr("idx[2] = -1"));
  EXPECT_THAT(error_message([&] {
                infer_node(ops::GroupedMatMul{}, {Shape::of({3, 4}), Shape::of({2, 5, 5}), Shape::of({3}, DType::I64)});
              }),
              HasSubstr("K of x"));
  EXPECT_THAT(error_message([&] {
                infer_node(ops::GroupedMatMul{}, {Shape::of({3, 4}), Shape::of({2, 4, 5}), Shape::of({3}, DType::F32)});
              }),
              HasSubstr("integer"));
  EXPECT_THAT(error_message([&] {
                infer_node(ops::GroupedMatMul{}, {Shape::of({3, 4}), Shape::of({2, 4, 5}), Shape::of({4}, DType::I64)});
              }),
              HasSubstr("one expert index per row"));
  EXPECT_THAT(error_message([&] {
                infer_node(ops::GroupedMatMul{}, {Shape::of({3, 4}), Shape::of({4, 5}), Shape::of({3}, DType::I64)});
              }),
              HasSubstr("(E, K, N)"));
}

}  // namespace
}  // namespace rlx
