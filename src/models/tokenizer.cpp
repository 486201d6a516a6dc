// The GGUF tokenizer (rlx/tokenizer.h): SentencePiece-style score merges with byte fallback, and
// byte-level BPE with hand-written pre-tokenizers. See the header for the algorithms.
#include "rlx/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <queue>
#include <unordered_map>

#include "models/unicode_class.h"

namespace rlx {
namespace {

std::string i2s(int64_t v) { return std::to_string(v); }

// "▁" (U+2581), SentencePiece's space marker.
constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";

// One UTF-8 character starting at s[i]: its byte length (1 for an invalid or truncated
// sequence) and its code point (0xFFFD for those).
struct Utf8Char {
  uint32_t cp;
  size_t len;
};
Utf8Char utf8_at(std::string_view s, size_t i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) return {b0, 1};
  size_t len = 0;
  uint32_t cp = 0;
  if ((b0 & 0xE0) == 0xC0) len = 2, cp = b0 & 0x1F;
  else if ((b0 & 0xF0) == 0xE0) len = 3, cp = b0 & 0x0F;
  else if ((b0 & 0xF8) == 0xF0) len = 4, cp = b0 & 0x07;
  else return {0xFFFD, 1};
  if (i + len > s.size()) return {0xFFFD, 1};
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) return {0xFFFD, 1};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, len};
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// GPT-2's byte-to-unicode map: printable bytes stand for themselves, the other 68 bytes for
// U+0100, U+0101, ... in byte order.
struct ByteMap {
  std::array<uint32_t, 256> to_cp{};
  std::unordered_map<uint32_t, uint8_t> to_byte;
  ByteMap() {
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      to_cp[b] = printable ? b : next++;
      to_byte[to_cp[b]] = static_cast<uint8_t>(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

// Repeatedly merges the adjacent pair of symbols with the best priority (lowest value; the
// leftmost on ties) until no pair has one. Symbols start as the UTF-8 characters of `s`.
template <class Prio>
std::vector<std::string_view> merge_symbols(std::string_view s, Prio&& prio) {
  struct Sym {
    int prev, next;
    size_t start, len;
  };
  std::vector<Sym> syms;
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_at(s, i).len;
    const int idx = static_cast<int>(syms.size());
    syms.push_back({idx - 1, -1, i, len});
    if (idx > 0) syms[static_cast<size_t>(idx - 1)].next = idx;
    i += len;
  }
  struct Cand {
    double prio;
    int left;
    size_t len;
  };
  auto worse = [](const Cand& a, const Cand& b) { return a.prio > b.prio || (a.prio == b.prio && a.left > b.left); };
  std::priority_queue<Cand, std::vector<Cand>, decltype(worse)> queue(worse);
  auto view = [&](int i) { return s.substr(syms[static_cast<size_t>(i)].start, syms[static_cast<size_t>(i)].len); };
  auto consider = [&](int left) {
    if (left < 0) return;
    const int right = syms[static_cast<size_t>(left)].next;
    if (right < 0) return;
    if (const std::optional<double> p = prio(view(left), view(right)))
      queue.push({*p, left, syms[static_cast<size_t>(left)].len + syms[static_cast<size_t>(right)].len});
  };
  for (int i = 0; i + 1 < static_cast<int>(syms.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Cand c = queue.top();
    queue.pop();
    Sym& l = syms[static_cast<size_t>(c.left)];
    if (l.len == 0 || l.next < 0) continue;
    Sym& r = syms[static_cast<size_t>(l.next)];
    if (l.len + r.len != c.len) continue;  // stale: one side changed since it was queued
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[static_cast<size_t>(r.next)].prev = c.left;
    consider(l.prev);
    consider(c.left);
  }
  std::vector<std::string_view> out;
  for (int i = syms.empty() ? -1 : 0; i >= 0; i = syms[static_cast<size_t>(i)].next) out.push_back(view(i));
  return out;
}

// ---- pre-tokenizers (byte ranges of `text`) ----
using unicode::is_letter;
using unicode::is_number;
using unicode::is_space;
bool is_other(uint32_t c) { return !is_space(c) && !is_letter(c) && !is_number(c); }
bool is_crlf(uint32_t c) { return c == '\r' || c == '\n'; }
uint32_t ascii_lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

enum class PreKind { Llama3, Gpt2 };

std::vector<std::string_view> pre_split(std::string_view text, PreKind kind, size_t max_digits) {
  std::vector<uint32_t> cps;
  std::vector<size_t> at;  // byte offset of each code point; at[n] = text.size()
  for (size_t i = 0; i < text.size();) {
    const Utf8Char u = utf8_at(text, i);
    cps.push_back(u.cp);
    at.push_back(i);
    i += u.len;
  }
  at.push_back(text.size());
  const size_t n = cps.size();
  std::vector<std::string_view> out;
  auto emit = [&](size_t a, size_t b) { out.push_back(text.substr(at[a], at[b] - at[a])); };
  const bool ci = kind == PreKind::Llama3;
  size_t i = 0;
  while (i < n) {
    const uint32_t c = cps[i];
    // 's 't 're 've 'm 'll 'd (case-insensitive for Llama 3)
    if (c == '\'' && i + 1 < n) {
      const uint32_t c1 = ci ? ascii_lower(cps[i + 1]) : cps[i + 1];
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
        emit(i, i + 2);
        i += 2;
        continue;
      }
      if (i + 2 < n) {
        const uint32_t c2 = ci ? ascii_lower(cps[i + 2]) : cps[i + 2];
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
          emit(i, i + 3);
          i += 3;
          continue;
        }
      }
    }
    // Llama 3: [^\r\n\p{L}\p{N}]?\p{L}+   GPT-2: ' '?\p{L}+
    {
      const bool prefix = kind == PreKind::Llama3 ? (!is_letter(c) && !is_number(c) && !is_crlf(c)) : c == ' ';
      const size_t j = prefix && i + 1 < n && is_letter(cps[i + 1]) ? i + 1 : i;
      if (is_letter(cps[j])) {
        size_t k = j;
        while (k < n && is_letter(cps[k])) ++k;
        emit(i, k);
        i = k;
        continue;
      }
    }
    // Llama 3: \p{N}{1,max_digits}   GPT-2: ' '?\p{N}+
    {
      const size_t j = kind == PreKind::Gpt2 && c == ' ' && i + 1 < n && is_number(cps[i + 1]) ? i + 1 : i;
      if (is_number(cps[j])) {
        size_t k = j;
        while (k < n && is_number(cps[k]) && (kind == PreKind::Gpt2 || k - j < max_digits)) ++k;
        emit(i, k);
        i = k;
        continue;
      }
    }
    // ' '?[^\s\p{L}\p{N}]+ and, for Llama 3, [\r\n]*
    {
      const size_t j = c == ' ' && i + 1 < n && is_other(cps[i + 1]) ? i + 1 : i;
      if (is_other(cps[j])) {
        size_t k = j;
        while (k < n && is_other(cps[k])) ++k;
        if (kind == PreKind::Llama3)
          while (k < n && is_crlf(cps[k])) ++k;
        emit(i, k);
        i = k;
        continue;
      }
    }
    // c is white space here. Its run is [i, k).
    size_t k = i;
    while (k < n && is_space(cps[k])) ++k;
    if (kind == PreKind::Llama3) {  // \s*[\r\n]+ : up to the run's last CR / LF
      size_t last = n;
      for (size_t m = i; m < k; ++m)
        if (is_crlf(cps[m])) last = m;
      if (last != n) {
        emit(i, last + 1);
        i = last + 1;
        continue;
      }
    }
    // \s+(?!\S): the run, less its last character when a non-space follows; else \s+
    const size_t end = k < n && k - i >= 2 ? k - 1 : k;
    emit(i, end);
    i = end;
  }
  return out;
}

}  // namespace

