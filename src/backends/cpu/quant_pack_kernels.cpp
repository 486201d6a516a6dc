// The packed DequantMatMul kernels (quant_pack.h): the tile code of quant_pack_tile.inc compiled
// twice, for AVX2 + FMA + F16C and for AVX-512 VNNI + VL on top. quant_pack.cpp calls them only
// after checking the CPU. The code between the pragmas uses no standard-library templates, so no
// copy of a shared inline function compiled for these targets can leak into the rest of the
// program.
#include <cstdint>
#include <cstring>

#include "backends/cpu/quant_matmul.h"
#include "backends/cpu/quant_pack.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
namespace rlx::cpu::pack_kernels {
namespace avx2_impl {
#define RLX_PACK_VNNI 0
#include "backends/cpu/quant_pack_tile.inc"
#undef RLX_PACK_VNNI
}  // namespace avx2_impl
void tiles_avx2(QuantFormat f, const void* xq, int64_t m, int64_t k, const uint8_t* packed, int64_t t0, int64_t t1,
                int64_t n, float* y) {
  avx2_impl::run_tiles(f, xq, m, k, packed, quant_packed_tile_bytes(f, k), t0, t1, n, y);
}
}  // namespace rlx::cpu::pack_kernels
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512vl,avx512vnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512vl,avx512vnni")
#endif
namespace rlx::cpu::pack_kernels {
namespace vnni_impl {
#define RLX_PACK_VNNI 1
#include "backends/cpu/quant_pack_tile.inc"
#undef RLX_PACK_VNNI
}  // namespace vnni_impl
void tiles_vnni(QuantFormat f, const void* xq, int64_t m, int64_t k, const uint8_t* packed, int64_t t0, int64_t t1,
                int64_t n, float* y) {
  vnni_impl::run_tiles(f, xq, m, k, packed, quant_packed_tile_bytes(f, k), t0, t1, n, y);
}
}  // namespace rlx::cpu::pack_kernels
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else

namespace rlx::cpu::pack_kernels {
void tiles_avx2(QuantFormat, const void*, int64_t, int64_t, const uint8_t*, int64_t, int64_t, int64_t, float*) {}
void tiles_vnni(QuantFormat, const void*, int64_t, int64_t, const uint8_t*, int64_t, int64_t, int64_t, float*) {}
}  // namespace rlx::cpu::pack_kernels

#endif
