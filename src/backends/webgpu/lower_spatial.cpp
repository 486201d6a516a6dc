// The spatial family on WebGPU: Conv (1-3 spatial dims), ConvTranspose (2-d), Pool (max / average,
// 1-3 spatial dims), Resize (every mode, coordinate transform and nearest rounding, through the
// plan's per-axis tables) and Im2Col. The geometry, the kernel choice and the parameter tables
// come from plan/spatial_work.h (shared with Vulkan); this file holds the WGSL templates.
//
// Conv and ConvTranspose run as an implicit GEMM per group (workgroup tiles of output channels x
// output columns, K = the group's input channels x window in chunks of 16 in workgroup memory)
// when a group has at least 8 output channels, else as a direct kernel (one invocation per output
// element). Every geometry is lifted to three spatial dims and every size is a uniform parameter,
// so one pipeline per (variant, dtype) serves every shape. Floats compute in f32 (f16 / bf16 held
// as f32 words, rounded once at the store).
#include <algorithm>
#include <string>
#include <vector>

#include "backends/webgpu/lower.h"
#include "codegen/language.h"
#include "plan/spatial_work.h"
#include "rlx/error.h"

namespace rlx::webgpu {
namespace {

constexpr uint64_t kWorkgroup = 256;
constexpr std::string_view kBackend = "WebGPU";

const codegen::Language& L() { return codegen::wgsl_language(); }

std::string helpers_for(DType t) {
  codegen::Helpers h;
  L().dtype_helpers(t, h);
  return h.source();
}

// The store of f32 value v as float dtype t (rounded to its precision).
std::string storef(DType t, const std::string& v) { return L().store(t, L().round(t, v)); }

std::string replace(std::string s, const std::vector<std::pair<std::string, std::string>>& subs) {
  for (const auto& [k, v] : subs) s = codegen::replace_all(std::move(s), k, v);
  return s;
}

// Uniform names of a lifted window: in0..2, out0..2, k, s, p, [e], d.
std::vector<std::string> window_names(bool pad_end) {
  std::vector<std::string> n;
  for (const char* p : {"in", "out", "k", "s", "p", "e", "d"}) {
    if (p[0] == 'e' && !pad_end) continue;
    for (int i = 0; i < 3; ++i) n.push_back(std::string(p) + std::to_string(i) + ": i32");
  }
  return n;
}

// ---- Conv / ConvTranspose ----

// tap(plane, oz, oy, ox, kz, ky, kx): the input value of an output position and tap (0 where it
// reads padding, or, transposed, where no input reaches the position); tap_ok says which.
const char* kConvTapConv = R"(
fn tap_at(oz: i32, oy: i32, ox: i32, kz: i32, ky: i32, kx: i32) -> vec4<i32> {
  let iz = oz * rlx_p.s0 - rlx_p.p0 + kz * rlx_p.d0;
  let iy = oy * rlx_p.s1 - rlx_p.p1 + ky * rlx_p.d1;
  let ix = ox * rlx_p.s2 - rlx_p.p2 + kx * rlx_p.d2;
  let ok = u32(iz) < u32(rlx_p.in0) && u32(iy) < u32(rlx_p.in1) && u32(ix) < u32(rlx_p.in2);
  return vec4<i32>(iz, iy, ix, select(0i, 1i, ok));
}
)";
const char* kConvTapTransposed = R"(
fn tap_at(oz: i32, oy: i32, ox: i32, kz: i32, ky: i32, kx: i32) -> vec4<i32> {
  let tz = oz + rlx_p.p0 - kz * rlx_p.d0;
  let ty = oy + rlx_p.p1 - ky * rlx_p.d1;
  let tx = ox + rlx_p.p2 - kx * rlx_p.d2;
  if (tz < 0i || ty < 0i || tx < 0i) { return vec4<i32>(0i, 0i, 0i, 0i); }
  let iz = tz / rlx_p.s0;
  let iy = ty / rlx_p.s1;
  let ix = tx / rlx_p.s2;
  let ok = iz * rlx_p.s0 == tz && iy * rlx_p.s1 == ty && ix * rlx_p.s2 == tx && iz < rlx_p.in0 && iy < rlx_p.in1 &&
           ix < rlx_p.in2;
  return vec4<i32>(iz, iy, ix, select(0i, 1i, ok));
}
)";
const char* kConvCommon = R"(
fn tap(plane: i32, oz: i32, oy: i32, ox: i32, kz: i32, ky: i32, kx: i32) -> f32 {
  let a = tap_at(oz, oy, ox, kz, ky, kx);
  if (a.w == 0i) { return 0.0f; }
  return ldx(plane + (a.x * rlx_p.in1 + a.y) * rlx_p.in2 + a.z);
}
fn tap_ok(oz: i32, oy: i32, ox: i32, kz: i32, ky: i32, kx: i32) -> bool { return tap_at(oz, oy, ox, kz, ky, kx).w != 0i; }
// The weight of output channel m of group g, input channel ci of the group, tap r (ks taps).
fn weight(g: i32, m: i32, ci: i32, r: i32, ks: i32) -> f32 {
  if (TRANSPOSED) { return ldw(((g * rlx_p.cg + ci) * rlx_p.coutg + m) * ks + r); }
  return ldw(((g * rlx_p.coutg + m) * rlx_p.cg + ci) * ks + r);
}
)";

