// Helpers the standalone decode probes share (mlp_fused.cu, read_ceiling.cu): error checks, the
// L2 evict-first weight loads and bulk L2 prefetches rlx's GEMV uses, programmatic launches,
// bf16 dot products, the GEMV in rlx's row order, a hash fill, graph capture and event timing. Included by path from the probe's own directory; nothing else builds it.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

typedef __nv_bfloat16 bf;

// The Llama-1B decode shapes both probes stream: hidden, intermediate, layers.
constexpr int H = 2048, I = 5632, L = 16;

__device__ __forceinline__ unsigned long long pol_ef() { unsigned long long p; asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p)); return p; }
__device__ __forceinline__ uint4 ld_ef(const uint4* a, unsigned long long pol) {
  uint4 r; asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(a), "l"(pol)); return r; }
// Wait for the previous grid, then let the next one launch.
__device__ __forceinline__ void pdl_begin() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ __forceinline__ float wsum(float v) { for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o); return v; }
__device__ __forceinline__ float dot8(uint4 w, uint4 x) {
  const bf* a = reinterpret_cast<const bf*>(&w); const bf* b = reinterpret_cast<const bf*>(&x);
  float s = 0.f;
#pragma unroll
  for (int e = 0; e < 8; ++e) s = fmaf(__bfloat162float(a[e]), __bfloat162float(b[e]), s);
  return s;
}

// The same with the L2 fetch-size hint: a miss brings the whole 256-byte block from DRAM.
__device__ __forceinline__ uint4 ld_ef256(const uint4* a, unsigned long long pol) {
  uint4 r; asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4], %5;" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(a), "l"(pol)); return r; }
__device__ __forceinline__ void pf_l2(const void* p, unsigned bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(__cvta_generic_to_global(p)), "r"(bytes) : "memory"); }
__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.f + expf(-g)) * u; }
// Each block's share of pf_bytes, a lane per 32 KB piece from its last warp.
__device__ __forceinline__ void prefetch_share(const char* pf, long long pfb) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (pfb <= 0 || warp != (int)(blockDim.x >> 5) - 1) return;
  const long long share = ((pfb + gridDim.x - 1) / gridDim.x + 15) / 16 * 16, p1 = min(pfb, share * (blockIdx.x + 1));
  for (long long o = share * blockIdx.x + 32768ll * lane; o < p1; o += 32768ll * 32) pf_l2(pf + o, (unsigned)min(32768ll, p1 - o));
}

