#pragma once
// GLSL templates of the Vulkan attention kernels (lower_attention.cpp prepends the header, the
// buffers, the push-constant block, the #defines and the load/store helpers).
//
// attn_flash: one workgroup per (block of BR query rows, key split, batch x kv head). A block's
// rows are (query row i, head of the GQA group) pairs, R = i * GROUP + g, so the heads that share
// a KV head read each K/V tile once. NT threads; thread t owns row t / TPR and, of that row, the
// score columns t % TPR + TPR * k and the output dims t % TPR + TPR * k. Per tile of BC keys:
//   K tile -> shared; scores (scale, softcap, bias, masks) in registers; the tile's row max over
//   the row's TPR threads through shared memory; online softmax in f32 (each thread keeps its
//   own part of the row sum, rescaled with the shared max, summed at the end); P -> shared;
//   V tile -> shared (over the K tile); O += P V.
// SPLIT: the block only takes keys [split * split_len, (split + 1) * split_len) and writes the
// unnormalized partial (o[D], row max, row sum) of each row to scratch; attn_combine merges the
// splits. A row with no kept key (or whose kept keys all score -inf) outputs zeros.
//
// Defines: F (the compute type: float, or double for f64), D (head_dim), BR, BC, NT, TPR, MASK
// (0 none, 1 causal, 2 sliding window, 3 custom keep mask, 4 additive bias), SPLIT, SCALE and
// SOFTCAP (the push constants as F), TANH_SMALL. Helpers: ld_q/ld_k/ld_v(uint) -> F,
// st_o(uint, F), keep_at(uint) -> bool (MASK 3), bias_at(uint) -> F (MASK 4). Push constants
// `pc`; m0..m3 hold the mask's parameters (the window, the keep mask's batch stride, or the
// bias strides).

namespace rlx::vulkan::ksrc {

// exp and tanh of the compute type F. GLSL has no double exp: for F = double, exp(x) =
// 2^k exp(r) with r = x - k ln2 (ln2 split in two, |r| <= ln2 / 2) and exp(r) from its Taylor
// series to degree 14 (below 2e-16 relative).
inline constexpr const char* kAttentionMath = R"(
#define NEG_INF F(uintBitsToFloat(0xff800000u))
#if F_DOUBLE
double attn_exp(double x) {
  if (isnan(x)) return x;
  if (x < -745.0LF) return 0.0LF;
  if (x > 709.7LF) return double(uintBitsToFloat(0x7f800000u));
  double k = roundEven(x * 1.4426950408889634LF);
  double r = x - k * 6.93147180369123816490e-01LF - k * 1.90821492927058770002e-10LF;
  double p = 1.0LF;
  for (int n = 14; n >= 1; --n) p = 1.0LF + r * p / double(n);
  return ldexp(p, int(k));
}
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

inline constexpr const char* kAttentionFlash = R"(
layout(local_size_x = NT) in;

const uint DP = D + 1;    // padded row of the Q / K / V tiles (no bank conflicts)
const uint BP = BC + 1;   // padded row of the P tile
const uint NS = BC / TPR; // score columns per thread
const uint NA = (D + TPR - 1) / TPR;  // output dims per thread

shared F Qs[BR * DP];
shared F KVs[BC * DP];
shared F Ps[BR * BP];
shared F Red[NT];

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint r = tid / TPR;     // this thread's row in the block
  const uint lane = tid % TPR;  // its place among the row's threads
  const uint nrows = pc.q_len * pc.group;
  const uint nblk = (nrows + BR - 1) / BR;
  const uint heads = pc.kv_heads * pc.group;
  const int q_len = int(pc.q_len), kv_len = int(pc.kv_len);