const char* kConvDirect = R"(
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let ks = rlx_p.k0 * rlx_p.k1 * rlx_p.k2;
  let o12 = rlx_p.out1 * rlx_p.out2;
  let P = rlx_p.out0 * o12;
  let insz = rlx_p.in0 * rlx_p.in1 * rlx_p.in2;
  let total = u32(rlx_p.N * rlx_p.Cout * P);
  for (var iu = gid.x; iu < total; iu += nwg.x * 256u) {
    let i = i32(iu);
    let nc = i / P;
    let p = i - nc * P;
    let n = nc / rlx_p.Cout;
    let co = nc - n * rlx_p.Cout;
    let g = co / rlx_p.coutg;
    let m = co - g * rlx_p.coutg;
    let oz = p / o12;
    let oyx = p - oz * o12;
    let oy = oyx / rlx_p.out2;
    let ox = oyx - oy * rlx_p.out2;
    var acc = 0.0f;
    for (var ci = 0i; ci < rlx_p.cg; ci++) {
      let plane = (n * rlx_p.C + g * rlx_p.cg + ci) * insz;
      var r = 0i;
      for (var kz = 0i; kz < rlx_p.k0; kz++) {
        for (var ky = 0i; ky < rlx_p.k1; ky++) {
          for (var kx = 0i; kx < rlx_p.k2; kx++) {
            // Conv multiplies padding's zeros too (like the CPU's im2col + GEMM: a non-finite
            // weight poisons its outputs); ConvTranspose only adds the taps that reach an input.
            if (!TRANSPOSED || tap_ok(oz, oy, ox, kz, ky, kx)) {
              acc += tap(plane, oz, oy, ox, kz, ky, kx) * weight(g, m, ci, r, ks);
            }
            r++;
          }
        }
      }
    }
    sty(i, acc + bias_of(co));
  }
}
)";