struct Tokenizer::Impl {
  std::string what;  // the file, for errors
  TokenizerModel model = TokenizerModel::SentencePiece;
  std::string pre;
  PreKind pre_kind = PreKind::Gpt2;
  size_t max_digits = 3;
  bool ignore_merges = false;
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<TokenType> types;
  std::unordered_map<std::string, int32_t> ids;
  std::unordered_map<std::string, int32_t> merge_rank;  // "left right"
  std::array<int32_t, 256> byte_token{};                // "<0xXX>" ids, -1 when absent
  std::optional<int32_t> bos, eos, unk, eot, eom, pad;
  bool add_bos = false, add_eos = false, add_space_prefix = true;
  std::vector<int32_t> eog;
  // Tokens matched in the text before tokenizing: user-defined always, control on request;
  // by first byte, longest first.
  std::array<std::vector<int32_t>, 256> specials;

  [[noreturn]] void fail(const std::string& msg) const { throw Error(what + ": tokenizer: " + msg); }

  int32_t check_id(int64_t v, const std::string& key) const {
    if (v < 0 || v >= static_cast<int64_t>(tokens.size()))
      fail("metadata key '" + key + "' = " + i2s(v) + " is not a token id (the vocabulary has " + i2s(static_cast<int64_t>(tokens.size())) +
           " tokens)");
    return static_cast<int32_t>(v);
  }

