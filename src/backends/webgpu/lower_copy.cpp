// The Copy family on WebGPU: Reshape / StopGradient (copies when the plan did not make them views;
// nothing when input and output are the same bytes), Transpose / Expand / Reverse (CopyGeom),
// Narrow, Concat, Gather (indices of any integer dtype, negative ones counting from the end, any
// other outside the axis reported through the error flag) and Pad (every mode through the plan's
// source table, uploaded once as a read-only table). Every element is one 32-bit word
// (codegen/lang_wgsl.cpp), so the kernels move words whatever the dtype. Contiguous moves are
// buffer copies; a transpose whose input is contiguous along another dim than the output's last
// goes through 32x32 tiles in workgroup memory; everything else is one strided kernel (up to 8
// dims, grid-stride loop).
#include <algorithm>
#include <cstring>

#include "backends/webgpu/lower.h"
#include "codegen/language.h"
#include "plan/copy_work.h"
#include "rlx/error.h"

namespace rlx::webgpu {
namespace {

constexpr uint64_t kWorkgroup = 256;
constexpr size_t kMaxDims = 8;

bool is_int_dtype(DType t) { return plan::copy_index_dtype(t); }

uint32_t u32(int64_t v, const std::string& what) { return plan::index_u32(v, what, "WebGPU"); }
uint32_t i32_bits(int64_t v, const std::string& what) { return plan::index_i32_bits(v, what, "WebGPU"); }

// The operand `o` moved `elems` words on, covering `count` words.
Operand sub(Operand o, int64_t elems, int64_t count) {
  o.offset += static_cast<uint64_t>(elems) * 4;
  o.bytes = static_cast<uint64_t>(count) * 4;
  return o;
}
bool overlap(const Operand& a, const Operand& b) {
  return a.buffer == b.buffer && a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
}

// A contiguous move of `count` words (a buffer copy; nothing when source and destination are the
// same bytes, as for a Reshape whose plan made it share its input's storage).
void copy_contiguous(LowerContext& cx, const std::string& what, const Operand& dst, const Operand& src, int64_t count) {
  if (count <= 0) return;
  const Operand d = sub(dst, 0, count), s = sub(src, 0, count);
  if (d.buffer == s.buffer && d.offset == s.offset) return;
  if (overlap(d, s)) throw Error(what + ": internal: a WebGPU copy between overlapping bytes");
  cx.copy(d, s, static_cast<uint64_t>(count) * 4);
}

// dst[sum c_d * out_strides[d]] = src[in_offset + sum c_d * in_strides[d]] over `dims` (row-major,
// rank <= 8; an input stride may be 0 (broadcast) or negative (reverse)). One pipeline serves
// every shape: the dims and strides are uniform parameters.
const char* kStridedBody = R"(
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  var dims = array<u32, 8>(rlx_p.d0, rlx_p.d1, rlx_p.d2, rlx_p.d3, rlx_p.d4, rlx_p.d5, rlx_p.d6, rlx_p.d7);
  var istr = array<i32, 8>(rlx_p.s0, rlx_p.s1, rlx_p.s2, rlx_p.s3, rlx_p.s4, rlx_p.s5, rlx_p.s6, rlx_p.s7);
  var ostr = array<u32, 8>(rlx_p.t0, rlx_p.t1, rlx_p.t2, rlx_p.t3, rlx_p.t4, rlx_p.t5, rlx_p.t6, rlx_p.t7);
  let rank = i32(rlx_p.rank);
  for (var i = gid.x; i < rlx_p.total; i += nwg.x * 256u) {
    var t = i;
    var src = rlx_p.in_offset;
    var dst = 0u;
    for (var d = rank - 1; d >= 0; d--) {
      let n = dims[d];
      let c = t % n;
      t = t / n;
      src += i32(c) * istr[d];
      dst += c * ostr[d];
    }
    OUT = IN;
  }
}
)";

