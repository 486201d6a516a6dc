#pragma once
// GLSL templates of the Vulkan rows family (lower_rows.cpp fills the macros they use).
//
// Every kernel works on "lines": a set of elements reduced together (a softmax row or column, a
// norm row, the elements of one Reduce output). A workgroup of WG threads handles WG / TY lines
// at a time with TY threads per line, in one of two layouts (baked as RF):
//   RF 1: the TY threads of a line are consecutive invocations (lines whose elements are
//         contiguous: consecutive threads read consecutive elements);
//   RF 0: lines are the fastest index (TX = WG / TY consecutive lines whose elements lie next to
//         each other in memory, e.g. columns of a [outer, axis, inner] tensor), TY threads each.
// Line tiles are walked grid-stride (the grid is capped at the device's limit). The threads of a
// line combine their partial results with rows_group_reduce (subgroup operations where the
// whole workgroup is one line and the device has them, else a shared-memory tree).
namespace rlx::vulkan::ksrc {

// Set up by rows_init() at the start of every kernel: whether the workgroup's subgroups are runs
// of consecutive invocations (then a line of TY >= subgroup-size consecutive invocations is made
// of whole subgroups and reduces with subgroup operations and one shared-memory step).
inline constexpr const char* kSubgroupInit = R"(
shared uint rows_nonlinear;
bool rows_linear = false;
void rows_init() {
  if (gl_LocalInvocationIndex == 0u) rows_nonlinear = 0u;
  barrier();
  if (gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID != gl_LocalInvocationIndex)
    atomicOr(rows_nonlinear, 1u);
  barrier();
  rows_linear = rows_nonlinear == 0u;
}
)";
inline constexpr const char* kNoSubgroupInit = R"(
void rows_init() {}
)";

// Group reduction helper `NAME`: its type RT_NAME, CB_NAME(a, b) combining two partials and,
// optionally, SG_NAME(v) reducing over the subgroup are macros the lowering defines. `ms`: the
// stride between a line's members in invocations (1 or TX); `mc`: members per line (TY, a power
// of two). Called in uniform control flow by every invocation.
inline constexpr const char* kGroupReduce = R"(
shared RT_NAME rs_NAME[WG];
RT_NAME NAME(RT_NAME v, uint lid, uint ms, uint mc) {
#ifdef SG_NAME
  if (ms == 1u && rows_linear && mc >= gl_SubgroupSize) {
    v = SG_NAME(v);
    if (gl_SubgroupInvocationID == 0u) rs_NAME[gl_SubgroupID] = v;
    barrier();
    uint per = mc / gl_SubgroupSize, first = (lid / mc) * per;
    RT_NAME r = rs_NAME[first];
    for (uint i = 1u; i < per; ++i) r = CB_NAME(r, rs_NAME[first + i]);
    barrier();
    return r;
  }
#endif
  uint m = (lid / ms) % mc;
  rs_NAME[lid] = v;
  barrier();
  for (uint s = mc >> 1; s > 0u; s >>= 1) {
    if (m < s) rs_NAME[lid] = CB_NAME(rs_NAME[lid], rs_NAME[lid + s * ms]);
    barrier();
  }
  RT_NAME r = rs_NAME[lid - m * ms];
  barrier();
  return r;
}
)";

// Reduce: output o (row-major over the kept groups kd) reduces elements r < count (row-major
// over the reduced groups rd); input element = ox + koff(o) + roff(r). NK / NR groups (<= 4).
// Macros: LOADA(i) (input element i as A), IDENT, COMBINE(a, b), FINISH(a) (A -> storage).
inline constexpr const char* kReduce = R"(
layout(push_constant) uniform Push {
  uint ox, oy, outputs, count, ty;
  uint kd[4]; uint ks[4]; uint rd[4]; uint rs[4];
} p;

uint koff(uint o) {
  uint off = 0u;
  for (int d = NK - 1; d > 0; --d) { uint c = o % p.kd[d]; o /= p.kd[d]; off += c * p.ks[d]; }
  return off + o * p.ks[0];
}
uint roff(uint r) {
  uint off = 0u;
  for (int d = NR - 1; d > 0; --d) { uint c = r % p.rd[d]; r /= p.rd[d]; off += c * p.rs[d]; }
  return off + r * p.rs[0];
}

