// RngUniform / RngNormal on Vulkan: the CPU backend's Philox-4x32-10 stream (cpu/philox.h).
// Element i uses block i / 4 of the stream (seed, offset); one invocation per block
// (grid-stride), so every element is computed independently of the grid.
//
// RngUniform: low + width * bits * 2^-32 in double (`precise`: no fused multiply-add, like the
// CPU), rounded to the dtype (f16 / bf16 through f32, as the CPU stores a double), clamped into
// [lo, hi] (the smallest value of the dtype >= low and the largest < high, from the host): bit
// for bit the CPU's values. RngNormal: Box-Muller in double with this file's log / sin / cos
// (kernels/select.h, about one ulp of double): after rounding to f32 it shows only rarely, as 1 ulp.
#include <cstring>

#include "backends/vulkan/kernels/select.h"
#include "backends/vulkan/lower_select.h"
#include "rlx/error.h"

namespace rlx::vulkan {
namespace {

constexpr const char* kRngMain = R"GLSL(
layout(push_constant) uniform P {
  uint oy; uint ooff; uint n; uint seed_lo; uint seed_hi;
  uint a_lo; uint a_hi; uint b_lo; uint b_hi; uint lo_lo; uint lo_hi; uint hi_lo; uint hi_hi;
} pc;
double word_double(uint lo, uint hi) { return packDouble2x32(uvec2(lo, hi)); }
void main() {
  const uint64_t offv = uint64_t(offs.data[pc.ooff]);
  const uvec2 offset = uvec2(uint(offv), uint(offv >> 32));
  const uvec2 seed = uvec2(pc.seed_lo, pc.seed_hi);
  const double a = word_double(pc.a_lo, pc.a_hi), b = word_double(pc.b_lo, pc.b_hi);
  const uint blocks = pc.n / 4u + (pc.n % 4u != 0u ? 1u : 0u);
  for (uint blk = gl_GlobalInvocationID.x; blk < blocks; blk += gl_NumWorkGroups.x * 256u) {
    const uvec4 r = rlx_philox_block(seed, offset, blk, 0u);
#ifdef UNIFORM
    const double lo = word_double(pc.lo_lo, pc.lo_hi), hi = word_double(pc.hi_lo, pc.hi_hi);
    for (uint j = 0u; j < 4u; ++j) {
      const uint i = blk * 4u + j;
      if (i >= pc.n) break;
      precise double x = a + b * (double(r[j]) * (1.0LF / 4294967296.0LF));
      ST v = STORE(x);
      const double vd = LOADD(v);
      if (vd > hi) v = STORE(hi);
      else if (vd < lo) v = STORE(lo);
      y.data[pc.oy + i] = v;
    }
#else
    for (uint p = 0u; p < 2u; ++p) {
      const uint i = blk * 4u + 2u * p;
      if (i >= pc.n) break;
      precise double u1 = (double(r[2u * p]) + 1.0LF) * (1.0LF / 4294967296.0LF);
      precise double u2 = double(r[2u * p + 1u]) * (1.0LF / 4294967296.0LF);
      precise double radius = sqrt(-2.0LF * rlx_log_d(u1));
      precise double angle = 6.283185307179586476925286766559LF * u2;
      double sn, cs;
      rlx_sincos_d(angle, sn, cs);
      precise double scale = b * radius;
      precise double z0 = a + scale * cs;
      y.data[pc.oy + i] = STORE(z0);
      if (i + 1u < pc.n) {
        precise double z1 = a + scale * sn;
        y.data[pc.oy + i + 1u] = STORE(z1);
      }
    }
#endif
  }
}
)GLSL";

uint64_t bits_of(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

}  // namespace

void lower_rng(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const plan::TensorRef& out = st.out.at(0);
  const DType t = out.dtype;
  if (!is_float(t)) throw Error(what + ": output dtype must be float, got " + dtype_name(t));
  const bool uniform = std::holds_alternative<ops::RngUniform>(st.op);
  double a = 0, b = 0, lo = 0, hi = 0;
  uint64_t seed = 0;
  if (uniform) {
    const auto& u = std::get<ops::RngUniform>(st.op);
    // [lo, hi]: the smallest value of t >= low and the largest < high (the CPU kernel's clamp).
    const plan::UniformBounds bounds = plan::rng_uniform_bounds(t, u.low, u.high, what);
    lo = bounds.lo;
    hi = bounds.hi;
    a = u.low, b = u.high - u.low, seed = u.seed;
  } else {
    const auto& nr = std::get<ops::RngNormal>(st.op);
    a = nr.mean, b = nr.stddev, seed = nr.seed;
  }
  const int64_t n = out.numel();
  if (n == 0) return;
  require_32bit(what, n + 3, "the output");
  Operand off;
  if (!st.in.empty()) {
    if (st.in[0].dtype != DType::I64 || st.in[0].numel() != 1)
      throw Error(what + ": the offset operand must be one i64 value");
    off = cx.in(st.in[0]);
  } else {
    off = cx.table({0u, 0u}, what + " zero offset");
  }
  const std::string store = t == DType::F64 ? "(x_)" : glsl_store(t, "float(x_)");
  const std::string load = "double(" + glsl_load(t, "(v_)") + ")";
  std::string src = glsl_header({t, DType::I64, DType::F64}) + "layout(local_size_x = 256) in;\n" +
                    glsl_dtype_helpers({t}) + glsl_buffer(0, "y", t, false) + glsl_buffer(1, "offs", DType::I64, true);
  if (uniform) src += "#define UNIFORM 1\n";
  src += "#define ST " + std::string(t == DType::F64 ? "double" : t == DType::F32 ? "float" : t == DType::F16 ? "float16_t" : "uint16_t") +
         "\n#define STORE(x_) (" + store + ")\n#define LOADD(v_) (" + load + ")\n";
  src += std::string(ksrc::kPhilox) + (uniform ? "" : ksrc::kDoubleMath) + kRngMain;
  const Operand y = cx.out(out);
  const uint64_t ab = bits_of(a), bb = bits_of(b), lb = bits_of(lo), hb = bits_of(hi);
  cx.dispatch(Kernel{uniform ? "rng_uniform" : "rng_normal", src}, {y, off},
              {y.elem(dtype_size(t)), off.elem(8), static_cast<uint32_t>(n), lo32(seed), hi32(seed), lo32(ab), hi32(ab),
               lo32(bb), hi32(bb), lo32(lb), hi32(lb), lo32(hb), hi32(hb)},
              cx.groups_1d((n + 3) / 4, kSelectWorkgroup));
}

}  // namespace rlx::vulkan
