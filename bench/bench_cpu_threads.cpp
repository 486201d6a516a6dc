// CPU thread-budget benchmark: the same graphs compiled with CompileOptions::num_threads = 1
// and = T (default 2), measured in the same run. Per case: p50 wall time and CPU time (user + sys
// of the process) per run at each count; the speed-up is wall(1) / wall(T). A budget of 1 that
// really is one thread shows CPU time ~ wall time.
//   matmul  an MLP block: x[256,768] @ w1[768,3072] -> gelu -> @ w2[3072,768] (BLAS-bound)
//   eltwise a chain of elementwise ops over [2048,1024] (the worker pool)
//   mixed   a small transformer-style block: matmul, layer norm, softmax, activations
//   bench_cpu_threads [--reps N] [--threads T]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "rlx/rlx.h"

namespace {

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

struct Timing {
  double wall_ms, cpu_ms;
};

Timing measure(const std::function<void()>& fn, int reps) {
  fn();  // warm-up
  std::vector<double> t;
  const double c0 = cpu_seconds();
  for (int i = 0; i < reps; ++i) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  const double cpu = (cpu_seconds() - c0) * 1e3 / reps;
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], cpu};
}

rlx::Tensor rand_f32(std::vector<int64_t> shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(static_cast<size_t>(rlx::product(shape)));
  for (auto& x : v) x = d(rng) * 0.1f;
  return rlx::Tensor::f32(std::move(shape), v);
}

rlx::Graph matmul_graph() {
  rlx::Graph g;
  auto x = g.input("x", rlx::Shape::of({256, 768}));
  auto h = g.gelu(g.matmul(x, g.constant(rand_f32({768, 3072}, 2))));
  g.add_output(g.matmul(h, g.constant(rand_f32({3072, 768}, 3))));
  return g;
}

rlx::Graph eltwise_graph() {
  rlx::Graph g;
  auto x = g.input("x", rlx::Shape::of({2048, 1024}));
  auto b = g.constant(rand_f32({1024}, 4));
  auto a = g.tanh(g.add(g.mul(x, x), b));
  auto s = g.sigmoid(g.sub(a, x));
  g.add_output(g.add(g.mul(s, a), g.exp(g.act(rlx::ActKind::Neg, g.mul(x, x)))));
  return g;
}

rlx::Graph mixed_graph() {
  rlx::Graph g;
  const int64_t t = 512, d = 512;
  auto x = g.input("x", rlx::Shape::of({t, d}));
  auto n = g.layer_norm(x, g.constant(rand_f32({d}, 5)), g.constant(rand_f32({d}, 6)), 1e-5);
  auto q = g.matmul(n, g.constant(rand_f32({d, d}, 7)));
  auto k = g.matmul(n, g.constant(rand_f32({d, d}, 8)));
  auto p = g.softmax(g.matmul(q, g.transpose(k, {1, 0})), -1);
  auto o = g.add(g.matmul(p, n), x);
  g.add_output(g.add(o, g.silu(g.matmul(o, g.constant(rand_f32({d, d}, 9))))));
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20, threads = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--threads" && i + 1 < argc) threads = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: bench_cpu_threads [--reps N] [--threads T]\n");
      return 2;
    }
  }
  struct Case {
    const char* name;
    rlx::Graph g;
    std::vector<int64_t> in;
  };
  std::vector<Case> cases;
  cases.push_back({"matmul", matmul_graph(), {256, 768}});
  cases.push_back({"eltwise", eltwise_graph(), {2048, 1024}});
  cases.push_back({"mixed", mixed_graph(), {512, 512}});
  try {
    std::printf("p50 of %d runs; cpu = user+sys time of the process per run\n", reps);
    std::printf("| graph   | 1 thread ms | cpu ms | %d threads ms | cpu ms | speed-up |\n", threads);
    std::printf("|---------|-------------|--------|---------------|--------|----------|\n");
    for (Case& c : cases) {
      const rlx::Tensor x = rand_f32(c.in, 1);
      Timing t[2];
      for (int k = 0; k < 2; ++k) {
        rlx::CompileOptions o;
        o.num_threads = k == 0 ? 1 : threads;
        rlx::CompiledGraph cg = rlx::Session().compile(c.g, o);
        t[k] = measure([&] { cg.run({{"x", x}}); }, reps);
      }
      std::printf("| %-7s | %11.3f | %6.2f | %13.3f | %6.2f | %7.2fx |\n", c.name, t[0].wall_ms, t[0].cpu_ms,
                  t[1].wall_ms, t[1].cpu_ms, t[0].wall_ms / t[1].wall_ms);
    }
  } catch (const rlx::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
