// Cumsum on Vulkan: a chunked scan along the axis of x viewed as [outer, len, inner].
//
// A workgroup scans a tile of TI columns (consecutive inner positions) x CH axis positions in
// shared memory: the tile is loaded coalesced, each of the S = 256 / TI lanes of a column sums
// SEG consecutive positions, the lane sums are scanned (Hillis-Steele), and each lane rescans its
// positions from its prefix. Axes longer than CH take three passes: the chunk totals, an
// exclusive scan of the totals along the chunks (this same scan, recursively), then the chunks
// again with their carries. Accumulators as the CPU's: f32 and f64 in double, f16 / bf16 in
// f32, integers in 32 bits (64 for i64) wrapping like the dtype; reverse scans walk the axis
// from its end, exclusive ones store the sum before adding.
#include <algorithm>

#include "backends/vulkan/lower_select.h"
#include "rlx/error.h"

namespace rlx::vulkan {
namespace {

constexpr const char* kScan = R"GLSL(
layout(push_constant) uniform P { uint ox; uint oy; uint oc; uint outer; uint len; uint inner; uint nch; uint mode; } pc;
// mode: 1 exclusive, 2 reverse, 4 write the chunk totals to cbuf (no output), 8 add cbuf's carries
#define S (256u / TI)
#define CH (S * SEG)
shared ACC tile[CH * TI];
shared ACC part[256];
void main() {
  const uint lid = gl_LocalInvocationID.x, c = lid % TI, s = lid / TI;
  const bool excl = (pc.mode & 1u) != 0u, rev = (pc.mode & 2u) != 0u;
  const uint ctiles = (pc.inner + TI - 1u) / TI;
  const uint tiles = pc.outer * pc.nch * ctiles;
  for (uint tile_id = gl_WorkGroupID.x; tile_id < tiles; tile_id += gl_NumWorkGroups.x) {
    const uint ct = tile_id % ctiles, rest = tile_id / ctiles, ch = rest % pc.nch, o = rest / pc.nch;
    const uint col0 = ct * TI;
    for (uint l = lid; l < CH * TI; l += 256u) {
      const uint a = l / TI, col = col0 + l % TI, t = ch * CH + a;
      ACC v = ACC(0);
      if (t < pc.len && col < pc.inner) {
        const uint m = rev ? pc.len - 1u - t : t;
        v = TOACC(pc.ox + (o * pc.len + m) * pc.inner + col);
      }
      tile[l] = v;
    }
    barrier();
    ACC sum = ACC(0);
    for (uint k = 0u; k < SEG; ++k) sum += tile[(s * SEG + k) * TI + c];
    part[lid] = sum;
    barrier();
    for (uint d = 1u; d < S; d <<= 1) {
      const ACC add = s >= d ? part[lid - d * TI] : ACC(0);
      barrier();
      part[lid] += add;
      barrier();
    }
    const uint colc = col0 + c;
    if ((pc.mode & 4u) != 0u) {
      if (s == S - 1u && colc < pc.inner) cbuf.data[pc.oc + (o * pc.nch + ch) * pc.inner + colc] = part[lid];
    } else {
      ACC run = s > 0u ? part[lid - TI] : ACC(0);
      if ((pc.mode & 8u) != 0u && colc < pc.inner) run = cbuf.data[pc.oc + (o * pc.nch + ch) * pc.inner + colc] + run;
      for (uint k = 0u; k < SEG; ++k) {
        const uint idx = (s * SEG + k) * TI + c;
        const ACC v = tile[idx];
        if (excl) tile[idx] = run;
        run += v;
        if (!excl) tile[idx] = run;
      }
      barrier();
      for (uint l = lid; l < CH * TI; l += 256u) {
        const uint a = l / TI, col = col0 + l % TI, t = ch * CH + a;
        if (t < pc.len && col < pc.inner) {
          const uint m = rev ? pc.len - 1u - t : t;
          y.data[pc.oy + (o * pc.len + m) * pc.inner + col] = FROMACC(tile[l]);
        }
      }
    }
    barrier();
  }
}
)GLSL";

// The accumulator dtype of a cumsum over dtype t.
DType acc_dtype(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F64: return DType::F64;
    case DType::F16:
    case DType::BF16: return DType::F32;
    case DType::I64: return DType::I64;
    default: return DType::U32;
  }
}

