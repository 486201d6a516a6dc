#pragma once
// GLSL templates of the Vulkan matmul family (lower_matmul.cpp). Each is the body of a compute
// shader; the lowering prepends the header, the #defines below, the bindings, the push-constant
// block `pc` (one element offset `o_<NAME>` per binding, then the parameters) and three functions:
//   ACC load_a(uint i), ACC load_b(uint i)  - an element of A / B in the accumulation type ACC
//                                              (float for f32/f16/bf16, double, int or int64_t)
//   void rlx_epilogue(uint o, uint col, ACC acc) - stores output element o (column col) of the
//                                              product `acc` after the bias/activation/residual
// and MAD(acc, a, b) (an fma for floats).

namespace rlx::vulkan::ksrc {

// Tiled GEMM: C[b] = op(A)[b] @ op(B)[b]. A workgroup of NT = WX * WY invocations computes
// BM x BN tiles (BM = WY * TM, BN = WX * TN), each invocation TM x TN outputs strided by WY / WX
// (so shared-memory reads are conflict-free and stores coalesced); the K loop stages BK-deep
// slices of A and B in shared memory with loads along each operand's contiguous dim, the next
// slice's global loads issued into registers (LA / LB per invocation) before the current slice's
// products. Tiles and batch items are grid-stride loops over x (columns), y (rows) and z (batch).
// Defines: NT WX WY TM TN BM BN BK PAD TRANS_A TRANS_B HAS_TABLE (per-item A/B offsets in TAB,
// else b * pc.sa / b * pc.sb). Params: m n k batch lda ldb sa sb.
inline constexpr const char* kGemm = R"(
#define LA ((BM * BK + NT - 1u) / NT)
#define LB ((BN * BK + NT - 1u) / NT)
shared ACC As[BK * (BM + PAD)];
shared ACC Bs[BK * (BN + PAD)];
#define AS(kk, r) As[(kk) * (BM + PAD) + (r)]
#define BS(kk, c) Bs[(kk) * (BN + PAD) + (c)]

// Element e of the A / B slice at k0: its (row or column, kk) in the tile.
void slot_a(uint e, out uint r, out uint kk) {
#if TRANS_A
  r = e % BM; kk = e / BM;  // A stored [k, m]: along m
#else
  kk = e % BK; r = e / BK;  // A stored [m, k]: along k
#endif
}
void slot_b(uint e, out uint c, out uint kk) {
#if TRANS_B
  kk = e % BK; c = e / BK;  // B stored [n, k]: along k
#else
  c = e % BN; kk = e / BN;  // B stored [k, n]: along n
#endif
}

void fetch(uint a0, uint b0, uint row0, uint col0, uint k0, out ACC ra[LA], out ACC rb[LB]) {
  const uint tid = gl_LocalInvocationID.x;
  for (uint q = 0u; q < LA; ++q) {
    const uint e = tid + q * NT;
    uint r, kk;
    slot_a(e, r, kk);
    const uint gr = row0 + r, gk = k0 + kk;
    ra[q] = ACC(0);
#if TRANS_A
    if (e < BM * BK && gr < pc.m && gk < pc.k) ra[q] = load_a(a0 + gk * pc.lda + gr);
#else
    if (e < BM * BK && gr < pc.m && gk < pc.k) ra[q] = load_a(a0 + gr * pc.lda + gk);
#endif
  }
  for (uint q = 0u; q < LB; ++q) {
    const uint e = tid + q * NT;
    uint c, kk;
    slot_b(e, c, kk);
    const uint gc = col0 + c, gk = k0 + kk;
    rb[q] = ACC(0);
#if TRANS_B
    if (e < BN * BK && gc < pc.n && gk < pc.k) rb[q] = load_b(b0 + gc * pc.ldb + gk);
#else
    if (e < BN * BK && gc < pc.n && gk < pc.k) rb[q] = load_b(b0 + gk * pc.ldb + gc);
#endif
  }
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint tx = tid % WX, ty = tid / WX;
  const uint tiles_m = (pc.m + BM - 1u) / BM, tiles_n = (pc.n + BN - 1u) / BN;
  for (uint b = gl_WorkGroupID.z; b < pc.batch; b += gl_NumWorkGroups.z) {
#if HAS_TABLE
    const uint a0 = pc.o_A + TAB.data[pc.o_TAB + 2u * b], b0 = pc.o_B + TAB.data[pc.o_TAB + 2u * b + 1u];
#else
    const uint a0 = pc.o_A + b * pc.sa, b0 = pc.o_B + b * pc.sb;
#endif
    for (uint tm = gl_WorkGroupID.y; tm < tiles_m; tm += gl_NumWorkGroups.y) {
      for (uint tn = gl_WorkGroupID.x; tn < tiles_n; tn += gl_NumWorkGroups.x) {
        const uint row0 = tm * BM, col0 = tn * BN;
        ACC acc[TM][TN];
        for (uint i = 0u; i < TM; ++i)
          for (uint j = 0u; j < TN; ++j) acc[i][j] = ACC(0);
        ACC ra[LA], rb[LB];
        fetch(a0, b0, row0, col0, 0u, ra, rb);
        for (uint k0 = 0u; k0 < pc.k; k0 += BK) {
          for (uint q = 0u; q < LA; ++q) {
            const uint e = tid + q * NT;
            uint r, kk;
            slot_a(e, r, kk);
            if (e < BM * BK) AS(kk, r) = ra[q];
          }
          for (uint q = 0u; q < LB; ++q) {
            const uint e = tid + q * NT;
            uint c, kk;
            slot_b(e, c, kk);
            if (e < BN * BK) BS(kk, c) = rb[q];
          }
          barrier();
          if (k0 + BK < pc.k) fetch(a0, b0, row0, col0, k0 + BK, ra, rb);
          // Each BK slice summed apart, then added: blocked summation keeps the rounding error of
          // long K near the BLAS kernels' (a single chain over K loses ~sqrt(K) ulps).
          ACC part[TM][TN];
          for (uint i = 0u; i < TM; ++i)
            for (uint j = 0u; j < TN; ++j) part[i][j] = ACC(0);
          for (uint kk = 0u; kk < BK; ++kk) {
            ACC av[TM];
            ACC bv[TN];
            for (uint i = 0u; i < TM; ++i) av[i] = AS(kk, ty + i * WY);
            for (uint j = 0u; j < TN; ++j) bv[j] = BS(kk, tx + j * WX);
            for (uint i = 0u; i < TM; ++i)
              for (uint j = 0u; j < TN; ++j) part[i][j] = MAD(part[i][j], av[i], bv[j]);
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
            if (c < pc.n) rlx_epilogue((b * pc.m + r) * pc.n + c, c, acc[i][j]);
          }
        }
      }
    }
  }
}
)";

