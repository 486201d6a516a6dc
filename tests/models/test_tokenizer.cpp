// The GGUF tokenizer (rlx/tokenizer.h) on small vocabularies written here; every expected id
// list is worked out by hand from the algorithm (comments give the steps).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/unicode_class.h"
#include "rlx/tokenizer.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using rlx::testing::error_message;

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<double> scores;
  std::vector<int64_t> types;
  int32_t add(const std::string& t, double score = 0.0, int64_t type = 1) {
    tokens.push_back(t);
    scores.push_back(score);
    types.push_back(type);
    return static_cast<int32_t>(tokens.size() - 1);
  }
  int32_t id(const std::string& t) const {
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] == t) return static_cast<int32_t>(i);
    ADD_FAILURE() << "no token " << t;
    return -1;
  }
};

// Writes the vocabulary as tokenizer.ggml.* metadata; `edit` may change the writer's keys.
GgufFile file_of(const std::string& model, const Vocab& v, const std::vector<std::pair<std::string, GgufValue>>& extra,
                 bool with_scores = true, bool with_types = true) {
  GgufWriter w;
  w.add("tokenizer.ggml.model", GgufValue::string(model));
  w.add("tokenizer.ggml.tokens", GgufValue::strings(v.tokens));
  if (with_scores) w.add("tokenizer.ggml.scores", GgufValue::array_of(GgufValueType::F32, v.scores));
  if (with_types) w.add("tokenizer.ggml.token_type", GgufValue::array_of_i64(GgufValueType::I32, v.types));
  for (const auto& [k, val] : extra) w.add(k, val);
  const std::string bytes = w.bytes();
  return GgufFile::from_bytes(bytes.data(), bytes.size(), "tok.gguf");
}

// ---- SentencePiece-style ("llama") ----
const char* kSp = "\xE2\x96\x81";  // ▁
std::string sp(const std::string& s) {
  std::string out;
  for (char c : s) out += c == ' ' ? std::string(kSp) : std::string(1, c);
  return out;
}

Vocab spm_vocab() {
  Vocab v;
  v.add("<unk>", 0, 2);
  v.add("<s>", 0, 3);
  v.add("</s>", 0, 3);
  v.add("<0xC3>", 0, 6);
  v.add("<0xA9>", 0, 6);
  for (const char* c : {"h", "e", "l", "o", "a"}) v.add(c, -10);
  v.add(kSp, -10);
  v.add("ll", -1);      // the best pair
  v.add("el", -2);      // better than "he", but gone once "ll" is merged
  v.add("he", -3);
  v.add("hell", -2.5);
  v.add("hello", -2);
  v.add("llo", -6);
  v.add(sp(" hello"), -7);
  v.add("aa", -1);
  return v;
}

std::vector<std::pair<std::string, GgufValue>> spm_ids() {
  return {{"tokenizer.ggml.bos_token_id", GgufValue::u32(1)},
          {"tokenizer.ggml.eos_token_id", GgufValue::u32(2)},
          {"tokenizer.ggml.unknown_token_id", GgufValue::u32(0)}};
}

TEST(Tokenizer, SentencePieceMergesByScore) {
  const Vocab v = spm_vocab();
  const Tokenizer t = Tokenizer::from_gguf(file_of("llama", v, spm_ids()));
  EXPECT_EQ(t.model(), TokenizerModel::SentencePiece);
  EXPECT_TRUE(t.add_bos());
  // "▁hello": pairs ▁h, he(-3), el(-2), ll(-1), lo -> ll; then he(-3), llo(-6) -> he; then hell(-2.5)
  // -> hell; then hello(-2) -> hello; then ▁hello(-7).
  EXPECT_EQ(t.encode("hello"), (std::vector<int32_t>{1, v.id(sp(" hello"))}));
  // "▁aaa": aa at (1,2) and (2,3) tie: the leftmost merges; then ▁ and the last a stay.
  EXPECT_EQ(t.encode("aaa", {.add_bos = false}), (std::vector<int32_t>{v.id(kSp), v.id("aa"), v.id("a")}));
  // é (C3 A9) is no token: its byte tokens; z has no byte token: the unknown token.
  EXPECT_EQ(t.encode("hello \xC3\xA9z"),
            (std::vector<int32_t>{1, v.id(sp(" hello")), v.id(kSp), v.id("<0xC3>"), v.id("<0xA9>"), 0}));
  // decode: ▁ -> space, the prefix space dropped, byte tokens joined back into é, control tokens left out.
  EXPECT_EQ(t.decode(std::vector<int32_t>{1, v.id(sp(" hello")), v.id(kSp), v.id("<0xC3>"), v.id("<0xA9>"), 2}),
            "hello \xC3\xA9");
  EXPECT_EQ(t.decode(std::vector<int32_t>{1, v.id(sp(" hello")), 2}, {.special = true}), "<s>hello</s>");
  EXPECT_EQ(t.piece(v.id(sp(" hello"))), " hello");
  EXPECT_TRUE(t.is_end_of_generation(2));
  EXPECT_FALSE(t.is_end_of_generation(1));
}

