#pragma once
// Selection kernels: ArgMax/ArgMin, TopK and Sample, block-parallel over rows (one block per
// row, a row of `len` elements at stride `inner`).
//
// Rank order. TopK and Sample order a row by a key (larger key first, ties: lower index first).
// The key of a value is an unsigned integer whose order is the value order: floats map -0 to +0
// and every NaN to the largest key (NaN ranks above every number, like the CPU backend), signed
// integers flip the sign bit. TopK with largest = false ranks by the complement of the key, which
// puts NaN last. Positions in that order are found by an MSB-first radix search (8-bit digits,
// one pass over the row per digit, shared-memory histograms), never by sorting the row.
namespace rlx::cuda::ksrc {

// Key and block helpers shared by TopK and Sample. Needs `typedef <u32|u64> KT;` and
// `#define KBITS <32|64>`.
inline constexpr const char* kSelectCommon = R"CUDA(
__device__ __forceinline__ unsigned float_key(float v) {
  if (v != v) return 0xffffffffu;
  if (v == 0.f) v = 0.f;  // -0 ranks equal to +0
  const unsigned u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
// The same order for doubles, as a 64-bit key (KBITS 64).
__device__ __forceinline__ unsigned long long double_key(double v) {
  if (v != v) return 0xffffffffffffffffull;
  if (v == 0.0) v = 0.0;
  const unsigned long long u = (unsigned long long)__double_as_longlong(v);
  return (u & 0x8000000000000000ull) ? ~u : (u | 0x8000000000000000ull);
}
// The float of a key made by float_key (not NaN).
__device__ __forceinline__ float key_float(unsigned k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

struct SelectShared {
  unsigned cnt[256];
  double mass[256];
  double stage[1024];  // one value per thread for the warp-aggregated histogram adds
  unsigned wcnt[32];
  double wsum[32];
  unsigned long long wbest[32];
  KT prefix;
  long long rem;
  long long result;
  double acc;
  int found;
  int flag;
};

__device__ __forceinline__ double block_sum_d(double v, SelectShared& sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) sh.wsum[warp] = v;
  __syncthreads();
  double s = 0.0;
  for (int w = 0; w < nw; ++w) s += sh.wsum[w];  // same order in every thread
  return s;
}
__device__ __forceinline__ unsigned long long block_max_u64(unsigned long long v, SelectShared& sh) {
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long u = __shfl_xor_sync(0xffffffffu, v, o);
    v = u > v ? u : v;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) sh.wbest[warp] = v;
  __syncthreads();
  unsigned long long m = 0;
  for (int w = 0; w < nw; ++w) m = sh.wbest[w] > m ? sh.wbest[w] : m;
  return m;
}

// Adds 1 (and `m` to the mass when `mass` is set) to bucket d of the shared histograms for
// every active lane, with one atomic per distinct bucket of the warp (lanes of one row mostly
// share the top digits, and 32 atomics on one shared address would serialize). Every lane of the
// warp must call it.
__device__ __forceinline__ void hist_add(SelectShared& sh, bool active, unsigned d, bool mass, double m) {
  const unsigned act = __ballot_sync(0xffffffffu, active);
  if (!active) return;
  const unsigned peers = __match_any_sync(act, d);
  const int lane = threadIdx.x & 31;
  const int leader = __ffs(peers) - 1;
  if (mass) {
    sh.stage[threadIdx.x] = m;
    __syncwarp(act);
    if (lane == leader) {
      double s = 0.0;
      for (unsigned b = peers; b; b &= b - 1) s += sh.stage[(threadIdx.x & ~31u) + __ffs(b) - 1];
      atomicAdd(&sh.mass[d], s);
    }
    __syncwarp(act);
  }
  if (lane == leader) atomicAdd(&sh.cnt[d], (unsigned)__popc(peers));
}

__device__ __forceinline__ bool ranks_after(KT ka, unsigned ia, KT kb, unsigned ib) {
  return ka < kb || (ka == kb && ia > ib);
}
// Bitonic sort of n2 (a power of two) (key, index) pairs in shared memory into rank order;
// unused slots hold key 0 and index 0xffffffff (they sort last). Every thread must call it.
__device__ void sort_ranked(KT* key, unsigned* idx, int n2) {
  for (int size = 2; size <= n2; size <<= 1)
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int t = threadIdx.x; t < n2 / 2; t += blockDim.x) {
        const int a = 2 * stride * (t / stride) + (t % stride), b = a + stride;
        const bool up = (a & size) == 0;
        if (ranks_after(key[a], idx[a], key[b], idx[b]) == up) {
          const KT tk = key[a]; key[a] = key[b]; key[b] = tk;
          const unsigned ti = idx[a]; idx[a] = idx[b]; idx[b] = ti;
        }
      }
      __syncthreads();
    }
}

