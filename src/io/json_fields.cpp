// Typed access to graph JSON fields with located error messages.
#include <cmath>
#include <limits>
#include <set>

#include "rlx/limits.h"

#include "io/json_detail.h"

namespace rlx::io {

void json_fail(const std::string& where, const std::string& msg) {
  throw Error("graph JSON: " + (where.empty() ? msg : where + ": " + msg));
}

std::string json_type(const json& j) {
  switch (j.type()) {
    case json::value_t::object: return "object";
    case json::value_t::array: return "array";
    case json::value_t::string: return "string '" + printable(j.get_ref<const std::string&>(), 40) + "'";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer " + j.dump();
    case json::value_t::number_float: return "number " + j.dump();
    case json::value_t::boolean: return j.get<bool>() ? "true" : "false";
    case json::value_t::null: return "null";
    default: return "an unsupported JSON value";
  }
}

std::string json_brief(const json& j, size_t max_len) {
  // Containers: only their kind and size (dumping them could be huge); scalars are short.
  if (j.is_array()) return "an array of " + std::to_string(j.size()) + " element(s)";
  if (j.is_object()) return "an object of " + std::to_string(j.size()) + " field(s)";
  if (j.is_string()) return "\"" + printable(j.get_ref<const std::string&>(), max_len) + "\"";
  return printable(j.dump(), max_len);
}

json parse_json_checked(std::string_view text, int max_depth, const std::string& what, const std::string& malformed,
                        const std::function<std::string(const std::string& key, int depth)>& duplicate) {
  check_json_depth(text, max_depth, what);
  std::vector<std::set<std::string>> open_objects;
  const json::parser_callback_t no_duplicates = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == json::parse_event_t::key && !open_objects.empty()) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second) throw Error(duplicate(key, depth));
    }
    return true;
  };
  try {
    return json::parse(text, no_duplicates);
  } catch (const json::exception& e) {
    throw Error(malformed + ": " + e.what());
  }
}

json parse_json_strict(std::string_view text, const std::string& what) {
  return parse_json_checked(text, active_limits().max_nesting_depth, what, what + ": malformed JSON",
                            [&](const std::string& key, int depth) {
                              return what + ": duplicate key '" + printable(key) + "' in an object at nesting depth " +
                                     std::to_string(depth) + " (each key may appear once)";
                            });
}

std::string json_at(const std::string& where, const std::string& what) {
  return where.empty() ? what : where + ": " + what;
}

void expect_object(const json& j, const std::string& where) {
  if (!j.is_object()) json_fail(where, "expected an object, got " + json_type(j));
}
void expect_array(const json& j, const std::string& where) {
  if (!j.is_array()) json_fail(where, "expected an array, got " + json_type(j));
}

void check_keys(const json& obj, std::initializer_list<const char*> allowed, const std::string& where) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool ok = false;
    for (const char* a : allowed) ok = ok || it.key() == a;
    if (!ok) {
      std::string list;
      for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
      json_fail(where, "unknown field '" + printable(it.key()) + "' (expected: " + list + ")");
    }
  }
}

const json& require_key(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) json_fail(where, std::string("missing field '") + key + "'");
  return *it;
}

int64_t get_i64(const json& j, const std::string& where) {
  if (j.is_number_unsigned()) {
    const auto v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      json_fail(where, "integer " + json_brief(j) + " does not fit in int64");
    return static_cast<int64_t>(v);
  }
  if (!j.is_number_integer()) json_fail(where, "expected an integer, got " + json_type(j));
  return j.get<int64_t>();
}

uint64_t get_u64(const json& j, const std::string& where) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer()) json_fail(where, "expected a non-negative integer, got " + json_brief(j));
  json_fail(where, "expected a non-negative integer, got " + json_type(j));
}

bool get_bool(const json& j, const std::string& where) {
  if (!j.is_boolean()) json_fail(where, "expected true or false, got " + json_type(j));
  return j.get<bool>();
}

std::string get_string(const json& j, const std::string& where) {
  if (!j.is_string()) json_fail(where, "expected a string, got " + json_type(j));
  return j.get<std::string>();
}

json put_f64(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

double get_f64(const json& j, const std::string& where) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
  }
  json_fail(where, "expected a number (or \"nan\", \"inf\", \"-inf\"), got " + json_type(j));
}

DType get_dtype(const json& j, const std::string& where) {
  const std::string s = get_string(j, where);
  try {
    return dtype_from_name(s);
  } catch (const Error& e) {
    json_fail(where, e.what());
  }
}

json put_dims(const std::vector<Dim>& dims) {
  json a = json::array();
  for (const Dim& d : dims) {
    if (d.is_symbolic()) a.push_back(d.sym);
    else a.push_back(d.value);
  }
  return a;
}

std::vector<Dim> get_dims(const json& j, bool allow_negative, const std::string& where) {
  expect_array(j, where);
  std::vector<Dim> dims;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const json& d = j[i];
    if (d.is_string()) {
      std::string s = d.get<std::string>();
      if (s.empty()) json_fail(at, "a symbolic dim needs a non-empty name");
      dims.push_back(Dim::symbol(std::move(s)));
    } else if (d.is_number_integer()) {
      const int64_t v = get_i64(d, at);
      if (v < 0 && !allow_negative) json_fail(at, "dim " + std::to_string(v) + " is negative");
      dims.emplace_back(v);
    } else {
      json_fail(at, "a dim is an integer or a symbol name (string), got " + json_type(d));
    }
  }
  return dims;
}

json put_shape(const Shape& s) { return json{{"dtype", dtype_name(s.dtype)}, {"dims", put_dims(s.dims)}}; }

Shape get_shape(const json& j, const std::string& where) {
  expect_object(j, where);
  check_keys(j, {"dtype", "dims"}, where);
  Shape s;
  s.dtype = get_dtype(require_key(j, "dtype", where), json_at(where, "field 'dtype'"));
  s.dims = get_dims(require_key(j, "dims", where), false, json_at(where, "field 'dims'"));
  return s;
}

}  // namespace rlx::io
