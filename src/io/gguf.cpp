// GGUF reader: maps the file, validates the header, metadata and tensor infos, and reads
// tensors out of the mapping on request (see include/rlx/gguf.h).

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>

#include "io/file_access.h"
#include "io/gguf_detail.h"
#include "quant/ggml_blocks.h"
#include "rlx/gguf.h"
#include "rlx/limits.h"

namespace rlx {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

using namespace gguf_detail;

namespace {

constexpr uint64_t kMaxKeyBytes = 65535;  // the spec's limit for keys; rlx applies it to tensor names too
constexpr uint32_t kMaxDims = 4;
// The least bytes one item can take in the file, for rejecting counts larger than the bytes
// left before anything is reserved.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;               // key length, 1-byte key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;  // name, n_dims, one dim, type, offset

std::string hex4(const uint8_t* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

// A bounds-checked little-endian cursor over the file; every error names the file and offset.
class Cursor {
 public:
  Cursor(const uint8_t* base, uint64_t size, const std::string& what) : p_(base), size_(size), what_(what) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  [[noreturn]] void fail(uint64_t at, const std::string& msg) const {
    throw Error(what_ + ": byte " + std::to_string(at) + ": " + msg);
  }
  void need(uint64_t n, const std::string& item) const {
    if (n > left())
      fail(pos_, item + " needs " + std::to_string(n) + " bytes but the " + std::to_string(size_) +
                     "-byte file ends after " + std::to_string(left()) + " (truncated file?)");
  }
  template <class T>
  T read(const std::string& item) {
    need(sizeof(T), item);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  uint64_t raw_bits(size_t n, const std::string& item) {
    need(n, item);
    uint64_t v = 0;
    std::memcpy(&v, p_ + pos_, n);
    pos_ += n;
    return v;
  }
  std::string bytes(uint64_t n, const std::string& item) {
    need(n, item);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(n));
    pos_ += n;
    return s;
  }
  // A GGUF string: u64 length, then the bytes.
  std::string string(const std::string& item, uint64_t max_len) {
    const uint64_t at = pos_;
    const auto n = read<uint64_t>(item + " length");
    if (n > max_len)
      fail(at, item + " is " + std::to_string(n) + " bytes long, more than the " + std::to_string(max_len) + " allowed");
    return bytes(n, item);
  }

 private:
  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& what_;
};

// Reads one value of type `t` (known); `item` names it ("metadata key 'k'") in errors.
GgufValue read_value(Cursor& c, GgufValueType t, const std::string& item, int depth) {
  if (const size_t size = scalar_size(t)) {
    const uint64_t at = c.pos();
    const uint64_t bits = c.raw_bits(size, item);
    if (t == GgufValueType::Bool && bits > 1)
      c.fail(at, item + " is a bool stored as " + std::to_string(bits) + " (only 0 and 1 are valid)");
    return GgufParser::make_scalar(t, bits);
  }
  if (t == GgufValueType::String)
    return GgufValue::string(c.string(item, std::numeric_limits<uint64_t>::max()));
  // An array: element type, count, elements.
  const int max_depth = active_limits().max_nesting_depth;
  if (depth >= max_depth)
    c.fail(c.pos(), item + " nests arrays deeper than " + std::to_string(max_depth) +
                        " (rlx::Limits::max_nesting_depth)");
  const uint64_t at = c.pos();
  const auto et = c.read<uint32_t>(item + " element type");
  if (!is_known(et))
    c.fail(at, item + " has array element type " + std::to_string(et) + ", which is not a GGUF value type (0..12)");
  const auto elem = static_cast<GgufValueType>(et);
  const uint64_t count_at = c.pos();
  const auto count = c.read<uint64_t>(item + " element count");
  const uint64_t min_elem = elem == GgufValueType::String ? 8 : elem == GgufValueType::Array ? 12 : scalar_size(elem);
  if (count > c.left() / min_elem)
    c.fail(count_at, item + " claims " + std::to_string(count) + " " + gguf_value_type_name(elem) +
                         " elements, more than the " + std::to_string(c.left()) +
                         " bytes left in the file can hold (truncated or corrupt file?)");
  if (const size_t size = scalar_size(elem)) {
    const uint64_t data_at = c.pos();
    std::string bytes = c.bytes(count * size, item);
    if (elem == GgufValueType::Bool)
      for (uint64_t i = 0; i < count; ++i)
        if (static_cast<uint8_t>(bytes[i]) > 1)
          c.fail(data_at + i, item + " element " + std::to_string(i) + " is a bool stored as " +
                                  std::to_string(static_cast<uint8_t>(bytes[i])) + " (only 0 and 1 are valid)");
    return GgufParser::packed_array(elem, count, std::move(bytes));
  }
  std::vector<GgufValue> items;
  std::vector<std::string> strs;
  if (elem == GgufValueType::String) {
    strs.reserve(static_cast<size_t>(count));
    for (uint64_t i = 0; i < count; ++i)
      strs.push_back(c.string(item + " element " + std::to_string(i), std::numeric_limits<uint64_t>::max()));
    return GgufValue::strings(std::move(strs));
  }
  items.reserve(static_cast<size_t>(count));
  for (uint64_t i = 0; i < count; ++i)
    items.push_back(read_value(c, GgufValueType::Array, item + " element " + std::to_string(i), depth + 1));
  return GgufValue::array(GgufValueType::Array, std::move(items));
}

}  // namespace

struct GgufFile::Storage : io::MappedBytes {};

void GgufParser::parse(GgufFile& f) {
  const std::string& what = f.what_;
  Cursor c(f.base_, f.size_, what);
  if (f.size_ < 4) c.fail(0, std::to_string(f.size_) + " bytes is too short for the 4-byte magic 'GGUF'");
  if (std::memcmp(f.base_, "GGUF", 4) != 0)
    c.fail(0, "not a GGUF file: it starts with bytes " + hex4(f.base_, 4) + ", not 'GGUF' (47 47 55 46)");
  c.bytes(4, "magic");
  const auto version = c.read<uint32_t>("the version");
  if (version == 1)
    c.fail(4, "GGUF version 1 (32-bit counts) is not supported; rlx reads versions 2 and 3 (re-convert the model with a current tool)");
  if (version != 2 && version != 3) {
    const uint32_t swapped = __builtin_bswap32(version);
    if (swapped == 2 || swapped == 3)
      c.fail(4, "a big-endian GGUF file (version " + std::to_string(swapped) +
                    " byte-swapped); rlx reads little-endian files only (convert it on a little-endian machine)");
    c.fail(4, "unsupported GGUF version " + std::to_string(version) + " (rlx reads versions 2 and 3)");
  }
  f.version_ = version;
  const auto n_tensors = c.read<uint64_t>("the tensor count");
  const auto n_kv = c.read<uint64_t>("the metadata key/value count");
  if (n_kv > c.left() / kMinKvBytes)
    c.fail(16, "the header claims " + std::to_string(n_kv) + " metadata key/values, more than the " +
                   std::to_string(c.left()) + " bytes left can hold (corrupt or truncated file?)");
  if (n_tensors > c.left() / kMinTensorInfoBytes)
    c.fail(8, "the header claims " + std::to_string(n_tensors) + " tensors, more than the " +
                  std::to_string(c.left()) + " bytes left can hold (corrupt or truncated file?)");

  // Metadata.
  f.metadata_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t key_at = c.pos();
    std::string key = c.string("metadata key #" + std::to_string(i), kMaxKeyBytes);
    if (key.empty()) c.fail(key_at, "metadata key #" + std::to_string(i) + " is empty");
    const std::string item = "metadata key '" + io::printable(key) + "'";
    if (f.meta_index_.count(key)) c.fail(key_at, item + " appears twice; each key may appear once");
    const uint64_t type_at = c.pos();
    const auto t = c.read<uint32_t>(item + " value type");
    if (!is_known(t))
      c.fail(type_at, item + " has value type " + std::to_string(t) + ", which is not a GGUF value type (0..12)");
    GgufValue v = read_value(c, static_cast<GgufValueType>(t), item, 0);
    if (key == "general.alignment") {
      if (v.type() != GgufValueType::U32)
        c.fail(type_at, item + " must be a u32, not " + gguf_value_type_name(v.type()));
      const uint64_t a = v.as_u64();
      if (a == 0 || a % 8 != 0)
        c.fail(type_at, item + " is " + std::to_string(a) + "; the alignment must be a non-zero multiple of 8");
      f.alignment_ = a;
    }
    f.meta_index_.emplace(key, f.metadata_.size());
    f.metadata_.emplace_back(std::move(key), std::move(v));
  }