// The key of the n-th element (1-based, n <= len) in rank order; *rank = its rank among the
// elements of that key (1-based, in index order). key_of(j) is the key of element j.
template <class KeyOf>
__device__ KT radix_nth(const KeyOf& key_of, long long len, long long n, long long* rank, SelectShared& sh) {
  KT prefix = 0;
  long long rem = n;
  for (int shift = KBITS - 8; shift >= 0; shift -= 8) {
    for (int d = threadIdx.x; d < 256; d += blockDim.x) sh.cnt[d] = 0;
    __syncthreads();
    const KT hi_mask = shift + 8 >= KBITS ? (KT)0 : (~(KT)0) << (shift + 8);
    for (long long base = 0; base < len; base += blockDim.x) {  // warp-uniform trip count
      const long long j = base + threadIdx.x;
      const KT k = j < len ? key_of(j) : (KT)0;
      hist_add(sh, j < len && (k & hi_mask) == prefix, (unsigned)(k >> shift) & 255u, false, 0.0);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int d = 255;
      for (; d > 0; --d) {
        if (rem <= (long long)sh.cnt[d]) break;
        rem -= sh.cnt[d];
      }
      sh.prefix = prefix | ((KT)d << shift);
      sh.rem = rem;
    }
    __syncthreads();
    prefix = sh.prefix;
    rem = sh.rem;
    __syncthreads();
  }
  *rank = rem;
  return prefix;
}

// The index of the r-th (1-based) element j, in index order, with pred(j); -1 when there are
// fewer. blockDim.x must be a multiple of 32.
template <class Pred>
__device__ long long nth_index(const Pred& pred, long long len, long long r, SelectShared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  if (threadIdx.x == 0) sh.result = -1;
  long long seen = 0;
  for (long long base = 0; base < len; base += blockDim.x) {
    const long long j = base + threadIdx.x;
    const bool f = j < len && pred(j);
    const unsigned ballot = __ballot_sync(0xffffffffu, f);
    __syncthreads();  // wcnt of the previous chunk was read by every thread
    if (lane == 0) sh.wcnt[warp] = __popc(ballot);
    __syncthreads();
    long long before = seen, total = 0;
    for (int w = 0; w < nw; ++w) {
      if (w < warp) before += sh.wcnt[w];
      total += sh.wcnt[w];
    }
    before += __popc(ballot & ((1u << lane) - 1u));
    if (f && before + 1 == r) sh.result = j;
    seen += total;
    if (seen >= r) break;  // the same decision in every thread
  }
  __syncthreads();
  const long long res = sh.result;
  __syncthreads();
  return res;
}
)CUDA";

// ArgMax / ArgMin: typedef T (storage) and C (compare type: float, double or long long); LOAD_C(v).
inline constexpr const char* kArgReduce = R"CUDA(
// Whether (v, i) is the scan's result over (b, bi): NaN ranks above every number for both
// argmax and argmin; ties (and NaN vs NaN) go to the first index, or the last with `last`.
__device__ __forceinline__ bool arg_prefer(C v, long long i, C b, long long bi, int is_max, int last) {
  const bool vn = v != v, bn = b != b;
  if (vn || bn) {
    if (vn != bn) return vn;
    return last ? i > bi : i < bi;
  }
  if (v == b) return last ? i > bi : i < bi;
  return is_max ? v > b : v < b;
}

// [rows, len] contiguous -> [rows] i64; one block per row.
extern "C" __global__ void arg_rows(const T* x, long long* out, long long rows, long long len, int is_max, int last) {
  __shared__ C sv[32];
  __shared__ long long si[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * len;
    C bv = 0;
    long long bi = -1;
    for (long long j = threadIdx.x; j < len; j += blockDim.x) {
      const C v = LOAD_C(xr[j]);
      if (bi < 0 || arg_prefer(v, j, bv, bi, is_max, last)) { bv = v; bi = j; }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const C ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const long long oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (oi >= 0 && (bi < 0 || arg_prefer(ov, oi, bv, bi, is_max, last))) { bv = ov; bi = oi; }
    }
    __syncthreads();
    if (lane == 0) { sv[warp] = bv; si[warp] = bi; }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < nw; ++w)
        if (si[w] >= 0 && (bi < 0 || arg_prefer(sv[w], si[w], bv, bi, is_max, last))) { bv = sv[w]; bi = si[w]; }
      out[r] = bi;
    }
  }
}

