#pragma once
// Tensor-core GEMM of the Vulkan matmul family (lower_matmul.cpp) through VK_NV_cooperative_matrix
// (GLSL GL_NV_cooperative_matrix: Debian 12's glslang spells only the NV extension): f16 operands
// (f16 products, and f32 products under the Fp16 precision policy, whose operands are rounded to
// f16 as they are loaded), 16 x 16 x 16 f16 tiles accumulated in f32, the result through the
// matmul epilogue. Same batch / tile loops and parameters as kGemm (kernels/matmul.h).
//
// A workgroup of NW = WM * WN subgroups (32 invocations each) computes a BM x BN tile (BM = WM *
// TMC * 16, BN = WN * TNC * 16); subgroup (wm, wn) owns TMC x TNC accumulators of 16 x 16. The K
// loop stages BK = 32 deep slices: A as As[BM][BK + 8] and B as Bs[BK][BN + 8] (f16, rows padded
// by 16 bytes: the matrix loads hit distinct banks), whatever the operands' layouts (a transposed
// operand is transposed on its way to shared memory); the next slice's global loads are issued
// into registers before the current slice's products. Every invocation loads chunks of 8
// elements along its operand's contiguous dim: one or two uvec4 loads when VEC_A / VEC_B (the
// contiguous extent, every batch offset and the operand's start multiples of 8 elements), else
// 8 bounds-checked element loads. The epilogue: each accumulator stored to the subgroup's 16 x 16
// f32 patch of Cs, whose elements its invocations pass to rlx_epilogue.
//
// bf16 operands (devices with DeviceInfo::coopmat_bf16): the same kernel with the operands' raw
// bf16 bits staged as uint16_t (STG) and the shader rewritten to KHR matrices whose A / B
// components are bf16 (spirv_coopmat.h; A and B are distinct types, CM_A / CM_B).
//
// The lowering prepends, besides kGemm's: GL_NV_cooperative_matrix, GL_KHR_memory_scope_semantics,
// GL_KHR_shader_subgroup_basic and 16-bit arithmetic extensions, kCoopmatBTypeDecl; STG (float16_t,
// or uint16_t holding bf16 bits); and
//   void load8_a(uint gi, uint valid, out STG h[8])  - elements gi .. gi + 7 of A (element
//   void load8_b(uint gi, uint valid, out STG h[8])    offsets from the operand's start), the
//                                                        first `valid` of them, others 0
// WA / WB (f16 / bf16 operands read as 16-byte words, not transposed, whose contiguous extent is a
// multiple of 8): the words go to shared memory as they are (As / Bs arrays of uvec4, matrix
// loads counted in words): 8 scalar stores per chunk were the limit once the MMAs ran well.
// Split K (SPLITK; products of few tiles and long K): workgroup z covers batch x SPLITS, each split
// KCHUNK deep (a multiple of BK), and writes its f32 sums to P[split][batch * m][n] for kSplitSum
// (kernels/matmul.h), which runs the epilogue; without it SPLITS is 1 and KCHUNK pc.k.
// Defines: NT WM WN TMC TNC BM BN BK TRANS_A TRANS_B HAS_TABLE WA WB SPLITK SPLITS KCHUNK, and
// STORE_TILES: one store_tile(acc[i][j], iu, ju, b, row0, col0); per accumulator. Params: m n k
// batch lda ldb sa sb.

