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
// second x2 c + x1 s (computed in f32, f64 in double, as the CPU does).
inline constexpr const char* kRope = R"GLSL(HEADER
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer BX { T data[]; } x;
layout(std430, set = 0, binding = 1) readonly buffer BC { T data[]; } cs;
layout(std430, set = 0, binding = 2) readonly buffer BS { T data[]; } sn;
layout(std430, set = 0, binding = 3) writeonly buffer BO { T data[]; } dst;
layout(push_constant) uniform P {
  uint o_x, o_cos, o_sin, o_out;
  uint total, per_head, half_rot, n_rot;
  uint head_dim, heads, seq, per_batch, neox;
} p;
void main() {
  for (uint i = gl_GlobalInvocationID.x; i < p.total; i += gl_NumWorkGroups.x * 256u) {
    const uint q = i % p.per_head, row = i / p.per_head;  // row = (b * seq + s) * heads + h
    const uint base = row * p.head_dim;
    if (q >= p.half_rot) {
      const uint d = p.n_rot + (q - p.half_rot);
      dst.data[p.o_out + base + d] = x.data[p.o_x + base + d];
      continue;
    }
    const uint bs = row / p.heads;
    const uint t = (p.per_batch != 0u ? bs : bs % p.seq) * p.half_rot + q;
    const uint i1 = p.neox != 0u ? q : 2u * q;
    const uint i2 = p.neox != 0u ? q + p.half_rot : 2u * q + 1u;
    const C c = C(LOAD(cs.data[p.o_cos + t]));
    const C s = C(LOAD(sn.data[p.o_sin + t]));
    const C x1 = LOAD(x.data[p.o_x + base + i1]);
    const C x2 = LOAD(x.data[p.o_x + base + i2]);
    dst.data[p.o_out + base + i1] = STORE(x1 * c - x2 * s);
    dst.data[p.o_out + base + i2] = STORE(x2 * c + x1 * s);
  }
}
)GLSL";

}  // namespace rlx::vulkan::ksrc
