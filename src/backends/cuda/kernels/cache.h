#pragma once
// CacheWrite (typedef T: cache and rows storage, I: position storage, TC: RoPE table storage).
namespace rlx::cuda::ksrc {

inline constexpr const char* kCacheWrite = R"CUDA(
// One block per row of rows (B, S, inner) at a time: row i of batch b lands in cache row pos[i]
// (pos[b * S + i] with pb: (B, S) positions), unless a later row of that batch entry names the
// same position (the later row wins, as on the CPU; the block's
// threads look for one together, once per row). out already holds the cache (or is the cache
// itself). A position outside [0, m) records error 9 and writes nothing. grid.y = 2: blocks of
// y = 1 write rows1 into out1 (a second cache of the same shape and positions).
// Bit y of `rot` set: rows of that half are a RoPE's input (heads of hd values, the first n_rot
// rotated in pairs by the cos / sin rows of n_rot / 2 per chunk row, or per batch and chunk row
// with per_batch; neox: pairs (p, p + n_rot / 2), else (2p, 2p + 1)), written rotated (compiled
// with ROPE 1 only: float T).
extern "C" __global__ void cache_write(const I* pos, const T* rows0, T* out0, const T* rows1, T* out1, long long s,
                                       long long m, long long inner, long long nrows, int* err, int pb,
                                       const TC* cs, const TC* sn, long long hd, long long n_rot, int per_batch, int neox,
                                       int rot) {
  const T* rows = blockIdx.y ? rows1 : rows0;
  T* out = blockIdx.y ? out1 : out0;
  const bool rotate = (rot >> blockIdx.y) & 1;
  const long long half = n_rot / 2;
  for (long long t = blockIdx.x; t < nrows; t += gridDim.x) {
    const long long i = t % s, b = t / s;
    const I* bpos = pb ? pos + b * s : pos;
    const long long p = (long long)bpos[i];
    const bool bad = p < 0 || p >= m;
    int later = 0;
    for (long long j = i + 1 + threadIdx.x; j < s && !bad; j += blockDim.x) later |= (long long)bpos[j] == p;
    later = __syncthreads_or(later);
    if (bad) {
      if (threadIdx.x == 0) report_error(err, 9);
      continue;
    }
    if (later) continue;
    const T* src = rows + t * inner;
    T* dst = out + (b * m + p) * inner;
    if (!rotate) {
      for (long long c = threadIdx.x; c < inner; c += blockDim.x) dst[c] = src[c];
      continue;
    }
#if ROPE
    const long long table = (per_batch ? t : i) * half;
    for (long long c = threadIdx.x; c < inner; c += blockDim.x) {
      const long long h = c / hd, d = c - h * hd;
      if (d >= n_rot) {
        dst[c] = src[c];
        continue;
      }
      const long long q = neox ? (d < half ? d : d - half) : d >> 1;
      long long i1, i2;
      rope_pair(neox != 0, q, half, i1, i2);
      const float x1 = to_f(src[h * hd + i1]), x2 = to_f(src[h * hd + i2]);
      dst[c] = from_f<T>(rope_rotate(d == i1, x1, x2, to_f(cs[table + q]), to_f(sn[table + q])));
    }
#endif
  }
}
)CUDA";

}  // namespace rlx::cuda::ksrc
