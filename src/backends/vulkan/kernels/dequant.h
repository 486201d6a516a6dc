#pragma once
// GLSL templates of DequantMatMul on Vulkan (lower_dequant.cpp): y[m, n] = sum_k x[m, k] *
// dequant(w)[n, k], w the raw GGUF blocks (N rows of K / QE blocks of QB bytes, one row per output
// feature). The lowering prepends the header, the #defines, the bindings and `pc`, and the x / y
// accessors:
//   bindings X (x's dtype), W (the weight's window as uint words: it reaches the last, partial
//   word of the weight, since the backend binds whole words), Y (y's dtype); push constants
//   o_X o_W o_Y (o_W: the weight's first byte in the window), then m n k row_bytes;
//   float load_x(uint i), void store_y(uint i, float v).
// Every value is decoded as the CPU's reference decoder does (quant/ggml_blocks.cpp), in f32.
namespace rlx::vulkan::ksrc {

// Block decoding: dq16q(a, i0, q, scale, off) gives values i0 .. i0 + 15 (i0 a multiple of 16)
// of the block starting at byte a of W's window as value_j = scale * q[j] + off, q[j] integers
// (exact in f32; off is 0 but for the formats with a min: Q4_1, Q5_1, Q2_K, Q4_K, Q5_K, which
// define HAS_OFF), so that a dot product applies the scale once per 16 values; dq16 gives the
// values themselves. Integers become floats by the exponent trick (q | 0x4B000000 is 2^23 + q),
// an OR and an add, not a conversion (a quarter-rate instruction on NVIDIA GPUs). Bytes are read
// as 32-bit words at any alignment (GGUF blocks of 18, 22, 34, 110 or 210 bytes start on any even
// byte): the words around them and a funnel shift, never a word past the block's last byte
// (the window ends on a whole word).
// Defines: FMT (0 q4_0, 1 q4_1, 2 q5_0, 3 q5_1, 4 q8_0, 5 q2_k, 6 q3_k, 7 q4_k, 8 q5_k, 9 q6_k), QE, QB.
inline constexpr const char* kDequantDecode = R"(
#if FMT == 1 || FMT == 3 || FMT == 5 || FMT == 7 || FMT == 8
#define HAS_OFF 1
#else
#define HAS_OFF 0
#endif
uint byte_of(uint w, uint e) { return (w >> (8u * e)) & 0xffu; }
// float(q) - C for 0 <= q < 2^22 and an integer constant C: exact.
#define QF(q, C) (uintBitsToFloat((q) | 0x4B000000u) - (8388608.0 + (C)))
)";

inline constexpr const char* kDequantBlock = R"(
// Word t of the bytes from byte a on (little-endian), a = 4 i + sh / 8.
uint rdw(uint i, uint sh, uint t) {
  const uint lo = W.data[i + t], hi = W.data[i + t + (sh == 0u ? 0u : 1u)];
  return sh == 0u ? lo : (lo >> sh) | (hi << (32u - sh));
}
uint rd(uint a) { return rdw(a >> 2u, (a & 3u) * 8u, 0u); }
// The byte at a, and the f16 at a (its second word read only when the value straddles two).
uint rd8(uint a) { return (W.data[a >> 2u] >> ((a & 3u) * 8u)) & 0xffu; }
float rdh(uint a) {
  const uint i = a >> 2u, sh = (a & 3u) * 8u, lo = W.data[i] >> sh;
  return unpackHalf2x16(sh == 24u ? lo | (W.data[i + 1u] << 8u) : lo).x;
}

#if FMT == 7 || FMT == 8
// Scale and min of sub-block s (< 8) of a K-quant superblock from its 12 packed bytes at a.
void k_scale_min(uint a, uint s, out float sc, out float mn) {
  const uint i = a >> 2u, sh = (a & 3u) * 8u;
  const uint w0 = rdw(i, sh, 0u), w1 = rdw(i, sh, 1u), w2 = rdw(i, sh, 2u);
  if (s < 4u) {
    sc = QF(byte_of(w0, s) & 63u, 0.0);
    mn = QF(byte_of(w1, s) & 63u, 0.0);
  } else {
    const uint e = s - 4u, b2 = byte_of(w2, e);
    sc = QF((b2 & 15u) | ((byte_of(w0, e) >> 6u) << 4u), 0.0);
    mn = QF((b2 >> 4u) | ((byte_of(w1, e) >> 6u) << 4u), 0.0);
  }
}
#endif

