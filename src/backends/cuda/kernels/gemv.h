#pragma once
// Skinny GEMM (M <= 4 rows, e.g. decode): C[M, N] = A[M, K] @ W[K, N], W row-major. GEMM
// libraries tile M by 64+ rows and leave most of the GPU idle when M is 1; this kernel streams W
// once with 16-byte loads, splits K across blocks to fill every SM, and reduces the splits in a
// second kernel that also converts to T. Compiled per T with VW = elements per 16 bytes.
namespace rlx::cuda::ksrc {

inline constexpr const char* kGemv = R"CUDA(
#define MR 4
#define KSL 8
// grid.x: column tiles of 32 * VW; grid.y: K splits of kchunk rows. part: [splits][M][N] f32.
extern "C" __global__ void __launch_bounds__(256) gemv_partial(const T* a, const T* w, float* part, int m,
                                                               long long k, long long n, long long kchunk) {
  __shared__ float red[KSL - 1][32][MR * VW];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const long long col = ((long long)blockIdx.x * 32 + tx) * VW;
  const long long k0 = (long long)blockIdx.y * kchunk, k1 = min(k, k0 + kchunk);
  float acc[MR][VW];
#pragma unroll
  for (int r = 0; r < MR; ++r)
#pragma unroll
    for (int v = 0; v < VW; ++v) acc[r][v] = 0.f;
  if (col < n) {
#pragma unroll 4
    for (long long kk = k0 + ty; kk < k1; kk += KSL) {
      const Vec<T, VW> wv = *(const Vec<T, VW>*)(w + kk * n + col);
#pragma unroll
      for (int r = 0; r < MR; ++r) {
        if (r < m) {
          const float x = to_f(a[r * k + kk]);
#pragma unroll
          for (int v = 0; v < VW; ++v) acc[r][v] += x * to_f(wv.v[v]);
        }
      }
    }
  }
  if (ty > 0) {
#pragma unroll
    for (int r = 0; r < MR; ++r)
#pragma unroll
      for (int v = 0; v < VW; ++v) red[ty - 1][tx][r * VW + v] = acc[r][v];
  }
  __syncthreads();
  if (ty == 0 && col < n) {
    for (int s = 0; s < KSL - 1; ++s)
#pragma unroll
      for (int r = 0; r < MR; ++r)
#pragma unroll
        for (int v = 0; v < VW; ++v) acc[r][v] += red[s][tx][r * VW + v];
    for (int r = 0; r < m; ++r)
#pragma unroll
      for (int v = 0; v < VW; ++v) part[((long long)blockIdx.y * m + r) * n + col + v] = acc[r][v];
  }
}

// c[r, j] = sum over splits of part[s, r, j], converted to T.
extern "C" __global__ void gemv_reduce(const float* part, T* c, int splits, long long mn) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < mn; i += (long long)gridDim.x * blockDim.x) {
    float s = 0.f;
    for (int p = 0; p < splits; ++p) s += part[p * mn + i];
    c[i] = from_f<T>(s);
  }
}
)CUDA";

}  // namespace rlx::cuda::ksrc