// A batched 2-D transpose through workgroup memory: the output dims are [.., A (dim `axis`), ..,
// L (the last)] and the input is contiguous along A (stride 1) while the output is along L, so
// each 32x32 tile is read along A and written along L, both coalesced. The other dims form the
// batch walked by z (and every grid dimension loops). Dims and strides as in kStridedBody (output
// dense).
const char* kTiledBody = R"(
var<workgroup> tile: array<u32, 1056>;  // 32 x 33
@compute @workgroup_size(32, 8)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  var dims = array<u32, 8>(rlx_p.d0, rlx_p.d1, rlx_p.d2, rlx_p.d3, rlx_p.d4, rlx_p.d5, rlx_p.d6, rlx_p.d7);
  var istr = array<i32, 8>(rlx_p.s0, rlx_p.s1, rlx_p.s2, rlx_p.s3, rlx_p.s4, rlx_p.s5, rlx_p.s6, rlx_p.s7);
  let rank = rlx_p.rank;
  let a = rlx_p.axis;
  let A = dims[a];
  let L = dims[rank - 1u];
  let sL = istr[rank - 1u];
  var oA = 1u;  // the output's stride of dim a
  for (var d = a + 1u; d < rank; d++) { oA *= dims[d]; }
  let tilesL = (L + 31u) / 32u;
  let tilesA = (A + 31u) / 32u;
  let tx = lid.x;
  let ty = lid.y;
  for (var bt = wid.z; bt < rlx_p.batch; bt += nwg.z) {
    // The batch index -> the offsets of the other dims in the input and the output.
    var t = bt;
    var ostride = 1u;
    var obase = 0u;
    var ibase = rlx_p.in_offset;
    for (var d = i32(rank) - 1; d >= 0; d--) {
      let du = u32(d);
      let n = dims[du];
      if (du != a && du != rank - 1u) {
        let c = t % n;
        t = t / n;
        ibase += i32(c) * istr[du];
        obase += c * ostride;
      }
      ostride *= n;
    }
    for (var ta = wid.y; ta < tilesA; ta += nwg.y) {
      for (var tl = wid.x; tl < tilesL; tl += nwg.x) {
        let a0 = ta * 32u;
        let l0 = tl * 32u;
        for (var j = ty; j < 32u; j += 8u) {
          let ia = a0 + tx;
          let il = l0 + j;
          if (ia < A && il < L) { tile[j * 33u + tx] = IN; }
        }
        workgroupBarrier();
        for (var j = ty; j < 32u; j += 8u) {
          let ia = a0 + j;
          let il = l0 + tx;
          if (ia < A && il < L) { OUT = tile[tx * 33u + j]; }
        }
        workgroupBarrier();
      }
    }
  }
}
)";

// Tiles of 32x32 pay off when both tiled dims fill a good part of one.
constexpr int64_t kTileMin = 16;
// Workgroups of the tiled transpose over its batch (grid z); the kernel loops over the rest.
constexpr uint32_t kBatchGroups = 1024;

