#pragma once
// Deterministic, platform-independent random tensors for weight initialisation and for
// synthetic inputs (the CLI's --random-inputs). The generator is our own (splitmix64 +
// Box-Muller), so a given seed gives the same values on every platform and build.
#include <cstdint>
#include <string_view>
#include <vector>

#include "rlx/tensor.h"

namespace rlx::models {

enum class InitKind : uint8_t {
  Normal,   // float: normal(0, scale); ints: uniform in [0, 8); bool: 0/1
  Uniform,  // float: uniform [-scale, scale); ints: uniform in [0, 8); bool: 0/1
  Ones,
  Zeros,
};

// A tensor of `dtype` and `dims` filled by `kind`; floats are generated in double and then
// rounded to the dtype.
Tensor init_tensor(DType dtype, const std::vector<int64_t>& dims, InitKind kind, double scale, uint64_t seed);

// Mixes a base seed with a name (FNV-1a + splitmix64), so each named tensor gets its own
// stream and adding a tensor does not change the others.
uint64_t name_seed(uint64_t seed, std::string_view name);

}  // namespace rlx::models