TEST(Tokenizer, SentencePieceSpecialTokensOnlyWhenAsked) {
  const Vocab v = spm_vocab();
  const Tokenizer t = Tokenizer::from_gguf(file_of("llama", v, spm_ids()));
  // parse_special: "hello" (the first fragment, with the space prefix) then <s> as one id.
  EXPECT_EQ(t.encode("hello<s>", {.parse_special = true}), (std::vector<int32_t>{1, v.id(sp(" hello")), 1}));
  // Otherwise <, s, > are plain characters: no tokens and no byte tokens -> unknown each.
  EXPECT_EQ(t.encode("hello<s>"), (std::vector<int32_t>{1, v.id(sp(" hello")), 0, 0, 0}));
  // add_space_prefix false: no ▁ in front.
  auto ids = spm_ids();
  ids.emplace_back("tokenizer.ggml.add_space_prefix", GgufValue::boolean(false));
  ids.emplace_back("tokenizer.ggml.add_bos_token", GgufValue::boolean(false));
  const Tokenizer t2 = Tokenizer::from_gguf(file_of("llama", v, ids));
  EXPECT_EQ(t2.encode("hello"), (std::vector<int32_t>{v.id("hello")}));
}

// ---- byte-level BPE ("gpt2") ----
const std::string kG = "\xC4\xA0";  // Ġ (U+0120, the byte 0x20)
const std::string kC = "\xC4\x8A";  // Ċ (U+010A, the byte 0x0A)

Vocab bpe_vocab() {
  Vocab v;
  for (const std::string& c : {std::string("H"), std::string("e"), std::string("l"), std::string("o"), kG, std::string("w"),
                               std::string("r"), std::string("d"), std::string("'"), std::string("s"), std::string("1"),
                               std::string("2"), std::string("3"), std::string("4"), std::string("5"), kC, std::string("k"),
                               std::string("\xC3\x83"), std::string("\xC2\xA9")})  // Ã (byte C3), © (byte A9)
    v.add(c);
  for (const std::string& c : {kG + "w", std::string("or"), kG + "wor", std::string("ld"), kG + "world", std::string("He"),
                               std::string("ll"), std::string("Hell"), std::string("Hello"), std::string("d'"),
                               std::string("'s"), kG + "1", std::string("34"), kC + kC, std::string("ok"), std::string("12"),
                               std::string("45")})
    v.add(c);
  v.add("<|begin_of_text|>", 0, 3);
  v.add("<|eot_id|>", 0, 3);
  v.add("<tool>", 0, 4);
  return v;
}

std::vector<std::string> bpe_merges() {
  return {kG + " w", "o r", kG + "w or", "l d", kG + "wor ld", "H e", "l l", "He ll", "Hell o",
          "d '",  // would cross the boundary between "world" and "'s": must never apply
          "' s", kG + " 1", "3 4", kC + " " + kC, "o k", "1 2"};
}

// eos: the second-to-last token; bos: <|begin_of_text|> when the vocabulary has it.
Tokenizer bpe(const std::string& pre, const Vocab& v, const std::vector<std::string>& merges = bpe_merges()) {
  std::vector<std::pair<std::string, GgufValue>> keys = {
      {"tokenizer.ggml.merges", GgufValue::strings(merges)},
      {"tokenizer.ggml.pre", GgufValue::string(pre)},
      {"tokenizer.ggml.eos_token_id", GgufValue::u32(static_cast<uint32_t>(v.tokens.size() - 2))}};
  for (size_t i = 0; i < v.tokens.size(); ++i)
    if (v.tokens[i] == "<|begin_of_text|>") keys.emplace_back("tokenizer.ggml.bos_token_id", GgufValue::u32(static_cast<uint32_t>(i)));
  return Tokenizer::from_gguf(file_of("gpt2", v, keys, false));
}

const std::string kText = "Hello world's 12345\n\nok";

