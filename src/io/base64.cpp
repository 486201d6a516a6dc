#include "io/base64.h"

#include <array>

#include "rlx/error.h"

namespace rlx::io {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

constexpr std::array<int8_t, 256> make_table() {
  std::array<int8_t, 256> t{};
  for (auto& v : t) v = -1;
  for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int8_t>(i);
  return t;
}
constexpr std::array<int8_t, 256> kTable = make_table();

}  // namespace

std::string base64_encode(const void* data, size_t nbytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  std::string out;
  out.reserve((nbytes + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= nbytes; i += 3) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (uint32_t{p[i + 1]} << 8) | p[i + 2];
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  const size_t rest = nbytes - i;
  if (rest == 1) {
    const uint32_t v = uint32_t{p[i]} << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (rest == 2) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (uint32_t{p[i + 1]} << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

size_t base64_decoded_size(std::string_view text) {
  size_t n = text.size() / 4 * 3;
  if (!text.empty() && text.back() == '=') --n;
  if (text.size() >= 2 && text[text.size() - 2] == '=') --n;
  return n;
}

std::vector<uint8_t> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0)
    throw Error("base64: length " + std::to_string(text.size()) + " is not a multiple of 4");
  size_t pad = 0;
  if (!text.empty() && text.back() == '=') ++pad;
  if (text.size() >= 2 && text[text.size() - 2] == '=') ++pad;
  std::vector<uint8_t> out;
  out.reserve(base64_decoded_size(text));
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    uint32_t v = 0;
    for (size_t j = 0; j < 4; ++j) {
      const char c = text[i + j];
      int8_t d;
      if (c == '=' && last && j >= 4 - pad) d = 0;
      else d = kTable[static_cast<uint8_t>(c)];
      if (d < 0)
        throw Error("base64: invalid character " +
                    (c >= 32 && c < 127 ? "'" + std::string(1, c) + "'" : "code " + std::to_string(uint8_t(c))) +
                    " at position " + std::to_string(i + j));
      v = (v << 6) | static_cast<uint32_t>(d);
    }
    out.push_back(static_cast<uint8_t>(v >> 16));
    if (!last || pad < 2) out.push_back(static_cast<uint8_t>(v >> 8));
    if (!last || pad < 1) out.push_back(static_cast<uint8_t>(v));
    if (last && ((pad == 1 && (v & 0xFF) != 0) || (pad == 2 && (v & 0xFFFF) != 0)))
      throw Error("base64: non-zero padding bits at the end");
  }
  return out;
}

}  // namespace rlx::io
