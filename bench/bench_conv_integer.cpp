// ConvInteger and MatMulInteger on the CPU (exact i32 sums of 8-bit operands with zero points)
// against the peer measured in the same run: rlx's f32 Conv / MatMul of the same shapes (its own
// tile kernel or OpenBLAS). Conv shapes are ISNet's (3x3, stride 1, pad 1; the stem 3 -> 64 at
// stride 2); MatMul shapes a transformer's dynamically quantized projections.
// Columns: shape, threads, GMAC, int8 p50 ms, f32 p50 ms, f32 / int8, int8 GMAC/s.
//   bench_conv_integer [--reps N] [--threads T[,T...]] [--path auto|avx2|portable]
// --path forces the integer tile (auto: VNNI where the CPU has it, else AVX2).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cpu/int_gemm.h"
#include "bench_timing.h"
#include "rlx/rlx.h"

namespace {

using namespace rlx;

struct ConvShape {
  int64_t c, h, w, cout, k, stride;
};

Tensor ints(DType t, std::vector<int64_t> shape, int lo, int hi, uint32_t seed) {
  std::vector<double> v(static_cast<size_t>(product(shape)));
  uint32_t s = seed;
  for (double& x : v) {
    s = s * 1664525u + 1013904223u;
    x = lo + static_cast<int>((s >> 8) % static_cast<uint32_t>(hi - lo + 1));
  }
  return Tensor::f64(shape, v).cast(t);
}

CompileOptions threads_opt(int t) {
  CompileOptions o;
  o.num_threads = t;
  return o;
}

void conv_row(const ConvShape& s, int threads, int reps) {
  const int64_t pad = s.k / 2;
  const int64_t oh = (s.h + 2 * pad - s.k) / s.stride + 1, ow = (s.w + 2 * pad - s.k) / s.stride + 1;
  const double gmac = static_cast<double>(s.cout * s.c * s.k * s.k * oh * ow) * 1e-9;
  Graph gi;
  {
    Value x = gi.input("x", Shape({1, s.c, s.h, s.w}, DType::U8));
    Value w = gi.constant(ints(DType::I8, {s.cout, s.c, s.k, s.k}, -128, 127, 2));
    ops::ConvInteger op;
    op.stride = {s.stride, s.stride};
    op.pads = {pad, pad, pad, pad};
    gi.add_output(gi.apply(op, {x, w, gi.constant(ints(DType::U8, {}, 100, 100, 3)),
                                gi.constant(ints(DType::I8, {s.cout}, -3, 3, 4))}));
  }
  Graph gf;
  {
    Value x = gf.input("x", Shape({1, s.c, s.h, s.w}));
    Value w = gf.constant(ints(DType::F32, {s.cout, s.c, s.k, s.k}, -128, 127, 2));
    ops::Conv op;
    op.stride = {s.stride, s.stride};
    op.pads = {pad, pad, pad, pad};
    gf.add_output(gf.apply(op, {x, w}));
  }
  auto ci = Session().compile(gi, threads_opt(threads));
  auto cf = Session().compile(gf, threads_opt(threads));
  const Tensor xi = ints(DType::U8, {1, s.c, s.h, s.w}, 0, 255, 1);
  const Tensor xf = xi.cast(DType::F32);
  const double ti = p50_ms([&] { ci.run({{"x", xi}}); }, reps);
  const double tf = p50_ms([&] { cf.run({{"x", xf}}); }, reps);
  char shape[96];
  std::snprintf(shape, sizeof shape, "conv %lld->%lld %lldx%lld k%lld s%lld", static_cast<long long>(s.c),
                static_cast<long long>(s.cout), static_cast<long long>(s.h), static_cast<long long>(s.w),
                static_cast<long long>(s.k), static_cast<long long>(s.stride));
  std::printf("| %-30s | %d | %7.3f | %9.2f | %9.2f | %5.2fx | %6.1f |\n", shape, threads, gmac, ti, tf, tf / ti,
              gmac / (ti * 1e-3));
}

void matmul_row(int64_t m, int64_t k, int64_t n, int threads, int reps) {
  const double gmac = static_cast<double>(m * k * n) * 1e-9;
  Graph gi;
  gi.add_output(gi.apply(ops::MatMulInteger{},
                         {gi.input("a", Shape({m, k}, DType::U8)), gi.constant(ints(DType::I8, {k, n}, -128, 127, 2)),
                          gi.constant(ints(DType::U8, {}, 120, 120, 3)), gi.constant(ints(DType::I8, {}, 0, 0, 4))}));
  Graph gf;
  gf.add_output(gf.matmul(gf.input("a", Shape({m, k})), gf.constant(ints(DType::F32, {k, n}, -128, 127, 2))));
  auto ci = Session().compile(gi, threads_opt(threads));
  auto cf = Session().compile(gf, threads_opt(threads));
  const Tensor ai = ints(DType::U8, {m, k}, 0, 255, 1);
  const Tensor af = ai.cast(DType::F32);
  const double ti = p50_ms([&] { ci.run({{"a", ai}}); }, reps);
  const double tf = p50_ms([&] { cf.run({{"a", af}}); }, reps);
  char shape[96];
  std::snprintf(shape, sizeof shape, "matmul %lldx%lld @ %lldx%lld", static_cast<long long>(m),
                static_cast<long long>(k), static_cast<long long>(k), static_cast<long long>(n));
  std::printf("| %-30s | %d | %7.3f | %9.2f | %9.2f | %5.2fx | %6.1f |\n", shape, threads, gmac, ti, tf, tf / ti,
              gmac / (ti * 1e-3));
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  std::vector<int> threads = {1, 2};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--reps") {
      reps = std::atoi(argv[i + 1]);
    } else if (a == "--path") {
      const std::string p = argv[i + 1];
      cpu::int_gemm_force_path(p == "avx2" ? cpu::IntPath::Avx2 : p == "portable" ? cpu::IntPath::Portable
                                                                                  : cpu::IntPath::Auto);
    } else if (a == "--threads") {
      threads.clear();
      for (const char* p = argv[i + 1]; *p;) {
        threads.push_back(std::atoi(p));
        while (*p && *p != ',') ++p;
        if (*p == ',') ++p;
      }
    }
  }
  const std::vector<ConvShape> convs = {
      {3, 1024, 1024, 64, 3, 2}, {64, 512, 512, 16, 3, 1}, {16, 256, 256, 16, 3, 1},
      {64, 128, 128, 64, 3, 1},  {128, 64, 64, 128, 3, 1}, {512, 32, 32, 512, 3, 1},
  };
  std::printf("integer tile: %s\n", cpu::int_gemm_vnni_usable() ? "vnni where not forced (avx512vnni + vl)"
                                   : cpu::int_gemm_avx2_usable() ? "avx2" : "portable");
  std::printf("| shape | threads | GMAC | int8 ms | f32 ms | f32 / int8 | int8 GMAC/s |\n|---|---|---|---|---|---|---|\n");
  for (int t : threads) {
    for (const ConvShape& s : convs) conv_row(s, t, reps);
    matmul_row(128, 768, 768, t, reps);
    matmul_row(128, 4608, 768, t, reps);
    matmul_row(1, 768, 3072, t, reps);
  }
  return 0;
}