// Implicit GEMM per group: y[n, g*coutg + m, p] = sum_k W[m, k] X[k, (n, p)], k = (ci, kz, ky,
// kx). A workgroup of 256 computes a BM x 64 tile (BM = 16 * TM output channels); K in chunks
// of 16 staged in workgroup memory; invocation (tx, ty) of 16 x 16 owns rows ty + 16 i and
// columns tx + 16 j. Tiles and groups are grid-stride loops over x (columns), y (channel tiles)
// and z (groups).
const char* kConvGemm = R"(
const BM = 16i * TM;
const BN = 64i;
const BK = 16i;
var<workgroup> As: array<f32, 16 * 16 * TM>;  // [kk * BM + m]
var<workgroup> Bs: array<f32, 16 * 64>;       // [kk * BN + c]
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = i32(lid);
  let tx = t & 15i;
  let ty = t >> 4u;
  let ks = rlx_p.k0 * rlx_p.k1 * rlx_p.k2;
  let k12 = rlx_p.k1 * rlx_p.k2;
  let K = rlx_p.cg * ks;
  let o12 = rlx_p.out1 * rlx_p.out2;
  let P = rlx_p.out0 * o12;
  let insz = rlx_p.in0 * rlx_p.in1 * rlx_p.in2;
  let cols = rlx_p.N * P;
  let ntn = (cols + BN - 1i) / BN;
  let ntm = (rlx_p.coutg + BM - 1i) / BM;
  let bc = t & 63i;  // B loads: one column, k rows br + 4 i
  let br = t >> 6u;
  let ak = t & 15i;  // A loads: one k, rows am + 16 i
  let am = t >> 4u;
  for (var g = i32(wid.z); g < rlx_p.groups; g += i32(nwg.z)) {
    for (var tm = i32(wid.y); tm < ntm; tm += i32(nwg.y)) {
      for (var tn = i32(wid.x); tn < ntn; tn += i32(nwg.x)) {
        let col = tn * BN + bc;
        let cvalid = col < cols;
        var n = 0i;
        var oz = 0i;
        var oy = 0i;
        var ox = 0i;
        if (cvalid) {
          n = col / P;
          let p = col - n * P;
          oz = p / o12;
          let oyx = p - oz * o12;
          oy = oyx / rlx_p.out2;
          ox = oyx - oy * rlx_p.out2;
        }
        let xbase = (n * rlx_p.C + g * rlx_p.cg) * insz;
        var acc: array<array<f32, 4>, TM>;
        for (var kb = 0i; kb < K; kb += BK) {
          for (var i = 0i; i < TM; i++) {
            let m = tm * BM + am + 16i * i;
            let k = kb + ak;
            var a = 0.0f;
            if (m < rlx_p.coutg && k < K) {
              let ci = k / ks;
              a = weight(g, m, ci, k - ci * ks, ks);
            }
            As[ak * BM + am + 16i * i] = a;
          }
          for (var i = 0i; i < 4i; i++) {
            let kr = br + 4i * i;
            let k = kb + kr;
            var v = 0.0f;
            if (cvalid && k < K) {
              let ci = k / ks;
              var r = k - ci * ks;
              let kz = r / k12;
              r -= kz * k12;
              let ky = r / rlx_p.k2;
              v = tap(xbase + ci * insz, oz, oy, ox, kz, ky, r - ky * rlx_p.k2);
            }
            Bs[kr * BN + bc] = v;
          }
          workgroupBarrier();
          for (var kk = 0i; kk < BK; kk++) {
            var bv: array<f32, 4>;
            for (var j = 0i; j < 4i; j++) { bv[j] = Bs[kk * BN + tx + 16i * j]; }
            for (var i = 0i; i < TM; i++) {
              let a = As[kk * BM + ty + 16i * i];
              for (var j = 0i; j < 4i; j++) { acc[i][j] += a * bv[j]; }
            }
          }
          workgroupBarrier();
        }
        for (var i = 0i; i < TM; i++) {
          let m = tm * BM + ty + 16i * i;
          if (m >= rlx_p.coutg) { continue; }
          let co = g * rlx_p.coutg + m;
          let bias = bias_of(co);
          for (var j = 0i; j < 4i; j++) {
            let c = tn * BN + tx + 16i * j;
            if (c >= cols) { continue; }
            let cn = c / P;
            sty((cn * rlx_p.Cout + co) * P + (c - cn * P), acc[i][j] + bias);
          }
        }
      }
    }
  }
}
)";

