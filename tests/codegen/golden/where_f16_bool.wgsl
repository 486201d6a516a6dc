@group(0) @binding(0) var<storage, read_write> rlx_b0: array<u32>;
@group(0) @binding(1) var<storage, read> rlx_b1: array<u32>;
@group(0) @binding(2) var<storage, read> rlx_b2: array<u32>;
struct RlxOffsets { o0: u32, o1: u32, o2: u32, }
@group(0) @binding(3) var<uniform> rlx_off: RlxOffsets;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let items = 64u;
  for (var i = gid.x; i < items; i += nwg.x * 256u) {
    let x0 = bitcast<f32>(rlx_b1[rlx_off.o1 + i]);
    let x1 = bitcast<f32>(rlx_b2[rlx_off.o2 + 0u]);
    let v0 = (x0 < x1);
    let v1 = unpack2x16float(pack2x16float(vec2<f32>(select(x1, x0, v0), 0.0f))).x;
    rlx_b0[rlx_off.o0 + i] = bitcast<u32>(v1);
  }
}