void dq16q(uint a, uint i0, out float q[16], out float scale, out float off) {
  off = 0.0;
#if FMT <= 3  // 4/5-bit: value j < 16 in the low nibble of qs[j], 16 + j in the high one
  scale = rdh(a);
#if FMT == 1 || FMT == 3
  off = rdh(a + 2u);
#endif
#if FMT == 0
  const uint qs = a + 2u;
#elif FMT == 1
  const uint qs = a + 4u;
#elif FMT == 2
  const uint qs = a + 6u, qh = rd(a + 2u) >> i0;
#else
  const uint qs = a + 8u, qh = rd(a + 4u) >> i0;
#endif
  const uint qi = qs >> 2u, qsh = (qs & 3u) * 8u, sh = i0 == 0u ? 0u : 4u;
  for (uint t = 0u; t < 4u; ++t) {
    const uint w = rdw(qi, qsh, t);
    for (uint e = 0u; e < 4u; ++e) {
      uint v = (w >> (8u * e + sh)) & 15u;
#if FMT == 2 || FMT == 3
      v |= ((qh >> (4u * t + e)) & 1u) << 4u;
#endif
#if FMT == 0
      q[4u * t + e] = QF(v, 8.0);
#elif FMT == 2
      q[4u * t + e] = QF(v, 16.0);
#else
      q[4u * t + e] = QF(v, 0.0);
#endif
    }
  }
#elif FMT == 4  // q8_0: d, qs[32] int8 (b ^ 0x80 is b + 128 for the signed byte b)
  scale = rdh(a);
  const uint qs = a + 2u + i0, qi = qs >> 2u, qsh = (qs & 3u) * 8u;
  for (uint t = 0u; t < 4u; ++t) {
    const uint w = rdw(qi, qsh, t) ^ 0x80808080u;
    for (uint e = 0u; e < 4u; ++e) q[4u * t + e] = QF(byte_of(w, e), 128.0);
  }
#elif FMT == 5  // q2_k: scales[16] (scale | min << 4 per 16 values), qs[64] at 16, d at 80, dmin at 82
  const uint sc = rd8(a + i0 / 16u);
  const vec2 dm = unpackHalf2x16(rd(a + 80u));
  scale = dm.x * QF(sc & 15u, 0.0);
  off = -(dm.y * QF(sc >> 4u, 0.0));
  const uint qs = a + 16u + 32u * (i0 / 128u) + i0 % 32u, qi = qs >> 2u, qsh = (qs & 3u) * 8u;
  const uint sh = 2u * ((i0 % 128u) / 32u);
  for (uint t = 0u; t < 4u; ++t) {
    const uint w = rdw(qi, qsh, t);
    for (uint e = 0u; e < 4u; ++e) q[4u * t + e] = QF((w >> (8u * e + sh)) & 3u, 0.0);
  }
#elif FMT == 6  // q3_k: hmask[32], qs[64] at 32, 16 6-bit scales in 12 bytes at 96, d at 108
  const uint s = i0 / 16u;
  const uint low = (rd8(a + 96u + s % 8u) >> (s < 8u ? 0u : 4u)) & 15u;
  const uint high = (rd8(a + 104u + s % 4u) >> (2u * (s / 4u))) & 3u;
  scale = rdh(a + 108u) * QF(low | (high << 4u), 32.0);
  // q = low 2 bits - 4 where the hmask bit is clear: (low | hbit << 2) - 4
  const uint l0 = i0 % 32u, qs = a + 32u + 32u * (i0 / 128u) + l0, hm = a + l0;
  const uint qi = qs >> 2u, qsh = (qs & 3u) * 8u, hi = hm >> 2u, hsh = (hm & 3u) * 8u;
  const uint sh = 2u * ((i0 % 128u) / 32u), hb = i0 / 32u;
  for (uint t = 0u; t < 4u; ++t) {
    const uint w = rdw(qi, qsh, t), h = rdw(hi, hsh, t);
    for (uint e = 0u; e < 4u; ++e)
      q[4u * t + e] = QF(((w >> (8u * e + sh)) & 3u) | (((h >> (8u * e + hb)) & 1u) << 2u), 4.0);
  }
#elif FMT == 7 || FMT == 8  // q4_k / q5_k: d, dmin, scales[12] at 4, (qh[32] at 16,) qs[128]
  const uint s = i0 / 32u, l0 = i0 % 32u;
  float sc, mn;
  k_scale_min(a + 4u, s, sc, mn);
  const vec2 dm = unpackHalf2x16(rd(a));
  scale = dm.x * sc;
  off = -(dm.y * mn);
#if FMT == 7
  const uint qs = a + 16u + 32u * (s / 2u) + l0;
#else
  const uint qs = a + 48u + 32u * (s / 2u) + l0, hq = a + 16u + l0, hi = hq >> 2u, hsh = (hq & 3u) * 8u;
#endif
  const uint qi = qs >> 2u, qsh = (qs & 3u) * 8u, sh = 4u * (s % 2u);
  for (uint t = 0u; t < 4u; ++t) {
    const uint w = rdw(qi, qsh, t);
#if FMT == 8
    const uint h = rdw(hi, hsh, t);
#endif
    for (uint e = 0u; e < 4u; ++e) {
      uint v = (w >> (8u * e + sh)) & 15u;
#if FMT == 8
      v |= ((h >> (8u * e + s)) & 1u) << 4u;
#endif
      q[4u * t + e] = QF(v, 0.0);
    }
  }
#else  // q6_k: ql[128], qh[64] at 128, int8 scales[16] at 192, d at 208; value 128h + 32k + l
  const uint hh = i0 / 128u, k = (i0 % 128u) / 32u, l0 = i0 % 32u;
  const uint scb = rd8(a + 192u + 8u * hh + l0 / 16u + 2u * k) ^ 0x80u;
  scale = rdh(a + 208u) * QF(scb, 128.0);
  const uint ql = a + 64u * hh + l0 + 32u * (k & 1u), qh = a + 128u + 32u * hh + l0;
  const uint li = ql >> 2u, lsh = (ql & 3u) * 8u, hi = qh >> 2u, hsh = (qh & 3u) * 8u;
  const uint shl = 4u * (k >> 1u), shh = 2u * k;
  for (uint t = 0u; t < 4u; ++t) {
    const uint wl = rdw(li, lsh, t), wh = rdw(hi, hsh, t);
    for (uint e = 0u; e < 4u; ++e)
      q[4u * t + e] = QF(((wl >> (8u * e + shl)) & 15u) | (((wh >> (8u * e + shh)) & 3u) << 4u), 32.0);
  }
#endif
}

