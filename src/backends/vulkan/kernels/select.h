#pragma once
// GLSL templates of the Select, Scan, Scatter and Random families (lower_select.cpp,
// lower_scan.cpp, lower_scatter.cpp, lower_random.cpp fill the placeholders and prepend the
// header, buffers and #defines). Every kernel runs 256 invocations per workgroup and loops over
// its tiles / rows / items (grid-stride), so any grid within max_groups[0] covers any size.
#include "backends/vulkan/kernels/double_math.h"  // kDoubleMath, used with these kernels

namespace rlx::vulkan::ksrc {

// Rank keys (TopK, Sample): an unsigned integer whose order is the value order. Floats map -0
// to +0 and every NaN to the largest key (NaN ranks above every number, like the CPU backend);
// signed integers flip the sign bit.
inline constexpr const char* kKeys = R"GLSL(
uint rlx_fkey(float v) {
  if (isnan(v)) return 0xffffffffu;
  if (v == 0.0) return 0x80000000u;
  const uint u = floatBitsToUint(v);
  return (u & 0x80000000u) != 0u ? ~u : (u | 0x80000000u);
}
float rlx_key_float(uint k) {
  return uintBitsToFloat((k & 0x80000000u) != 0u ? (k & 0x7fffffffu) : ~k);
}
uint64_t rlx_dkey(double v) {
  if (isnan(v)) return ~uint64_t(0);
  if (v == 0.0) return uint64_t(1) << 63;
  const uvec2 w = unpackDouble2x32(v);
  const uint64_t u = (uint64_t(w.y) << 32) | uint64_t(w.x);
  return (w.y & 0x80000000u) != 0u ? ~u : (u | (uint64_t(1) << 63));
}
)GLSL";

// Workgroup exclusive prefix sum of one uint per invocation (256 invocations); every
// invocation must call it. With SUBGROUPS the subgroups scan and one shared slot per subgroup
// carries their totals.
inline constexpr const char* kWgScan = R"GLSL(
shared uint rlx_scan_sh[256];
uint rlx_wg_exclusive(uint v, out uint total) {
  const uint lid = gl_LocalInvocationID.x;
#ifdef SUBGROUPS
  const uint incl = subgroupInclusiveAdd(v);
  if (gl_SubgroupInvocationID == gl_SubgroupSize - 1u) rlx_scan_sh[gl_SubgroupID] = incl;
  barrier();
  uint pre = 0u, tot = 0u;
  for (uint g = 0u; g < gl_NumSubgroups; ++g) {
    const uint x = rlx_scan_sh[g];
    if (g < gl_SubgroupID) pre += x;
    tot += x;
  }
  barrier();
  total = tot;
  return pre + incl - v;
#else
  rlx_scan_sh[lid] = v;
  barrier();
  for (uint d = 1u; d < 256u; d <<= 1) {
    const uint add = lid >= d ? rlx_scan_sh[lid - d] : 0u;
    barrier();
    rlx_scan_sh[lid] += add;
    barrier();
  }
  const uint incl = rlx_scan_sh[lid];
  total = rlx_scan_sh[255];
  barrier();
  return incl - v;
#endif
}
)GLSL";

// Radix select and the ranked gather shared by TopK and Sample. Needs KT (uint or uint64_t),
// KBITS, P2 (a power of two >= the kept count) and `KT key_of(uint row_base, uint j)`.
// rlx_gather_top(k) leaves the k first elements of the row in rank order (larger key first,
// ties: lower index first) in rlx_skey / rlx_sidx [0, k), the slots [k, P2) padded, sorted.
inline constexpr const char* kRadix = R"GLSL(
shared uint rlx_cnt[256];
shared KT rlx_skey[P2];
shared uint rlx_sidx[P2];
shared KT rlx_sh_prefix;
shared uint rlx_sh_rem;
shared uint rlx_sh_count;

