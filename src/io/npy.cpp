// NumPy .npy files (format versions 1.0, 2.0 and 3.0), C order, little-endian.
//
// dtypes: <f4 <f8 <f2 |i1 <i2 <i4 <i8 |u1 <u2 <u4 <u8 |b1 (single-byte types also as '<' or '=').
// bf16 has no NumPy type code: save_npy writes bf16 tensors as <f4 (exact widening), so they
// load back as f32 with identical values. The storage-only dtypes (float8, float4, int4/uint4,
// int2/uint2) have no NumPy type code either: save_npy refuses them (cast first). Big-endian data, Fortran order, structured and
// other dtypes are rejected with rlx::Error, as are truncated files and trailing bytes.
#include <bit>
#include <cstring>
#include <limits>
#include <variant>

#include "io/file_access.h"
#include "rlx/limits.h"
#include "rlx/serialize.h"

namespace rlx {
namespace {

static_assert(std::endian::native == std::endian::little, ".npy support assumes a little-endian host");

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

// ---- a tiny parser for the header's Python dict literal ---------------------
struct PyValue {
  enum Kind { Str, Bool, Int, Tuple, Dict, None } kind = None;
  std::string str;
  bool b = false;
  int64_t i = 0;
  std::vector<PyValue> items;     // Tuple, or a Dict's values
  std::vector<std::string> keys;  // Dict: the key of items[i]
};

class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& path) : s_(text), path_(path) {}

  PyValue parse_top() {
    PyValue v = value(0);
    skip_ws();
    if (pos_ != s_.size()) fail("unexpected text after the header dict");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    throw Error("load_npy('" + io::printable(path_) + "'): malformed header: " + msg + " at offset " +
                std::to_string(pos_) + " in \"" + io::printable(std::string(s_.substr(0, 200))) + "\"");
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool eat(char c) {
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool word(std::string_view w) {
    skip_ws();
    if (s_.substr(pos_, w.size()) == w) {
      pos_ += w.size();
      return true;
    }
    return false;
  }

  PyValue value(int depth) {
    if (depth > 8) fail("nesting too deep");
    skip_ws();
    if (pos_ >= s_.size()) fail("unexpected end");
    const char c = s_[pos_];
    PyValue v;
    if (c == '\'' || c == '"') {
      v.kind = PyValue::Str;
      v.str = string_lit();
    } else if (c == '{') {
      ++pos_;
      v.kind = PyValue::Dict;
      while (!eat('}')) {
        skip_ws();
        if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) fail("dict keys must be strings");
        std::string key = string_lit();
        if (!eat(':')) fail("expected ':' after a dict key");
        v.keys.push_back(std::move(key));
        v.items.push_back(value(depth + 1));
        if (!eat(',')) {
          if (!eat('}')) fail("expected ',' or '}' in the dict");
          break;
        }
      }
    } else if (c == '(' || c == '[') {
      const char close = c == '(' ? ')' : ']';
      if (c == '[') fail("lists (structured dtypes) are not supported");
      ++pos_;
      v.kind = PyValue::Tuple;
      while (!eat(close)) {
        v.items.push_back(value(depth + 1));
        if (!eat(',')) {
          if (!eat(close)) fail("expected ',' or ')' in a tuple");
          break;
        }
      }
    } else if (word("True")) {
      v.kind = PyValue::Bool;
      v.b = true;
    } else if (word("False")) {
      v.kind = PyValue::Bool;
    } else if (word("None")) {
      v.kind = PyValue::None;
    } else if (c >= '0' && c <= '9') {
      v.kind = PyValue::Int;
      int64_t n = 0;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
        const int d = s_[pos_++] - '0';
        if (n > (std::numeric_limits<int64_t>::max() - d) / 10) fail("integer too large");
        n = n * 10 + d;
      }
      if (pos_ < s_.size() && s_[pos_] == 'L') ++pos_;  // Python 2 long suffix
      v.i = n;
    } else {
      fail("unexpected character '" + io::printable(std::string(1, c)) + "'");
    }
    return v;
  }

  std::string string_lit() {
    const char q = s_[pos_++];
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != q) {
      if (s_[pos_] == '\\') {
        if (++pos_ >= s_.size()) break;
      }
      out += s_[pos_++];
    }
    if (pos_ >= s_.size()) fail("unterminated string");
    ++pos_;
    return out;
  }

  std::string_view s_;
  const std::string& path_;
  size_t pos_ = 0;
};