void dq16(uint a, uint i0, out float v[16]) {
  float q[16], scale, off;
  dq16q(a, i0, q, scale, off);
  for (uint j = 0u; j < 16u; ++j) v[j] = fma(scale, q[j], off);
}
)";


// Decode (few rows of x): G groups of TPR invocations per workgroup (NT = G * TPR; TPR a power
// of two up to 32, fewer for short rows), each group
// RPT weight rows (RPW = G * RPT rows a workgroup). Each chunk of UC = TPR * UPT units (32
// values each) of K is staged for MR rows of x in shared memory as f32, each unit in 9 vec4 (one
// of padding: the lanes of a subgroup read units 9 vec4 apart, conflict-free); invocation `lane`
// of a group decodes units lane, lane + TPR, ... of the chunk of its RPT rows in registers, 16
// values at a time, and dots them with the MR rows of x (each x vector read once for the RPT
// rows: x, not the weights, is most of the shared-memory traffic). The TPR partial sums of each
// output are added with subgroupAdd (SG, where the subgroups are runs of consecutive
// invocations no wider than TPR) and a shared-memory step, else a shared-memory tree (the staging
// buffer, free after the K loop, holds the partials: XS vec4, at least MR * UC * 9 and OUTS * NT / 4).
// x: groups of RPW weight rows; y: passes of MR rows of x (both grid-stride).
// Defines: NT TPR RPT RPW MR UPT XS SG.
inline constexpr const char* kDequantGemv = R"(
#define UC (TPR * UPT)
#define OUTS (MR * RPT)
shared vec4 xs[XS];
#define RED(i) xs[(i) >> 2u][(i) & 3u]
#if SG
shared uint sg_nonlinear;
#endif

