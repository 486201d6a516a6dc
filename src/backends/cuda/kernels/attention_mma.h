#pragma once
// Tensor-core flash attention (prefill) for f16/bf16: FlashAttention-2 style, mma.sync
// m16n8k16 with f32 accumulation. Compiled per
//   T        f16_t or bf16_t (q, k, v and out storage), BF16 1 for bf16 operands
//   HD       head_dim, a multiple of 16, <= 256
//   NW, MT   warps per block and m16 row tiles per warp: the block owns BM = 16 * MT * NW
//            query rows, warp w the rows [w * 16 * MT, (w + 1) * 16 * MT)
//   BN       keys per K/V tile (a multiple of 16)
//   MASK     0 none, 1 causal, 2 sliding window
//   SOFTCAP  1 when s = softcap * tanh(s / softcap) applies
//   QREG     1: the warp's Q fragments stay in registers; 0: re-read from shared memory
//
// Grid: x = query blocks (the longest first under a mask), y = batch * num_heads. Per block:
// Q (BM x HD) and double-buffered K/V tiles (BN x HD) live in shared memory, loaded with
// 16-byte cp.async (rows padded by 16 bytes, so ldmatrix is conflict-free); K/V tile i + 1 is
// in flight while tile i is computed (one barrier per tile: after tile i has landed, every warp
// is also done with tile i - 1, whose stage tile i + 1 then refills). Per warp and tile: S = Q K^T (ldmatrix of K), scores
// scaled into log2 units, masked on boundary tiles only (tiles no row of the warp can see are
// skipped), online softmax on the accumulator fragments (exp2), P rounded to T in registers
// (the S accumulator layout is the A operand layout) and O += P V (ldmatrix.trans of V).
// At the end O / l is staged through the warp's own Q rows and written with 16-byte stores.
// A row that sees no key writes zeros (as the CPU oracle). Query row i sits at position
// kv_len - q_len + i; kv head = head / group. Every global row start and base must be
// 16-byte aligned (checked by the lowering).
namespace rlx::cuda::ksrc {

// Helpers of the tensor-core attention kernels (this one, attention_wgmma.h and the decode kernel
// of attention_decode_tc.h), placed before their bodies by the lowering (BF16 must be defined),
// followed by mma16816 (kernels/mma.h).
inline constexpr const char* kTensorCoreHelpers = R"CUDA(
// Shared-memory address of a generic pointer.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  unsigned r;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
  return r;
}
#define CAUSAL (MASK == 1 || MASK == 2)  // keys past a row's position are hidden
#define RLX_LOG2E 1.4426950408889634f
// The key tiles (of bn keys, from *t_begin) some row of a block of `rows` query rows from q0 may
// see; query row i sits at position kv_len - q_len + i, and MASK 2 also hides keys before a
// row's window.
__device__ __forceinline__ int key_tiles(long long q0, int rows, int bn, long long q_len, long long kv_len,
                                         long long window, long long* t_begin) {
  long long lo = 0, hi = kv_len;
#if CAUSAL
  hi = min(hi, kv_len - q_len + min(q0 + rows, q_len));
#endif
#if MASK == 2
  lo = max(0LL, kv_len - q_len + q0 - window + 1);
#endif
  *t_begin = (lo / bn) * bn;
  return hi > *t_begin ? (int)((hi - *t_begin + bn - 1) / bn) : 0;
}
// 2^x (MUFU.EX2; 2^-inf = 0, results below 2^-126 flush to 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// Two floats -> one register of two T (lo in the low half), round to nearest even.
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
  unsigned r;
