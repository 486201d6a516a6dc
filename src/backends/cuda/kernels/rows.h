#pragma once
// Row kernels (compiled per storage type T, with `typedef <type> T;` in front): softmax and
// log-softmax, LayerNorm / RmsNorm (+ fused residual) and SwiGLU. Statistics are accumulated in
// f32; one block per row with warp-shuffle + shared-memory block reductions. The softmax
// (uncached) computes in the type A with TO_A / FROM_A / A_EXP / A_LOG, all defined by the
// lowering: f32 for f32/f16/bf16, double for f64 rows.
//
// Reductions (kReduce) are a separate source compiled for every dtype the backend reduces: the
// kernels combine values with reduce_init / reduce_step / reduce_final over the accumulator
// type A, which kReduceFloat (NaN-propagating Max / Min, f32 or double) or kReduceInt (64-bit
// integers, sums and products modulo 2^64 as the CPU computes them) defines.
namespace rlx::cuda::ksrc {

inline constexpr const char* kRows = R"CUDA(
// y = softmax(x) (or log-softmax) over rows of `len` contiguous elements; one block per row.
extern "C" __global__ void softmax_rows(const T* x, T* y, long long rows, long long len, int log_out) {
  rlx_pdl_begin();
  __shared__ A scratch[32];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * len;
    T* yr = y + r * len;
    A m = RLX_NEG_INF;
    for (long long j = threadIdx.x; j < len; j += blockDim.x) m = rlx_fmax(m, TO_A(xr[j]));
    m = block_max(m, scratch);
    A s = 0;
    for (long long j = threadIdx.x; j < len; j += blockDim.x) s += A_EXP(TO_A(xr[j]) - m);
    s = block_sum(s, scratch);
    if (log_out) {
      const A ls = A_LOG(s);
      for (long long j = threadIdx.x; j < len; j += blockDim.x) yr[j] = FROM_A(TO_A(xr[j]) - m - ls);
    } else {
      const A inv = (A)1 / s;
      for (long long j = threadIdx.x; j < len; j += blockDim.x) yr[j] = FROM_A(A_EXP(TO_A(xr[j]) - m) * inv);
    }
  }
}

// The same with the row held in shared memory (len * 4 bytes of dynamic shared memory): x is
// read from global memory once; with `vec` (every row and pointer 16-byte aligned) through
// VV-element vector loads and stores.
extern "C" __global__ void softmax_rows_cached(const T* x, T* y, long long rows, long long len, int log_out, int vec) {
  rlx_pdl_begin();
  __shared__ float scratch[32];
  extern __shared__ float row[];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * len;
    T* yr = y + r * len;
    float m = RLX_NEG_INF;
    if (vec) {
      for (long long c = threadIdx.x; c < len / VV; c += blockDim.x) {
        const Vec<T, VV> xv = ((const Vec<T, VV>*)xr)[c];
#pragma unroll
        for (int e = 0; e < VV; ++e) {
          const float v = to_f(xv.v[e]);
          row[c * VV + e] = v;
          m = fmaxf(m, v);
        }
      }
    } else {
      for (long long j = threadIdx.x; j < len; j += blockDim.x) {
        const float v = to_f(xr[j]);
        row[j] = v;
        m = fmaxf(m, v);
      }
    }
    m = block_max(m, scratch);  // also the barrier before other threads read the row
    float s = 0.f;
    for (long long j = threadIdx.x; j < len; j += blockDim.x) s += expf(row[j] - m);
    s = block_sum(s, scratch);
    const float ls = logf(s), inv = 1.f / s;
    if (vec) {
      for (long long c = threadIdx.x; c < len / VV; c += blockDim.x) {
        Vec<T, VV> o;
#pragma unroll
        for (int e = 0; e < VV; ++e) {
          const float v = row[c * VV + e] - m;
          o.v[e] = from_f<T>(log_out ? v - ls : expf(v) * inv);
        }
        ((Vec<T, VV>*)yr)[c] = o;
      }
    } else {
      for (long long j = threadIdx.x; j < len; j += blockDim.x) {
        const float v = row[j] - m;
        yr[j] = from_f<T>(log_out ? v - ls : expf(v) * inv);
      }
    }
    __syncthreads();
  }
}