// Element i of x (dtype t) as the accumulator of acc.
std::string to_acc(DType t, DType acc) {
  const std::string raw = "x.data[i_]";
  const std::string A = glsl_compute_type(acc);
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16: return A + "(" + glsl_load(t, raw) + ")";
    case DType::I8:
    case DType::I16:
    case DType::I32: return "uint(int(" + raw + "))";
    case DType::U8: return "uint(" + raw + ")";
    default: return raw;  // f64, i64, u32 (their own accumulators)
  }
}

// Accumulator `a` stored as dtype t.
std::string from_acc(DType t, const std::string& a) {
  switch (t) {
    case DType::F32: return "float(" + a + ")";
    case DType::F16:
    case DType::BF16: return glsl_store(t, "float(" + a + ")");
    case DType::I8: return "int8_t(int(" + a + "))";
    case DType::I16: return "int16_t(int(" + a + "))";
    case DType::I32: return "int(" + a + ")";
    case DType::U8: return "uint8_t(" + a + ")";
    default: return a;
  }
}

// One scan of x (dtype xt) into y (dtype yt) along [outer, len, inner].
void scan(LowerContext& cx, const std::string& what, const Operand& x, DType xt, const Operand& y, DType yt, DType acc,
          int64_t outer, int64_t len, int64_t inner, bool excl, bool rev) {
  const plan::ScanWork w = plan::scan_work(outer, len, inner, static_cast<uint32_t>(dtype_size(acc)));
  const uint32_t ti = w.ti, seg = w.seg;
  const int64_t nch = w.nch;
  std::string src = glsl_header({xt, yt, acc}) + "layout(local_size_x = 256) in;\n" + glsl_dtype_helpers({xt, yt}) +
                    glsl_buffer(0, "x", xt, true) + glsl_buffer(1, "y", yt, false) + glsl_buffer(2, "cbuf", acc, false);
  src += "#define ACC " + glsl_compute_type(acc) + "\n#define TI " + std::to_string(ti) + "u\n#define SEG " +
         std::to_string(seg) + "u\n#define TOACC(i_) (" + to_acc(xt, acc) + ")\n#define FROMACC(a_) (" +
         from_acc(yt, "a_") + ")\n";
  src += kScan;
  const Kernel k{"cumsum", src};
  const auto tiles = [&](int64_t chunks) { return cx.groups_1d(w.tiles(chunks), 1); };
  const uint32_t mode = (excl ? 1u : 0u) | (rev ? 2u : 0u);
  const uint32_t ox = x.elem(dtype_size(xt)), oy = y.elem(dtype_size(yt));
  const auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  if (nch == 1) {
    const Operand unused = cx.scratch(16, what + " (no carries)");
    cx.dispatch(k, {x, y, unused}, {ox, oy, 0, u32(outer), u32(len), u32(inner), 1, mode}, tiles(1));
    return;
  }
  const uint64_t tbytes = static_cast<uint64_t>(outer * nch * inner) * dtype_size(acc);
  const Operand totals = cx.scratch(tbytes, what + " chunk totals");
  cx.dispatch(k, {x, y, totals}, {ox, oy, 0, u32(outer), u32(len), u32(inner), u32(nch), mode | 4u}, tiles(nch));
  Operand tin = totals;
  tin.write = false;
  scan(cx, what, tin, acc, totals, acc, acc, outer, nch, inner, true, false);
  Operand carries = totals;
  carries.write = false;
  cx.dispatch(k, {x, y, carries}, {ox, oy, 0, u32(outer), u32(len), u32(inner), u32(nch), mode | 8u}, tiles(nch));
}

}  // namespace

void lower_cumsum(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const auto& op = std::get<ops::Cumsum>(st.op);
  const auto& g = std::get<plan::AxisGeom>(st.geom);
  const DType t = st.in.at(0).dtype;
  if (t == DType::Bool) throw Error(what + ": cumsum does not take bool input");
  if (g.outer * g.axis * g.inner == 0) return;
  require_32bit(what, st.in.at(0).numel(), "the input");
  scan(cx, what, cx.in(st.in.at(0)), t, cx.out(st.out.at(0)), t, acc_dtype(t), g.outer, g.axis, g.inner, op.exclusive,
       op.reverse);
}

}  // namespace rlx::vulkan
