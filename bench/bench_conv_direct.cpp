// The f32 CPU conv: the direct (implicit-GEMM) path of backends/cpu/conv_direct.h against the
// im2col + tile kernel / OpenBLAS path it replaces, per layer shape, the same binary and inputs,
// alternating rounds (the lowest median of each counts): the direct conv with the kernel it
// picks (or --kernel), with each of its two tile kernels, and im2col. Shapes: the ResNet export of
// tests/models/onnx (batch 2, 96x80 input), MobileNet-style stems, long sums, a large map.
//   bench_conv_direct [--reps N] [--rounds R] [--threads T] [--relu] [--only NAME-PART] [--grid] [--smallk]
//                     [--fastest (the fastest run instead of the median)]
//                     [--kernel 0|1|2 (the first column: the kernel chosen per shape, spatial tiles, channel lanes)]
#include <algorithm>
#include <chrono>
#include <functional>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/conv_direct.h"
#include "rlx/rlx.h"

namespace {

rlx::Tensor rand_f32(std::vector<int64_t> shape, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(static_cast<size_t>(rlx::product(shape)));
  for (auto& x : v) x = d(rng);
  return rlx::Tensor::f32(std::move(shape), v);
}

// Sorted wall times in ms of `reps` calls of `fn`, after one warm-up call.
std::vector<double> times_ms(const std::function<void()>& fn, int reps) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t;
}

struct Case {
  const char* name;
  int64_t n, c, h, w, cout, k, s, pad, groups = 1;
};

}  // namespace