// The key of the n-th element (1-based) in rank order; `rank`: its rank among the elements
// of that key (1-based, in index order).
KT rlx_radix_nth(uint rb, uint len, uint n, out uint rank) {
  const uint lid = gl_LocalInvocationID.x;
  KT prefix = KT(0);
  uint rem = n;
  for (int shift = KBITS - 8; shift >= 0; shift -= 8) {
    rlx_cnt[lid] = 0u;
    barrier();
    const KT hi_mask = shift + 8 >= KBITS ? KT(0) : (~KT(0)) << (shift + 8);
    for (uint j = lid; j < len; j += 256u) {
      const KT k = key_of(rb, j);
      if ((k & hi_mask) == prefix) atomicAdd(rlx_cnt[uint(k >> shift) & 255u], 1u);
    }
    barrier();
    if (lid == 0u) {
      int d = 255;
      for (; d > 0; --d) {
        if (rem <= rlx_cnt[d]) break;
        rem -= rlx_cnt[d];
      }
      rlx_sh_prefix = prefix | (KT(d) << shift);
      rlx_sh_rem = rem;
    }
    barrier();
    prefix = rlx_sh_prefix;
    rem = rlx_sh_rem;
    barrier();
  }
  rank = rem;
  return prefix;
}

bool rlx_ranks_after(KT ka, uint ia, KT kb, uint ib) { return ka < kb || (ka == kb && ia > ib); }

void rlx_gather_top(uint rb, uint len, uint k) {
  const uint lid = gl_LocalInvocationID.x;
  uint rank = 0u;
  const KT kth = rlx_radix_nth(rb, len, k, rank);
  for (uint s = lid; s < P2; s += 256u) { rlx_skey[s] = KT(0); rlx_sidx[s] = 0xffffffffu; }
  if (lid == 0u) rlx_sh_count = 0u;
  barrier();
  for (uint j = lid; j < len; j += 256u) {
    const KT key = key_of(rb, j);
    if (key > kth) {
      const uint slot = atomicAdd(rlx_sh_count, 1u);
      rlx_skey[slot] = key;  // exactly k - rank elements rank above the k-th key
      rlx_sidx[slot] = j;
    }
  }
  barrier();
  const uint base = rlx_sh_count;
  barrier();
  // The first `rank` elements of key kth, in index order (chunks of 256, a workgroup scan each).
  uint seen = 0u;
  for (uint c0 = 0u; c0 < len && seen < rank; c0 += 256u) {
    const uint j = c0 + lid;
    const bool f = j < len && key_of(rb, j) == kth;
    uint total;
    const uint before = rlx_wg_exclusive(f ? 1u : 0u, total);
    if (f && seen + before < rank) {
      rlx_skey[base + seen + before] = kth;
      rlx_sidx[base + seen + before] = j;
    }
    seen += total;
  }
  barrier();
  // Bitonic sort of the P2 slots into rank order (padding: key 0, index ~0, ranks last).
  for (uint size = 2u; size <= P2; size <<= 1)
    for (uint stride = size >> 1; stride > 0u; stride >>= 1) {
      for (uint t = lid; t < P2 / 2u; t += 256u) {
        const uint a = 2u * stride * (t / stride) + (t % stride), b = a + stride;
        const bool up = (a & size) == 0u;
        if (rlx_ranks_after(rlx_skey[a], rlx_sidx[a], rlx_skey[b], rlx_sidx[b]) == up) {
          const KT tk = rlx_skey[a]; rlx_skey[a] = rlx_skey[b]; rlx_skey[b] = tk;
          const uint ti = rlx_sidx[a]; rlx_sidx[a] = rlx_sidx[b]; rlx_sidx[b] = ti;
        }
      }
      barrier();
    }
}
)GLSL";

