// The skinny-GEMM (decode) path of the CUDA backend: which producers a GEMV absorbs into its
// prologue (planned on the Schedule, no device needed), parity of the fused kernels, and of
// every row layout of the kernel (RLX_GEMV_LPR) with and without the L2 prefetch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include "backends/cuda/device.h"
#include "backends/cuda/lower.h"
#include "backends/cuda/stats.h"
#include "cuda/cuda_test_util.h"
#include "plan/schedule.h"

namespace {

using namespace rlx;
using rlx::testing::ScopedEnv;

// The step index of the first step running op `name`.
size_t step_of(const plan::Schedule& s, const std::string& name) {
  for (size_t i = 0; i < s.steps.size(); ++i)
    if (op_name(s.steps[i].op) == name) return i;
  return s.steps.size();
}

// Runs `g` (inputs x [rows, k] and r [rows, n], param w [k, n], optional param b [n]) twice on
// CUDA with the same data: the results must be bit-equal (the sums run in a fixed order).
void expect_bit_equal_reruns(const Graph& g, DType t, int64_t rows, int64_t k, int64_t n) {
  auto cg = Session(Device::Cuda).compile(g);
  cg.set_param("w", rlx::testing::random_tensor(t, {k, n}, 3));
  const auto names = cg.param_names();
  if (std::find(names.begin(), names.end(), "b") != names.end()) cg.set_param("b", rlx::testing::random_tensor(t, {n}, 6));
  const NamedTensors ins = {{"x", rlx::testing::random_tensor(t, {rows, k}, 4)},
                            {"r", rlx::testing::random_tensor(t, {rows, n}, 5)}};
  const Tensor first = cg.run(ins)[0];
  const Tensor again = cg.run(ins)[0];
  ASSERT_EQ(0, std::memcmp(first.raw(), again.raw(), first.nbytes()));
}

struct NormGemv {
  Graph g;
  Value norm, mm;
};
NormGemv norm_gemv(int64_t rows, DType t = DType::F32, bool beta = false) {
  NormGemv n;
  const Value x = n.g.input("x", Shape::of({rows, 64}, t));
  std::optional<Value> b;
  if (beta) b = n.g.param("beta", Shape::of({64}, t));
  n.norm = n.g.rms_norm(x, n.g.param("gamma", Shape::of({64}, t)), b, 1e-5);
  n.mm = n.g.matmul(n.norm, n.g.param("w", Shape::of({64, 32}, t)));
  return n;
}

TEST(CudaGemvPrologue, AbsorbsRmsNormAndSwiGLU) {
  {
    NormGemv n = norm_gemv(3);
    n.g.add_output(n.mm);
    const plan::Schedule s = plan::build_schedule(n.g);
    const auto p = cuda::plan_gemv_prologues(s, Precision::Fp32);
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(p.begin()->first, step_of(s, "matmul"));
    EXPECT_EQ(p.begin()->second, step_of(s, "rms_norm"));
  }
  {
    Graph g;
    const Value u = g.input("u", Shape::of({2, 1, 128}, DType::BF16));
    const Value h = g.apply(ops::FusedSwiGLU{true}, {u});
    g.add_output(g.matmul(h, g.param("w", Shape::of({64, 16}, DType::BF16))));
    const plan::Schedule s = plan::build_schedule(g);
    const auto p = cuda::plan_gemv_prologues(s, Precision::Fp32);
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(p.begin()->second, step_of(s, "fused_swiglu"));
  }
}

TEST(CudaGemvPrologue, NearMissesKeepTheProducer) {
  auto planned = [](const Graph& g, Precision prec = Precision::Fp32) {
    return cuda::plan_gemv_prologues(plan::build_schedule(g), prec).size();
  };
  {  // the norm is also a graph output
    NormGemv n = norm_gemv(2);
    n.g.add_output(n.mm);
    n.g.add_output(n.norm);
    EXPECT_EQ(planned(n.g), 0u);
  }
  {  // the norm feeds two products
    NormGemv n = norm_gemv(2);
    n.g.add_output(n.mm);
    n.g.add_output(n.g.matmul(n.norm, n.g.param("w2", Shape::of({64, 8}))));
    EXPECT_EQ(planned(n.g), 0u);
  }
  {  // five rows: not a GEMV
    NormGemv n = norm_gemv(5);
    n.g.add_output(n.mm);
    EXPECT_EQ(planned(n.g), 0u);
  }
  {  // f32 data under the bf16 policy runs on cuBLASLt
    NormGemv n = norm_gemv(1);
    n.g.add_output(n.mm);
    EXPECT_EQ(planned(n.g, Precision::Bf16), 0u);
  }
  {  // a norm over a shorter row than the product's K (reshaped in between) is not A's prologue
    Graph g;
    const Value x = g.input("x", Shape::of({1, 2, 32}));
    const Value nrm = g.rms_norm(x, g.param("gamma", Shape::of({32})));
    g.add_output(g.matmul(g.reshape(nrm, {1, 64}), g.param("w", Shape::of({64, 8}))));
    EXPECT_EQ(planned(g), 0u);
  }
}

TEST(CudaGemvPrologue, FusedKernelsMatchTheCpu) {
  RLX_REQUIRE_CUDA();
  for (const char* packed : {"1", "0"})  // the packed-weight kernel, then the split-K one
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int64_t rows : {1, 2, 3, 4}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " rows=" + std::to_string(rows) + " packed " + packed);
      ScopedEnv pk("RLX_GEMV_PACKED", packed);
      for (bool beta : {false, true}) {
        NormGemv n = norm_gemv(rows, t, beta);
        n.g.add_output(n.g.relu(n.mm));
        const auto rep = rlx::testing::cuda_parity(n.g);
        EXPECT_TRUE(rep.pass) << rep.text;
      }
      for (bool gate_first : {false, true}) {
        Graph g;
        const Value u = g.input("u", Shape::of({rows, 2 * 2000}, t));
        const Value x = g.input("x", Shape::of({rows, 48}, t));
        const Value h = g.apply(ops::FusedSwiGLU{gate_first}, {u});
        g.add_output(g.add(x, g.matmul(h, g.param("w", Shape::of({2000, 48}, t)))));  // + residual
        const auto rep = rlx::testing::cuda_parity(g);
        EXPECT_TRUE(rep.pass) << rep.text;
      }
    }
}

