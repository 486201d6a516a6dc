// MatMul parity cases: shapes with batching and broadcasting, the skinny (decode) products of
// the split-K GEMV, fused bias / activation / residual epilogues, f64 products under every
// precision policy (which f64 ignores), the grouped (mixture-of-experts) product, and the product
// with GGUF block-quantized weights (DequantMatMul).
#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "parity/parity_cases.h"
#include "quant/ggml_blocks.h"
#include "rlx/gguf.h"

namespace rlx::testing {

namespace {

// Sums of k products in f32, in another order than the CPU's BLAS: the absolute error grows like
// sqrt(k) (both sides are off from the exact sum by about that much; a wrong weight or a lost k
// chunk is off by O(1)).
std::function<Tolerance(DType)> k_sum_tolerance(int64_t k) {
  return [k](DType d) {
    Tolerance tol = parity_tolerance(d);
    if (d == DType::F32) tol.atol = 4e-6 * std::sqrt(static_cast<double>(k));
    return tol;
  };
}


constexpr DType kFloats[] = {DType::F32, DType::F16, DType::BF16};

std::string dt(DType t) { return dtype_name(t); }

std::string dims_name(const std::vector<int64_t>& d) {
  std::string s;
  for (int64_t v : d) s += (s.empty() ? "" : "x") + std::to_string(v);
  return s;
}

void add_shapes(CaseList& l) {
  struct Shapes {
    std::vector<int64_t> a, b;
  };
  const std::vector<Shapes> cases = {{{33, 65}, {65, 17}},       {{64}, {64, 32}},           {{8, 64}, {64}},
                                     {{3, 24, 40}, {3, 40, 56}}, {{2, 3, 16, 8}, {8, 24}},  {{4, 1, 5, 8}, {3, 8, 6}},
                                     {{1, 128, 768}, {768, 768}},
                                     // skinny (decode) products: the split-K GEMV path
                                     {{3, 2048}, {2048, 512}},   {{2, 1, 1000}, {1000, 96}}, {{1, 1, 5632}, {5632, 64}}};
  for (DType t : kFloats)
    for (const Shapes& c : cases)
      add_case(l, "matmul", "matmul_" + dims_name(c.a) + "_" + dims_name(c.b) + "_" + dt(t), [t, c] {
        Graph g;
        g.add_output(g.matmul(g.input("a", Shape::from(c.a, t)), g.input("b", Shape::from(c.b, t))));
        return one(std::move(g));
      });
}

void add_fused(CaseList& l) {
  const std::vector<std::optional<ActKind>> acts = {std::nullopt, ActKind::Relu, ActKind::GeluApprox, ActKind::Gelu,
                                                    ActKind::Silu, ActKind::Tanh};
  for (DType t : kFloats)
    for (const auto& act : acts)
      add_case(l, "matmul", std::string("fused_matmul_") + (act ? enum_name(*act) : "noact") + "_" + dt(t), [t, act] {
        std::vector<CaseGraph> v;
        for (int64_t bias_len : {0, 1, 48})
          for (int64_t rows : {40, 3})  // cuBLASLt epilogues and the GEMV path
            for (bool residual : {false, true}) {
              Graph g;
              const Value x = g.input("x", Shape::of({1, rows, 64}, t));
              const Value w = g.param("w", Shape::of({64, 48}, t));
              std::vector<Value> ins{x, w};
              if (bias_len) ins.push_back(g.param("bias", Shape::of({bias_len}, t)));
              if (residual) ins.push_back(g.input("res", Shape::of({1, rows, 48}, t)));
              ops::FusedMatMulBiasAct f{act};
              f.residual = residual;
              g.add_output(g.apply(f, ins));
              v.push_back({"bias=" + std::to_string(bias_len) + " rows=" + std::to_string(rows) +
                               " residual=" + std::to_string(residual),
                           std::move(g), {}});
            }
        return v;
      });
  // The one-launch split-K GEMV: every row count it takes, column tiles cut by N, many K splits.
  for (DType t : kFloats)
    for (int64_t rows : {1, 2, 3, 4})
      add_case(l, "matmul", "skinny_matmul_silu_residual_rows" + std::to_string(rows) + "_" + dt(t), [t, rows] {
        std::vector<CaseGraph> v;
        for (const auto& [k, n] : std::vector<std::pair<int64_t, int64_t>>{{4096, 2056}, {5632, 2048}, {96, 8}}) {
          Graph g;
          const Value x = g.input("x", Shape::of({rows, k}, t));
          const Value r = g.input("r", Shape::of({rows, n}, t));
          ops::FusedMatMulBiasAct f{ActKind::Silu};
          f.residual = true;
          g.add_output(g.apply(f, {x, g.param("w", Shape::of({k, n}, t)), g.param("b", Shape::of({n}, t)), r}));
          ParityOptions o;
          o.tolerance = k_sum_tolerance(k);
          v.push_back({"k=" + std::to_string(k) + " n=" + std::to_string(n), std::move(g), o});
        }
        return v;
      });
}

void add_f64(CaseList& l) {
  // The precision policy is for f32 graphs: f64 products and their epilogue stay in double.
  for (Precision p : {Precision::Fp32, Precision::Tf32, Precision::Bf16})
    add_case(
        l, "matmul", std::string("matmul_epilogue_f64_policy_") + precision_name(p),
        [] {
          Graph g;
          const Value a = g.input("a", Shape::of({2, 17, 40}, DType::F64));
          const Value w = g.param("w", Shape::of({40, 24}, DType::F64));
          const Value bias = g.param("b", Shape::of({24}, DType::F64));
          const Value res = g.input("r", Shape::of({2, 17, 24}, DType::F64));
          g.add_output(g.add(g.gelu(g.add(g.matmul(a, w), bias)), res));  // fused: bias, exact GELU, residual
          g.add_output(g.add(g.matmul(a, w), res));                        // residual alone
          g.add_output(g.matmul(g.input("q", Shape::of({3, 5, 8}, DType::F64)),
                                g.input("k", Shape::of({3, 8, 6}, DType::F64))));
          return one(std::move(g));
        },
        p);
}

void add_grouped(CaseList& l) {
  struct Dims {
    int64_t m, k, n, e;
  };
  // Decode (m of a few rows, k split over blocks), odd n (scalar loads), prefill-sized m.
  const std::vector<Dims> cases = {{1, 1024, 4096, 8}, {3, 129, 100, 4}, {2, 64, 513, 1},
                                   {300, 256, 96, 8},  {5, 2048, 64, 3}, {17, 1, 8, 2}};
  for (DType t : kFloats)
    for (DType it : {DType::I32, DType::I64})
      add_case(l, "matmul", "grouped_matmul_" + dt(t) + "_idx" + dt(it), [t, it, cases] {
        std::vector<CaseGraph> v;
        for (const Dims& c : cases) {
          Graph g;
          const Value x = g.input("x", Shape::of({c.m, c.k}, t));
          const Value w = g.input("w", Shape::of({c.e, c.k, c.n}, t));
          const Value idx = g.input("idx", Shape::of({c.m}, it));
          g.add_output(g.apply(ops::GroupedMatMul{}, {x, w, idx}));
          std::vector<double> ix(static_cast<size_t>(c.m));
          for (size_t i = 0; i < ix.size(); ++i) ix[i] = static_cast<double>((i * 5 + 3) % static_cast<size_t>(c.e));
          ParityOptions o;
          o.fixed_inputs = {{"idx", from_doubles(it, {c.m}, ix)}};
          o.tolerance = k_sum_tolerance(c.k);
          v.push_back({"m " + std::to_string(c.m) + " k " + std::to_string(c.k) + " n " + std::to_string(c.n) +
                           " experts " + std::to_string(c.e),
                       std::move(g), o});
        }
        return v;
      });
}

// DequantMatMul (GGUF block weights; Gaussian values quantized here) for the formats rlx can
// quantize: a prefill-sized product (24 rows, batch dims) and a decode row. The CPU may quantize
// x to 8-bit blocks on either (its Int8 paths on AVX2 machines): a per-product error of up to
// |w| / 254, so the absolute tolerance is well above that and far below what a wrong block or
// scale gives (tests/vulkan/test_vulkan_dequant.cpp holds Vulkan to the exact product).
// Every format with f32 x, the half x dtypes on one format (each case compiles its own kernels:
// on lavapipe a dequant pipeline takes about a second; the backends' own tests cover every
// format with every x dtype).
void add_dequant(CaseList& l) {
  for (QuantFormat f : {QuantFormat::Q4_0, QuantFormat::Q5_0, QuantFormat::Q8_0, QuantFormat::Q4_K, QuantFormat::Q6_K})
    for (DType t : kFloats) {
      if (t != DType::F32 && f != QuantFormat::Q4_K) continue;
      const std::string fname = EnumNames<QuantFormat>::names[static_cast<size_t>(f)];
      add_case(l, "matmul", "dequant_matmul_" + fname + "_" + dt(t), [f, t] {
        std::vector<CaseGraph> v;
        const QuantBlock blk = quant_block(f);
        const int64_t k = 2 * blk.elements;
        for (const auto& [x_dims, n] : std::vector<std::pair<std::vector<int64_t>, int64_t>>{{{2, 12, k}, 40}, {{1, k}, 33}}) {
          Graph g;
          ops::DequantMatMul op;
          op.format = f;
          op.k = k;
          const int64_t row_bytes = k / blk.elements * blk.bytes;
          g.add_output(g.apply(op, {g.input("x", Shape::from(x_dims, t)), g.param("w", Shape::of({n, row_bytes}, DType::U8))}));
          std::mt19937_64 rng(static_cast<uint64_t>(n) * 31 + static_cast<uint64_t>(f));
          std::normal_distribution<float> d(0.0f, 1.0f);
          std::vector<float> wv(static_cast<size_t>(n * k));
          for (float& x : wv) x = d(rng);
          const std::vector<uint8_t> wb = ggml_quantize(quant::ggml_type_of(f), wv);
          ParityOptions o;
          o.fixed_params = {{"w", Tensor::from_bytes(DType::U8, {n, row_bytes}, wb.data(), wb.size())}};
          o.tolerance = [k](DType dt) {
            Tolerance tol = parity_tolerance(dt);
            tol.atol = std::max(tol.atol, 0.02 * std::sqrt(static_cast<double>(k)));
            return tol;
          };
          v.push_back({x_dims.size() == 2 ? "decode" : "prefill", std::move(g), o});
        }
        return v;
      });
    }
}

}  // namespace

void add_matmul_cases(CaseList& l) {
  add_shapes(l);
  add_fused(l);
  add_f64(l);
  add_grouped(l);
  add_dequant(l);
}

}  // namespace rlx::testing