TEST(Tokenizer, Llama3Bpe) {
  const Vocab v = bpe_vocab();
  const Tokenizer t = bpe("llama-bpe", v);
  EXPECT_EQ(t.pre(), "llama3");
  EXPECT_FALSE(t.add_bos());
  // Split: "Hello" | " world" | "'s" | " " | "123" | "45" | "\n\n" | "ok".
  // "Hello": He(5), ll(6), Hell(7), Hello(8). " world": Ġw(0), or(1), Ġwor(2), ld(3), Ġworld(4).
  // "'s" by rank 10 ("d '" never sees both). "123": 12(15) then 3 (no "12 3"). "45": a whole token,
  // taken without merges (there is no "4 5" merge). "\n\n": ĊĊ(13). "ok": a whole token.
  const std::vector<int32_t> want = {v.id("Hello"), v.id(kG + "world"), v.id("'s"), v.id(kG),     v.id("12"),
                                     v.id("3"),     v.id("45"),         v.id(kC + kC), v.id("ok")};
  EXPECT_EQ(t.encode(kText), want);
  EXPECT_EQ(t.decode(want), kText);
  // Bytes outside ASCII go through the byte-to-unicode map: é = C3 A9 -> Ã ©.
  EXPECT_EQ(t.encode("\xC3\xA9"), (std::vector<int32_t>{v.id("\xC3\x83"), v.id("\xC2\xA9")}));
  EXPECT_EQ(t.decode(std::vector<int32_t>{v.id("\xC3\x83"), v.id("\xC2\xA9")}), "\xC3\xA9");
  // Control tokens only with parse_special; user-defined ones always.
  const int32_t eot = v.id("<|eot_id|>");
  EXPECT_EQ(t.encode("ok<|eot_id|>", {.parse_special = true}), (std::vector<int32_t>{v.id("ok"), eot}));
  EXPECT_EQ(t.encode("ok<tool>ok"), (std::vector<int32_t>{v.id("ok"), v.id("<tool>"), v.id("ok")}));
  EXPECT_EQ(t.encode("ok", {.add_bos = true}), (std::vector<int32_t>{v.id("<|begin_of_text|>"), v.id("ok")}));
  EXPECT_TRUE(t.is_end_of_generation(eot));
  EXPECT_EQ(t.decode(std::vector<int32_t>{v.id("ok"), eot}), "ok");
  EXPECT_EQ(t.decode(std::vector<int32_t>{v.id("ok"), eot}, {.special = true}), "ok<|eot_id|>");
  // A byte with no token and no unknown token: an error naming the piece.
  EXPECT_THAT(error_message([&] { t.encode("z"); }), HasSubstr("is not a token"));
}

TEST(Tokenizer, Gpt2Bpe) {
  const Vocab v = bpe_vocab();
  const Tokenizer t = bpe("default", v);
  // Split: "Hello" | " world" | "'s" | " 12345" | "\n" | "\n" | "ok" (\s+(?!\S) leaves the second \n).
  // " 12345": Ġ1(11) first, then 34(12); "Ġ1 2", "2 34", "34 5" are no merges. "ok": o k -> ok(14).
  const std::vector<int32_t> want = {v.id("Hello"), v.id(kG + "world"), v.id("'s"), v.id(kG + "1"), v.id("2"),
                                     v.id("34"),    v.id("5"),          v.id(kC),    v.id(kC),      v.id("ok")};
  EXPECT_EQ(t.encode(kText), want);
  EXPECT_EQ(t.decode(want), kText);
}

TEST(Tokenizer, Llama3SplitRules) {
  // Each piece is a whole token here, so the ids show the split itself.
  Vocab v;
  const std::vector<std::string> pieces = {"!!" + kC, kG + kG, kG + "a", "'RE"};
  for (const char* c : {"!", "x", "a", "'", "R", "E"}) v.add(c);
  v.add(kG);
  v.add(kC);
  for (const auto& p : pieces) v.add(p);
  v.add("<|eot_id|>", 0, 3);
  v.add("<|x|>", 0, 3);
  const Tokenizer t = bpe("llama-bpe", v, {});  // no merges: a piece is one token only when it is one
  // "!!\n": [^\s\p{L}\p{N}]+[\r\n]* takes the newline along.
  EXPECT_EQ(t.encode("!!\n"), (std::vector<int32_t>{v.id("!!" + kC)}));
  // "   a": the run of 3 spaces is followed by a letter: \s+(?!\S) takes 2, then " a".
  EXPECT_EQ(t.encode("   a"), (std::vector<int32_t>{v.id(kG + kG), v.id(kG + "a")}));
  // 'RE: the contraction is case-insensitive for Llama 3.
  EXPECT_EQ(t.encode("'RE"), (std::vector<int32_t>{v.id("'RE")}));
  // "x   " at the end: the whole run of spaces is one piece; with no token "ĠĠĠ" and no merges
  // it stays three Ġ (were it split like "   a", the first two would be the token ĠĠ).
  EXPECT_EQ(t.encode("x   "), (std::vector<int32_t>{v.id("x"), v.id(kG), v.id(kG), v.id(kG)}));
}

