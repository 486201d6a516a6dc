#pragma once
// Counter-based random numbers: the Philox-4x32-10 stream of the CPU backend
// (src/backends/cpu/philox.h) bit for bit, and RngUniform / RngNormal over it. Element i uses
// block i / 4 of the stream (seed, offset), so every element is computed independently.
//
// Exactness: every double operation of the CPU kernels is written with explicit round-to-nearest
// intrinsics (__dadd_rn, __dmul_rn: no fused multiply-add), so RngUniform matches the CPU bit
// for bit in every float dtype. RngNormal also needs log, cos and sin in double, whose last bit
// may differ from the host's libm; after rounding to f32 that shows only rarely, as 1 ulp.
namespace rlx::cuda::ksrc {

inline constexpr const char* kPhilox = R"CUDA(
struct Philox4 { unsigned x, y, z, w; };
// Ten rounds of Philox-4x32 on the counter with the key (k0, k1).
__device__ __forceinline__ Philox4 philox4x32_10(Philox4 c, unsigned k0, unsigned k1) {
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    if (r > 0) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
    const unsigned hi0 = __umulhi(0xD2511F53u, c.x), lo0 = 0xD2511F53u * c.x;
    const unsigned hi1 = __umulhi(0xCD9E8D57u, c.z), lo1 = 0xCD9E8D57u * c.z;
    c = Philox4{hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
  }
  return c;
}
// Block `block` of the rlx stream (seed, offset): counter (block lo, block hi, offset lo,
// offset hi), key (seed lo, seed hi).
__device__ __forceinline__ Philox4 philox_block(unsigned long long seed, unsigned long long offset,
                                                unsigned long long block) {
  return philox4x32_10(Philox4{(unsigned)block, (unsigned)(block >> 32), (unsigned)offset, (unsigned)(offset >> 32)},
                       (unsigned)seed, (unsigned)(seed >> 32));
}
__device__ __forceinline__ unsigned philox_word(const Philox4& p, int j) {
  return j == 0 ? p.x : (j == 1 ? p.y : (j == 2 ? p.z : p.w));
}
)CUDA";

// typedef T (f32/f16/bf16 storage); after kPhilox.
inline constexpr const char* kRng = R"CUDA(
// out[i] = round_T(low + width * bits_i * 2^-32), clamped into [lo_v, hi_v] (the smallest / largest
// values of T in [low, high), computed by the host like the CPU kernel does).
extern "C" __global__ void rng_uniform(T* out, long long n, unsigned long long seed, const long long* offset_ptr,
                                       double low, double width, float lo_v, float hi_v) {
  const unsigned long long offset = offset_ptr ? (unsigned long long)*offset_ptr : 0ull;
  const long long blocks = (n + 3) / 4;
  for (long long b = blockIdx.x * (long long)blockDim.x + threadIdx.x; b < blocks; b += (long long)gridDim.x * blockDim.x) {
    const Philox4 r = philox_block(seed, offset, (unsigned long long)b);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const long long i = b * 4 + j;
      if (i >= n) break;
      const double x = __dadd_rn(low, __dmul_rn(width, (double)philox_word(r, j) * 0x1p-32));
      T v = from_f<T>(__double2float_rn(x));
      const float vf = to_f(v);
      if (vf > hi_v) v = from_f<T>(hi_v);
      else if (vf < lo_v) v = from_f<T>(lo_v);
      out[i] = v;
    }
  }
}

// Box-Muller on word pairs (0, 1) and (2, 3) of each block: radius from the even word in (0, 1],
// angle from the odd word in [0, 1); element 4b + 2p gets the cos branch, 4b + 2p + 1 the sin.
extern "C" __global__ void rng_normal(T* out, long long n, unsigned long long seed, const long long* offset_ptr,
                                      double mean, double stddev) {
  const unsigned long long offset = offset_ptr ? (unsigned long long)*offset_ptr : 0ull;
  const double two_pi = 6.283185307179586476925286766559;
  const long long blocks = (n + 3) / 4;
  for (long long b = blockIdx.x * (long long)blockDim.x + threadIdx.x; b < blocks; b += (long long)gridDim.x * blockDim.x) {
    const Philox4 r = philox_block(seed, offset, (unsigned long long)b);
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const long long i = b * 4 + 2 * p;
      if (i >= n) break;
      const double u1 = __dmul_rn(__dadd_rn((double)philox_word(r, 2 * p), 1.0), 0x1p-32);
      const double u2 = __dmul_rn((double)philox_word(r, 2 * p + 1), 0x1p-32);
      const double radius = __dsqrt_rn(__dmul_rn(-2.0, log(u1)));
      const double angle = __dmul_rn(two_pi, u2);
      const double scale = __dmul_rn(stddev, radius);
      out[i] = from_f<T>(__double2float_rn(__dadd_rn(mean, __dmul_rn(scale, cos(angle)))));
      if (i + 1 < n) out[i + 1] = from_f<T>(__double2float_rn(__dadd_rn(mean, __dmul_rn(scale, sin(angle)))));
    }
  }
}
)CUDA";

}  // namespace rlx::cuda::ksrc