  // Tensor infos.
  const int64_t max_bytes = active_limits().max_tensor_bytes;
  f.tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const uint64_t info_at = c.pos();
    GgufTensorInfo t;
    t.name = c.string("the name of tensor #" + std::to_string(i), kMaxKeyBytes);
    if (t.name.empty()) c.fail(info_at, "tensor #" + std::to_string(i) + " has an empty name");
    const std::string item = "tensor '" + io::printable(t.name) + "'";
    if (f.index_.count(t.name)) c.fail(info_at, item + " appears twice; tensor names must be unique");
    const uint64_t dims_at = c.pos();
    const auto n_dims = c.read<uint32_t>(item + " dim count");
    if (n_dims < 1 || n_dims > kMaxDims)
      c.fail(dims_at, item + " has " + std::to_string(n_dims) + " dims; GGUF tensors have 1 to " +
                          std::to_string(kMaxDims));
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim_at = c.pos();
      const auto v = c.read<uint64_t>(item + " dim " + std::to_string(d));
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        c.fail(dim_at, item + " dim " + std::to_string(d) + " is " + std::to_string(v) + ", beyond int64 (negative in ggml)");
      t.ne.push_back(static_cast<int64_t>(v));
    }
    const uint64_t type_at = c.pos();
    const auto type = c.read<uint32_t>(item + " type");
    const GgmlTypeInfo* info = ggml_type_info(type);
    if (!info)
      c.fail(type_at, item + " has ggml type " + std::to_string(type) +
                          ", which rlx does not know (its size cannot be computed; see docs/gguf.md for the types read)");
    t.type = info->type;
    const uint64_t offset_at = c.pos();
    t.offset = c.read<uint64_t>(item + " data offset");
    const std::string where = what + ": " + item;
    if (t.ne[0] % info->block_elements != 0)
      c.fail(dims_at, item + " is " + info->name + " with a first (innermost) dim of " + std::to_string(t.ne[0]) +
                          ", not a multiple of its " + std::to_string(info->block_elements) + "-value blocks");
    t.numel = checked_numel(t.shape(), where);
    const int64_t nbytes = ggml_nbytes(t.type, t.numel, where);
    if (nbytes > max_bytes)
      throw Error(where + ": " + info->name + dims_str(t.shape()) + " needs " + std::to_string(nbytes) +
                  " bytes, more than the limit of " + std::to_string(max_bytes) +
                  " (rlx::Limits::max_tensor_bytes; raise it with rlx::ScopedLimits if this size is intended)");
    t.nbytes = static_cast<uint64_t>(nbytes);
    if (t.offset % f.alignment_ != 0)
      c.fail(offset_at, item + " data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                            std::to_string(f.alignment_));
    f.index_.emplace(t.name, f.tensors_.size());
    f.tensors_.push_back(std::move(t));
  }

