#pragma once
// GLSL template of the Vulkan Rope kernel (lower_rope.cpp). Placeholders: HEADER (version,
// extensions and dtype helpers), T (storage type of x, cos, sin and out), C (compute type: float,
// or double for f64), LOAD(x) / STORE(v) (storage <-> compute conversions).
namespace rlx::vulkan::ksrc {

// x, out (batch, seq, heads, head_dim) dense; cos/sin rows of half = n_rot / 2, one per sequence
// position, or per (batch, position) when per_batch. Each head row has `half` rotated pairs, then
// head_dim - n_rot elements copied as they are; one invocation per pair or copied element, so
// neighbouring invocations touch neighbouring elements. Pair p is (p, p + half) in the NeoX style,
// (2p, 2p + 1) in the GPT-J style; with the pair's c and s the first becomes x1 c - x2 s and the
// second x2 c + x1 s (computed in f32, f64 in double, as the CPU does). PAIR: a second Rope of
// the same rotation (plan_rope_pairs: q and k of one layer) in the same dispatch, its items after
// the first's, with its own input, output and head count.
inline constexpr const char* kRope = R"GLSL(HEADER
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer BX { T data[]; } x;
layout(std430, set = 0, binding = 1) readonly buffer BC { T data[]; } cs;
layout(std430, set = 0, binding = 2) readonly buffer BS { T data[]; } sn;
layout(std430, set = 0, binding = 3) writeonly buffer BO { T data[]; } dst;
#if PAIR
layout(std430, set = 0, binding = 4) readonly buffer BX2 { T data[]; } x2;
layout(std430, set = 0, binding = 5) writeonly buffer BO2 { T data[]; } dst2;
#endif
layout(push_constant) uniform P {
  uint o_x, o_cos, o_sin, o_out;
#if PAIR
  uint o_x2, o_out2, total2, heads2;
#endif
  uint total, per_head, half_rot, n_rot;
  uint head_dim, heads, seq, per_batch, neox;
} p;
// Element `e` of the (first or second) input, and a store to the matching output.
C ld(bool second, uint e) {
#if PAIR
  if (second) return LOAD(x2.data[p.o_x2 + e]);
#endif
  return LOAD(x.data[p.o_x + e]);
}
void st(bool second, uint e, C v) {
#if PAIR
  if (second) { dst2.data[p.o_out2 + e] = STORE(v); return; }
#endif
  dst.data[p.o_out + e] = STORE(v);
}
void copy_el(bool second, uint e) {
#if PAIR
  if (second) { dst2.data[p.o_out2 + e] = x2.data[p.o_x2 + e]; return; }
#endif
  dst.data[p.o_out + e] = x.data[p.o_x + e];
}
void main() {
#if PAIR
  const uint all = p.total + p.total2;
#else
  const uint all = p.total;
#endif
  for (uint i = gl_GlobalInvocationID.x; i < all; i += gl_NumWorkGroups.x * 256u) {
    const bool second = i >= p.total;
#if PAIR
    const uint li = second ? i - p.total : i, heads = second ? p.heads2 : p.heads;
#else
    const uint li = i, heads = p.heads;
#endif
    const uint q = li % p.per_head, row = li / p.per_head;  // row = (b * seq + s) * heads + h
    const uint base = row * p.head_dim;
    if (q >= p.half_rot) {
      copy_el(second, base + p.n_rot + (q - p.half_rot));
      continue;
    }
    const uint bs = row / heads;
    const uint t = (p.per_batch != 0u ? bs : bs % p.seq) * p.half_rot + q;
    const uint i1 = p.neox != 0u ? q : 2u * q;
    const uint i2 = p.neox != 0u ? q + p.half_rot : 2u * q + 1u;
    const C c = C(LOAD(cs.data[p.o_cos + t]));
    const C s = C(LOAD(sn.data[p.o_sin + t]));
    const C x1 = ld(second, base + i1);
    const C x2v = ld(second, base + i2);
    st(second, base + i1, x1 * c - x2v * s);
    st(second, base + i2, x2v * c + x1 * s);
  }
}
)GLSL";

}  // namespace rlx::vulkan::ksrc
