#pragma once
// safetensors weights: an 8-byte little-endian header length, a JSON header naming each
// tensor's dtype, shape and [begin, end) byte range in the data section, then the data.
//
// SafetensorsFile memory-maps the file (or holds a buffer) and validates everything before
// any tensor is read: header length, JSON syntax and nesting, dtypes, shapes, that every
// range lies inside the data section, matches its dtype and shape, and that ranges do not
// overlap. Truncated or malicious files raise rlx::Error; nothing reads out of bounds.
// dtypes: F32, F16, BF16, F64, I8, I16, I32, I64, U8, U32, BOOL.
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "rlx/tensor.h"

namespace rlx {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range in the data section
};

class SafetensorsFile {
 public:
  // Maps and validates `path`.
  explicit SafetensorsFile(const std::string& path);
  // Validates an in-memory file (copied); `what` names it in errors.
  static SafetensorsFile from_bytes(const void* data, size_t size, const std::string& what = "safetensors buffer");

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  // Entries in data order.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const;
  const SafetensorsEntry& entry(const std::string& name) const;  // rlx::Error naming the file when absent
  // An owning copy of the tensor; bool bytes other than 0/1 are an error.
  Tensor tensor(const std::string& name) const;
  // The tensor's bytes in the mapping (valid while this object lives).
  std::span<const uint8_t> raw(const std::string& name) const;
  int64_t data_bytes() const { return static_cast<int64_t>(data_size_); }

 private:
  struct Storage;
  SafetensorsFile(std::unique_ptr<Storage> storage, const std::string& what);
  void parse();

  std::unique_ptr<Storage> storage_;
  std::string what_;
  const uint8_t* data_ = nullptr;  // start of the data section
  size_t data_size_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Every tensor of a file, by name.
std::map<std::string, Tensor> load_safetensors(const std::string& path);
// Writes tensors (names must be unique and non-empty) with optional string metadata.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
// The file's bytes, for tests and tools that write elsewhere.
std::string safetensors_bytes(const std::vector<std::pair<std::string, Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace rlx