// Softmax over the middle axis of [outer, axis, inner] (inner > 1): one thread per column.
extern "C" __global__ void softmax_cols(const T* x, T* y, long long outer, long long axis, long long inner, int log_out) {
  rlx_pdl_begin();
  const long long cols = outer * inner;
  for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < cols; c += (long long)gridDim.x * blockDim.x) {
    const long long o = c / inner, i = c % inner;
    const T* xc = x + o * axis * inner + i;
    T* yc = y + o * axis * inner + i;
    A m = RLX_NEG_INF;
    for (long long a = 0; a < axis; ++a) m = rlx_fmax(m, TO_A(xc[a * inner]));
    A s = 0;
    for (long long a = 0; a < axis; ++a) s += A_EXP(TO_A(xc[a * inner]) - m);
    const A ls = A_LOG(s), inv = (A)1 / s;
    for (long long a = 0; a < axis; ++a) {
      const A v = TO_A(xc[a * inner]) - m;
      yc[a * inner] = FROM_A(log_out ? v - ls : A_EXP(v) * inv);
    }
  }
}

// LayerNorm (rms = 0) or RmsNorm (rms = 1) of rows of `len` elements: v = x, or v = round_T(x + res)
// when res is given; y = (v - mean) * rsqrt(var + eps) * gamma (+ beta). One block per row.
__device__ __forceinline__ float norm_input(const T* xr, const T* rr, long long j) {
  return rr ? to_f(from_f<T>(to_f(xr[j]) + to_f(rr[j]))) : to_f(xr[j]);
}
extern "C" __global__ void norm_rows(const T* x, const T* res, const T* gamma, const T* beta, T* y, long long rows,
                                     long long len, float eps, int rms) {
  rlx_pdl_begin();
  __shared__ float scratch[32];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * len;
    const T* rr = res ? res + r * len : nullptr;
    T* yr = y + r * len;
    float mean = 0.f;
    if (!rms) {
      float s = 0.f;
      for (long long j = threadIdx.x; j < len; j += blockDim.x) s += norm_input(xr, rr, j);
      mean = block_sum(s, scratch) / (float)len;
    }
    float q = 0.f;
    for (long long j = threadIdx.x; j < len; j += blockDim.x) {
      const float d = norm_input(xr, rr, j) - mean;
      q += d * d;
    }
    const float inv = rsqrtf(block_sum(q, scratch) / (float)len + eps);
    for (long long j = threadIdx.x; j < len; j += blockDim.x) {
      float o = (norm_input(xr, rr, j) - mean) * inv * to_f(gamma[j]);
      if (beta) o += to_f(beta[j]);
      yr[j] = from_f<T>(o);
    }
  }
}