// [outer, len, inner] -> [outer, inner] i64; one thread per column, scanning like the CPU.
extern "C" __global__ void arg_cols(const T* x, long long* out, long long outer, long long len, long long inner,
                                    int is_max, int last) {
  const long long cols = outer * inner;
  for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < cols; c += (long long)gridDim.x * blockDim.x) {
    const T* xc = x + (c / inner) * len * inner + c % inner;
    C bv = LOAD_C(xc[0]);
    long long bi = 0;
    for (long long j = 1; j < len; ++j) {
      const C v = LOAD_C(xc[j * inner]);
      if (arg_prefer(v, j, bv, bi, is_max, last)) { bv = v; bi = j; }
    }
    out[c] = bi;
  }
}
)CUDA";

// TopK (k <= 1024): typedef T, KT; #define KBITS, RAW_KEY(v) (the rank key of a T value).
// After kSelectCommon.
inline constexpr const char* kTopK = R"CUDA(
// x [outer, len, inner] -> values / i64 indices [outer, k, inner], rank order. One block of
// TOPK_THREADS threads per (outer, inner) row: the k-th key by radix search, the k winners
// gathered into shared memory, then a bitonic sort of them.
#define TOPK_THREADS 512
extern "C" __global__ void __launch_bounds__(TOPK_THREADS) topk_rows(const T* x, T* vals, long long* idxs,
                                                                     long long outer, long long len, long long inner,
                                                                     long long k, int largest) {
  __shared__ SelectShared sh;
  __shared__ KT skey[1024];
  __shared__ unsigned sidx[1024];
  __shared__ unsigned count;
  int p2 = 1;
  while (p2 < k) p2 <<= 1;
  const long long rows = outer * inner;
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const long long o = row / inner, i = row % inner;
    const T* xr = x + o * len * inner + i;
    auto key_of = [&](long long j) -> KT {
      const KT key = RAW_KEY(xr[j * inner]);
      return largest ? key : ~key;
    };
    long long rank = 0;
    const KT kth = radix_nth(key_of, len, k, &rank, sh);
    const long long cut = nth_index([&](long long j) { return key_of(j) == kth; }, len, rank, sh);
    for (int s = threadIdx.x; s < p2; s += blockDim.x) { skey[s] = 0; sidx[s] = 0xffffffffu; }
    if (threadIdx.x == 0) count = 0;
    __syncthreads();
    for (long long j = threadIdx.x; j < len; j += blockDim.x) {
      const KT key = key_of(j);
      if (key > kth || (key == kth && j <= cut)) {
        const unsigned slot = atomicAdd(&count, 1u);
        if (slot < 1024u) {  // exactly k <= 1024 elements qualify
          skey[slot] = key;
          sidx[slot] = (unsigned)j;
        }
      }
    }
    __syncthreads();
    sort_ranked(skey, sidx, p2);
    for (long long r = threadIdx.x; r < k; r += blockDim.x) {
      const long long dst = (o * k + r) * inner + i;
      vals[dst] = xr[(long long)sidx[r] * inner];
      idxs[dst] = (long long)sidx[r];
    }
    __syncthreads();
  }
}
)CUDA";

// Sample: typedef T (float storage), KT = unsigned, KBITS 32; after kSelectCommon and kPhilox.
inline constexpr const char* kSample = R"CUDA(
#define SAMPLE_THREADS 512
#define SAMPLE_SMALL 1024  // kept sets up to this size are sorted in shared memory
// Error codes (shared with the host): 4 NaN logit, 5 a row of -inf logits.
struct SampleCut { unsigned key; long long idx; };  // kept: key > cut.key, or == with index <= idx
__device__ __forceinline__ bool kept(const SampleCut& c, unsigned key, long long j) {
  return key > c.key || (key == c.key && j <= c.idx);
}

