// ScatterAdd on WebGPU: out = data, then the updates added in the CPU's order, without atomics,
// through plan::scatter_add_work (shared with Vulkan): index columns (o, j) never write the same
// element, so one invocation per column walks its indices in order (by column), or, for few
// columns on a short data axis, one per (column, axis position) walks the column and adds the
// updates aimed at it (by destination). Each addition is rounded to the dtype like the CPU's:
// f32 as is, f16 / bf16 rounded, 8- to 32-bit integers wrapping; i64 (held in i32 words) adds
// with a check, a sum leaving [-2^31, 2^31) being reported through the error flag. An index
// outside [-axis_size, axis_size) sets kErrScatterIndex and is skipped.
//
// CacheWrite: out = cache (a device copy unless the plan placed out over it), then one invocation
// per element of the new rows writes it at its row's position; of two rows at one position the
// later wins (an invocation skips its element when a later row names the same position), as on
// the CPU. A position outside [0, rows) sets kErrCachePosition and writes nothing.
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

const char* kScatter = R"(
// The data offset of index column (o, j): o unravels over the dims before the axis, j over
// those after.
fn column_base(o_in: u32, j_in: u32) -> u32 {
  var o = o_in;
  var j = j_in;
  var off = 0u;
  for (var d = i32(rlx_p.rank) - 1i; d > i32(rlx_p.axis); d--) {
    off += (j % dim(d)) * stride(d);
    j = j / dim(d);
  }
  for (var d = i32(rlx_p.axis) - 1i; d >= 0i; d--) {
    off += (o % dim(d)) * stride(d);
    o = o / dim(d);
  }
  return off;
}
// The axis position of index element `lin`, or 0xffffffff (and the error flag) out of range.
fn target_of(lin: u32) -> u32 {
  let ix = IDX(lin);
  let n = i32(rlx_p.axis_size);
  if (ix < -n || ix >= n) {
    atomicMax(&rlx_err, ERR_INDEX);
    return 0xffffffffu;
  }
  return u32(select(ix, ix + n, ix < 0i));
}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let astride = stride(i32(rlx_p.axis));
  let cols = rlx_p.outer * rlx_p.inner;
  let items = select(cols, cols * rlx_p.axis_size, rlx_p.by_dest != 0u);
  for (var it = gid.x; it < items; it += nwg.x * 256u) {
    let col = select(it, it % cols, rlx_p.by_dest != 0u);
    let o = col / rlx_p.inner;
    let j = col % rlx_p.inner;
    let base = column_base(o, j);
    if (rlx_p.by_dest == 0u) {
      for (var m = 0u; m < rlx_p.mid; m++) {
        let lin = (o * rlx_p.mid + m) * rlx_p.inner + j;
        let a = target_of(lin);
        if (a == 0xffffffffu) { continue; }
        let dst = base + a * astride;
        out_set(dst, add_w(out_get(dst), UPD(lin)));
      }
    } else {
      let a = it / cols;
      let dst = base + a * astride;
      var acc = out_get(dst);
      for (var m = 0u; m < rlx_p.mid; m++) {
        let lin = (o * rlx_p.mid + m) * rlx_p.inner + j;
        if (target_of(lin) == a) { acc = add_w(acc, UPD(lin)); }
      }
      out_set(dst, acc);
    }
  }
}
)";

const char* kCacheWrite = R"(
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var e = gid.x; e < rlx_p.n; e += nwg.x * 256u) {
    let c = e % rlx_p.inner;
    let t = e / rlx_p.inner;
    let i = t % rlx_p.s;
    let b = t / rlx_p.s;
    let pbase = select(0u, b * rlx_p.s, rlx_p.pb != 0u);  // (B, S) positions: the entry's row
    let p = POS(pbase + i);
    if (p < 0i || p >= i32(rlx_p.m)) {
      atomicMax(&rlx_err, ERR_POSITION);
      continue;
    }
    var later = false;
    for (var j = i + 1u; j < rlx_p.s && !later; j++) { later = POS(pbase + j) == p; }
    if (!later) { out_set((b * rlx_p.m + u32(p)) * rlx_p.inner + c, ROW(e)); }
  }
}
)";

