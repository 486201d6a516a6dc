// Tensor data in graph JSON: inline base64 or 64-byte aligned ranges of a side file.
#include <bit>
#include <cstring>
#include <limits>

#include "io/base64.h"
#include "rlx/dtype_narrow.h"
#include "rlx/limits.h"
#include "io/json_detail.h"

namespace rlx::io {
namespace {

static_assert(std::endian::native == std::endian::little,
              "graph JSON tensor data is little-endian; add byte swapping for big-endian hosts");

constexpr size_t kSideAlign = 64;

std::vector<int64_t> get_static_shape(const json& j, const std::string& where) {
  expect_array(j, where);
  std::vector<int64_t> dims;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const int64_t d = get_i64(j[i], at);
    if (d < 0) json_fail(at, "dim " + std::to_string(d) + " is negative");
    dims.push_back(d);
  }
  return dims;
}

// Byte count of a tensor, checked against overflow and the size policy (rlx/limits.h).
uint64_t tensor_nbytes(DType dtype, const std::vector<int64_t>& dims, const std::string& where) {
  try {
    return static_cast<uint64_t>(checked_nbytes(dims, dtype, "the tensor"));
  } catch (const Error& e) {
    json_fail(where, e.what());
  }
}

// Bytes that are no value of the dtype (bool other than 0/1, sub-byte values out of range): errors.
void check_stored_bytes(const Tensor& t, const std::string& where) {
  const auto* p = static_cast<const uint8_t*>(t.raw());
  if (t.dtype() == DType::Bool) {
    for (size_t i = 0; i < t.nbytes(); ++i)
      if (p[i] > 1) json_fail(where, "bool tensor element " + std::to_string(i) + " is " + std::to_string(p[i]) + ", expected 0 or 1");
    return;
  }
  // Sub-byte dtypes hold one value a byte: the value (i4/i2 sign-extended) or f4e2m1's 4 bits.
  const int bits = dtype_bits(t.dtype());
  if (bits >= 8) return;
  for (size_t i = 0; i < t.nbytes(); ++i) {
    const bool ok = t.dtype() == DType::I4 || t.dtype() == DType::I2
                        ? narrow_int_wrap(t.dtype(), static_cast<uint64_t>(static_cast<int8_t>(p[i]))) == p[i]
                        : p[i] < (1u << bits);
    if (!ok)
      json_fail(where, std::string(dtype_name(t.dtype())) + " tensor element " + std::to_string(i) + " is the byte " +
                           std::to_string(p[i]) + ", which is not a stored " + dtype_name(t.dtype()) + " value");
  }
}

}  // namespace

json TensorWriter::write(const Tensor& t, const std::string& where) {
  if (!t.defined()) json_fail(where, "tensor has no data");
  json j{{"dtype", dtype_name(t.dtype())}, {"shape", t.shape()}};
  if (inline_) {
    j["data"] = base64_encode(t.raw(), t.nbytes());
  } else {
    const size_t offset = (side_.size() + kSideAlign - 1) / kSideAlign * kSideAlign;
    side_.resize(offset, '\0');
    side_.append(static_cast<const char*>(t.raw()), t.nbytes());
    j["offset"] = offset;
    j["nbytes"] = t.nbytes();
  }
  return j;
}

void TensorReader::open(const std::string& where) {
  if (file_) return;
  if (path_.empty())
    json_fail(where, "tensor data is in a side file (\"offset\"/\"nbytes\") but the document names no \"data_file\"");
  try {
    file_ = std::make_unique<RegularFile>(path_, "the side data file '" + printable(path_) + "'");
  } catch (const Error& e) {
    json_fail(where, e.what());
  }
}

Tensor TensorReader::read(const json& j, const std::string& where) {
  expect_object(j, where);
  check_keys(j, {"dtype", "shape", "data", "offset", "nbytes"}, where);
  const DType dtype = get_dtype(require_key(j, "dtype", where), json_at(where, "field 'dtype'"));
  std::vector<int64_t> dims = get_static_shape(require_key(j, "shape", where), json_at(where, "field 'shape'"));
  const uint64_t nbytes = tensor_nbytes(dtype, dims, json_at(where, "field 'shape'"));
  const bool has_inline = j.contains("data");
  const bool has_side = j.contains("offset") || j.contains("nbytes");
  if (has_inline == has_side)
    json_fail(where, "a tensor needs either \"data\" (inline base64) or \"offset\" and \"nbytes\" (side file), not " +
                         std::string(has_inline ? "both" : "neither"));
  if (has_inline) {
    const std::string at = json_at(where, "field 'data'");
    const std::string text = get_string(j["data"], at);
    if (base64_decoded_size(text) != nbytes || text.size() % 4 != 0)
      json_fail(at, "base64 data holds " + std::to_string(base64_decoded_size(text)) + " bytes but " +
                        std::string(dtype_name(dtype)) + dims_str(dims) + " needs " + std::to_string(nbytes));
    std::vector<uint8_t> bytes;
    try {
      bytes = base64_decode(text);
    } catch (const Error& e) {
      json_fail(at, e.what());
    }
    Tensor t = Tensor::from_bytes(dtype, std::move(dims), bytes.data(), bytes.size());
    check_stored_bytes(t, at);
    return t;
  }
  const uint64_t offset = get_u64(require_key(j, "offset", where), json_at(where, "field 'offset'"));
  const uint64_t stored = get_u64(require_key(j, "nbytes", where), json_at(where, "field 'nbytes'"));
  if (stored != nbytes)
    json_fail(json_at(where, "field 'nbytes'"), "is " + std::to_string(stored) + " but " +
                                                     std::string(dtype_name(dtype)) + dims_str(dims) + " needs " +
                                                     std::to_string(nbytes));
  open(where);
  const uint64_t size = file_->size();
  if (offset > size || nbytes > size - offset)
    json_fail(where, "bytes [" + std::to_string(offset) + ", " + std::to_string(offset) + "+" + std::to_string(nbytes) +
                         ") lie outside the side data file '" + printable(path_) + "' of " + std::to_string(size) + " bytes");
  Tensor t = Tensor::empty(dtype, std::move(dims));
  if (nbytes > 0) {
    try {
      file_->read_at(offset, t.raw(), nbytes);
    } catch (const Error& e) {
      json_fail(where, e.what());
    }
  }
  check_stored_bytes(t, where);
  return t;
}

}  // namespace rlx::io