// The first kept element in rank order whose inclusive cumulative probability mass is > target
// (strict) or >= target. Returns false when the mass never gets there (rounding).
template <class KeyOf, class ProbOfKey>
__device__ bool radix_mass(const KeyOf& key_of, const ProbOfKey& prob_of_key, const SampleCut& cut, long long len,
                           double target, int strict, unsigned* out_key, long long* out_idx, double* out_cum,
                           SelectShared& sh) {
  unsigned prefix = 0;
  double acc = 0.0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int d = threadIdx.x; d < 256; d += blockDim.x) { sh.mass[d] = 0.0; sh.cnt[d] = 0; }
    __syncthreads();
    const unsigned hi_mask = shift == 24 ? 0u : (~0u) << (shift + 8);
    for (long long base = 0; base < len; base += blockDim.x) {  // warp-uniform trip count
      const long long j = base + threadIdx.x;
      const unsigned k = j < len ? key_of(j) : 0u;
      const bool in = j < len && (k & hi_mask) == prefix && kept(cut, k, j);
      hist_add(sh, in, (k >> shift) & 255u, true, in ? prob_of_key(k) : 0.0);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int found = 0, d = 255;
      for (; d >= 0; --d) {
        if (sh.cnt[d] == 0) continue;
        const double m = acc + sh.mass[d];
        if (strict ? m > target : m >= target) { found = 1; break; }
        acc = m;
      }
      sh.found = found;
      sh.prefix = prefix | ((unsigned)(found ? d : 0) << shift);
      sh.acc = acc;
      sh.rem = found ? sh.cnt[d] : 0;
    }
    __syncthreads();
    const int found = sh.found;
    prefix = sh.prefix;
    acc = sh.acc;
    const long long ties = sh.rem;
    __syncthreads();
    if (!found) return false;
    if (shift == 0) {
      // `ties` kept elements share the key `prefix` (so one probability p); the answer is the
      // i-th of them in index order, i the smallest count that reaches the target.
      const double p = prob_of_key(prefix);
      const double q = p > 0.0 ? (target - acc) / p : 1.0;
      long long i = q < 1.0 ? 1 : (q > (double)ties ? ties : (long long)q);
      while (i < ties && !(strict ? acc + i * p > target : acc + i * p >= target)) ++i;
      while (i > 1 && (strict ? acc + (i - 1) * p > target : acc + (i - 1) * p >= target)) --i;
      *out_key = prefix;
      *out_cum = acc + i * p;
      *out_idx = nth_index([&](long long j) { const unsigned k = key_of(j); return k == prefix && kept(cut, k, j); },
                           len, i, sh);
    }
  }
  return true;
}

