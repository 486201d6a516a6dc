#pragma once
// GLSL templates of the Vulkan Conv / ConvTranspose kernels (lower_spatial.cpp prepends the
// header, the buffers and these defines):
//   ACC            the accumulator type (float; double for f64)
//   LD(v) / ST(v)  storage element -> ACC, and back (x, w, bias and y share one dtype)
//   TRANSPOSED     0: Conv, w (Cout, cg, k0, k1, k2); 1: ConvTranspose, w (Cin, coutg, k0, k1, k2)
//   HAS_BIAS       a bias binding (one value per output channel) is present
//   TM             (GEMM only) rows of the output-channel tile per thread: the tile is 16*TM
// Bindings: 0 x, 1 w, [2 bias], then y; push constants: one element offset per binding, then the
// geometry lifted to three spatial dims (missing leading dims have size 1, kernel 1, stride 1, pad
// 0, dilation 1). For Conv `in` is x's grid and `out` y's; cg = input channels per group. For
// ConvTranspose the same names hold (x's grid is `in`, y's `out`), cg = Cin / groups, and output
// position o reads input i where o = i * stride - pad + kk * dilation.
namespace rlx::vulkan::kernels {

inline constexpr const char* kConvPush = R"(
layout(push_constant) uniform Push {
  uint o_x, o_w;
#if HAS_BIAS
  uint o_b;
#endif
  uint o_y;
  int N, C, cg, Cout, coutg, groups;
  int in0, in1, in2, out0, out1, out2, k0, k1, k2, s0, s1, s2, p0, p1, p2, d0, d1, d2;
} pc;

// Input element v of output position (oz, oy, ox) and tap (kz, ky, kx) of the plane at `plane`
// (an element offset in x); false (v = 0) where the tap reads padding (or, transposed, no input).
bool tap(int plane, int oz, int oy, int ox, int kz, int ky, int kx, out ACC v) {
  v = ACC(0);
#if !TRANSPOSED
  const int iz = oz * pc.s0 - pc.p0 + kz * pc.d0;
  const int iy = oy * pc.s1 - pc.p1 + ky * pc.d1;
  const int ix = ox * pc.s2 - pc.p2 + kx * pc.d2;
  if (uint(iz) >= uint(pc.in0) || uint(iy) >= uint(pc.in1) || uint(ix) >= uint(pc.in2)) return false;
#else
  const int tz = oz + pc.p0 - kz * pc.d0;
  const int ty = oy + pc.p1 - ky * pc.d1;
  const int tx = ox + pc.p2 - kx * pc.d2;
  if (tz < 0 || ty < 0 || tx < 0) return false;
  const int iz = tz / pc.s0, iy = ty / pc.s1, ix = tx / pc.s2;
  if (iz * pc.s0 != tz || iy * pc.s1 != ty || ix * pc.s2 != tx) return false;
  if (iz >= pc.in0 || iy >= pc.in1 || ix >= pc.in2) return false;
#endif
  v = LD(x.data[pc.o_x + plane + (iz * pc.in1 + iy) * pc.in2 + ix]);
  return true;
}

// Weight of output channel m of group g, input channel ci of the group, tap r (row-major over
// k0, k1, k2), where ks = k0 * k1 * k2.
ACC weight(int g, int m, int ci, int r, int ks) {
#if !TRANSPOSED
  return LD(w.data[pc.o_w + ((g * pc.coutg + m) * pc.cg + ci) * ks + r]);
#else
  return LD(w.data[pc.o_w + ((g * pc.cg + ci) * pc.coutg + m) * ks + r]);
#endif
}

ACC bias_of(int co) {
#if HAS_BIAS
  return LD(b.data[pc.o_b + co]);
#else
  return ACC(0);
#endif
}
)";

// One thread per output element (n, co, position), looping over the group's input channels and
// the window: for few output channels per group (depthwise and small multipliers), where a GEMM
// tile over output channels would be mostly empty.
inline constexpr const char* kConvDirect = R"(
layout(local_size_x = 256) in;
void main() {
  const int ks = pc.k0 * pc.k1 * pc.k2;
  const int o12 = pc.out1 * pc.out2, P = pc.out0 * o12;
  const int insz = pc.in0 * pc.in1 * pc.in2;
  const int total = pc.N * pc.Cout * P;
  const int step = int(gl_NumWorkGroups.x) * 256;
  for (int i = int(gl_GlobalInvocationID.x); i < total; i += step) {
    const int nc = i / P, p = i - nc * P;
    const int n = nc / pc.Cout, co = nc - n * pc.Cout;
    const int g = co / pc.coutg, m = co - g * pc.coutg;
    const int oz = p / o12, oyx = p - oz * o12;
    const int oy = oyx / pc.out2, ox = oyx - oy * pc.out2;
    ACC acc = ACC(0);
    for (int ci = 0; ci < pc.cg; ++ci) {
      const int plane = (n * pc.C + g * pc.cg + ci) * insz;
      int r = 0;
      for (int kz = 0; kz < pc.k0; ++kz)
        for (int ky = 0; ky < pc.k1; ++ky)
          for (int kx = 0; kx < pc.k2; ++kx, ++r) {
            ACC v;
            // Conv multiplies padding's zeros too (like the CPU's im2col + GEMM: a non-finite
            // weight poisons its outputs); ConvTranspose only adds the taps that reach an input.
            if (tap(plane, oz, oy, ox, kz, ky, kx, v) || TRANSPOSED == 0) acc += v * weight(g, m, ci, r, ks);
          }
    }
    y.data[pc.o_y + i] = ST(acc + bias_of(co));
  }
}
)";