  // The data section: from the end of the infos, aligned, to the end of the file.
  const uint64_t end = c.pos();
  f.data_offset_ = end + (f.alignment_ - end % f.alignment_) % f.alignment_;
  const uint64_t data_size = f.data_offset_ < f.size_ ? f.size_ - f.data_offset_ : 0;
  for (const auto& t : f.tensors_)
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      throw Error(what + ": tensor '" + io::printable(t.name) + "' (" + ggml_type_name(t.type) + dims_str(t.shape()) +
                  ", " + std::to_string(t.nbytes) + " bytes at data offset " + std::to_string(t.offset) +
                  ") runs past the end of the data section (" + std::to_string(data_size) + " bytes from file byte " +
                  std::to_string(f.data_offset_) + "; truncated file?)");
  // No two non-empty tensors may share bytes.
  std::vector<const GgufTensorInfo*> order;
  for (const auto& t : f.tensors_)
    if (t.nbytes > 0) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < order.size(); ++i)
    if (order[i]->offset < order[i - 1]->offset + order[i - 1]->nbytes)
      throw Error(what + ": tensors '" + io::printable(order[i - 1]->name) + "' [" + std::to_string(order[i - 1]->offset) +
                  ", " + std::to_string(order[i - 1]->offset + order[i - 1]->nbytes) + ") and '" +
                  io::printable(order[i]->name) + "' [" + std::to_string(order[i]->offset) + ", " +
                  std::to_string(order[i]->offset + order[i]->nbytes) + ") overlap in the data section");
}

