#pragma once
// rlx::Error: the one exception type rlx throws for bad input, invalid graphs and
// unsupported requests. Messages say what went wrong, where, and what to do.
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

namespace rlx {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Throws rlx::Error with `msg` when `cond` is false.
inline void check(bool cond, const std::string& msg) {
  if (!cond) throw Error(msg);
}

// The library boundary: runs f() and turns every exception that is not an rlx::Error into
// one naming `where` (out of memory, a standard-library length or range error, ...), so that
// callers of the public API only ever see rlx::Error.
template <class F>
decltype(auto) translate_errors(const char* where, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw Error(std::string(where) + ": out of memory; the model or its inputs need more memory than is available");
  } catch (const std::exception& e) {
    throw Error(std::string(where) + ": internal failure (" + e.what() + "); please report it with the input that caused it");
  }
}

}  // namespace rlx