#if BF16
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#else
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#endif
  return r;
}
// 16 bytes global -> shared; zero-filled when !valid (src is then not read).
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
__device__ __forceinline__ void ldsm_x4(unsigned addr, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(unsigned addr, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
)CUDA";

inline constexpr const char* kAttentionMma = R"CUDA(
#define BM (16 * MT * NW)
#define KS (HD + 8)  // shared-memory row stride in elements
#define NC (HD / 8)  // 16-byte chunks per row
struct AttnMmaArgs {
  const T* q; const T* k; const T* v; T* out;
  long long qs_b, qs_s, qs_h, ks_b, ks_s, ks_h, vs_b, vs_s, vs_h, os_b, os_s, os_h;
  long long q_len, kv_len, heads, group, window;
  float scale_log2;  // scale * log2(e)
  float cap_in;      // scale / softcap
  float cap_out;     // softcap * log2(e)
  int q_blocks;
};

extern "C" __global__ void __launch_bounds__(NW * 32) attention_mma(AttnMmaArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // Shared memory (byte addresses): Q (BM x KS), then K and V, 2 stages of BN x KS each.
  T* sQ = (T*)smem_raw;
  const unsigned uQ = smem_addr(smem_raw), uK = uQ + BM * KS * 2, uV = uK + 2 * BN * KS * 2;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const long long bh = blockIdx.y, b = bh / a.heads, h = bh % a.heads, kvh = h / a.group;
  // Under a mask the longest blocks go first; under a causal one the blocks are laid from the
  // last query row back, so a partial block is the first (the one that sees the fewest keys):
  // q0 may be negative, rows before 0 are not loaded, live or stored.
#if CAUSAL
  const long long q0 = a.q_len - (long long)((int)blockIdx.x + 1) * BM;
#elif MASK
  const long long q0 = (long long)(a.q_blocks - 1 - (int)blockIdx.x) * BM;
#else
  const long long q0 = (long long)blockIdx.x * BM;
#endif
  const long long offset = a.kv_len - a.q_len;  // position of query row i is offset + i
  const T* qg = a.q + b * a.qs_b + h * a.qs_h;
  const T* kg = a.k + b * a.ks_b + kvh * a.ks_h;
  const T* vg = a.v + b * a.vs_b + kvh * a.vs_h;
  long long t_begin;
  const int n_tiles = key_tiles(q0, BM, BN, a.q_len, a.kv_len, a.window, &t_begin);

#pragma unroll
  for (int i = 0; i < (BM * NC + NW * 32 - 1) / (NW * 32); ++i) {
    const int c = tid + i * NW * 32;
    if (c >= BM * NC) break;
    const int r = c / NC, ch = c % NC;
    const long long row = q0 + r;
    const bool ok = row >= 0 && row < a.q_len;
    cp_async16(uQ + (r * KS + ch * 8) * 2, ok ? (const void*)(qg + row * a.qs_s + ch * 8) : (const void*)qg, ok);
  }
  cp_async_commit();
  auto load_kv = [&](int stage, long long t0) {
    const unsigned dk = uK + stage * BN * KS * 2, dv = uV + stage * BN * KS * 2;
#pragma unroll
    for (int i = 0; i < (BN * NC + NW * 32 - 1) / (NW * 32); ++i) {
      const int c = tid + i * NW * 32;
      if (c >= BN * NC) break;
      const int r = c / NC, ch = c % NC;
      const long long key = t0 + r;
      const bool ok = key < a.kv_len;
      cp_async16(dk + (r * KS + ch * 8) * 2, ok ? (const void*)(kg + key * a.ks_s + ch * 8) : (const void*)kg, ok);
      cp_async16(dv + (r * KS + ch * 8) * 2, ok ? (const void*)(vg + key * a.vs_s + ch * 8) : (const void*)vg, ok);
    }
  };
  if (n_tiles > 0) load_kv(0, t_begin);
  cp_async_commit();

  const int wrow0 = warp * 16 * MT;                // the warp's first row in the block
  const long long wpos_lo = offset + q0 + wrow0;   // positions of the warp's first and last rows
  const long long wpos_hi = wpos_lo + 16 * MT - 1;
  const bool warp_live = q0 + wrow0 < a.q_len && q0 + wrow0 + 16 * MT > 0;

  float m[MT][2], l[MT][2], acc[MT][HD / 8][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      m[mt][hf] = RLX_NEG_INF;
      l[mt][hf] = 0.f;
    }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int dn = 0; dn < HD / 8; ++dn)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][dn][e] = 0.f;

  // ldmatrix source rows/columns of this lane.
  const int a_row = lane & 15, a_col = (lane >> 4) * 8;                          // A (16x16)
  const int k_row = (lane & 7) + ((lane >> 4) << 3), k_col = ((lane >> 3) & 1) * 8;  // K as B (two n8 blocks)
  const int v_row = (lane & 7) + (((lane >> 3) & 1) << 3), v_col = (lane >> 4) * 8;  // V as B, transposed

  cp_async_wait<1>();  // Q has landed
  __syncthreads();