namespace rlx::vulkan::ksrc {

inline constexpr const char* kGemmCoopNV = R"(
#define CM_A fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define CM_B fcoopmatNV<16, gl_ScopeSubgroup, CM_B16, CM_B16>
#if WA
#define LOAD_A(q) ra[q] = valid != 0u ? A.data[pc.o_A + gi / 8u] : uvec4(0u)
#else
#define LOAD_A(q) load8_a(gi, valid, ra[q])
#endif
#if WB
#define LOAD_B(q) rb[q] = valid != 0u ? B.data[pc.o_B + gi / 8u] : uvec4(0u)
#else
#define LOAD_B(q) load8_b(gi, valid, rb[q])
#endif
#define LDA_S (BK + 8u)
#define LDB_S (BN + 8u)
#define CA (BM * BK / 8u / NT)
#define CB (BK * BN / 8u / NT)
#if WA  // A staged as 16-byte words (its chunks run along rows of As): offsets in words
#define AU 8u
shared uvec4 As[BM * LDA_S / 8u];
#else
#define AU 1u
shared STG As[BM * LDA_S];
#endif
#if WB
#define BU 8u
shared uvec4 Bs[BK * LDB_S / 8u];
#else
#define BU 1u
shared STG Bs[BK * LDB_S];
#endif
shared float Cs[WM * WN * 256u];
uint k_end;    // the end of this workgroup's K range (pc.k, or its split's end)
uint split_i;  // the K split this workgroup computes (SPLITK)

// Chunk q of this invocation in the A / B tile at (row0, k0) / (k0, col0): element offset, how
// many of its 8 elements are in range, and where its first element goes in shared memory with
// the step between its elements.
void chunk_a(uint q, uint a0, uint row0, uint k0, out uint gi, out uint valid, out uint s0, out uint ds) {
  const uint e = gl_LocalInvocationID.x + q * NT;
#if TRANS_A
  const uint kk = e / (BM / 8u), rc = (e % (BM / 8u)) * 8u;  // A stored [k, m]
  const uint gk = k0 + kk, gr = row0 + rc;
  valid = gk < k_end && gr < pc.m ? min(8u, pc.m - gr) : 0u;
  gi = a0 + gk * pc.lda + gr;
  s0 = rc * LDA_S + kk;
  ds = LDA_S;
#else
  const uint r = e / (BK / 8u), kc = (e % (BK / 8u)) * 8u;  // A stored [m, k]
  const uint gr = row0 + r, gk = k0 + kc;
  valid = gr < pc.m && gk < k_end ? min(8u, k_end - gk) : 0u;
  gi = a0 + gr * pc.lda + gk;
  s0 = r * LDA_S + kc;
  ds = 1u;
#endif
}

void chunk_b(uint q, uint b0, uint col0, uint k0, out uint gi, out uint valid, out uint s0, out uint ds) {
  const uint e = gl_LocalInvocationID.x + q * NT;
#if TRANS_B
  const uint c = e / (BK / 8u), kc = (e % (BK / 8u)) * 8u;  // B stored [n, k]
  const uint gc = col0 + c, gk = k0 + kc;
  valid = gc < pc.n && gk < k_end ? min(8u, k_end - gk) : 0u;
  gi = b0 + gc * pc.ldb + gk;
  s0 = kc * LDB_S + c;
  ds = LDB_S;
#else
  const uint kk = e / (BN / 8u), cc = (e % (BN / 8u)) * 8u;  // B stored [k, n]
  const uint gk = k0 + kk, gc = col0 + cc;
  valid = gk < k_end && gc < pc.n ? min(8u, pc.n - gc) : 0u;
  gi = b0 + gk * pc.ldb + gc;
  s0 = kk * LDB_S + cc;
  ds = 1u;
#endif
}

// Accumulator (i, j) of this subgroup through Cs to the epilogue. Called with constant indices
// (STORE_TILES, written out by the lowering): indexing acc[][] with loop variables around the
// subgroup barriers made NVIDIA's compiler keep every accumulator in local memory, the whole
// K loop included (35 instead of 106 TFLOP/s at 4096^3 on an H200).
void store_tile(fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> t, uint i, uint j, uint b, uint row0, uint col0) {
  const uint warp = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint wm = warp / WN, wn = warp % WN;
  coopMatStoreNV(t, Cs, warp * 256u, 16u, false);
  subgroupMemoryBarrierShared();
  subgroupBarrier();
  for (uint e = lane; e < 256u; e += gl_SubgroupSize) {
    const uint r = row0 + (wm * TMC + i) * 16u + e / 16u, c = col0 + (wn * TNC + j) * 16u + e % 16u;
#if SPLITK
    if (r < pc.m && c < pc.n) P.data[pc.o_P + split_i * pc.batch * pc.m * pc.n + (b * pc.m + r) * pc.n + c] = Cs[warp * 256u + e];
#else
    if (r < pc.m && c < pc.n) rlx_epilogue((b * pc.m + r) * pc.n + c, c, Cs[warp * 256u + e]);
#endif
  }
  subgroupBarrier();
}

void main() {
  const uint warp = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint wm = warp / WN, wn = warp % WN;
  const uint tiles_m = (pc.m + BM - 1u) / BM, tiles_n = (pc.n + BN - 1u) / BN;
  for (uint bz = gl_WorkGroupID.z; bz < pc.batch * SPLITS; bz += gl_NumWorkGroups.z) {
    const uint b = bz / SPLITS;
    split_i = bz % SPLITS;
    const uint k_begin = split_i * KCHUNK;
    k_end = min(pc.k, k_begin + KCHUNK);
#if HAS_TABLE
    const uint a0 = TAB.data[pc.o_TAB + 2u * b], b0 = TAB.data[pc.o_TAB + 2u * b + 1u];
#else
    const uint a0 = b * pc.sa, b0 = b * pc.sb;
#endif
    for (uint tm = gl_WorkGroupID.y; tm < tiles_m; tm += gl_NumWorkGroups.y) {
      for (uint tn = gl_WorkGroupID.x; tn < tiles_n; tn += gl_NumWorkGroups.x) {
        const uint row0 = tm * BM, col0 = tn * BN;
        fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[TMC][TNC];
        for (uint i = 0u; i < TMC; ++i)
          for (uint j = 0u; j < TNC; ++j) acc[i][j] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
#if WA
        uvec4 ra[CA];
#else
        STG ra[CA][8];
#endif
#if WB
        uvec4 rb[CB];
#else
        STG rb[CB][8];
#endif
        uint gi, valid, s0, ds;
        for (uint q = 0u; q < CA; ++q) {
          chunk_a(q, a0, row0, k_begin, gi, valid, s0, ds);
          LOAD_A(q);
        }
        for (uint q = 0u; q < CB; ++q) {
          chunk_b(q, b0, col0, k_begin, gi, valid, s0, ds);
          LOAD_B(q);
        }
        for (uint k0 = k_begin; k0 < k_end; k0 += BK) {
          for (uint q = 0u; q < CA; ++q) {
            chunk_a(q, a0, row0, k0, gi, valid, s0, ds);
#if WA
            As[s0 / 8u] = ra[q];
#else
            for (uint i = 0u; i < 8u; ++i) As[s0 + i * ds] = ra[q][i];
#endif
          }
          for (uint q = 0u; q < CB; ++q) {
            chunk_b(q, b0, col0, k0, gi, valid, s0, ds);
#if WB
            Bs[s0 / 8u] = rb[q];
#else
            for (uint i = 0u; i < 8u; ++i) Bs[s0 + i * ds] = rb[q][i];
#endif
          }
          barrier();
          if (k0 + BK < k_end) {  // the next slice's loads in flight during this slice's products
            for (uint q = 0u; q < CA; ++q) {
              chunk_a(q, a0, row0, k0 + BK, gi, valid, s0, ds);
              LOAD_A(q);
            }
            for (uint q = 0u; q < CB; ++q) {
              chunk_b(q, b0, col0, k0 + BK, gi, valid, s0, ds);
              LOAD_B(q);
            }
          }
          for (uint kk = 0u; kk < BK; kk += 16u) {
            CM_A fa[TMC];
            CM_B fb[TNC];
            for (uint i = 0u; i < TMC; ++i)
              coopMatLoadNV(fa[i], As, (((wm * TMC + i) * 16u) * LDA_S + kk) / AU, LDA_S / AU, false);
            for (uint j = 0u; j < TNC; ++j)
              coopMatLoadNV(fb[j], Bs, (kk * LDB_S + (wn * TNC + j) * 16u) / BU, LDB_S / BU, false);
            for (uint i = 0u; i < TMC; ++i)
              for (uint j = 0u; j < TNC; ++j) acc[i][j] = coopMatMulAddNV(fa[i], fb[j], acc[i][j]);
          }
          barrier();
        }
        STORE_TILES
      }
    }
  }
}
)";