// Rows too long to stage in shared memory: the split-K kernel's RmsNorm prologue reads them twice.
TEST(CudaGemvPrologue, LongRowsAreReadTwice) {
  RLX_REQUIRE_CUDA();
  ScopedEnv pk("RLX_GEMV_PACKED", "0");
  for (DType t : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    Graph g;
    const Value x = g.input("x", Shape::of({4, 8192}, t));
    const Value h = g.rms_norm(x, g.param("gamma", Shape::of({8192}, t)), std::nullopt, 1e-5);
    g.add_output(g.matmul(h, g.param("w", Shape::of({8192, 64}, t))));
    const auto s = plan::build_schedule(g);
    ASSERT_EQ(cuda::plan_gemv_prologues(s, Precision::Fp32).size(), 1u);
    rlx::testing::expect_cuda_parity(g);
  }
}

// Each row layout cuts the columns into its own tiles and the K range into its own splits (many
// splits: the last block's reduction; one split: none), so each must match the CPU and repeat
// bit for bit (graph replays).
TEST(CudaGemvLayout, EveryLanesPerRowMatchesTheCpu) {
  RLX_REQUIRE_CUDA();
  for (const char* lanes : {"1", "2", "4", "16", "32"})
    for (const char* l2pf : {"0", "1"}) {
      ScopedEnv lpr("RLX_GEMV_LPR", lanes), pf("RLX_GEMV_L2PF", l2pf), pk("RLX_GEMV_PACKED", "0");
      for (DType t : {DType::F32, DType::BF16})
        for (int64_t rows : {1, 3})
          for (const auto& [k, n] : std::vector<std::pair<int64_t, int64_t>>{{4096, 2056}, {96, 8}, {1000, 48}}) {
            SCOPED_TRACE(std::string("lanes ") + lanes + " l2pf " + l2pf + " " + dtype_name(t) + " rows=" +
                         std::to_string(rows) + " k=" + std::to_string(k) + " n=" + std::to_string(n));
            Graph g;
            const Value x = g.input("x", Shape::of({rows, k}, t));
            g.add_output(g.add(g.input("r", Shape::of({rows, n}, t)), g.matmul(x, g.param("w", Shape::of({k, n}, t)))));
            rlx::testing::expect_cuda_parity(g);
            expect_bit_equal_reruns(g, t, rows, k, n);
          }
    }
}

