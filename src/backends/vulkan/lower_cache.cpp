// CacheWrite on Vulkan: out = cache (a device copy unless the plan placed out over it), then one
// invocation per element of the new rows writes it at its row's position. Of two rows at one
// position the later wins (an invocation skips its element when a later row names the same
// position), as on the CPU. A position outside [0, rows) sets kErrCachePosition.
#include "backends/vulkan/lower_select.h"
#include "codegen/language.h"
#include "rlx/error.h"

namespace rlx::vulkan {
namespace {

constexpr const char* kCacheWriteGlsl = R"GLSL(
layout(push_constant) uniform P { uint oo; uint orow; uint op; uint s; uint m; uint inner; uint n; } pc;
void main() {
  for (uint e = gl_GlobalInvocationID.x; e < pc.n; e += gl_NumWorkGroups.x * 256u) {
    const uint c = e % pc.inner, t = e / pc.inner, i = t % pc.s, b = t / pc.s;
    const IT p = IT(pos.data[pc.op + i]);
    if (p < IT(0) || p >= IT(pc.m)) {
      atomicMax(err.code, ERR);
      continue;
    }
    bool later = false;
    for (uint j = i + 1u; j < pc.s && !later; ++j) later = IT(pos.data[pc.op + j]) == p;
    if (!later) outb.data[pc.oo + (b * pc.m + uint(p)) * pc.inner + c] = rows.data[pc.orow + e];
  }
}
)GLSL";

}  // namespace

void lower_cache_write(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const plan::TensorRef &cache = st.in.at(0), &rows = st.in.at(1), &pos = st.in.at(2);
  const DType t = cache.dtype, it = pos.dtype;
  if (rows.dtype != t || (it != DType::I32 && it != DType::I64))
    throw Error(what + ": Vulkan cache_write needs rows of the cache's dtype and i32 / i64 positions");
  require_32bit(what, cache.numel(), "cache");
  const int64_t b = cache.dims.at(0), m = cache.dims.at(1), s = rows.dims.at(1);
  const int64_t inner = b * m > 0 ? cache.numel() / (b * m) : 0;
  const Operand out = cx.out(st.out.at(0)), src = cx.in(cache);
  const uint64_t bytes = static_cast<uint64_t>(cache.numel()) * dtype_size(cache.storage());
  if (bytes > 0 && !(src.buffer == out.buffer && src.offset + src.skip == out.offset + out.skip)) cx.copy(out, src, bytes);
  const int64_t n = rows.numel();
  if (n == 0) return;
  std::string k = glsl_header({t, it}) + "layout(local_size_x = 256) in;\n" + glsl_buffer(0, "outb", t, false) +
                  glsl_buffer(1, "rows", t, true) + glsl_buffer(2, "pos", it, true) +
                  "layout(std430, set = 0, binding = 3) buffer Err { int code; } err;\n";
  k += std::string("#define IT ") + (it == DType::I64 ? "int64_t" : "int") + "\n#define ERR " +
       std::to_string(codegen::kErrCachePosition) + "\n" + kCacheWriteGlsl;
  const Operand r = cx.in(rows), p = cx.in(pos);
  const std::vector<uint32_t> push = {out.elem(dtype_size(cache.storage())), r.elem(dtype_size(rows.storage())),
                                      p.elem(dtype_size(pos.storage())), static_cast<uint32_t>(s),
                                      static_cast<uint32_t>(m), static_cast<uint32_t>(inner), static_cast<uint32_t>(n)};
  cx.dispatch(Kernel{"cache_write", k}, {out, r, p, cx.error_flag()}, push, cx.groups_1d(static_cast<uint64_t>(n), kSelectWorkgroup));
}

}  // namespace rlx::vulkan
