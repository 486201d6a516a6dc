#include "rlx/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "io/file_access.h"
#include "io/json_detail.h"
#include "rlx/limits.h"

namespace rlx {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors is little-endian");

constexpr uint64_t kMaxHeader = 100u << 20;  // the format's own limit (100 MiB)
constexpr int kMaxDepth = 4;                  // {"name": {"shape": [..]}} needs 3

struct DTypeName {
  const char* name;
  DType dtype;
};
constexpr DTypeName kNames[] = {{"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16}, {"F64", DType::F64},
                                {"I8", DType::I8},   {"I16", DType::I16}, {"I32", DType::I32},   {"I64", DType::I64},
                                {"U8", DType::U8},   {"U16", DType::U16}, {"U32", DType::U32},   {"U64", DType::U64},
                                {"BOOL", DType::Bool}, {"F8_E4M3", DType::F8E4M3FN}, {"F8_E5M2", DType::F8E5M2}};

const char* st_name(DType t) {
  for (const auto& n : kNames)
    if (n.dtype == t) return n.name;
  throw Error(std::string("safetensors: dtype ") + dtype_name(t) + " has no safetensors name");
}

uint64_t checked_u64(const nlohmann::json& v, const std::string& what) {
  if (!v.is_number_unsigned()) throw Error(what + " must be a non-negative integer");
  return v.get<uint64_t>();
}

// Parses the header: nesting is capped before the parser runs (a header nested 100k deep
// would overflow its stack) and a key appearing twice in one object is an error (nlohmann
// would silently keep only the last, dropping a tensor).
nlohmann::json parse_header(std::string_view text, const std::string& what) {
  return io::parse_json_checked(text, std::min(kMaxDepth, active_limits().max_nesting_depth), what + ": header",
                                what + ": header is not valid JSON", [&](const std::string& key, int depth) {
                                  return what + ": the header names '" + io::printable(key) + "' twice" +
                                         (depth <= 1 ? " (two tensors with one name)" : "") +
                                         "; each name may appear once";
                                });
}

}  // namespace

struct SafetensorsFile::Storage : io::MappedBytes {};

SafetensorsFile::SafetensorsFile(std::unique_ptr<Storage> storage, const std::string& what)
    : storage_(std::move(storage)), what_(what) {
  translate_errors("safetensors", [&] { parse(); });
}

SafetensorsFile::SafetensorsFile(const std::string& path) : what_("safetensors file '" + io::printable(path) + "'") {
  storage_ = std::make_unique<Storage>();
  storage_->map_file(path, what_);
  translate_errors("safetensors", [&] { parse(); });
}

SafetensorsFile SafetensorsFile::from_bytes(const void* data, size_t size, const std::string& what) {
  auto s = std::make_unique<Storage>();
  s->buffer.assign(static_cast<const char*>(data), size);
  return SafetensorsFile(std::move(s), what);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

void SafetensorsFile::parse() {
  const uint8_t* p = storage_->data();
  const size_t size = storage_->size();
  if (size < 8) throw Error(what_ + ": " + std::to_string(size) + " bytes is too short for the 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, p, 8);
  if (n > kMaxHeader) throw Error(what_ + ": header length " + std::to_string(n) + " is over the 100 MiB limit");
  if (n > size - 8)
    throw Error(what_ + ": header length " + std::to_string(n) + " runs past the end of the " + std::to_string(size) +
                "-byte file (truncated?)");
  const std::string_view text(reinterpret_cast<const char*>(p + 8), static_cast<size_t>(n));
  if (text.empty() || text.front() != '{') throw Error(what_ + ": the header is not a JSON object");
  const nlohmann::json h = parse_header(text, what_);
  if (!h.is_object()) throw Error(what_ + ": the header is not a JSON object");
  data_ = p + 8 + n;
  data_size_ = size - 8 - static_cast<size_t>(n);
  for (const auto& [name, v] : h.items()) {
    const std::string where = what_ + ": tensor '" + io::printable(name) + "'";
    if (name == "__metadata__") {
      if (!v.is_object()) throw Error(what_ + ": __metadata__ must be an object of strings");
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string()) throw Error(what_ + ": __metadata__ value '" + io::printable(k) + "' is not a string");
        metadata_[k] = s.get<std::string>();
      }
      continue;
    }
    if (name.empty()) throw Error(what_ + ": a tensor has an empty name");
    if (!v.is_object()) throw Error(where + " must be an object");
    for (const auto& [k, unused] : v.items())
      if (k != "dtype" && k != "shape" && k != "data_offsets")
        throw Error(where + ": unknown field '" + io::printable(k) + "' (expected: dtype, shape, data_offsets)");
    if (!v.contains("dtype") || !v["dtype"].is_string()) throw Error(where + ": 'dtype' must be a string");
    const std::string dt = v["dtype"].get<std::string>();
    SafetensorsEntry e;
    e.name = name;
    bool known = false;
    for (const auto& kn : kNames)
      if (dt == kn.name) {
        e.dtype = kn.dtype;
        known = true;
      }
    if (!known) throw Error(where + ": dtype '" + io::printable(dt) + "' is not supported (F32, F16, BF16, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL, F8_E4M3, F8_E5M2)");
    if (!v.contains("shape") || !v["shape"].is_array()) throw Error(where + ": 'shape' must be an array");
    for (const auto& d : v["shape"]) {
      const uint64_t dim = checked_u64(d, where + ": shape entries");
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        throw Error(where + ": shape entry " + std::to_string(dim) + " does not fit in int64");
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    // Element and byte counts checked for overflow and against the size policy.
    const auto nbytes = static_cast<uint64_t>(checked_nbytes(e.shape, e.dtype, where));
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      throw Error(where + ": 'data_offsets' must be [begin, end]");
    e.begin = checked_u64(v["data_offsets"][0], where + ": data_offsets");
    e.end = checked_u64(v["data_offsets"][1], where + ": data_offsets");
    if (e.end < e.begin) throw Error(where + ": data_offsets end is before begin");
    if (e.end > data_size_)
      throw Error(where + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                  ") run past the " + std::to_string(data_size_) + "-byte data section (truncated?)");
    if (e.end - e.begin != nbytes)
      throw Error(where + ": " + std::to_string(e.end - e.begin) + " bytes do not hold " + dt + " " +
                  dims_str(e.shape) + " (" + std::to_string(nbytes) + " bytes)");
    entries_.push_back(std::move(e));
  }
  std::sort(entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // Overlap: each non-empty range against the furthest-reaching non-empty range before it (in
  // begin order), so an empty tensor between two overlapping ones cannot hide the overlap.
  // The tensors must cover the data section exactly, as the format requires (its reference
  // reader refuses holes too): bytes that belong to no tensor mean a damaged or mis-written file.
  const SafetensorsEntry* reach = nullptr;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const SafetensorsEntry& e = entries_[i];
    if (e.begin != e.end) {
      const uint64_t covered = reach ? reach->end : 0;
      if (e.begin > covered)
        throw Error(what_ + ": bytes [" + std::to_string(covered) + ", " + std::to_string(e.begin) +
                    ") of the data section belong to no tensor (a hole before '" + io::printable(e.name) +
                    "'); the file is malformed");
      if (reach && e.begin < reach->end)
        throw Error(what_ + ": tensors '" + io::printable(reach->name) + "' [" + std::to_string(reach->begin) + ", " +
                    std::to_string(reach->end) + ") and '" + io::printable(e.name) + "' [" + std::to_string(e.begin) +
                    ", " + std::to_string(e.end) + ") overlap in the data section");
      if (!reach || e.end > reach->end) reach = &e;
    }
    if (!index_.emplace(e.name, i).second)  // defensive: the parser callback rejects duplicates
      throw Error(what_ + ": tensor '" + io::printable(e.name) + "' is named twice");
  }
  if (const uint64_t end = reach ? reach->end : 0; end != data_size_)
    throw Error(what_ + ": " + std::to_string(data_size_ - end) + " bytes after the last tensor's data belong to no "
                "tensor (the data section is " + std::to_string(data_size_) + " bytes); the file is malformed");
}

bool SafetensorsFile::contains(const std::string& name) const { return index_.count(name) > 0; }

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) throw Error(what_ + " has no tensor named '" + name + "'");
  return entries_[it->second];
}