void strided_copy(LowerContext& cx, const std::string& what, const Operand& dst, const Operand& src,
                  const std::vector<int64_t>& dims, const std::vector<int64_t>& in_strides, int64_t in_offset,
                  std::vector<int64_t> out_strides = {}) {
  if (dims.size() > kMaxDims || dims.empty())
    throw Error(what + ": internal: the WebGPU copy kernel takes 1 to 8 (coalesced) dims, got " +
                std::to_string(dims.size()));
  int64_t total = 1;
  for (int64_t d : dims) total *= d;
  if (total == 0) return;
  u32(total, what);
  const bool dense_out = out_strides.empty();
  if (dense_out) {
    out_strides.assign(dims.size(), 1);
    for (size_t d = dims.size() - 1; d > 0; --d) out_strides[d - 1] = out_strides[d] * dims[d];
  }
  // One dense run on both sides: a buffer copy.
  if (dims.size() == 1 && in_strides.at(0) == 1 && out_strides[0] == 1) {
    copy_contiguous(cx, what, dst, sub(src, in_offset, 0), total);
    return;
  }
  const size_t r = dims.size();
  // The tiled transpose: a dense output whose last dim is strided in the input while another dim
  // is contiguous there.
  size_t axis = r;
  if (dense_out && r >= 2 && in_strides[r - 1] != 1 && in_strides[r - 1] != 0)
    for (size_t d = 0; d + 1 < r; ++d)
      if (in_strides[d] == 1 && dims[d] > 1) axis = d;
  if (axis < r && dims[axis] >= kTileMin && dims[r - 1] >= kTileMin) {
    const int64_t batch = total / (dims[axis] * dims[r - 1]);
    std::vector<uint32_t> params{static_cast<uint32_t>(batch), static_cast<uint32_t>(r), static_cast<uint32_t>(axis),
                                 i32_bits(in_offset, what)};
    for (size_t d = 0; d < kMaxDims; ++d) params.push_back(d < r ? static_cast<uint32_t>(dims[d]) : 1u);
    for (size_t d = 0; d < kMaxDims; ++d) params.push_back(d < r ? i32_bits(in_strides[d], what) : 0u);
    std::vector<std::string> names{"batch: u32", "rank: u32", "axis: u32", "in_offset: i32"};
    for (const char* p : {"d", "s"})
      for (size_t d = 0; d < kMaxDims; ++d) names.push_back(p + std::to_string(d) + (p[0] == 's' ? ": i32" : ": u32"));
    const std::vector<Operand> ops{dst, src};
    const Binds b = plan_binds(ops, false);
    std::string body = codegen::replace_all(kTiledBody, "OUT", b.at(0, "obase + ia * oA + il"));
    body = codegen::replace_all(body, "IN", b.at(1, "u32(ibase + i32(ia) + i32(il) * sL)"));
    const uint32_t lim = std::min<uint32_t>(cx.info().limits.max_compute_workgroups_per_dimension, kMaxGroups1d);
    const auto cap = [&](uint64_t n, uint32_t most) { return static_cast<uint32_t>(std::clamp<uint64_t>(n, 1, most)); };
    cx.dispatch(Kernel{"transpose_tiled", b.decls(names) + body}, ops, params, false,
                cap(static_cast<uint64_t>((dims[r - 1] + 31) / 32), lim),
                cap(static_cast<uint64_t>((dims[axis] + 31) / 32), lim),
                cap(static_cast<uint64_t>(batch), std::min(kBatchGroups, lim)));
    return;
  }
  std::vector<uint32_t> params{static_cast<uint32_t>(total), static_cast<uint32_t>(r), i32_bits(in_offset, what)};
  for (size_t d = 0; d < kMaxDims; ++d) params.push_back(d < r ? static_cast<uint32_t>(dims[d]) : 1u);
  for (size_t d = 0; d < kMaxDims; ++d) params.push_back(d < r ? i32_bits(in_strides[d], what) : 0u);
  for (size_t d = 0; d < kMaxDims; ++d) params.push_back(d < r ? u32(out_strides[d], what) : 0u);
  std::vector<std::string> names{"total: u32", "rank: u32", "in_offset: i32"};
  for (const char* p : {"d", "s", "t"})
    for (size_t d = 0; d < kMaxDims; ++d)
      names.push_back(p + std::to_string(d) + (p[0] == 's' ? ": i32" : ": u32"));
  const std::vector<Operand> ops{dst, src};
  const Binds b = plan_binds(ops, false);
  std::string body = codegen::replace_all(kStridedBody, "OUT", b.at(0, "dst"));
  body = codegen::replace_all(body, "IN", b.at(1, "u32(src)"));
  cx.dispatch(Kernel{"strided_copy", b.decls(names) + body}, ops, params, false,
              cx.groups_1d(static_cast<uint64_t>(total), kWorkgroup));
}

void lower_concat(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const auto& g = std::get<plan::ConcatGeom>(st.geom);
  const int64_t width = g.out_axis * g.inner;
  const Operand dst = cx.out(st.out.at(0));
  for (size_t i = 0; i < st.in.size(); ++i) {
    const int64_t w = g.in_axis[i] * g.inner;  // this input's row width
    if (w == 0 || g.outer == 0) continue;
    const Operand d = sub(dst, g.col[i], (g.outer - 1) * width + w), s = cx.in(st.in[i]);
    if (g.outer == 1 || w == width) {  // one contiguous run of the output
      copy_contiguous(cx, what, d, s, g.outer * w);
      continue;
    }
    strided_copy(cx, what, d, s, {g.outer, w}, {w, 1}, 0, {width, 1});
  }
}

// out[o, j, i] = data[o, idx[j], i] over [outer, nidx, inner]; a negative index counts from the
// end; one outside [-axis, axis) raises the gather error and writes a zero word.
const char* kGatherBody = R"(
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let axis = rlx_p.axis;
  for (var i = gid.x; i < rlx_p.total; i += nwg.x * 256u) {
    let inner_i = i % rlx_p.inner;
    let t = i / rlx_p.inner;
    let j = t % rlx_p.nidx;
    let o = t / rlx_p.nidx;
    var ok: bool;
    var kk: u32;
IDX_LOAD
    if (!ok) {
      atomicMax(&rlx_err, ERR);
      OUT = 0u;
      continue;
    }
    OUT = DATA;
  }
}
)";