#if QREG
  unsigned qf[MT][HD / 16][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk)
      ldsm_x4(uQ + ((wrow0 + mt * 16 + a_row) * KS + kk * 16 + a_col) * 2, qf[mt][kk][0], qf[mt][kk][1],
              qf[mt][kk][2], qf[mt][kk][3]);
#endif

  for (int it = 0; it < n_tiles; ++it) {
    const long long t0 = t_begin + (long long)it * BN;
    const int st = it & 1;
    cp_async_wait<0>();  // tile it has landed (this thread's copies)
    __syncthreads();     // ... every thread's; and every warp is done with tile it - 1
    if (it + 1 < n_tiles) load_kv(st ^ 1, t0 + BN);  // refills the stage of tile it - 1
    cp_async_commit();
    bool live = warp_live;
#if MASK
    live = live && t0 <= wpos_hi;
#endif
#if MASK == 2
    live = live && t0 + BN - 1 > wpos_lo - a.window;
#endif
    if (live) {
      const unsigned ks = uK + st * BN * KS * 2, vs = uV + st * BN * KS * 2;
      float s[MT][BN / 8][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][j][e] = 0.f;
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        unsigned af[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#if QREG
#pragma unroll
          for (int e = 0; e < 4; ++e) af[mt][e] = qf[mt][kk][e];
#else
          ldsm_x4(uQ + ((wrow0 + mt * 16 + a_row) * KS + kk * 16 + a_col) * 2, af[mt][0], af[mt][1], af[mt][2],
                  af[mt][3]);
#endif
        }
#pragma unroll
        for (int nb = 0; nb < BN / 16; ++nb) {
          unsigned b0, b1, b2, b3;
          ldsm_x4(ks + ((nb * 16 + k_row) * KS + kk * 16 + k_col) * 2, b0, b1, b2, b3);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma16816(s[mt][2 * nb], af[mt], b0, b1);
            mma16816(s[mt][2 * nb + 1], af[mt], b2, b3);
          }
        }
      }
      // Scores in log2 units; masks on boundary tiles only: row r keeps the tile's keys
      // [klo[r], khi[r]) (relative to t0).
      bool need = t0 + BN > a.kv_len;
#if MASK
      need = need || t0 + BN - 1 > wpos_lo;
#endif
#if MASK == 2
      need = need || t0 <= wpos_hi - a.window;
#endif
      // In 32 bits relative to t0: the clamps keep far-off rows (where `need` is false) finite.
      const int kend = (int)min((long long)BN, a.kv_len - t0);
      const int prel = (int)max(-(1LL << 24), min(1LL << 24, wpos_lo - t0)) + (lane >> 2);
#if MASK == 2
      const int win = (int)min(a.window, 1LL << 26);
#endif
      int klo[MT][2], khi[MT][2];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          klo[mt][hf] = 0;
          khi[mt][hf] = kend;
#if MASK
          const int pos = prel + mt * 16 + hf * 8;  // the row's position - t0
          khi[mt][hf] = min(kend, pos + 1);
