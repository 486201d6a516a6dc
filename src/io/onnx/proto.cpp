#include "io/onnx/proto.h"

#include <google/protobuf/io/coded_stream.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <limits>

#include "io/file_access.h"
#include "rlx/dtype_narrow.h"
#include "rlx/limits.h"

namespace rlx::onnx_io {
namespace {

static_assert(std::endian::native == std::endian::little, "ONNX raw_data is little-endian");

using TP = onnx::TensorProto;

// dims for a message, at most 16 of them (a hostile tensor may have millions).
std::string short_dims(const std::vector<int64_t>& dims) {
  if (dims.size() <= 16) return dims_str(dims);
  std::string s = dims_str(std::vector<int64_t>(dims.begin(), dims.begin() + 16));
  s.pop_back();  // the closing ']'
  return s + ",... (" + std::to_string(dims.size()) + " dims)]";
}

// The dims of `t`, each >= 0, with the element and byte counts checked against overflow and
// the size policy (Limits) before anything is allocated.
std::vector<int64_t> checked_dims(const TP& t, DType dt, const std::string& where) {
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] < 0)
      throw Error(where + ": dim " + std::to_string(i) + " is negative (" + std::to_string(dims[i]) + " in " +
                  short_dims(dims) + "); tensor dims must be >= 0");
  checked_nbytes(dims, dt, where);
  return dims;
}

// The inclusive range of values int32_data may hold for a type stored there (the 16-bit
// floats as their bit patterns), so that an out-of-range value is an error, never wrapped.
struct IntRange {
  int64_t lo, hi;
};
IntRange int32_data_range(DType dt) {
  if (is_storage_only(dt)) return {0, 255};  // float8 bits, or packed 4-bit / 2-bit bytes
  switch (dt) {
    case DType::I8: return {-128, 127};
    case DType::U8: return {0, 255};
    case DType::I16: return {-32768, 32767};
    case DType::F16:
    case DType::BF16:
    case DType::U16: return {0, 65535};
    case DType::Bool: return {0, 1};
    default: return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
  }
}

// Bytes of n elements of dt in a file: sub-byte dtypes are packed (the first element in the
// low bits), every other dtype takes dtype_size bytes an element.
int64_t file_bytes(DType dt, int64_t n, const std::string& where) {
  const int bits = dtype_bits(dt);
  if (bits >= 8) return checked_mul(n, static_cast<int64_t>(dtype_size(dt)), where);
  const int per_byte = 8 / bits;
  return n / per_byte + (n % per_byte != 0 ? 1 : 0);
}

// A tensor from its file bytes (`size` == file_bytes), unpacking sub-byte dtypes to one
// element a byte (i4/i2 sign-extended).
Tensor from_file_bytes(DType dt, const std::vector<int64_t>& dims, const void* data, size_t size) {
  const int bits = dtype_bits(dt);
  if (bits >= 8) return Tensor::from_bytes(dt, dims, data, size);
  Tensor out = Tensor::empty(dt, dims);
  const auto* src = static_cast<const uint8_t*>(data);
  auto* dst = static_cast<uint8_t*>(out.raw());
  const int64_t n = out.numel();
  const int per_byte = 8 / bits;
  const unsigned mask = (1u << bits) - 1;
  for (int64_t i = 0; i < n; ++i) {
    const unsigned v = (src[i / per_byte] >> ((i % per_byte) * bits)) & mask;
    dst[i] = is_narrow_int(dt) ? narrow_int_wrap(dt, v) : static_cast<uint8_t>(v);
  }
  return out;
}

template <class Field>
void check_range(const Field& f, IntRange r, const std::string& type, const std::string& field,
                 const std::string& where) {
  for (int i = 0; i < f.size(); ++i) {
    const auto v = f.Get(i);
    if (static_cast<int64_t>(v) < r.lo || (v > 0 && static_cast<uint64_t>(v) > static_cast<uint64_t>(r.hi)))
      throw Error(where + ": element " + std::to_string(i) + " of " + field + " is " + std::to_string(v) +
                  ", which does not fit " + type + " (valid: " + std::to_string(r.lo) + " to " + std::to_string(r.hi) +
                  "); the tensor is damaged or was written with the wrong type");
  }
}

