// GGUF metadata values: construction, typed access, text form.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "io/gguf_detail.h"
#include "io/file_access.h"
#include "rlx/gguf.h"

namespace rlx {

namespace gguf_detail {

size_t scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::Bool: return 1;
    case GgufValueType::U16: case GgufValueType::I16: return 2;
    case GgufValueType::U32: case GgufValueType::I32: case GgufValueType::F32: return 4;
    case GgufValueType::U64: case GgufValueType::I64: case GgufValueType::F64: return 8;
    case GgufValueType::String: case GgufValueType::Array: return 0;
  }
  return 0;
}

bool is_signed(GgufValueType t) {
  return t == GgufValueType::I8 || t == GgufValueType::I16 || t == GgufValueType::I32 || t == GgufValueType::I64;
}
bool is_unsigned(GgufValueType t) {
  return t == GgufValueType::U8 || t == GgufValueType::U16 || t == GgufValueType::U32 || t == GgufValueType::U64;
}
bool is_known(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::F64); }

// Sign-extends the `size`-byte little-endian integer in `bits`.
int64_t sign_extend(uint64_t bits, size_t size) {
  if (size == 8) return static_cast<int64_t>(bits);
  const unsigned shift = static_cast<unsigned>(64 - 8 * size);
  return static_cast<int64_t>(bits << shift) >> shift;
}

}  // namespace gguf_detail

using namespace gguf_detail;

namespace {

GgufValue scalar(GgufValueType t, uint64_t bits) { return GgufParser::make_scalar(t, bits); }

std::string fmt_double(double d) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", d);
  return buf;
}

}  // namespace

const char* gguf_value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::U8: return "u8";
    case GgufValueType::I8: return "i8";
    case GgufValueType::U16: return "u16";
    case GgufValueType::I16: return "i16";
    case GgufValueType::U32: return "u32";
    case GgufValueType::I32: return "i32";
    case GgufValueType::F32: return "f32";
    case GgufValueType::Bool: return "bool";
    case GgufValueType::String: return "string";
    case GgufValueType::Array: return "array";
    case GgufValueType::U64: return "u64";
    case GgufValueType::I64: return "i64";
    case GgufValueType::F64: return "f64";
  }
  return "unknown";
}

GgufValue GgufValue::u8(uint8_t v) { return scalar(GgufValueType::U8, v); }
GgufValue GgufValue::i8(int8_t v) { return scalar(GgufValueType::I8, static_cast<uint8_t>(v)); }
GgufValue GgufValue::u16(uint16_t v) { return scalar(GgufValueType::U16, v); }
GgufValue GgufValue::i16(int16_t v) { return scalar(GgufValueType::I16, static_cast<uint16_t>(v)); }
GgufValue GgufValue::u32(uint32_t v) { return scalar(GgufValueType::U32, v); }
GgufValue GgufValue::i32(int32_t v) { return scalar(GgufValueType::I32, static_cast<uint32_t>(v)); }
GgufValue GgufValue::u64(uint64_t v) { return scalar(GgufValueType::U64, v); }
GgufValue GgufValue::i64(int64_t v) { return scalar(GgufValueType::I64, static_cast<uint64_t>(v)); }
GgufValue GgufValue::f32(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return scalar(GgufValueType::F32, b);
}
GgufValue GgufValue::f64(double v) {
  uint64_t b;
  std::memcpy(&b, &v, 8);
  return scalar(GgufValueType::F64, b);
}
GgufValue GgufValue::boolean(bool v) { return scalar(GgufValueType::Bool, v ? 1 : 0); }
GgufValue GgufValue::string(std::string v) {
  GgufValue out;
  out.type_ = GgufValueType::String;
  out.str_ = std::move(v);
  return out;
}

namespace {

// The bits of integer `v` as a `t` value; rlx::Error when it does not fit.
uint64_t int_bits(GgufValueType t, int64_t v, size_t index) {
  const size_t size = scalar_size(t);
  bool fits;
  if (t == GgufValueType::Bool) fits = v == 0 || v == 1;
  else if (is_signed(t)) fits = size == 8 || (v >= -(int64_t{1} << (8 * size - 1)) && v < (int64_t{1} << (8 * size - 1)));
  else fits = v >= 0 && (size == 8 || v < (int64_t{1} << (8 * size)));
  if (!fits)
    throw Error("GgufValue: array element " + std::to_string(index) + " (" + std::to_string(v) + ") does not fit " +
                gguf_value_type_name(t));
  const uint64_t bits = static_cast<uint64_t>(v);
  return size == 8 ? bits : bits & ((uint64_t{1} << (8 * size)) - 1);
}

GgufValue packed_array(GgufValueType t, size_t n) {
  if (scalar_size(t) == 0)
    throw Error(std::string("GgufValue: a packed array needs a number or bool type, not ") + gguf_value_type_name(t));
  return GgufParser::make_array(t, n);
}

}  // namespace

