#pragma once
// GLSL templates of the Vulkan attention kernels (lower_attention.cpp prepends the header, the
// buffers, the push-constant block, the #defines and the load/store helpers).
//
// Rows: a KV head's query rows are (query row i, head of the GQA group) pairs, R = i * GROUP + g,
// so the heads that share a KV head read each K/V tile once. Softmax is online in f32 (in double
// for f64 inputs); a row with no kept key (or whose kept keys all score -inf) outputs zeros; a
// NaN score does not raise the row max but makes its row NaN (as on the CPU).
// SPLIT: a workgroup only takes keys [split * split_len, (split + 1) * split_len) and writes the
// unnormalized partial (o[D], row max, row sum) of each row to scratch; attn_combine merges them.
//
// attn_flash (prefill): one workgroup of NT invocations per (block of BR rows, key split, batch x
// kv head), blocks walked from the last (the longest under a causal mask). Invocation t is
// (row group rg = t / TC, key group kg = t % TC); it owns the RS rows rg + TR * i and, per tile
// of BC keys, the CS score columns kg + TC * j (register tiling: RS x CS scores from vec4 reads
// of the Q and K tiles in shared memory, rows padded by one vec4 so that reads do not conflict),
// and the output dims of the vec4 columns kg + TC * u of its rows. A row's max and sum are
// reduced over its TC invocations with subgroupShuffleXor (SHUF, where the workgroup's subgroups
// are runs of consecutive invocations of at least TC) or through shared memory. Per tile: the K
// and V tiles (vec4 global loads) -> shared; scores, masks, online softmax; P -> shared; O += P V.
// KV_ALIAS: the V tile is loaded over the K tile once the scores are done (small shared memory).
// Under causal / sliding-window masks the block only walks the key tiles some row sees.
//
// attn_decode (few rows, NR <= 16): one workgroup per (key split, batch x kv head) holding all
// NR rows of the GQA group. Per chunk of NT keys: invocation t scores key t against every row
// (its K row read as vec4s, Q from shared memory), the chunk's row maxima over the workgroup
// (subgroupMax and shared memory with SG, else a shared-memory tree), P -> shared; then
// invocation t accumulates vec4 column t % DV of every row over keys t / DV + KS * k (V read
// as vec4s, consecutive invocations on consecutive columns); the KS partial rows are summed
// through shared memory at the end. With CAT, K and V are each a KV cache and its new rows
// (two parts, plan_attention_concats): keys from CAT_K_PART / CAT_V_PART on are read from the
// second part (K2b / V2b, ld4_k2 / ld4_v2; its own batch and head strides, the same seq stride).
// With SPLIT it writes its rows' partials (Out) and, MERGE, the last split of each (batch, KV
// head) to finish (an atomic ticket in Mrg.data[1 + bh]) merges them into the result (st_fin at
// element Mrg.data[0] + strides) as attn_combine would, without a combine dispatch.
//
// Defines: F (float, or double for f64), FV (vec4 / dvec4), D (head_dim), DV (vec4 columns,
// ceil(D / 4)), NT, MASK (0 none, 1 causal, 2 sliding window, 3 custom keep mask, 4 additive
// bias, 5 positions: query row i of batch b sees keys j <= pos_at(b, i)), SPLIT, SCALE and SOFTCAP (the push constants as F), TANH_SMALL; attn_flash: BR, BC, TR,
// TC, RS, CS, DS (vec4 columns per invocation, ceil(DV / TC)), KV_ALIAS, SHUF; attn_decode: NR,
// SG, MERGE, NSPLIT. Helpers: ld4_q/ld4_k/ld4_v(uint row, uint d) -> FV (elements d..d+3 of the row starting
// at `row`, zeros past D), st_o(uint, F), keep_at(uint) -> bool (MASK 3), bias_at(uint) -> F
// (MASK 4), pos_at(uint) -> int (MASK 5: element e of the positions, counted from their first). Push
// constants `pc`; m0..m3 hold the mask's parameters (the window, the keep mask's or the
// positions' batch stride, or the bias strides).

