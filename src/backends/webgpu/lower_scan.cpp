// Cumsum on WebGPU: the chunked scan of plan::scan_work (shared with Vulkan) along x viewed as
// [outer, len, inner].
//
// A workgroup scans a tile of TI columns (consecutive inner positions; a uniform) x CH axis
// positions in workgroup memory: the tile is loaded coalesced, each of the S = 256 / TI lanes of
// a column sums SEG consecutive positions, the lane sums are scanned (Hillis-Steele) and each
// lane rescans its positions from its prefix. Longer axes take three passes: the chunk totals,
// an exclusive scan of the totals along the chunks (the same kernel over the accumulator
// words, recursively), then the chunks again with their carries.
//
// Accumulators, as the CPU's where WGSL allows: f32 as an unevaluated sum of two f32 (hi, lo:
// about 48 bits, renormalized after every addition, so hi is the f32 nearest the running sum, as
// the CPU's double sum rounds to f32; infinities and NaN pass through hi); f16 / bf16 in f32
// (rounded at the store); 8- to 32-bit integers in 32 bits, wrapping like the dtype; i64 in 64
// bits (two words), a result outside the i32 words i64 is held in being reported through the
// error flag. Reverse scans walk the axis from its end; exclusive ones store the sum before
// adding.
#include <string>
#include <vector>

#include "backends/webgpu/lower.h"
#include "codegen/language.h"
#include "plan/select_work.h"
#include "rlx/error.h"

namespace rlx::webgpu {
namespace {

constexpr std::string_view kBackend = "WebGPU";

const codegen::Language& L() { return codegen::wgsl_language(); }

const char* kScan = R"(
// mode: 1 exclusive, 2 reverse, 4 write the chunk totals to the carries (no output), 8 add the
// carries.
var<workgroup> tile: array<ACC, 256u * SEG>;
var<workgroup> part: array<ACC, 256>;
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let TI = rlx_p.ti;
  let S = 256u / TI;
  let CH = S * SEG;
  let c = lid % TI;
  let s = lid / TI;
  let excl = (rlx_p.mode & 1u) != 0u;
  let rev = (rlx_p.mode & 2u) != 0u;
  let ctiles = (rlx_p.inner + TI - 1u) / TI;
  let tiles = rlx_p.outer * rlx_p.nch * ctiles;
  for (var tile_id = wid.x; tile_id < tiles; tile_id += nwg.x) {
    let ct = tile_id % ctiles;
    let rest = tile_id / ctiles;
    let ch = rest % rlx_p.nch;
    let o = rest / rlx_p.nch;
    let col0 = ct * TI;
    for (var l = lid; l < CH * TI; l += 256u) {
      let a = l / TI;
      let col = col0 + l % TI;
      let t = ch * CH + a;
      var v = ZERO;
      if (t < rlx_p.len && col < rlx_p.inner) {
        let m = select(t, rlx_p.len - 1u - t, rev);
        v = ldx((o * rlx_p.len + m) * rlx_p.inner + col);
      }
      tile[l] = v;
    }
    workgroupBarrier();
    var sum = ZERO;
    for (var k = 0u; k < SEG; k++) { sum = acc_add(sum, tile[(s * SEG + k) * TI + c]); }
    part[lid] = sum;
    workgroupBarrier();
    for (var d = 1u; d < S; d = d << 1u) {
      var add = ZERO;
      if (s >= d) { add = part[lid - d * TI]; }
      workgroupBarrier();
      part[lid] = acc_add(part[lid], add);
      workgroupBarrier();
    }
    let colc = col0 + c;
    if ((rlx_p.mode & 4u) != 0u) {
      if (s == S - 1u && colc < rlx_p.inner) { stc((o * rlx_p.nch + ch) * rlx_p.inner + colc, part[lid]); }
    } else {
      var run = ZERO;
      if (s > 0u) { run = part[lid - TI]; }
      if ((rlx_p.mode & 8u) != 0u && colc < rlx_p.inner) { run = acc_add(ldc((o * rlx_p.nch + ch) * rlx_p.inner + colc), run); }
      for (var k = 0u; k < SEG; k++) {
        let idx = (s * SEG + k) * TI + c;
        let v = tile[idx];
        if (excl) { tile[idx] = run; }
        run = acc_add(run, v);
        if (!excl) { tile[idx] = run; }
      }
      workgroupBarrier();
      for (var l = lid; l < CH * TI; l += 256u) {
        let a = l / TI;
        let col = col0 + l % TI;
        let t = ch * CH + a;
        if (t < rlx_p.len && col < rlx_p.inner) {
          let m = select(t, rlx_p.len - 1u - t, rev);
          sty((o * rlx_p.len + m) * rlx_p.inner + col, tile[l]);
        }
      }
    }
    workgroupBarrier();
  }
}
)";

