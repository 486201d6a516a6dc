#pragma once
// rlx::Error: the one exception type rlx throws for bad input, invalid graphs and
// unsupported requests. Messages say what went wrong, where, and what to do.
#include <stdexcept>
#include <string>

namespace rlx {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Throws rlx::Error with `msg` when `cond` is false.
inline void check(bool cond, const std::string& msg) {
  if (!cond) throw Error(msg);
}

}  // namespace rlx