// The same with the row held in shared memory (len * 4 bytes of dynamic shared memory), vector
// loads/stores with `vec` as above.
extern "C" __global__ void norm_rows_cached(const T* x, const T* res, const T* gamma, const T* beta, T* y,
                                            long long rows, long long len, float eps, int rms, int vec) {
  rlx_pdl_begin();
  __shared__ float scratch[32];
  extern __shared__ float row[];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * len;
    const T* rr = res ? res + r * len : nullptr;
    T* yr = y + r * len;
    float s = 0.f;
    if (vec) {
      for (long long c = threadIdx.x; c < len / VV; c += blockDim.x) {
        const Vec<T, VV> xv = ((const Vec<T, VV>*)xr)[c];
        Vec<T, VV> rv;
        if (rr) rv = ((const Vec<T, VV>*)rr)[c];
#pragma unroll
        for (int e = 0; e < VV; ++e) {
          const float v = rr ? to_f(from_f<T>(to_f(xv.v[e]) + to_f(rv.v[e]))) : to_f(xv.v[e]);
          row[c * VV + e] = v;
          s += v;
        }
      }
    } else {
      for (long long j = threadIdx.x; j < len; j += blockDim.x) {
        const float v = norm_input(xr, rr, j);
        row[j] = v;
        s += v;
      }
    }
    __syncthreads();  // the row is read below by other threads than the ones that wrote it
    const float mean = rms ? 0.f : block_sum(s, scratch) / (float)len;
    float q = 0.f;
    for (long long j = threadIdx.x; j < len; j += blockDim.x) {
      const float d = row[j] - mean;
      q += d * d;
    }
    const float inv = rsqrtf(block_sum(q, scratch) / (float)len + eps);
    if (vec) {
      for (long long c = threadIdx.x; c < len / VV; c += blockDim.x) {
        const Vec<T, VV> gv = ((const Vec<T, VV>*)gamma)[c];
        Vec<T, VV> bv, o;
        if (beta) bv = ((const Vec<T, VV>*)beta)[c];
#pragma unroll
        for (int e = 0; e < VV; ++e) {
          float v = (row[c * VV + e] - mean) * inv * to_f(gv.v[e]);
          if (beta) v += to_f(bv.v[e]);
          o.v[e] = from_f<T>(v);
        }
        ((Vec<T, VV>*)yr)[c] = o;
      }
    } else {
      for (long long j = threadIdx.x; j < len; j += blockDim.x) {
        float o = (row[j] - mean) * inv * to_f(gamma[j]);
        if (beta) o += to_f(beta[j]);
        yr[j] = from_f<T>(o);
      }
    }
    __syncthreads();
  }
}

// x (rows, 2n) -> y (rows, n): silu(gate) * up, gate the first half when gate_first; silu(gate)
// is rounded to T before the multiply (the unfused graph's rounding).
extern "C" __global__ void swiglu(const T* x, T* y, long long rows, long long n, int gate_first) {
  rlx_pdl_begin();
  const long long total = rows * n;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    const long long r = i / n, c = i % n;
    const float a = to_f(x[r * 2 * n + c]), b = to_f(x[r * 2 * n + n + c]);
    const float g = gate_first ? a : b, u = gate_first ? b : a;
    // silu(g) stored to T first, as the unfused graph's Silu does (the CPU kernel does the same)
    y[i] = from_f<T>(to_f(from_f<T>(g / (1.f + expf(-g)))) * u);
  }
}
)CUDA";

// Float accumulation (A = float for f32/f16/bf16, double for f64; the lowering defines TO_A and
// FROM_A as for the row kernels). kind: 0 sum, 1 mean, 2 max, 3 min, 4 prod (the ReduceKind order). Max / Min
// propagate NaN, as the CPU does.
inline constexpr const char* kReduceFloat = R"CUDA(
__device__ __forceinline__ A reduce_init(int kind) {
  return kind == 2 ? RLX_NEG_INF : (kind == 3 ? RLX_INF : (kind == 4 ? (A)1 : (A)0));
}
__device__ __forceinline__ A reduce_step(int kind, A a, A v) {
  switch (kind) {
    case 2: return (v > a || v != v) ? v : a;
    case 3: return (v < a || v != v) ? v : a;
    case 4: return a * v;
    default: return a + v;
  }
}
__device__ __forceinline__ T reduce_final(int kind, A a, long long count) {
  return FROM_A(kind == 1 ? (count == 0 ? (A)__int_as_float(0x7fc00000) : a / (A)count) : a);
}
)CUDA";

