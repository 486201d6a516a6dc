#pragma once
// Flash attention on cooperative matrices (VK_NV_cooperative_matrix; lower_attention.cpp picks it
// for f16 inputs, and f32 inputs under the Fp16 precision policy, where the device has the
// extension, subgroups of 32 and shuffles). Same rows, masks, splits and push constants as
// attn_flash (kernels/attention.h: attn_score, attn_block_keys and attn_row_keys come from there).
//
// A workgroup of NW subgroups takes BR = 16 NW rows of a KV head; subgroup s owns rows 16 s ..
// 16 s + 15, its Q rows as DT = D / 16 f16 matrices in registers and its output as DT f32
// accumulators, which never leave the registers until the end. Per tile of BC keys: the K tile
// (then the V tile, over it when KV_ALIAS) goes to shared memory as 16-byte words of 8 halves;
// each subgroup multiplies its Q by K^T into CT = BC / 16 accumulators, stores them to its score
// tile in shared memory, and two invocations per row run the online softmax over it (scores
// scaled, masked, softcapped and biased by attn_score; max and sum through one shuffle), writing
// P in f16 to the subgroup's P tile and the row's rescale factor to Rs. The accumulators are
// rescaled per row: which row a component of an accumulator holds is implementation-defined, so
// a matrix whose elements are their row numbers is loaded once (rid) and its components name
// the rows (the factors are read once per tile for all accumulators). Then O += P V on the matrices. The end: O scaled by 1 / l (or the partial and its
// max and sum when SPLIT), each accumulator through the score tile to global memory.
//
// bf16 (BF16M 1, devices with DeviceInfo::coopmat_bf16): Q, K, V as bf16 pairs in the words, P
// rounded to bf16, the shader rewritten to KHR matrices with bf16 A / B (spirv_coopmat.h; the A
// operands Q and P and the B operands K and V are distinct types, HALF_A / HALF_B).
//
// Defines: NW, NT (32 NW), BR, BC (16, 32 or 64), BF16M, D (a multiple of 16, at most 128), DT, CT,
// KV_ALIAS, KVW (words of the K/V area), V_OFF (the V tile's first word), MASK, SPLIT, FOR_DT(X)
// (X(0u) X(1u) .. X(DT - 1): the arrays of cooperative matrices are only indexed by constants, so
// they stay in registers) and STORE_O (one store_o(o[d], d, ...) per accumulator). Helpers
// ld8_q / ld8_k / ld8_v(uint row, uint d) -> uvec4: elements d .. d + 7 of the row starting at
// element `row`, as f16 (bf16 when BF16M) pairs; st_o(uint, float). kCoopmatBTypeDecl before it.

