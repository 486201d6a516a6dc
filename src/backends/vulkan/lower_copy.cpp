// The Copy family: Reshape / StopGradient (copies when the plan did not make them views; nothing
// when in and out are the same bytes), Transpose / Expand / Reverse (CopyGeom: one strided kernel,
// or a tiled transpose through workgroup memory when the input is contiguous along another dim
// than the output), Narrow, Concat (buffer copies when rows are whole, else one kernel per up to
// 8 inputs), Gather (checked indices of any integer dtype), Pad (every mode through the plan's
// source table). Contiguous moves are vkCmdCopyBuffer; kernels move raw words of the element size.
#include <algorithm>
#include <cstring>

#include "backends/vulkan/kernels/copy.h"
#include "backends/vulkan/lower.h"
#include "codegen/language.h"
#include "plan/copy_work.h"
#include "rlx/error.h"

namespace rlx::vulkan {
namespace {

constexpr uint64_t kWorkgroup = 256;
constexpr size_t kConcatInputs = 8;  // inputs per concat kernel (bindings baked into the source)
constexpr int64_t kTileMin = 16;     // the tiled transpose's smallest tiled dims
// Workgroups of the tiled transpose over its batch (grid z): enough to fill a large GPU with the
// tiles of x and y; the kernel loops over the rest.
constexpr uint32_t kBatchGroups = 1024;

bool is_int_dtype(DType t) { return plan::copy_index_dtype(t); }

// Raw words of an element's size, and the extensions they need.
std::string elem_type(size_t bytes) {
  switch (bytes) {
    case 1: return "uint8_t";
    case 2: return "uint16_t";
    case 4: return "uint";
    case 8: return "uvec2";
  }
  throw Error("Vulkan: internal: no raw word type for " + std::to_string(bytes) + "-byte elements");
}
std::string elem_header(size_t bytes, std::vector<DType> more = {}) {
  if (bytes == 1) more.push_back(DType::U8);
  if (bytes == 2) more.push_back(DType::I16);
  return glsl_header(more);
}
std::string elem_name(size_t bytes) { return std::to_string(bytes * 8) + "bit"; }

std::string fill_template(std::string s, const std::vector<std::pair<std::string, std::string>>& subs) {
  for (const auto& [from, to] : subs) s = codegen::replace_all(s, from, to);
  return s;
}

uint32_t u32(int64_t v, const std::string& what) { return plan::index_u32(v, what, "Vulkan"); }
uint32_t i32_bits(int64_t v, const std::string& what) { return plan::index_i32_bits(v, what, "Vulkan"); }
// Every operand and result of the step below 2^31 elements.
void check_sizes(const plan::Step& st) {
  for (const auto& r : st.in) u32(r.numel(), step_label(st));
  for (const auto& r : st.out) u32(r.numel(), step_label(st));
}

// The operand `o` moved `elems` elements of `elem` bytes on, covering `count` elements.
Operand sub(Operand o, int64_t elems, int64_t count, size_t elem) {
  o.skip += static_cast<uint64_t>(elems) * elem;
  o.bytes = static_cast<uint64_t>(count) * elem;
  return o;
}

bool same_bytes(const Operand& a, const Operand& b) {
  return a.buffer == b.buffer && a.offset + a.skip == b.offset + b.skip;
}
bool overlap(const Operand& a, const Operand& b) {
  if (a.buffer != b.buffer) return false;
  const uint64_t a0 = a.offset + a.skip, b0 = b.offset + b.skip;
  return a0 < b0 + b.bytes && b0 < a0 + a.bytes;
}

// A contiguous move of `count` elements (vkCmdCopyBuffer; nothing when source and destination are
// the same bytes, as for a Reshape whose plan made it share its input's storage).
void copy_contiguous(LowerContext& cx, const std::string& what, const Operand& dst, const Operand& src, int64_t count,
                     size_t elem) {
  if (count <= 0) return;
  const Operand d = sub(dst, 0, count, elem), s = sub(src, 0, count, elem);
  if (same_bytes(d, s)) return;
  if (overlap(d, s)) throw Error(what + ": internal: a Vulkan copy between overlapping bytes");
  cx.copy(d, s, static_cast<uint64_t>(count) * elem);
}

// out (dense, `dims`) = in[in_offset + sum c_d * strides[d]].
void strided_copy(LowerContext& cx, const std::string& what, const Operand& dst, const Operand& src, size_t elem,
                  const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, int64_t in_offset) {
  if (dims.size() > 8) throw Error(what + ": the Vulkan copy kernel supports at most 8 (coalesced) dims");
  int64_t total = 1;
  for (int64_t d : dims) total *= d;
  if (total == 0) return;
  u32(total, what);
  // One dense run: a buffer copy.
  if (dims.size() == 1 && strides.at(0) == 1) {
    copy_contiguous(cx, what, dst, sub(src, in_offset, 0, elem), total, elem);
    return;
  }
  const size_t r = dims.size();
  // The tiled transpose: the output's last dim is not contiguous in the input but another is.
  size_t axis = r;
  if (r >= 2 && strides[r - 1] != 1 && strides[r - 1] != 0)
    for (size_t d = 0; d + 1 < r; ++d)
      if (strides[d] == 1 && dims[d] > 1) axis = d;
  const bool narrow_ok = elem > 2 || (elem == 2 ? cx.info().int16 : cx.info().int8);
  std::vector<uint32_t> push{dst.elem(elem), src.elem(elem)};
  // Tiles of 32x32 pay off when both dims fill a good part of one.
  const bool tiled = axis < r && narrow_ok && dims[axis] >= kTileMin && dims[r - 1] >= kTileMin;
  const int64_t batch = tiled ? total / (dims[axis] * dims[r - 1]) : 0;
  if (tiled) {
    push.insert(push.end(), {static_cast<uint32_t>(batch), static_cast<uint32_t>(r), static_cast<uint32_t>(axis),
                             i32_bits(in_offset, what)});
  } else {
    push.insert(push.end(), {static_cast<uint32_t>(total), static_cast<uint32_t>(r), i32_bits(in_offset, what)});
  }
  for (size_t d = 0; d < 8; ++d) push.push_back(d < r ? static_cast<uint32_t>(dims[d]) : 1u);
  for (size_t d = 0; d < 8; ++d) push.push_back(d < r ? i32_bits(strides[d], what) : 0u);
  const std::vector<std::pair<std::string, std::string>> subs{{"HEADER", elem_header(elem)}, {"ELEM", elem_type(elem)}};
  if (tiled) {
    const auto tiles = [](int64_t n) { return static_cast<uint64_t>((n + 31) / 32); };
    const DeviceInfo& di = cx.info();
    const auto cap = [](uint64_t n, uint32_t limit) { return static_cast<uint32_t>(std::clamp<uint64_t>(n, 1, limit)); };
    cx.dispatch(Kernel{"transpose_tiled_" + elem_name(elem), fill_template(ksrc::kTiledTranspose, subs)}, {dst, src},
                push, cap(tiles(dims[r - 1]), di.max_groups[0]), cap(tiles(dims[axis]), di.max_groups[1]),
                cap(static_cast<uint64_t>(batch), std::min(kBatchGroups, di.max_groups[2])));
    return;
  }
  cx.dispatch(Kernel{"strided_copy_" + elem_name(elem), fill_template(ksrc::kStridedCopy, subs)}, {dst, src}, push,
              cx.groups_1d(static_cast<uint64_t>(total), kWorkgroup));
}

void lower_concat(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const auto& g = std::get<plan::ConcatGeom>(st.geom);
  const plan::TensorRef& out = st.out.at(0);
  const size_t elem = dtype_size(out.storage());
  const int64_t width = g.out_axis * g.inner;
  const Operand dst = cx.out(out);
  // Inputs with elements, and their columns.
  std::vector<size_t> live;
  for (size_t i = 0; i < st.in.size(); ++i)
    if (g.in_axis[i] * g.inner > 0) live.push_back(i);
  if (live.size() == 1) {  // the only input with elements fills whole output rows
    copy_contiguous(cx, what, dst, cx.in(st.in[live[0]]), g.outer * width, elem);
    return;
  }
  if (g.outer == 1) {  // one row: each input is one contiguous run of the output
    for (size_t i : live)
      copy_contiguous(cx, what, sub(dst, g.col[i], g.in_axis[i] * g.inner, elem), cx.in(st.in[i]),
                      g.in_axis[i] * g.inner, elem);
    return;
  }
  for (size_t first = 0; first < live.size(); first += kConcatInputs) {
    const size_t n = std::min(kConcatInputs, live.size() - first);
    std::string decls, pick;
    std::vector<Operand> bind{dst};
    std::vector<uint32_t> push{dst.elem(elem)};
    for (size_t k = 0; k < n; ++k) {
      const std::string b = std::to_string(k + 1), ks = std::to_string(k);
      decls += "layout(std430, set = 0, binding = " + b + ") readonly buffer BIn" + ks + " { " + elem_type(elem) +
               " data[]; } in" + ks + ";\n";
      pick += std::string(k == 0 ? "    " : "    else ") + (k + 1 < n ? "if (k == " + ks + "u) " : "") + "v = in" + ks +
              ".data[j];\n";
      bind.push_back(cx.in(st.in[live[first + k]]));
      push.push_back(bind.back().elem(elem));
    }
    push.push_back(u32(g.outer, what));
    push.push_back(u32(width, what));
    for (size_t k = 0; k < n; ++k) push.push_back(static_cast<uint32_t>(g.col[live[first + k]]));
    const size_t last = live[first + n - 1];
    push.push_back(static_cast<uint32_t>(g.col[last] + g.in_axis[last] * g.inner));
    const int64_t span = static_cast<int64_t>(push.back()) - g.col[live[first]];
    const std::string src = fill_template(ksrc::kConcat, {{"HEADER", elem_header(elem)},
                                                          {"ELEM", elem_type(elem)},
                                                          {"IN_DECLS", decls},
                                                          {"PICK", pick},
                                                          {"COUNT", std::to_string(n) + "u"}});
    cx.dispatch(Kernel{"concat" + std::to_string(n) + "_" + elem_name(elem), src}, bind, push,
                cx.groups_1d(static_cast<uint64_t>(g.outer * span), kWorkgroup));
  }
}

void lower_gather(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const auto& g = std::get<plan::AxisGeom>(st.geom);
  const plan::TensorRef& idx = st.in.at(1);
  const plan::TensorRef& out = st.out.at(0);
  const DType it = idx.storage();
  if (!is_int_dtype(it)) throw Error(what + ": Vulkan gather needs integer indices, got " + dtype_name(it));
  const size_t elem = dtype_size(out.storage());
  const int64_t total = g.outer * g.out_axis * g.inner;
  if (total == 0) return;
  u32(total, what);
  std::string load;
  if (it == DType::I64) {
    load = "    int64_t k = idx.data[p.o_idx + j];\n    if (k < 0l) k += int64_t(p.axis);\n"
           "    ok = k >= 0l && k < int64_t(p.axis);\n    kk = uint(k);\n";
  } else if (it == DType::U8 || it == DType::U32) {
    load = "    kk = uint(idx.data[p.o_idx + j]);\n    ok = kk < p.axis;\n";
  } else {
    load = "    int k = int(idx.data[p.o_idx + j]);\n    if (k < 0) k += int(p.axis);\n"
           "    ok = k >= 0 && uint(k) < p.axis;\n    kk = uint(k);\n";
  }
  const std::string zero = elem == 8 ? "uvec2(0u)" : elem_type(elem) + "(0u)";
  const std::string src = fill_template(ksrc::kGather, {{"HEADER", elem_header(elem, {it})},
                                                        {"ELEM", elem_type(elem)},
                                                        {"IDX_DECL", glsl_buffer(1, "idx", it, true)},
                                                        {"IDX_LOAD", load},
                                                        {"ZERO", zero},
                                                        {"ERR", std::to_string(codegen::kErrGatherIndex)}});
  const Operand data = cx.in(st.in.at(0)), ix = cx.in(idx), dst = cx.out(out), err = cx.error_flag();
  cx.dispatch(Kernel{"gather_" + elem_name(elem) + "_" + dtype_name(it), src}, {data, ix, dst, err},
              {data.elem(elem), ix.elem(dtype_size(it)), dst.elem(elem), err.elem(4), static_cast<uint32_t>(total),
               u32(g.axis, what), u32(g.out_axis, what), u32(g.inner, what)},
              cx.groups_1d(static_cast<uint64_t>(total), kWorkgroup));
}


void lower_pad(LowerContext& cx, const plan::Step& st, const ops::Pad& op) {
  const std::string what = step_label(st);
  const auto& pg = std::get<plan::PadGeom>(st.geom);
  const plan::TensorRef& out = st.out.at(0);
  const size_t elem = dtype_size(out.storage());
  const int64_t total = out.numel();
  if (total == 0) return;
  u32(total, what);
  const std::vector<uint32_t> words = plan::pad_table_words(pg, what, "Vulkan");
  const uint64_t fill = op.mode == PadMode::Constant ? plan::pad_fill_bits(out.dtype, op.value) : 0;
  const std::string fill_expr =
      elem == 8 ? "uvec2(p.fill_lo, p.fill_hi)" : elem == 4 ? "p.fill_lo" : elem_type(elem) + "(p.fill_lo)";
  const std::string src =
      fill_template(ksrc::kPad, {{"HEADER", elem_header(elem)}, {"ELEM", elem_type(elem)}, {"FILL", fill_expr}});
  const Operand dst = cx.out(out), in = cx.in(st.in.at(0)), tab = cx.table(words, what + " pad source table");
  cx.dispatch(Kernel{"pad_" + elem_name(elem), src}, {dst, in, tab},
              {dst.elem(elem), in.elem(elem), tab.elem(4), static_cast<uint32_t>(total),
               static_cast<uint32_t>(fill & 0xffffffffu), static_cast<uint32_t>(fill >> 32)},
              cx.groups_1d(static_cast<uint64_t>(total), kWorkgroup));
}

bool kind(std::string_view name) { return plan::copy_claims_kind(name); }

bool node(const Graph& g, const Node& n, const DeviceInfo* info, std::string* why) {
  const DType t = n.outputs.at(0).dtype;
  const size_t elem = dtype_size(t);
  if (info && elem == 2 && !info->int16)
    return refuse(why, "the Vulkan copy kernels move 2-byte elements as uint16_t, which needs shaderInt16 (the device " +
                           info->name + " has none)");
  if (info && elem == 1 && !info->int8)
    return refuse(why, "the Vulkan copy kernels move 1-byte elements as uint8_t, which needs shaderInt8 (the device " +
                           info->name + " has none)");
  return plan::copy_claims_gather_indices(g, n, "Vulkan", why);
}

}  // namespace

const FamilyClaims kCopyClaims{kind, node};

void lower_copy(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  check_sizes(st);
  const plan::TensorRef& out = st.out.at(0);
  const size_t elem = dtype_size(out.storage());
  const plan::CopyWork w = plan::copy_work(st, "Vulkan");
  if (const auto* sw = std::get_if<plan::StridedCopyWork>(&w))
    return strided_copy(cx, what, cx.out(out), cx.in(st.in.at(0)), elem, sw->dims, sw->strides, sw->in_offset);
  if (const auto* cw = std::get_if<plan::ContiguousCopyWork>(&w)) {
    const Operand dst = cx.out(out), src = cx.in(st.in.at(0));
    return copy_contiguous(cx, what, dst, sub(src, cw->start, cw->count, elem), cw->count, elem);
  }
  if (std::holds_alternative<plan::ConcatCopyWork>(w)) return lower_concat(cx, st);
  if (std::holds_alternative<plan::GatherCopyWork>(w)) return lower_gather(cx, st);
  lower_pad(cx, st, *std::get<plan::PadCopyWork>(w).op);
}

}  // namespace rlx::vulkan