void lower_conv(LowerContext& cx, const plan::Step& st) {
  const plan::ConvWork c = plan::conv_work(st, kBackend);
  const plan::TensorRef &x = st.in.at(0), &y = st.out.at(0);
  const DType t = x.dtype;
  std::vector<Operand> ops{cx.in(x), cx.in(st.in.at(1))};
  if (c.bias) ops.push_back(cx.in(st.in[2]));
  ops.push_back(cx.out(y));
  const size_t yk = ops.size() - 1;
  const Binds b = plan_binds(ops, false);
  std::vector<std::string> names{"N: i32", "C: i32", "cg: i32", "Cout: i32", "coutg: i32", "groups: i32"};
  for (const std::string& n : window_names(false)) names.push_back(n);
  std::string src = b.decls(names) + helpers_for(t);
  src += "const TRANSPOSED = " + std::string(c.transposed ? "true" : "false") + ";\n";
  src += "fn ldx(i: i32) -> f32 { return " + L().load(t, b.at(0, "u32(i)")) + "; }\n";
  src += "fn ldw(i: i32) -> f32 { return " + L().load(t, b.at(1, "u32(i)")) + "; }\n";
  src += "fn bias_of(co: i32) -> f32 { return " + (c.bias ? L().load(t, b.at(2, "u32(co)")) : std::string("0.0f")) + "; }\n";
  src += "fn sty(i: i32, v: f32) { " + b.at(yk, "u32(i)") + " = " + storef(t, "v") + "; }\n";
  src += c.transposed ? kConvTapTransposed : kConvTapConv;
  src += kConvCommon;
  if (c.gemm) src += "const TM = " + std::to_string(c.tm) + "i;\n";
  src += c.gemm ? kConvGemm : kConvDirect;
  const std::string name = std::string(c.transposed ? "conv_transpose" : "conv") + (c.gemm ? "_gemm" : "_direct");
  if (c.gemm) {
    const auto tiles = c.gemm_tiles();
    const uint32_t lim = std::min<uint32_t>(cx.info().limits.max_compute_workgroups_per_dimension, kMaxGroups1d);
    const auto cap = [&](int i) { return static_cast<uint32_t>(std::clamp<int64_t>(tiles[static_cast<size_t>(i)], 1, lim)); };
    cx.dispatch(Kernel{name, src}, ops, c.params(), false, cap(0), cap(1), cap(2));
  } else {
    cx.dispatch(Kernel{name, src}, ops, c.params(), false, cx.groups_1d(static_cast<uint64_t>(y.numel()), kWorkgroup));
  }
}

// ---- Pool ----

const char* kPool = R"(
fn ceil_div(a: i32, b: i32) -> i32 { return select(-((-a) / b), (a + b - 1i) / b, a >= 0i); }
// Taps kk in [lo, hi) of a window starting at `start` whose position start + kk * dil lies in
// [begin, end).
fn taps(start: i32, dil: i32, k: i32, begin: i32, end: i32) -> vec2<i32> {
  let lo = clamp(ceil_div(begin - start, dil), 0i, k);
  return vec2<i32>(lo, clamp(ceil_div(end - start, dil), lo, k));
}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let o12 = rlx_p.out1 * rlx_p.out2;
  let P = rlx_p.out0 * o12;
  let i12 = rlx_p.in1 * rlx_p.in2;
  let insz = rlx_p.in0 * i12;
  let total = u32(rlx_p.planes * P);
  for (var iu = gid.x; iu < total; iu += nwg.x * 256u) {
    let i = i32(iu);
    let plane = i / P;
    let p = i - plane * P;
    let oz = p / o12;
    let oyx = p - oz * o12;
    let oy = oyx / rlx_p.out2;
    let ox = oyx - oy * rlx_p.out2;
    let sz = oz * rlx_p.s0 - rlx_p.p0;
    let sy = oy * rlx_p.s1 - rlx_p.p1;
    let sx = ox * rlx_p.s2 - rlx_p.p2;
    let tz = taps(sz, rlx_p.d0, rlx_p.k0, 0i, rlx_p.in0);
    let ty = taps(sy, rlx_p.d1, rlx_p.k1, 0i, rlx_p.in1);
    let tx = taps(sx, rlx_p.d2, rlx_p.k2, 0i, rlx_p.in2);
    let base = plane * insz;
    var m = INIT;
    for (var kz = tz.x; kz < tz.y; kz++) {
      for (var ky = ty.x; ky < ty.y; ky++) {
        let row = base + ((sz + kz * rlx_p.d0) * rlx_p.in1 + sy + ky * rlx_p.d1) * rlx_p.in2 + sx;
        for (var kx = tx.x; kx < tx.y; kx++) {
          let v = ldx(row + kx * rlx_p.d2);
          STEP
        }
      }
    }
FINISH
  }
}
)";

