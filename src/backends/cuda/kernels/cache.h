#pragma once
// CacheWrite (typedef T: cache and rows storage, I: position storage).
namespace rlx::cuda::ksrc {

inline constexpr const char* kCacheWrite = R"CUDA(
// One block per row of rows (B, S, inner) at a time: row i of batch b lands in cache row pos[i],
// unless a later row names the same position (the later row wins, as on the CPU; the block's
// threads look for one together, once per row). out already holds the cache (or is the cache
// itself). A position outside [0, m) records error 9 and writes nothing. grid.y = 2: blocks of
// y = 1 write rows1 into out1 (a second cache of the same shape and positions).
extern "C" __global__ void cache_write(const I* pos, const T* rows0, T* out0, const T* rows1, T* out1, long long s,
                                       long long m, long long inner, long long nrows, int* err) {
  const T* rows = blockIdx.y ? rows1 : rows0;
  T* out = blockIdx.y ? out1 : out0;
  for (long long t = blockIdx.x; t < nrows; t += gridDim.x) {
    const long long i = t % s, b = t / s;
    const long long p = (long long)pos[i];
    const bool bad = p < 0 || p >= m;
    int later = 0;
    for (long long j = i + 1 + threadIdx.x; j < s && !bad; j += blockDim.x) later |= (long long)pos[j] == p;
    later = __syncthreads_or(later);
    if (bad) {
      if (threadIdx.x == 0) report_error(err, 9);
      continue;
    }
    if (later) continue;
    const T* src = rows + t * inner;
    T* dst = out + (b * m + p) * inner;
    for (long long c = threadIdx.x; c < inner; c += blockDim.x) dst[c] = src[c];
  }
}
)CUDA";

}  // namespace rlx::cuda::ksrc
