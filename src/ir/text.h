#pragma once
// Text for error messages: names and paths that come from files (tensor names, dim names,
// paths) are escaped so a hostile name cannot flood or corrupt a terminal.
#include <cstddef>
#include <string>

namespace rlx::text {

// `s` with control characters (< 0x20, 0x7f) escaped (\n, \t, \x1b, ...), cut to `max_len`
// characters with "..."; UTF-8 bytes are kept.
std::string printable(const std::string& s, size_t max_len = 200);

}  // namespace rlx::text