void lower_gather(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const auto& g = std::get<plan::AxisGeom>(st.geom);
  const plan::TensorRef& idx = st.in.at(1);
  const DType it = idx.dtype;
  if (!is_int_dtype(it)) throw Error(what + ": WebGPU gather needs integer indices, got " + dtype_name(it));
  const int64_t total = g.outer * g.out_axis * g.inner;
  if (total == 0) return;
  u32(total, what);
  const Operand data = cx.in(st.in.at(0)), ix = cx.in(idx), dst = cx.out(st.out.at(0));
  const std::vector<Operand> ops{dst, data, ix};
  const Binds b = plan_binds(ops, true);
  std::string load;
  if (is_signed_int(it)) {  // i8 / i16 / i32 / i64: sign-extended i32 words
    load = "    var k = bitcast<i32>(" + b.at(2, "j") + ");\n    if (k < 0i) { k += i32(axis); }\n" +
           "    ok = k >= 0i && u32(k) < axis;\n    kk = u32(k);\n";
  } else {  // u8 / u32
    load = "    kk = " + b.at(2, "j") + ";\n    ok = kk < axis;\n";
  }
  std::string body = codegen::replace_all(kGatherBody, "IDX_LOAD", load);
  body = codegen::replace_all(body, "ERR", std::to_string(codegen::kErrGatherIndex) + "i");
  body = codegen::replace_all(body, "OUT", b.at(0, "i"));
  const std::string at = "(o * axis + kk) * rlx_p.inner + inner_i";
  body = codegen::replace_all(body, "DATA", data.packed ? "packed_word(" + at + ")" : b.at(1, at));
  std::string fns;
  if (data.packed) {  // an embedding table held as 16-bit values (packed_weights.h): widened to its f32 word
    fns = "fn packed_word(e: u32) -> u32 {\n  let i = rlx_p.o1 + e;\n  let h = (rlx_b" +
          std::to_string(b.binding_of[1]) + "[i >> 1u] >> ((i & 1u) << 4u)) & 0xffffu;\n";
    if (st.in.at(0).dtype == DType::BF16) {
      fns += "  return h << 16u;\n}\n";
    } else {  // f16 bits to the f32 of the same value, subnormals and NaN payloads included
      fns += "  let s = (h & 0x8000u) << 16u;\n  let e5 = (h >> 10u) & 31u;\n  let m = h & 0x3ffu;\n";
      fns += "  if (e5 == 31u) { return s | 0x7f800000u | (m << 13u); }\n";
      fns += "  if (e5 == 0u) { return s | bitcast<u32>(f32(m) * 5.9604644775390625e-8f); }\n";
      fns += "  return s | ((e5 + 112u) << 23u) | (m << 13u);\n}\n";
    }
  }
  cx.dispatch(Kernel{std::string("gather_") + (is_signed_int(it) ? "signed" : "unsigned") + (data.packed ? "_packed" : ""),
                     b.decls({"total: u32", "axis: u32", "nidx: u32", "inner: u32"}) + fns + body, data.packed},
              ops, {static_cast<uint32_t>(total), u32(g.axis, what), u32(g.out_axis, what), u32(g.inner, what)}, true,
              cx.groups_1d(static_cast<uint64_t>(total), kWorkgroup));
}

// Pad: out[o] = in[sum_d source[off_d + o_d] * in_strides[d]], or the fill word where an axis'
// source index is -1. The table holds: rank, then out_dims[rank], in_strides[rank], source
// offsets[rank], then the per-axis source indices (i32 bits).
const char* kPadBody = R"(
fn tab(k: u32) -> i32 { return bitcast<i32>(TAB); }
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let rank = tab(0u);
  let r = u32(rank);
  for (var i = gid.x; i < rlx_p.total; i += nwg.x * 256u) {
    var rem = i;
    var off = 0i;
    var outside = false;
    for (var d = rank - 1; d >= 0; d--) {
      let du = u32(d);
      let n = u32(tab(1u + du));
      let o = rem % n;
      rem = rem / n;
      let j = tab(1u + 3u * r + u32(tab(1u + 2u * r + du)) + o);
      if (j < 0i) { outside = true; } else { off += j * tab(1u + r + du); }
    }
    if (outside) { OUT = rlx_p.fill; } else { OUT = IN; }
  }
}
)";

// The word the constant `v` of a Pad of dtype t is held as (one 32-bit word per element, as
// codegen/lang_wgsl.cpp stores it), converted as the CPU converts it.
uint32_t pad_fill_word(DType t, double v) {
  const uint64_t bits = plan::pad_fill_bits(t, v);
  float f = 0;
  switch (t) {
    case DType::F32: return static_cast<uint32_t>(bits);
    case DType::F16: f = f16_bits_to_f32(static_cast<uint16_t>(bits)); break;
    case DType::BF16: f = bf16_bits_to_f32(static_cast<uint16_t>(bits)); break;
    case DType::I8: return static_cast<uint32_t>(static_cast<int32_t>(static_cast<int8_t>(bits)));
    case DType::I16: return static_cast<uint32_t>(static_cast<int32_t>(static_cast<int16_t>(bits)));
    default: return static_cast<uint32_t>(bits);  // i32, i64 (checked to fit), u8, u32, bool
  }
  uint32_t u = 0;
  std::memcpy(&u, &f, 4);
  return u;
}

