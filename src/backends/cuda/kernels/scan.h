#pragma once
// Cumsum over the middle axis of [outer, len, inner] (exclusive / reverse). typedef T (storage)
// and A (accumulator, as on the CPU: double for f32, float for f16/bf16, unsigned long long for
// integers, which wraps in the dtype's width when stored); TO_A(v) and FROM_A(a) convert.
namespace rlx::cuda::ksrc {

inline constexpr const char* kScan = R"CUDA(
#define SCAN_THREADS 512
#define SCAN_ITEMS 4
#define SCAN_TILE (SCAN_THREADS * SCAN_ITEMS)
// Scan position t of a row is axis index t, or len - 1 - t with `reverse`.
__device__ __forceinline__ long long scan_index(long long t, long long len, int reverse) {
  return reverse ? len - 1 - t : t;
}

// Exclusive prefix of v over the block's threads in thread order (warp shuffles, then one shared
// pass over the warp totals); *total = the sum over the block. shared: 33 accumulators. Every
// thread of the block must call it.
__device__ __forceinline__ A block_exclusive_scan(A v, A* shared, A* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  A incl = v;
  for (int o = 1; o < 32; o <<= 1) {
    const A up = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += up;
  }
  A excl = __shfl_up_sync(0xffffffffu, incl, 1);
  if (lane == 0) excl = (A)0;
  __syncthreads();  // the previous call's readers of `shared` are done
  if (lane == 31) shared[warp] = incl;
  __syncthreads();
  if (threadIdx.x == 0) {
    A run = (A)0;
    for (int w = 0; w < nw; ++w) {
      const A tot = shared[w];
      shared[w] = run;
      run += tot;
    }
    shared[32] = run;
  }
  __syncthreads();
  *total = shared[32];
  return shared[warp] + excl;
}

// Scans the tile of scan positions [tile, tile + SCAN_TILE) of the row at `base` (stride inner)
// with the carry-in `carry`, each thread owning SCAN_ITEMS consecutive positions. Writes y unless
// it is null; returns the tile's total (in every thread). shared: 33 accumulators. Every thread
// of the block must call it.
__device__ A scan_tile(const T* x, T* y, long long base, long long len, long long inner, int exclusive, int reverse,
                       long long tile, A carry, A* shared) {
  A v[SCAN_ITEMS];
  A local = (A)0;
#pragma unroll
  for (int e = 0; e < SCAN_ITEMS; ++e) {
    const long long t = tile + (long long)threadIdx.x * SCAN_ITEMS + e;
    v[e] = t < len ? TO_A(x[base + scan_index(t, len, reverse) * inner]) : (A)0;
    local += v[e];
  }
  A total;
  const A prefix = block_exclusive_scan(local, shared, &total);
  if (y) {
    A run = carry + prefix;
#pragma unroll
    for (int e = 0; e < SCAN_ITEMS; ++e) {
      const long long t = tile + (long long)threadIdx.x * SCAN_ITEMS + e;
      if (t >= len) break;
      const long long off = base + scan_index(t, len, reverse) * inner;
      if (exclusive) y[off] = FROM_A(run);
      run += v[e];
      if (!exclusive) y[off] = FROM_A(run);
    }
  }
  return total;
}

// One block per row (rows = outer * inner, each of `len` elements at stride inner), tiles in
// order with a carry between them.
extern "C" __global__ void __launch_bounds__(SCAN_THREADS) cumsum_rows(const T* x, T* y, long long outer, long long len,
                                                                       long long inner, int exclusive, int reverse) {
  __shared__ A shared[33];
  const long long rows = outer * inner;
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const long long base = (row / inner) * len * inner + row % inner;
    A carry = (A)0;
    for (long long tile = 0; tile < len; tile += SCAN_TILE)
      carry += scan_tile(x, y, base, len, inner, exclusive, reverse, tile, carry, shared);
  }
}

// Few long rows: reduce-then-scan over blocks. grid (tiles, rows): 1) the total of every tile,
// 2) one block per row turns the totals into exclusive tile offsets, 3) every tile scans itself
// from its offset.
extern "C" __global__ void __launch_bounds__(SCAN_THREADS) cumsum_tile_sums(const T* x, A* sums, long long outer,
                                                                            long long len, long long inner, int reverse) {
  __shared__ A shared[33];
  const long long row = blockIdx.y, tiles = gridDim.x;
  const long long base = (row / inner) * len * inner + row % inner;
  const A tot = scan_tile(x, (T*)0, base, len, inner, 0, reverse, (long long)blockIdx.x * SCAN_TILE, (A)0, shared);
  if (threadIdx.x == 0) sums[row * tiles + blockIdx.x] = tot;
  (void)outer;
}
extern "C" __global__ void __launch_bounds__(SCAN_THREADS) cumsum_tile_offsets(A* sums, long long rows, long long tiles) {
  __shared__ A shared[33];
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    A* s = sums + row * tiles;
    A carry = (A)0;
    for (long long c = 0; c < tiles; c += blockDim.x) {
      const long long i = c + threadIdx.x;
      A total;
      const A prefix = block_exclusive_scan(i < tiles ? s[i] : (A)0, shared, &total);
      if (i < tiles) s[i] = carry + prefix;
      carry += total;
    }
  }
}
extern "C" __global__ void __launch_bounds__(SCAN_THREADS) cumsum_tiles(const T* x, T* y, const A* offsets,
                                                                        long long outer, long long len, long long inner,
                                                                        int exclusive, int reverse) {
  __shared__ A shared[33];
  const long long row = blockIdx.y, tiles = gridDim.x;
  const long long base = (row / inner) * len * inner + row % inner;
  scan_tile(x, y, base, len, inner, exclusive, reverse, (long long)blockIdx.x * SCAN_TILE,
            offsets[row * tiles + blockIdx.x], shared);
  (void)outer;
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
      const A v = TO_A(x[off]);
      if (exclusive) y[off] = FROM_A(acc);
      acc += v;
      if (!exclusive) y[off] = FROM_A(acc);
    }
  }
}
)CUDA";

}  // namespace rlx::cuda::ksrc
