@group(0) @binding(0) var<storage, read_write> rlx_b0: array<u32>;
@group(0) @binding(1) var<storage, read> rlx_b1: array<u32>;
struct RlxOffsets { o0: u32, o1: u32, o2: u32, }
@group(0) @binding(2) var<uniform> rlx_off: RlxOffsets;
fn rlx_bf16_bits(x: f32) -> u32 {
  let u = bitcast<u32>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) { return (u >> 16u) | 0x40u; }
  return (u + 0x7fffu + ((u >> 16u) & 1u)) >> 16u;
}
fn rlx_isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let items = 256u;
  for (var i = gid.x; i < items; i += nwg.x * 256u) {
    let x0 = bitcast<f32>(rlx_b0[rlx_off.o1 + i]);
    let x1 = bitcast<f32>(rlx_b1[rlx_off.o2 + i]);
    let v0 = bitcast<f32>(rlx_bf16_bits((x0 / (1.0f + exp((-x0))))) << 16u);
    let v1 = bitcast<f32>(rlx_bf16_bits(select(x1, v0, v0 > x1 || rlx_isnan(v0))) << 16u);
    rlx_b0[rlx_off.o0 + i] = bitcast<u32>(v1);
  }
}