  for (uint bh = gl_WorkGroupID.z; bh < pc.batch * pc.kv_heads; bh += gl_NumWorkGroups.z) {
    const uint b = bh / pc.kv_heads, kvh = bh % pc.kv_heads;
    for (uint blk = gl_WorkGroupID.x; blk < nblk; blk += gl_NumWorkGroups.x) {
      const uint R0 = blk * BR;
      const uint R1 = min(R0 + BR, nrows);
      // This thread's row.
      const uint R = R0 + r;
      const bool valid = R < nrows;
      const uint ri = valid ? R / pc.group : 0u;
      const uint rh = kvh * pc.group + (valid ? R % pc.group : 0u);
      const int pos = kv_len - q_len + int(ri);

      // Keys the block may see: rows are ordered by position.
      int lo = 0, hi = kv_len;
#if MASK == 1 || MASK == 2
      hi = clamp(kv_len - q_len + int((R1 - 1) / pc.group) + 1, 0, kv_len);
#endif
#if MASK == 2
      lo = clamp(kv_len - q_len + int(R0 / pc.group) - int(pc.m0) + 1, 0, kv_len);
#endif
#if SPLIT
      lo = max(lo, int(gl_WorkGroupID.y * pc.split_len));
      hi = min(hi, int(min(uint(kv_len), (gl_WorkGroupID.y + 1u) * pc.split_len)));
#endif
      // This row's own visible range (causal / window).
      int rlo = 0, rhi = kv_len;
#if MASK == 1 || MASK == 2
      rhi = clamp(pos + 1, 0, kv_len);
#endif
#if MASK == 2
      rlo = clamp(pos - int(pc.m0) + 1, 0, kv_len);
#endif

      // Q tile.
      for (uint x = tid; x < BR * D; x += NT) {
        const uint qr = x / D, d = x % D, QR = R0 + qr;
        F v = F(0.0);
        if (QR < nrows) {
          const uint i = QR / pc.group, h = kvh * pc.group + QR % pc.group;
          v = ld_q(pc.off_q + b * pc.qsb + i * pc.qss + h * pc.qsh + d);
        }
        Qs[qr * DP + d] = v;
      }

      F m = NEG_INF, l = 0.0;
      F o[NA];
      for (uint k = 0; k < NA; ++k) o[k] = 0.0;

      for (int j0 = lo; j0 < hi; j0 += int(BC)) {
        // K tile (keys past hi as zeros: masked below).
        barrier();  // the previous tile's V and P reads are done
        for (uint x = tid; x < BC * D; x += NT) {
          const uint c = x / D, d = x % D;
          const int j = j0 + int(c);
          KVs[c * DP + d] = j < hi ? ld_k(pc.off_k + b * pc.ksb + uint(j) * pc.kss + kvh * pc.ksh + d) : 0.0;
        }
        barrier();

        F s[NS];
        F tmax = NEG_INF;
        for (uint k = 0; k < NS; ++k) s[k] = 0.0;
        if (valid) {
          for (uint d = 0; d < D; ++d) {
            const F qv = Qs[r * DP + d];
            for (uint k = 0; k < NS; ++k) s[k] += qv * KVs[(lane + TPR * k) * DP + d];
          }
          for (uint k = 0; k < NS; ++k) {
            const int j = j0 + int(lane + TPR * k);
            F x = s[k] * SCALE;
            bool keep = j < hi && j >= rlo && j < rhi;
#if MASK == 3
            keep = keep && keep_at(pc.off_m + b * pc.m0 + uint(j));
#endif
            if (keep) {
              if (SOFTCAP > 0.0) x = SOFTCAP * attn_tanh(x / SOFTCAP);
#if MASK == 4
              x += bias_at(pc.off_m + b * pc.m0 + rh * pc.m1 + ri * pc.m2 + uint(j) * pc.m3);
#endif
            } else {
              x = NEG_INF;
            }
            s[k] = x;
            if (x > tmax) tmax = x;  // NaN scores do not raise the max (as on the CPU)
          }
        } else {
          for (uint k = 0; k < NS; ++k) s[k] = NEG_INF;
        }
        Red[tid] = tmax;
        barrier();  // the row maxima are in Red; the K tile is no longer read

        for (uint u = 0; u < TPR; ++u) {
          const F v = Red[r * TPR + u];
          if (v > tmax) tmax = v;
        }
        const F mnew = tmax > m ? tmax : m;
        const F alpha = m == mnew ? 1.0 : (m == NEG_INF ? 0.0 : attn_exp(m - mnew));
        F psum = 0.0;
        for (uint k = 0; k < NS; ++k) {
          const F p = s[k] == NEG_INF ? 0.0 : attn_exp(s[k] - mnew);
          Ps[r * BP + lane + TPR * k] = p;
          psum += p;
        }
        l = l * alpha + psum;
        m = mnew;
        // V tile over the K tile.
        for (uint x = tid; x < BC * D; x += NT) {
          const uint c = x / D, d = x % D;
          const int j = j0 + int(c);
          KVs[c * DP + d] = j < hi ? ld_v(pc.off_v + b * pc.vsb + uint(j) * pc.vss + kvh * pc.vsh + d) : 0.0;
        }
        barrier();

        for (uint k = 0; k < NA; ++k) o[k] *= alpha;
        for (uint c = 0; c < BC; ++c) {
          const F p = Ps[r * BP + c];
          for (uint k = 0; k < NA; ++k) {
            const uint d = lane + TPR * k;
            if (NA * TPR == D || d < D) o[k] += p * KVs[c * DP + d];
          }
        }
      }

      // The row sum over the row's threads.
      barrier();
      Red[tid] = l;
      barrier();
      F lsum = 0.0;
      for (uint u = 0; u < TPR; ++u) lsum += Red[r * TPR + u];

#if SPLIT
      // Partials: [split][row][D + 2] with the row (b, h, i) as (b * heads + h) * q_len + i.
      if (valid) {
        const uint row = (b * heads + rh) * pc.q_len + ri;
        const uint base = pc.off_o + ((gl_WorkGroupID.y * pc.batch * heads * pc.q_len) + row) * (D + 2);
        for (uint k = 0; k < NA; ++k) {
          const uint d = lane + TPR * k;
          if (NA * TPR == D || d < D) Out.data[base + d] = o[k];
        }
        if (lane == 0) {
          Out.data[base + D] = m;
          Out.data[base + D + 1] = lsum;
        }
      }
#else
      // Normalized rows through the Q tile, then written with consecutive threads on consecutive dims.
      const F inv = m == NEG_INF ? 0.0 : 1.0 / lsum;
      for (uint k = 0; k < NA; ++k) {
        const uint d = lane + TPR * k;
        if (NA * TPR == D || d < D) Qs[r * DP + d] = m == NEG_INF ? 0.0 : o[k] * inv;
      }
      barrier();
      for (uint x = tid; x < BR * D; x += NT) {
        const uint qr = x / D, d = x % D, QR = R0 + qr;
        if (QR < nrows) {
          const uint i = QR / pc.group, h = kvh * pc.group + QR % pc.group;
          st_o(pc.off_o + b * pc.osb + i * pc.oss + h * pc.osh + d, Qs[qr * DP + d]);
        }
      }
#endif
      barrier();  // the Q tile and Red are free for the next block
    }
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
