#pragma once
// GGUF model files (the format of ggml / llama.cpp), versions 2 and 3, little-endian:
//
//   "GGUF" | u32 version | u64 tensor_count | u64 kv_count | kv_count metadata key/values
//   | tensor_count tensor infos (name, n_dims, dims, ggml type, offset) | padding to ALIGNMENT
//   | the data section (each tensor at a multiple of ALIGNMENT from its start)
//
// ALIGNMENT is the u32 value of the key general.alignment (a non-zero multiple of 8), else 32.
//
// GgufFile memory-maps the file (or holds a buffer) and validates everything before any tensor
// is read: magic, version, every metadata value (all 13 value types, nested arrays, bool bytes,
// string and array lengths against the bytes left), key and tensor-name uniqueness, dims, the
// ggml type, byte sizes (overflow-checked, capped by rlx::Limits), offset alignment, that every
// tensor lies inside the data section and that no two tensors overlap. A malformed or truncated
// file raises rlx::Error naming the file, the byte offset, the key or tensor, and what is wrong;
// nothing reads out of bounds. Tensor data stays in the mapping until a tensor is asked for.
//
// Dims: GGUF stores ggml's `ne` order, ne[0] the innermost (contiguous) dim. rlx shapes are
// row-major, so GgufTensorInfo::shape() is `ne` reversed (a ggml [4096, 11008] weight is an rlx
// [11008, 4096] tensor), and the writer reverses an rlx shape into `ne`. Block-quantized types
// pack whole blocks along ne[0], which must be a multiple of the block size.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rlx/tensor.h"

namespace rlx {

// ---- ggml tensor types (numbers as in the GGUF spec) ------------------------------------
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30, TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};

struct GgmlTypeInfo {
  GgmlType type;
  const char* name;        // "Q4_K", "F16", ...
  int64_t block_elements;  // values per block (1 for plain types)
  int64_t block_bytes;     // bytes per block
  bool dequantize;         // rlx converts it to f32 (GgufFile::tensor_f32, ggml_dequantize)
  bool quantize;           // rlx writes it from f32 (ggml_quantize; the reference quantizers)
};

// The type's layout, or nullptr for a number that is not a ggml type rlx knows (the file then
// cannot be sized and is rejected).
const GgmlTypeInfo* ggml_type_info(uint32_t type);
const GgmlTypeInfo& ggml_type_info(GgmlType type);
const char* ggml_type_name(GgmlType type);
// "q4_k", "Q4_K", "f16" ...; rlx::Error listing the names otherwise.
GgmlType ggml_type_from_name(std::string_view name);
// The ggml type that stores an rlx dtype as is (F32, F16, BF16, F64, I8, I16, I32, I64), and
// back; nullopt for the others (u8, u32, bool; the block types).
std::optional<GgmlType> ggml_type_of(DType dtype);
std::optional<DType> dtype_of_ggml(GgmlType type);
// Bytes of `elements` values of `type` (a multiple of its block size); rlx::Error naming `what`
// when it is not, or on overflow.
int64_t ggml_nbytes(GgmlType type, int64_t elements, const std::string& what);

// Block codecs (reference implementations, src/quant/ggml_blocks.cpp): every type whose info
// says `dequantize` / `quantize`: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K
// both ways; F64, Q2_K and Q3_K are dequantized only.
// `bytes` holds whole blocks; values.size() is a multiple of the block size. The quantizers
// reject NaN / inf and values whose scale does not fit the block's f16 scale.
std::vector<float> ggml_dequantize(GgmlType type, std::span<const uint8_t> bytes);
std::vector<uint8_t> ggml_quantize(GgmlType type, std::span<const float> values);

// ---- metadata values --------------------------------------------------------------------
enum class GgufValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7, String = 8, Array = 9,
  U64 = 10, I64 = 11, F64 = 12,
};
const char* gguf_value_type_name(GgufValueType type);  // "u32", "string", "array", ...