TEST(Tokenizer, UnicodeClasses) {
  using namespace unicode;
  EXPECT_TRUE(is_letter(0xE9));     // é
  EXPECT_TRUE(is_letter(0x4E2D));   // 中
  EXPECT_TRUE(is_letter(0x0436));   // ж
  EXPECT_FALSE(is_letter(0x1F600));  // emoji
  EXPECT_FALSE(is_letter(0x2014));  // em dash
  EXPECT_TRUE(is_number(0x0663));   // Arabic-Indic 3
  EXPECT_TRUE(is_number(0xB2));     // ²
  EXPECT_TRUE(is_space(0x3000));
  EXPECT_FALSE(is_letter(0xD7));  // ×
  EXPECT_FALSE(is_letter(0x0301));  // combining acute
}

// ---- malformed metadata ----
TEST(Tokenizer, MalformedMetadataIsAnError) {
  const Vocab s = spm_vocab();
  const Vocab b = bpe_vocab();
  auto err = [](const std::function<void()>& fn) { return error_message(fn); };
  EXPECT_THAT(err([&] { Tokenizer::from_gguf(file_of("bert", s, {})); }), HasSubstr("'bert'"));
  EXPECT_THAT(err([&] { Tokenizer::from_gguf(file_of("llama", s, {}, false)); }), HasSubstr("tokenizer.ggml.scores"));
  EXPECT_THAT(err([&] { Tokenizer::from_gguf(file_of("gpt2", b, {}, false)); }),
              HasSubstr("'tokenizer.ggml.merges' is missing"));
  Vocab bad = s;
  bad.types[5] = 9;
  EXPECT_THAT(err([&] { Tokenizer::from_gguf(file_of("llama", bad, spm_ids())); }), HasSubstr("token_type[5] = 9"));
  Vocab badbyte = s;
  badbyte.types[5] = 6;  // "h" typed as a byte token
  EXPECT_THAT(err([&] { Tokenizer::from_gguf(file_of("llama", badbyte, spm_ids())); }), HasSubstr("<0xXX>"));
  EXPECT_THAT(err([&] { Tokenizer::from_gguf(file_of("llama", s, {{"tokenizer.ggml.bos_token_id", GgufValue::u32(99)}})); }),
              HasSubstr("bos_token_id' = 99 is not a token id"));
  EXPECT_THAT(err([&] { Tokenizer::from_gguf(file_of("llama", s, {})); }), HasSubstr("bos_token_id is missing"));
  auto with_merges = [&](std::vector<std::string> m, const std::string& pre = "llama-bpe") {
    return file_of("gpt2", b, {{"tokenizer.ggml.merges", GgufValue::strings(std::move(m))}, {"tokenizer.ggml.pre", GgufValue::string(pre)}},
                   false);
  };
  EXPECT_THAT(err([&] { Tokenizer::from_gguf(with_merges({"o r", "Hello"})); }), HasSubstr("merges[1] = 'Hello' is not two symbols"));
  EXPECT_THAT(err([&] { Tokenizer::from_gguf(with_merges({"o q"})); }), HasSubstr("'q' is not a token"));
  EXPECT_THAT(err([&] { Tokenizer::from_gguf(with_merges({"o k"}, "falcon")); }), HasSubstr("'falcon'"));
  // Wrong array types / lengths.
  GgufWriter w;
  w.add("tokenizer.ggml.model", GgufValue::string("llama"));
  w.add("tokenizer.ggml.tokens", GgufValue::array_of(GgufValueType::F32, {1.0, 2.0}));
  const std::string bytes = w.bytes();
  EXPECT_THAT(err([&] { Tokenizer::from_gguf(GgufFile::from_bytes(bytes.data(), bytes.size(), "t.gguf")); }),
              HasSubstr("'tokenizer.ggml.tokens' must be an array of strings"));
  Vocab shortscores = s;
  shortscores.scores.pop_back();
  EXPECT_THAT(err([&] { Tokenizer::from_gguf(file_of("llama", shortscores, spm_ids())); }), HasSubstr("scores has"));
  const Tokenizer t = Tokenizer::from_gguf(file_of("llama", s, spm_ids()));
  EXPECT_THAT(err([&] { t.piece(1000); }), HasSubstr("out of range"));
}

}  // namespace
}  // namespace rlx
