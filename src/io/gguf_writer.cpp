// GGUF writer: metadata and tensors collected, then written in one pass (header, key/values,
// tensor infos, padding, aligned tensor data) to memory or through a staged file.
#include <algorithm>
#include <cstring>
#include <limits>

#include "io/file_access.h"
#include "io/gguf_detail.h"
#include "quant/ggml_blocks.h"
#include "rlx/gguf.h"
#include "rlx/limits.h"

namespace rlx {

using namespace gguf_detail;

namespace {

constexpr uint64_t kMaxAlignment = uint64_t{1} << 20;  // 1 MiB: more would only add padding
constexpr size_t kMaxKeyBytes = 65535;
constexpr size_t kMaxNameBytes = 64;  // the spec's limit for tensor names
constexpr size_t kMaxDims = 4;

template <class T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

// The value's bytes without its type tag.
void put_value(std::string& out, const GgufValue& v) {
  const GgufValueType t = v.type();
  if (const size_t size = scalar_size(t)) {
    const uint64_t bits = GgufEncoder::bits(v);
    char b[8];
    std::memcpy(b, &bits, 8);
    out.append(b, size);
    return;
  }
  if (t == GgufValueType::String) return put_string(out, v.as_string());
  const GgufValueType e = v.element_type();
  put<uint32_t>(out, static_cast<uint32_t>(e));
  put<uint64_t>(out, v.size());
  if (scalar_size(e)) out += GgufEncoder::packed(v);
  else if (e == GgufValueType::String)
    for (const auto& s : GgufEncoder::strs(v)) put_string(out, s);
  else
    for (const auto& item : GgufEncoder::items(v)) put_value(out, item);
}

uint64_t align_up(uint64_t x, uint64_t a) { return x + (a - x % a) % a; }

// ggml dims of a row-major shape (a scalar is [1]).
std::vector<int64_t> ne_of(const std::vector<int64_t>& shape, const std::string& what) {
  if (shape.size() > kMaxDims)
    throw Error(what + ": rank " + std::to_string(shape.size()) + " tensors cannot be stored in GGUF (at most 4 dims)");
  if (shape.empty()) return {1};
  return {shape.rbegin(), shape.rend()};
}

}  // namespace

GgufWriter::GgufWriter(uint32_t version) : version_(version) {
  if (version != 2 && version != 3)
    throw Error("GgufWriter: version " + std::to_string(version) + " is not supported (2 or 3)");
}

void GgufWriter::set_alignment(uint64_t alignment) {
  if (alignment == 0 || alignment % 8 != 0 || alignment > kMaxAlignment)
    throw Error("GgufWriter: alignment " + std::to_string(alignment) +
                " must be a non-zero multiple of 8 (the GGUF spec) of at most 1 MiB");
  alignment_ = alignment;
  alignment_set_ = true;
}

void GgufWriter::add(const std::string& key, GgufValue value) {
  if (key.empty() || key.size() > kMaxKeyBytes)
    throw Error("GgufWriter: metadata key '" + io::printable(key) + "' must have 1 to 65535 bytes");
  if (key == "general.alignment") {
    if (value.type() != GgufValueType::U32)
      throw Error(std::string("GgufWriter: general.alignment must be a u32, not ") + gguf_value_type_name(value.type()));
    if (alignment_set_) throw Error("GgufWriter: general.alignment is set twice");
    return set_alignment(value.as_u64());
  }
  if (!keys_.emplace(key, metadata_.size()).second)
    throw Error("GgufWriter: metadata key '" + io::printable(key) + "' is added twice");
  metadata_.emplace_back(key, std::move(value));
}

void GgufWriter::add_pending(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                             std::span<const uint8_t> bytes, std::shared_ptr<const void> keep) {
  const std::string what = "GgufWriter: tensor '" + io::printable(name) + "'";
  if (name.empty() || name.size() > kMaxNameBytes)
    throw Error(what + ": GGUF tensor names have 1 to 64 bytes (this one has " + std::to_string(name.size()) + ")");
  if (names_.count(name)) throw Error(what + " is added twice");
  if (ne.empty() || ne.size() > kMaxDims)
    throw Error(what + ": " + std::to_string(ne.size()) + " dims; GGUF tensors have 1 to 4");
  const GgmlTypeInfo& info = ggml_type_info(type);
  if (ne[0] < 0 || ne[0] % info.block_elements != 0)
    throw Error(what + ": its innermost dim " + std::to_string(ne[0]) + " is not a multiple of the " + info.name +
                " block size " + std::to_string(info.block_elements));
  const std::vector<int64_t> shape(ne.rbegin(), ne.rend());
  const int64_t n = checked_numel(shape, what);
  const int64_t nbytes = ggml_nbytes(type, n, what);
  if (static_cast<uint64_t>(nbytes) != bytes.size())
    throw Error(what + ": " + std::to_string(bytes.size()) + " bytes given, " + info.name + dims_str(shape) + " has " +
                std::to_string(nbytes));
  names_.emplace(name, tensors_.size());
  tensors_.push_back({name, type, std::move(ne), bytes, std::move(keep)});
}

void GgufWriter::add_tensor(const std::string& name, const Tensor& tensor) {
  translate_errors("GgufWriter::add_tensor", [&] {
    const auto type = ggml_type_of(tensor.dtype());
    if (!type)
      throw Error("GgufWriter: tensor '" + io::printable(name) + "' is " + dtype_name(tensor.dtype()) +
                  ", which GGUF does not store (f32, f16, bf16, f64, i8, i16, i32, i64; cast it first)");
    auto keep = std::make_shared<Tensor>(tensor);  // shares the storage: keeps it alive
    const std::span<const uint8_t> bytes(static_cast<const uint8_t*>(keep->raw()), keep->nbytes());
    add_pending(name, *type, ne_of(tensor.shape(), "GgufWriter: tensor '" + io::printable(name) + "'"), bytes,
                std::move(keep));
  });
}

void GgufWriter::add_tensor(const std::string& name, const Tensor& tensor, GgmlType type) {
  translate_errors("GgufWriter::add_tensor", [&] {
    const std::string what = "GgufWriter: tensor '" + io::printable(name) + "'";
    if (!is_float(tensor.dtype()))
      throw Error(what + " is " + dtype_name(tensor.dtype()) + "; only float tensors are quantized to " +
                  ggml_type_name(type));
    const GgmlTypeInfo& info = ggml_type_info(type);
    if (!info.quantize) quant::quantize(type, nullptr, nullptr, 0);  // the error naming what rlx can write
    std::vector<int64_t> ne = ne_of(tensor.shape(), what);
    if (ne[0] % info.block_elements != 0)
      throw Error(what + ": its last dim " + std::to_string(ne[0]) + " is not a multiple of the " + info.name +
                  " block size " + std::to_string(info.block_elements));
    const std::vector<float> values = tensor.to_f32();
    auto bytes = std::make_shared<std::vector<uint8_t>>(
        static_cast<size_t>(ggml_nbytes(type, static_cast<int64_t>(values.size()), what)));
    try {
      quant::quantize(type, values.data(), bytes->data(), static_cast<int64_t>(values.size()));
    } catch (const Error& e) {
      throw Error(what + ": " + e.what());
    }
    const std::span<const uint8_t> view(bytes->data(), bytes->size());
    add_pending(name, type, std::move(ne), view, std::move(bytes));
  });
}

void GgufWriter::add_raw(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                         std::span<const uint8_t> bytes) {
  translate_errors("GgufWriter::add_raw", [&] { add_pending(name, type, std::move(ne), bytes, nullptr); });
}

void GgufWriter::add_raw(const std::string& name, GgmlType type, std::vector<int64_t> ne, std::string bytes) {
  translate_errors("GgufWriter::add_raw", [&] {
    auto owned = std::make_shared<std::string>(std::move(bytes));
    const std::span<const uint8_t> view(reinterpret_cast<const uint8_t*>(owned->data()), owned->size());
    add_pending(name, type, std::move(ne), view, std::move(owned));
  });
}

std::string GgufWriter::head() const {
  std::string out = "GGUF";
  put<uint32_t>(out, version_);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, metadata_.size() + (alignment_set_ ? 1 : 0));
  if (alignment_set_) {
    put_string(out, "general.alignment");
    put<uint32_t>(out, static_cast<uint32_t>(GgufValueType::U32));
    put<uint32_t>(out, static_cast<uint32_t>(alignment_));
  }
  for (const auto& [key, value] : metadata_) {
    put_string(out, key);
    put<uint32_t>(out, static_cast<uint32_t>(value.type()));
    put_value(out, value);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) put<uint64_t>(out, static_cast<uint64_t>(d));
    put<uint32_t>(out, static_cast<uint32_t>(t.type));
    put<uint64_t>(out, offset);
    offset = align_up(offset + t.bytes.size(), alignment_);
  }
  out.append(static_cast<size_t>(align_up(out.size(), alignment_) - out.size()), '\0');
  return out;
}

template <class Sink>
void GgufWriter::emit(Sink&& sink) const {
  sink(std::string_view(head()));
  static const char zeros[4096] = {};
  for (const auto& t : tensors_) {
    if (!t.bytes.empty()) sink(std::string_view(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size()));
    for (uint64_t pad = align_up(t.bytes.size(), alignment_) - t.bytes.size(); pad > 0;) {
      const uint64_t n = std::min<uint64_t>(pad, sizeof zeros);
      sink(std::string_view(zeros, static_cast<size_t>(n)));
      pad -= n;
    }
  }
}

std::string GgufWriter::bytes() const {
  return translate_errors("GgufWriter::bytes", [&] {
    std::string out;
    emit([&](std::string_view s) { out.append(s); });
    return out;
  });
}

void GgufWriter::save(const std::string& path) const {
  translate_errors("GgufWriter::save", [&] {
    io::StagedFile file(path, "GGUF file");
    emit([&](std::string_view s) { file.write(s); });
    file.commit();
  });
}

}  // namespace rlx