// A weight computed by the previous kernel (not a param) is loaded only after waiting for it.
TEST(CudaGemvLayout, ComputedWeightIsReadAfterItsProducer) {
  RLX_REQUIRE_CUDA();
  for (DType t : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    Graph g;
    const Value w = g.relu(g.input("w", Shape::of({4096, 520}, t)));
    g.add_output(g.matmul(g.input("x", Shape::of({1, 4096}, t)), w));
    rlx::testing::expect_cuda_parity(g);
  }
}

// Compiling a one-row product against a param with knob `name` set to `value` (the rest of the
// environment as it is) must fail with an rlx::Error that names the knob.
void expect_knob_rejected(const char* name, const char* value, DType t = DType::F32) {
  Graph g;
  g.add_output(g.matmul(g.input("x", Shape::of({1, 64}, t)), g.param("w", Shape::of({64, 32}, t))));
  ScopedEnv e(name, value);
  try {
    Session(Device::Cuda).compile(g);
    ADD_FAILURE() << name << "=" << value << " was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find(name), std::string::npos) << err.what();
  }
}

TEST(CudaGemvLayout, BadKnobIsAnErrorNamingIt) {
  RLX_REQUIRE_CUDA();
  ScopedEnv pk("RLX_GEMV_PACKED", "0");
  for (const char* v : {"12", "0", "x"}) expect_knob_rejected("RLX_GEMV_LPR", v);
}

// The packed-weight kernel: every warps-per-row split (small n shares rows, large n runs several
// rounds), K not a multiple of 16 bytes (padded), epilogues; bit-equal on repeated runs.
TEST(CudaGemvPacked, MatchesTheCpu) {
  RLX_REQUIRE_CUDA();
  for (const char* warps : {"32", "8", "28"}) {
    ScopedEnv wp("RLX_GEMV_PACKED_WARPS", warps);
    for (DType t : {DType::F32, DType::F16, DType::BF16})
      for (int64_t rows : {1, 3})
        for (const auto& [k, n] : std::vector<std::pair<int64_t, int64_t>>{
                 {4096, 2056}, {96, 8}, {1001, 48}, {256, 20000}, {2048, 700}, {3, 5}}) {
          SCOPED_TRACE(std::string("warps ") + warps + " " + dtype_name(t) + " rows=" + std::to_string(rows) +
                       " k=" + std::to_string(k) + " n=" + std::to_string(n));
          Graph g;
          const Value x = g.input("x", Shape::of({rows, k}, t));
          const Value mm = g.matmul(x, g.param("w", Shape::of({k, n}, t)));
          g.add_output(g.add(g.input("r", Shape::of({rows, n}, t)), g.relu(g.add(mm, g.param("b", Shape::of({n}, t))))));
          // Weights scaled as in a model (uniform with variance 1 / k): with [-1, 1] weights the
          // bias add after a long bf16 product cancels most of its digits.
          const double ws = std::sqrt(3.0 / static_cast<double>(k));
          rlx::testing::ParityOptions opts;
          opts.fixed_params = {{"w", rlx::testing::random_tensor(t, {k, n}, 3, -ws, ws)}};
          const uint64_t packed = cuda::run_stats().packed_weights;
          rlx::testing::expect_cuda_parity(g, Precision::Fp32, opts);
          EXPECT_GT(cuda::run_stats().packed_weights, packed);  // at any n, also not in 16-byte vectors
          expect_bit_equal_reruns(g, t, rows, k, n);
        }
  }
}