void lower_pool(LowerContext& cx, const plan::Step& st) {
  const plan::PoolWork pw = plan::pool_work(st, kBackend);
  const plan::TensorRef &x = st.in.at(0), &y = st.out.at(0);
  const DType t = x.dtype;
  const std::vector<Operand> ops{cx.in(x), cx.out(y)};
  // An i64 max over a window with no tap is the CPU's lowest i64, which no 32-bit word holds.
  const bool flag = pw.is_max && t == DType::I64;
  const Binds b = plan_binds(ops, flag);
  std::vector<std::string> names{"planes: i32"};
  for (const std::string& n : window_names(true)) names.push_back(n);
  names.push_back("lowest: u32");
  std::string src = b.decls(names) + helpers_for(t);
  std::string type, init, step, finish;
  if (!pw.is_max) {
    type = "f32";
    init = "0.0f";
    step = "m += v;";
    std::string count = "(tz.y - tz.x) * (ty.y - ty.x) * (tx.y - tx.x)";
    if (pw.count_pad) {
      finish = "    let qz = taps(sz, rlx_p.d0, rlx_p.k0, -rlx_p.p0, rlx_p.in0 + rlx_p.e0);\n"
               "    let qy = taps(sy, rlx_p.d1, rlx_p.k1, -rlx_p.p1, rlx_p.in1 + rlx_p.e1);\n"
               "    let qx = taps(sx, rlx_p.d2, rlx_p.k2, -rlx_p.p2, rlx_p.in2 + rlx_p.e2);\n";
      count = "(qz.y - qz.x) * (qy.y - qy.x) * (qx.y - qx.x)";
    }
    finish += "    sty(i, m / f32(" + count + "));";
  } else if (is_float(t)) {
    type = "f32";
    init = "bitcast<f32>(rlx_p.lowest)";
    step = "if (v > m || (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u) { m = v; }";
    finish = "    sty(i, m);";
  } else {
    type = L().compute_type(t);
    init = type == "i32" ? "bitcast<i32>(rlx_p.lowest)" : "rlx_p.lowest";
    step = "m = max(m, v);";
    finish = flag ? "    if ((tz.y - tz.x) * (ty.y - ty.x) * (tx.y - tx.x) == 0i) { atomicMax(&rlx_err, " +
                        std::to_string(codegen::kErrNarrowOverflow) + "i); }\n    sty(i, m);"
                  : "    sty(i, m);";
  }
  src += "fn ldx(i: i32) -> " + type + " { return " + L().load(t, b.at(0, "u32(i)")) + "; }\n";
  src += "fn sty(i: i32, v: " + type + ") { " + b.at(1, "u32(i)") + " = " +
         (is_float(t) ? storef(t, "v") : L().store(t, "v")) + "; }\n";
  src += replace(kPool, {{"INIT", init}, {"STEP", step}, {"FINISH", finish}});
  std::vector<uint32_t> params = pw.params();
  uint32_t lowest = 0;
  if (pw.is_max) {
    if (is_float(t)) lowest = 0xff800000u;
    else if (t == DType::I8) lowest = static_cast<uint32_t>(-128);
    else if (t == DType::I16) lowest = static_cast<uint32_t>(-32768);
    else if (is_signed_int(t)) lowest = 0x80000000u;  // i32, i64 (held in 32-bit words)
  }
  params.push_back(lowest);
  cx.dispatch(Kernel{std::string("pool_") + (pw.is_max ? "max_" : "avg_") + dtype_name(t), src}, ops, params, flag,
              cx.groups_1d(static_cast<uint64_t>(y.numel()), kWorkgroup));
}

