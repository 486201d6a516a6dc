// Probe: what warms L2 for the next kernel, and is the warmth local to an L2 partition? After an
// L2 flush, kernel A touches X MB (plain loads, bulk prefetch or per-line prefetch), one slice per
// multiprocessor by %smid; kernel B then reads the X MB with evict-first loads (as rlx's decode
// GEMVs do), each SM the slice A touched on the same SM, a neighbour or one half the GPU away.
// Standalone; build and run with
//   nvcc -arch=sm_90 -O2 -o l2_warm bench/probes/l2_warm.cu && ./l2_warm
// Results: docs/benchmarks.md (2026-11-23, session 11).
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)
__device__ __forceinline__ unsigned smid() { unsigned s; asm volatile("mov.u32 %0, %smid;" : "=r"(s)); return s; }
__device__ __forceinline__ unsigned long long pol_ef() { unsigned long long p; asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p)); return p; }
__device__ __forceinline__ uint4 ld_hint(const uint4* a, unsigned long long pol) {
  uint4 r; asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(a), "l"(pol)); return r; }
// mode: 0 plain loads, 1 evict-first loads, 2 bulk prefetch, 3 prefetch.global.L2 per line
// shift: slice = (smid + shift) % nsm; xr: slice = smid ^ xr
__global__ void rd(const uint4* p, size_t words_per_sm, int nsm, int shift, int xr, int mode, uint4* sink) {
  __shared__ int slot;
  if (threadIdx.x == 0) slot = ((int)(smid() ^ xr) + shift) % nsm;
  __syncthreads();
  const uint4* b = p + (size_t)slot * words_per_sm;
  if (mode == 2) {
    const size_t bytes = words_per_sm * 16, piece = 16384;
    for (size_t o = threadIdx.x * piece; o < bytes; o += piece * blockDim.x)
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(__cvta_generic_to_global((const char*)b + o)), "r"((unsigned)min(piece, bytes - o)) : "memory");
    return;
  }
  if (mode == 3) {
    for (size_t i = threadIdx.x * 8; i < words_per_sm; i += blockDim.x * 8) asm volatile("prefetch.global.L2 [%0];" ::"l"(b + i));
    return;
  }
  unsigned long long pol = pol_ef();
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (size_t i = threadIdx.x; i < words_per_sm; i += 4 * blockDim.x) {
    uint4 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const size_t q = i + j * blockDim.x;
      v[j] = q < words_per_sm ? (mode == 1 ? ld_hint(b + q, pol) : __ldg(b + q)) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) acc.x ^= v[j].x, acc.y ^= v[j].y, acc.z ^= v[j].z, acc.w ^= v[j].w;
  }
  if (acc.x == 0x12345678u) sink[0] = acc;
}
int main() {
  int nsm; CK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0));
  const size_t flushb = 512ull << 20;
  char* fl; uint4 *w, *sink;
  CK(cudaMalloc(&fl, flushb)); CK(cudaMalloc(&w, 64ull << 20)); CK(cudaMalloc(&sink, 64));
  CK(cudaMemset(fl, 1, flushb)); CK(cudaMemset(w, 2, 64ull << 20));
  CK(cudaFuncSetAttribute(rd, cudaFuncAttributeMaxDynamicSharedMemorySize, 150 << 10));
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  // block size 1024 and 64 KB smem-free: one block per SM needs grid = nsm and 1 block / SM
  struct Case { const char* name; int amode, shift, xr; };
  Case cases[] = {{"no A (cold)", -1, 0, 0},        {"A plain, same SM", 0, 0, 0},   {"A plain, smid^1", 0, 0, 1},
                  {"A plain, smid^2", 0, 0, 2},     {"A plain, smid^8", 0, 0, 8},   {"A plain, +nsm/2", 0, -1, 0},
                  {"A plain, +1", 0, 1, 0},         {"A plain, +16", 0, 16, 0},     {"A bulk pf, same SM", 2, 0, 0},
                  {"A bulk pf, +nsm/2", 2, -1, 0},  {"A line pf, same SM", 3, 0, 0}, {"A line pf, +nsm/2", 3, -1, 0}};
  for (size_t mb : {12, 20, 30, 40}) {
    const size_t wps = (mb << 20) / 16 / nsm;
    printf("== %zu MB read by B (evict-first loads), %d SMs\n", mb, nsm);
    for (const Case& c : cases) {
      float best = 1e9f, tot = 0.f;
      for (int it = 0; it < 7; ++it) {
        rd<<<nsm, 1024, 150 << 10>>>((const uint4*)fl, flushb / 16 / nsm, nsm, 0, 0, 0, sink);  // flush L2
        if (c.amode >= 0) rd<<<nsm, 1024, 150 << 10>>>(w, wps, nsm, 0, 0, c.amode, sink);
        CK(cudaDeviceSynchronize());
        const int shift = c.shift < 0 ? nsm / 2 : c.shift;
        cudaEventRecord(e0);
        rd<<<nsm, 1024, 150 << 10>>>(w, wps, nsm, shift, c.xr, 1, sink);
        cudaEventRecord(e1);
        CK(cudaEventSynchronize(e1));
        float ms; cudaEventElapsedTime(&ms, e0, e1);
        if (it >= 2) { best = ms < best ? ms : best; tot += ms; }
      }
      printf("  %-24s B %7.2f us (best), %7.2f (mean)\n", c.name, best * 1000, tot / 5 * 1000);
    }
  }
  return 0;
}