// logits [rows, V] -> i64 tokens [rows], the CPU oracle's rules (see kernels_random.cpp):
// NaN or all -inf row: error (every mode); temperature 0 = first argmax; else p_j = exp((l_j - max) / temperature) (+inf max: the +inf
// logits share the mass); keep the top_k first in rank order (0 = all), then the shortest prefix
// with mass >= top_p * kept mass; draw u (53 bits of Philox block `row`, words 0-1) and pick
// the first kept token whose cumulative mass exceeds u * kept mass.
extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS) sample_rows(
    const T* logits, long long* out, long long rows, long long V, const long long* offset_ptr,
    unsigned long long seed, double temperature, long long top_k, double top_p, int* err) {
  __shared__ SelectShared sh;
  __shared__ unsigned skey[SAMPLE_SMALL];
  __shared__ unsigned sidx[SAMPLE_SMALL];
  __shared__ double sp[SAMPLE_SMALL];
  __shared__ unsigned scount;
  const unsigned long long offset = offset_ptr ? (unsigned long long)*offset_ptr : 0ull;
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = logits + r * V;
    auto key_of = [&](long long j) -> unsigned { return float_key(to_f(x[j])); };
    // Max (first index) and NaN check: best = key << 32 | ~index.
    if (threadIdx.x == 0) sh.flag = 0;
    __syncthreads();
    unsigned long long best = 0;
    bool nan = false;
    for (long long j = threadIdx.x; j < V; j += blockDim.x) {
      const float v = to_f(x[j]);
      if (v != v) nan = true;
      const unsigned long long c = ((unsigned long long)float_key(v) << 32) | (unsigned)~(unsigned)j;
      best = c > best ? c : best;
    }
    if (nan) atomicOr(&sh.flag, 1);
    best = block_max_u64(best, sh);
    if (sh.flag) {
      if (threadIdx.x == 0) { report_error(err, 4); out[r] = 0; }
      __syncthreads();
      continue;
    }
    const long long arg = (long long)(unsigned)~(unsigned)(best & 0xffffffffull);
    const float mx = key_float((unsigned)(best >> 32));
    if (mx == RLX_NEG_INF) {  // before the greedy return: every mode rejects an all -inf row
      if (threadIdx.x == 0) { report_error(err, 5); out[r] = 0; }
      __syncthreads();
      continue;
    }
    if (temperature == 0.0) {
      if (threadIdx.x == 0) out[r] = arg;
      __syncthreads();
      continue;
    }
    const bool inf_max = mx == RLX_INF;
    const double mxd = (double)mx;
    auto prob_of_key = [&](unsigned k) -> double {
      const float v = key_float(k);
      return inf_max ? (v == mx ? 1.0 : 0.0) : exp(__ddiv_rn(__dsub_rn((double)v, mxd), temperature));
    };
    SampleCut cut{0u, V - 1};  // everything
    if (top_k > 0 && top_k < V) {
      long long rank = 0;
      cut.key = radix_nth(key_of, V, top_k, &rank, sh);
      cut.idx = nth_index([&](long long j) { return key_of(j) == cut.key; }, V, rank, sh);
    }
    const long long kcount = (top_k > 0 && top_k < V) ? top_k : V;
    if (kcount <= SAMPLE_SMALL) {
      // At most SAMPLE_SMALL kept tokens: sorted in shared memory, then top_p and the draw walk
      // them in rank order exactly like the CPU (same summation order).
      int p2 = 1;
      while (p2 < kcount) p2 <<= 1;
      for (int s = threadIdx.x; s < p2; s += blockDim.x) { skey[s] = 0; sidx[s] = 0xffffffffu; }
      if (threadIdx.x == 0) scount = 0;
      __syncthreads();
      for (long long j = threadIdx.x; j < V; j += blockDim.x) {
        const unsigned k = key_of(j);
        if (kept(cut, k, j)) {
          const unsigned slot = atomicAdd(&scount, 1u);
          if (slot < SAMPLE_SMALL) { skey[slot] = k; sidx[slot] = (unsigned)j; }
        }
      }
      __syncthreads();
      sort_ranked(skey, sidx, p2);
      for (int s = threadIdx.x; s < kcount; s += blockDim.x) sp[s] = prob_of_key(skey[s]);
      __syncthreads();
      if (threadIdx.x == 0) {
        double mass = 0.0;
        for (int i = 0; i < kcount; ++i) mass += sp[i];
        long long n = kcount;
        if (top_p < 1.0) {
          const double target = top_p * mass;
          double cum = 0.0;
          for (int i = 0; i < kcount; ++i) {
            cum += sp[i];
            if (cum >= target) { n = i + 1; mass = cum; break; }
          }
        }
        const Philox4 bits = philox_block(seed, offset, (unsigned long long)r);
        const double target = (double)((((unsigned long long)bits.x << 32) | bits.y) >> 11) * 0x1p-53 * mass;
        double cum = 0.0;
        long long tok = -1, last_positive = sidx[0];
        for (int i = 0; i < n; ++i) {
          if (sp[i] <= 0.0) break;  // rank order: the rest are zero too
          last_positive = sidx[i];
          cum += sp[i];
          if (target < cum) { tok = sidx[i]; break; }
        }
        out[r] = tok >= 0 ? tok : last_positive;
      }
      __syncthreads();
      continue;
    }
    double part = 0.0;
    for (long long j = threadIdx.x; j < V; j += blockDim.x) {
      const unsigned k = key_of(j);
      if (kept(cut, k, j)) part += prob_of_key(k);
    }
    double mass = block_sum_d(part, sh);
    unsigned fkey = 0;
    long long fidx = 0;
    double fcum = 0.0;
    if (top_p < 1.0 && radix_mass(key_of, prob_of_key, cut, V, top_p * mass, 0, &fkey, &fidx, &fcum, sh)) {
      cut.key = fkey;
      cut.idx = fidx;
      mass = fcum;
    }
    const Philox4 bits = philox_block(seed, offset, (unsigned long long)r);
    const double u = (double)((((unsigned long long)bits.x << 32) | bits.y) >> 11) * 0x1p-53;
    long long tok;
    if (radix_mass(key_of, prob_of_key, cut, V, u * mass, 1, &fkey, &fidx, &fcum, sh)) {
      tok = fidx;
    } else {
      // Rounding left the target at the very end: the last kept token of positive mass.
      unsigned long long last = 0;
      for (long long j = threadIdx.x; j < V; j += blockDim.x) {
        const unsigned k = key_of(j);
        if (kept(cut, k, j) && prob_of_key(k) > 0.0) {
          const unsigned long long c = ((unsigned long long)~k << 32) | (unsigned long long)j;
          last = c > last ? c : last;
        }
      }
      tok = (long long)(block_max_u64(last, sh) & 0xffffffffull);
    }
    if (threadIdx.x == 0) out[r] = tok;
    __syncthreads();
  }
}
)CUDA";

}  // namespace rlx::cuda::ksrc
