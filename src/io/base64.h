#pragma once
// Standard base64 (RFC 4648 alphabet, '=' padding), used for inline tensor data in graph JSON.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rlx::io {

std::string base64_encode(const void* data, size_t nbytes);
// Strict decoding: length a multiple of 4, only alphabet characters, '=' only as the final
// one or two characters, zero padding bits. Throws rlx::Error describing the first problem.
std::vector<uint8_t> base64_decode(std::string_view text);
// Decoded size of a well-formed encoding of `text` (no validation).
size_t base64_decoded_size(std::string_view text);

}  // namespace rlx::io