// Copies a repeated proto field of `count` values into `out` converting each with `conv`.
template <class Field, class T, class Conv>
void copy_field(const Field& f, int64_t count, T* out, Conv conv, const std::string& where, const char* field) {
  if (static_cast<int64_t>(f.size()) != count)
    throw Error(where + ": " + field + " holds " + std::to_string(f.size()) + " values but the dims need " +
                std::to_string(count));
  for (int64_t i = 0; i < count; ++i) out[i] = conv(f.Get(static_cast<int>(i)));
}

std::string read_external(const TP& t, const std::string& base_dir, int64_t want, const std::string& where) {
  std::string location;
  int64_t offset = 0, length = -1;
  bool has_location = false, has_offset = false, has_length = false;
  for (const auto& kv : t.external_data()) {
    const std::string key = io::printable(kv.key());
    auto to_int = [&](const std::string& v) {
      if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos)
        throw Error(where + ": external_data '" + key + "' is not a non-negative integer: '" + io::printable(v) + "'");
      return std::stoll(v);
    };
    bool* seen = nullptr;
    if (kv.key() == "location") seen = &has_location, location = kv.value();
    else if (kv.key() == "offset") seen = &has_offset, offset = to_int(kv.value());
    else if (kv.key() == "length") seen = &has_length, length = to_int(kv.value());
    else if (kv.key() == "checksum") continue;  // optional SHA-1, not verified
    else throw Error(where + ": unknown external_data key '" + key + "'");
    if (*seen) throw Error(where + ": external_data key '" + key + "' is given twice; keep one");
    *seen = true;
  }
  if (location.empty()) throw Error(where + ": external data without a 'location'");
  const std::string loc = io::printable(location);
  if (base_dir.empty())
    throw Error(where + ": tensor data is in external file '" + loc +
                "' but the model was not loaded from a file; load it with import_onnx(path)");
  if (location.find('\0') != std::string::npos)
    throw Error(where + ": external data location '" + loc + "' contains a NUL character");
  const std::filesystem::path rel(location);
  if (rel.is_absolute())
    throw Error(where + ": external data location '" + loc + "' must be relative to the model's folder");
  for (const auto& part : rel)
    if (part == "..") throw Error(where + ": external data location '" + loc + "' leaves the model's folder");
  // Regular files only, inside the model's folder after every symbolic link is resolved.
  const std::string what = "external data file '" + loc + "' of " + where;
  const std::filesystem::path full = io::resolve_inside(base_dir, location, what);
  const io::RegularFile f(full.string(), what);
  if (length < 0) length = want;
  if (length != want)
    throw Error(where + ": external data length " + std::to_string(length) + " does not match the " +
                std::to_string(want) + " bytes the dims and type need");
  const auto file_size = static_cast<int64_t>(f.size());
  if (offset > file_size || length > file_size - offset)
    throw Error(where + ": external data [" + std::to_string(offset) + ", " + std::to_string(offset) + "+" +
                std::to_string(length) + ") lies beyond the end of '" + io::printable(full.string()) + "' (" +
                std::to_string(file_size) + " bytes)");
  std::string bytes(static_cast<size_t>(length), '\0');
  f.read_at(static_cast<uint64_t>(offset), bytes.data(), static_cast<uint64_t>(length));
  return bytes;
}

// BOOL data is one byte per element, 0 or 1; anything else is damaged data, not "true".
void check_bool_bytes(const std::string& bytes, const std::string& field, const std::string& where) {
  for (size_t i = 0; i < bytes.size(); ++i)
    if (static_cast<unsigned char>(bytes[i]) > 1)
      throw Error(where + ": element " + std::to_string(i) + " of " + field + " is " +
                  std::to_string(static_cast<unsigned char>(bytes[i])) +
                  ", which is not a BOOL (0 or 1); the tensor is damaged or was written with the wrong type");
}

}  // namespace