// A new param value is packed again before the next run, also when the weight is larger than
// the staging buffer (its rows go up in pieces) and its stored layout is not kept.
TEST(CudaGemvPacked, NewParamValuesArePackedAgain) {
  RLX_REQUIRE_CUDA();
  for (const auto& [k, n] : std::vector<std::pair<int64_t, int64_t>>{{64, 40}, {4500, 1000}}) {
    SCOPED_TRACE("k=" + std::to_string(k) + " n=" + std::to_string(n));
    Graph g;
    g.add_output(g.matmul(g.input("x", Shape::of({1, k})), g.param("w", Shape::of({k, n}))));
    const uint64_t dropped = cuda::run_stats().dropped_leaves;
    auto on_gpu = Session(Device::Cuda).compile(g);
    auto cpu = Session(Device::Cpu).compile(g);
    const NamedTensors ins = {{"x", rlx::testing::random_tensor(DType::F32, {1, k}, 1)}};
    for (uint64_t seed : {11u, 12u}) {
      const Tensor w = rlx::testing::random_tensor(DType::F32, {k, n}, seed);
      on_gpu.set_param("w", w);
      cpu.set_param("w", w);
      const Tensor want = cpu.run(ins)[0], got = on_gpu.run(ins)[0];
      const float* a = want.data<float>();
      const float* b = got.data<float>();
      double worst = 0;
      for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]) / (1.0 + std::abs(a[i])));
      EXPECT_LT(worst, 1e-4) << "seed " << seed;
    }
    EXPECT_EQ(cuda::run_stats().dropped_leaves, dropped + 1);  // only the packed copy is kept
  }
}

// A weight that another op also reads as stored keeps its stored copy; constants are packed too.
TEST(CudaGemvPacked, SharedAndConstantWeights) {
  RLX_REQUIRE_CUDA();
  for (DType t : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    {
      Graph g;
      const Value w = g.param("w", Shape::of({128, 64}, t));
      g.add_output(g.matmul(g.input("x", Shape::of({2, 128}, t)), w));
      g.add_output(g.relu(w));
      const uint64_t dropped = cuda::run_stats().dropped_leaves;
      rlx::testing::expect_cuda_parity(g);
      EXPECT_EQ(cuda::run_stats().dropped_leaves, dropped);
    }
    {
      Graph g;
      const Value w = g.constant(rlx::testing::random_tensor(t, {200, 24}, 9));
      g.add_output(g.matmul(g.input("x", Shape::of({1, 200}, t)), w));
      rlx::testing::expect_cuda_parity(g);
    }
  }
}