// The GEMM on workgroup-scope matrices (VK_NV_cooperative_matrix2, KHR SPIR-V; products whose
// tiles lie inside the operands): workgroup (x, y, z) computes the BM x BN tile (tn, tm) of batch
// item z as one accumulator, its A and B slices (BK deep) loaded straight from the operands'
// 16-byte words (the driver stages them), B column-major when TRANS_B. The accumulator goes to
// the f32 scratch P ([batch * m, n], as 16-byte words), which the same workgroup then reads back
// through the epilogue, 8 loads of an invocation in flight (a workgroup-scope accumulator is
// larger than shared memory). Defines: NT BM BN BK TRANS_B, and KD LDA LDB (k and the leading
// dimensions: with run-time strides NVIDIA's driver loads the slices 5x slower). Params: m n k
// batch lda ldb sa sb (sa / sb the batch strides).
inline constexpr const char* kGemmCoopWg = R"(
void main() {
  const uint row0 = gl_WorkGroupID.y * BM, col0 = gl_WorkGroupID.x * BN, b = gl_WorkGroupID.z;
  const uint a0 = b * pc.sa, b0 = b * pc.sb;
  fcoopmatNV<32, gl_ScopeWorkgroup, BM, BN> acc = fcoopmatNV<32, gl_ScopeWorkgroup, BM, BN>(0.0);
  for (uint k0 = 0u; k0 < KD; k0 += BK) {
    fcoopmatNV<16, gl_ScopeWorkgroup, BM, BK> fa;
    fcoopmatNV<16, gl_ScopeWorkgroup, BK, BN> fb;
    coopMatLoadNV(fa, A.data, pc.o_A + (a0 + row0 * LDA + k0) / 8u, LDA / 8u, false);
#if TRANS_B
    coopMatLoadNV(fb, B.data, pc.o_B + (b0 + col0 * LDB + k0) / 8u, LDB / 8u, true);
#else
    coopMatLoadNV(fb, B.data, pc.o_B + (b0 + k0 * LDB + col0) / 8u, LDB / 8u, false);
#endif
    acc = coopMatMulAddNV(fa, fb, acc);
  }
  // P in vec4s: the tile back in 16-byte loads, 8 of an invocation's in flight at a time.
  const uint nv = pc.n / 4u, rowv = BN / 4u;
  const uint p0 = pc.o_P + (b * pc.m + row0) * nv + col0 / 4u;
  coopMatStoreNV(acc, P.data, p0, nv, false);
  memoryBarrierBuffer();
  barrier();
  for (uint e0 = gl_LocalInvocationID.x; e0 < BM * rowv; e0 += 8u * NT) {
    vec4 v[8];
    for (uint u = 0u; u < 8u; ++u) {
      const uint e = e0 + u * NT;
      v[u] = e < BM * rowv ? uintBitsToFloat(P.data[p0 + (e / rowv) * nv + e % rowv]) : vec4(0.0);
    }
    for (uint u = 0u; u < 8u; ++u) {
      const uint e = e0 + u * NT, r = e / rowv, c = col0 + (e % rowv) * 4u;
      if (e < BM * rowv)
        for (uint i = 0u; i < 4u; ++i) rlx_epilogue((b * pc.m + row0 + r) * pc.n + c + i, c + i, v[u][i]);
    }
  }
}
)";

}  // namespace rlx::vulkan::ksrc