// rlx's packed-GEMV row order as a probe: warp w of block b owns rows b + grid * w, ..., U_
// 16-byte words per lane in flight, the first batch before the programmatic-launch wait, then
// out[n] = Wt[n, :] . a (+ res[n]) with a = x, or SwiGLU(x[0:I], x[I:2I]); pf / pfb: bytes of
// the next weight this launch prefetches into L2. HINT: loads with the 256-byte L2 fetch size.
// DOT = 0 keeps the loads and drops the arithmetic (an xor checksum is stored instead). Called
// by each probe's __global__ wrapper of its own signature.
__device__ __forceinline__ unsigned mix(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }
template <int W_, int U_, int HINT, int DOT>
__device__ __forceinline__ void gemv_rows(const bf* x, const uint4* w, bf* out, int n, int kw, int swiglu,
                                          const bf* res, const char* pf, long long pfb) {
  constexpr int NT = W_ * 32, WARPS = W_, U = U_;
  __shared__ uint4 xs4[I / 8];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned long long pol = pol_ef();
  int row = blockIdx.x + gridDim.x * warp, q0 = 0;
  bool have = row < n;
  uint4 wr[U];
#define GEMV_ROWS_LOAD() _Pragma("unroll") for (int j = 0; j < U; ++j) { const int q = q0 + j * 32 + lane; if (q < kw) wr[j] = HINT ? ld_ef256(w + (long long)row * kw + q, pol) : ld_ef(w + (long long)row * kw + q, pol); }
  if (have) { GEMV_ROWS_LOAD(); }
  prefetch_share(pf, pfb);
  pdl_begin();
  const uint4* x4 = reinterpret_cast<const uint4*>(x);
  for (int i = threadIdx.x; i < kw; i += NT) {
    if (swiglu) {
      const uint4 g4 = __ldcg(x4 + i), u4 = __ldcg(x4 + I / 8 + i);
      const bf* g = reinterpret_cast<const bf*>(&g4); const bf* u = reinterpret_cast<const bf*>(&u4);
      uint4 o; bf* ob = reinterpret_cast<bf*>(&o);
      for (int e = 0; e < 8; ++e) ob[e] = __float2bfloat16(silu_mul(__bfloat162float(g[e]), __bfloat162float(u[e])));
      xs4[i] = o;
    } else {
      xs4[i] = __ldcg(x4 + i);
    }
  }
  __syncthreads();
  float acc = 0.f;
  unsigned cs = 0;
  while (have) {
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const int q = q0 + j * 32 + lane;
      if (q < kw) { if (DOT) acc += dot8(wr[j], xs4[q]); else cs ^= mix(wr[j]); }
    }
    const int cur = row;
    q0 += U * 32;
    const bool done = q0 >= kw;
    if (done) row += gridDim.x * WARPS, q0 = 0;
    have = row < n;
    if (have) { GEMV_ROWS_LOAD(); }
    if (done) {
      acc = DOT ? wsum(acc) : (float)(cs & 1);
      if (lane == 0) out[cur] = __float2bfloat16(acc + (res ? __bfloat162float(res[cur]) : 0.f));
      acc = 0.f;
    }
  }
}
#undef GEMV_ROWS_LOAD

// Compares two bf16 device vectors of n elements (after `s` is done): the largest |a - b|, and the
// largest |a| in *amax.
inline double max_abs_diff(cudaStream_t s, const bf* a, const bf* b, int n, double* amax) {
  CK(cudaStreamSynchronize(s));
  std::vector<bf> ha(n), hb(n);
  CK(cudaMemcpy(ha.data(), a, n * sizeof(bf), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hb.data(), b, n * sizeof(bf), cudaMemcpyDeviceToHost));
  double md = 0, mx = 0;
  for (int j = 0; j < n; ++j) {
    md = std::max(md, (double)fabsf(__bfloat162float(ha[j]) - __bfloat162float(hb[j])));
    mx = std::max(mx, (double)fabsf(__bfloat162float(ha[j])));
  }
  *amax = mx;
  return md;
}

// p[i] uniform in [-scale / 2, scale / 2] from a hash of i and seed.
__global__ void fill(bf* p, long long n, unsigned seed, float scale) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed; h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
    p[i] = __float2bfloat16(((h & 0xffff) / 65535.f - 0.5f) * scale);
  }
}

// A launch with the programmatic stream-serialization attribute (as rlx launches its GEMVs).
template <class... P, class... A>
void launch(void (*k)(P...), int blocks, int threads, cudaStream_t s, A... a) {
  cudaLaunchConfig_t c = {};
  c.gridDim = dim3(blocks), c.blockDim = dim3(threads), c.stream = s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  c.attrs = at, c.numAttrs = 1;
  CK(cudaLaunchKernelEx(&c, k, a...));
}

// Ends the capture on `s` and instantiates the graph.
inline cudaGraphExec_t end_capture(cudaStream_t s) {
  cudaGraph_t g;
  CK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t e;
  CK(cudaGraphInstantiate(&e, g, 0));
  return e;
}

// Milliseconds that `work` (issued on `s`) takes between two events.
template <class F>
float time_on(cudaStream_t s, cudaEvent_t e0, cudaEvent_t e1, F work) {
  CK(cudaEventRecord(e0, s));
  work();
  CK(cudaEventRecord(e1, s));
  CK(cudaEventSynchronize(e1));
  float ms;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  return ms;
}