// The packed kernel reads A (or its prologue's input) in 16-byte words when K allows, element by
// element otherwise or with RLX_GEMV_VEC_A=0: every prologue (none, RmsNorm with a leaf or a
// computed gain, SwiGLU) both ways.
TEST(CudaGemvPacked, AInWordsOrByElementMatchesTheCpu) {
  {  // a norm whose gain is computed is still the GEMV's prologue (its gain staged after the wait)
    Graph g;
    const Value gain = g.add(g.param("gamma", Shape::of({64})), g.param("delta", Shape::of({64})));
    g.add_output(g.matmul(g.rms_norm(g.input("x", Shape::of({1, 64})), gain, std::nullopt, 1e-5),
                          g.param("w", Shape::of({64, 32}))));
    g.add_output(gain);  // kept, so no later step reuses its bytes
    EXPECT_EQ(cuda::plan_gemv_prologues(plan::build_schedule(g), Precision::Fp32).size(), 1u);
  }
  RLX_REQUIRE_CUDA();
  for (const char* vec : {"1", "0"})
    for (DType t : {DType::F32, DType::F16, DType::BF16})
      for (int64_t rows : {int64_t{1}, int64_t{3}})
        for (int64_t k : {int64_t{2048}, int64_t{1001}}) {
          SCOPED_TRACE(std::string(dtype_name(t)) + " rows=" + std::to_string(rows) + " k=" + std::to_string(k) +
                       " RLX_GEMV_VEC_A=" + vec);
          ScopedEnv env("RLX_GEMV_VEC_A", vec);
          const int64_t n = 48;
          const bool words = std::string(vec) == "1" && k % static_cast<int64_t>(16 / dtype_size(t)) == 0;
          std::vector<Graph> graphs(4);
          {  // plain, with a residual
            Graph& g = graphs[0];
            g.add_output(g.add(g.input("r", Shape::of({rows, n}, t)),
                               g.matmul(g.input("x", Shape::of({rows, k}, t)), g.param("w", Shape::of({k, n}, t)))));
          }
          {  // RmsNorm prologue with a bias
            Graph& g = graphs[1];
            const Value nrm = g.rms_norm(g.input("x", Shape::of({rows, k}, t)), g.param("gamma", Shape::of({k}, t)),
                                         g.param("beta", Shape::of({k}, t)), 1e-5);
            g.add_output(g.matmul(nrm, g.param("w", Shape::of({k, n}, t))));
          }
          {  // RmsNorm prologue whose gain is computed (staged after the wait)
            Graph& g = graphs[3];
            const Value gain = g.add(g.param("gamma", Shape::of({k}, t)), g.param("delta", Shape::of({k}, t)));
            const Value nrm = g.rms_norm(g.input("x", Shape::of({rows, k}, t)), gain, std::nullopt, 1e-5);
            g.add_output(g.matmul(nrm, g.param("w", Shape::of({k, n}, t))));
            g.add_output(gain);
          }
          {  // SwiGLU prologue
            Graph& g = graphs[2];
            const Value h = g.apply(ops::FusedSwiGLU{false}, {g.input("u", Shape::of({rows, 2 * k}, t))});
            g.add_output(g.matmul(h, g.param("w", Shape::of({k, n}, t))));
          }
          for (const Graph& g : graphs) {
            const uint64_t before = cuda::gemv_vec_a_launches();
            rlx::testing::ParityOptions opts;  // weights scaled so that the sums stay near 1 for f16
            const float ws = 1.f / std::sqrt(static_cast<float>(k));
            opts.fixed_params = {{"w", rlx::testing::random_tensor(t, {k, n}, 3, -ws, ws)}};
            rlx::testing::expect_cuda_parity(g, Precision::Fp32, opts);
            EXPECT_EQ(cuda::gemv_vec_a_launches() > before, words);
          }
        }
}

// N not a whole number of 16-byte vectors (an LM head over a vocabulary of 50257): a param
// weight is packed, RmsNorm prologue included; where the packed kernel cannot take it (packing
// off, the weight an input) the norm runs as its own step before the general path.
TEST(CudaGemvPacked, OddColumnCountsArePackedOrFallBack) {
  RLX_REQUIRE_CUDA();
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int64_t rows : {int64_t{1}, int64_t{3}})
      for (const char* packed : {"1", "0"})
        for (bool w_input : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(t)) + " rows=" + std::to_string(rows) + " RLX_GEMV_PACKED=" + packed +
                       (w_input ? " weight input" : " weight param"));
          ScopedEnv pk("RLX_GEMV_PACKED", packed);
          const int64_t k = 256, n = 1001;
          Graph g;
          const Value nrm = g.rms_norm(g.input("x", Shape::of({rows, k}, t)), g.param("gamma", Shape::of({k}, t)),
                                       std::nullopt, 1e-5);
          const Value w = w_input ? g.input("w", Shape::of({k, n}, t)) : g.param("w", Shape::of({k, n}, t));
          g.add_output(g.add(g.input("r", Shape::of({rows, n}, t)), g.matmul(nrm, w)));
          const float ws = 1.f / std::sqrt(static_cast<float>(k));
          rlx::testing::ParityOptions opts;
          const Tensor wv = rlx::testing::random_tensor(t, {k, n}, 3, -ws, ws);
          if (w_input) opts.fixed_inputs.emplace_back("w", wv);
          else opts.fixed_params = {{"w", wv}};
          const uint64_t before = cuda::run_stats().packed_weights;
          rlx::testing::expect_cuda_parity(g, Precision::Fp32, opts);
          EXPECT_EQ(cuda::run_stats().packed_weights > before, std::string(packed) == "1" && !w_input);
        }
}