#endif
#if MASK == 2
          klo[mt][hf] = pos - win + 1;
#endif
        }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float x = s[mt][j][e];
#if SOFTCAP
            x = a.cap_out * tanhf(x * a.cap_in);
#else
            x *= a.scale_log2;
#endif
            const int key = j * 8 + (lane & 3) * 2 + (e & 1);
            if (need && (key < klo[mt][e >> 1] || key >= khi[mt][e >> 1])) x = RLX_NEG_INF;
            s[mt][j][e] = x;
          }
      // Online softmax: rows lane / 4 (hf 0) and lane / 4 + 8 (hf 1) of each m tile; the four
      // lanes of a quad share a row.
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          float mx = m[mt][hf];
#pragma unroll
          for (int j = 0; j < BN / 8; ++j) mx = fmaxf(mx, fmaxf(s[mt][j][2 * hf], s[mt][j][2 * hf + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float base = mx == RLX_NEG_INF ? 0.f : mx;
          const float corr = fast_exp2(m[mt][hf] - base);
          m[mt][hf] = mx;
          float sum = 0.f;
#pragma unroll
          for (int j = 0; j < BN / 8; ++j)
#pragma unroll
            for (int e = 2 * hf; e < 2 * hf + 2; ++e) {
              const float p = fast_exp2(s[mt][j][e] - base);
              s[mt][j][e] = p;
              sum += p;
            }
          l[mt][hf] = l[mt][hf] * corr + sum;
#pragma unroll
          for (int dn = 0; dn < HD / 8; ++dn) {
            acc[mt][dn][2 * hf] *= corr;
            acc[mt][dn][2 * hf + 1] *= corr;
          }
        }
      // O += P V: the S fragments of keys [16 kb, 16 kb + 16) are the A operand.
#pragma unroll
      for (int kb = 0; kb < BN / 16; ++kb) {
        unsigned pa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          pa[mt][0] = pack2(s[mt][2 * kb][0], s[mt][2 * kb][1]);
          pa[mt][1] = pack2(s[mt][2 * kb][2], s[mt][2 * kb][3]);
          pa[mt][2] = pack2(s[mt][2 * kb + 1][0], s[mt][2 * kb + 1][1]);
          pa[mt][3] = pack2(s[mt][2 * kb + 1][2], s[mt][2 * kb + 1][3]);
        }
#pragma unroll
        for (int dn = 0; dn < HD / 16; ++dn) {
          unsigned b0, b1, b2, b3;
          ldsm_x4_t(vs + ((kb * 16 + v_row) * KS + dn * 16 + v_col) * 2, b0, b1, b2, b3);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma16816(acc[mt][2 * dn], pa[mt], b0, b1);
            mma16816(acc[mt][2 * dn + 1], pa[mt], b2, b3);
          }
        }
      }
    }
  }
  cp_async_wait<0>();

  // O / l, staged through the warp's own Q rows (no other warp reads them), then 16-byte stores.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float sum = l[mt][hf];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      const int r = wrow0 + mt * 16 + (lane >> 2) + hf * 8;
#pragma unroll
      for (int dn = 0; dn < HD / 8; ++dn)
        *(unsigned*)(sQ + r * KS + dn * 8 + (lane & 3) * 2) =
            pack2(acc[mt][dn][2 * hf] * inv, acc[mt][dn][2 * hf + 1] * inv);
    }
  __syncwarp();
  T* og = a.out + b * a.os_b + h * a.os_h;
#pragma unroll
  for (int c = lane; c < 16 * MT * NC; c += 32) {
    const int r = c / NC, ch = c % NC;
    const long long row = q0 + wrow0 + r;
    if (row >= 0 && row < a.q_len) *(uint4*)(og + row * a.os_s + ch * 8) = *(const uint4*)(sQ + (wrow0 + r) * KS + ch * 8);
  }
}
)CUDA";

}  // namespace rlx::cuda::ksrc
