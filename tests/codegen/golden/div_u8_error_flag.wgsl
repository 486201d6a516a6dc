@group(0) @binding(0) var<storage, read_write> rlx_b0: array<u32>;
@group(0) @binding(1) var<storage, read> rlx_b1: array<u32>;
@group(0) @binding(2) var<storage, read> rlx_b2: array<u32>;
@group(0) @binding(3) var<storage, read_write> rlx_err: atomic<i32>;
struct RlxOffsets { o0: u32, o1: u32, o2: u32, }
@group(0) @binding(4) var<uniform> rlx_off: RlxOffsets;
fn rlx_int_div_u32(a: u32, b: u32) -> u32 {
  if (b == u32(0)) { atomicMax(&rlx_err, 6); return u32(0); }
  if (false && b == 0xffffffffu) { return u32(0) - a; }
  return a / b;
}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let items = 32u;
  for (var i = gid.x; i < items; i += nwg.x * 256u) {
    let x0 = rlx_b1[rlx_off.o1 + i];
    let x1 = rlx_b2[rlx_off.o2 + i];
    let v0 = (rlx_int_div_u32(x0, x1) & 0xffu);
    rlx_b0[rlx_off.o0 + i] = v0;
  }
}