void main() {
  const uint tid = gl_LocalInvocationID.x, lane = tid % TPR, grp = tid / TPR;
  bool linear = false;
#if SG
  if (tid == 0u) sg_nonlinear = 0u;
  barrier();
  if (gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID != tid || gl_SubgroupSize > TPR)
    atomicOr(sg_nonlinear, 1u);
  barrier();
  linear = sg_nonlinear == 0u;
#endif
  const uint groups = (pc.n + RPW - 1u) / RPW, passes = (pc.m + MR - 1u) / MR, units = pc.k / 32u;
  for (uint pm = gl_WorkGroupID.y; pm < passes; pm += gl_NumWorkGroups.y) {
    const uint m0 = pm * MR;
    for (uint gn = gl_WorkGroupID.x; gn < groups; gn += gl_NumWorkGroups.x) {
      const uint n0 = gn * RPW + grp * RPT;
      uint rows[RPT];  // rows past N decode row N - 1 (their sums are not stored)
      for (uint p = 0u; p < RPT; ++p) rows[p] = pc.o_W + min(n0 + p, pc.n - 1u) * pc.row_bytes;
      float acc[OUTS];
      for (uint i = 0u; i < OUTS; ++i) acc[i] = 0.0;
      for (uint u0 = 0u; u0 < units; u0 += UC) {
        for (uint e = tid; e < MR * UC * 8u; e += NT) {  // 4 consecutive values of x each
          const uint r = e / (UC * 8u), v = e % (UC * 8u), gk = u0 * 32u + 4u * v;
          vec4 xv = vec4(0.0);
          if (m0 + r < pc.m && gk < pc.k) {
            const uint i = (m0 + r) * pc.k + gk;
            xv = vec4(load_x(i), load_x(i + 1u), load_x(i + 2u), load_x(i + 3u));
          }
          xs[(r * UC + v / 8u) * 9u + v % 8u] = xv;
        }
        barrier();
        for (uint q = 0u; q < UPT; ++q) {
          const uint ul = lane + q * TPR, u = u0 + ul;
          if (u < units) {
            const uint boff = (u * 32u / QE) * QB, i0 = (u * 32u) % QE;
            for (uint h = 0u; h < 2u; ++h) {
              float wq[RPT][16], sc[RPT], of[RPT];
              for (uint p = 0u; p < RPT; ++p) dq16q(rows[p] + boff, i0 + 16u * h, wq[p], sc[p], of[p]);
              for (uint r = 0u; r < MR; ++r) {
                const uint xb = (r * UC + ul) * 9u + 4u * h;
                const vec4 x0 = xs[xb], x1 = xs[xb + 1u], x2 = xs[xb + 2u], x3 = xs[xb + 3u];
#if HAS_OFF
                const float sx = dot((x0 + x1) + (x2 + x3), vec4(1.0));
#endif
                for (uint p = 0u; p < RPT; ++p) {
                  float s = dot(x0, vec4(wq[p][0], wq[p][1], wq[p][2], wq[p][3]));
                  s += dot(x1, vec4(wq[p][4], wq[p][5], wq[p][6], wq[p][7]));
                  s += dot(x2, vec4(wq[p][8], wq[p][9], wq[p][10], wq[p][11]));
                  s += dot(x3, vec4(wq[p][12], wq[p][13], wq[p][14], wq[p][15]));
#if HAS_OFF
                  acc[r * RPT + p] += fma(sc[p], s, of[p] * sx);
#else
                  acc[r * RPT + p] += sc[p] * s;
#endif
                }
              }
            }
          }
        }
        barrier();
      }
#if SG
      if (linear) {
        for (uint i = 0u; i < OUTS; ++i) {
          const float s = subgroupAdd(acc[i]);
          if (gl_SubgroupInvocationID == 0u) RED(i * gl_NumSubgroups + gl_SubgroupID) = s;
        }
        barrier();
        const uint per = TPR / gl_SubgroupSize;
        for (uint o = lane; o < OUTS; o += TPR) {  // lane l stores outputs l, l + TPR, ... of the group
          const uint r = o / RPT, p = o % RPT;
          if (m0 + r < pc.m && n0 + p < pc.n) {
            float t = 0.0;
            for (uint i = 0u; i < per; ++i) t += RED(o * gl_NumSubgroups + grp * per + i);
            store_y((m0 + r) * pc.n + n0 + p, t);
          }
        }
        barrier();
        continue;
      }
#endif
      for (uint i = 0u; i < OUTS; ++i) RED(i * NT + tid) = acc[i];
      barrier();
      for (uint s = TPR / 2u; s > 0u; s >>= 1u) {
        if (lane < s)
          for (uint i = 0u; i < OUTS; ++i) RED(i * NT + tid) += RED(i * NT + tid + s);
        barrier();
      }
      if (lane == 0u)
        for (uint i = 0u; i < OUTS; ++i) {
          const uint r = i / RPT, p = i % RPT;
          if (m0 + r < pc.m && n0 + p < pc.n) store_y((m0 + r) * pc.n + n0 + p, RED(i * NT + tid));
        }
      barrier();
    }
  }
}
)";

