// DequantMatMul on the CPU: y (M, N) = x (M, K) @ dequant(W)^T for each ggml block format, against
// the peer measured in the same run: OpenBLAS sgemm (x @ W^T) on the already dequantized f32 W.
// Decode (M = 1), M = 8 and 16 (where Auto switches paths) and prefill (M = 128) at K = N = 4096
// by default, at 1 and 2 threads.
// Columns: the path rlx takes (int8: x quantized to 8-bit blocks, AVX2 integer dots; gemm: tiles of
// W dequantized and multiplied by sgemm; i8gemm: 8-row tiles unpacked per call; packed / pk-avx2:
// W repacked once into 8-row tiles (quant_pack.h; what the CPU backend runs for Param weights of
// Q4_0, Q4_1, Q4_K), on the VNNI kernel where the CPU has it / on the AVX2 kernel), rlx p50 ms, sgemm p50 ms, sgemm / rlx, and the GB/s of
// quantized weight bytes read at M = 1 (W's bytes / rlx time; f32 bytes / time for the sgemm column).
//   bench_dequant_matmul [--reps N] [--k K] [--n N] [--threads T[,T...]] [--formats q4_0,q4_k,...]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/blas.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/quant_matmul.h"
#include "backends/cpu/quant_pack.h"
#include "bench_timing.h"
#include "quant/ggml_blocks.h"
#include "rlx/rlx.h"

namespace {

using rlx::QuantFormat;
using rlx::cpu::DequantPath;

std::vector<float> randn(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

const char* path_name(DequantPath p) {
  switch (p) {
    case DequantPath::Int8: return "int8";
    case DequantPath::DequantGemm: return "gemm";
    case DequantPath::Int8Gemm: return "i8gemm";
    case DequantPath::Reference: return "ref";
    case DequantPath::Auto: return "auto";
  }
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 9;
  int64_t K = 4096, N = 4096;
  std::vector<int> threads = {1, 2};
  std::string only;  // ",q4_0,q4_k," or empty: every format
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--reps") reps = std::atoi(argv[i + 1]);
    else if (a == "--k") K = std::atoll(argv[i + 1]);
    else if (a == "--n") N = std::atoll(argv[i + 1]);
    else if (a == "--threads") {
      threads.clear();
      for (const char* p = argv[i + 1]; *p;) {
        threads.push_back(std::atoi(p));
        while (*p && *p != ',') ++p;
        if (*p) ++p;
      }
    } else if (a == "--formats") {
      only = "," + std::string(argv[i + 1]) + ",";
    } else {
      std::fprintf(stderr, "usage: bench_dequant_matmul [--reps N] [--k K] [--n N] [--threads T[,T...]] [--formats LIST]\n");
      return 2;
    }
  }
  const QuantFormat formats[] = {QuantFormat::Q4_0, QuantFormat::Q4_1, QuantFormat::Q5_0, QuantFormat::Q5_1,
                                 QuantFormat::Q8_0, QuantFormat::Q4_K, QuantFormat::Q5_K, QuantFormat::Q6_K,
                                 QuantFormat::F16,  QuantFormat::BF16};
  const auto wvals = randn(static_cast<size_t>(N * K), 1);
  const auto x = randn(static_cast<size_t>(128 * K), 2);
  std::printf("DequantMatMul CPU, K = %lld, N = %lld, p50 of %d runs (peer: OpenBLAS sgemm on the dequantized f32 W)\n",
              static_cast<long long>(K), static_cast<long long>(N), reps);
  std::printf("%-5s %4s %3s %-5s %9s %9s %7s %8s %8s\n", "fmt", "M", "thr", "path", "rlx ms", "sgemm ms", "speedup",
              "rlx GB/s", "f32 GB/s");
  for (QuantFormat f : formats) {
    if (!only.empty() && only.find("," + std::string(rlx::enum_name(f)) + ",") == std::string::npos) continue;
    const rlx::GgmlType t = rlx::quant::ggml_type_of(f);
    const std::vector<uint8_t> w = rlx::ggml_quantize(t, wvals);
    const std::vector<float> wf = rlx::ggml_dequantize(t, w);
    {
      rlx::cpu::ScopedThreads one(1);
      std::vector<float> tmp(wf.size());
      const double deq = p50_ms([&] { rlx::quant::dequantize(t, w.data(), tmp.data(), static_cast<int64_t>(tmp.size())); }, 3);
      std::printf("%-5s decoding all of W to f32 (reference decoder, 1 thread): %.1f ms\n", rlx::enum_name(f), deq);
    }
    std::vector<uint8_t> packed;
    if (rlx::cpu::quant_pack_format(f)) rlx::cpu::quant_pack(f, w.data(), N, K, packed);
    for (int64_t m : {1, 8, 16, 128}) {
      std::vector<float> y(static_cast<size_t>(m * N)), yb(static_cast<size_t>(m * N));
      for (int th : threads) {
        rlx::cpu::ScopedThreads scope(th);
        const double blas = p50_ms([&] {
          rlx::cpu::gemm(false, true, m, N, K, 1.0f, x.data(), K, wf.data(), K, 0.0f, yb.data(), N);
        }, reps);
        std::vector<DequantPath> paths = {DequantPath::Auto};
        if (m > 1) paths = {DequantPath::Int8, DequantPath::DequantGemm};
        if (m > 1 && rlx::cpu::int8_gemm_format(f)) paths.push_back(DequantPath::Int8Gemm);
        for (DequantPath p : paths) {
          const double ms = p50_ms([&] { rlx::cpu::dequant_matmul(p, f, x.data(), m, K, w.data(), N, y.data()); }, reps);
          const DequantPath shown = p == DequantPath::Auto
                                        ? (m >= rlx::cpu::kDequantGemmMinRows ? DequantPath::DequantGemm : DequantPath::Int8)
                                        : p;
          std::printf("%-5s %4lld %3d %-5s %9.3f %9.3f %6.2fx", rlx::enum_name(f), static_cast<long long>(m), th,
                      path_name(shown), ms, blas, blas / ms);
          if (m == 1)
            std::printf(" %8.1f %8.1f", static_cast<double>(w.size()) / ms / 1e6, static_cast<double>(wf.size() * 4) / blas / 1e6);
          std::printf("\n");
        }
        if (packed.empty()) continue;
        std::vector<rlx::cpu::PackedKernel> kernels = {rlx::cpu::PackedKernel::Auto};
        if (rlx::cpu::quant_pack_vnni()) kernels.push_back(rlx::cpu::PackedKernel::Avx2);
        for (rlx::cpu::PackedKernel kern : kernels) {
          const double ms = p50_ms([&] {
            rlx::cpu::dequant_matmul_packed(f, x.data(), m, K, packed.data(), N, y.data(), kern);
          }, reps);
          std::printf("%-5s %4lld %3d %-8s %6.3f %9.3f %6.2fx", rlx::enum_name(f), static_cast<long long>(m), th,
                      kern == rlx::cpu::PackedKernel::Auto ? "packed" : "pk-avx2", ms, blas, blas / ms);
          if (m == 1)
            std::printf(" %8.1f %8.1f", static_cast<double>(packed.size()) / ms / 1e6,
                        static_cast<double>(wf.size() * 4) / blas / 1e6);
          std::printf("\n");
        }
      }
    }
  }
  return 0;
}
