#pragma once
// For the tests of the shared GPU step descriptions and checks (plan/*_work.h, plan/gpu_claims.h).
#include <string>

#include "rlx/error.h"

namespace rlx::plantest {

// The message of the rlx::Error that f() throws, "" when it throws none.
template <class F>
std::string thrown(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace rlx::plantest