  std::optional<int32_t> find(std::string_view s) const {
    auto it = ids.find(std::string(s));
    if (it == ids.end()) return std::nullopt;
    return it->second;
  }

  void encode_spm(std::string_view frag, bool first, std::vector<int32_t>& out) const {
    std::string text;
    if (first && add_space_prefix) text += kSpaceMarker;
    for (char ch : frag) {
      if (ch == ' ') text += kSpaceMarker;
      else text += ch;
    }
    auto prio = [&](std::string_view a, std::string_view b) -> std::optional<double> {
      std::string joined;
      joined.reserve(a.size() + b.size());
      joined.append(a).append(b);
      auto it = ids.find(joined);
      if (it == ids.end()) return std::nullopt;
      const TokenType t = types[static_cast<size_t>(it->second)];
      if (t != TokenType::Normal && t != TokenType::UserDefined && t != TokenType::Undefined) return std::nullopt;
      return -static_cast<double>(scores[static_cast<size_t>(it->second)]);
    };
    for (std::string_view sym : merge_symbols(text, prio)) {
      if (auto id = find(sym); id && types[static_cast<size_t>(*id)] != TokenType::Control) {
        out.push_back(*id);
        continue;
      }
      for (char ch : sym) {
        const int32_t b = byte_token[static_cast<uint8_t>(ch)];
        if (b >= 0) {
          out.push_back(b);
        } else if (unk) {
          out.push_back(*unk);
          break;
        } else {
          fail("the text has a character (" + std::string(sym) + ") that is no token, no byte token <0x" +
               [&] {
                 char buf[3];
                 std::snprintf(buf, sizeof buf, "%02X", static_cast<unsigned>(static_cast<uint8_t>(ch)));
                 return std::string(buf);
               }() +
               "> exists and there is no unknown token (tokenizer.ggml.unknown_token_id)");
        }
      }
    }
  }

