#pragma once
// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11):
// a counter-based generator. philox4x32(counter, key) is a pure function, so the random
// bits for element i are computed from (seed, offset, i) alone, independent of threading.
//
// rlx's stream layout (shared by RngUniform, RngNormal and Sample):
//   key     = (seed low 32 bits, seed high 32 bits)
//   counter = (block low 32, block high 32, offset low 32, offset high 32)
// where `block` is the element's group index (4 elements per block for RngUniform /
// RngNormal, one row per block for Sample).
#include <array>
#include <cstdint>

namespace rlx::cpu {

using Philox4x32 = std::array<uint32_t, 4>;

namespace philox_detail {
inline constexpr uint32_t kMul0 = 0xD2511F53u;
inline constexpr uint32_t kMul1 = 0xCD9E8D57u;
inline constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
inline constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1

inline Philox4x32 round(const Philox4x32& c, uint32_t k0, uint32_t k1) {
  const uint64_t p0 = static_cast<uint64_t>(kMul0) * c[0];
  const uint64_t p1 = static_cast<uint64_t>(kMul1) * c[2];
  const auto hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const auto hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  return {hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0};
}
}  // namespace philox_detail

// Ten rounds of Philox-4x32 on `ctr` with the 64-bit key (k0, k1).
inline Philox4x32 philox4x32_10(Philox4x32 ctr, uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += philox_detail::kWeyl0;
      k1 += philox_detail::kWeyl1;
    }
    ctr = philox_detail::round(ctr, k0, k1);
  }
  return ctr;
}

// The rlx stream: block `block` of the stream (seed, offset).
inline Philox4x32 philox_block(uint64_t seed, uint64_t offset, uint64_t block) {
  return philox4x32_10({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                        static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32)},
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// 32 bits -> [0, 1): bits * 2^-32 (largest value 1 - 2^-32, exact in double).
inline double bits_to_unit_co(uint32_t bits) { return static_cast<double>(bits) * 0x1p-32; }
// 32 bits -> (0, 1]: (bits + 1) * 2^-32 (never 0, so log() is finite).
inline double bits_to_unit_oc(uint32_t bits) { return (static_cast<double>(bits) + 1.0) * 0x1p-32; }
// 64 bits -> [0, 1) with 53 bits of resolution.
inline double bits_to_unit53(uint32_t hi, uint32_t lo) {
  const uint64_t v = (static_cast<uint64_t>(hi) << 32) | lo;
  return static_cast<double>(v >> 11) * 0x1p-53;
}

}  // namespace rlx::cpu