void main() {
  rows_init();
  uint lid = gl_LocalInvocationID.x;
  uint TY = p.ty, TX = WG / TY;
#if RF
  uint c = lid / TY, k = lid % TY, ms = 1u;
#else
  uint c = lid % TX, k = lid / TX, ms = TX;
#endif
  uint tiles = (p.outputs + TX - 1u) / TX;
  for (uint t = gl_WorkGroupID.x; t < tiles; t += gl_NumWorkGroups.x) {
    uint o = t * TX + c;
    A acc = IDENT;
    if (o < p.outputs) {
      uint base = p.ox + koff(o);
      for (uint r = k; r < p.count; r += TY) acc = COMBINE(acc, LOADA(base + roff(r)));
    }
    acc = red(acc, lid, ms, TY);
    if (k == 0u && o < p.outputs) Y.data[p.oy + o] = FINISH(acc);
  }
}
)";

// Softmax / LogSoftmax over the axis of x viewed as [outer, axis, inner]: line = column
// (o, j), element k at (o * axis + k) * inner + j. A line of at most TY * CACHE elements is
// held in registers (one read); a longer one keeps a running max and rescaled sum (two reads).
// Macros: LOADF(i) (float), STOREF(i, v), LOG (0/1).
inline constexpr const char* kSoftmax = R"(
layout(push_constant) uniform Push { uint ox, oy, cols, axis, inner, ty; } p;

#define NEG_INF uintBitsToFloat(0xff800000u)
float max_nan(float a, float b) { return (b > a || isnan(b)) ? b : a; }

void main() {
  rows_init();
  uint lid = gl_LocalInvocationID.x;
  uint TY = p.ty, TX = WG / TY;
#if RF
  uint c = lid / TY, kk = lid % TY, ms = 1u;
#else
  uint c = lid % TX, kk = lid / TX, ms = TX;
#endif
  uint tiles = (p.cols + TX - 1u) / TX;
  bool cached = p.axis <= TY * uint(CACHE);
  for (uint t = gl_WorkGroupID.x; t < tiles; t += gl_NumWorkGroups.x) {
    uint col = t * TX + c;
    bool ok = col < p.cols;
    uint at = ok ? (col / p.inner) * p.axis * p.inner + col % p.inner : 0u;
    if (cached) {
      float xv[CACHE];
      float m = NEG_INF;
      for (uint i = 0u; i < uint(CACHE); ++i) {
        uint k = kk + i * TY;
        xv[i] = 0.0;
        if (ok && k < p.axis) { xv[i] = LOADF(p.ox + at + k * p.inner); m = max_nan(m, xv[i]); }
      }
      float M = red_max(m, lid, ms, TY);
      float s = 0.0;
      for (uint i = 0u; i < uint(CACHE); ++i)
        if (ok && kk + i * TY < p.axis) s += exp(xv[i] - M);
      float S = red_sum(s, lid, ms, TY);
#if LOG
      float ls = log(S);
#else
      float inv = 1.0 / S;
#endif
      for (uint i = 0u; i < uint(CACHE); ++i) {
        uint k = kk + i * TY;
        if (ok && k < p.axis) {
#if LOG
          STOREF(p.oy + at + k * p.inner, (xv[i] - M) - ls);
#else
          STOREF(p.oy + at + k * p.inner, exp(xv[i] - M) * inv);
#endif
        }
      }
    } else {
      float m = NEG_INF, s = 0.0;
      if (ok)
        for (uint k = kk; k < p.axis; k += TY) {
          float x = LOADF(p.ox + at + k * p.inner);
          float mn = max_nan(m, x);
          if (mn != NEG_INF) s = s * exp(m - mn) + exp(x - mn);
          m = mn;
        }
      float M = red_max(m, lid, ms, TY);
      float S = red_sum(s == 0.0 ? 0.0 : s * exp(m - M), lid, ms, TY);
#if LOG
      float ls = log(S);
#else
      float inv = 1.0 / S;
#endif
      if (ok)
        for (uint k = kk; k < p.axis; k += TY) {
          float x = LOADF(p.ox + at + k * p.inner);
#if LOG
          STOREF(p.oy + at + k * p.inner, (x - M) - ls);
#else
          STOREF(p.oy + at + k * p.inner, exp(x - M) * inv);
#endif
        }
    }
  }
}
)";