namespace rlx::vulkan::ksrc {

// exp and tanh of the compute type F. GLSL has no double exp: for F = double, exp(x) =
// 2^k exp(r) with r = x - k ln2 (ln2 split in two, |r| <= ln2 / 2) and exp(r) from its Taylor
// series to degree 14 (below 2e-16 relative).
inline constexpr const char* kAttentionMath = R"(
#define NEG_INF F(uintBitsToFloat(0xff800000u))
#if F_DOUBLE
double attn_exp(double x) { return rlx_exp_d(x); }  // kDoubleMath (kernels/double_math.h)
#else
float attn_exp(float x) { return exp(x); }
#endif
F attn_tanh(F x) {
  F a = abs(x);
  if (a < TANH_SMALL) return x;
  F e = attn_exp(F(-2.0) * a);
  F t = (F(1.0) - e) / (F(1.0) + e);
  return x < F(0.0) ? -t : t;
}
)";

// The score of key j for a row (query row ri of head rh, seeing keys [rlo, rhi)) from its raw
// dot product: scaled, masked (NEG_INF), softcapped, biased. `hi`: the end of the keys loaded.
inline constexpr const char* kAttentionScore = R"(
F attn_score(F dot, int j, int hi, uint b, uint ri, uint rh, int rlo, int rhi) {
  F x = dot * SCALE;
  bool keep = j < hi && j >= rlo && j < rhi;
#if MASK == 3
  keep = keep && keep_at(pc.off_m + b * pc.m0 + uint(j));
#endif
  if (!keep) return NEG_INF;
  if (SOFTCAP > 0.0) x = SOFTCAP * attn_tanh(x / SOFTCAP);
#if MASK == 4
  x += bias_at(pc.off_m + b * pc.m0 + rh * pc.m1 + ri * pc.m2 + uint(j) * pc.m3);
#endif
  return x;
}
// The keys [lo, hi) some row of R0..R1-1 (rows of one KV head of batch b) may see, and query
// row ri's own range. With positions (MASK 5) the keys end after the largest position of the
// block's rows: a run-time length (the decoder's cache rows past it are never read).
void attn_block_keys(uint b, uint R0, uint R1, out int lo, out int hi) {
  const int q_len = int(pc.q_len), kv_len = int(pc.kv_len);
  lo = 0;
  hi = kv_len;
#if MASK == 1 || MASK == 2
  hi = clamp(kv_len - q_len + int((R1 - 1u) / pc.group) + 1, 0, kv_len);
#endif
#if MASK == 5
  hi = 0;
  for (uint i = R0 / pc.group; i <= (R1 - 1u) / pc.group; ++i)
    hi = max(hi, clamp(pos_at(b * pc.m0 + i) + 1, 0, kv_len));
#endif
#if MASK == 2
  lo = clamp(kv_len - q_len + int(R0 / pc.group) - int(pc.m0) + 1, 0, kv_len);
#endif
#if SPLIT
  lo = max(lo, int(gl_WorkGroupID.y * pc.split_len));
  hi = min(hi, int(min(pc.kv_len, (gl_WorkGroupID.y + 1u) * pc.split_len)));
#endif
}
void attn_row_keys(uint b, uint ri, out int rlo, out int rhi) {
  const int pos = int(pc.kv_len) - int(pc.q_len) + int(ri);
  rlo = 0;
  rhi = int(pc.kv_len);
#if MASK == 1 || MASK == 2
  rhi = clamp(pos + 1, 0, int(pc.kv_len));
#endif
#if MASK == 5
  rhi = clamp(pos_at(b * pc.m0 + ri) + 1, 0, int(pc.kv_len));
#endif
#if MASK == 2
  rlo = clamp(pos - int(pc.m0) + 1, 0, int(pc.kv_len));
#endif
}
)";

inline constexpr const char* kAttentionFlash = R"(
layout(local_size_x = NT) in;

const uint QST = DV + 1u;       // row stride of the Q / K / V tiles in vec4s (padded)
const uint PST = BC / 4u + 1u;  // row stride of the P tile in vec4s (padded)

shared FV Qs[BR * QST];
shared FV Ks[BC * QST];
#if KV_ALIAS
#define Vs Ks
#else
shared FV Vs[BC * QST];
#endif
shared FV Ps[BR * PST];
shared F Red[BR * TC];
#if SHUF
shared uint sh_nonlinear;
#endif