DType dtype_from_onnx(int32_t code, const std::string& where) {
  switch (code) {
    case TP::FLOAT: return DType::F32;
    case TP::UINT8: return DType::U8;
    case TP::INT8: return DType::I8;
    case TP::INT16: return DType::I16;
    case TP::INT32: return DType::I32;
    case TP::INT64: return DType::I64;
    case TP::BOOL: return DType::Bool;
    case TP::FLOAT16: return DType::F16;
    case TP::DOUBLE: return DType::F64;
    case TP::UINT32: return DType::U32;
    case TP::BFLOAT16: return DType::BF16;
    case TP::UINT16: return DType::U16;
    case TP::UINT64: return DType::U64;
    // float8, float4 and the sub-byte integers by number: libonnx-dev's schema may predate them.
    case 17: return DType::F8E4M3FN;
    case 18: return DType::F8E4M3FNUZ;
    case 19: return DType::F8E5M2;
    case 20: return DType::F8E5M2FNUZ;
    case 21: return DType::U4;
    case 22: return DType::I4;
    case 23: return DType::F4E2M1;
    case 24: return DType::F8E8M0;
    case 25: return DType::U2;
    case 26: return DType::I2;
    default: break;
  }
  throw Error(where + ": element type " + onnx_type_name(code) +
              " is not supported (rlx stores float32/16, bfloat16, float64, float8 (e4m3fn, e4m3fnuz, e5m2, "
              "e5m2fnuz, e8m0), float4e2m1, int2/4/8/16/32/64, uint2/4/8/16/32/64 and bool; not strings or complex)");
}

std::string onnx_type_name(int32_t code) {
  switch (code) {
    case 0: return "UNDEFINED";
    case 1: return "FLOAT";
    case 2: return "UINT8";
    case 3: return "INT8";
    case 4: return "UINT16";
    case 5: return "INT16";
    case 6: return "INT32";
    case 7: return "INT64";
    case 8: return "STRING";
    case 9: return "BOOL";
    case 10: return "FLOAT16";
    case 11: return "DOUBLE";
    case 12: return "UINT32";
    case 13: return "UINT64";
    case 14: return "COMPLEX64";
    case 15: return "COMPLEX128";
    case 16: return "BFLOAT16";
    case 17: return "FLOAT8E4M3FN";
    case 18: return "FLOAT8E4M3FNUZ";
    case 19: return "FLOAT8E5M2";
    case 20: return "FLOAT8E5M2FNUZ";
    case 21: return "UINT4";
    case 22: return "INT4";
    case 23: return "FLOAT4E2M1";
    case 24: return "FLOAT8E8M0";
    case 25: return "UINT2";
    case 26: return "INT2";
    default: return "type code " + std::to_string(code);
  }
}