GgufFile::GgufFile(std::unique_ptr<Storage> storage, const std::string& what)
    : storage_(std::move(storage)), what_(what) {
  base_ = storage_->data();
  size_ = storage_->size();
  translate_errors("GGUF", [&] { GgufParser::parse(*this); });
}

GgufFile::GgufFile(const std::string& path) : what_("GGUF file '" + io::printable(path) + "'") {
  storage_ = std::make_unique<Storage>();
  storage_->map_file(path, what_);
  base_ = storage_->data();
  size_ = storage_->size();
  translate_errors("GGUF", [&] { GgufParser::parse(*this); });
}

GgufFile GgufFile::from_bytes(const void* data, size_t size, const std::string& what) {
  auto s = std::make_unique<Storage>();
  if (size) s->buffer.assign(static_cast<const char*>(data), size);
  return GgufFile(std::move(s), what);
}

GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

const GgufValue* GgufFile::find(const std::string& key) const {
  const auto it = meta_index_.find(key);
  return it == meta_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufValue& GgufFile::value(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) throw Error(what_ + " has no metadata key '" + io::printable(key) + "'");
  return *v;
}

namespace {
template <class F>
auto typed_get(const GgufFile& f, const std::string& key, F&& get) {
  const GgufValue& v = f.value(key);
  try {
    return get(v);
  } catch (const Error& e) {
    throw Error(f.what() + ": metadata key '" + io::printable(key) + "': " + e.what());
  }
}
}  // namespace

std::string GgufFile::get_string(const std::string& key) const {
  return typed_get(*this, key, [](const GgufValue& v) { return v.as_string(); });
}
uint64_t GgufFile::get_u64(const std::string& key) const {
  return typed_get(*this, key, [](const GgufValue& v) { return v.as_u64(); });
}
int64_t GgufFile::get_i64(const std::string& key) const {
  return typed_get(*this, key, [](const GgufValue& v) { return v.as_i64(); });
}
double GgufFile::get_f64(const std::string& key) const {
  return typed_get(*this, key, [](const GgufValue& v) { return v.as_f64(); });
}
bool GgufFile::get_bool(const std::string& key) const {
  return typed_get(*this, key, [](const GgufValue& v) { return v.as_bool(); });
}

const GgufTensorInfo& GgufFile::tensor_info(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) throw Error(what_ + " has no tensor named '" + io::printable(name) + "'");
  return tensors_[it->second];
}

std::span<const uint8_t> GgufFile::raw(const std::string& name) const {
  const GgufTensorInfo& t = tensor_info(name);
  if (t.nbytes == 0) return {};
  return {base_ + data_offset_ + t.offset, static_cast<size_t>(t.nbytes)};
}

Tensor GgufFile::tensor(const std::string& name) const {
  return translate_errors("GgufFile::tensor", [&] {
    const GgufTensorInfo& t = tensor_info(name);
    const auto dtype = dtype_of_ggml(t.type);
    if (!dtype)
      throw Error(what_ + ": tensor '" + io::printable(name) + "' is " + ggml_type_name(t.type) +
                  ", which has no rlx dtype; read it with tensor_f32() (dequantized) or raw()");
    const auto bytes = raw(name);
    return Tensor::from_bytes(*dtype, t.shape(), bytes.data(), bytes.size());
  });
}

Tensor GgufFile::tensor_f32(const std::string& name) const {
  return translate_errors("GgufFile::tensor_f32", [&] {
    const GgufTensorInfo& t = tensor_info(name);
    if (!ggml_type_info(t.type).dequantize)
      throw Error(what_ + ": tensor '" + io::printable(name) + "' is " + ggml_type_name(t.type) + ", which rlx " +
                  (dtype_of_ggml(t.type) ? "reads as integers with tensor()" : "cannot dequantize yet (see docs/gguf.md)"));
    Tensor out = Tensor::empty(DType::F32, t.shape());
    if (t.numel > 0) quant::dequantize(t.type, raw(name).data(), out.data<float>(), t.numel);
    return out;
  });
}

}  // namespace rlx