// ---- Resize ----

// The table: out dims (R words), x's element strides (R), then per axis out_dims entries of 3
// words (lo, hi, the f32 weight of hi). Linear follows the CPU's order: corners over the leading
// axes whose weight is not 0 and lo != hi (corner bit b set: the b-th such axis takes hi), each
// weighted by the product of (1 - w) or w in axis order, times the interpolation along the last.
const char* kResize = R"(
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  var toff: array<u32, R>;
  var acc_off = 2u * u32(R);
  for (var a = 0; a < R; a++) {
    toff[a] = acc_off;
    acc_off += tab(u32(a)) * 3u;
  }
  for (var i = gid.x; i < rlx_p.total; i += nwg.x * 256u) {
    var lo: array<u32, R>;
    var hi: array<u32, R>;
    var wt: array<f32, R>;
    var rem = i;
    for (var a = R - 1; a >= 0; a--) {
      let od = tab(u32(a));
      let q = rem / od;
      let o = rem - q * od;
      rem = q;
      let e = toff[a] + o * 3u;
      lo[a] = tab(e);
      hi[a] = tab(e + 1u);
      wt[a] = bitcast<f32>(tab(e + 2u));
    }
    var base = 0u;
    for (var a = 0; a < R - 1; a++) { base += lo[a] * tab(u32(R + a)); }
    let sl = tab(u32(2 * R - 1));
BODY
  }
}
)";

const char* kResizeNearest = R"(    y_w(i, x_w(base + lo[R - 1] * sl));)";

const char* kResizeLinear = R"(    var nt: array<i32, R>;
    var m = 0;
    for (var a = 0; a < R - 1; a++) {
      if (wt[a] != 0.0f && lo[a] != hi[a]) {
        nt[m] = a;
        m++;
      }
    }
    let wl = wt[R - 1];
    let l0 = lo[R - 1] * sl;
    let l1 = hi[R - 1] * sl;
    var acc = 0.0f;
    for (var c = 0; c < (1 << u32(m)); c++) {
      var cw = 1.0f;
      var off = base;
      for (var bit = 0; bit < m; bit++) {
        let a = nt[bit];
        if (((c >> u32(bit)) & 1) != 0) {
          cw *= wt[a];
          off += (hi[a] - lo[a]) * tab(u32(R + a));
        } else {
          cw *= 1.0f - wt[a];
        }
      }
      var v = ldx(off + l0);
      if (wl != 0.0f) { v = v * (1.0f - wl) + ldx(off + l1) * wl; }
      acc += cw * v;
    }
    y_w(i, STORE);)";