struct DescrEntry {
  const char* code;  // without the byte-order character
  DType dtype;
};
constexpr DescrEntry kDescrs[] = {{"f4", DType::F32}, {"f8", DType::F64}, {"f2", DType::F16}, {"i1", DType::I8},
                                  {"i2", DType::I16}, {"i4", DType::I32}, {"i8", DType::I64}, {"u1", DType::U8},
                                  {"u2", DType::U16}, {"u4", DType::U32}, {"u8", DType::U64}, {"b1", DType::Bool}};

DType parse_descr(const std::string& d, const std::string& path) {
  const std::string where = "load_npy('" + io::printable(path) + "'): ";
  if (d.size() >= 2) {
    const char order = d[0];
    const std::string code = d.substr(1);
    for (const auto& e : kDescrs) {
      if (code != e.code) continue;
      const bool one_byte = dtype_size(e.dtype) == 1;
      if (order == '<' || (order == '=' && std::endian::native == std::endian::little) || (order == '|' && one_byte))
        return e.dtype;
      if (order == '>' && !one_byte)
        throw Error(where + "big-endian data ('" + io::printable(d) + "') is not supported; convert with arr.astype(arr.dtype.newbyteorder('<'))");
      if (order == '>' && one_byte) return e.dtype;
    }
  }
  throw Error(where + "unsupported dtype '" + io::printable(d) +
              "' (supported: <f4 <f8 <f2 |i1 <i2 <i4 <i8 |u1 <u2 <u4 <u8 |b1)");
}

const char* descr_of(DType t) {
  switch (t) {
    case DType::F32: return "<f4";
    case DType::F64: return "<f8";
    case DType::F16: return "<f2";
    case DType::I8: return "|i1";
    case DType::I16: return "<i2";
    case DType::I32: return "<i4";
    case DType::I64: return "<i8";
    case DType::U8: return "|u1";
    case DType::U16: return "<u2";
    case DType::U32: return "<u4";
    case DType::U64: return "<u8";
    case DType::Bool: return "|b1";
    default: break;  // bf16 (widened by save_npy) and the storage-only dtypes (refused)
  }
  return nullptr;
}