// WGSL of words a + b of dtype t, rounded to t.
std::string add_fn(DType t) {
  std::string s = "fn add_w(a: u32, b: u32) -> u32 {\n";
  if (t == DType::F32) {
    s += "  return bitcast<u32>(bitcast<f32>(a) + bitcast<f32>(b));\n";
  } else if (is_float(t)) {
    s += "  return " + L().store(t, L().round(t, "bitcast<f32>(a) + bitcast<f32>(b)")) + ";\n";
  } else if (t == DType::I64) {
    s += "  let x = bitcast<i32>(a);\n  let y = bitcast<i32>(b);\n  let r = x + y;\n"
         "  if ((y > 0i && r < x) || (y < 0i && r > x)) { atomicMax(&rlx_err, " +
         std::to_string(codegen::kErrNarrowOverflow) + "i); }\n  return bitcast<u32>(r);\n";
  } else if (is_signed_int(t)) {
    s += "  return " + L().store(t, L().round(t, "bitcast<i32>(a + b)")) + ";\n";
  } else {
    s += "  return " + L().round(t, "(a + b)") + ";\n";
  }
  return s + "}\n";
}

bool kind(std::string_view n) { return plan::scatter_claims_kind(n); }

bool node(const Graph& g, const Node& n, const DeviceInfo*, std::string* why) {
  plan::SelectDevice dev;
  dev.f64 = false;
  return plan::select_family_claims_node(kBackend, dev, g, n, why);
}

}  // namespace

const FamilyClaims kScatterClaims{kind, node};

namespace {

void lower_cache_write(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const plan::TensorRef &cache = st.in.at(0), &rows = st.in.at(1), &pos = st.in.at(2);
  if (rows.dtype != cache.dtype || (pos.dtype != DType::I32 && pos.dtype != DType::I64))
    throw Error(what + ": WebGPU cache_write needs rows of the cache's dtype and i32 / i64 positions");
  if (cache.numel() >= (int64_t{1} << 31))
    throw Error(what + ": the WebGPU cache_write kernel indexes with 32 bits; the cache has 2^31 elements or more");
  const int64_t b = cache.dims.at(0), m = cache.dims.at(1), s = rows.dims.at(1);
  const int64_t inner = b * m > 0 ? cache.numel() / (b * m) : 0;
  const Operand out = cx.out(st.out.at(0)), src = cx.in(cache);
  const uint64_t bytes = static_cast<uint64_t>(cache.numel()) * 4;  // a word an element
  if (bytes > 0 && !(src.buffer == out.buffer && src.offset == out.offset)) cx.copy(out, src, bytes);
  const int64_t n = rows.numel();
  if (n == 0) return;
  const std::vector<Operand> ops{out, cx.in(rows), cx.in(pos)};
  const Binds bd = plan_binds(ops, true);
  std::string k = bd.decls({"s: u32", "m: u32", "inner: u32", "n: u32", "pb: u32"});
  // Elements are moved as their words; positions read as i32 words (i64 values are held in i32
  // words on WebGPU).
  k += "fn out_set(i: u32, v: u32) { " + bd.at(0, "i") + " = v; }\n";
  k += "fn ROW(i: u32) -> u32 { return " + bd.at(1, "i") + "; }\n";
  k += "fn POS(i: u32) -> i32 { return bitcast<i32>(" + bd.at(2, "i") + "); }\n";
  k += codegen::replace_all(kCacheWrite, "ERR_POSITION", std::to_string(codegen::kErrCachePosition) + "i");
  cx.dispatch(Kernel{"cache_write", k}, ops,
              {static_cast<uint32_t>(s), static_cast<uint32_t>(m), static_cast<uint32_t>(inner), static_cast<uint32_t>(n),
               pos.dims.size() == 2 ? 1u : 0u},
              true, cx.groups_1d(static_cast<uint64_t>(n), plan::kSelectWorkgroup));
}

}  // namespace