std::span<const uint8_t> SafetensorsFile::raw(const std::string& name) const {
  const auto& e = entry(name);
  return {data_ + e.begin, static_cast<size_t>(e.end - e.begin)};
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  return translate_errors("SafetensorsFile::tensor", [&] {
    const auto& e = entry(name);
    const auto bytes = raw(name);
    if (e.dtype == DType::Bool)
      for (uint8_t b : bytes)
        if (b > 1) throw Error(what_ + ": tensor '" + name + "' holds a BOOL byte other than 0 or 1");
    return Tensor::from_bytes(e.dtype, e.shape, bytes.data(), bytes.size());
  });
}

std::map<std::string, Tensor> load_safetensors(const std::string& path) {
  return translate_errors("load_safetensors", [&] {
    const SafetensorsFile f(path);
    std::map<std::string, Tensor> out;
    for (const auto& e : f.entries()) out.emplace(e.name, f.tensor(e.name));
    return out;
  });
}

std::string safetensors_bytes(const std::vector<std::pair<std::string, Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  nlohmann::json h = nlohmann::json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__")
      throw Error("save_safetensors: invalid tensor name '" + io::printable(name) + "'");
    if (h.contains(name)) throw Error("save_safetensors: tensor name '" + io::printable(name) + "' is used twice");
    const uint64_t n = t.nbytes();
    h[name] = {{"dtype", st_name(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {offset, offset + n}}};
    offset = static_cast<uint64_t>(checked_add(static_cast<int64_t>(offset), static_cast<int64_t>(n),
                                               "save_safetensors: the data section size"));
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned
  const uint64_t hn = header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &hn, 8);
  out += header;
  out.reserve(out.size() + offset);
  for (const auto& [name, t] : tensors)
    if (t.nbytes() > 0) out.append(static_cast<const char*>(t.raw()), t.nbytes());
  return out;
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  translate_errors("save_safetensors", [&] {
    const std::string bytes = safetensors_bytes(tensors, metadata);
    io::write_file(path, {bytes}, "save_safetensors: the safetensors file");
  });
}

}  // namespace rlx