uint64_t read_le(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

Tensor load_npy(const std::string& path) {
  return translate_errors("load_npy", [&] {
    const std::string where = "load_npy('" + io::printable(path) + "'): ";
    // Regular files only: a directory, FIFO or device is named as such (and a FIFO cannot block).
    const io::RegularFile f(path, ".npy file '" + io::printable(path) + "'");
    const uint64_t file_size = f.size();

    unsigned char pre[12];
    if (file_size < 10) throw Error(where + "file is truncated (" + std::to_string(file_size) + " bytes; not an .npy file)");
    f.read_at(0, pre, 10);
    if (std::memcmp(pre, kMagic, kMagicLen) != 0) throw Error(where + "not an .npy file (bad magic string)");
    const int major = pre[6], minor = pre[7];
    if ((major != 1 && major != 2 && major != 3) || minor != 0)
      throw Error(where + "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                  " (supported: 1.0, 2.0, 3.0)");
    uint64_t header_len = 0, preamble = 10;
    if (major == 1) {
      header_len = read_le(pre + 8, 2);
    } else {
      if (file_size < 12) throw Error(where + "file is truncated inside the preamble");
      f.read_at(10, pre + 10, 2);
      header_len = read_le(pre + 8, 4);
      preamble = 12;
    }
    if (header_len > file_size - preamble)
      throw Error(where + "file is truncated: the header needs " + std::to_string(header_len) + " bytes but only " +
                  std::to_string(file_size - preamble) + " remain");
    std::string header(static_cast<size_t>(header_len), '\0');
    f.read_at(preamble, header.data(), header_len);
    // Versions 1/2 are latin-1, 3 is UTF-8: the keys and values we accept are ASCII either way.

    const PyValue dict = HeaderParser(header, path).parse_top();
    if (dict.kind != PyValue::Dict) throw Error(where + "malformed header: expected a dict");
    const PyValue *descr = nullptr, *fortran = nullptr, *shape = nullptr;
    for (size_t e = 0; e < dict.keys.size(); ++e) {
      const std::string& k = dict.keys[e];
      const PyValue& v = dict.items[e];
      if ((k == "descr" && descr) || (k == "fortran_order" && fortran) || (k == "shape" && shape))
        throw Error(where + "malformed header: key '" + k + "' appears twice");
      if (k == "descr") descr = &v;
      else if (k == "fortran_order") fortran = &v;
      else if (k == "shape") shape = &v;
      else throw Error(where + "malformed header: unexpected key '" + io::printable(k) + "'");
    }
    if (!descr || !fortran || !shape) throw Error(where + "malformed header: needs the keys 'descr', 'fortran_order' and 'shape'");
    if (descr->kind != PyValue::Str) throw Error(where + "unsupported dtype: 'descr' must be a string (structured dtypes are not supported)");
    if (fortran->kind != PyValue::Bool) throw Error(where + "malformed header: 'fortran_order' must be True or False");
    if (fortran->b)
      throw Error(where + "Fortran-ordered arrays are not supported; save a C-ordered copy (np.ascontiguousarray)");
    if (shape->kind != PyValue::Tuple) throw Error(where + "malformed header: 'shape' must be a tuple of integers");
    const DType dtype = parse_descr(descr->str, path);

    std::vector<int64_t> dims;
    for (const PyValue& d : shape->items) {
      if (d.kind != PyValue::Int) throw Error(where + "malformed header: 'shape' must be a tuple of integers");
      dims.push_back(d.i);  // the parser reads no sign: every dim is >= 0
    }
    // Element and byte counts checked for overflow and against the size policy.
    const auto nbytes = static_cast<uint64_t>(
        checked_nbytes(dims, dtype, where + "the array"));
    const uint64_t data_start = preamble + header_len;
    const uint64_t available = file_size - data_start;
    if (available < nbytes)
      throw Error(where + "file is truncated: " + std::string(dtype_name(dtype)) + dims_str(dims) + " needs " +
                  std::to_string(nbytes) + " data bytes but only " + std::to_string(available) + " remain");
    if (available > nbytes)
      throw Error(where + "file has " + std::to_string(available - nbytes) + " unexpected bytes after the " +
                  std::to_string(nbytes) + " data bytes");
    Tensor t = Tensor::empty(dtype, std::move(dims));
    if (nbytes > 0) f.read_at(data_start, t.raw(), nbytes);
    if (dtype == DType::Bool) {
      const auto* p = static_cast<const uint8_t*>(t.raw());
      for (uint64_t i = 0; i < nbytes; ++i)
        if (p[i] > 1) throw Error(where + "bool element " + std::to_string(i) + " is " + std::to_string(p[i]) + ", expected 0 or 1");
    }
    return t;
  });
}

void save_npy(const Tensor& t, const std::string& path) {
  translate_errors("save_npy", [&] {
    if (!t.defined()) throw Error("save_npy('" + io::printable(path) + "'): the tensor has no data");
    if (is_storage_only(t.dtype()))
      throw Error("save_npy('" + io::printable(path) + "'): " + dtype_name(t.dtype()) +
                  " has no NumPy dtype; cast the tensor (e.g. to f32, or i8/u8 for int4/uint4) first");
    const Tensor data = t.dtype() == DType::BF16 ? t.cast(DType::F32) : t;  // no NumPy code for bf16
    std::string header = std::string("{'descr': '") + descr_of(data.dtype()) + "', 'fortran_order': False, 'shape': (";
    for (size_t i = 0; i < data.shape().size(); ++i) header += (i ? ", " : "") + std::to_string(data.shape()[i]);
    if (data.shape().size() == 1) header += ",";
    header += "), }";
    // Pad with spaces and end with '\n' so the data starts at a multiple of 64 bytes.
    const bool v2 = header.size() + 1 + 10 > 65535;
    const size_t preamble = v2 ? 12 : 10;
    const size_t total = (preamble + header.size() + 1 + 63) / 64 * 64;
    header.append(total - preamble - header.size() - 1, ' ');
    header += '\n';

    std::string out(kMagic, kMagicLen);
    out += static_cast<char>(v2 ? 2 : 1);
    out += '\0';
    const auto len = static_cast<uint32_t>(header.size());
    for (size_t i = 0; i < (v2 ? 4u : 2u); ++i) out += static_cast<char>((len >> (8 * i)) & 0xFF);
    out += header;
    io::write_file(path, {out, std::string_view(static_cast<const char*>(data.raw()), data.nbytes())},
                   "save_npy: the .npy file");
  });
}

}  // namespace rlx
