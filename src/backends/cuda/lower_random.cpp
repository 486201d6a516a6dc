// RngUniform / RngNormal on CUDA (kernels/random.h): the CPU backend's Philox stream.
#include <cmath>
#include <limits>

#include "backends/cuda/cuda_types.h"
#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/kernels/random.h"
#include "backends/cuda/select_lower.h"
#include "rlx/error.h"

namespace rlx::cuda {
namespace {

// Rounds to dtype t (f32/f16/bf16) the way the CPU stores a double (through f32) and returns
// the stored value as a float.
float round_to(DType t, double v) {
  const auto f = static_cast<float>(v);
  if (t == DType::F16) return f16_bits_to_f32(f32_to_f16_bits(f));
  if (t == DType::BF16) return bf16_bits_to_f32(f32_to_bf16_bits(f));
  return f;
}

// The neighbouring value of `v` in dtype t, towards +inf (up) or -inf.
float step(DType t, float v, bool up) {
  if (t == DType::F32) return std::nextafter(v, up ? std::numeric_limits<float>::infinity()
                                                   : -std::numeric_limits<float>::infinity());
  uint16_t b = t == DType::F16 ? f32_to_f16_bits(v) : f32_to_bf16_bits(v);
  const uint16_t mag = b & 0x7FFF;
  const bool neg = (b & 0x8000) != 0;
  if (mag == 0) b = up ? 0x0001 : 0x8001;  // +-0 -> the smallest subnormal
  else if (neg == up) b = static_cast<uint16_t>(b - 1);  // towards zero
  else b = static_cast<uint16_t>(b + 1);
  return t == DType::F16 ? f16_bits_to_f32(b) : bf16_bits_to_f32(b);
}

}  // namespace

void lower_rng(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const plan::TensorRef& out = st.out.at(0);
  const DType t = out.dtype;
  if (!cuda_float(t)) throw Error(what + ": CUDA random ops produce f32/f16/bf16, not " + dtype_name(t));
  const int64_t* offset = nullptr;
  if (!st.in.empty()) {
    if (st.in[0].dtype != DType::I64 || st.in[0].numel() != 1)
      throw Error(what + ": the offset operand must be one i64 value");
    offset = reinterpret_cast<const int64_t*>(cx.ptr(st.in[0]));
  }
  const std::string src = kernel_source(ksrc::kRng, {{"T", storage_type(t)}}, ksrc::kPhilox);
  const int64_t n = out.numel();
  std::shared_ptr<KernelLaunch> l;
  if (const auto* u = std::get_if<ops::RngUniform>(&st.op)) {
    // [lo, hi]: the smallest value of t >= low and the largest < high (the CPU kernel's clamp).
    float lo = round_to(t, u->low);
    if (static_cast<double>(lo) < u->low) lo = step(t, lo, true);
    float hi = round_to(t, u->high);
    while (static_cast<double>(hi) >= u->high) hi = step(t, hi, false);
    if (static_cast<double>(lo) > static_cast<double>(hi))
      throw Error(what + ": the output dtype " + dtype_name(t) +
                  " has no value in [low, high); widen the range or use a wider dtype");
    if (n == 0) return;
    l = std::make_shared<KernelLaunch>(what, get_kernel("rng_uniform", src), grid_for((n + 3) / 4, 256), 256);
    l->arg(cx.ptr(out)).arg(n).arg(static_cast<unsigned long long>(u->seed)).arg(offset).arg(u->low)
        .arg(u->high - u->low).arg(lo).arg(hi);
  } else {
    const auto& nr = std::get<ops::RngNormal>(st.op);
    if (n == 0) return;
    l = std::make_shared<KernelLaunch>(what, get_kernel("rng_normal", src), grid_for((n + 3) / 4, 256), 256);
    l->arg(cx.ptr(out)).arg(n).arg(static_cast<unsigned long long>(nr.seed)).arg(offset).arg(nr.mean).arg(nr.stddev);
  }
  push_launch(cx, l);
}

}  // namespace rlx::cuda
