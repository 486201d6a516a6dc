// CPU row-kernel benchmark: softmax / log-softmax, LayerNorm / RmsNorm and the exp / tanh
// activations on f32, rlx against two peers measured in the same run:
//   scalar  the same math one element at a time with libm (std::exp / std::tanh / std::erf) and
//           the statistics in double: what these kernels did before they ran on vector lanes;
//   memcpy  copying the input and the output bytes once (the bandwidth floor of a row op).
// The "f16" rows store x and y as f16 (the graph casts around the op; only the op's step is
// timed) against the same scalar loop on f16 storage (software conversions one value at a time).
// Prints one table row per case: rlx p50 (the whole CompiledGraph::run, with the output copy
// into a fresh tensor), rlx step (the kernel alone: mean step time from the CPU profile), scalar
// p50, memcpy p50, and scalar / rlx step (the kernel speed-up).
//   bench_cpu_rows [--reps N] [--threads T]   (T: CompileOptions::num_threads, default 1)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "codegen/formula.h"
#include "rlx/rlx.h"
#include "runtime/device_profile.h"

namespace {

// Milliseconds of every op kind (or only `kind`) in a CPU profile table
// ("  <kind> <ms> ms <share>% <count> steps").
double profile_ms(const std::string& table, const std::string& kind = "") {
  double total = 0;
  size_t pos = 0;
  while (pos < table.size()) {
    const size_t end = table.find('\n', pos);
    const std::string line = table.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    const size_t ms = line.find(" ms ");
    const bool wanted = kind.empty() || line.rfind("  " + kind + " ", 0) == 0;
    if (ms != std::string::npos && wanted) {
      const size_t start = line.find_last_of(' ', ms - 1);
      total += std::atof(line.substr(start + 1, ms - start - 1).c_str());
    }
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return total;
}

std::vector<float> rand_vec(int64_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

struct Case {
  std::string op;
  int64_t rows, cols;
  bool half = false;  // f16 storage: the graph casts in and out, the activation step is timed
};

// The scalar peer of each case, over rows x cols floats.
void scalar_peer(const Case& c, const float* x, const float* gamma, const float* beta, float* y) {
  const int64_t R = c.rows, C = c.cols;
  // f16 rows (softmax, norms): converted one value at a time around the f32 peer.
  if (c.half && (c.op.find("softmax") != std::string::npos || c.op.find("norm") != std::string::npos)) {
    Case f = c;
    f.half = false;
    const auto* hx = reinterpret_cast<const rlx::f16*>(x);
    auto* hy = reinterpret_cast<rlx::f16*>(y);
    std::vector<float> xr(static_cast<size_t>(C)), yr(static_cast<size_t>(C));
    f.rows = 1;
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t i = 0; i < C; ++i) xr[i] = rlx::load(hx[r * C + i]);
      scalar_peer(f, xr.data(), gamma, beta, yr.data());
      for (int64_t i = 0; i < C; ++i) hy[r * C + i] = rlx::store<rlx::f16>(yr[i]);
    }
    return;
  }
  if (c.op == "softmax_ax0") {  // over the rows of each column (a channel softmax)
    std::vector<float> mx(static_cast<size_t>(C), -INFINITY);
    std::vector<double> sum(static_cast<size_t>(C), 0.0);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t i = 0; i < C; ++i) mx[i] = std::max(mx[i], x[r * C + i]);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t i = 0; i < C; ++i) sum[i] += std::exp(x[r * C + i] - mx[i]);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t i = 0; i < C; ++i) y[r * C + i] = static_cast<float>(std::exp(x[r * C + i] - mx[i]) / sum[i]);
    return;
  }
  if (c.op == "softmax" || c.op == "log_softmax") {
    const bool log = c.op == "log_softmax";
    for (int64_t r = 0; r < R; ++r) {
      const float* xr = x + r * C;
      float* yr = y + r * C;
      float m = -INFINITY;
      for (int64_t i = 0; i < C; ++i) m = std::max(m, xr[i]);
      double sum = 0;
      for (int64_t i = 0; i < C; ++i) {
        const float e = std::exp(xr[i] - m);
        if (!log) yr[i] = e;
        sum += e;
      }
      if (log) {
        const double ls = std::log(sum);
        for (int64_t i = 0; i < C; ++i) yr[i] = static_cast<float>(static_cast<double>(xr[i] - m) - ls);
      } else {
        const double inv = 1.0 / sum;
        for (int64_t i = 0; i < C; ++i) yr[i] = static_cast<float>(yr[i] * inv);
      }
    }
  } else if (c.op == "layer_norm" || c.op == "rms_norm") {
    const bool rms = c.op == "rms_norm";
    for (int64_t r = 0; r < R; ++r) {
      const float* xr = x + r * C;
      double mean = 0, sq = 0;
      if (!rms) {
        for (int64_t i = 0; i < C; ++i) mean += xr[i];
        mean /= static_cast<double>(C);
      }
      for (int64_t i = 0; i < C; ++i) sq += (xr[i] - mean) * (xr[i] - mean);
      const double inv = 1.0 / std::sqrt(sq / static_cast<double>(C) + 1e-5);
      for (int64_t i = 0; i < C; ++i)
        y[r * C + i] = static_cast<float>((xr[i] - mean) * inv * gamma[i] + (rms ? 0.0 : beta[i]));
    }
  } else {
    const int64_t n = R * C;
    auto map = [&](auto f) {
      if (c.half) {  // f16 in, f32 math, f16 out (the kernels' storage rule)
        auto* h = reinterpret_cast<rlx::f16*>(y);
        const auto* hx = reinterpret_cast<const rlx::f16*>(x);
        for (int64_t i = 0; i < n; ++i) h[i] = rlx::store<rlx::f16>(f(rlx::load(hx[i])));
        return;
      }
      for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
    };
    using namespace rlx;
    if (c.op == "exp") map([](float v) { return codegen::ActFormula<ActKind::Exp>::eval(v); });
    else if (c.op == "tanh") map([](float v) { return codegen::ActFormula<ActKind::Tanh>::eval(v); });
    else if (c.op == "sigmoid") map([](float v) { return codegen::ActFormula<ActKind::Sigmoid>::eval(v); });
    else if (c.op == "silu") map([](float v) { return codegen::ActFormula<ActKind::Silu>::eval(v); });
    else if (c.op == "gelu_tanh") map([](float v) { return codegen::ActFormula<ActKind::GeluApprox>::eval(v); });
    else map([](float v) { return codegen::ActFormula<ActKind::Gelu>::eval(v); });
  }
}

