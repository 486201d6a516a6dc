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
// Defines: D (head_dim), BR, BC, NT, TPR, MASK (0 none, 1 causal, 2 sliding window, 3 custom keep
// mask, 4 additive bias), SPLIT. Helpers: ld_q/ld_k/ld_v(uint) -> float, st_o(uint, float),
// keep_at(uint) -> bool (MASK 3), bias_at(uint) -> float (MASK 4). Push constants `pc`.

namespace rlx::vulkan::ksrc {

inline constexpr const char* kAttentionFlash = R"(
layout(local_size_x = NT) in;

#define NEG_INF uintBitsToFloat(0xff800000u)
const uint DP = D + 1;    // padded row of the Q / K / V tiles (no bank conflicts)
const uint BP = BC + 1;   // padded row of the P tile
const uint NS = BC / TPR; // score columns per thread
const uint NA = (D + TPR - 1) / TPR;  // output dims per thread

shared float Qs[BR * DP];
shared float KVs[BC * DP];
shared float Ps[BR * BP];
shared float Red[NT];

float attn_tanh(float x) {
  float a = abs(x);
  if (a < 0.004) return x;
  float e = exp(-2.0 * a);
  float t = (1.0 - e) / (1.0 + e);
  return x < 0.0 ? -t : t;
}

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
      lo = clamp(kv_len - q_len + int(R0 / pc.group) - int(pc.window) + 1, 0, kv_len);
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
      rlo = clamp(pos - int(pc.window) + 1, 0, kv_len);
#endif

      // Q tile.
      for (uint x = tid; x < BR * D; x += NT) {
        const uint qr = x / D, d = x % D, QR = R0 + qr;
        float v = 0.0;
        if (QR < nrows) {
          const uint i = QR / pc.group, h = kvh * pc.group + QR % pc.group;
          v = ld_q(pc.off_q + b * pc.qsb + i * pc.qss + h * pc.qsh + d);
        }
        Qs[qr * DP + d] = v;
      }

      float m = NEG_INF, l = 0.0;
      float o[NA];
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

        float s[NS];
        float tmax = NEG_INF;
        for (uint k = 0; k < NS; ++k) s[k] = 0.0;
        if (valid) {
          for (uint d = 0; d < D; ++d) {
            const float qv = Qs[r * DP + d];
            for (uint k = 0; k < NS; ++k) s[k] += qv * KVs[(lane + TPR * k) * DP + d];
          }
          for (uint k = 0; k < NS; ++k) {
            const int j = j0 + int(lane + TPR * k);
            float x = s[k] * pc.scale;
            bool keep = j < hi && j >= rlo && j < rhi;
#if MASK == 3
            keep = keep && keep_at(pc.off_m + b * pc.mask_batch + uint(j));
#endif
            if (keep) {
              if (pc.softcap > 0.0) x = pc.softcap * attn_tanh(x / pc.softcap);
#if MASK == 4
              x += bias_at(pc.off_m + b * pc.bs0 + rh * pc.bs1 + ri * pc.bs2 + uint(j) * pc.bs3);
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
          const float v = Red[r * TPR + u];
          if (v > tmax) tmax = v;
        }
        const float mnew = tmax > m ? tmax : m;
        const float alpha = m == mnew ? 1.0 : (m == NEG_INF ? 0.0 : exp(m - mnew));
        float psum = 0.0;
        for (uint k = 0; k < NS; ++k) {
          const float p = s[k] == NEG_INF ? 0.0 : exp(s[k] - mnew);
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
          const float p = Ps[r * BP + c];
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
      float lsum = 0.0;
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
      const float inv = m == NEG_INF ? 0.0 : 1.0 / lsum;
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

#define NEG_INF uintBitsToFloat(0xff800000u)

void main() {
  const uint rows = pc.batch * pc.heads * pc.q_len;
  const uint D = pc.head_dim;
  const uint stride = rows * (D + 2);  // between splits
  for (uint row = gl_WorkGroupID.x; row < rows; row += gl_NumWorkGroups.x) {
    const uint i = row % pc.q_len, bh = row / pc.q_len, h = bh % pc.heads, b = bh / pc.heads;
    const uint base = pc.off_p + row * (D + 2);
    float m = NEG_INF;
    for (uint s = 0; s < pc.splits; ++s) {
      const float ms = P.data[base + s * stride + D];
      if (ms > m) m = ms;
    }
    float l = 0.0;
    for (uint s = 0; s < pc.splits; ++s) {
      const float ms = P.data[base + s * stride + D];
      if (ms != NEG_INF) l += P.data[base + s * stride + D + 1] * exp(ms - m);
    }
    const uint obase = pc.off_o + b * pc.osb + i * pc.oss + h * pc.osh;
    for (uint d = gl_LocalInvocationID.x; d < D; d += 64) {
      float acc = 0.0;
      for (uint s = 0; s < pc.splits; ++s) {
        const float ms = P.data[base + s * stride + D];
        if (ms != NEG_INF) acc += P.data[base + s * stride + d] * exp(ms - m);
      }
      st_o(obase + d, m == NEG_INF ? 0.0 : acc / l);
    }
  }
}
)";

}  // namespace rlx::vulkan::ksrc