namespace rlx::vulkan::ksrc {

inline constexpr const char* kAttentionCoopNV = R"(
layout(local_size_x = NT) in;

#define ACC fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define HALF_A fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define HALF_B fcoopmatNV<16, gl_ScopeSubgroup, CM_B16, CM_B16>
const uint DW = D / 8u;          // words of a row of Q, K or V
const uint KW = DW + 1u;         // row stride of the Q / K / V tiles in words (one word of padding)
const uint SST = BC + 4u;        // row stride of a score tile (floats)
const uint PW = BC / 8u + 1u;    // row stride of a P tile in words

shared uvec4 KVs[KVW];           // the Q tile at the start of a block, then K and V tiles
shared float Ss[NW * 16u * SST]; // per subgroup: scores, the row numbers, the output's staging
shared uvec4 Ps[NW * 16u * PW];  // per subgroup: P in f16
shared float Rs[NW * 16u];       // per row: the tile's rescale factor, then 1 / l

void sg_sync() {
  subgroupMemoryBarrierShared();
  subgroupBarrier();
}

// Row r's entries of accumulator m times f[r] for each row r (factors in Rs).
void scale_rows(inout ACC m, in ACC rid, uint sg) {
  for (int i = 0; i < m.length(); ++i) m[i] *= Rs[sg * 16u + uint(rid[i])];
}

// The accumulator of output columns 16 d .. 16 d + 15 of this subgroup's rows, scaled by Rs, to
// the output (or the split's partials) through the subgroup's score tile.
void store_o(ACC m, uint d, in ACC rid, uint sg, uint lane, uint b, uint kvh, uint R0, uint nrows, uint heads) {
  scale_rows(m, rid, sg);
  coopMatStoreNV(m, Ss, sg * 16u * SST, SST, false);
  sg_sync();
  for (uint e = lane; e < 256u; e += 32u) {
    const uint r = e / 16u, c = e % 16u, R = R0 + sg * 16u + r;
    if (R >= nrows) continue;
    const uint i = R / pc.group, h = kvh * pc.group + R % pc.group;
    const float v = Ss[sg * 16u * SST + r * SST + c];
#if SPLIT
    const uint row = (b * heads + h) * pc.q_len + i;
    Out.data[pc.off_o + ((gl_WorkGroupID.y * pc.batch * heads * pc.q_len) + row) * (D + 2u) + 16u * d + c] = v;
#else
    st_o(pc.off_o + b * pc.osb + i * pc.oss + h * pc.osh + 16u * d + c, v);
#endif
  }
  sg_sync();
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint my_r = lane / 2u, side = lane % 2u;  // the row and half of it this invocation softmaxes
  const uint nrows = pc.q_len * pc.group;
  const uint nblk = (nrows + BR - 1u) / BR;
  const uint heads = pc.kv_heads * pc.group;

  // rid: each component's row number.
  for (uint e = lane; e < 256u; e += 32u) Ss[sg * 16u * SST + (e / 16u) * SST + e % 16u] = float(e / 16u);
  sg_sync();
  ACC rid;
  coopMatLoadNV(rid, Ss, sg * 16u * SST, SST, false);
  sg_sync();

  for (uint bh = gl_WorkGroupID.z; bh < pc.batch * pc.kv_heads; bh += gl_NumWorkGroups.z) {
    const uint b = bh / pc.kv_heads, kvh = bh % pc.kv_heads;
    for (uint bi = gl_WorkGroupID.x; bi < nblk; bi += gl_NumWorkGroups.x) {
      const uint blk = nblk - 1u - bi;
      const uint R0 = blk * BR;
      const uint R1 = min(R0 + BR, nrows);
      int lo, hi;
      attn_block_keys(b, R0, R1, lo, hi);
      // This invocation's softmax row.
      const uint R = R0 + sg * 16u + my_r;
      const bool valid = R < nrows;
      const uint ri = valid ? R / pc.group : 0u, rh = kvh * pc.group + (valid ? R % pc.group : 0u);
      int rlo, rhi;
      attn_row_keys(b, ri, rlo, rhi);

      // The Q tile through shared memory into registers.
      barrier();  // the previous block's tiles are no longer read
      for (uint x = tid; x < BR * DW; x += NT) {
        const uint qr = x / DW, d8 = x % DW, QR = R0 + qr;
        uvec4 w = uvec4(0u);
        if (QR < nrows) {
          const uint i = QR / pc.group, h = kvh * pc.group + QR % pc.group;
          w = ld8_q(pc.off_q + b * pc.qsb + i * pc.qss + h * pc.qsh, 8u * d8);
        }
        KVs[qr * KW + d8] = w;
      }
      barrier();
      HALF_A qf[DT];
#define Q_LOAD(d) coopMatLoadNV(qf[d], KVs, sg * 16u * KW + 2u * d, KW, false);
      FOR_DT(Q_LOAD)
      ACC o[DT];
#define O_ZERO(d) o[d] = ACC(0.0);
      FOR_DT(O_ZERO)
      float m = NEG_INF, l = 0.0;

#if PREFETCH
      // The next tile's K and V words in registers while this tile computes.
      uvec4 pk[PF], pv[PF];
      for (uint q = 0u; q < PF; ++q) {
        const uint x = tid + q * NT, c = x / DW, d8 = x % DW;
        const int j = lo + int(c);
        pk[q] = j < hi ? ld8_k(pc.off_k + b * pc.ksb + uint(j) * pc.kss + kvh * pc.ksh, 8u * d8) : uvec4(0u);
        pv[q] = j < hi ? ld8_v(pc.off_v + b * pc.vsb + uint(j) * pc.vss + kvh * pc.vsh, 8u * d8) : uvec4(0u);
      }
#endif
      for (int j0 = lo; j0 < hi; j0 += int(BC)) {
        barrier();  // the previous tile's (and the Q tile's) reads are done
#if PREFETCH
        for (uint q = 0u; q < PF; ++q) {
          const uint x = tid + q * NT, c = x / DW, d8 = x % DW;
          KVs[c * KW + d8] = pk[q];
          KVs[V_OFF + c * KW + d8] = pv[q];
        }
        barrier();
        if (j0 + int(BC) < hi)
          for (uint q = 0u; q < PF; ++q) {
            const uint x = tid + q * NT, c = x / DW, d8 = x % DW;
            const int j = j0 + int(BC) + int(c);
            pk[q] = j < hi ? ld8_k(pc.off_k + b * pc.ksb + uint(j) * pc.kss + kvh * pc.ksh, 8u * d8) : uvec4(0u);
            pv[q] = j < hi ? ld8_v(pc.off_v + b * pc.vsb + uint(j) * pc.vss + kvh * pc.vsh, 8u * d8) : uvec4(0u);
          }
#else
        for (uint x = tid; x < BC * DW; x += NT) {
          const uint c = x / DW, d8 = x % DW;
          const int j = j0 + int(c);
          KVs[c * KW + d8] = j < hi ? ld8_k(pc.off_k + b * pc.ksb + uint(j) * pc.kss + kvh * pc.ksh, 8u * d8) : uvec4(0u);
#if !KV_ALIAS
          KVs[V_OFF + c * KW + d8] =
              j < hi ? ld8_v(pc.off_v + b * pc.vsb + uint(j) * pc.vss + kvh * pc.vsh, 8u * d8) : uvec4(0u);
#endif
        }
        barrier();
#endif

        // S = Q K^T (K read column-major: the B operand's column n is key n).
        for (uint c = 0u; c < CT; ++c) {
          ACC s = ACC(0.0);
#define S_STEP(d) { HALF_B kf; coopMatLoadNV(kf, KVs, c * 16u * KW + 2u * d, KW, true); s = coopMatMulAddNV(qf[d], kf, s); }
          FOR_DT(S_STEP)
          coopMatStoreNV(s, Ss, sg * 16u * SST + c * 16u, SST, false);
        }
        sg_sync();

        // Online softmax: this invocation's half row (BC / 2 scores).
        const uint sb = sg * 16u * SST + my_r * SST + side * (BC / 2u);
        float x[BC / 2u];
        float tmax = NEG_INF;
        // Tiles inside the row's visible keys take the scale alone (no mask, softcap or bias).
        const bool plain = (MASK < 3 || MASK == 5) && valid && SOFTCAP <= 0.0 && j0 >= rlo && j0 + int(BC) <= min(rhi, hi);
        if (plain) {
          for (uint c = 0u; c < BC / 2u; ++c) {
            x[c] = Ss[sb + c] * SCALE;
            if (x[c] > tmax) tmax = x[c];
          }
        } else {
          for (uint c = 0u; c < BC / 2u; ++c) {
            const int key = j0 + int(side * (BC / 2u) + c);
            const float v = valid ? attn_score(Ss[sb + c], key, hi, b, ri, rh, rlo, rhi) : NEG_INF;
            x[c] = v;
            if (v > tmax) tmax = v;  // NaN scores do not raise the max (as on the CPU)
          }
        }
        const float omax = subgroupShuffleXor(tmax, 1u);
        if (omax > tmax) tmax = omax;
        const float mnew = tmax > m ? tmax : m;
        const float alpha = m == mnew ? 1.0 : (m == NEG_INF ? 0.0 : exp(m - mnew));
        float psum = 0.0;
        const uint pb = (sg * 16u + my_r) * PW + side * (BC / 16u);
        for (uint w = 0u; w < BC / 16u; ++w) {
          uvec4 word;
          for (uint q = 0u; q < 4u; ++q) {
            const float a = x[8u * w + 2u * q], z = x[8u * w + 2u * q + 1u];
#if BF16M
            const uint ha = a == NEG_INF ? 0u : rlx_bf16_bits(exp(a - mnew));
            const uint hz = z == NEG_INF ? 0u : rlx_bf16_bits(exp(z - mnew));
            psum += uintBitsToFloat(ha << 16) + uintBitsToFloat(hz << 16);  // the sum of the P that multiplies V
            word[q] = ha | (hz << 16);
#else
            const f16vec2 h = f16vec2(a == NEG_INF ? 0.0 : exp(a - mnew), z == NEG_INF ? 0.0 : exp(z - mnew));
            psum += float(h.x) + float(h.y);  // the sum of the P that multiplies V
            word[q] = packFloat2x16(h);
#endif
          }
          Ps[pb + w] = word;
        }
        psum += subgroupShuffleXor(psum, 1u);
        l = l * alpha + psum;
        m = mnew;
        if (side == 0u) Rs[sg * 16u + my_r] = alpha;
        sg_sync();
        if (rid.length() <= 8) {  // every accumulator's components: the rows of rid's (NVIDIA: 8)
          float f[8];
          for (int i = 0; i < 8; ++i) f[i] = i < rid.length() ? Rs[sg * 16u + uint(rid[i])] : 0.0;
#define O_SCALE8(d) for (int i = 0; i < o[d].length(); ++i) o[d][i] *= f[i];
          FOR_DT(O_SCALE8)
        } else {
#define O_SCALE(d) scale_rows(o[d], rid, sg);
          FOR_DT(O_SCALE)
        }
#if KV_ALIAS
        barrier();  // every subgroup is done with the K tile
        for (uint x = tid; x < BC * DW; x += NT) {
          const uint c = x / DW, d8 = x % DW;
          const int j = j0 + int(c);
          KVs[c * KW + d8] = j < hi ? ld8_v(pc.off_v + b * pc.vsb + uint(j) * pc.vss + kvh * pc.vsh, 8u * d8) : uvec4(0u);
        }
        barrier();
#endif
        // O += P V.
        for (uint kc = 0u; kc < CT; ++kc) {
          HALF_A pf;
          coopMatLoadNV(pf, Ps, sg * 16u * PW + 2u * kc, PW, false);
#define PV_STEP(d) { HALF_B vf; coopMatLoadNV(vf, KVs, V_OFF + kc * 16u * KW + 2u * d, KW, false); o[d] = coopMatMulAddNV(pf, vf, o[d]); }
          FOR_DT(PV_STEP)
        }
      }

#if SPLIT
      if (side == 0u && valid) {
        const uint row = (b * heads + rh) * pc.q_len + ri;
        const uint base = pc.off_o + ((gl_WorkGroupID.y * pc.batch * heads * pc.q_len) + row) * (D + 2u);
        Out.data[base + D] = m;
        Out.data[base + D + 1u] = l;
      }
      if (side == 0u) Rs[sg * 16u + my_r] = 1.0;
#else
      if (side == 0u) Rs[sg * 16u + my_r] = m == NEG_INF ? 0.0 : 1.0 / l;
#endif
      sg_sync();
      STORE_O
    }
  }
}
)";

}  // namespace rlx::vulkan::ksrc