TEST(CudaGemvPacked, BadKnobIsAnErrorNamingIt) {
  RLX_REQUIRE_CUDA();
  expect_knob_rejected("RLX_GEMV_PACKED_WARPS", "0");
  expect_knob_rejected("RLX_GEMV_PACKED_WARPS", "64");
  expect_knob_rejected("RLX_GEMV_PACKED", "2");
  expect_knob_rejected("RLX_GEMV_VEC_A", "2");
  expect_knob_rejected("RLX_GEMV_EVICT_FIRST", "2");
  expect_knob_rejected("RLX_GEMV_PREFETCH_MB", "-2");
  expect_knob_rejected("RLX_GEMV_PREFETCH_CHAINED_MB", "x");
  expect_knob_rejected("RLX_GEMV_CARVEOUT", "101");
  expect_knob_rejected("RLX_GEMV_CARVEOUT", "-2");
  expect_knob_rejected("RLX_GEMV_TC", "2", DType::BF16);
  expect_knob_rejected("RLX_GEMV_TC_SPLIT", "0", DType::BF16);
  expect_knob_rejected("RLX_GEMV_TC_SPLIT", "5", DType::F16);  // not a divisor of 32 warps
  {
    ScopedEnv w("RLX_GEMV_PACKED_WARPS", "32");
    expect_knob_rejected("RLX_GEMV_TC_SPLIT", "2", DType::BF16);  // 16 groups
  }
}

// The tensor-core kernel (f16 / bf16 over 16 x 16 tiles): one warp per tile row, a few warps per
// tile row in several groups, or the whole block per tile row (the default), over several rounds;
// K and N not multiples of 16 (padded tiles), 1 to 4 rows of A, a full epilogue; bit-equal on
// repeated runs; RLX_GEMV_TC=0 runs the CUDA-core kernel instead.
TEST(CudaGemvPacked, TensorCoreTilesMatchTheCpu) {
  RLX_REQUIRE_CUDA();
  for (const auto& [warps, split] : std::vector<std::pair<const char*, const char*>>{
           {"32", "32"}, {"32", "1"}, {"28", "7"}, {"24", "8"}})
    for (const char* tc : {"1", "0"}) {
      if (std::string(tc) == "0" && std::string(split) != "32") continue;
      ScopedEnv wp("RLX_GEMV_PACKED_WARPS", warps), sp("RLX_GEMV_TC_SPLIT", split), on("RLX_GEMV_TC", tc);
      for (DType t : {DType::F16, DType::BF16})
        for (int64_t rows : std::string(split) == "32" ? std::vector<int64_t>{1, 2, 3, 4} : std::vector<int64_t>{1, 4})
          for (const auto& [k, n] : std::vector<std::pair<int64_t, int64_t>>{
                   {2048, 1000}, {5632, 48}, {1001, 48}, {24, 17}, {3, 5}, {256, 9000}}) {
            SCOPED_TRACE(std::string("warps ") + warps + " split " + split + " RLX_GEMV_TC=" + tc + " " + dtype_name(t) +
                         " rows=" + std::to_string(rows) + " k=" + std::to_string(k) + " n=" + std::to_string(n));
            Graph g;
            const Value x = g.input("x", Shape::of({rows, k}, t));
            const Value mm = g.matmul(x, g.param("w", Shape::of({k, n}, t)));
            g.add_output(
                g.add(g.input("r", Shape::of({rows, n}, t)), g.relu(g.add(mm, g.param("b", Shape::of({n}, t))))));
            const double ws = std::sqrt(3.0 / static_cast<double>(k));
            rlx::testing::ParityOptions opts;
            opts.fixed_params = {{"w", rlx::testing::random_tensor(t, {k, n}, 3, -ws, ws)}};
            const uint64_t before = cuda::gemv_tensor_core_launches();
            rlx::testing::expect_cuda_parity(g, Precision::Fp32, opts);
            const bool on_tc = std::string(tc) == "1" && cuda::device().cc_major >= 8;
            EXPECT_EQ(cuda::gemv_tensor_core_launches() > before, on_tc);
            expect_bit_equal_reruns(g, t, rows, k, n);
          }
    }
}

