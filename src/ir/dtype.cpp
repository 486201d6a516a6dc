#include "rlx/dtype.h"

#include <bit>
#include <cmath>

namespace rlx {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: case DType::U32: return 4;
    case DType::F16: case DType::BF16: case DType::I16: case DType::U16: return 2;
    case DType::F64: case DType::I64: case DType::U64: return 8;
    case DType::I8: case DType::U8: case DType::Bool: return 1;
    case DType::F8E4M3FN: case DType::F8E4M3FNUZ: case DType::F8E5M2: case DType::F8E5M2FNUZ:
    case DType::F8E8M0: case DType::F4E2M1: case DType::I4: case DType::U4: case DType::I2: case DType::U2:
      return 1;  // one element a byte in memory (packed only in files)
  }
  throw Error("dtype_size: corrupt dtype value " + std::to_string(static_cast<int>(t)));
}

int dtype_bits(DType t) {
  switch (t) {
    case DType::I4: case DType::U4: case DType::F4E2M1: return 4;
    case DType::I2: case DType::U2: return 2;
    default: return 8 * static_cast<int>(dtype_size(t));
  }
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::F64: return "f64";
    case DType::I8: return "i8";
    case DType::I16: return "i16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::U8: return "u8";
    case DType::U32: return "u32";
    case DType::Bool: return "bool";
    case DType::U16: return "u16";
    case DType::U64: return "u64";
    case DType::F8E4M3FN: return "f8e4m3fn";
    case DType::F8E4M3FNUZ: return "f8e4m3fnuz";
    case DType::F8E5M2: return "f8e5m2";
    case DType::F8E5M2FNUZ: return "f8e5m2fnuz";
    case DType::F8E8M0: return "f8e8m0";
    case DType::F4E2M1: return "f4e2m1";
    case DType::I4: return "i4";
    case DType::U4: return "u4";
    case DType::I2: return "i2";
    case DType::U2: return "u2";
  }
  return "?";
}

DType dtype_from_name(std::string_view name) {
  for (DType t : kAllDTypes)
    if (name == dtype_name(t)) return t;
  std::string all;
  for (DType t : kAllDTypes) all += std::string(all.empty() ? "" : ", ") + dtype_name(t);
  throw Error("unknown dtype '" + std::string(name) + "' (expected one of " + all + ")");
}

bool is_valid_dtype(DType t) { return static_cast<size_t>(t) < kDTypeCount; }
bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64; }
bool is_int(DType t) {
  return t == DType::I8 || t == DType::I16 || t == DType::I32 || t == DType::I64 || t == DType::U8 ||
         t == DType::U16 || t == DType::U32 || t == DType::U64;
}
bool is_signed_int(DType t) { return t == DType::I8 || t == DType::I16 || t == DType::I32 || t == DType::I64; }
bool is_narrow_float(DType t) {
  return t == DType::F8E4M3FN || t == DType::F8E4M3FNUZ || t == DType::F8E5M2 || t == DType::F8E5M2FNUZ ||
         t == DType::F8E8M0 || t == DType::F4E2M1;
}
bool is_narrow_int(DType t) { return t == DType::I4 || t == DType::U4 || t == DType::I2 || t == DType::U2; }
bool is_storage_only(DType t) { return is_narrow_float(t) || is_narrow_int(t); }

void throw_storage_only(DType t, const char* what) {
  throw Error(std::string(what) + ": " + dtype_name(t) +
              " is a storage-only dtype (rlx runs Cast and data movement on it, nothing else); "
              "cast it to a compute dtype (f32, f16, i32, ...) first");
}

uint16_t f32_to_f16_bits(float v) {
  const uint32_t x = std::bit_cast<uint32_t>(v);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) {  // inf or NaN
    if (mant == 0) return static_cast<uint16_t>(sign | 0x7c00u);
    return static_cast<uint16_t>(sign | 0x7e00u | (mant >> 13));
  }
  const int32_t e = static_cast<int32_t>(exp) - 127 + 15;
  if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (e <= 0) {
    // Subnormal half (or zero): shift the full mantissa (with implicit 1) right.
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    const uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // may carry into exp (ok: -> inf)
  return static_cast<uint16_t>(sign | half);
}

float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    if (mant == 0) {
      out = sign;
    } else {  // subnormal: normalize
      int32_t e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      mant &= 0x3ffu;
      out = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(out);
}

uint16_t f32_to_bf16_bits(float v) {
  const uint32_t x = std::bit_cast<uint32_t>(v);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  const uint32_t lsb = (x >> 16) & 1u;
  const uint32_t rounded = x + 0x7fffu + lsb;
  return static_cast<uint16_t>(rounded >> 16);
}

float bf16_bits_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

}  // namespace rlx
