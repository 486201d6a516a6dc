#pragma once
// The tokenizer stored in a GGUF file (tokenizer.ggml.* metadata): text -> token ids -> text.
//
// Two models, chosen by tokenizer.ggml.model:
//   "llama"  SentencePiece-style (Llama 1/2, Mistral): spaces become U+2581 '▁' (and one is put
//            in front of the text when tokenizer.ggml.add_space_prefix, default true); the text is
//            split into UTF-8 characters, and the adjacent pair whose concatenation is a token with
//            the highest score (tokenizer.ggml.scores; leftmost on ties) is merged until no pair
//            is a token. A character that is not a token becomes its UTF-8 bytes as the byte
//            tokens "<0xXX>" (byte fallback), else the unknown token.
//   "gpt2"   byte-level BPE (Llama 3, Qwen2, GPT-2): the text is split by the pre-tokenizer named
//            by tokenizer.ggml.pre (below); each piece's bytes become the GPT-2 byte-to-unicode
//            characters (printable bytes as themselves, the others as U+0100 + n in byte order),
//            and the pair of adjacent symbols with the lowest merge rank (the index in
//            tokenizer.ggml.merges, "left right") is merged until no pair has a rank.
//            Pre-tokenizers (hand-written, no regex library), by tokenizer.ggml.pre:
//              "llama-bpe", "llama3", "smaug-bpe" (also when absent with a <|begin_of_text|>
//              token): the Llama 3 split  (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ |
//              \p{N}{1,3} | ' '?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+ ; a piece
//              that is a whole token is taken as is (no merges);
//              "qwen2": the same with single digits (\p{N});
//              "default", "gpt2" (also when absent otherwise): the GPT-2 split 's|'t|'re|'ve|'m|'ll|'d
//              | ' '?\p{L}+ | ' '?\p{N}+ | ' '?[^\s\p{L}\p{N}]+ | \s+(?!\S) | \s+ .
//            Letters / numbers / spaces: exact for ASCII and Latin-1; elsewhere a table of the
//            main number, space and punctuation/symbol blocks, every other code point counting as
//            a letter (combining marks included), which differs from the full Unicode tables only
//            for rare characters.
//
// Token types (tokenizer.ggml.token_type, optional): 0 undefined, 1 normal, 2 unknown, 3 control,
// 4 user-defined, 5 unused, 6 byte. User-defined tokens found in the text are always kept as
// single ids; control tokens (<s>, <|eot_id|>, ...) only with EncodeOptions::parse_special.
// decode() leaves control tokens out unless DecodeOptions::special.
//
// Special ids: tokenizer.ggml.{bos,eos,unknown,padding,eot,eom}_token_id; add_bos_token (default:
// true for "llama", false for "gpt2"), add_eos_token (false), add_space_prefix ("llama": true).
// End-of-generation ids: eos, eot, eom and control tokens spelled <|eot_id|>, <|eom_id|>,
// <|im_end|>, <|end|>, <|endoftext|>, <|end_of_text|>, <end_of_turn>.
//
// Malformed metadata is an rlx::Error naming the file and key: missing tokens / scores / merges,
// arrays of the wrong type or length, token types outside 0..6, special ids out of range, merges
// that are not "left right" or whose parts are not tokens.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/gguf.h"

namespace rlx {

enum class TokenizerModel { SentencePiece, Bpe };
enum class TokenType : uint8_t { Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

struct EncodeOptions {
  std::optional<bool> add_bos = std::nullopt;  // unset: tokenizer.ggml.add_bos_token (or the model's default)
  std::optional<bool> add_eos = std::nullopt;  // unset: tokenizer.ggml.add_eos_token (default false)
  bool parse_special = false;   // control tokens written in the text become their ids
};

struct DecodeOptions {
  bool special = false;  // write control tokens' text (otherwise they are left out)
  // "llama": drop the space that add_space_prefix put in front of the first word.
  bool strip_leading_space = true;
};

class Tokenizer {
 public:
  // Reads tokenizer.ggml.* from `f`; rlx::Error naming the key when it is missing or malformed.
  static Tokenizer from_gguf(const GgufFile& f);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;
  std::string decode(std::span<const int32_t> ids, const DecodeOptions& options = {}) const;
  // The bytes one token stands for in the middle of a text (for streaming): "▁" / the GPT-2
  // byte characters mapped back, byte tokens as their byte (possibly part of a UTF-8 character),
  // control tokens empty unless `special`. Out-of-range id -> rlx::Error.
  std::string piece(int32_t id, bool special = false) const;

  TokenizerModel model() const;
  const std::string& pre() const;  // the pre-tokenizer in use ("llama3", "qwen2", "gpt2"; "" for "llama")
  int32_t vocab_size() const;
  const std::string& token_text(int32_t id) const;  // as stored
  TokenType token_type(int32_t id) const;
  std::optional<int32_t> token_id(std::string_view text) const;  // exact stored text
  std::optional<int32_t> bos() const;
  std::optional<int32_t> eos() const;
  std::optional<int32_t> unknown() const;
  bool add_bos() const;
  bool is_end_of_generation(int32_t id) const;
  const std::vector<int32_t>& end_of_generation() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rlx