// ArgMax / ArgMin: x [outer, len, inner] -> i64 [outer, inner]. A workgroup takes TI columns
// (consecutive inner positions) x S = 256 / TI lanes along the axis; the lanes scan strided
// axis positions (coalesced across the columns, or across the lanes when TI = 1), then a
// shared-memory tree combines them. Needs CT (compare type), LOADC(i), ISNAN(v), TI.
inline constexpr const char* kArgReduce = R"GLSL(
layout(push_constant) uniform P { uint ox; uint oy; uint outer; uint len; uint inner; uint is_max; uint last; } pc;
#define S (256u / TI)
#define NONE 0xffffffffu
shared CT sv[256];
shared uint si[256];
// Whether (v, i) beats (b, bi): NaN ranks above every number for argmax and argmin; ties (and
// NaN vs NaN) go to the first index, or the last with `last`.
bool prefer(CT v, uint i, CT b, uint bi) {
  const bool vn = ISNAN(v), bn = ISNAN(b);
  if (vn || bn) {
    if (vn != bn) return vn;
    return pc.last != 0u ? i > bi : i < bi;
  }
  if (v == b) return pc.last != 0u ? i > bi : i < bi;
  return pc.is_max != 0u ? v > b : v < b;
}
void main() {
  const uint lid = gl_LocalInvocationID.x, c = lid % TI, s = lid / TI;
  const uint ctiles = (pc.inner + TI - 1u) / TI;
  const uint tiles = pc.outer * ctiles;
  for (uint tile = gl_WorkGroupID.x; tile < tiles; tile += gl_NumWorkGroups.x) {
    const uint o = tile / ctiles, col = (tile % ctiles) * TI + c;
    CT bv = CT(0);
    uint bi = NONE;
    if (col < pc.inner)
      for (uint m = s; m < pc.len; m += S) {
        const CT v = LOADC(pc.ox + (o * pc.len + m) * pc.inner + col);
        if (bi == NONE || prefer(v, m, bv, bi)) { bv = v; bi = m; }
      }
    sv[lid] = bv;
    si[lid] = bi;
    barrier();
    for (uint step = S / 2u; step > 0u; step >>= 1) {
      if (s < step) {
        const uint other = lid + step * TI;
        if (si[other] != NONE && (si[lid] == NONE || prefer(sv[other], si[other], sv[lid], si[lid]))) {
          sv[lid] = sv[other];
          si[lid] = si[other];
        }
      }
      barrier();
    }
    if (s == 0u && col < pc.inner) y.data[pc.oy + o * pc.inner + col] = int64_t(si[lid]);
    barrier();
  }
}
)GLSL";

// TopK: x [outer, len, inner] -> values (x's dtype) / i64 indices [outer, k, inner] in rank
// order; one workgroup per (outer, inner) row. After kKeys, kWgScan, kRadix; needs
// KEY(v) of a LOADC value, LOADC(i), LARGEST handled by the push word.
inline constexpr const char* kTopK = R"GLSL(
void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint rows = pc.outer * pc.inner;
  for (uint row = gl_WorkGroupID.x; row < rows; row += gl_NumWorkGroups.x) {
    const uint o = row / pc.inner, i = row % pc.inner;
    const uint rb = pc.ox + o * pc.len * pc.inner + i;
    rlx_gather_top(rb, pc.len, pc.k);
    for (uint r = lid; r < pc.k; r += 256u) {
      const uint dst = (o * pc.k + r) * pc.inner + i;
      const uint src = rlx_sidx[r];
      vals.data[pc.ov + dst] = x.data[rb + src * pc.inner];
      idxs.data[pc.oi + dst] = int64_t(src);
    }
    barrier();
  }
}
)GLSL";

// Philox-4x32-10 (the CPU's philox.h stream): key (seed lo, seed hi), counter (block lo,
// block hi, offset lo, offset hi).
inline constexpr const char* kPhilox = R"GLSL(
uvec4 rlx_philox(uvec4 c, uint k0, uint k1) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
    uint hi0, lo0, hi1, lo1;
    umulExtended(0xD2511F53u, c.x, hi0, lo0);
    umulExtended(0xCD9E8D57u, c.z, hi1, lo1);
    c = uvec4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
  }
  return c;
}
uvec4 rlx_philox_block(uvec2 seed, uvec2 offset, uint block_lo, uint block_hi) {
  return rlx_philox(uvec4(block_lo, block_hi, offset.x, offset.y), seed.x, seed.y);
}
)GLSL";



}  // namespace rlx::vulkan::ksrc