// Skinny products (decode): R rows of A (contiguous [R, k]) against one row-major B [k, n], or
// (GROUPED) one row of x against its expert's w[idx[row]]. A workgroup of NT invocations owns
// COLS output columns: invocation (c, s) reads column c of every KS-th row of B (a subgroup reads
// consecutive columns of one row: coalesced), with A's rows staged KT elements at a time in
// shared memory; the KS partial sums of a column are added in shared memory. x: column tiles
// (grid-stride); y: K splits (SPLIT: partial sums to P[split][R][n], added by kSplitSum) or, when
// GROUPED, rows (grid-stride; an expert index outside [0, experts) raises error 3).
// Defines: NT COLS KS KT R SPLIT GROUPED [IDX_T: int, or int64_t for i64 indices]. Params: n k kchunk [rows experts].
inline constexpr const char* kGemv = R"(
shared ACC xs[R * KT];
shared ACC red[KS * R * COLS];

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint c = tid % COLS, s = tid / COLS;
  const uint tiles = (pc.n + COLS - 1u) / COLS;
#if GROUPED
  for (uint row = gl_WorkGroupID.y; row < pc.rows; row += gl_NumWorkGroups.y) {
    const IDX_T ex = IDX_T(IDX.data[pc.o_IDX + row]);
    if (ex < IDX_T(0) || ex >= IDX_T(pc.experts)) {  // the same value in every invocation
      if (tid == 0u) atomicMax(ERR.data[pc.o_ERR], 3);
      continue;
    }
    const uint a0 = pc.o_A + row * pc.k, b0 = pc.o_B + uint(ex) * pc.k * pc.n;
    const uint k_begin = 0u, k_end = pc.k;
#else
  {
    const uint split = gl_WorkGroupID.y;
    const uint a0 = pc.o_A, b0 = pc.o_B;
    const uint k_begin = split * pc.kchunk, k_end = min(pc.k, k_begin + pc.kchunk);
#endif
    for (uint t = gl_WorkGroupID.x; t < tiles; t += gl_NumWorkGroups.x) {
      const uint col = t * COLS + c;
      ACC acc[R];
      for (uint r = 0u; r < R; ++r) acc[r] = ACC(0);
      for (uint k0 = k_begin; k0 < k_end; k0 += KT) {
        const uint kn = min(uint(KT), k_end - k0);
        for (uint e = tid; e < R * KT; e += NT) {
          const uint r = e / KT, kk = e % KT;
          xs[e] = kk < kn ? load_a(a0 + r * pc.k + k0 + kk) : ACC(0);
        }
        barrier();
        if (col < pc.n) {
          // Two chains per chunk (two loads of B in flight), summed apart and then added: blocked
          // summation keeps the rounding error of long K near the BLAS kernels'.
          ACC p0[R], p1[R];
          for (uint r = 0u; r < R; ++r) p0[r] = p1[r] = ACC(0);
          uint kk = s;
          for (; kk + KS < kn; kk += 2u * KS) {
            const ACC w0 = load_b(b0 + (k0 + kk) * pc.n + col);
            const ACC w1 = load_b(b0 + (k0 + kk + KS) * pc.n + col);
            for (uint r = 0u; r < R; ++r) {
              p0[r] = MAD(p0[r], xs[r * KT + kk], w0);
              p1[r] = MAD(p1[r], xs[r * KT + kk + KS], w1);
            }
          }
          if (kk < kn) {
            const ACC w = load_b(b0 + (k0 + kk) * pc.n + col);
            for (uint r = 0u; r < R; ++r) p0[r] = MAD(p0[r], xs[r * KT + kk], w);
          }
          for (uint r = 0u; r < R; ++r) acc[r] += p0[r] + p1[r];
        }
        barrier();
      }
      for (uint r = 0u; r < R; ++r) red[(s * R + r) * COLS + c] = acc[r];
      barrier();
      if (tid < R * COLS) {
        const uint r = tid / COLS, cc = tid % COLS, gc = t * COLS + cc;
        if (gc < pc.n) {
          ACC v = red[r * COLS + cc];
          for (uint q = 1u; q < KS; ++q) v += red[(q * R + r) * COLS + cc];
#if SPLIT
          P.data[pc.o_P + (split * R + r) * pc.n + gc] = v;
#elif GROUPED
          rlx_epilogue(row * pc.n + gc, gc, v);
#else
          rlx_epilogue(r * pc.n + gc, gc, v);
#endif
        }
      }
      barrier();
    }
  }
}
)";

