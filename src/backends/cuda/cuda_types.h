#pragma once
// DType <-> the storage type names of the NVRTC prelude, and the dtypes the backend runs.
#include <initializer_list>
#include <string>
#include <utility>

#include "backends/cuda/kernels/prelude.h"
#include "rlx/dtype.h"

namespace rlx::cuda {

// Every dtype except f64 (f16/bf16/f32 floats compute in f32).
inline bool cuda_dtype_supported(DType t) { return t != DType::F64; }
inline bool cuda_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

inline std::string storage_type(DType t) {
  switch (t) {
    case DType::F32: return "float";
    case DType::F16: return "f16_t";
    case DType::BF16: return "bf16_t";
    case DType::F64: return "double";
    case DType::I8: return "i8_t";
    case DType::I16: return "i16_t";
    case DType::I32: return "i32_t";
    case DType::I64: return "i64_t";
    case DType::U8: return "u8_t";
    case DType::U32: return "u32_t";
    case DType::Bool: return "u8_t";
  }
  return "?";
}

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

// Helpers of generated elementwise kernels (after the prelude).
inline constexpr const char* kElementwiseHelpers = R"CUDA(
__device__ __forceinline__ float rlx_mod_floor(float a, float b) {
  float r = fmodf(a, b);
  if (r != 0.f) { if ((r < 0.f) != (b < 0.f)) r += b; }
  else r = copysignf(0.f, b);
  return r;
}
)CUDA";

}  // namespace rlx::cuda