Tensor tensor_from_proto(const TP& t, const std::string& base_dir, const std::string& where) {
  const DType dt = dtype_from_onnx(t.data_type(), where);
  const auto dims = checked_dims(t, dt, where);
  if (t.has_segment()) throw Error(where + ": segmented tensors are not supported");
  const int64_t n = checked_numel(dims, where);
  checked_nbytes(dims, dt, where);  // the size policy, on the unpacked tensor
  const int64_t want_bytes = file_bytes(dt, n, where);  // packed for the sub-byte dtypes
  const auto want = static_cast<size_t>(want_bytes);
  if (t.data_location() != TP::DEFAULT && t.data_location() != TP::EXTERNAL)
    throw Error(where + ": data_location " + std::to_string(static_cast<int>(t.data_location())) + " is not valid "
                "(DEFAULT or EXTERNAL)");
  if (t.data_location() == TP::DEFAULT && t.external_data_size() > 0)
    throw Error(where + ": the tensor has external_data entries but its data_location is not EXTERNAL");
  if (t.data_location() == TP::EXTERNAL) {
    if (t.has_raw_data() || t.float_data_size() || t.int32_data_size() || t.int64_data_size() ||
        t.double_data_size() || t.uint64_data_size() || t.string_data_size())
      throw Error(where + ": the tensor's data is EXTERNAL but it also holds data in the model; keep one");
    const std::string bytes = read_external(t, base_dir, want_bytes, where);
    if (dt == DType::Bool) check_bool_bytes(bytes, "external data", where);
    return from_file_bytes(dt, dims, bytes.data(), bytes.size());
  }
  if (t.has_raw_data()) {
    if (t.float_data_size() || t.int32_data_size() || t.int64_data_size() || t.double_data_size() ||
        t.uint64_data_size() || t.string_data_size())
      throw Error(where + ": the tensor holds both raw_data and a typed data field; keep one");
    if (t.raw_data().size() != want)
      throw Error(where + ": raw_data has " + std::to_string(t.raw_data().size()) + " bytes but dims " +
                  short_dims(dims) + " of " + onnx_type_name(t.data_type()) + " need " + std::to_string(want));
    if (dt == DType::Bool) check_bool_bytes(t.raw_data(), "raw_data", where);
    return from_file_bytes(dt, dims, t.raw_data().data(), want);
  }
  // Check the typed field's length before allocating (dims alone may ask for anything).
  int64_t have = 0;
  const char* field = "int32_data";
  switch (dt) {
    case DType::F32: have = t.float_data_size(), field = "float_data"; break;
    case DType::F64: have = t.double_data_size(), field = "double_data"; break;
    case DType::I64: have = t.int64_data_size(), field = "int64_data"; break;
    case DType::U32:
    case DType::U64: have = t.uint64_data_size(), field = "uint64_data"; break;
    default: have = t.int32_data_size(); break;
  }
  // Sub-byte dtypes keep their packed bytes in int32_data, one byte a value.
  const int64_t n_field = dtype_bits(dt) < 8 ? want_bytes : n;
  // Values in a field this type does not use would be ignored: an error instead.
  const std::pair<const char*, int> fields[] = {{"float_data", t.float_data_size()},   {"int32_data", t.int32_data_size()},
                                                {"int64_data", t.int64_data_size()},   {"double_data", t.double_data_size()},
                                                {"uint64_data", t.uint64_data_size()}, {"string_data", t.string_data_size()}};
  for (const auto& [name, size] : fields)
    if (size > 0 && std::string(name) != field)
      throw Error(where + ": the tensor holds " + std::to_string(size) + " values in " + name + ", but a " +
                  onnx_type_name(t.data_type()) + " tensor stores them in " + field +
                  "; the tensor is damaged or was written with the wrong type");
  if (have != n_field)
    throw Error(where + ": the tensor holds " + std::to_string(have) + " values but its dims " + short_dims(dims) +
                " need " + std::to_string(n_field) + (n_field != n ? " (packed bytes)" : ""));
  if (dt == DType::U32)
    check_range(t.uint64_data(), {0, std::numeric_limits<uint32_t>::max()}, "UINT32", "uint64_data", where);
  else if (dt != DType::F32 && dt != DType::F64 && dt != DType::I64 && dt != DType::I32 && dt != DType::U64)
    check_range(t.int32_data(), int32_data_range(dt), onnx_type_name(t.data_type()), "int32_data", where);
  if (dtype_bits(dt) < 8) {
    std::string packed(static_cast<size_t>(n_field), '\0');
    for (int64_t i = 0; i < n_field; ++i) packed[static_cast<size_t>(i)] = static_cast<char>(t.int32_data(static_cast<int>(i)));
    return from_file_bytes(dt, dims, packed.data(), packed.size());
  }
  Tensor out = Tensor::empty(dt, dims);
  void* p = out.raw();
  auto same = [](auto v) { return v; };
  switch (dt) {
    case DType::F32: copy_field(t.float_data(), n, static_cast<float*>(p), same, where, "float_data"); break;
    case DType::F64: copy_field(t.double_data(), n, static_cast<double*>(p), same, where, "double_data"); break;
    case DType::I64: copy_field(t.int64_data(), n, static_cast<int64_t*>(p), same, where, "int64_data"); break;
    case DType::I32: copy_field(t.int32_data(), n, static_cast<int32_t*>(p), same, where, "int32_data"); break;
    case DType::I16:
      copy_field(t.int32_data(), n, static_cast<int16_t*>(p), [](int32_t v) { return static_cast<int16_t>(v); },
                 where, "int32_data");
      break;
    case DType::I8:
      copy_field(t.int32_data(), n, static_cast<int8_t*>(p), [](int32_t v) { return static_cast<int8_t>(v); },
                 where, "int32_data");
      break;
    case DType::U8:
      copy_field(t.int32_data(), n, static_cast<uint8_t*>(p), [](int32_t v) { return static_cast<uint8_t>(v); },
                 where, "int32_data");
      break;
    case DType::Bool:
      copy_field(t.int32_data(), n, static_cast<uint8_t*>(p), [](int32_t v) { return static_cast<uint8_t>(v != 0); },
                 where, "int32_data");
      break;
    case DType::F16:
    case DType::BF16:  // both stored as their 16 bits in int32_data
    case DType::U16:
      copy_field(t.int32_data(), n, static_cast<uint16_t*>(p), [](int32_t v) { return static_cast<uint16_t>(v); },
                 where, "int32_data");
      break;
    case DType::U32:
      copy_field(t.uint64_data(), n, static_cast<uint32_t*>(p), [](uint64_t v) { return static_cast<uint32_t>(v); },
                 where, "uint64_data");
      break;
    case DType::U64: copy_field(t.uint64_data(), n, static_cast<uint64_t*>(p), same, where, "uint64_data"); break;
    case DType::F8E4M3FN:
    case DType::F8E4M3FNUZ:
    case DType::F8E5M2:
    case DType::F8E5M2FNUZ:
    case DType::F8E8M0:  // their bits, one a value in int32_data
      copy_field(t.int32_data(), n, static_cast<uint8_t*>(p), [](int32_t v) { return static_cast<uint8_t>(v); },
                 where, "int32_data");
      break;
    case DType::F4E2M1:
    case DType::I4:
    case DType::U4:
    case DType::I2:
    case DType::U2: break;  // unpacked above
  }
  return out;
}

