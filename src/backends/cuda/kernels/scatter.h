#pragma once
// ScatterAdd (typedef T: data storage, I: index storage) and GroupedMatMul (typedef T, I;
// #define VW: elements per weight load, 16 bytes or 1).
namespace rlx::cuda::ksrc {

inline constexpr const char* kScatterAdd = R"CUDA(
// Atomic out[...] += v in the element's dtype: hardware atomics for 32/64-bit words, a
// compare-and-swap loop that rounds every addition to the dtype for f16/bf16 (like the CPU),
// and a CAS on the enclosing aligned 32-bit word for 8/16-bit integers (wrapping).
__device__ __forceinline__ void atomic_add_elem(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add_elem(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add_elem(i32_t* p, i32_t v) { atomicAdd((unsigned*)p, (unsigned)v); }
__device__ __forceinline__ void atomic_add_elem(u32_t* p, u32_t v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add_elem(i64_t* p, i64_t v) {
  atomicAdd((unsigned long long*)p, (unsigned long long)v);
}
template <class H> __device__ __forceinline__ void atomic_add_half(H* p, H v) {
  unsigned short* a = (unsigned short*)p;
  unsigned short old = *a, assumed;
  do {
    assumed = old;
    H cur;
    cur.b = assumed;
    const H sum = from_f<H>(to_f(cur) + to_f(v));
    old = atomicCAS(a, assumed, sum.b);
  } while (old != assumed);
}
__device__ __forceinline__ void atomic_add_elem(f16_t* p, f16_t v) { atomic_add_half(p, v); }
__device__ __forceinline__ void atomic_add_elem(bf16_t* p, bf16_t v) { atomic_add_half(p, v); }
template <class S> __device__ __forceinline__ void atomic_add_small(S* p, S v) {
  unsigned* w = (unsigned*)((unsigned long long)p & ~3ull);
  const unsigned shift = (unsigned)((unsigned long long)p & 3ull) * 8u;
  const unsigned mask = (sizeof(S) == 1 ? 0xffu : 0xffffu) << shift;
  unsigned old = *w, assumed;
  do {
    assumed = old;
    const S cur = (S)((assumed & mask) >> shift);
    const S sum = (S)(cur + v);
    old = atomicCAS(w, assumed, (assumed & ~mask) | (((unsigned)sum << shift) & mask));
  } while (old != assumed);
}
__device__ __forceinline__ void atomic_add_elem(i8_t* p, i8_t v) { atomic_add_small(p, v); }
__device__ __forceinline__ void atomic_add_elem(u8_t* p, u8_t v) { atomic_add_small(p, v); }
__device__ __forceinline__ void atomic_add_elem(i16_t* p, i16_t v) { atomic_add_small(p, v); }

// One thread per index position i (row-major over idx_dims): the target is data's element with
// the position's coordinates, the axis coordinate replaced by idx[i] (negative counts from the
// end). out already holds a copy of data. An index outside [-axis_size, axis_size) records
// error 2 and adds nothing.
struct ScatterDims { long long idx_dims[8]; long long data_strides[8]; int rank; int axis; long long axis_size; };
extern "C" __global__ void scatter_add(const I* idx, const T* upd, T* out, ScatterDims g, long long n, int* err) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    long long t = i, off = 0;
    for (int d = g.rank - 1; d >= 0; --d) {
      const long long c = t % g.idx_dims[d];
      t /= g.idx_dims[d];
      if (d != g.axis) off += c * g.data_strides[d];
    }
    long long k = (long long)idx[i];
    if (k < 0) k += g.axis_size;
    if (k < 0 || k >= g.axis_size) { report_error(err, 2); continue; }
    atomic_add_elem(out + off + k * g.data_strides[g.axis], upd[i]);
  }
}
)CUDA";

inline constexpr const char* kGroupedMatMul = R"CUDA(
// out[m, :] = x[m, :] @ w[idx[m]] with x (M, K), w (E, K, N), f32 accumulation. A block of 256
// threads covers 32 * VW columns of one row: lane l owns columns [VW * l, VW * l + VW) of the
// tile (one VW-element load of the weight row per k), warp g the k values = g (mod 8) of the
// block's k chunk [k0, k0 + kchunk); the 8 warps' sums meet in shared memory. With gridDim.z > 1
// (k split over blocks) the chunk sums go to part[z, m, :] and grouped_finish adds them in
// order. An expert index outside [0, E) records error 3 and the row gets zeros.
extern "C" __global__ void __launch_bounds__(256) grouped_gemv(const T* x, const T* w, const I* idx, T* out,
                                                               float* part, long long M, long long K, long long N,
                                                               long long E, long long kchunk, int* err) {
  __shared__ float red[8][32 * VW];
  const int lane = threadIdx.x & 31, kg = threadIdx.x >> 5;
  const long long n0 = ((long long)blockIdx.x * 32 + lane) * VW;
  const long long k0 = (long long)blockIdx.z * kchunk;
  const long long k1 = k0 + kchunk < K ? k0 + kchunk : K;
  for (long long m = blockIdx.y; m < M; m += gridDim.y) {
    const long long e = (long long)idx[m];
    const bool bad = e < 0 || e >= E;
    if (bad && threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.z == 0) report_error(err, 3);
    float acc[VW];
#pragma unroll
    for (int v = 0; v < VW; ++v) acc[v] = 0.f;
    if (!bad && n0 < N) {
      const T* xr = x + m * K;
      const T* we = w + e * K * N;
      if (VW > 1 && n0 + VW <= N) {
        for (long long k = k0 + kg; k < k1; k += 8) {
          const float xv = to_f(xr[k]);
          const Vec<T, VW> wv = *(const Vec<T, VW>*)(we + k * N + n0);
#pragma unroll
          for (int v = 0; v < VW; ++v) acc[v] += xv * to_f(wv.v[v]);
        }
      } else {
        for (long long k = k0 + kg; k < k1; k += 8) {
          const float xv = to_f(xr[k]);
#pragma unroll
          for (int v = 0; v < VW; ++v)
            if (n0 + v < N) acc[v] += xv * to_f(we[k * N + n0 + v]);
        }
      }
    }
#pragma unroll
    for (int v = 0; v < VW; ++v) red[kg][lane * VW + v] = acc[v];
    __syncthreads();
    if (kg == 0) {
#pragma unroll
      for (int v = 0; v < VW; ++v) {
        float s = 0.f;
        for (int g = 0; g < 8; ++g) s += red[g][lane * VW + v];
        const long long n = n0 + v;
        if (n < N) {
          if (part) part[((long long)blockIdx.z * M + m) * N + n] = s;
          else out[m * N + n] = from_f<T>(s);
        }
      }
    }
    __syncthreads();
  }
}

// out[m, n] = round_T(sum over the chunks z in order of part[z, m, n]).
extern "C" __global__ void grouped_finish(const float* part, T* out, long long M, long long N, long long chunks) {
  const long long total = M * N;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    float s = 0.f;
    for (long long z = 0; z < chunks; ++z) s += part[z * total + i];
    out[i] = from_f<T>(s);
  }
}
)CUDA";

}  // namespace rlx::cuda::ksrc
