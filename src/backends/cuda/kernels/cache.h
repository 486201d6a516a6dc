#pragma once
// CacheWrite (typedef T: cache and rows storage, I: position storage).
namespace rlx::cuda::ksrc {

inline constexpr const char* kCacheWrite = R"CUDA(
// One thread per element of rows (B, S, inner): row i of batch b lands in cache row pos[i], unless
// a later row names the same position (the later row wins, as on the CPU). out already holds the
// cache (or is the cache itself). A position outside [0, m) records error 9 and writes nothing.
extern "C" __global__ void cache_write(const I* pos, const T* rows, T* out, long long s, long long m, long long inner,
                                       long long n, int* err) {
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x) {
    const long long c = e % inner, t = e / inner, i = t % s, b = t / s;
    const long long p = (long long)pos[i];
    if (p < 0 || p >= m) { report_error(err, 9); continue; }
    bool later = false;
    for (long long j = i + 1; j < s && !later; ++j) later = (long long)pos[j] == p;
    if (!later) out[(b * m + p) * inner + c] = rows[e];
  }
}
)CUDA";

}  // namespace rlx::cuda::ksrc
