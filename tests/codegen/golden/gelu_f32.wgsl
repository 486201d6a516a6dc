@group(0) @binding(0) var<storage, read_write> rlx_b0: array<u32>;
@group(0) @binding(1) var<storage, read> rlx_b1: array<u32>;
struct RlxOffsets { o0: u32, o1: u32, }
@group(0) @binding(2) var<uniform> rlx_off: RlxOffsets;
fn rlx_erf(x: f32) -> f32 {
  let a = abs(x);
  if (a < 0.5f) {
    let x2 = x * x;
    return x * (1.1283791671f + x2 * (-0.3761263890f + x2 * (0.1128379167f + x2 * (-0.0268661706f + x2 * 0.0052239776f))));
  }
  let t = 1.0f / (1.0f + 0.3275911f * a);
  let p = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t + 0.254829592f) * t;
  let y = 1.0f - p * exp(-a * a);
  return select(y, -y, x < 0.0f);
}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let items = 1000u;
  for (var i = gid.x; i < items; i += nwg.x * 256u) {
    let x0 = bitcast<f32>(rlx_b1[rlx_off.o1 + i]);
    let v0 = ((0.5f * x0) * (1.0f + rlx_erf((x0 * 0.707106769f))));
    rlx_b0[rlx_off.o0 + i] = bitcast<u32>(v0);
  }
}
