@group(0) @binding(0) var<storage, read_write> rlx_b0: array<u32>;
@group(0) @binding(1) var<storage, read> rlx_b1: array<u32>;
@group(0) @binding(2) var<storage, read> rlx_b2: array<u32>;
struct RlxOffsets { o0: u32, o1: u32, o2: u32, }
@group(0) @binding(3) var<uniform> rlx_off: RlxOffsets;
fn rlx_f16_round(x: f32) -> f32 {
  let u = bitcast<u32>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) { return x; }
  if (abs(x) >= 65520.0f) { return bitcast<f32>((u & 0x80000000u) | 0x7f800000u); }
  return unpack2x16float(pack2x16float(vec2<f32>(x, 0.0f))).x;
}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let items = 64u;
  for (var i = gid.x; i < items; i += nwg.x * 256u) {
    let x0 = bitcast<f32>(rlx_b1[rlx_off.o1 + i]);
    let x1 = bitcast<f32>(rlx_b2[rlx_off.o2 + 0u]);
    let v0 = (!(((bitcast<u32>(x0) & 0x7fffffffu) > 0x7f800000u) || ((bitcast<u32>(x1) & 0x7fffffffu) > 0x7f800000u)) && (x0 < x1));
    let v1 = rlx_f16_round(select(x1, x0, v0));
    rlx_b0[rlx_off.o0 + i] = bitcast<u32>(v1);
  }
}
