// Probe: how long after the last block of kernel P ends does kernel S, launched beside it, get
// going: through griddepcontrol.wait (programmatic dependent launch), through a counter that P's
// blocks release and S spins on, or as a plain stream successor. Standalone; build and run with
//   nvcc -arch=sm_90 -O2 -o pdl_latency bench/probes/pdl_latency.cu && ./pdl_latency
// (sm_90+; %globaltimer ticks in 256 ns steps on the H100). Results: docs/benchmarks.md.
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)
__device__ __forceinline__ unsigned long long gt() { unsigned long long t; asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t)); return t; }
__device__ __forceinline__ unsigned ld_acq(const unsigned* p) { unsigned v; asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v; }
__device__ __forceinline__ void red_rel(unsigned* p, unsigned v) { asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory"); }

// P: each block works ~work_ns (spinning), then stamps its end and, in flag mode, releases +1.
__global__ void kp(unsigned long long* pend, unsigned* cnt, long long work_ns, int flag, int early) {
  if (early) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const unsigned long long t0 = gt();
  while (gt() < t0 + work_ns + (blockIdx.x % 7) * 50) {}
  __syncthreads();
  if (threadIdx.x == 0) {
    if (flag) red_rel(cnt, 1u);
    pend[blockIdx.x] = gt();
  }
}
// S: stamps when it may read P's results.
__global__ void ks(unsigned long long* sgo, unsigned long long* sstart, const unsigned* cnt, unsigned target, int mode) {
  if (threadIdx.x == 0) sstart[blockIdx.x] = gt();
  if (mode == 0) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (mode == 1 && threadIdx.x == 0) while (ld_acq(cnt) < target) {}
  __syncthreads();
  if (threadIdx.x == 0) sgo[blockIdx.x] = gt();
}
int main() {
  const int PB = 128, PT = 768, SB = 128, ST = 128, reps = 50;
  unsigned long long *pend, *sgo, *sst; unsigned* cnt;
  CK(cudaMalloc(&pend, PB * 8)); CK(cudaMalloc(&sgo, SB * 8)); CK(cudaMalloc(&sst, SB * 8)); CK(cudaMalloc(&cnt, 4));
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const char* names[] = {"griddepcontrol.wait (PDL)", "counter, acquire spin (PDL)", "no PDL: plain stream order"};
  for (int mode = 0; mode < 3; ++mode) {
    for (long long work : {3000ll, 8000ll}) {
      std::vector<double> lat_min, lat_med, lat_max, early;
      unsigned target = 0;
      CK(cudaMemset(cnt, 0, 4));
      for (int it = 0; it < reps; ++it) {
        target += (mode == 1) ? PB : 0;
        cudaLaunchConfig_t cp = {}; cp.gridDim = PB; cp.blockDim = PT; cp.stream = s;
        CK(cudaLaunchKernelEx(&cp, kp, pend, cnt, work, mode == 1 ? 1 : 0, mode != 2 ? 1 : 0));
        cudaLaunchAttribute at[1]; at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[0].val.programmaticStreamSerializationAllowed = 1;
        cudaLaunchConfig_t cs = {}; cs.gridDim = SB; cs.blockDim = ST; cs.stream = s; cs.attrs = at; cs.numAttrs = mode != 2 ? 1 : 0;
        CK(cudaLaunchKernelEx(&cs, ks, sgo, sst, (const unsigned*)cnt, target, mode));
        CK(cudaStreamSynchronize(s));
        std::vector<unsigned long long> hp(PB), hs(SB), hst(SB);
        CK(cudaMemcpy(hp.data(), pend, PB * 8, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hs.data(), sgo, SB * 8, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hst.data(), sst, SB * 8, cudaMemcpyDeviceToHost));
        if (it < 5) continue;
        const double pe = (double)*std::max_element(hp.begin(), hp.end());
        std::vector<double> d; for (auto v : hs) d.push_back((double)v - pe);
        std::sort(d.begin(), d.end());
        lat_min.push_back(d.front()); lat_med.push_back(d[d.size() / 2]); lat_max.push_back(d.back());
        early.push_back((double)*std::min_element(hst.begin(), hst.end()) - pe);
      }
      auto med = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
      printf("%-30s P work %5lld ns: S go after P's last block (ns): first %7.0f median %7.0f last %7.0f; S first start %8.0f\n",
             names[mode], work, med(lat_min), med(lat_med), med(lat_max), med(early));
    }
  }
  return 0;
}