// Max (MAXR) or sum of v[i] over the TC invocations of each of this invocation's rows.
void rows_reduce(inout F v[RS], bool use_shuf, bool maxr, uint rg, uint kg) {
#if SHUF
  if (use_shuf) {
    for (uint i = 0u; i < RS; ++i)
      for (uint w = 1u; w < TC; w <<= 1u) {
        const F o = subgroupShuffleXor(v[i], w);
        v[i] = maxr ? (o > v[i] ? o : v[i]) : v[i] + o;
      }
    return;
  }
#endif
  for (uint i = 0u; i < RS; ++i) Red[(rg + TR * i) * TC + kg] = v[i];
  barrier();
  for (uint i = 0u; i < RS; ++i) {
    F a = Red[(rg + TR * i) * TC];
    for (uint u = 1u; u < TC; ++u) {
      const F o = Red[(rg + TR * i) * TC + u];
      a = maxr ? (o > a ? o : a) : a + o;
    }
    v[i] = a;
  }
  barrier();
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint rg = tid / TC, kg = tid % TC;
  const uint nrows = pc.q_len * pc.group;
  const uint nblk = (nrows + BR - 1u) / BR;
  const uint heads = pc.kv_heads * pc.group;
  bool use_shuf = false;
#if SHUF
  if (tid == 0u) sh_nonlinear = 0u;
  barrier();
  if (gl_SubgroupSize < TC || gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID != tid)
    atomicOr(sh_nonlinear, 1u);
  barrier();
  use_shuf = sh_nonlinear == 0u;
#endif

  for (uint bh = gl_WorkGroupID.z; bh < pc.batch * pc.kv_heads; bh += gl_NumWorkGroups.z) {
    const uint b = bh / pc.kv_heads, kvh = bh % pc.kv_heads;
    for (uint bi = gl_WorkGroupID.x; bi < nblk; bi += gl_NumWorkGroups.x) {
      const uint blk = nblk - 1u - bi;
      const uint R0 = blk * BR;
      const uint R1 = min(R0 + BR, nrows);
      int lo, hi;
      attn_block_keys(b, R0, R1, lo, hi);
      // This invocation's rows.
      bool valid[RS];
      uint ri[RS], rh[RS];
      int rlo[RS], rhi[RS];
      for (uint i = 0u; i < RS; ++i) {
        const uint R = R0 + rg + TR * i;
        valid[i] = R < nrows;
        ri[i] = valid[i] ? R / pc.group : 0u;
        rh[i] = kvh * pc.group + (valid[i] ? R % pc.group : 0u);
        attn_row_keys(b, ri[i], rlo[i], rhi[i]);
      }

      // Q tile.
      for (uint x = tid; x < BR * DV; x += NT) {
        const uint qr = x / DV, d = x % DV, QR = R0 + qr;
        FV v = FV(0.0);
        if (QR < nrows) {
          const uint i = QR / pc.group, h = kvh * pc.group + QR % pc.group;
          v = ld4_q(pc.off_q + b * pc.qsb + i * pc.qss + h * pc.qsh, 4u * d);
        }
        Qs[qr * QST + d] = v;
      }

      F m[RS], l[RS];
      FV o[RS][DS];
      for (uint i = 0u; i < RS; ++i) {
        m[i] = NEG_INF;
        l[i] = F(0.0);
        for (uint u = 0u; u < DS; ++u) o[i][u] = FV(0.0);
      }

      for (int j0 = lo; j0 < hi; j0 += int(BC)) {
        barrier();  // the previous tile's reads are done (and the Q tile is written)
        for (uint x = tid; x < BC * DV; x += NT) {
          const uint c = x / DV, d = x % DV;
          const int j = j0 + int(c);
          Ks[c * QST + d] = j < hi ? ld4_k(pc.off_k + b * pc.ksb + uint(j) * pc.kss + kvh * pc.ksh, 4u * d) : FV(0.0);
#if !KV_ALIAS
          Vs[c * QST + d] = j < hi ? ld4_v(pc.off_v + b * pc.vsb + uint(j) * pc.vss + kvh * pc.vsh, 4u * d) : FV(0.0);
#endif
        }
        barrier();

        // S = Q K^T: RS x CS scores per invocation.
        F s[RS][CS];
        for (uint i = 0u; i < RS; ++i)
          for (uint j = 0u; j < CS; ++j) s[i][j] = F(0.0);
        for (uint d = 0u; d < DV; ++d) {
          FV q[RS];
          for (uint i = 0u; i < RS; ++i) q[i] = Qs[(rg + TR * i) * QST + d];
          for (uint j = 0u; j < CS; ++j) {
            const FV k = Ks[(kg + TC * j) * QST + d];
            for (uint i = 0u; i < RS; ++i)
              s[i][j] = fma(q[i].w, k.w, fma(q[i].z, k.z, fma(q[i].y, k.y, fma(q[i].x, k.x, s[i][j]))));
          }
        }
        F tmax[RS];
        for (uint i = 0u; i < RS; ++i) {
          tmax[i] = NEG_INF;
          for (uint j = 0u; j < CS; ++j) {
            const int key = j0 + int(kg + TC * j);
            const F x = valid[i] ? attn_score(s[i][j], key, hi, b, ri[i], rh[i], rlo[i], rhi[i]) : NEG_INF;
            s[i][j] = x;
            if (x > tmax[i]) tmax[i] = x;  // NaN scores do not raise the max (as on the CPU)
          }
        }
        rows_reduce(tmax, use_shuf, true, rg, kg);
        for (uint i = 0u; i < RS; ++i) {
          const F mnew = tmax[i] > m[i] ? tmax[i] : m[i];
          const F alpha = m[i] == mnew ? F(1.0) : (m[i] == NEG_INF ? F(0.0) : attn_exp(m[i] - mnew));
          F psum = F(0.0);
          for (uint j = 0u; j < CS; ++j) {
            const F p = s[i][j] == NEG_INF ? F(0.0) : attn_exp(s[i][j] - mnew);
            const uint c = kg + TC * j;
            Ps[(rg + TR * i) * PST + c / 4u][c % 4u] = p;
            psum += p;
          }
          l[i] = l[i] * alpha + psum;
          m[i] = mnew;
          for (uint u = 0u; u < DS; ++u) o[i][u] *= alpha;
        }
#if KV_ALIAS
        barrier();  // the K tile is no longer read
        for (uint x = tid; x < BC * DV; x += NT) {
          const uint c = x / DV, d = x % DV;
          const int j = j0 + int(c);
          Vs[c * QST + d] = j < hi ? ld4_v(pc.off_v + b * pc.vsb + uint(j) * pc.vss + kvh * pc.vsh, 4u * d) : FV(0.0);
        }
#endif
        barrier();  // P (and V) are in shared memory

        // O += P V.
        for (uint c4 = 0u; c4 < BC / 4u; ++c4) {
          FV p[RS];
          for (uint i = 0u; i < RS; ++i) p[i] = Ps[(rg + TR * i) * PST + c4];
          for (uint e = 0u; e < 4u; ++e)
            for (uint u = 0u; u < DS; ++u) {
              const uint dv = kg + TC * u;
              if (DS * TC == DV || dv < DV) {
                const FV v = Vs[(4u * c4 + e) * QST + dv];
                for (uint i = 0u; i < RS; ++i) o[i][u] = fma(FV(p[i][e]), v, o[i][u]);
              }
            }
        }
      }

      rows_reduce(l, use_shuf, false, rg, kg);
      for (uint i = 0u; i < RS; ++i) {
        if (!valid[i]) continue;
#if SPLIT
        // Partials: [split][row][D + 2] with the row (b, h, i) as (b * heads + h) * q_len + i.
        const uint row = (b * heads + rh[i]) * pc.q_len + ri[i];
        const uint base = pc.off_o + ((gl_WorkGroupID.y * pc.batch * heads * pc.q_len) + row) * (D + 2u);
        for (uint u = 0u; u < DS; ++u)
          for (uint e = 0u; e < 4u; ++e) {
            const uint d = 4u * (kg + TC * u) + e;
            if (d < D) Out.data[base + d] = o[i][u][e];
          }
        if (kg == 0u) {
          Out.data[base + D] = m[i];
          Out.data[base + D + 1u] = l[i];
        }
#else
        const F inv = m[i] == NEG_INF ? F(0.0) : F(1.0) / l[i];
        const uint obase = pc.off_o + b * pc.osb + ri[i] * pc.oss + rh[i] * pc.osh;
        for (uint u = 0u; u < DS; ++u)
          for (uint e = 0u; e < 4u; ++e) {
            const uint d = 4u * (kg + TC * u) + e;
            if (d < D) st_o(obase + d, m[i] == NEG_INF ? F(0.0) : o[i][u][e] * inv);
          }
#endif
      }
      barrier();  // the Q tile is free for the next block
    }
  }
}
)";

