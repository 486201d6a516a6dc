#pragma once
// Element types with real storage sizes, and the f16/bf16 storage types with
// round-to-nearest-even conversion from f32.
//
// Two groups:
//  - compute dtypes (f32, f16, bf16, f64, i8/16/32/64, u8/16/32/64, bool): every op family
//    runs on them where its rules allow (visit_dtype dispatches over these).
//  - storage-only dtypes (the float8 formats e4m3fn, e4m3fnuz, e5m2, e5m2fnuz and e8m0, the
//    float4 format e2m1, and the sub-byte integers i4/u4/i2/u2): rlx holds them and runs
//    Cast to and from every dtype and the data movement ops on them (reshape, transpose,
//    narrow, concat, expand, reverse, gather, where, control flow); anything else is refused
//    when the node is added (cast to a compute dtype first). In memory every element takes
//    one byte: the format's bits (low bits) for the float formats, the value itself for the
//    sub-byte integers (i4/i2 sign-extended int8, u4/u2 uint8). Only files pack them (ONNX:
//    two 4-bit or four 2-bit values a byte, the first in the low bits); conversions live in
//    rlx/dtype_narrow.h.
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <string_view>
#include <type_traits>

#include "rlx/error.h"

namespace rlx {

// New values are appended (the numeric values of the first eleven stay as they were).
enum class DType : uint8_t {
  F32, F16, BF16, F64, I8, I16, I32, I64, U8, U32, Bool,
  U16, U64,
  F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, F8E8M0, F4E2M1, I4, U4, I2, U2
};

inline constexpr DType kAllDTypes[] = {
    DType::F32,      DType::F16,        DType::BF16,   DType::F64,        DType::I8,     DType::I16,
    DType::I32,      DType::I64,        DType::U8,     DType::U32,        DType::Bool,   DType::U16,
    DType::U64,      DType::F8E4M3FN,   DType::F8E4M3FNUZ, DType::F8E5M2, DType::F8E5M2FNUZ,
    DType::F8E8M0,   DType::F4E2M1,     DType::I4,     DType::U4,         DType::I2,     DType::U2};
inline constexpr size_t kDTypeCount = std::size(kAllDTypes);
// The dtypes every op family computes on (visit_dtype dispatches over these).
inline constexpr DType kComputeDTypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I8,
                                           DType::I16, DType::I32, DType::I64,  DType::U8,  DType::U16,
                                           DType::U32, DType::U64, DType::Bool};

size_t dtype_size(DType t);           // bytes per element in memory (bool and the storage-only dtypes: one byte)
int dtype_bits(DType t);              // bits of one value in a packed file (4 for i4/u4/f4e2m1, 2 for i2/u2, else 8 * size)
const char* dtype_name(DType t);      // "f32", "f16", ...
DType dtype_from_name(std::string_view name);  // throws rlx::Error on unknown names
bool is_valid_dtype(DType t);         // a value of the enum (not a corrupt byte)
bool is_float(DType t);               // the compute floats: f32, f16, bf16, f64
bool is_int(DType t);                 // the compute integers, signed or unsigned (not bool)
bool is_signed_int(DType t);          // i8, i16, i32, i64
bool is_storage_only(DType t);        // float8 / float4 / sub-byte integer formats (see above)
bool is_narrow_float(DType t);        // f8e4m3fn, f8e4m3fnuz, f8e5m2, f8e5m2fnuz, f8e8m0, f4e2m1
bool is_narrow_int(DType t);          // i4, u4, i2, u2

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
template <> struct dtype_storage<DType::U16> { using type = uint16_t; };
template <> struct dtype_storage<DType::U32> { using type = uint32_t; };
template <> struct dtype_storage<DType::U64> { using type = uint64_t; };
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
template <> constexpr DType dtype_of<uint16_t>() { return DType::U16; }
template <> constexpr DType dtype_of<uint32_t>() { return DType::U32; }
template <> constexpr DType dtype_of<uint64_t>() { return DType::U64; }
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }

// The rlx::Error a kernel raises for a storage-only dtype it does not run (visit_dtype's).
[[noreturn]] void throw_storage_only(DType t, const char* what);

// Calls f.template operator()<DType::X>() for the runtime dtype `t`, one of the compute dtypes;
// a storage-only dtype is an rlx::Error (those run only through Cast and byte copies).
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
    case DType::U16: return f.template operator()<DType::U16>();
    case DType::U32: return f.template operator()<DType::U32>();
    case DType::U64: return f.template operator()<DType::U64>();
    case DType::Bool: return f.template operator()<DType::Bool>();
    case DType::F8E4M3FN: case DType::F8E4M3FNUZ: case DType::F8E5M2: case DType::F8E5M2FNUZ:
    case DType::F8E8M0: case DType::F4E2M1: case DType::I4: case DType::U4: case DType::I2: case DType::U2:
      throw_storage_only(t, "this kernel");
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