// One metadata value: a scalar, a string, or an array of one element type (arrays may nest).
// Arrays of numbers and bools are stored packed, so a 150k-entry token-type array costs what
// it costs in the file.
class GgufValue {
 public:
  GgufValue() = default;  // u8 0
  static GgufValue u8(uint8_t v);
  static GgufValue i8(int8_t v);
  static GgufValue u16(uint16_t v);
  static GgufValue i16(int16_t v);
  static GgufValue u32(uint32_t v);
  static GgufValue i32(int32_t v);
  static GgufValue u64(uint64_t v);
  static GgufValue i64(int64_t v);
  static GgufValue f32(float v);
  static GgufValue f64(double v);
  static GgufValue boolean(bool v);
  static GgufValue string(std::string v);
  // Arrays. Numbers of a numeric `type`: integers must fit it exactly (rlx::Error otherwise),
  // F32 rounds. Bool arrays take 0 / 1. `array` takes values that all have `element_type`
  // (nested arrays may each have their own element type).
  static GgufValue array_of(GgufValueType type, const std::vector<double>& values);
  static GgufValue array_of_i64(GgufValueType type, const std::vector<int64_t>& values);
  static GgufValue strings(std::vector<std::string> values);
  static GgufValue array(GgufValueType element_type, std::vector<GgufValue> values);

  GgufValueType type() const { return type_; }
  bool is_array() const { return type_ == GgufValueType::Array; }
  bool is_integer() const;  // u8..i64 (not bool)

  // Scalars, converted where exact; rlx::Error naming both types otherwise.
  uint64_t as_u64() const;  // unsigned, or signed >= 0
  int64_t as_i64() const;   // signed, or unsigned <= INT64_MAX
  double as_f64() const;    // any number (integers converted)
  bool as_bool() const;
  const std::string& as_string() const;

  // Arrays.
  GgufValueType element_type() const;  // rlx::Error when not an array
  uint64_t size() const;               // elements of an array
  GgufValue at(uint64_t i) const;      // one element (a copy)
  const std::vector<std::string>& as_strings() const;  // string arrays
  std::vector<int64_t> as_i64s() const;                // integer (and bool) arrays
  std::vector<double> as_f64s() const;                 // number arrays

  // "u32 32", "string 'llama'", "array<string>[32000]", ... (at most `max_len` characters).
  std::string to_string(size_t max_len = 80) const;
  bool operator==(const GgufValue& other) const;

 private:
  friend class GgufFile;
  friend class GgufWriter;
  friend struct GgufParser;
  friend struct GgufEncoder;
  GgufValueType type_ = GgufValueType::U8;
  uint64_t bits_ = 0;  // scalars: the little-endian bytes of the value, zero-extended
  std::string str_;
  GgufValueType elem_ = GgufValueType::U8;  // arrays
  uint64_t count_ = 0;
  std::string packed_;               // number / bool arrays: count_ little-endian elements
  std::vector<std::string> strs_;    // string arrays
  std::vector<GgufValue> items_;     // arrays of arrays
};

// ---- reading ----------------------------------------------------------------------------
struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;  // dims as stored: ne[0] innermost
  uint64_t offset = 0;      // from the start of the data section
  uint64_t nbytes = 0;
  int64_t numel = 0;
  std::vector<int64_t> shape() const { return {ne.rbegin(), ne.rend()}; }  // row-major
};

