// CacheWrite on Vulkan: out = cache (a device copy unless the plan placed out over it), then one
// invocation per element of the new rows writes it at its row's position ((S) positions, or (B, S):
// one row of them per batch entry). Of two rows of an entry at one position the later wins (an invocation skips its element when a later row names the same
// position), as on the CPU. A position outside [0, rows) sets kErrCachePosition.
// With the variant's cache-write fusion (LowerContext::cache_write_fusion), one dispatch writes
// an earlier CacheWrite of the same positions too (PAIR: its elements after this one's), rows
// that are an absorbed RoPE's result are read from the rope's input and rotated as they are
// written (ROT0 / ROT1 for the two parts), and the q RoPE paired with such a rope is computed
// after them (QROT); one pair of tables and one rotation for all.
#include "backends/vulkan/lower_select.h"
#include "codegen/language.h"
#include "plan/absorb_plans.h"
#include "rlx/error.h"

namespace rlx::vulkan {
namespace {

// Placeholders: the defines PAIR, ROT0, ROT1, QROT, IT, ERR, T (raw storage), C (compute type),
// LOAD / STORE (storage <-> compute). Part 0: this write's rows (or the paired first write's),
// part 1 (PAIR): the second write's, part 2 (QROT): a rope's x rotated into its output.
constexpr const char* kCacheWriteGlsl = R"GLSL(
layout(push_constant) uniform P {
  uint oo, orow, op, s, m, inner, n, pb;
#if PAIR
  uint oo1, orow1;
#endif
#if ROT0 || ROT1 || QROT
  uint ocs, osn, hd, n_rot, per_batch, neox;
#endif
#if QROT
  uint oqx, oqo, nq, qinner;
#endif
} pc;
T raw(uint part, uint e) {
#if PAIR
  if (part == 1u) return rows1.data[pc.orow1 + e];
#endif
#if QROT
  if (part == 2u) return qx.data[pc.oqx + e];
#endif
  return rows.data[pc.orow + e];
}
#if ROT0 || ROT1 || QROT
// Element c of row t (chunk row i) of a part's rows, rotated: pair q of its head is (q, q + n_rot
// / 2) in the NeoX style, else (2q, 2q + 1); the tail past n_rot is copied.
T rotated(uint part, uint e, uint c, uint t, uint i) {
  const uint h = c / pc.hd, d = c - h * pc.hd;
  if (d >= pc.n_rot) return raw(part, e);
  const uint half_rot = pc.n_rot / 2u;
  const uint q = pc.neox != 0u ? (d < half_rot ? d : d - half_rot) : d >> 1;
  const uint i1 = pc.neox != 0u ? q : 2u * q, i2 = pc.neox != 0u ? q + half_rot : 2u * q + 1u;
  const uint base = e - c + h * pc.hd;
  const C x1 = LOAD(raw(part, base + i1)), x2 = LOAD(raw(part, base + i2));
  const uint k = (pc.per_batch != 0u ? t : i) * half_rot + q;
  const C cv = C(LOAD(cs.data[pc.ocs + k])), sv = C(LOAD(sn.data[pc.osn + k]));
  return STORE(d == i1 ? x1 * cv - x2 * sv : x2 * cv + x1 * sv);
}
#endif
void main() {
  const uint writes = PAIR != 0 ? 2u * pc.n : pc.n;
#if QROT
  const uint all = writes + pc.nq;
#else
  const uint all = writes;
#endif
  for (uint g = gl_GlobalInvocationID.x; g < all; g += gl_NumWorkGroups.x * 256u) {
#if QROT
    if (g >= writes) {  // the q rope: (B, S) rows of qinner values, in place of its own step
      const uint e = g - writes, c = e % pc.qinner, t = e / pc.qinner;
      qo.data[pc.oqo + e] = rotated(2u, e, c, t, t % pc.s);
      continue;
    }
#endif
    const uint part = g >= pc.n ? 1u : 0u;
    const uint e = g - part * pc.n;
    const uint c = e % pc.inner, t = e / pc.inner, i = t % pc.s, b = t / pc.s;
    const uint pbase = pc.op + (pc.pb != 0u ? b * pc.s : 0u);  // (B, S) positions: the entry's row
    const IT p = IT(pos.data[pbase + i]);
    if (p < IT(0) || p >= IT(pc.m)) {
      atomicMax(err.code, ERR);
      continue;
    }
    bool later = false;
    for (uint j = i + 1u; j < pc.s && !later; ++j) later = IT(pos.data[pbase + j]) == p;
    if (later) continue;
    const uint dst = (b * pc.m + uint(p)) * pc.inner + c;
    const bool rot = part == 1u ? ROT1 != 0 : ROT0 != 0;
    T v;
#if ROT0 || ROT1
    if (rot) v = rotated(part, e, c, t, i); else
#endif
    v = raw(part, e);
#if PAIR
    if (part == 1u) { outb1.data[pc.oo1 + dst] = v; continue; }
#endif
    outb.data[pc.oo + dst] = v;
  }
}
)GLSL";

// One CacheWrite's part of the dispatch: its cache copied to its output unless the plan placed
// the output over it; the rows (the rope's input when `rope`) and output bound.
struct Part {
  Operand out, rows;
  int64_t s = 0, m = 0, inner = 0, n = 0;
};
Part prepare(LowerContext& cx, const plan::Step& st, const plan::Step* rope) {
  const std::string what = step_label(st);
  const plan::TensorRef &cache = st.in.at(0), &rows = st.in.at(1), &pos = st.in.at(2);
  const DType t = cache.dtype, it = pos.dtype;
  if (rows.dtype != t || (it != DType::I32 && it != DType::I64))
    throw Error(what + ": Vulkan cache_write needs rows of the cache's dtype and i32 / i64 positions");
  require_32bit(what, cache.numel(), "cache");
  Part p;
  const int64_t b = cache.dims.at(0);
  p.m = cache.dims.at(1), p.s = rows.dims.at(1);
  p.inner = b * p.m > 0 ? cache.numel() / (b * p.m) : 0;
  p.out = cx.out(st.out.at(0));
  const Operand src = cx.in(cache);
  const uint64_t bytes = static_cast<uint64_t>(cache.numel()) * dtype_size(cache.storage());
  if (bytes > 0 && !(src.buffer == p.out.buffer && src.offset + src.skip == p.out.offset + p.out.skip))
    cx.copy(p.out, src, bytes);
  p.n = rows.numel();
  p.rows = cx.in(rope ? rope->in.at(0) : rows);
  return p;
}

// A rope this kernel can apply: tables of the rows' dtype, held as themselves, an even n_rot.
bool rope_fits(const plan::Step& rope, DType t) {
  const auto& g = std::get<plan::RopeGeom>(rope.geom);
  for (size_t k = 0; k < 3; ++k)
    if (rope.in.at(k).dtype != t || rope.in.at(k).storage() != t) return false;
  return g.n_rot > 0 && g.n_rot % 2 == 0 && g.n_rot <= g.head_dim;
}

}  // namespace

