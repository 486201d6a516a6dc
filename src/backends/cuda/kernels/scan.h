#pragma once
// Cumsum over the middle axis of [outer, len, inner] (exclusive / reverse). typedef T (storage)
// and A (accumulator, as on the CPU: double for f32, float for f16/bf16, unsigned long long for
// integers, which wraps in the dtype's width when stored); LOAD_A(v) and STORE_T(a) convert.
namespace rlx::cuda::ksrc {

inline constexpr const char* kScan = R"CUDA(
#define SCAN_THREADS 512
#define SCAN_ITEMS 4
// A block scan per row: tiles of SCAN_THREADS * SCAN_ITEMS elements, each thread owning
// SCAN_ITEMS consecutive scan positions; warp shuffles + one shared pass over the warp totals,
// and a carry between tiles. Scan position t is axis index t, or len - 1 - t with `reverse`.
extern "C" __global__ void __launch_bounds__(SCAN_THREADS) cumsum_rows(const T* x, T* y, long long outer, long long len,
                                                                       long long inner, int exclusive, int reverse) {
  __shared__ A warp_tot[32];
  __shared__ A tile_tot;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  const long long rows = outer * inner;
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const long long base = (row / inner) * len * inner + row % inner;
    A carry = (A)0;
    for (long long tile = 0; tile < len; tile += (long long)blockDim.x * SCAN_ITEMS) {
      A v[SCAN_ITEMS];
      A local = (A)0;
#pragma unroll
      for (int e = 0; e < SCAN_ITEMS; ++e) {
        const long long t = tile + (long long)threadIdx.x * SCAN_ITEMS + e;
        const long long m = reverse ? len - 1 - t : t;
        v[e] = t < len ? LOAD_A(x[base + m * inner]) : (A)0;
        local += v[e];
      }
      A incl = local;
      for (int o = 1; o < 32; o <<= 1) {
        const A up = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += up;
      }
      A excl = __shfl_up_sync(0xffffffffu, incl, 1);
      if (lane == 0) excl = (A)0;
      if (lane == 31) warp_tot[warp] = incl;
      __syncthreads();
      if (threadIdx.x == 0) {
        A run = (A)0;
        for (int w = 0; w < nw; ++w) {
          const A tot = warp_tot[w];
          warp_tot[w] = run;
          run += tot;
        }
        tile_tot = run;
      }
      __syncthreads();
      A run = carry + (warp_tot[warp] + excl);
#pragma unroll
      for (int e = 0; e < SCAN_ITEMS; ++e) {
        const long long t = tile + (long long)threadIdx.x * SCAN_ITEMS + e;
        if (t >= len) break;
        const long long m = reverse ? len - 1 - t : t;
        if (exclusive) y[base + m * inner] = STORE_T(run);
        run += v[e];
        if (!exclusive) y[base + m * inner] = STORE_T(run);
      }
      carry += tile_tot;
      __syncthreads();  // warp_tot / tile_tot are rewritten by the next tile
    }
  }
}

// One thread per (outer, inner) column walking the axis in order (many columns, inner > 1).
extern "C" __global__ void cumsum_cols(const T* x, T* y, long long outer, long long len, long long inner, int exclusive,
                                       int reverse) {
  const long long cols = outer * inner;
  for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < cols; c += (long long)gridDim.x * blockDim.x) {
    const long long base = (c / inner) * len * inner + c % inner;
    A acc = (A)0;
    for (long long t = 0; t < len; ++t) {
      const long long off = base + (reverse ? len - 1 - t : t) * inner;
      const A v = LOAD_A(x[off]);
      if (exclusive) y[off] = STORE_T(acc);
      acc += v;
      if (!exclusive) y[off] = STORE_T(acc);
    }
  }
}
)CUDA";

}  // namespace rlx::cuda::ksrc