// Weights stream through L2 with the evict-first policy only when the graph's weights do not fit
// in it (RLX_GEMV_EVICT_FIRST=0 / 1 forces it off / on): a model that fits keeps them there.
TEST(CudaGemvPacked, EvictFirstOnlyWhenTheWeightsExceedTheL2) {
  EXPECT_FALSE(cuda::gemv_evict_first(-1, 40u << 20, 50u << 20));
  EXPECT_TRUE(cuda::gemv_evict_first(-1, 60u << 20, 50u << 20));
  EXPECT_TRUE(cuda::gemv_evict_first(1, 1u << 20, 50u << 20));
  EXPECT_FALSE(cuda::gemv_evict_first(0, 1u << 30, 50u << 20));
  RLX_REQUIRE_CUDA();
  const size_t l2 = cuda::device().l2_bytes;
  ASSERT_GT(l2, 0u);
  for (const char* knob : {static_cast<const char*>(nullptr), "1", "0"})
    for (bool big : {false, true}) {
      // A product whose f32 weight is just past the L2 (big) or a small one.
      const int64_t k = 1024, n = big ? static_cast<int64_t>(l2 / (4 * 1024) + 64) : 256;
      SCOPED_TRACE(std::string("RLX_GEMV_EVICT_FIRST=") + (knob ? knob : "unset") + " n=" + std::to_string(n));
      std::optional<ScopedEnv> env;
      if (knob) env.emplace("RLX_GEMV_EVICT_FIRST", knob);
      Graph g;
      g.add_output(g.matmul(g.input("x", Shape::of({1, k})), g.param("w", Shape::of({k, n}))));
      const uint64_t before = cuda::gemv_evict_first_launches();
      rlx::testing::expect_cuda_parity(g);
      const bool want = knob ? std::string(knob) == "1" : big;
      EXPECT_EQ(cuda::gemv_evict_first_launches() > before, want);
    }
}

// Two one-block elementwise kernels before a packed GEMV, as the RoPE tables come before the first
// QKV product of a decode step: a = x + x (two consumers, its own kernel), then one region for
// cos(a) + sin(a). Launched early (the default), they let the GEMV launch while they run and load
// its weight before its wait; what it reads after the wait must still be this run's result: new
// inputs every run against the CPU, and the same bits as with RLX_CUDA_TINY_EARLY=0.
TEST(CudaGemvPacked, TinyProducersLetTheProductLaunchFirst) {
  RLX_REQUIRE_CUDA();
  const int64_t k = 512, n = 2048;
  Graph g;
  const Value x = g.input("x", Shape::of({1, k}));
  const Value a = g.add(x, x);
  const Value h = g.add(g.act(ActKind::Cos, a), g.act(ActKind::Sin, a));
  g.add_output(g.matmul(h, g.param("w", Shape::of({k, n}))));
  const Tensor w = rlx::testing::random_tensor(DType::F32, {k, n}, 3);
  auto cpu = Session(Device::Cpu).compile(g);
  cpu.set_param("w", w);
  std::vector<Tensor> early_results;
  for (const char* early : {"1", "0"}) {
    SCOPED_TRACE(std::string("RLX_CUDA_TINY_EARLY=") + early);
    ScopedEnv e("RLX_CUDA_TINY_EARLY", early);
    const uint64_t before = cuda::elementwise_early_launches();
    auto cg = Session(Device::Cuda).compile(g);
    cg.set_param("w", w);
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      const NamedTensors ins = {{"x", rlx::testing::random_tensor(DType::F32, {1, k}, seed)}};
      const Tensor got = cg.run(ins)[0];
      EXPECT_TRUE(rlx::testing::all_close(got, {1, n}, rlx::testing::to_doubles(cpu.run(ins)[0]),
                                          rlx::testing::parity_tolerance(DType::F32)))
          << "seed " << seed;
      if (std::string(early) == "1") {
        early_results.push_back(got);
      } else {
        const Tensor& want = early_results.at(static_cast<size_t>(seed - 1));
        EXPECT_EQ(std::memcmp(got.raw(), want.raw(), static_cast<size_t>(want.nbytes())), 0) << "seed " << seed;
      }
    }
    EXPECT_EQ(cuda::elementwise_early_launches() - before, std::string(early) == "1" ? 2u : 0u);
  }
}