GgufValue GgufValue::array_of(GgufValueType t, const std::vector<double>& values) {
  GgufValue out = packed_array(t, values.size());
  const size_t size = scalar_size(t);
  for (size_t i = 0; i < values.size(); ++i) {
    uint64_t bits;
    if (t == GgufValueType::F32) {
      const auto f = static_cast<float>(values[i]);
      uint32_t b;
      std::memcpy(&b, &f, 4);
      bits = b;
    } else if (t == GgufValueType::F64) {
      std::memcpy(&bits, &values[i], 8);
    } else {
      // Integers: whole values inside the type's range (2^64 and +-2^63 are exact doubles).
      const double v = values[i];
      const bool u64 = t == GgufValueType::U64;
      if (!(v == std::trunc(v)) || (u64 ? (v < 0 || v >= 0x1p64) : (v < -0x1p63 || v >= 0x1p63)))
        throw Error("GgufValue: array element " + std::to_string(i) + " (" + fmt_double(v) +
                    ") is not a whole number in the range of " + gguf_value_type_name(t));
      bits = u64 ? static_cast<uint64_t>(v) : int_bits(t, static_cast<int64_t>(v), i);
    }
    std::memcpy(out.packed_.data() + i * size, &bits, size);
  }
  return out;
}

GgufValue GgufValue::array_of_i64(GgufValueType t, const std::vector<int64_t>& values) {
  if (t == GgufValueType::F32 || t == GgufValueType::F64)
    return array_of(t, std::vector<double>(values.begin(), values.end()));
  GgufValue out = packed_array(t, values.size());
  const size_t size = scalar_size(t);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint64_t bits = int_bits(t, values[i], i);
    std::memcpy(out.packed_.data() + i * size, &bits, size);
  }
  return out;
}

GgufValue GgufValue::strings(std::vector<std::string> values) {
  GgufValue out = GgufParser::make_array(GgufValueType::String, values.size());
  out.strs_ = std::move(values);
  return out;
}

GgufValue GgufValue::array(GgufValueType element_type, std::vector<GgufValue> values) {
  if (element_type == GgufValueType::String) {
    std::vector<std::string> s;
    s.reserve(values.size());
    for (size_t i = 0; i < values.size(); ++i) s.push_back(values[i].as_string());
    return strings(std::move(s));
  }
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].type_ != element_type)
      throw Error("GgufValue::array: element " + std::to_string(i) + " is " + gguf_value_type_name(values[i].type_) +
                  " in an array of " + gguf_value_type_name(element_type));
  if (element_type == GgufValueType::Array) {
    GgufValue out = GgufParser::make_array(GgufValueType::Array, values.size());
    out.items_ = std::move(values);
    return out;
  }
  GgufValue out = packed_array(element_type, values.size());
  const size_t size = scalar_size(element_type);
  for (size_t i = 0; i < values.size(); ++i) std::memcpy(out.packed_.data() + i * size, &values[i].bits_, size);
  return out;
}

bool GgufValue::is_integer() const { return is_signed(type_) || is_unsigned(type_); }

namespace {
[[noreturn]] void wrong(GgufValueType have, const char* want) {
  throw Error(std::string("GGUF value is ") + gguf_value_type_name(have) + ", not " + want);
}
}  // namespace

uint64_t GgufValue::as_u64() const {
  if (is_unsigned(type_)) return bits_;
  if (is_signed(type_)) {
    const int64_t v = sign_extend(bits_, scalar_size(type_));
    if (v < 0) throw Error("GGUF value is " + std::string(gguf_value_type_name(type_)) + " " + std::to_string(v) +
                           ", not a non-negative integer");
    return static_cast<uint64_t>(v);
  }
  wrong(type_, "an integer");
}

