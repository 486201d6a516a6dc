#pragma once
// Element types with real storage sizes, and the f16/bf16 storage types with
// round-to-nearest-even conversion from f32.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

#include "rlx/error.h"

namespace rlx {

enum class DType : uint8_t { F32, F16, BF16, F64, I8, I16, I32, I64, U8, U32, Bool };

inline constexpr DType kAllDTypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64,
                                       DType::I8,  DType::I16, DType::I32,  DType::I64,
                                       DType::U8,  DType::U32, DType::Bool};

size_t dtype_size(DType t);           // bytes per element (bool is stored as one byte)
const char* dtype_name(DType t);      // "f32", "f16", ...
DType dtype_from_name(std::string_view name);  // throws rlx::Error on unknown names
bool is_float(DType t);               // f32, f16, bf16, f64
bool is_int(DType t);                 // signed or unsigned integers (not bool)
bool is_signed_int(DType t);

// IEEE half precision storage.
struct f16 {
  uint16_t bits = 0;
  f16() = default;
  explicit f16(float v);
  explicit operator float() const;
};

// bfloat16 storage (upper half of an f32).
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float v);
  explicit operator float() const;
};

uint16_t f32_to_f16_bits(float v);   // round to nearest even, overflow -> inf, NaN kept
float f16_bits_to_f32(uint16_t h);
uint16_t f32_to_bf16_bits(float v);  // round to nearest even, NaN kept quiet
float bf16_bits_to_f32(uint16_t h);

inline f16::f16(float v) : bits(f32_to_f16_bits(v)) {}
inline f16::operator float() const { return f16_bits_to_f32(bits); }
inline bf16::bf16(float v) : bits(f32_to_bf16_bits(v)) {}
inline bf16::operator float() const { return bf16_bits_to_f32(bits); }

// C++ storage type for each DType. Bool is stored as uint8_t (0 or 1).
template <DType D> struct dtype_storage;
template <> struct dtype_storage<DType::F32> { using type = float; };
template <> struct dtype_storage<DType::F16> { using type = f16; };
template <> struct dtype_storage<DType::BF16> { using type = bf16; };
template <> struct dtype_storage<DType::F64> { using type = double; };
template <> struct dtype_storage<DType::I8> { using type = int8_t; };
template <> struct dtype_storage<DType::I16> { using type = int16_t; };
template <> struct dtype_storage<DType::I32> { using type = int32_t; };
template <> struct dtype_storage<DType::I64> { using type = int64_t; };
template <> struct dtype_storage<DType::U8> { using type = uint8_t; };
template <> struct dtype_storage<DType::U32> { using type = uint32_t; };
template <> struct dtype_storage<DType::Bool> { using type = uint8_t; };

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<f16>() { return DType::F16; }
template <> constexpr DType dtype_of<bf16>() { return DType::BF16; }
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<int8_t>() { return DType::I8; }
template <> constexpr DType dtype_of<int16_t>() { return DType::I16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::I32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::I64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::U8; }
template <> constexpr DType dtype_of<uint32_t>() { return DType::U32; }
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }

// Calls f.template operator()<DType::X>() for the runtime dtype `t`.
// Usage: visit_dtype(t, [&]<DType D>() { using T = typename dtype_storage<D>::type; ... });
template <class F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::F32: return f.template operator()<DType::F32>();
    case DType::F16: return f.template operator()<DType::F16>();
    case DType::BF16: return f.template operator()<DType::BF16>();
    case DType::F64: return f.template operator()<DType::F64>();
    case DType::I8: return f.template operator()<DType::I8>();
    case DType::I16: return f.template operator()<DType::I16>();
    case DType::I32: return f.template operator()<DType::I32>();
    case DType::I64: return f.template operator()<DType::I64>();
    case DType::U8: return f.template operator()<DType::U8>();
    case DType::U32: return f.template operator()<DType::U32>();
    case DType::Bool: return f.template operator()<DType::Bool>();
  }
  throw Error("visit_dtype: corrupt dtype value " + std::to_string(static_cast<int>(t)));
}

// Scalar conversions through double, used by kernels that compute in a wider type.
// Bool stores 0/1; float->int conversion truncates toward zero (like C++ and numpy astype).
template <class T>
inline double to_double(T v) {
  if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) return static_cast<float>(v);
  else return static_cast<double>(v);
}
template <class T>
inline T from_double(double v) {
  if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) return T(static_cast<float>(v));
  else return static_cast<T>(v);
}
// The compute type for a storage type: f16/bf16 compute in f32.
template <class T> struct compute_type { using type = T; };
template <> struct compute_type<f16> { using type = float; };
template <> struct compute_type<bf16> { using type = float; };
template <class T> using compute_t = typename compute_type<T>::type;

template <class T>
inline compute_t<T> load(const T& v) {
  return static_cast<compute_t<T>>(v);
}
template <class T, class C>
inline T store(C v) {
  if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) return T(static_cast<float>(v));
  else return static_cast<T>(v);
}

}  // namespace rlx
