// ScatterAdd on Vulkan: out = data, then the updates added in the CPU's order, without atomics.
//
// An index position (o, m, j) (o: its coordinates before the axis, m on the axis, j after)
// writes the element of out with o's and j's coordinates and indices[o, m, j] on the axis, so
// different index columns (o, j) never write the same element. Two deterministic kernels add a
// column's updates in increasing m, each addition rounded to the dtype like the CPU's:
//   - by column: one invocation per column walks m (consecutive invocations take consecutive j:
//     coalesced index / update loads), for many columns;
//   - by destination: one invocation per (column, axis position) walks the column's indices and
//     adds the updates aimed at it, for few columns on a short data axis (no serial walk over a
//     long column by a lone invocation).
// Indices outside [-axis_size, axis_size) set kErrScatterIndex.
#include <algorithm>

#include "backends/vulkan/lower_select.h"
#include "codegen/language.h"
#include "rlx/error.h"

namespace rlx::vulkan {
namespace {

constexpr const char* kScatter = R"GLSL(
layout(push_constant) uniform P {
  uint oo; uint oi; uint ou; uint rank; uint axis; uint axis_size; uint mid; uint inner; uint outer; uint by_dest;
  uint dims[8]; uint strides[8];
} pc;
// The data offset of index column (o, j): o unravels over the dims before the axis, j over those after.
uint column_base(uint o, uint j) {
  uint off = 0u;
  for (int d = int(pc.rank) - 1; d > int(pc.axis); --d) {
    off += (j % pc.dims[d]) * pc.strides[d];
    j /= pc.dims[d];
  }
  for (int d = int(pc.axis) - 1; d >= 0; --d) {
    off += (o % pc.dims[d]) * pc.strides[d];
    o /= pc.dims[d];
  }
  return off;
}
// The axis position of index element `lin`, or 0xffffffff (and the error flag) when out of range.
uint target(uint lin) {
  const IT ix = IT(ind.data[pc.oi + lin]);
  const IT n = IT(pc.axis_size);
  if (ix < -n || ix >= n) {
    atomicMax(err.code, 2);
    return 0xffffffffu;
  }
  return uint(ix < IT(0) ? ix + n : ix);
}
void main() {
  const uint astride = pc.strides[pc.axis];
  const uint cols = pc.outer * pc.inner;
  const uint items = pc.by_dest != 0u ? cols * pc.axis_size : cols;
  for (uint it = gl_GlobalInvocationID.x; it < items; it += gl_NumWorkGroups.x * 256u) {
    const uint col = pc.by_dest != 0u ? it % cols : it;
    const uint o = col / pc.inner, j = col % pc.inner;
    const uint base = pc.oo + column_base(o, j);
    if (pc.by_dest == 0u) {
      for (uint m = 0u; m < pc.mid; ++m) {
        const uint lin = (o * pc.mid + m) * pc.inner + j;
        const uint a = target(lin);
        if (a == 0xffffffffu) continue;
        const uint dst = base + a * astride;
        outb.data[dst] = ADD(outb.data[dst], upd.data[pc.ou + lin]);
      }
    } else {
      const uint a = it / cols;
      const uint dst = base + a * astride;
      ST acc = outb.data[dst];
      for (uint m = 0u; m < pc.mid; ++m) {
        const uint lin = (o * pc.mid + m) * pc.inner + j;
        if (target(lin) == a) acc = ADD(acc, upd.data[pc.ou + lin]);
      }
      outb.data[dst] = acc;
    }
  }
}
)GLSL";

// GLSL of storage a + storage b in dtype t, rounded to t (integers wrap).
std::string add_expr(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
      return glsl_store(t, "(" + glsl_load(t, "(a_)") + " + " + glsl_load(t, "(b_)") + ")");
    case DType::F64:
    case DType::I64:
    case DType::I32:
    case DType::U32: return "((a_) + (b_))";
    case DType::I8: return "int8_t(int(a_) + int(b_))";
    case DType::I16: return "int16_t(int(a_) + int(b_))";
    case DType::U8: return "uint8_t(uint(a_) + uint(b_))";
    default: return "";
  }
}

}  // namespace

void lower_scatter_add(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const plan::TensorRef &data = st.in.at(0), &idx = st.in.at(1), &upd = st.in.at(2);
  const DType t = data.dtype, it = idx.dtype;
  const std::string add = add_expr(t);
  if (add.empty() || upd.dtype != t) throw Error(what + ": Vulkan scatter_add needs non-bool data and updates of one dtype");
  if (it != DType::I8 && it != DType::I16 && it != DType::I32 && it != DType::I64 && it != DType::U8)
    throw Error(what + ": Vulkan scatter_add takes i8/i16/i32/i64/u8 indices, not " + dtype_name(it));
  const plan::ScatterAddWork w = plan::scatter_add_work(st, "Vulkan");
  const Operand out = cx.out(st.out.at(0)), src = cx.in(data);
  const uint64_t bytes = static_cast<uint64_t>(data.numel()) * dtype_size(t);
  if (bytes > 0 && !(src.buffer == out.buffer && src.offset + src.skip == out.offset + out.skip)) cx.copy(out, src, bytes);
  if (w.count == 0) return;
  const std::string IT = it == DType::I64 ? "int64_t" : "int";
  std::string k = glsl_header({t, it}) + "layout(local_size_x = 256) in;\n" + glsl_dtype_helpers({t}) +
                  glsl_buffer(0, "outb", t, false) + glsl_buffer(1, "ind", it, true) + glsl_buffer(2, "upd", t, true) +
                  "layout(std430, set = 0, binding = 3) buffer Err { int code; } err;\n";
  k += "#define IT " + IT + "\n#define ST " + codegen::glsl_language().storage_type(t) + "\n#define ADD(a_, b_) (" + add +
       ")\n";
  k += kScatter;
  std::vector<uint32_t> push = {out.elem(dtype_size(t)), cx.in(idx).elem(dtype_size(it)), cx.in(upd).elem(dtype_size(t))};
  const std::vector<uint32_t> params = w.params();
  push.insert(push.end(), params.begin(), params.end());
  const int64_t items = w.items;
  cx.dispatch(Kernel{"scatter_add", k}, {out, cx.in(idx), cx.in(upd), cx.error_flag()}, push,
              cx.groups_1d(items, kSelectWorkgroup));
}

}  // namespace rlx::vulkan