// Integer accumulation, as the CPU reduces integers: A is the 64-bit type of T's signedness
// (bool: unsigned), TO_A a plain widening (the lowering defines it); sums and products wrap
// modulo 2^64 (computed unsigned, so never signed overflow) and narrow to T modulo its width; a
// mean divides the 64-bit sum truncating toward zero. An empty Max / Min / integer Mean is
// rejected by the lowering.
inline constexpr const char* kReduceInt = R"CUDA(
__device__ __forceinline__ A reduce_init(int kind) {
  return kind == 2 ? A_LOWEST : (kind == 3 ? A_HIGHEST : (kind == 4 ? (A)1 : (A)0));
}
__device__ __forceinline__ A reduce_step(int kind, A a, A v) {
  typedef unsigned long long U;
  switch (kind) {
    case 2: return v > a ? v : a;
    case 3: return v < a ? v : a;
    case 4: return (A)((U)a * (U)v);
    default: return (A)((U)a + (U)v);
  }
}
__device__ __forceinline__ T reduce_final(int kind, A a, long long count) {
  return (T)(kind == 1 ? a / (A)count : a);
}
)CUDA";

// The reduce kernels, after kReduceFloat or kReduceInt. Blocks combine their threads' values
// with reduce_step through warp shuffles, then shared memory.
inline constexpr const char* kReduce = R"CUDA(
// Every thread of the block must call it; the result is valid in every thread.
__device__ __forceinline__ A block_reduce(int kind, A v, A* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = reduce_step(kind, v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < nw; ++w) v = reduce_step(kind, v, scratch[w]);
  return v;
}
// [outer, red] -> [outer]: one block per output.
extern "C" __global__ void reduce_rows(const T* x, T* y, long long outer, long long red, int kind) {
  rlx_pdl_begin();
  __shared__ A scratch[32];
  for (long long o = blockIdx.x; o < outer; o += gridDim.x) {
    A a = reduce_init(kind);
    for (long long j = threadIdx.x; j < red; j += blockDim.x) a = reduce_step(kind, a, TO_A(x[o * red + j]));
    a = block_reduce(kind, a, scratch);
    if (threadIdx.x == 0) y[o] = reduce_final(kind, a, red);
  }
}
// [outer, red, inner] -> [outer, inner]: one thread per output column.
extern "C" __global__ void reduce_cols(const T* x, T* y, long long outer, long long red, long long inner, int kind) {
  rlx_pdl_begin();
  const long long total = outer * inner;
  for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < total; c += (long long)gridDim.x * blockDim.x) {
    const long long o = c / inner, i = c % inner;
    A a = reduce_init(kind);
    for (long long j = 0; j < red; ++j) a = reduce_step(kind, a, TO_A(x[(o * red + j) * inner + i]));
    y[c] = reduce_final(kind, a, red);
  }
}
// Any axes: dims (coalesced, row-major) alternate kept / reduced groups; one thread per output.
struct ReduceDims { long long dims[8]; int reduced[8]; int rank; };
extern "C" __global__ void reduce_general(const T* x, T* y, ReduceDims g, long long outputs, long long count, int kind) {
  rlx_pdl_begin();
  for (long long o = blockIdx.x * (long long)blockDim.x + threadIdx.x; o < outputs; o += (long long)gridDim.x * blockDim.x) {
    // Base offset of this output: unravel o over the kept dims.
    long long base = 0, t = o, stride = 1;
    long long strides[8];
    for (int d = g.rank - 1; d >= 0; --d) { strides[d] = stride; stride *= g.dims[d]; }
    for (int d = g.rank - 1; d >= 0; --d)
      if (!g.reduced[d]) { base += (t % g.dims[d]) * strides[d]; t /= g.dims[d]; }
    A a = reduce_init(kind);
    for (long long r = 0; r < count; ++r) {
      long long off = base, u = r;
      for (int d = g.rank - 1; d >= 0; --d)
        if (g.reduced[d]) { off += (u % g.dims[d]) * strides[d]; u /= g.dims[d]; }
      a = reduce_step(kind, a, TO_A(x[off]));
    }
    y[o] = reduce_final(kind, a, count);
  }
}
)CUDA";

}  // namespace rlx::cuda::ksrc
