// Helpers the standalone decode probes share (mlp_fused.cu, read_ceiling.cu): error checks, the
// L2 evict-first weight loads rlx's GEMV uses, programmatic launches, bf16 dot products and a
// hash fill. Included by path from the probe's own directory; nothing else builds it.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

typedef __nv_bfloat16 bf;

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
