// Compile-time benchmark: a 12-layer BERT-base encoder (hidden 768, 12 heads, FFN 3072,
// seq 128, batch 1) through the CPU optimizer pipeline and the memory planner.
//   - optimize_for_backend time (p50 of several runs; the per-pass table is printed to stderr
//     by the pipeline's pass report), node counts before / after;
//   - build_schedule time (memory plan + Steps), and Session::compile end to end;
//   - arena bytes with liveness reuse (+ views, in place) against the no-reuse sum (one slot
//     per value), for the graph as built and as optimized.
// Targets: optimize + schedule < 100 ms; arena with reuse <= 40% of the no-reuse sum.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "models/transformer.h"
#include "passes/pass.h"
#include "passes/pipeline.h"
#include "plan/schedule.h"
#include "rlx/session.h"
#include "runtime/backend.h"

namespace {

using namespace rlx;

Graph bert_base(int layers) {
  Graph g;
  Value h = g.input("hidden", Shape::of({1, 128, 768}));
  Value mask = g.input("mask", Shape::of({1, 128}));
  models::BertLayerConfig cfg;
  cfg.hidden = 768;
  cfg.num_heads = 12;
  cfg.ffn = 3072;
  for (int l = 0; l < layers; ++l) h = models::build_bert_layer(g, h, mask, cfg, "layer" + std::to_string(l));
  g.add_output(h, "out");
  return g;
}

double mib(int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }

// One row per graph: the default plan's arena and live peak against the no-reuse sum of the
// same values (one slot each), and the arena with every feature off (views become copies).
void plan_row(const char* what, const Graph& g) {
  plan::PlanOptions off;
  off.reuse = off.in_place = off.views = false;
  const plan::MemoryPlan mp = plan::plan_memory(g);
  const plan::MemoryPlan none = plan::plan_memory(g, off);
  std::printf("| %-22s | %5zu | %9.2f | %8.2f | %12.2f | %6.1f%% | %12.2f | %5lld | %5lld |\n", what,
              passes::op_count(g), mib(mp.arena_bytes), mib(mp.peak_bytes), mib(mp.no_reuse_bytes),
              100.0 * static_cast<double>(mp.arena_bytes) / static_cast<double>(mp.no_reuse_bytes),
              mib(none.arena_bytes), static_cast<long long>(mp.num_views), static_cast<long long>(mp.num_in_place));
}

}  // namespace

// A graph with many weights (ONNX models carry thousands): n params, each added into a sum,
// then a weight set per param. Name checks and set_weight look the param up by name, so this
// stays linear in the number of params (it was quadratic while they scanned the nodes).
double many_weights_ms(int n) {
  return p50_ms(
      [n] {
        Graph g;
        Value acc = g.input("x", Shape::of({4}));
        for (int i = 0; i < n; ++i) acc = g.add(acc, g.param("w" + std::to_string(i), Shape::of({4})));
        g.add_output(acc);
        const Tensor t = Tensor::zeros(DType::F32, {4});
        for (int i = 0; i < n; ++i) g.set_weight("w" + std::to_string(i), t);
      },
      3);
}

int main() {
  const Graph g = bert_base(12);
  CompileOptions opts;
  const auto backend = make_cpu_backend(opts);
  const int reps = 7;

  Graph opt;
  const double t_opt = p50_ms([&] { opt = passes::optimize_for_backend(g, *backend, opts); }, reps);
  CompileOptions no_verify = opts;
  no_verify.verify = false;
  const double t_opt_nv = p50_ms([&] { (void)passes::optimize_for_backend(g, *backend, no_verify); }, reps);
  plan::Schedule sched;
  const double t_sched = p50_ms([&] { sched = plan::build_schedule(opt); }, reps);
  const double t_session = p50_ms([&] { (void)Session(Device::Cpu).compile(g, opts); }, reps);

  std::printf("12-layer BERT-base (hidden 768, 12 heads, FFN 3072, seq 128, batch 1), CPU backend\n\n");
  std::printf("| %-34s | %9s |\n", "compile stage (p50 of 7)", "ms");
  std::printf("|------------------------------------|-----------|\n");
  std::printf("| %-34s | %9.2f |\n", "optimize_for_backend (verify on)", t_opt);
  std::printf("| %-34s | %9.2f |\n", "optimize_for_backend (verify off)", t_opt_nv);
  std::printf("| %-34s | %9.2f |\n", "build_schedule (plan + steps)", t_sched);
  std::printf("| %-34s | %9.2f |\n", "optimize + schedule (verify on)", t_opt + t_sched);
  std::printf("| %-34s | %9.2f |\n", "Session::compile (end to end)", t_session);
  std::printf("\n| %-22s | %5s | %9s | %8s | %12s | %7s | %12s | %5s | %5s |\n", "graph", "ops", "arena MiB",
              "peak MiB", "no-reuse MiB", "ratio", "all-off MiB", "views", "inpl");
  std::printf("|------------------------|-------|-----------|----------|--------------|---------|--------------|-------|-------|\n");
  plan_row("as built (unoptimized)", g);
  plan_row("optimized for cpu", opt);
  std::printf("\nsteps in the optimized schedule: %zu\n", sched.steps.size());
  for (int n : {5000, 20000})
    std::printf("%sgraph of %d params: build + set_weight of every param: %.1f ms (p50 of 3)\n", n == 5000 ? "\n" : "",
                n, many_weights_ms(n));
  std::printf("\nper-pass report (one more optimize_for_backend call):\n");
  std::fflush(stdout);
  CompileOptions report = opts;
  report.pass_report = true;
  (void)passes::optimize_for_backend(g, *backend, report);
  return 0;
}
