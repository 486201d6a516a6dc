#pragma once
// GLSL templates of the Vulkan Pool, Resize and Im2Col kernels (lower_spatial.cpp prepends the
// header, the buffers `x` (binding 0) and `y` (last binding) and the defines each one names).
// One thread per output element, grid-stride over a 1-D grid of 256-thread workgroups; output
// elements are written in order, so stores coalesce.
namespace rlx::vulkan::kernels {

// Pool over the geometry lifted to three spatial dims. Defines:
//   IS_MAX          1: max (NaN propagates for floats), 0: average
//   IS_FLOAT        (max) the compute type is a float type
//   MT, LOWEST      (max) compute type and its lowest value (-inf for floats)
//   LDM(v), STM(v)  (max) storage <-> MT
//   ACC, LD, ST     (average) accumulator type (float; double for f64) and conversions
//   COUNT_PAD       (average) divide by the taps inside the padded input, else the real ones
// Push: o_x, o_y, then the lifted geometry; e* are the end pads.
inline constexpr const char* kPool = R"(
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  uint o_x, o_y;
  int planes;
  int in0, in1, in2, out0, out1, out2, k0, k1, k2, s0, s1, s2, p0, p1, p2, e0, e1, e2, d0, d1, d2;
} pc;

int ceil_div(int a, int b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

// Taps kk in [lo, hi) of a window starting at `start` whose position start + kk*dil lies in
// [begin, end).
ivec2 taps(int start, int dil, int k, int begin, int end) {
  const int lo = clamp(ceil_div(begin - start, dil), 0, k);
  return ivec2(lo, clamp(ceil_div(end - start, dil), lo, k));
}

void main() {
  const int o12 = pc.out1 * pc.out2, P = pc.out0 * o12;
  const int i12 = pc.in1 * pc.in2, insz = pc.in0 * i12;
  const int total = pc.planes * P;
  const int step = int(gl_NumWorkGroups.x) * 256;
  for (int i = int(gl_GlobalInvocationID.x); i < total; i += step) {
    const int plane = i / P, p = i - plane * P;
    const int oz = p / o12, oyx = p - oz * o12;
    const int oy = oyx / pc.out2, ox = oyx - oy * pc.out2;
    const int sz = oz * pc.s0 - pc.p0, sy = oy * pc.s1 - pc.p1, sx = ox * pc.s2 - pc.p2;
    const ivec2 tz = taps(sz, pc.d0, pc.k0, 0, pc.in0);
    const ivec2 ty = taps(sy, pc.d1, pc.k1, 0, pc.in1);
    const ivec2 tx = taps(sx, pc.d2, pc.k2, 0, pc.in2);
    const int base = int(pc.o_x) + plane * insz;
#if IS_MAX
    MT m = LOWEST;
    for (int kz = tz.x; kz < tz.y; ++kz)
      for (int ky = ty.x; ky < ty.y; ++ky) {
        const int row = base + ((sz + kz * pc.d0) * pc.in1 + sy + ky * pc.d1) * pc.in2 + sx;
        for (int kx = tx.x; kx < tx.y; ++kx) {
          const MT v = LDM(x.data[row + kx * pc.d2]);
#if IS_FLOAT
          if (v > m || isnan(v)) m = v;
#else
          if (v > m) m = v;
#endif
        }
      }
    y.data[pc.o_y + i] = STM(m);
#else
    ACC sum = ACC(0);
    for (int kz = tz.x; kz < tz.y; ++kz)
      for (int ky = ty.x; ky < ty.y; ++ky) {
        const int row = base + ((sz + kz * pc.d0) * pc.in1 + sy + ky * pc.d1) * pc.in2 + sx;
        for (int kx = tx.x; kx < tx.y; ++kx) sum += LD(x.data[row + kx * pc.d2]);
      }
#if COUNT_PAD
    const ivec2 qz = taps(sz, pc.d0, pc.k0, -pc.p0, pc.in0 + pc.e0);
    const ivec2 qy = taps(sy, pc.d1, pc.k1, -pc.p1, pc.in1 + pc.e1);
    const ivec2 qx = taps(sx, pc.d2, pc.k2, -pc.p2, pc.in2 + pc.e2);
    const int count = (qz.y - qz.x) * (qy.y - qy.x) * (qx.y - qx.x);
#else
    const int count = (tz.y - tz.x) * (ty.y - ty.x) * (tx.y - tx.x);
#endif
    y.data[pc.o_y + i] = ST(sum / ACC(count));
#endif
  }
}
)";