// LayerNorm / RmsNorm (RMS 0/1) of contiguous rows of `len`, optionally of x + residual (RES,
// rounded to the storage type first) and with a bias (BETA). gamma/beta index of element j of
// row r: (r % gmod) * gmul + j / gdiv (LayerNorm: j; GroupNorm: the element's channel).
// Statistics two-pass (mean, then centred squares) in A; rows of at most TY * CACHE elements are
// held in registers. Macros: A, LOADV(i) (x or x + residual at row element i, as A), LOADG(i),
// LOADB(i), STOREY(i, v), EPS.
inline constexpr const char* kNorm = R"(
uint gidx(uint row, uint j) { return (row % p.gmod) * p.gmul + (p.gdiv == 1u ? j : j / p.gdiv); }

void main() {
  rows_init();
  uint lid = gl_LocalInvocationID.x;
  uint TY = p.ty, RPW = WG / TY;
  uint rl = lid / TY, kk = lid % TY;
  uint tiles = (p.rows + RPW - 1u) / RPW;
  bool cached = p.len <= TY * uint(CACHE);
  A n = A(p.len);
  for (uint t = gl_WorkGroupID.x; t < tiles; t += gl_NumWorkGroups.x) {
    uint row = t * RPW + rl;
    bool ok = row < p.rows;
    uint base = ok ? row * p.len : 0u;
    A mean = A(0.0), inv;
    if (cached) {
      A v[CACHE];
      A s = A(0.0);
      for (uint i = 0u; i < uint(CACHE); ++i) {
        uint k = kk + i * TY;
        v[i] = A(0.0);
        if (ok && k < p.len) { v[i] = LOADV(base + k); s += v[i]; }
      }
#if !RMS
      mean = red_sum(s, lid, 1u, TY) / n;
#endif
      A q = A(0.0);
      for (uint i = 0u; i < uint(CACHE); ++i)
        if (ok && kk + i * TY < p.len) { A d = v[i] - mean; q += d * d; }
      inv = A(1.0) / sqrt(red_sum(q, lid, 1u, TY) / n + EPS);
      for (uint i = 0u; i < uint(CACHE); ++i) {
        uint k = kk + i * TY;
        if (ok && k < p.len) {
          uint g = gidx(row, k);
          A o = (v[i] - mean) * inv * LOADG(g);
#if BETA
          o += LOADB(g);
#endif
          STOREY(base + k, o);
        }
      }
    } else {
#if !RMS
      A s = A(0.0);
      if (ok) for (uint k = kk; k < p.len; k += TY) s += LOADV(base + k);
      mean = red_sum(s, lid, 1u, TY) / n;
#endif
      A q = A(0.0);
      if (ok) for (uint k = kk; k < p.len; k += TY) { A d = LOADV(base + k) - mean; q += d * d; }
      inv = A(1.0) / sqrt(red_sum(q, lid, 1u, TY) / n + EPS);
      if (ok)
        for (uint k = kk; k < p.len; k += TY) {
          uint g = gidx(row, k);
          A o = (LOADV(base + k) - mean) * inv * LOADG(g);
#if BETA
          o += LOADB(g);
#endif
          STOREY(base + k, o);
        }
    }
  }
}
)";

// FusedSwiGLU: out[r, i] = silu(gate) * up with gate / up at columns goff + i / uoff + i of the
// 2n-wide row r; silu rounded to the storage type first (as the unfused graph stores it).
// Macros: LOADF(i), STOREF(i, v), ROUNDF(v).
inline constexpr const char* kSwiglu = R"(
layout(push_constant) uniform Push { uint ox, oy, total, n, goff, uoff; } p;

void main() {
  uint stride = gl_NumWorkGroups.x * WG;
  for (uint i = gl_GlobalInvocationID.x; i < p.total; i += stride) {
    uint row = i / p.n, col = i - row * p.n;
    uint b = p.ox + row * 2u * p.n + col;
    float g = LOADF(b + p.goff), u = LOADF(b + p.uoff);
    STOREF(p.oy + i, ROUNDF(g / (1.0 + exp(-g))) * u);
  }
}
)";

}  // namespace rlx::vulkan::ksrc