int main(int argc, char** argv) {
  int reps = 200, rounds = 3, threads = 1;
  bool relu = false, grid = false, fastest = false, smallk = false;
  int kernel = 0;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--rounds" && i + 1 < argc) rounds = std::max(1, std::atoi(argv[++i]));
    else if (a == "--threads" && i + 1 < argc) threads = std::max(1, std::atoi(argv[++i]));
    else if (a == "--relu") relu = true;
    else if (a == "--grid") grid = true;
    else if (a == "--fastest") fastest = true;
    else if (a == "--smallk") smallk = true;
    else if (a == "--kernel" && i + 1 < argc) kernel = std::atoi(argv[++i]);
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench_conv_direct [--reps N] [--rounds R] [--threads T] [--relu] [--only NAME-PART] "
                           "[--grid] [--smallk] [--fastest] [--kernel 0|1|2]\n");
      return 2;
    }
  }
  std::vector<Case> cases = {
      {"resnet stem 7x7 s2", 2, 3, 96, 80, 16, 7, 2, 3},
      {"resnet 16->16 3x3", 2, 16, 24, 20, 16, 3, 1, 1},
      {"resnet 16->32 3x3 s2", 2, 16, 24, 20, 32, 3, 2, 1},
      {"resnet 16->32 1x1 s2", 2, 16, 24, 20, 32, 1, 2, 0},
      {"resnet 32->32 3x3", 2, 32, 12, 10, 32, 3, 1, 1},
      {"resnet 32->64 3x3 s2", 2, 32, 12, 10, 64, 3, 2, 1},
      {"resnet 32->64 1x1 s2", 2, 32, 12, 10, 64, 1, 2, 0},
      {"resnet 64->64 3x3", 2, 64, 6, 5, 64, 3, 1, 1},
      {"mobilenet stem 3x3 s2", 1, 3, 224, 224, 16, 3, 2, 1},
      {"mnv3 stem 3x3 s2", 2, 3, 128, 112, 8, 3, 2, 1},
      {"64->64 3x3 28x28", 1, 64, 28, 28, 64, 3, 1, 1},
      {"128->128 3x3 14x14", 1, 128, 14, 14, 128, 3, 1, 1},
      {"256->256 3x3 7x7", 1, 256, 7, 7, 256, 3, 1, 1},
      {"512->512 3x3 7x7", 1, 512, 7, 7, 512, 3, 1, 1},
      {"256->256 3x3 7x7 b4", 4, 256, 7, 7, 256, 3, 1, 1},
      {"256->256 3x3 14x14", 1, 256, 14, 14, 256, 3, 1, 1},
      {"128->128 3x3 28x28", 1, 128, 28, 28, 128, 3, 1, 1},
      {"64->64 3x3 56x56", 1, 64, 56, 56, 64, 3, 1, 1},
      {"32->32 3x3 g4 28x28", 1, 32, 28, 28, 32, 3, 1, 1, 4},
      {"64->64 3x3 128x128", 1, 64, 128, 128, 64, 3, 1, 1},
      {"16->16 3x3 256x256", 1, 16, 256, 256, 16, 3, 1, 1},
      {"3->32 3x3 s2 512x512", 1, 3, 512, 512, 32, 3, 2, 1},
      {"64->64 3x3 s2 256x256", 1, 64, 256, 256, 64, 3, 2, 1},
      {"isnet 512->512 3x3 32x32", 1, 512, 32, 32, 512, 3, 1, 1},  // k 4608
      {"isnet 1024->256 3x3 64x64", 1, 1024, 64, 64, 256, 3, 1, 1},  // k 9216
  };
  if (grid) {  // long sums (3x3, C >= 32) over map sizes and batches: where the cut lies
    cases.clear();
    static std::vector<std::string> names;
    names.reserve(200);
    for (int64_t ch : {32, 64, 128, 256})
      for (int64_t hw : {4, 5, 6, 7, 10, 12, 14, 20, 28})
        for (int64_t n : {1, 2}) {
          names.push_back(std::to_string(ch) + "ch " + std::to_string(hw) + "x" + std::to_string(hw) + " b" + std::to_string(n));
          cases.push_back({names.back().c_str(), n, ch, hw, hw, ch, 3, 1, 1});
        }
  }
  if (smallk) {  // short sums and few output channels: where the spatial tiles win
    cases.clear();
    static std::vector<std::string> names;
    names.reserve(200);
    for (int64_t cout : {8, 12, 16, 24, 32})
      for (int64_t cin : {3, 8, 16, 32}) {
        names.push_back(std::to_string(cin) + "->" + std::to_string(cout) + " 3x3 s2 56x56");
        cases.push_back({names.back().c_str(), 1, cin, 56, 56, cout, 3, 2, 1});
        names.push_back(std::to_string(cin) + "->" + std::to_string(cout) + " 1x1 s2 28x28");
        cases.push_back({names.back().c_str(), 1, cin, 28, 28, cout, 1, 2, 0});
      }
  }
  std::printf("%d thread(s), %s of %d runs, best of %d rounds%s\n", threads, fastest ? "fastest" : "p50", reps, rounds,
              relu ? ", + Relu" : "");
  std::printf("| layer                  | x              | direct ms | spatial ms | channels ms | im2col ms | direct / im2col |\n");
  std::printf("|------------------------|----------------|-----------|-----------|-----------|-----------|-------|\n");
  double sum_d = 0, sum_i = 0;
  for (const Case& c : cases) {
    if (!only.empty() && std::string(c.name).find(only) == std::string::npos) continue;
    rlx::Graph g;
    const rlx::Value x = g.input("x", rlx::Shape::of({c.n, c.c, c.h, c.w}));
    const rlx::Value w = g.constant(rand_f32({c.cout, c.c / c.groups, c.k, c.k}, 2));
    const rlx::Value b = g.constant(rand_f32({c.cout}, 3));
    rlx::ops::Conv op;
    op.stride = {c.s, c.s};
    op.pads = {c.pad, c.pad, c.pad, c.pad};
    op.groups = c.groups;
    rlx::Value y = g.apply(op, {x, w, b});
    if (relu) y = g.relu(y);
    g.add_output(y);
    rlx::CompileOptions o;
    o.num_threads = threads;
    rlx::CompiledGraph cg = rlx::Session().compile(g, o);
    const rlx::Tensor xt = rand_f32({c.n, c.c, c.h, c.w}, 1);
    // Paths: the direct conv with the kernel it picks, with spatial tiles, with channel lanes;
    // the im2col path (direct switched off).
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    for (int r = 0; r < rounds; ++r)
      for (int path = 0; path < 4; ++path) {
        rlx::cpu::set_conv_direct_enabled(path < 3);
        rlx::cpu::set_conv_direct_kernel(path == 0 ? kernel : path);
        const std::vector<double> t = times_ms([&] { cg.run({{"x", xt}}); }, reps);
        best[path] = std::min(best[path], fastest ? t.front() : t[t.size() / 2]);
      }
    rlx::cpu::set_conv_direct_enabled(true);
    rlx::cpu::set_conv_direct_kernel(kernel);
    char xs[32];
    std::snprintf(xs, sizeof xs, "%ldx%ldx%ldx%ld", static_cast<long>(c.n), static_cast<long>(c.c),
                  static_cast<long>(c.h), static_cast<long>(c.w));
    std::printf("| %-22s | %-14s | %9.4f | %9.4f | %9.4f | %9.4f | %5.2f |\n", c.name, xs, best[0], best[1], best[2],
                best[3], best[0] / best[3]);
    std::fflush(stdout);
    sum_d += best[0];
    sum_i += best[3];
  }
  std::printf("sum of the resnet-to-large rows: direct %.3f ms, im2col %.3f ms\n", sum_d, sum_i);
  return 0;
}