class GgufFile {
 public:
  // Maps and validates `path` (a regular file).
  explicit GgufFile(const std::string& path);
  // Validates an in-memory file (copied); `what` names it in errors.
  static GgufFile from_bytes(const void* data, size_t size, const std::string& what = "GGUF buffer");

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // the data section's start in the file
  uint64_t file_size() const { return size_; }
  const std::string& what() const { return what_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* find(const std::string& key) const;  // nullptr when absent
  const GgufValue& value(const std::string& key) const;  // rlx::Error naming the file and key
  // Typed getters: rlx::Error naming the key when absent or of another type.
  std::string get_string(const std::string& key) const;
  uint64_t get_u64(const std::string& key) const;
  int64_t get_i64(const std::string& key) const;
  double get_f64(const std::string& key) const;
  bool get_bool(const std::string& key) const;

  // Tensors in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  bool contains(const std::string& name) const { return index_.count(name) > 0; }
  const GgufTensorInfo& tensor_info(const std::string& name) const;
  // The tensor's bytes in the mapping (valid while this object lives).
  std::span<const uint8_t> raw(const std::string& name) const;
  // An owning copy, row-major, for types that are rlx dtypes: F32, F16, BF16, F64, I8, I16,
  // I32, I64. A block-quantized tensor is an error pointing at tensor_f32().
  Tensor tensor(const std::string& name) const;
  // F32 values of any float or dequantizable block type (F32, F16, BF16, F64, Q4_0 ... Q8_0,
  // Q2_K ... Q6_K).
  Tensor tensor_f32(const std::string& name) const;

 private:
  struct Storage;
  friend struct GgufParser;
  GgufFile(std::unique_ptr<Storage> storage, const std::string& what);
  void parse();

  std::unique_ptr<Storage> storage_;
  std::string what_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t> meta_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> index_;
};

// ---- writing ----------------------------------------------------------------------------
// Collects metadata and tensors, then writes a file that follows the spec: keys in the order
// added (general.alignment first when set), tensor data in the order added, each tensor at a
// multiple of the alignment, zero padding. Tensors are referenced, not copied, until written.
class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3);  // 2 or 3

  // Sets ALIGNMENT (a non-zero multiple of 8, at most 1 MiB), written as general.alignment (u32)
  // before the other keys. Without it the file has the default alignment 32 and no such key.
  void set_alignment(uint64_t alignment);
  // Adds a key (non-empty, at most 65535 bytes, not added before). general.alignment must be
  // a u32 and goes through set_alignment.
  void add(const std::string& key, GgufValue value);
  // A tensor of an rlx dtype that GGUF stores as is (F32, F16, BF16, F64, I8, I16, I32, I64);
  // its row-major shape becomes `ne` reversed (a scalar is written as [1]).
  void add_tensor(const std::string& name, const Tensor& tensor);
  // An f32 / f16 / bf16 / f64 tensor quantized to `type` with the reference quantizer; its
  // last dim must be a multiple of the block size.
  void add_tensor(const std::string& name, const Tensor& tensor, GgmlType type);
  // Bytes already in `type`'s layout for dims `ne` (ggml order); `bytes` must stay alive and
  // unchanged until the file is written.
  void add_raw(const std::string& name, GgmlType type, std::vector<int64_t> ne, std::span<const uint8_t> bytes);
  // Same, owning the bytes.
  void add_raw(const std::string& name, GgmlType type, std::vector<int64_t> ne, std::string bytes);

  size_t tensor_count() const { return tensors_.size(); }
  // The whole file in memory (for tests and small files).
  std::string bytes() const;
  // Writes the file through a temporary file renamed onto `path`, streaming the tensor data.
  void save(const std::string& path) const;

 private:
  struct Pending {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    std::span<const uint8_t> bytes;
    std::shared_ptr<const void> keep;  // owner of `bytes` when the writer holds them
  };
  void add_pending(const std::string& name, GgmlType type, std::vector<int64_t> ne, std::span<const uint8_t> bytes,
                   std::shared_ptr<const void> keep);
  std::string head() const;  // everything before the data section, padding included
  template <class Sink>
  void emit(Sink&& sink) const;

  uint32_t version_;
  uint64_t alignment_ = 32;
  bool alignment_set_ = false;  // written as general.alignment
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t> keys_;
  std::vector<Pending> tensors_;
  std::map<std::string, size_t> names_;
};

// ---- conversion -------------------------------------------------------------------------
struct GgufConvertOptions {
  // Quantize the float tensors of rank >= 2 whose last dim is a multiple of the block size to
  // this type (others are written as stored); none: every tensor as stored.
  std::optional<GgmlType> quantize;
  // general.architecture, written when not empty.
  std::string architecture;
};
// safetensors -> GGUF: every tensor (F32, F16, BF16, F64, I8, I16, I32, I64; U8/U32/BOOL are an
// error naming the tensor), the safetensors string metadata as string values under their keys.
void safetensors_to_gguf(const std::string& in_path, const std::string& out_path, const GgufConvertOptions& options = {});
// GGUF -> safetensors: tensors that are rlx dtypes as stored, block-quantized ones dequantized
// to f32; string and scalar metadata as __metadata__ strings (arrays are left out).
void gguf_to_safetensors(const std::string& in_path, const std::string& out_path);

}  // namespace rlx