// The accumulator of a cumsum over dtype t: its WGSL type, zero, addition, and its words.
struct Acc {
  std::string type, zero, add;
  uint32_t words = 1;
  bool flag = false;  // the store reports through the error flag
};

const char* kAddF32x2 = R"(fn acc_add(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
  let s = a.x + b.x;
  if ((bitcast<u32>(s) & 0x7f800000u) == 0x7f800000u) { return vec2<f32>(s, 0.0f); }
  let bb = s - a.x;
  let e = (a.x - (s - bb)) + (b.x - bb) + a.y + b.y;
  let h = s + e;
  return vec2<f32>(h, e - (h - s));
}
)";
const char* kAdd64 = R"(fn acc_add(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let lo = a.x + b.x;
  return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}
)";

Acc acc_of(DType t) {
  if (t == DType::F32) return {"vec2<f32>", "vec2<f32>(0.0f, 0.0f)", kAddF32x2, 2, false};
  if (t == DType::F16 || t == DType::BF16)
    return {"f32", "0.0f", "fn acc_add(a: f32, b: f32) -> f32 { return a + b; }\n", 1, false};
  if (t == DType::I64) return {"vec2<u32>", "vec2<u32>(0u, 0u)", kAdd64, 2, true};
  return {"u32", "0u", "fn acc_add(a: u32, b: u32) -> u32 { return a + b; }\n", 1, false};
}

// `fn name(i: u32) -> ACC` reading element i of an accumulator buffer (operand k).
std::string acc_load(const Binds& b, size_t k, const Acc& a, const std::string& name) {
  if (a.words == 1) {
    const std::string w = b.at(k, "i");
    return "fn " + name + "(i: u32) -> " + a.type + " { return " + (a.type == "f32" ? "bitcast<f32>(" + w + ")" : w) + "; }\n";
  }
  const std::string conv = a.type == "vec2<f32>" ? "bitcast<vec2<f32>>" : "";
  return "fn " + name + "(i: u32) -> " + a.type + " { return " + conv + "(vec2<u32>(" + b.at(k, "2u * i") + ", " +
         b.at(k, "2u * i + 1u") + ")); }\n";
}
std::string acc_store(const Binds& b, size_t k, const Acc& a, const std::string& name) {
  if (a.words == 1)
    return "fn " + name + "(i: u32, v: " + a.type + ") { " + b.at(k, "i") + " = " +
           (a.type == "f32" ? "bitcast<u32>(v)" : "v") + "; }\n";
  const std::string conv = a.type == "vec2<f32>" ? "bitcast<vec2<u32>>(v)" : "v";
  return "fn " + name + "(i: u32, v: " + a.type + ") {\n  let w = " + conv + ";\n  " + b.at(k, "2u * i") + " = w.x;\n  " +
         b.at(k, "2u * i + 1u") + " = w.y;\n}\n";
}