int64_t GgufValue::as_i64() const {
  if (is_signed(type_)) return sign_extend(bits_, scalar_size(type_));
  if (is_unsigned(type_)) {
    if (bits_ > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw Error("GGUF value u64 " + std::to_string(bits_) + " does not fit in int64");
    return static_cast<int64_t>(bits_);
  }
  wrong(type_, "an integer");
}

double GgufValue::as_f64() const {
  if (type_ == GgufValueType::F32) {
    float f;
    const auto b = static_cast<uint32_t>(bits_);
    std::memcpy(&f, &b, 4);
    return f;
  }
  if (type_ == GgufValueType::F64) {
    double d;
    std::memcpy(&d, &bits_, 8);
    return d;
  }
  if (is_signed(type_)) return static_cast<double>(sign_extend(bits_, scalar_size(type_)));
  if (is_unsigned(type_)) return static_cast<double>(bits_);
  wrong(type_, "a number");
}

bool GgufValue::as_bool() const {
  if (type_ != GgufValueType::Bool) wrong(type_, "a bool");
  return bits_ != 0;
}

const std::string& GgufValue::as_string() const {
  if (type_ != GgufValueType::String) wrong(type_, "a string");
  return str_;
}

GgufValueType GgufValue::element_type() const {
  if (type_ != GgufValueType::Array) wrong(type_, "an array");
  return elem_;
}

uint64_t GgufValue::size() const {
  if (type_ != GgufValueType::Array) wrong(type_, "an array");
  return count_;
}

GgufValue GgufValue::at(uint64_t i) const {
  if (i >= size()) throw Error("GGUF array index " + std::to_string(i) + " is out of range (" + std::to_string(count_) + " elements)");
  if (elem_ == GgufValueType::String) return string(strs_[i]);
  if (elem_ == GgufValueType::Array) return items_[i];
  const size_t s = scalar_size(elem_);
  uint64_t bits = 0;
  std::memcpy(&bits, packed_.data() + i * s, s);
  return scalar(elem_, bits);
}

const std::vector<std::string>& GgufValue::as_strings() const {
  if (element_type() != GgufValueType::String)
    throw Error(std::string("GGUF value is an array of ") + gguf_value_type_name(elem_) + ", not of strings");
  return strs_;
}

std::vector<int64_t> GgufValue::as_i64s() const {
  const GgufValueType t = element_type();
  if (!(is_signed(t) || is_unsigned(t) || t == GgufValueType::Bool))
    throw Error(std::string("GGUF value is an array of ") + gguf_value_type_name(t) + ", not of integers");
  std::vector<int64_t> out(count_);
  for (uint64_t i = 0; i < count_; ++i) out[i] = t == GgufValueType::Bool ? at(i).bits_ : at(i).as_i64();
  return out;
}

std::vector<double> GgufValue::as_f64s() const {
  const GgufValueType t = element_type();
  if (scalar_size(t) == 0 || t == GgufValueType::Bool)
    throw Error(std::string("GGUF value is an array of ") + gguf_value_type_name(t) + ", not of numbers");
  std::vector<double> out(count_);
  for (uint64_t i = 0; i < count_; ++i) out[i] = at(i).as_f64();
  return out;
}

std::string GgufValue::to_string(size_t max_len) const {
  std::string s;
  switch (type_) {
    case GgufValueType::String: s = "string '" + io::printable(str_, max_len) + "'"; break;
    case GgufValueType::Bool: s = bits_ ? "bool true" : "bool false"; break;
    case GgufValueType::F32: case GgufValueType::F64: s = std::string(gguf_value_type_name(type_)) + " " + fmt_double(as_f64()); break;
    case GgufValueType::Array: {
      s = "array<" + std::string(gguf_value_type_name(elem_)) + ">[" + std::to_string(count_) + "]";
      if (count_ > 0 && elem_ != GgufValueType::Array) {
        s += " [";
        for (uint64_t i = 0; i < count_ && s.size() < max_len; ++i) {
          std::string e = at(i).to_string(max_len);
          e = e.substr(e.find(' ') + 1);  // the element text without its type
          s += (i ? ", " : "") + e;
          if (i + 1 == count_) s += "]";
        }
        if (s.back() != ']') s += ", ...]";
      }
      break;
    }
    default:
      s = std::string(gguf_value_type_name(type_)) + " " +
          (is_signed(type_) ? std::to_string(as_i64()) : std::to_string(bits_));
  }
  if (s.size() > max_len + 16) s = s.substr(0, max_len) + "...";
  return s;
}

bool GgufValue::operator==(const GgufValue& o) const {
  return type_ == o.type_ && bits_ == o.bits_ && str_ == o.str_ && elem_ == o.elem_ && count_ == o.count_ &&
         packed_ == o.packed_ && strs_ == o.strs_ && items_ == o.items_;
}

}  // namespace rlx