// Implicit GEMM per group: y[n, g*coutg + m, p] = sum_k W[m, k] * X[k, (n, p)] with
// k = (ci, kz, ky, kx) over cg * ks. Each workgroup computes a (16*TM) x 64 tile of output
// channels x output columns (n, p); K runs in chunks of 16 staged in shared memory (the weights
// read along k, the input gathered along columns so neighbouring threads read neighbouring
// pixels). Thread (tx, ty) of 16x16 owns rows ty + 16 i and columns tx + 16 j (coalesced
// stores). Tiles and groups are walked grid-stride on x (columns), y (channel tiles), z (groups).
inline constexpr const char* kConvGemm = R"(
layout(local_size_x = 256) in;
const int BM = 16 * TM;
const int BN = 64;
const int BK = 16;
shared ACC As[BK][BM];
shared ACC Bs[BK][BN];

void main() {
  const int t = int(gl_LocalInvocationID.x);
  const int tx = t & 15, ty = t >> 4;
  const int ks = pc.k0 * pc.k1 * pc.k2, k12 = pc.k1 * pc.k2;
  const int K = pc.cg * ks;
  const int o12 = pc.out1 * pc.out2, P = pc.out0 * o12;
  const int insz = pc.in0 * pc.in1 * pc.in2;
  const int cols = pc.N * P;
  const int ntn = (cols + BN - 1) / BN, ntm = (pc.coutg + BM - 1) / BM;
  const int bc = t & 63, br = t >> 6;  // B loads: one column, rows br + 4 i
  const int ak = t & 15, am = t >> 4;  // A loads: one k, rows am + 16 i
  for (int g = int(gl_WorkGroupID.z); g < pc.groups; g += int(gl_NumWorkGroups.z))
    for (int tm = int(gl_WorkGroupID.y); tm < ntm; tm += int(gl_NumWorkGroups.y))
      for (int tn = int(gl_WorkGroupID.x); tn < ntn; tn += int(gl_NumWorkGroups.x)) {
        const int col = tn * BN + bc;
        const bool cvalid = col < cols;
        int n = 0, oz = 0, oy = 0, ox = 0;
        if (cvalid) {
          n = col / P;
          const int p = col - n * P;
          oz = p / o12;
          const int oyx = p - oz * o12;
          oy = oyx / pc.out2;
          ox = oyx - oy * pc.out2;
        }
        const int xbase = (n * pc.C + g * pc.cg) * insz;
        ACC acc[TM][4];
        for (int i = 0; i < TM; ++i)
          for (int j = 0; j < 4; ++j) acc[i][j] = ACC(0);
        for (int kb = 0; kb < K; kb += BK) {
          for (int i = 0; i < TM; ++i) {
            const int m = tm * BM + am + 16 * i, k = kb + ak;
            ACC a = ACC(0);
            if (m < pc.coutg && k < K) {
              const int ci = k / ks;
              a = weight(g, m, ci, k - ci * ks, ks);
            }
            As[ak][am + 16 * i] = a;
          }
          for (int i = 0; i < 4; ++i) {
            const int kr = br + 4 * i, k = kb + kr;
            ACC v = ACC(0);
            if (cvalid && k < K) {
              const int ci = k / ks;
              int r = k - ci * ks;
              const int kz = r / k12;
              r -= kz * k12;
              const int ky = r / pc.k2;
              tap(xbase + ci * insz, oz, oy, ox, kz, ky, r - ky * pc.k2, v);
            }
            Bs[kr][bc] = v;
          }
          barrier();
          for (int kk = 0; kk < BK; ++kk) {
            ACC a[TM], bv[4];
            for (int i = 0; i < TM; ++i) a[i] = As[kk][ty + 16 * i];
            for (int j = 0; j < 4; ++j) bv[j] = Bs[kk][tx + 16 * j];
            for (int i = 0; i < TM; ++i)
              for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * bv[j];
          }
          barrier();
        }
        for (int i = 0; i < TM; ++i) {
          const int m = tm * BM + ty + 16 * i;
          if (m >= pc.coutg) continue;
          const int co = g * pc.coutg + m;
          const ACC bias = bias_of(co);
          for (int j = 0; j < 4; ++j) {
            const int c = tn * BN + tx + 16 * j;
            if (c >= cols) continue;
            const int cn = c / P;
            y.data[pc.o_y + (cn * pc.Cout + co) * P + (c - cn * P)] = ST(acc[i][j] + bias);
          }
        }
      }
}
)";

}  // namespace rlx::vulkan::kernels