// Prefill (many rows of x): BM x BN tiles of y (rows of x x weight rows) per workgroup of NT
// invocations, each TM x TN outputs strided by WY / WX. Per BK-deep slice of K: the x tile is
// staged in shared memory as f32 (loads along K), and the weight tile is decoded into shared
// memory, one 16-value piece per invocation (BN * BK / 16 pieces); then the f32 tiled product,
// each slice summed apart and added (blocked summation). x: column tiles; y: row tiles (both
// grid-stride). Defines: NT BM BN BK TM TN WX WY PAD.
inline constexpr const char* kDequantGemm = R"(
shared float Xs[BK * (BM + PAD)];
shared float Ws[BK * (BN + PAD)];

void main() {
  const uint tid = gl_LocalInvocationID.x, tx = tid % WX, ty = tid / WX;
  const uint tiles_m = (pc.m + BM - 1u) / BM, tiles_n = (pc.n + BN - 1u) / BN;
  for (uint tm = gl_WorkGroupID.y; tm < tiles_m; tm += gl_NumWorkGroups.y) {
    for (uint tn = gl_WorkGroupID.x; tn < tiles_n; tn += gl_NumWorkGroups.x) {
      const uint row0 = tm * BM, col0 = tn * BN;
      float acc[TM][TN];
      for (uint i = 0u; i < TM; ++i)
        for (uint j = 0u; j < TN; ++j) acc[i][j] = 0.0;
      for (uint k0 = 0u; k0 < pc.k; k0 += BK) {
        for (uint e = tid; e < BM * BK; e += NT) {
          const uint kk = e % BK, r = e / BK, gr = row0 + r, gk = k0 + kk;
          Xs[kk * (BM + PAD) + r] = gr < pc.m && gk < pc.k ? load_x(gr * pc.k + gk) : 0.0;
        }
        for (uint e = tid; e < BN * (BK / 16u); e += NT) {
          const uint c = e % BN, h = e / BN, gn = col0 + c, gk = k0 + 16u * h;
          float v[16];
          if (gn < pc.n && gk < pc.k) {
            dq16(pc.o_W + gn * pc.row_bytes + (gk / QE) * QB, gk % QE, v);
          } else {
            for (uint j = 0u; j < 16u; ++j) v[j] = 0.0;
          }
          for (uint j = 0u; j < 16u; ++j) Ws[(16u * h + j) * (BN + PAD) + c] = v[j];
        }
        barrier();
        float part[TM][TN];
        for (uint i = 0u; i < TM; ++i)
          for (uint j = 0u; j < TN; ++j) part[i][j] = 0.0;
        for (uint kk = 0u; kk < BK; ++kk) {
          float av[TM], bv[TN];
          for (uint i = 0u; i < TM; ++i) av[i] = Xs[kk * (BM + PAD) + ty + i * WY];
          for (uint j = 0u; j < TN; ++j) bv[j] = Ws[kk * (BN + PAD) + tx + j * WX];
          for (uint i = 0u; i < TM; ++i)
            for (uint j = 0u; j < TN; ++j) part[i][j] = fma(av[i], bv[j], part[i][j]);
        }
        for (uint i = 0u; i < TM; ++i)
          for (uint j = 0u; j < TN; ++j) acc[i][j] += part[i][j];
        barrier();
      }
      for (uint i = 0u; i < TM; ++i) {
        const uint r = row0 + ty + i * WY;
        if (r >= pc.m) continue;
        for (uint j = 0u; j < TN; ++j) {
          const uint c = col0 + tx + j * WX;
          if (c < pc.n) store_y(r * pc.n + c, acc[i][j]);
        }
      }
    }
  }
}
)";

}  // namespace rlx::vulkan::ksrc
