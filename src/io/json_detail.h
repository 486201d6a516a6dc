#pragma once
// Internal helpers of the graph JSON reader/writer: typed field access with error messages
// that name the location ("node 3 (matmul): attribute 'axis'"), shapes, dims, doubles, and
// tensor data (inline base64 or a side file).
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/file_access.h"
#include "rlx/shape.h"
#include "rlx/tensor.h"

namespace rlx::io {

using json = nlohmann::json;

// Throws rlx::Error("graph JSON: <where>: <msg>").
[[noreturn]] void json_fail(const std::string& where, const std::string& msg);
// "object", "array", "string", "integer", "number", "boolean", "null".
std::string json_type(const json& j);
// At most `max_len` characters of j's JSON text, control characters escaped; never dumps
// more than that of a large or deep value.
std::string json_brief(const json& j, size_t max_len = 60);
// Parses `text` for a reader: nesting deeper than `max_depth` is rejected before the
// (recursive) parser runs, and a key that appears twice in one object is an rlx::Error with
// the message `duplicate(key, depth)` (nlohmann would keep only the last). A syntax error is
// an rlx::Error "<malformed>: <parser's reason>".
json parse_json_checked(std::string_view text, int max_depth, const std::string& what, const std::string& malformed,
                        const std::function<std::string(const std::string& key, int depth)>& duplicate);
// The graph JSON reader's parse_json_checked: active_limits().max_nesting_depth, messages naming `what`.
json parse_json_strict(std::string_view text, const std::string& what);
// Joins a location and a sub-field: "node 3 (conv)" + "field 'shape'" -> "node 3 (conv): field 'shape'".
std::string json_at(const std::string& where, const std::string& what);

void expect_object(const json& j, const std::string& where);
void expect_array(const json& j, const std::string& where);
// Rejects keys outside `allowed`.
void check_keys(const json& obj, std::initializer_list<const char*> allowed, const std::string& where);
// The member `key` of object `obj`; a missing key is an error.
const json& require_key(const json& obj, const char* key, const std::string& where);

int64_t get_i64(const json& j, const std::string& where);
uint64_t get_u64(const json& j, const std::string& where);
bool get_bool(const json& j, const std::string& where);
std::string get_string(const json& j, const std::string& where);
// Finite doubles are JSON numbers; NaN and infinities are the strings "nan", "inf", "-inf".
json put_f64(double v);
double get_f64(const json& j, const std::string& where);
DType get_dtype(const json& j, const std::string& where);

// Dims: an integer (static) or a non-empty string (symbolic).
json put_dims(const std::vector<Dim>& dims);
std::vector<Dim> get_dims(const json& j, bool allow_negative, const std::string& where);
// Shape: {"dtype": "f32", "dims": [...]}.
json put_shape(const Shape& s);
Shape get_shape(const json& j, const std::string& where);

// Tensor: {"dtype", "shape": [ints], "data": base64} or {"dtype", "shape", "offset", "nbytes"}
// (data in the side file, at 64-byte aligned offsets).
class TensorWriter {
 public:
  explicit TensorWriter(bool inline_data) : inline_(inline_data) {}
  json write(const Tensor& t, const std::string& where);
  bool inline_data() const { return inline_; }
  const std::string& side_data() const { return side_; }

 private:
  bool inline_;
  std::string side_;
};

class TensorReader {
 public:
  // `side_path` empty: the document names no side file (already resolved and checked to be
  // inside the graph's folder).
  explicit TensorReader(std::string side_path) : path_(std::move(side_path)) {}
  Tensor read(const json& j, const std::string& where);

 private:
  void open(const std::string& where);
  std::string path_;
  std::unique_ptr<RegularFile> file_;
};

}  // namespace rlx::io
