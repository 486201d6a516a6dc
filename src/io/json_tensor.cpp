// Tensor data in graph JSON: inline base64 or 64-byte aligned ranges of a side file.
#include <bit>
#include <cstring>
#include <limits>

#include "io/base64.h"
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

// Byte count of a tensor, rejecting overflow.
uint64_t tensor_nbytes(DType dtype, const std::vector<int64_t>& dims, const std::string& where) {
  uint64_t n = dtype_size(dtype);
  for (int64_t d : dims) {
    const auto ud = static_cast<uint64_t>(d);
    if (ud != 0 && n > (uint64_t{1} << 62) / ud) json_fail(where, "tensor shape " + dims_str(dims) + " is too large");
    n *= ud;
  }
  return n;
}

void check_bool_bytes(const Tensor& t, const std::string& where) {
  if (t.dtype() != DType::Bool) return;
  const auto* p = static_cast<const uint8_t*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i)
    if (p[i] > 1) json_fail(where, "bool tensor element " + std::to_string(i) + " is " + std::to_string(p[i]) + ", expected 0 or 1");
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
  if (opened_) return;
  if (path_.empty())
    json_fail(where, "tensor data is in a side file (\"offset\"/\"nbytes\") but the document names no \"data_file\"");
  file_.open(path_, std::ios::binary);
  if (!file_) json_fail(where, "cannot open the side data file '" + path_ + "'");
  file_.seekg(0, std::ios::end);
  const std::streamoff end = file_.tellg();
  if (end < 0) json_fail(where, "cannot determine the size of the side data file '" + path_ + "'");
  size_ = static_cast<uint64_t>(end);
  opened_ = true;
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
    check_bool_bytes(t, at);
    return t;
  }
  const uint64_t offset = get_u64(require_key(j, "offset", where), json_at(where, "field 'offset'"));
  const uint64_t stored = get_u64(require_key(j, "nbytes", where), json_at(where, "field 'nbytes'"));
  if (stored != nbytes)
    json_fail(json_at(where, "field 'nbytes'"), "is " + std::to_string(stored) + " but " +
                                                     std::string(dtype_name(dtype)) + dims_str(dims) + " needs " +
                                                     std::to_string(nbytes));
  open(where);
  if (offset > size_ || nbytes > size_ - offset)
    json_fail(where, "bytes [" + std::to_string(offset) + ", " + std::to_string(offset) + "+" + std::to_string(nbytes) +
                         ") lie outside the side data file '" + path_ + "' of " + std::to_string(size_) + " bytes");
  Tensor t = Tensor::empty(dtype, std::move(dims));
  if (nbytes > 0) {
    file_.clear();
    file_.seekg(static_cast<std::streamoff>(offset));
    file_.read(static_cast<char*>(t.raw()), static_cast<std::streamsize>(nbytes));
    if (!file_ || static_cast<uint64_t>(file_.gcount()) != nbytes)
      json_fail(where, "reading " + std::to_string(nbytes) + " bytes at offset " + std::to_string(offset) + " of '" +
                           path_ + "' failed");
  }
  check_bool_bytes(t, where);
  return t;
}

}  // namespace rlx::io
