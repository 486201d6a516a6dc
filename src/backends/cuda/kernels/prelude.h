#pragma once
// CUDA C++ prelude shared by every NVRTC kernel: self-contained storage types (no toolkit
// headers are needed at run time), f32 <-> f16/bf16 conversions (round to nearest even), warp
// and block reductions, and the device-side error flag.
namespace rlx::cuda::ksrc {

inline constexpr const char* kPrelude = R"CUDA(
#define RLX_NEG_INF __int_as_float(0xff800000)
#define RLX_INF __int_as_float(0x7f800000)
typedef signed char i8_t;
typedef short i16_t;
typedef int i32_t;
typedef long long i64_t;
typedef unsigned char u8_t;
typedef unsigned int u32_t;
struct __align__(2) f16_t { unsigned short b; };
struct __align__(2) bf16_t { unsigned short b; };

__device__ __forceinline__ float to_f(float x) { return x; }
template <class X> __device__ __forceinline__ float to_f(X x) { return (float)x; }  // integers, bool
__device__ __forceinline__ float to_f(f16_t x) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.b)); return f;
}
__device__ __forceinline__ float to_f(bf16_t x) { return __uint_as_float(((unsigned)x.b) << 16); }
template <class T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ double from_f<double>(float v) { return v; }
template <> __device__ __forceinline__ f16_t from_f<f16_t>(float v) {
  f16_t r; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.b) : "f"(v)); return r;
}
template <> __device__ __forceinline__ bf16_t from_f<bf16_t>(float v) {
  unsigned u = __float_as_uint(v);
  bf16_t r;
  if ((u & 0x7fffffffu) > 0x7f800000u) { r.b = (unsigned short)((u >> 16) | 0x40u); return r; }  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  r.b = (unsigned short)(u >> 16);
  return r;
}

// A run of V elements loaded/stored with one vector access (the pointer must be aligned).
template <class T, int V> struct __align__(sizeof(T) * V) Vec { T v[V]; };

// Warp and block reductions over f32 (or f64: the rows of f64 tensors) values.
__device__ __forceinline__ float rlx_fmax(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double rlx_fmax(double a, double b) { return fmax(a, b); }
template <class V> __device__ __forceinline__ V warp_sum(V v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <class V> __device__ __forceinline__ V warp_max(V v) {
  for (int o = 16; o > 0; o >>= 1) v = rlx_fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Block-wide reductions; every thread of the block must call them (scratch: 32 values).
template <class V> __device__ __forceinline__ V block_sum(V v, V* scratch) {
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nw ? scratch[lane] : (V)0;
  return warp_sum(v);
}
template <class V> __device__ __forceinline__ V block_max(V v, V* scratch) {
  v = warp_max(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nw ? scratch[lane] : (V)RLX_NEG_INF;
  return warp_max(v);
}

// Programmatic dependent launch (sm_90+): a kernel launched with KernelLaunch::pdl() may be
// scheduled while the previous kernel of the stream still runs. It calls this first: wait until
// the previous grid has completed and its writes are visible, then let the next kernel of the
// stream start launching (it waits the same way before touching memory). A no-op otherwise.
__device__ __forceinline__ void rlx_pdl_begin() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The same with the next kernel let go first: it may launch (and run its own work before its
// wait) while this one still waits, for kernels too small to hold the GPU up (a block or a few).
// Whatever the dependent reads after its own wait is still complete: its wait covers this grid,
// which completes only after this wait.
__device__ __forceinline__ void rlx_pdl_begin_after_dependents() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Asks the memory system to bring the cache line holding `p` (global) into L2.
__device__ __forceinline__ void rlx_prefetch_line_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }
// Asks the memory system to bring `bytes` (a multiple of 16, from a 16-byte aligned global
// address) into L2 in the background (sm_90+ bulk prefetch; nothing on older devices). A hint,
// which the memory system may drop in part.
__device__ __forceinline__ void rlx_prefetch_l2(const void* p, unsigned bytes) {
#if __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(__cvta_generic_to_global(p)), "r"(bytes) : "memory");
#else
  (void)p, (void)bytes;
#endif
}
// Streamed operands (a decode GEMV's weights, read once per run) are loaded with an L2
// evict-first policy (sm_80+): they pass through L2 without displacing what stays hot in it
// across kernels (the kernels' code and parameters, activations, KV caches). Without it, the
// weights of one decode layer (90 MB in bf16 Llama-1B) turn the 50 MB L2 over, and every kernel
// then fetches its code from DRAM as it reaches each part of it.
__device__ __forceinline__ unsigned long long rlx_evict_first_policy() {
  unsigned long long p = 0;
#if __CUDA_ARCH__ >= 800
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
#endif
  return p;
}
__device__ __forceinline__ uint4 rlx_ld_stream(const uint4* a, unsigned long long policy) {
#if __CUDA_ARCH__ >= 800
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(a), "l"(policy));
  return r;
#else
  (void)policy;
  return __ldg(a);
#endif
}
// A GEMV's weight words: streamed with the evict-first policy when `evict_first` (the kernel's
// compile-time EVF), else through the read-only path.
__device__ __forceinline__ unsigned long long rlx_weight_policy(bool evict_first) {
  return evict_first ? rlx_evict_first_policy() : 0ull;
}
__device__ __forceinline__ uint4 rlx_ld_weight(const uint4* a, unsigned long long policy, bool evict_first) {
  return evict_first ? rlx_ld_stream(a, policy) : __ldg(a);
}

// Rotary embedding, shared by the Rope kernel and the decode attention's rotation on load: pair
// p of a row's rotated part is elements (p, p + half) in the NeoX style, else (2p, 2p + 1); with
// the pair's cos c and sin s the first becomes x1 c - x2 s and the second x2 c + x1 s.
template <class I>
__device__ __forceinline__ void rope_pair(bool neox, I p, I half, I& i1, I& i2) {
  i1 = neox ? p : 2 * p;
  i2 = neox ? p + half : 2 * p + 1;
}
__device__ __forceinline__ float rope_rotate(bool first, float x1, float x2, float c, float s) {
  return first ? x1 * c - x2 * s : x2 * c + x1 * s;
}

// Kernels that detect bad data (an index out of range) record the first error code here; the
// host checks it after the run and raises rlx::Error.
__device__ __forceinline__ void report_error(int* flag, int code) { atomicCAS(flag, 0, code); }
)CUDA";

}  // namespace rlx::cuda::ksrc