void lower_cache_write(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  LowerContext::CacheWriteFusion f = cx.cache_write_fusion(st);
  const DType t = st.in.at(0).dtype, it = st.in.at(2).dtype;
  // A rope the kernel cannot apply, or one rotating unlike another part's, runs first (a q rope
  // also when its rows are not the writes' (B, S) rows).
  if (f.first_rope && !rope_fits(*f.first_rope, t)) lower_step(cx, *f.first_rope), f.first_rope = nullptr;
  if (f.rope && !rope_fits(*f.rope, t)) lower_step(cx, *f.rope), f.rope = nullptr;
  if (f.rope && f.first_rope && !plan::same_rotation(*f.rope, *f.first_rope))
    lower_step(cx, *f.first_rope), f.first_rope = nullptr;
  if (f.q_rope) {
    const plan::Step* other = f.rope ? f.rope : f.first_rope;
    const auto& g = std::get<plan::RopeGeom>(f.q_rope->geom);
    const plan::TensorRef& rows = st.in.at(1);
    const bool fits = rope_fits(*f.q_rope, t) && (!other || plan::same_rotation(*f.q_rope, *other)) &&
                      rows.dims.size() >= 2 && g.batch == rows.dims[0] && g.seq == rows.dims[1];
    if (!fits) lower_step(cx, *f.q_rope), f.q_rope = nullptr;
  }
  // Part 0 is the earlier write when paired; part 1 this one.
  const plan::Step& s0 = f.first ? *f.first : st;
  const plan::Step* rope0 = f.first ? f.first_rope : f.rope;
  const plan::Step* rope1 = f.first ? f.rope : nullptr;
  const Part a = prepare(cx, s0, rope0);
  const Part b = f.first ? prepare(cx, st, rope1) : Part{};
  if (f.first && (b.n != a.n || b.inner != a.inner || b.m != a.m || s0.in.at(2).value != st.in.at(2).value))
    throw Error(what + ": internal: a paired cache write has other rows or positions");
  const int64_t nq = f.q_rope ? f.q_rope->out.at(0).numel() : 0;
  const int64_t writes = a.n * (f.first ? 2 : 1);
  if (writes + nq == 0) return;
  require_32bit(what, writes + nq, "rows");
  const plan::Step* rope = rope0 ? rope0 : rope1 ? rope1 : f.q_rope;
  std::string k = glsl_header({t, it}) + "layout(local_size_x = 256) in;\n" + glsl_buffer(0, "outb", t, false) +
                  glsl_buffer(1, "rows", t, true) + glsl_buffer(2, "pos", it, true) +
                  "layout(std430, set = 0, binding = 3) buffer Err { int code; } err;\n";
  const Operand p = cx.in(st.in.at(2));
  std::vector<Operand> bind = {a.out, a.rows, p, cx.error_flag()};
  const size_t e = dtype_size(st.in.at(0).storage());
  std::vector<uint32_t> push = {a.out.elem(e), a.rows.elem(e), p.elem(dtype_size(st.in.at(2).storage())),
                                static_cast<uint32_t>(a.s), static_cast<uint32_t>(a.m), static_cast<uint32_t>(a.inner),
                                static_cast<uint32_t>(a.n), st.in.at(2).dims.size() == 2 ? 1u : 0u};
  if (f.first) {
    k += glsl_buffer(4, "outb1", t, false) + glsl_buffer(5, "rows1", t, true);
    bind.insert(bind.end(), {b.out, b.rows});
    push.insert(push.end(), {b.out.elem(e), b.rows.elem(e)});
  }
  if (rope) {
    const int first_table = static_cast<int>(bind.size());
    k += glsl_buffer(first_table, "cs", t, true) + glsl_buffer(first_table + 1, "sn", t, true);
    const Operand cs = cx.in(rope->in.at(1)), sn = cx.in(rope->in.at(2));
    bind.insert(bind.end(), {cs, sn});
    const auto& g = std::get<plan::RopeGeom>(rope->geom);
    push.insert(push.end(), {cs.elem(e), sn.elem(e), static_cast<uint32_t>(g.head_dim), static_cast<uint32_t>(g.n_rot),
                             g.per_batch ? 1u : 0u, std::get<ops::Rope>(rope->op).style == RopeStyle::NeoX ? 1u : 0u});
  }
  if (f.q_rope) {
    const int at = static_cast<int>(bind.size());
    k += glsl_buffer(at, "qx", t, true) + glsl_buffer(at + 1, "qo", t, false);
    const Operand qx = cx.in(f.q_rope->in.at(0)), qo = cx.out(f.q_rope->out.at(0));
    bind.insert(bind.end(), {qx, qo});
    const auto& g = std::get<plan::RopeGeom>(f.q_rope->geom);
    push.insert(push.end(), {qx.elem(e), qo.elem(e), static_cast<uint32_t>(nq), static_cast<uint32_t>(g.heads * g.head_dim)});
  }
  k += std::string("#define IT ") + (it == DType::I64 ? "int64_t" : "int") + "\n#define ERR " +
       std::to_string(codegen::kErrCachePosition) + "\n#define PAIR " + (f.first ? "1" : "0") + "\n#define ROT0 " +
       (rope0 ? "1" : "0") + "\n#define ROT1 " + (rope1 ? "1" : "0") + "\n#define QROT " + (f.q_rope ? "1" : "0") +
       "\n#define T " + codegen::glsl_language().storage_type(t) + "\n#define C " + glsl_compute_type(t) +
       "\n#define LOAD(r) (" + glsl_load(t, "(r)") + ")\n#define STORE(v) (" + glsl_store(t, "(v)") + ")\n" +
       glsl_dtype_helpers({t}) + kCacheWriteGlsl;
  const std::string name = std::string("cache_write") + (f.first ? "_pair" : "") + (rope0 || rope1 ? "_rope" : "") +
                           (f.q_rope ? "_q" : "");
  cx.dispatch(Kernel{name, k}, bind, push, cx.groups_1d(static_cast<uint64_t>(writes + nq), kSelectWorkgroup));
}

}  // namespace rlx::vulkan
