// CPU microbenchmarks: rlx against a peer measured in the same run.
//   matmul   vs a direct OpenBLAS sgemm call on the same buffers (the floor rlx builds on)
//   softmax / layer_norm / add  vs a device-local memcpy of the same bytes (bandwidth bound)
// Prints one table row per case: shape, rlx p50, peer p50, ratio (rlx / peer; lower is better).
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "rlx/rlx.h"

namespace {

rlx::Tensor rand_f32(std::vector<int64_t> shape, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(static_cast<size_t>(rlx::product(shape)));
  for (auto& x : v) x = d(rng);
  return rlx::Tensor::f32(std::move(shape), v);
}

void row(const char* op, const std::string& shape, double rlx_ms, double peer_ms, const char* peer, const std::string& extra) {
  std::printf("| %-11s | %-22s | %9.3f | %9.3f | %-14s | %5.2fx | %s\n", op, shape.c_str(), rlx_ms, peer_ms, peer,
              rlx_ms / peer_ms, extra.c_str());
}

void bench_matmul(int64_t m, int64_t k, int64_t n, int reps) {
  rlx::Graph g;
  auto a = g.input("a", rlx::Shape::of({m, k}));
  auto b = g.input("b", rlx::Shape::of({k, n}));
  g.add_output(g.matmul(a, b));
  auto cg = rlx::Session().compile(g);
  auto ta = rand_f32({m, k}, 1), tb = rand_f32({k, n}, 2);
  const double r = p50_ms([&] { cg.run({{"a", ta}, {"b", tb}}); }, reps);
  std::vector<float> c(static_cast<size_t>(m * n));
  const double p = p50_ms([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.0f, ta.data<float>(), static_cast<int>(k), tb.data<float>(),
                static_cast<int>(n), 0.0f, c.data(), static_cast<int>(n));
  }, reps);
  const double gflop = 2.0 * m * n * k / 1e9;
  char extra[64];
  std::snprintf(extra, sizeof extra, "rlx %.1f GFLOP/s", gflop / (r / 1e3));
  row("matmul", std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n), r, p, "openblas sgemm",
      extra);
}

void bench_rowop(const char* name, int64_t rows, int64_t cols, int reps) {
  rlx::Graph g;
  auto x = g.input("x", rlx::Shape::of({rows, cols}));
  rlx::Value y;
  if (std::string(name) == "softmax") {
    y = g.softmax(x, -1);
  } else if (std::string(name) == "layer_norm") {
    auto gm = g.constant(rand_f32({cols}, 3));
    auto bt = g.constant(rand_f32({cols}, 4));
    y = g.layer_norm(x, gm, bt, 1e-5);
  } else {
    y = g.add(x, g.constant(rand_f32({cols}, 5)));
  }
  g.add_output(y);
  auto cg = rlx::Session().compile(g);
  auto tx = rand_f32({rows, cols}, 6);
  const double r = p50_ms([&] { cg.run({{"x", tx}}); }, reps);
  // Peer: copying the input once and the output once (what any row op must move), single memcpy.
  const size_t bytes = static_cast<size_t>(rows * cols) * 4;
  std::vector<char> src(bytes * 2, 1), dst(bytes * 2);
  const double p = p50_ms([&] { std::memcpy(dst.data(), src.data(), bytes * 2); }, reps);
  char extra[64];
  std::snprintf(extra, sizeof extra, "rlx %.2f GB/s (in+out)", 2.0 * bytes / 1e9 / (r / 1e3));
  row(name, std::to_string(rows) + "x" + std::to_string(cols), r, p, "memcpy in+out", extra);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
  try {
    std::printf("| op          | shape                  |  rlx p50  | peer p50  | peer           | ratio  | note\n");
    std::printf("|-------------|------------------------|-----------|-----------|----------------|--------|-----\n");
    bench_matmul(128, 768, 768, reps);
    bench_matmul(512, 1024, 1024, reps);
    bench_matmul(64, 4096, 4096, reps);
    bench_rowop("softmax", 4096, 1024, reps);
    bench_rowop("layer_norm", 4096, 768, reps);
    bench_rowop("add", 4096, 768, reps);
  } catch (const rlx::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