inline constexpr const char* kAttentionDecode = R"(
layout(local_size_x = NT) in;

const uint KS = NT / DV;  // key slices of the P V product

shared FV Qd[NR * DV];
shared F Pd[NR * NT];     // P of the chunk; also the reductions' scratch
shared FV Od[KS * DV];    // one row's KS partial outputs
#if MERGE
shared bool merge_here;   // this workgroup is the last split of its (batch, KV head) to finish
shared F Mm[NR * NSPLIT], Ml[NR * NSPLIT];  // every split's max and sum of each row
#endif

// Max (maxr) or sum of v[r] over the workgroup, for every row.
void wg_reduce(inout F v[NR], bool maxr) {
  const uint tid = gl_LocalInvocationID.x;
#if SG
  for (uint r = 0u; r < NR; ++r) v[r] = maxr ? subgroupMax(v[r]) : subgroupAdd(v[r]);
  if (subgroupElect())
    for (uint r = 0u; r < NR; ++r) Pd[r * NT + gl_SubgroupID] = v[r];
  barrier();
  for (uint r = 0u; r < NR; ++r) {
    F a = Pd[r * NT];
    for (uint u = 1u; u < gl_NumSubgroups; ++u) {
      const F o = Pd[r * NT + u];
      a = maxr ? (o > a ? o : a) : a + o;
    }
    v[r] = a;
  }
#else
  for (uint r = 0u; r < NR; ++r) Pd[r * NT + tid] = v[r];
  barrier();
  for (uint w = NT / 2u; w > 0u; w >>= 1u) {
    if (tid < w)
      for (uint r = 0u; r < NR; ++r) {
        const F a = Pd[r * NT + tid], o = Pd[r * NT + tid + w];
        Pd[r * NT + tid] = maxr ? (o > a ? o : a) : a + o;
      }
    barrier();
  }
  for (uint r = 0u; r < NR; ++r) v[r] = Pd[r * NT];
#endif
  barrier();
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint col = tid % DV, ks = tid / DV;  // this invocation's place in the P V product
  const uint heads = pc.kv_heads * pc.group;

  for (uint bh = gl_WorkGroupID.z; bh < pc.batch * pc.kv_heads; bh += gl_NumWorkGroups.z) {
    const uint b = bh / pc.kv_heads, kvh = bh % pc.kv_heads;
    int lo, hi;
    attn_block_keys(b, 0u, NR, lo, hi);
    uint ri[NR], rh[NR];
    int rlo[NR], rhi[NR];
    for (uint r = 0u; r < NR; ++r) {
      ri[r] = r / pc.group;
      rh[r] = kvh * pc.group + r % pc.group;
      attn_row_keys(b, ri[r], rlo[r], rhi[r]);
    }
    for (uint x = tid; x < NR * DV; x += NT) {
      const uint r = x / DV, d = x % DV;
      Qd[x] = ld4_q(pc.off_q + b * pc.qsb + ri[r] * pc.qss + rh[r] * pc.qsh, 4u * d);
    }

    F m[NR], l[NR];
    FV o[NR];
    for (uint r = 0u; r < NR; ++r) {
      m[r] = NEG_INF;
      l[r] = F(0.0);
      o[r] = FV(0.0);
    }
    for (int j0 = lo; j0 < hi; j0 += int(NT)) {
      barrier();  // Q is in shared memory; the previous chunk's P is no longer read
      const int j = j0 + int(tid);
      F s[NR], t[NR];
      for (uint r = 0u; r < NR; ++r) s[r] = F(0.0);
      if (j < hi) {
#if CAT
        const bool k2 = j >= int(CAT_K_PART);  // a key of the second part (the new rows)
        const uint kb = k2 ? CAT_OFF_K2 + b * CAT_K2SB + uint(j - int(CAT_K_PART)) * pc.kss + kvh * CAT_K2SH
                           : pc.off_k + b * pc.ksb + uint(j) * pc.kss + kvh * pc.ksh;
#else
        const uint kb = pc.off_k + b * pc.ksb + uint(j) * pc.kss + kvh * pc.ksh;
#endif
        for (uint d = 0u; d < DV; ++d) {
#if CAT
          const FV k = k2 ? ld4_k2(kb, 4u * d) : ld4_k(kb, 4u * d);
#else
          const FV k = ld4_k(kb, 4u * d);
#endif
          for (uint r = 0u; r < NR; ++r) {
            const FV q = Qd[r * DV + d];
            s[r] = fma(q.w, k.w, fma(q.z, k.z, fma(q.y, k.y, fma(q.x, k.x, s[r]))));
          }
        }
      }
      for (uint r = 0u; r < NR; ++r) {
        s[r] = attn_score(s[r], j, hi, b, ri[r], rh[r], rlo[r], rhi[r]);
        t[r] = s[r] > NEG_INF ? s[r] : NEG_INF;  // NaN scores do not raise the max
      }
      wg_reduce(t, true);
      for (uint r = 0u; r < NR; ++r) {
        const F mnew = t[r] > m[r] ? t[r] : m[r];
        const F alpha = m[r] == mnew ? F(1.0) : (m[r] == NEG_INF ? F(0.0) : attn_exp(m[r] - mnew));
        const F p = s[r] == NEG_INF ? F(0.0) : attn_exp(s[r] - mnew);
        Pd[r * NT + tid] = p;
        l[r] = l[r] * alpha + p;
        m[r] = mnew;
        o[r] *= alpha;
      }
      barrier();  // P is in shared memory
      if (ks < KS) {
        const int nk = min(int(NT), hi - j0);
        for (int c = int(ks); c < nk; c += int(KS)) {
#if CAT
          const int jv = j0 + c;
          const FV v = jv >= int(CAT_V_PART)
                           ? ld4_v2(CAT_OFF_V2 + b * CAT_V2SB + uint(jv - int(CAT_V_PART)) * pc.vss + kvh * CAT_V2SH, 4u * col)
                           : ld4_v(pc.off_v + b * pc.vsb + uint(jv) * pc.vss + kvh * pc.vsh, 4u * col);
#else
          const FV v = ld4_v(pc.off_v + b * pc.vsb + uint(j0 + c) * pc.vss + kvh * pc.vsh, 4u * col);
#endif
          for (uint r = 0u; r < NR; ++r) o[r] = fma(FV(Pd[r * NT + uint(c)]), v, o[r]);
        }
      }
    }
    barrier();  // P is no longer read
    wg_reduce(l, false);

    // Each row's KS partial outputs summed through shared memory, then written.
    for (uint r = 0u; r < NR; ++r) {
      if (ks < KS) Od[ks * DV + col] = o[r];
      barrier();
      if (tid < DV) {
        FV a = Od[tid];
        for (uint u = 1u; u < KS; ++u) a += Od[u * DV + tid];
#if SPLIT
        const uint row = (b * heads + rh[r]) * pc.q_len + ri[r];
        const uint base = pc.off_o + ((gl_WorkGroupID.y * pc.batch * heads * pc.q_len) + row) * (D + 2u);
        for (uint e = 0u; e < 4u; ++e)
          if (4u * tid + e < D) Out.data[base + 4u * tid + e] = a[e];
        if (tid == 0u) {
          Out.data[base + D] = m[r];
          Out.data[base + D + 1u] = l[r];
        }
#else
        const F inv = m[r] == NEG_INF ? F(0.0) : F(1.0) / l[r];
        const uint obase = pc.off_o + b * pc.osb + ri[r] * pc.oss + rh[r] * pc.osh;
        for (uint e = 0u; e < 4u; ++e)
          if (4u * tid + e < D) st_o(obase + 4u * tid + e, m[r] == NEG_INF ? F(0.0) : a[e] * inv);
#endif
      }
      barrier();
    }
#if MERGE
    // The last split of (b, kvh) to finish merges every split's partials of its rows (as
    // attn_combine does, in split order) and resets its counter for the next run.
    memoryBarrierBuffer();
    barrier();
    if (tid == 0u) merge_here = atomicAdd(Mrg.data[1u + bh], 1u) == gl_NumWorkGroups.y - 1u;
    barrier();
    if (merge_here) {
      memoryBarrierBuffer();
      const uint stride = pc.batch * heads * pc.q_len * (D + 2u);  // between splits
      for (uint x = tid; x < NR * NSPLIT; x += NT) {  // one load each, all in flight together
        const uint r = x / NSPLIT;
        const uint row = (b * heads + kvh * pc.group + r % pc.group) * pc.q_len + r / pc.group;
        const uint at = pc.off_o + row * (D + 2u) + (x % NSPLIT) * stride + D;
        Mm[x] = Out.data[at];
        Ml[x] = Out.data[at + 1u];
      }
      barrier();
      for (uint x = tid; x < NR * D; x += NT) {
        const uint r = x / D, d = x % D, qi = r / pc.group, qh = kvh * pc.group + r % pc.group;
        const uint base = pc.off_o + ((b * heads + qh) * pc.q_len + qi) * (D + 2u) + d;
        F mx = NEG_INF;
        for (uint sp = 0u; sp < NSPLIT; ++sp) mx = Mm[r * NSPLIT + sp] > mx ? Mm[r * NSPLIT + sp] : mx;
        F lsum = F(0.0), acc = F(0.0);
        for (uint sp = 0u; sp < NSPLIT; ++sp) {
          const F ms = Mm[r * NSPLIT + sp], pv = Out.data[base + sp * stride];
          if (ms != NEG_INF) {
            const F w = attn_exp(ms - mx);
            lsum += Ml[r * NSPLIT + sp] * w;
            acc += pv * w;
          }
        }
        st_fin(Mrg.data[0] + b * pc.osb + qi * pc.oss + qh * pc.osh + d, mx == NEG_INF ? F(0.0) : acc / lsum);
      }
      if (tid == 0u) Mrg.data[1u + bh] = 0u;
    }
    barrier();
#endif
  }
}
)";