// Whether Pad's constant, stored as an i64, fits the 32-bit word WGSL holds i64 in.
bool i64_fill_fits(double v) {
  const auto b = static_cast<int64_t>(plan::pad_fill_bits(DType::I64, v));
  return b >= INT32_MIN && b <= INT32_MAX;
}

void lower_pad(LowerContext& cx, const plan::Step& st, const ops::Pad& op) {
  const std::string what = step_label(st);
  const auto& pg = std::get<plan::PadGeom>(st.geom);
  const plan::TensorRef& out = st.out.at(0);
  const int64_t total = out.numel();
  if (total == 0) return;
  u32(total, what);
  if (op.mode == PadMode::Constant && out.dtype == DType::I64 && !i64_fill_fits(op.value))
    throw Error(what + ": the WebGPU backend holds i64 values in 32-bit words; the pad constant " +
                std::to_string(op.value) + " does not fit");
  const Operand dst = cx.out(out);
  if (pg.out_dims.empty()) {  // rank 0: the one element
    copy_contiguous(cx, what, dst, cx.in(st.in.at(0)), 1);
    return;
  }
  const std::vector<uint32_t> words = plan::pad_table_words(pg, what, "WebGPU");
  const uint32_t fill = op.mode == PadMode::Constant ? pad_fill_word(out.dtype, op.value) : 0;
  const Operand in = cx.in(st.in.at(0)), tab = cx.table(words, what + " pad source table");
  const std::vector<Operand> ops{dst, in, tab};
  const Binds b = plan_binds(ops, false);
  std::string body = codegen::replace_all(kPadBody, "TAB", b.at(2, "k"));
  body = codegen::replace_all(body, "OUT", b.at(0, "i"));
  body = codegen::replace_all(body, "IN", b.at(1, "u32(off)"));
  cx.dispatch(Kernel{"pad", b.decls({"total: u32", "fill: u32"}) + body}, ops, {static_cast<uint32_t>(total), fill},
              false, cx.groups_1d(static_cast<uint64_t>(total), kWorkgroup));
}

bool kind(std::string_view name) { return plan::copy_claims_kind(name); }

bool node(const Graph& g, const Node& n, const DeviceInfo*, std::string* why) {
  if (!plan::copy_claims_gather_indices(g, n, "WebGPU", why)) return false;
  if (const auto* p = std::get_if<ops::Pad>(&n.op))
    if (p->mode == PadMode::Constant && n.outputs.at(0).dtype == DType::I64 && !i64_fill_fits(p->value))
      return refuse(why, "the WebGPU backend holds i64 values in 32-bit words; the pad constant " +
                             std::to_string(p->value) + " does not fit");
  for (const Shape& s : n.outputs)
    if (s.is_static() && s.numel() > INT32_MAX)
      return refuse(why, "the WebGPU copy kernels index with 32 bits; this result has " + std::to_string(s.numel()) +
                             " elements");
  return true;
}

}  // namespace

const FamilyClaims kCopyClaims{kind, node};

void lower_copy(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  for (const auto& r : st.in) u32(r.numel(), what);
  for (const auto& r : st.out) u32(r.numel(), what);
  const plan::TensorRef& out = st.out.at(0);
  const plan::CopyWork w = plan::copy_work(st, "WebGPU");
  if (const auto* sw = std::get_if<plan::StridedCopyWork>(&w))
    return strided_copy(cx, what, cx.out(out), cx.in(st.in.at(0)), sw->dims, sw->strides, sw->in_offset);
  if (const auto* cw = std::get_if<plan::ContiguousCopyWork>(&w)) {
    const Operand dst = cx.out(out), src = cx.in(st.in.at(0));
    return copy_contiguous(cx, what, dst, sub(src, cw->start, cw->count), cw->count);
  }
  if (std::holds_alternative<plan::ConcatCopyWork>(w)) return lower_concat(cx, st);
  if (std::holds_alternative<plan::GatherCopyWork>(w)) return lower_gather(cx, st);
  lower_pad(cx, st, *std::get<plan::PadCopyWork>(w).op);
}

}  // namespace rlx::webgpu