rlx::Value build(rlx::Graph& g, const Case& c, rlx::Value x, const rlx::Tensor& gamma, const rlx::Tensor& beta) {
  using rlx::ActKind;
  if (c.half) {
    const rlx::Value xh = g.cast(x, rlx::DType::F16);
    if (c.op == "layer_norm") {
      const rlx::Value gh = g.cast(g.constant(gamma), rlx::DType::F16), bh = g.cast(g.constant(beta), rlx::DType::F16);
      return g.cast(g.layer_norm(xh, gh, bh, 1e-5), rlx::DType::F32);
    }
    Case f = c;
    f.half = false;
    return g.cast(build(g, f, xh, gamma, beta), rlx::DType::F32);
  }
  if (c.op == "softmax") return g.softmax(x, -1);
  if (c.op == "softmax_ax0") return g.softmax(x, 0);
  if (c.op == "log_softmax") {
    rlx::ops::LogSoftmax op;
    op.axis = -1;
    return g.apply(op, {x});
  }
  if (c.op == "layer_norm") return g.layer_norm(x, g.constant(gamma), g.constant(beta), 1e-5);
  if (c.op == "rms_norm") return g.rms_norm(x, g.constant(gamma), std::nullopt, 1e-5);
  const ActKind k = c.op == "exp"       ? ActKind::Exp
                    : c.op == "tanh"    ? ActKind::Tanh
                    : c.op == "sigmoid" ? ActKind::Sigmoid
                    : c.op == "silu"    ? ActKind::Silu
                    : c.op == "gelu_tanh" ? ActKind::GeluApprox
                                          : ActKind::Gelu;
  return g.act(k, x);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 30, threads = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--threads" && i + 1 < argc) threads = std::max(0, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: bench_cpu_rows [--reps N] [--threads T]\n");
      return 2;
    }
  }
  const std::vector<Case> cases = {
      {"softmax", 4096, 1024}, {"softmax", 12 * 128, 128}, {"softmax_ax0", 21, 160 * 160},
      {"log_softmax", 4096, 1024}, {"layer_norm", 4096, 768},
      {"rms_norm", 4096, 768}, {"exp", 4096, 768},          {"tanh", 4096, 768},         {"sigmoid", 4096, 768},
      {"silu", 4096, 768},     {"gelu_tanh", 4096, 768},    {"gelu_erf", 4096, 768},
      {"softmax", 4096, 1024, true}, {"layer_norm", 4096, 768, true}, {"silu", 4096, 768, true},
      {"gelu_erf", 4096, 768, true}};
  try {
    rlx::enable_device_profile(rlx::Device::Cpu);
    std::printf("f32, %d thread(s), p50 of %d runs (rlx step: mean kernel time)\n", threads, reps);
    std::printf("| op          | shape      | rlx run ms | rlx step ms | scalar ms | memcpy ms | scalar/step | step GB/s |\n");
    std::printf("|-------------|------------|------------|-------------|-----------|-----------|-------------|-----------|\n");
    for (const Case& c : cases) {
      const int64_t n = c.rows * c.cols;
      const std::vector<float> xv = rand_vec(n, 1, -8, 8), gv = rand_vec(c.cols, 2, 0.5f, 1.5f),
                               bv = rand_vec(c.cols, 3, -1, 1);
      const rlx::Tensor tx = rlx::Tensor::f32({c.rows, c.cols}, xv);
      const rlx::Tensor tg = rlx::Tensor::f32({c.cols}, gv), tb = rlx::Tensor::f32({c.cols}, bv);
      rlx::Graph g;
      g.add_output(build(g, c, g.input("x", rlx::Shape::of({c.rows, c.cols})), tg, tb));
      rlx::CompileOptions o;
      o.num_threads = threads;
      o.optimize = !c.half;  // keep the f16 activation its own step (not fused with the casts)
      rlx::CompiledGraph cg = rlx::Session().compile(g, o);
      const double r = p50_ms([&] { cg.run({{"x", tx}}); }, reps);
      rlx::take_device_profile(rlx::Device::Cpu);  // the timed runs' steps only
      for (int i = 0; i < reps; ++i) cg.run({{"x", tx}});
      const std::string kind = c.op == "gelu_erf" || c.op == "silu" ? "activation" : c.op;
      const double step = profile_ms(rlx::take_device_profile(rlx::Device::Cpu), c.half ? kind : "") / reps;
      std::vector<float> y(static_cast<size_t>(n));
      std::vector<rlx::f16> xh;
      if (c.half)
        for (float v : xv) xh.push_back(rlx::store<rlx::f16>(v));
      const float* px = c.half ? reinterpret_cast<const float*>(xh.data()) : xv.data();
      const double s = p50_ms([&] { scalar_peer(c, px, gv.data(), bv.data(), y.data()); }, reps);
      const size_t bytes = static_cast<size_t>(n) * (c.half ? 2 : 4);
      std::vector<char> src(bytes * 2, 1), dst(bytes * 2);
      const double m = p50_ms([&] { std::memcpy(dst.data(), src.data(), bytes * 2); }, reps);
      std::printf("| %-11s | %-10s | %10.3f | %11.3f | %9.3f | %9.3f | %10.2fx | %9.2f |\n",
                  (c.op + (c.half ? " f16" : "")).c_str(),
                  (std::to_string(c.rows) + "x" + std::to_string(c.cols)).c_str(), r, step, s, m, s / step,
                  2.0 * static_cast<double>(bytes) / 1e9 / (step / 1e3));
    }
  } catch (const rlx::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