onnx::ModelProto parse_model(const void* data, size_t size, const std::string& what) {
  if (size > static_cast<size_t>(std::numeric_limits<int>::max()))
    throw Error(what + ": " + std::to_string(size) + " bytes is over protobuf's 2 GiB message limit; "
                "store the weights as external data");
  google::protobuf::io::CodedInputStream in(static_cast<const uint8_t*>(data), static_cast<int>(size));
  // Each level of subgraph nesting is three message levels (Graph -> Node -> Attribute); allow
  // somewhat more than the size policy's nesting depth (the importer then reports a model
  // nested too deep by name), but never so deep that parsing itself could exhaust the stack.
  const int depth = std::min(active_limits().max_nesting_depth, 1000);
  const int recursion_limit = std::max(64, 4 * depth + 64);
  in.SetRecursionLimit(recursion_limit);
  onnx::ModelProto m;
  if (!m.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage())
    throw Error(what + ": not a valid ONNX ModelProto (protobuf parsing failed, or its messages are nested more "
                "than " + std::to_string(recursion_limit) + " levels deep: subgraphs nested far beyond "
                "Limits::max_nesting_depth = " + std::to_string(active_limits().max_nesting_depth) +
                "); is it an .onnx file?");
  return m;
}

std::string read_whole_file(const std::string& path, const std::string& what) {
  // A regular file only (a FIFO or device is an error at once, never a hang), with the OS
  // reason in every failure.
  return io::read_regular_file(path, what + " '" + io::printable(path) + "'");
}

}  // namespace rlx::onnx_io