void lower_resize(LowerContext& cx, const plan::Step& st) {
  const plan::ResizeWork rw = plan::resize_work(st, false, kBackend);
  const plan::TensorRef &x = st.in.at(0), &y = st.out.at(0);
  const DType t = x.dtype;
  const int r = rw.rank;
  if (r < 1) throw Error(step_label(st) + ": WebGPU resize of a rank-0 tensor");
  // The dims and strides go first in the table (uniform arrays would need 16-byte strides).
  std::vector<uint32_t> words(rw.params.begin() + 1, rw.params.end());
  words.insert(words.end(), rw.table.begin(), rw.table.end());
  const std::vector<Operand> ops{cx.in(x), cx.table(words, step_label(st) + " resize tables"), cx.out(y)};
  const Binds b = plan_binds(ops, false);
  std::string src = b.decls({"total: u32"}) + helpers_for(t) + "const R = " + std::to_string(r) + ";\n";
  src += "fn tab(k: u32) -> u32 { return " + b.at(1, "k") + "; }\n";
  src += "fn x_w(i: u32) -> u32 { return " + b.at(0, "i") + "; }\n";
  if (rw.linear) src += "fn ldx(i: u32) -> f32 { return " + L().load(t, b.at(0, "i")) + "; }\n";
  src += "fn y_w(i: u32, v: u32) { " + b.at(2, "i") + " = v; }\n";
  src += codegen::replace_all(kResize, "BODY",
                              rw.linear ? codegen::replace_all(kResizeLinear, "STORE", storef(t, "acc")) : kResizeNearest);
  cx.dispatch(Kernel{rw.linear ? "resize_linear_" + std::string(dtype_name(t)) : "resize_nearest", src}, ops,
              {rw.params.at(0)}, false, cx.groups_1d(static_cast<uint64_t>(y.numel()), kWorkgroup));
}

// ---- Im2Col ----

const char* kIm2Col = R"(
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let P = rlx_p.oh * rlx_p.ow;
  let ks = rlx_p.kh * rlx_p.kw;
  for (var iu = gid.x; iu < u32(rlx_p.total); iu += nwg.x * 256u) {
    let i = i32(iu);
    let r = i / P;
    let p = i - r * P;
    let plane = r / ks;
    let kyx = r - plane * ks;
    let ky = kyx / rlx_p.kw;
    let kx = kyx - ky * rlx_p.kw;
    let oy = p / rlx_p.ow;
    let ox = p - oy * rlx_p.ow;
    let iy = oy * rlx_p.s0 - rlx_p.p0 + ky * rlx_p.d0;
    let ix = ox * rlx_p.s1 - rlx_p.p1 + kx * rlx_p.d1;
    var v = 0u;
    if (u32(iy) < u32(rlx_p.H) && u32(ix) < u32(rlx_p.W)) { v = X; }
    Y = v;
  }
}
)";

void lower_im2col(LowerContext& cx, const plan::Step& st) {
  const plan::Im2ColWork iw = plan::im2col_work(st, kBackend);
  const std::vector<Operand> ops{cx.in(st.in.at(0)), cx.out(st.out.at(0))};
  const Binds b = plan_binds(ops, false);
  std::vector<std::string> names;
  for (const char* n : {"total", "H", "W", "oh", "ow", "kh", "kw", "s0", "s1", "p0", "p1", "d0", "d1"})
    names.push_back(std::string(n) + ": i32");
  const std::string src =
      b.decls(names) + replace(kIm2Col, {{"X", b.at(0, "u32((plane * rlx_p.H + iy) * rlx_p.W + ix)")}, {"Y", b.at(1, "iu")}});
  cx.dispatch(Kernel{"im2col", src}, ops, iw.params, false,
              cx.groups_1d(static_cast<uint64_t>(st.out.at(0).numel()), kWorkgroup));
}

bool kind(std::string_view name) { return plan::spatial_claims_kind(name); }

bool node(const Graph& g, const Node& n, const DeviceInfo*, std::string* why) {
  return plan::spatial_claims_node(kBackend, g, n, why);
}

}  // namespace

const FamilyClaims kSpatialClaims{kind, node};

void lower_spatial(LowerContext& cx, const plan::Step& st) {
  if (std::holds_alternative<ops::Conv>(st.op) || std::holds_alternative<ops::ConvTranspose>(st.op)) return lower_conv(cx, st);
  if (std::holds_alternative<ops::Pool>(st.op)) return lower_pool(cx, st);
  if (std::holds_alternative<ops::Resize>(st.op)) return lower_resize(cx, st);
  if (std::holds_alternative<ops::Im2Col>(st.op)) return lower_im2col(cx, st);
  throw Error(step_label(st) + ": the WebGPU spatial family has no kernel for this op");
}

}  // namespace rlx::webgpu