void lower_scatter(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  if (std::holds_alternative<ops::CacheWrite>(st.op)) {
    lower_cache_write(cx, st);
    return;
  }
  if (!std::holds_alternative<ops::ScatterAdd>(st.op)) throw Error(what + ": the WebGPU scatter family has no kernel for this op");
  const plan::TensorRef &data = st.in.at(0), &idx = st.in.at(1), &upd = st.in.at(2);
  const DType t = data.dtype, it = idx.dtype;
  if (t == DType::Bool || upd.dtype != t)
    throw Error(what + ": WebGPU scatter_add needs non-bool data and updates of one dtype");
  if (it != DType::I8 && it != DType::I16 && it != DType::I32 && it != DType::I64 && it != DType::U8)
    throw Error(what + ": WebGPU scatter_add takes i8/i16/i32/i64/u8 indices, not " + dtype_name(it));
  const plan::ScatterAddWork w = plan::scatter_add_work(st, kBackend);
  const Operand out = cx.out(st.out.at(0)), src = cx.in(data);
  const uint64_t bytes = static_cast<uint64_t>(data.numel()) * 4;
  if (bytes > 0 && !(src.buffer == out.buffer && src.offset == out.offset)) cx.copy(out, src, bytes);
  if (w.count == 0) return;
  const std::vector<Operand> ops{out, cx.in(idx), cx.in(upd)};
  const Binds b = plan_binds(ops, true);
  std::vector<std::string> names{"rank: u32", "axis: u32", "axis_size: u32", "mid: u32", "inner: u32", "outer: u32",
                                 "by_dest: u32"};
  for (const char* p : {"d", "s"})
    for (int d = 0; d < 8; ++d) names.push_back(p + std::to_string(d) + ": u32");
  std::string src_code = b.decls(names) + [&] {
    codegen::Helpers h;
    L().dtype_helpers(t, h);
    return h.source();
  }();
  src_code += "fn dim(d: i32) -> u32 {\n  var a = array<u32, 8>(rlx_p.d0, rlx_p.d1, rlx_p.d2, rlx_p.d3, rlx_p.d4, "
              "rlx_p.d5, rlx_p.d6, rlx_p.d7);\n  return a[d];\n}\n";
  src_code += "fn stride(d: i32) -> u32 {\n  var a = array<u32, 8>(rlx_p.s0, rlx_p.s1, rlx_p.s2, rlx_p.s3, rlx_p.s4, "
              "rlx_p.s5, rlx_p.s6, rlx_p.s7);\n  return a[d];\n}\n";
  src_code += "fn out_get(i: u32) -> u32 { return " + b.at(0, "i") + "; }\n";
  src_code += "fn out_set(i: u32, v: u32) { " + b.at(0, "i") + " = v; }\n";
  src_code += "fn IDX(i: u32) -> i32 { return " +
              (it == DType::U8 ? "i32(" + b.at(1, "i") + ")" : "bitcast<i32>(" + b.at(1, "i") + ")") + "; }\n";
  src_code += "fn UPD(i: u32) -> u32 { return " + b.at(2, "i") + "; }\n";
  src_code += add_fn(t);
  src_code += codegen::replace_all(kScatter, "ERR_INDEX", std::to_string(codegen::kErrScatterIndex) + "i");
  cx.dispatch(Kernel{std::string("scatter_add_") + dtype_name(t), src_code}, ops, w.params(), true,
              cx.groups_1d(static_cast<uint64_t>(w.items), plan::kSelectWorkgroup));
}

}  // namespace rlx::webgpu