// The weight stream: a packed GEMV prefetches the next packed GEMV's weight into L2 (a large
// part after other work, a little after a GEMV), only where the weights are read evict-first. A
// prefetch moves no data the kernels see: the results are bit-identical to those without it,
// and match the CPU's.
TEST(CudaGemvPacked, GemvsBringTheNextWeightIntoL2) {
  EXPECT_EQ(cuda::gemv_prefetch_budget(true, -1, 50u << 20), 35u << 20);
  EXPECT_EQ(cuda::gemv_prefetch_budget(false, -1, 48u << 20), 6u << 20);
  EXPECT_EQ(cuda::gemv_prefetch_budget(true, 8, 50u << 20), 8u << 20);
  EXPECT_EQ(cuda::gemv_prefetch_budget(false, 0, 50u << 20), 0u);
  RLX_REQUIRE_CUDA();
  if (cuda::device().cc_major < 9) GTEST_SKIP() << "the bulk L2 prefetch needs sm_90 or newer";
  const int64_t k = 1024;  // 4 MB f32 weights: a 1 MB budget takes part of one
  // w1 comes first and w2 after a softmax: each prefetches much of the next weight. w3 follows a
  // GEMV and prefetches a little of w4; w4 follows a GEMV, and nothing follows it.
  Graph g;
  Value h = g.matmul(g.input("x", Shape::of({1, k})), g.param("w1", Shape::of({k, k})));
  h = g.matmul(g.softmax(h), g.param("w2", Shape::of({k, k})));
  h = g.matmul(h, g.param("w3", Shape::of({k, k})));
  g.add_output(g.matmul(h, g.param("w4", Shape::of({k, k}))));
  rlx::testing::ParityOptions opts;
  const NamedTensors ins = rlx::testing::random_inputs(g, opts), ps = rlx::testing::random_params(g, opts);
  auto run_on = [&](Device d) {
    rlx::testing::RunConfig c;
    c.device = d;
    return rlx::testing::run_config(g, c, ins, ps).at(0);
  };
  struct Case {
    const char *evict_first, *mb, *chained_mb;
    uint64_t prefetching;  // launches told the next weight
  };
  std::optional<Tensor> plain;
  for (const Case& c : {Case{"0", nullptr, nullptr, 0}, Case{"1", nullptr, nullptr, 3}, Case{"1", "1", "1", 3},
                        Case{"1", "0", nullptr, 1}, Case{"1", nullptr, "0", 2}, Case{"1", "0", "0", 0}}) {
    SCOPED_TRACE(std::string("RLX_GEMV_EVICT_FIRST=") + c.evict_first + " RLX_GEMV_PREFETCH_MB=" +
                 (c.mb ? c.mb : "unset") + " RLX_GEMV_PREFETCH_CHAINED_MB=" + (c.chained_mb ? c.chained_mb : "unset"));
    ScopedEnv evf("RLX_GEMV_EVICT_FIRST", c.evict_first);
    std::optional<ScopedEnv> mb, chained;
    if (c.mb) mb.emplace("RLX_GEMV_PREFETCH_MB", c.mb);
    if (c.chained_mb) chained.emplace("RLX_GEMV_PREFETCH_CHAINED_MB", c.chained_mb);
    const uint64_t before = cuda::gemv_weight_prefetches();
    const Tensor got = run_on(Device::Cuda);
    EXPECT_EQ(cuda::gemv_weight_prefetches() - before, c.prefetching);
    if (!plain) plain = got;  // the first case: neither
    ASSERT_EQ(got.nbytes(), plain->nbytes());
    EXPECT_EQ(std::memcmp(got.raw(), plain->raw(), static_cast<size_t>(plain->nbytes())), 0);
  }
  // Against the CPU, normwise: the largest difference over the largest result (the chain leaves
  // results that cancel to near zero, where a per-element relative bound says nothing).
  const Tensor want = run_on(Device::Cpu);
  const float* a = want.data<float>();
  const float* b = plain->data<float>();
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < k; ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - b[i]));
    scale = std::max(scale, std::abs(double(a[i])));
  }
  EXPECT_GT(scale, 0.0);
  EXPECT_LT(diff, 1e-5 * scale);
}

}  // namespace
