#pragma once
// DType <-> the storage type names of the NVRTC prelude, and the dtypes the backend runs.
#include <initializer_list>
#include <string>
#include <utility>

#include "backends/cuda/kernels/prelude.h"
#include "codegen/language.h"
#include "rlx/dtype.h"

namespace rlx::cuda {

// The float dtypes most kernels take (f16/bf16 compute in f32); f64 runs on the elementwise,
// data-movement, reduce / softmax, cumsum and matmul paths, computing in double.
inline bool cuda_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// The prelude's typedef name of dtype t's storage (bool is u8_t), as the CUDA printer spells it.
inline std::string storage_type(DType t) { return codegen::cuda_language().storage_type(t); }

inline const char* kernel_prelude() { return ksrc::kPrelude; }

// The prelude, then `typedef <type> <name>;` for each pair and `extra` (e.g. #defines), then
// the kernels' body.
inline std::string kernel_source(const char* body, std::initializer_list<std::pair<const char*, std::string>> typedefs,
                                 const std::string& extra = "") {
  std::string s = kernel_prelude();
  for (const auto& [name, type] : typedefs) s += "typedef " + type + " " + name + ";\n";
  return s + extra + body;
}

// The unsigned word type of an element size (for dtype-agnostic data movement).
inline std::string word_type(size_t bytes) {
  switch (bytes) {
    case 1: return "unsigned char";
    case 2: return "unsigned short";
    case 4: return "unsigned int";
    default: return "unsigned long long";
  }
}

// Helpers of generated elementwise kernels (after the prelude). The integer division family
// follows the CPU kernels (src/backends/cpu/kernels_elementwise.cpp): two's-complement wrapping,
// Div truncated, Mod floored, FMod truncated, x / -1 without the overflow trap; a zero divisor or
// 0 to a negative power records an error code in the run's flag (read after the run) and yields 0.
inline constexpr const char* kElementwiseHelpers = R"CUDA(
__device__ __forceinline__ float rlx_mod_floor(float a, float b) {
  float r = fmodf(a, b);
  if (r != 0.f) { if ((r < 0.f) != (b < 0.f)) r += b; }
  else r = copysignf(0.f, b);
  return r;
}
__device__ __forceinline__ double rlx_mod_floor(double a, double b) {
  double r = fmod(a, b);
  if (r != 0.0) { if ((r < 0.0) != (b < 0.0)) r += b; }
  else r = copysign(0.0, b);
  return r;
}
#define RLX_SIGNED(C) ((C)-1 < (C)0)
template <class C> __device__ __forceinline__ C rlx_int_div(C a, C b, int* err) {
  if (b == 0) { report_error(err, RLX_ERR_INT_DIV_ZERO); return 0; }
  if (RLX_SIGNED(C) && b == (C)-1) return (C)(0ull - (unsigned long long)a);
  return (C)(a / b);
}
template <class C> __device__ __forceinline__ C rlx_int_mod(C a, C b, int* err) {
  if (b == 0) { report_error(err, RLX_ERR_INT_DIV_ZERO); return 0; }
  if (RLX_SIGNED(C) && b == (C)-1) return 0;
  C r = (C)(a % b);
  if (RLX_SIGNED(C) && r != 0 && ((r < 0) != (b < 0))) r = (C)(r + b);
  return r;
}
template <class C> __device__ __forceinline__ C rlx_int_fmod(C a, C b, int* err) {
  if (b == 0) { report_error(err, RLX_ERR_INT_DIV_ZERO); return 0; }
  if (RLX_SIGNED(C) && b == (C)-1) return 0;
  return (C)(a % b);
}
template <class C> __device__ __forceinline__ C rlx_int_pow(C base, C e, int* err) {
  if (RLX_SIGNED(C) && e < 0) {
    if (base == 1) return 1;
    if (base == (C)-1) return (e & 1) ? (C)-1 : (C)1;
    if (base == 0) { report_error(err, RLX_ERR_INT_POW_ZERO); return 0; }
    return 0;
  }
  unsigned long long r = 1ull, b = (unsigned long long)base, x = (unsigned long long)e;
  while (x) { if (x & 1ull) r *= b; b *= b; x >>= 1; }
  return (C)r;
}
)CUDA";

}  // namespace rlx::cuda