// One scan of x (dtype xt, or accumulator words when x_acc) into y (likewise) along
// [outer, len, inner]; `totals` holds the carries.
void scan(LowerContext& cx, const std::string& what, const Operand& x, const Operand& y, DType t, bool on_acc,
          int64_t outer, int64_t len, int64_t inner, bool excl, bool rev) {
  const Acc a = acc_of(t);
  const plan::ScanWork w = plan::scan_work(outer, len, inner, 4 * a.words);
  const uint64_t tbytes = static_cast<uint64_t>(w.nch > 1 ? outer * w.nch * inner : 1) * 4 * a.words;
  const Operand totals = cx.scratch(tbytes, what + (w.nch > 1 ? " chunk totals" : " (no carries)"));
  const auto emit = [&](const Operand& xo, const Operand& yo, const Operand& co, uint32_t mode, int64_t nch) {
    const std::vector<Operand> ops{xo, yo, co};
    const Binds b = plan_binds(ops, a.flag && !on_acc);
    std::string src = b.decls({"outer: u32", "len: u32", "inner: u32", "nch: u32", "mode: u32", "ti: u32"});
    src += "const SEG = " + std::to_string(w.seg) + "u;\nalias ACC = " + a.type + ";\nconst ZERO = " + a.zero + ";\n" + a.add;
    if (on_acc) {
      src += acc_load(b, 0, a, "ldx") + acc_store(b, 1, a, "sty");
    } else {
      codegen::Helpers h;
      L().dtype_helpers(t, h);
      src += h.source();
      const std::string xw = b.at(0, "i"), yw = b.at(1, "i");
      if (t == DType::F32) {
        src += "fn ldx(i: u32) -> ACC { return vec2<f32>(bitcast<f32>(" + xw + "), 0.0f); }\n";
        src += "fn sty(i: u32, v: ACC) { " + yw + " = bitcast<u32>(v.x); }\n";
      } else if (is_float(t)) {
        src += "fn ldx(i: u32) -> ACC { return bitcast<f32>(" + xw + "); }\n";
        src += "fn sty(i: u32, v: ACC) { " + yw + " = " + L().store(t, L().round(t, "v")) + "; }\n";
      } else if (t == DType::I64) {
        src += "fn ldx(i: u32) -> ACC {\n  let v = " + xw + ";\n  return vec2<u32>(v, select(0u, 0xffffffffu, (v & 0x80000000u) != 0u));\n}\n";
        src += "fn sty(i: u32, v: ACC) {\n  if (v.y != select(0u, 0xffffffffu, (v.x & 0x80000000u) != 0u)) { atomicMax(&rlx_err, " +
               std::to_string(codegen::kErrNarrowOverflow) + "i); }\n  " + yw + " = v.x;\n}\n";
      } else {
        src += "fn ldx(i: u32) -> ACC { return " + xw + "; }\n";
        const std::string r = is_signed_int(t) ? L().store(t, L().round(t, "bitcast<i32>(v)")) : L().round(t, "v");
        src += "fn sty(i: u32, v: ACC) { " + yw + " = " + r + "; }\n";
      }
    }
    src += acc_load(b, 2, a, "ldc") + acc_store(b, 2, a, "stc");
    src += kScan;
    const std::string name = std::string("cumsum_") + (on_acc ? "carries_" : "") + dtype_name(t);
    cx.dispatch(Kernel{name, src}, ops,
                {static_cast<uint32_t>(outer), static_cast<uint32_t>(len), static_cast<uint32_t>(inner),
                 static_cast<uint32_t>(nch), mode, w.ti},
                a.flag && !on_acc, cx.groups_1d(static_cast<uint64_t>(w.tiles(nch)), 1));
  };
  const uint32_t mode = (excl ? 1u : 0u) | (rev ? 2u : 0u);
  // The carries operand is bound read-write in every pass (one kernel source writes and reads it).
  if (w.nch == 1) return emit(x, y, totals, mode, 1);
  emit(x, y, totals, mode | 4u, w.nch);
  // Scanning the totals in place: one binding (the same buffer) read and written.
  scan(cx, what, totals, totals, t, true, outer, w.nch, inner, true, false);
  emit(x, y, totals, mode | 8u, w.nch);
}

bool kind(std::string_view n) { return plan::scan_claims_kind(n); }

bool node(const Graph& g, const Node& n, const DeviceInfo* info, std::string* why) {
  plan::SelectDevice dev;
  dev.f64 = false;
  if (info) {
    dev.name = info->name;
    if (info->limits.max_compute_invocations_per_workgroup < plan::kSelectWorkgroup)
      return refuse(why, "the WebGPU cumsum kernel runs 256 invocations per workgroup; " + info->name + " allows " +
                             std::to_string(info->limits.max_compute_invocations_per_workgroup));
  }
  // f32 sums run in two f32 words (see above), rounding as the CPU's double sum does: measured on
  // CPU adapters (SwiftShader). On the H200 (NVIDIA's driver under Dawn) the low word is lost on
  // the way to the machine code and the sums come out as plain f32 accumulation (3e-5 off near
  // zero after cancellations in the shared parity case), so GPU adapters do not take f32 cumsum
  // until that is understood; `info` null (`rlx check` without a device) assumes they do.
  const bool exact_f32 = !info || info->adapter_type == "CPU";
  return plan::select_family_claims_node(kBackend, dev, g, n, why, exact_f32);
}

}  // namespace

const FamilyClaims kScanClaims{kind, node};

void lower_scan(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const auto* op = std::get_if<ops::Cumsum>(&st.op);
  if (!op) throw Error(what + ": the WebGPU scan family has no kernel for this op");
  const auto& g = std::get<plan::AxisGeom>(st.geom);
  const DType t = st.in.at(0).dtype;
  if (t == DType::Bool) throw Error(what + ": cumsum does not take bool input");
  if (g.outer * g.axis * g.inner == 0) return;
  plan::select_require_32bit(what, kBackend, 2 * st.in.at(0).numel(), "the input (two words per accumulator)");
  scan(cx, what, cx.in(st.in.at(0)), cx.out(st.out.at(0)), t, false, g.outer, g.axis, g.inner, op->exclusive, op->reverse);
}

}  // namespace rlx::webgpu