// Resize of a rank-R tensor through per-axis tables (plan::resize_axis_table, the CPU's):
// binding 1 holds, for each axis a in order, out_dims[a] entries of E words: lo, hi and the
// weight of hi (float bits; E = 4 with the two words of a double for f64). Defines:
//   R               the rank
//   LINEAR          0: nearest (a plain copy of the storage element), 1: n-linear
//   ACC, LD, ST, WT (linear) accumulator type, conversions, the weight from table word e
//   E               words per table entry
// Push: o_x, o_t, o_y, total, then out dims and x's element strides (R each).
// Linear follows the CPU's order: corners over the leading axes whose weight is not 0 and
// lo != hi (corner bit b set: the b-th such axis takes hi), each weighted by the product of
// (1 - w) or w in axis order, times the interpolation along the last axis.
inline constexpr const char* kResize = R"(
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  uint o_x, o_t, o_y;
  int total;
  int od[R];
  int xs[R];
} pc;

void main() {
  int toff[R];
  int acc_off = int(pc.o_t);
  for (int a = 0; a < R; ++a) {
    toff[a] = acc_off;
    acc_off += pc.od[a] * E;
  }
  const int step = int(gl_NumWorkGroups.x) * 256;
  for (int i = int(gl_GlobalInvocationID.x); i < pc.total; i += step) {
    int lo[R], hi[R];
#if LINEAR
    ACC wt[R];
#endif
    int rem = i;
    for (int a = R - 1; a >= 0; --a) {
      const int q = rem / pc.od[a], o = rem - q * pc.od[a];
      rem = q;
      const int e = toff[a] + o * E;
      lo[a] = int(tab.data[e]);
      hi[a] = int(tab.data[e + 1]);
#if LINEAR
      wt[a] = WT(e);
#endif
    }
    int base = int(pc.o_x);
    for (int a = 0; a < R - 1; ++a) base += lo[a] * pc.xs[a];
#if !LINEAR
    y.data[pc.o_y + i] = x.data[base + lo[R - 1] * pc.xs[R - 1]];
#else
    int nt[R];
    int m = 0;
    for (int a = 0; a < R - 1; ++a)
      if (wt[a] != ACC(0) && lo[a] != hi[a]) nt[m++] = a;
    const ACC wl = wt[R - 1];
    const int l0 = lo[R - 1] * pc.xs[R - 1], l1 = hi[R - 1] * pc.xs[R - 1];
    ACC acc = ACC(0);
    for (int c = 0; c < (1 << m); ++c) {
      ACC cw = ACC(1);
      int off = base;
      for (int bit = 0; bit < m; ++bit) {
        const int a = nt[bit];
        if (((c >> bit) & 1) != 0) {
          cw *= wt[a];
          off += (hi[a] - lo[a]) * pc.xs[a];
        } else {
          cw *= ACC(1) - wt[a];
        }
      }
      ACC v = LD(x.data[off + l0]);
      if (wl != ACC(0)) v = v * (ACC(1) - wl) + LD(x.data[off + l1]) * wl;
      acc += cw * v;
    }
    y.data[pc.o_y + i] = ST(acc);
#endif
  }
}
)";

// Im2Col (torch unfold order): y (N, C*kh*kw, oh*ow) from x (N, C, H, W); a plain copy of the
// storage element, ZERO where the window reads padding. Defines: ZERO.
inline constexpr const char* kIm2Col = R"(
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  uint o_x, o_y;
  int total, H, W, oh, ow, kh, kw, s0, s1, p0, p1, d0, d1;
} pc;

void main() {
  const int P = pc.oh * pc.ow, ks = pc.kh * pc.kw;
  const int step = int(gl_NumWorkGroups.x) * 256;
  for (int i = int(gl_GlobalInvocationID.x); i < pc.total; i += step) {
    const int r = i / P, p = i - r * P;
    const int plane = r / ks, kyx = r - plane * ks;
    const int ky = kyx / pc.kw, kx = kyx - ky * pc.kw;
    const int oy = p / pc.ow, ox = p - oy * pc.ow;
    const int iy = oy * pc.s0 - pc.p0 + ky * pc.d0, ix = ox * pc.s1 - pc.p1 + kx * pc.d1;
    if (uint(iy) < uint(pc.H) && uint(ix) < uint(pc.W))
      y.data[pc.o_y + i] = x.data[pc.o_x + (plane * pc.H + iy) * pc.W + ix];
    else
      y.data[pc.o_y + i] = ZERO;
  }
}
)";

}  // namespace rlx::vulkan::kernels