// Skinny products of floats (f32, f16, bf16) at DRAM bandwidth: R rows of A (contiguous [R, k])
// against one row-major B [k, n] read as uvec4 (V = 16 bytes of elements: 8 halfs or 4 floats;
// n % V == 0 and B 16-byte aligned). A workgroup of NT invocations owns CG * V columns: invocation
// (c, s) reads vector c of every KS-th row of B (a subgroup of CG = 32 reads 512 consecutive bytes
// of one row), U rows in flight per iteration; the KS slice sums of a column are added in shared
// memory. x: column tiles (grid-stride); y: K splits (SPLIT: partial sums to P[split][R][n], a
// coherent buffer; the last split of a tile to finish, counted in CNT[tile] (zero between runs),
// adds them through the epilogue). A's elements come from load_a (L1-resident: one address per subgroup);
// `void unpack_b(uvec4 w, out float f[V])` turns a vector of B into floats. PRO 1: A is the
// output of an absorbed RmsNorm, computed from `float pro_x(uint i)` (element i of its input
// rows) and `float pro_a(uint r, uint j, float inv)` (element j of normalized row r, rounded as
// stored); PRO 2: of an absorbed FusedSwiGLU, `pro_a(r, j, 0.0)`.
// Defines: NT (a power of two) CG KS U R V SPLIT PRO [PRO_EPS]. Params: n nv (= n / V) k kchunk.
inline constexpr const char* kGemvVec = R"(
shared float red[KS * CG * (V + 1u)];
shared bool last_split;
#if PRO == 1
// The absorbed RmsNorm of A's rows (plan_gemv_prologues): each workgroup reduces the rows' sums
// of squares itself; A's elements are then normalized as they are read (pro_a).
shared float pro_inv[R];
#define LOAD_A(r, kk) pro_a(r, kk, pro_inv[r])
#elif PRO == 2
// The absorbed FusedSwiGLU: A's elements computed from the gate and up halves as they are read.
#define LOAD_A(r, kk) pro_a(r, kk, 0.0)
#else
#define LOAD_A(r, kk) load_a(pc.o_A + (r) * pc.k + (kk))
#endif

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint c = tid % CG, s = tid / CG;
#if PRO == 1
  for (uint r = 0u; r < R; ++r) {
    float q = 0.0;
    for (uint i = tid; i < pc.k; i += NT) {
      const float v = pro_x(r * pc.k + i);
      q += v * v;
    }
    red[tid] = q;
    barrier();
    for (uint h = NT / 2u; h > 0u; h >>= 1) {
      if (tid < h) red[tid] += red[tid + h];
      barrier();
    }
    if (tid == 0u) pro_inv[r] = 1.0 / sqrt(red[0] / float(pc.k) + PRO_EPS);
    barrier();
  }
