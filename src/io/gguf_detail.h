#pragma once
// Internals shared by the GGUF reader, writer and value code (src/io/gguf*.cpp).
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "rlx/gguf.h"

namespace rlx {

namespace gguf_detail {
size_t scalar_size(GgufValueType t);  // bytes of a number / bool; 0 for string and array
bool is_signed(GgufValueType t);
bool is_unsigned(GgufValueType t);
bool is_known(uint32_t t);  // a GgufValueType number
int64_t sign_extend(uint64_t bits, size_t size);
}  // namespace gguf_detail

// Builds values and parses files (a friend of GgufValue and GgufFile).
struct GgufParser {
  static GgufValue make_scalar(GgufValueType t, uint64_t bits) {
    GgufValue v;
    v.type_ = t;
    v.bits_ = bits;
    return v;
  }
  // An array of `count` elements of `elem`; numbers and bools get count * size zero bytes.
  static GgufValue make_array(GgufValueType elem, uint64_t count) {
    GgufValue v;
    v.type_ = GgufValueType::Array;
    v.elem_ = elem;
    v.count_ = count;
    if (const size_t s = gguf_detail::scalar_size(elem)) v.packed_.assign(static_cast<size_t>(count) * s, '\0');
    return v;
  }
  // A number / bool array over `bytes` (count * size little-endian elements).
  static GgufValue packed_array(GgufValueType elem, uint64_t count, std::string bytes) {
    GgufValue v;
    v.type_ = GgufValueType::Array;
    v.elem_ = elem;
    v.count_ = count;
    v.packed_ = std::move(bytes);
    return v;
  }
  static void parse(GgufFile& f);
};

// Reads the parts of a value the encoder writes (a friend of GgufValue).
struct GgufEncoder {
  static uint64_t bits(const GgufValue& v) { return v.bits_; }
  static const std::string& packed(const GgufValue& v) { return v.packed_; }
  static const std::vector<std::string>& strs(const GgufValue& v) { return v.strs_; }
  static const std::vector<GgufValue>& items(const GgufValue& v) { return v.items_; }
};

}  // namespace rlx