// attn_combine: merges the SPLIT partials of each (b, h, i) row: one workgroup per row
// (grid-stride), threads over the dims.
inline constexpr const char* kAttentionCombine = R"(
layout(local_size_x = 64) in;


void main() {
  const uint rows = pc.batch * pc.heads * pc.q_len;
  const uint D = pc.head_dim;
  const uint stride = rows * (D + 2);  // between splits
  for (uint row = gl_WorkGroupID.x; row < rows; row += gl_NumWorkGroups.x) {
    const uint i = row % pc.q_len, bh = row / pc.q_len, h = bh % pc.heads, b = bh / pc.heads;
    const uint base = pc.off_p + row * (D + 2);
    F m = NEG_INF;
    for (uint s = 0; s < pc.splits; ++s) {
      const F ms = P.data[base + s * stride + D];
      if (ms > m) m = ms;
    }
    F l = 0.0;
    for (uint s = 0; s < pc.splits; ++s) {
      const F ms = P.data[base + s * stride + D];
      if (ms != NEG_INF) l += P.data[base + s * stride + D + 1] * attn_exp(ms - m);
    }
    const uint obase = pc.off_o + b * pc.osb + i * pc.oss + h * pc.osh;
    for (uint d = gl_LocalInvocationID.x; d < D; d += 64) {
      F acc = 0.0;
      for (uint s = 0; s < pc.splits; ++s) {
        const F ms = P.data[base + s * stride + D];
        if (ms != NEG_INF) acc += P.data[base + s * stride + d] * attn_exp(ms - m);
      }
      st_o(obase + d, m == NEG_INF ? 0.0 : acc / l);
    }
  }
}
)";

}  // namespace rlx::vulkan::ksrc