  void encode_bpe(std::string_view frag, std::vector<int32_t>& out) const {
    const ByteMap& bm = byte_map();
    for (std::string_view word : pre_split(frag, pre_kind, max_digits)) {
      std::string mapped;
      for (char ch : word) append_utf8(mapped, bm.to_cp[static_cast<uint8_t>(ch)]);
      if (ignore_merges)
        if (auto id = find(mapped)) {
          out.push_back(*id);
          continue;
        }
      auto prio = [&](std::string_view a, std::string_view b) -> std::optional<double> {
        std::string key;
        key.reserve(a.size() + b.size() + 1);
        key.append(a).append(1, ' ').append(b);
        auto it = merge_rank.find(key);
        if (it == merge_rank.end()) return std::nullopt;
        return static_cast<double>(it->second);
      };
      for (std::string_view sym : merge_symbols(mapped, prio)) {
        if (auto id = find(sym)) out.push_back(*id);
        else if (unk) out.push_back(*unk);
        else
          fail("the byte-level symbol '" + std::string(sym) + "' (of the text piece '" + std::string(word) +
               "') is not a token and there is no unknown token; the vocabulary lacks a byte");
      }
    }
  }

  std::string piece(int32_t id, bool special) const {
    if (id < 0 || id >= static_cast<int32_t>(tokens.size()))
      throw Error("tokenizer: token id " + i2s(id) + " is out of range (the vocabulary has " +
                  i2s(static_cast<int64_t>(tokens.size())) + " tokens)");
    const std::string& t = tokens[static_cast<size_t>(id)];
    const TokenType type = types[static_cast<size_t>(id)];
    if (type == TokenType::Control) return special ? t : std::string();
    if (model == TokenizerModel::SentencePiece) {
      if (type == TokenType::Byte) {
        for (int b = 0; b < 256; ++b)
          if (byte_token[static_cast<size_t>(b)] == id) return std::string(1, static_cast<char>(b));
      }
      std::string out;
      for (size_t i = 0; i < t.size();) {
        if (t.compare(i, kSpaceMarker.size(), kSpaceMarker) == 0) {
          out += ' ';
          i += kSpaceMarker.size();
        } else {
          out += t[i++];
        }
      }
      return out;
    }
    if (type == TokenType::UserDefined) return t;
    const ByteMap& bm = byte_map();
    std::string out;
    for (size_t i = 0; i < t.size();) {
      const Utf8Char u = utf8_at(t, i);
      auto it = bm.to_byte.find(u.cp);
      if (it != bm.to_byte.end()) out += static_cast<char>(it->second);
      else out.append(t, i, u.len);
      i += u.len;
    }
    return out;
  }
};