#endif
  const uint tiles = (pc.nv + CG - 1u) / CG;
  const uint split = gl_WorkGroupID.y;
  const uint k_begin = split * pc.kchunk, k_end = min(pc.k, k_begin + pc.kchunk);
  for (uint t = gl_WorkGroupID.x; t < tiles; t += gl_NumWorkGroups.x) {
    const uint cv = t * CG + c;
    float acc[R][V];
    for (uint r = 0u; r < R; ++r)
      for (uint v = 0u; v < V; ++v) acc[r][v] = 0.0;
    if (cv < pc.nv) {
      uint k = k_begin + s;
      for (; k + (U - 1u) * KS < k_end; k += U * KS) {
        uvec4 w[U];
        for (uint u = 0u; u < U; ++u) w[u] = B.data[pc.o_B + (k + u * KS) * pc.nv + cv];
        for (uint u = 0u; u < U; ++u) {
          float f[V];
          unpack_b(w[u], f);
          for (uint r = 0u; r < R; ++r) {
            const float a = LOAD_A(r, k + u * KS);
            for (uint v = 0u; v < V; ++v) acc[r][v] = fma(a, f[v], acc[r][v]);
          }
        }
      }
      for (; k < k_end; k += KS) {
        float f[V];
        unpack_b(B.data[pc.o_B + k * pc.nv + cv], f);
        for (uint r = 0u; r < R; ++r) {
          const float a = LOAD_A(r, k);
          for (uint v = 0u; v < V; ++v) acc[r][v] = fma(a, f[v], acc[r][v]);
        }
      }
    }
    // Per row: the KS slice sums of each column (padded rows of V + 1: no bank conflicts).
    for (uint r = 0u; r < R; ++r) {
      for (uint v = 0u; v < V; ++v) red[(s * CG + c) * (V + 1u) + v] = acc[r][v];
      barrier();
      if (tid < CG * V) {
        const uint cc = tid / V, v = tid % V, gc = t * CG * V + tid;
        if (gc < pc.n) {
          float sum = red[cc * (V + 1u) + v];
          for (uint q = 1u; q < KS; ++q) sum += red[(q * CG + cc) * (V + 1u) + v];
#if SPLIT
          P.data[pc.o_P + (split * R + r) * pc.n + gc] = sum;
#else
          rlx_epilogue(r * pc.n + gc, gc, sum);
#endif
        }
      }
      barrier();
    }
#if SPLIT
    // The last split of tile t to finish adds the partials of every split and runs the epilogue
    // (no second dispatch); it resets the tile's counter to 0 for the next run.
    memoryBarrierBuffer();
    barrier();
    if (tid == 0u) last_split = atomicAdd(CNT.data[pc.o_CNT + t], 1u) == gl_NumWorkGroups.y - 1u;
    barrier();
    if (last_split) {
      memoryBarrierBuffer();
      for (uint i = tid; i < R * CG * V; i += NT) {
        const uint r = i / (CG * V), gc = t * CG * V + i % (CG * V);
        if (gc >= pc.n) continue;
        float sum = 0.0;
        for (uint q = 0u; q < gl_NumWorkGroups.y; ++q) sum += P.data[pc.o_P + (q * R + r) * pc.n + gc];
        rlx_epilogue(r * pc.n + gc, gc, sum);
      }
      if (tid == 0u) CNT.data[pc.o_CNT + t] = 0u;
    }
    barrier();
#endif
  }
}
)";

// The split-K GEMV's second pass: output i (of rows * n) is the sum of its `splits` partials
// P[split * rows * n + i], through the epilogue. 1-D grid-stride. Defines: NT. Params: rows n splits.
inline constexpr const char* kSplitSum = R"(
void main() {
  const uint total = pc.rows * pc.n;
  for (uint i = gl_GlobalInvocationID.x; i < total; i += gl_NumWorkGroups.x * NT) {
    ACC v = ACC(0);
    for (uint q = 0u; q < pc.splits; ++q) v += P.data[pc.o_P + q * total + i];
    rlx_epilogue(i, i % pc.n, v);
  }
}
)";

}  // namespace rlx::vulkan::ksrc
