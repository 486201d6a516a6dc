#include "io/onnx/proto.h"

#include <google/protobuf/io/coded_stream.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

namespace rlx::onnx_io {
namespace {

static_assert(std::endian::native == std::endian::little, "ONNX raw_data is little-endian");

using TP = onnx::TensorProto;

// Size limits that keep a malicious file from asking for absurd allocations.
constexpr int64_t kMaxElements = int64_t{1} << 34;

std::vector<int64_t> checked_dims(const TP& t, const std::string& where) {
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) throw Error(where + ": tensor has a negative dim " + std::to_string(d) + " in " + dims_str(dims));
    if (d != 0 && n > kMaxElements / d)
      throw Error(where + ": tensor dims " + dims_str(dims) + " hold more than 2^34 elements");
    n *= d;
  }
  return dims;
}

// Copies a repeated proto field of `count` values into `out` converting each with `conv`.
template <class Field, class T, class Conv>
void copy_field(const Field& f, int64_t count, T* out, Conv conv, const std::string& where, const char* field) {
  if (static_cast<int64_t>(f.size()) != count)
    throw Error(where + ": " + field + " holds " + std::to_string(f.size()) + " values but the dims need " +
                std::to_string(count));
  for (int64_t i = 0; i < count; ++i) out[i] = conv(f.Get(static_cast<int>(i)));
}

std::string read_external(const TP& t, const std::string& base_dir, size_t want, const std::string& where) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : t.external_data()) {
    auto to_int = [&](const std::string& v) {
      if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos)
        throw Error(where + ": external_data '" + kv.key() + "' is not a non-negative integer: '" + v + "'");
      return std::stoll(v);
    };
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset") offset = to_int(kv.value());
    else if (kv.key() == "length") length = to_int(kv.value());
    else if (kv.key() == "checksum") continue;  // optional SHA-1, not verified
    else throw Error(where + ": unknown external_data key '" + kv.key() + "'");
  }
  if (location.empty()) throw Error(where + ": external data without a 'location'");
  if (base_dir.empty())
    throw Error(where + ": tensor data is in external file '" + location +
                "' but the model was not loaded from a file; load it with import_onnx(path)");
  const std::filesystem::path rel(location);
  if (rel.is_absolute())
    throw Error(where + ": external data location '" + location + "' must be relative to the model's folder");
  for (const auto& part : rel)
    if (part == "..") throw Error(where + ": external data location '" + location + "' leaves the model's folder");
  const std::filesystem::path full = std::filesystem::path(base_dir) / rel;
  std::ifstream f(full, std::ios::binary);
  if (!f) throw Error(where + ": cannot open external data file '" + full.string() + "'");
  f.seekg(0, std::ios::end);
  const auto file_size = static_cast<int64_t>(f.tellg());
  if (length < 0) length = static_cast<int64_t>(want);
  if (static_cast<size_t>(length) != want)
    throw Error(where + ": external data length " + std::to_string(length) + " does not match the " +
                std::to_string(want) + " bytes the dims and type need");
  if (offset > file_size || length > file_size - offset)
    throw Error(where + ": external data [" + std::to_string(offset) + ", " + std::to_string(offset + length) +
                ") lies beyond the end of '" + full.string() + "' (" + std::to_string(file_size) + " bytes)");
  std::string bytes(static_cast<size_t>(length), '\0');
  f.seekg(offset);
  f.read(bytes.data(), length);
  if (!f) throw Error(where + ": reading external data from '" + full.string() + "' failed");
  return bytes;
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
    default: break;
  }
  throw Error(where + ": element type " + onnx_type_name(code) +
              " is not supported (rlx stores float32/16, bfloat16, float64, int8/16/32/64, uint8/32 and bool)");
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
  const auto dims = checked_dims(t, where);
  if (t.has_segment()) throw Error(where + ": segmented tensors are not supported");
  const int64_t n = product(dims);
  const size_t want = static_cast<size_t>(n) * dtype_size(dt);
  if (t.data_location() == TP::EXTERNAL) {
    const std::string bytes = read_external(t, base_dir, want, where);
    return Tensor::from_bytes(dt, dims, bytes.data(), bytes.size());
  }
  if (t.has_raw_data()) {
    if (t.raw_data().size() != want)
      throw Error(where + ": raw_data has " + std::to_string(t.raw_data().size()) + " bytes but dims " +
                  dims_str(dims) + " of " + onnx_type_name(t.data_type()) + " need " + std::to_string(want));
    Tensor out = Tensor::from_bytes(dt, dims, t.raw_data().data(), want);
    if (dt == DType::Bool) {  // normalize to 0/1
      auto* p = static_cast<uint8_t*>(out.raw());
      for (int64_t i = 0; i < n; ++i) p[i] = p[i] ? 1 : 0;
    }
    return out;
  }
  // Check the typed field's length before allocating (dims alone may ask for anything).
  int64_t have = 0;
  switch (dt) {
    case DType::F32: have = t.float_data_size(); break;
    case DType::F64: have = t.double_data_size(); break;
    case DType::I64: have = t.int64_data_size(); break;
    case DType::U32: have = t.uint64_data_size(); break;
    default: have = t.int32_data_size(); break;
  }
  if (have != n)
    throw Error(where + ": the tensor holds " + std::to_string(have) + " values but its dims " + dims_str(dims) +
                " need " + std::to_string(n));
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
      copy_field(t.int32_data(), n, static_cast<uint16_t*>(p), [](int32_t v) { return static_cast<uint16_t>(v); },
                 where, "int32_data");
      break;
    case DType::U32:
      copy_field(t.uint64_data(), n, static_cast<uint32_t*>(p), [](uint64_t v) { return static_cast<uint32_t>(v); },
                 where, "uint64_data");
      break;
  }
  return out;
}

onnx::ModelProto parse_model(const void* data, size_t size, const std::string& what) {
  if (size > static_cast<size_t>(std::numeric_limits<int>::max()))
    throw Error(what + ": " + std::to_string(size) + " bytes is over protobuf's 2 GiB message limit; "
                "store the weights as external data");
  google::protobuf::io::CodedInputStream in(static_cast<const uint8_t*>(data), static_cast<int>(size));
  in.SetRecursionLimit(64);
  onnx::ModelProto m;
  if (!m.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage())
    throw Error(what + ": not a valid ONNX ModelProto (protobuf parsing failed); is it an .onnx file?");
  return m;
}

std::string read_whole_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error(what + " '" + path + "' is a directory");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot open " + what + " '" + path + "'");
  f.seekg(0, std::ios::end);
  const auto size = f.tellg();
  if (size < 0) throw Error("cannot read " + what + " '" + path + "'");
  std::string bytes(static_cast<size_t>(size), '\0');
  f.seekg(0);
  f.read(bytes.data(), size);
  if (!f) throw Error("reading " + what + " '" + path + "' failed");
  return bytes;
}

}  // namespace rlx::onnx_io