namespace {

const GgufValue& array_key(const GgufFile& f, const std::string& key, GgufValueType elem, const char* what_elem) {
  const GgufValue* v = f.find(key);
  if (!v) throw Error(f.what() + ": tokenizer: metadata key '" + key + "' is missing");
  const bool ok = v->is_array() && (elem == GgufValueType::String ? v->element_type() == GgufValueType::String
                                                                  : v->element_type() != GgufValueType::String &&
                                                                        v->element_type() != GgufValueType::Array);
  if (!ok) throw Error(f.what() + ": tokenizer: metadata key '" + key + "' must be an array of " + what_elem + ", got " + v->to_string());
  return *v;
}

std::optional<int64_t> opt_int(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (!v) return std::nullopt;
  if (!v->is_integer())
    throw Error(f.what() + ": tokenizer: metadata key '" + key + "' must be an integer, got " + v->to_string());
  return v->as_i64();
}

std::optional<bool> opt_bool(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (!v) return std::nullopt;
  if (v->type() != GgufValueType::Bool)
    throw Error(f.what() + ": tokenizer: metadata key '" + key + "' must be a bool, got " + v->to_string());
  return v->as_bool();
}

std::optional<int> byte_token_value(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return std::nullopt;
  int v = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = t[i];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return std::nullopt;
    v = v * 16 + d;
  }
  return v;
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_gguf(const GgufFile& f) {
  auto m = std::make_unique<Impl>();
  m->what = f.what();
  const GgufValue* model = f.find("tokenizer.ggml.model");
  if (!model) m->fail("metadata key 'tokenizer.ggml.model' is missing: the file has no tokenizer");
  if (model->type() != GgufValueType::String)
    m->fail("metadata key 'tokenizer.ggml.model' must be a string, got " + model->to_string());
  const std::string& name = model->as_string();
  if (name == "llama") m->model = TokenizerModel::SentencePiece;
  else if (name == "gpt2") m->model = TokenizerModel::Bpe;
  else
    m->fail("tokenizer.ggml.model is '" + name + "'; rlx reads 'llama' (SentencePiece-style) and 'gpt2' (byte-level BPE) "
            "tokenizers");
  m->tokens = array_key(f, "tokenizer.ggml.tokens", GgufValueType::String, "strings").as_strings();
  const size_t n = m->tokens.size();
  if (n == 0) m->fail("tokenizer.ggml.tokens is empty");
  if (n > static_cast<size_t>(INT32_MAX)) m->fail("tokenizer.ggml.tokens has more than 2^31 - 1 tokens");
  for (size_t i = 0; i < n; ++i) m->ids.emplace(m->tokens[i], static_cast<int32_t>(i));  // first of a duplicate wins
  m->types.assign(n, TokenType::Normal);
  if (f.find("tokenizer.ggml.token_type")) {
    const std::vector<int64_t> t = array_key(f, "tokenizer.ggml.token_type", GgufValueType::I32, "integers").as_i64s();
    if (t.size() != n)
      m->fail("tokenizer.ggml.token_type has " + i2s(static_cast<int64_t>(t.size())) + " entries for " +
              i2s(static_cast<int64_t>(n)) + " tokens");
    for (size_t i = 0; i < n; ++i) {
      if (t[i] < 0 || t[i] > 6)
        m->fail("tokenizer.ggml.token_type[" + i2s(static_cast<int64_t>(i)) + "] = " + i2s(t[i]) +
                " is not a token type (0 undefined, 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte)");
      m->types[i] = static_cast<TokenType>(t[i]);
    }
  }
  m->scores.assign(n, 0.0f);
  if (m->model == TokenizerModel::SentencePiece || f.find("tokenizer.ggml.scores")) {
    if (!f.find("tokenizer.ggml.scores"))
      m->fail("metadata key 'tokenizer.ggml.scores' is missing (a 'llama' tokenizer merges by score)");
    const std::vector<double> s = array_key(f, "tokenizer.ggml.scores", GgufValueType::F32, "numbers").as_f64s();
    if (s.size() != n)
      m->fail("tokenizer.ggml.scores has " + i2s(static_cast<int64_t>(s.size())) + " entries for " +
              i2s(static_cast<int64_t>(n)) + " tokens");
    for (size_t i = 0; i < n; ++i) m->scores[i] = static_cast<float>(s[i]);
  }
  m->byte_token.fill(-1);
  if (m->model == TokenizerModel::SentencePiece) {
    for (size_t i = 0; i < n; ++i) {
      const auto b = byte_token_value(m->tokens[i]);
      if (m->types[i] == TokenType::Byte && !b)
        m->fail("token " + i2s(static_cast<int64_t>(i)) + " '" + m->tokens[i] + "' has the byte type but is not spelled <0xXX>");
      if (b && (m->types[i] == TokenType::Byte || m->types[i] == TokenType::Normal) &&
          m->byte_token[static_cast<size_t>(*b)] < 0) {
        m->byte_token[static_cast<size_t>(*b)] = static_cast<int32_t>(i);
        m->types[i] = TokenType::Byte;
      }
    }
    m->add_space_prefix = opt_bool(f, "tokenizer.ggml.add_space_prefix").value_or(true);
    m->add_bos = true;
  } else {
    const std::vector<std::string> merges =
        array_key(f, "tokenizer.ggml.merges", GgufValueType::String, "strings").as_strings();
    for (size_t r = 0; r < merges.size(); ++r) {
      const std::string& mg = merges[r];
      const size_t sp = mg.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 >= mg.size() || mg.find(' ', sp + 1) != std::string::npos)
        m->fail("tokenizer.ggml.merges[" + i2s(static_cast<int64_t>(r)) + "] = '" + mg +
                "' is not two symbols separated by one space");
      const std::string a = mg.substr(0, sp), b = mg.substr(sp + 1);
      if (!m->ids.count(a) || !m->ids.count(b) || !m->ids.count(a + b))
        m->fail("tokenizer.ggml.merges[" + i2s(static_cast<int64_t>(r)) + "] = '" + mg + "': '" +
                (!m->ids.count(a) ? a : !m->ids.count(b) ? b : a + b) + "' is not a token");
      m->merge_rank.emplace(mg, static_cast<int32_t>(r));  // the first rank of a duplicate wins
    }
    const GgufValue* pre = f.find("tokenizer.ggml.pre");
    if (pre && pre->type() != GgufValueType::String)
      m->fail("metadata key 'tokenizer.ggml.pre' must be a string, got " + pre->to_string());
    std::string p = pre ? pre->as_string() : (m->ids.count("<|begin_of_text|>") ? "llama-bpe" : "default");
    if (p == "llama-bpe" || p == "llama3" || p == "smaug-bpe") {
      m->pre_kind = PreKind::Llama3;
      m->ignore_merges = true;
      m->pre = "llama3";
    } else if (p == "qwen2") {
      m->pre_kind = PreKind::Llama3;
      m->max_digits = 1;
      m->pre = "qwen2";
    } else if (p == "default" || p == "gpt2" || p == "gpt-2") {
      m->pre_kind = PreKind::Gpt2;
      m->pre = "gpt2";
    } else {
      m->fail("tokenizer.ggml.pre is '" + p + "'; rlx implements the pre-tokenizers 'llama-bpe' (Llama 3), 'qwen2' "
              "and 'default' / 'gpt2'");
    }
    m->add_space_prefix = false;
    m->add_bos = false;
  }
  auto id_key = [&](const char* k) -> std::optional<int32_t> {
    const std::string key = std::string("tokenizer.ggml.") + k;
    if (auto v = opt_int(f, key)) return m->check_id(*v, key);
    return std::nullopt;
  };
  m->bos = id_key("bos_token_id");
  m->eos = id_key("eos_token_id");
  m->unk = id_key("unknown_token_id");
  m->pad = id_key("padding_token_id");
  m->eot = id_key("eot_token_id");
  m->eom = id_key("eom_token_id");
  if (!m->unk)
    for (size_t i = 0; i < n; ++i)
      if (m->types[i] == TokenType::Unknown) {
        m->unk = static_cast<int32_t>(i);
        break;
      }
  if (auto b = opt_bool(f, "tokenizer.ggml.add_bos_token")) m->add_bos = *b;
  if (auto e = opt_bool(f, "tokenizer.ggml.add_eos_token")) m->add_eos = *e;
  if (m->add_bos && !m->bos) m->fail("tokenizer.ggml.add_bos_token is set (or implied) but tokenizer.ggml.bos_token_id is missing");
  if (m->add_eos && !m->eos) m->fail("tokenizer.ggml.add_eos_token is set but tokenizer.ggml.eos_token_id is missing");
  for (auto id : {m->eos, m->eot, m->eom})
    if (id && std::find(m->eog.begin(), m->eog.end(), *id) == m->eog.end()) m->eog.push_back(*id);
  for (const char* t : {"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<|endoftext|>", "<|end_of_text|>", "<end_of_turn>"})
    if (auto id = m->find(t); id && m->types[static_cast<size_t>(*id)] == TokenType::Control &&
                              std::find(m->eog.begin(), m->eog.end(), *id) == m->eog.end())
      m->eog.push_back(*id);
  for (size_t i = 0; i < n; ++i)
    if ((m->types[i] == TokenType::Control || m->types[i] == TokenType::UserDefined) && !m->tokens[i].empty())
      m->specials[static_cast<uint8_t>(m->tokens[i][0])].push_back(static_cast<int32_t>(i));
  for (auto& bucket : m->specials)
    std::stable_sort(bucket.begin(), bucket.end(), [&](int32_t a, int32_t b) {
      return m->tokens[static_cast<size_t>(a)].size() > m->tokens[static_cast<size_t>(b)].size();
    });
  return Tokenizer(std::move(m));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  const Impl& m = *impl_;
  std::vector<int32_t> out;
  if (options.add_bos.value_or(m.add_bos)) {
    if (!m.bos) throw Error(m.what + ": tokenizer: add_bos requested but the file has no tokenizer.ggml.bos_token_id");
    out.push_back(*m.bos);
  }
  // Split off the special tokens written in the text; encode the rest fragment by fragment.
  size_t start = 0, i = 0;
  bool first = true;
  auto flush = [&](size_t end) {
    if (end > start) {
      const std::string_view frag = text.substr(start, end - start);
      if (m.model == TokenizerModel::SentencePiece) m.encode_spm(frag, first && start == 0, out);
      else m.encode_bpe(frag, out);
    }
    first = false;
  };
  while (i < text.size()) {
    int32_t hit = -1;
    for (int32_t id : m.specials[static_cast<uint8_t>(text[i])]) {
      const TokenType t = m.types[static_cast<size_t>(id)];
      if (t == TokenType::Control && !options.parse_special) continue;
      const std::string& s = m.tokens[static_cast<size_t>(id)];
      if (text.compare(i, s.size(), s) == 0) {
        hit = id;
        break;
      }
    }
    if (hit < 0) {
      ++i;
      continue;
    }
    flush(i);
    out.push_back(hit);
    i += m.tokens[static_cast<size_t>(hit)].size();
    start = i;
  }
  flush(text.size());
  if (options.add_eos.value_or(m.add_eos)) {
    if (!m.eos) throw Error(m.what + ": tokenizer: add_eos requested but the file has no tokenizer.ggml.eos_token_id");
    out.push_back(*m.eos);
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, const DecodeOptions& options) const {
  const Impl& m = *impl_;
  std::string out;
  bool leading = m.model == TokenizerModel::SentencePiece && m.add_space_prefix && options.strip_leading_space;
  for (int32_t id : ids) {
    std::string p = m.piece(id, options.special);
    if (leading && !p.empty() && m.types[static_cast<size_t>(id)] != TokenType::Control) {
      if (p[0] == ' ' && m.types[static_cast<size_t>(id)] != TokenType::Byte) p.erase(0, 1);
      leading = false;
    }
    out += p;
  }
  return out;
}

std::string Tokenizer::piece(int32_t id, bool special) const { return impl_->piece(id, special); }
TokenizerModel Tokenizer::model() const { return impl_->model; }
const std::string& Tokenizer::pre() const { return impl_->pre; }
int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->tokens.size()); }
const std::string& Tokenizer::token_text(int32_t id) const {
  impl_->piece(id, true);  // range check
  return impl_->tokens[static_cast<size_t>(id)];
}
TokenType Tokenizer::token_type(int32_t id) const {
  impl_->piece(id, true);
  return impl_->types[static_cast<size_t>(id)];
}
std::optional<int32_t> Tokenizer::token_id(std::string_view text) const { return impl_->find(text); }
std::optional<int32_t> Tokenizer::bos() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos() const { return impl_->eos; }
std::optional<int32_t> Tokenizer::unknown() const { return impl_->unk; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
bool Tokenizer::is_end_of_generation(int32_t id) const {
  return std::find(impl_->eog.begin(), impl_->eog.end(), id) != impl_->eog.end();
}
const std::vector<int32_t>& Tokenizer::end_of_generation() const { return impl_->eog; }

}  // namespace rlx
