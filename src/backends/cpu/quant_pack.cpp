// Packing of DequantMatMul weights into 8-row tiles and the packed product's dispatch
// (quant_pack.h). The kernels live in quant_pack_kernels.cpp.
#include "backends/cpu/quant_pack.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "backends/cpu/parallel.h"
#include "backends/cpu/quant_matmul.h"
#include "rlx/error.h"

namespace rlx::cpu {
namespace {

bool has_vnni() {
#if defined(__GNUC__) && defined(__x86_64__)
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512vnni");
  }();
  return ok;
#else
  return false;
#endif
}

bool packable(QuantFormat f) {
  return f == QuantFormat::Q4_0 || f == QuantFormat::Q4_1 || f == QuantFormat::Q8_0 || f == QuantFormat::Q4_K;
}

void check(QuantFormat f, int64_t k, const char* what) {
  if (!packable(f))
    throw Error(std::string(what) + ": " + enum_name(f) + " has no packed form (Q4_0, Q4_1, Q8_0 and Q4_K have)");
  const int64_t e = quant_block(f).elements;
  if (k <= 0 || k % e != 0)
    throw Error(std::string(what) + ": k = " + std::to_string(k) + " is not a positive multiple of the " +
                enum_name(f) + " block size " + std::to_string(e));
}

// The 6-bit scale and min of sub-block j of a K-format superblock's 12 scale bytes.
void kscale(const uint8_t* s, int j, uint8_t& sc, uint8_t& mn) {
  if (j < 4) {
    sc = s[j] & 63;
    mn = s[j + 4] & 63;
  } else {
    sc = static_cast<uint8_t>((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
    mn = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Tile t of a 32-value format (Q4_0: 18-byte blocks d, qs[16]; Q4_1: 20-byte d, m, qs[16]).
// A block's byte qs[i] holds value i (low nibble) and 16 + i (high nibble), which is the packed
// byte layout of one row: vector c, byte 4r + b is qs[4c + b] of row r.
void pack_tile_32(bool q4_1, const uint8_t* w, int64_t row_bytes, int64_t rows, int64_t units, uint8_t* out) {
  const int64_t bs = q4_1 ? 20 : 18, qoff = q4_1 ? 4 : 2;
  uint8_t* q = out;
  uint8_t* d = out + 128 * units;
  uint8_t* mins = d + 16 * units;
  for (int64_t u = 0; u < units; ++u)
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* p = w + r * row_bytes + u * bs;
      for (int c = 0; c < 4; ++c) std::memcpy(q + 128 * u + 32 * c + 4 * r, p + qoff + 4 * c, 4);
      std::memcpy(d + 16 * u + 2 * r, p, 2);
      if (q4_1) std::memcpy(mins + 16 * u + 2 * r, p + 2, 2);
    }
}

// Tile t of Q8_0 (34-byte blocks: d, qs[32] signed): vector c, byte 4r + b is qs[4c + b] of row
// r plus 128 (an unsigned byte).
void pack_tile_q8(const uint8_t* w, int64_t row_bytes, int64_t rows, int64_t units, uint8_t* out) {
  uint8_t* d = out + 256 * units;
  for (int64_t u = 0; u < units; ++u)
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* p = w + r * row_bytes + u * 34;
      for (int c = 0; c < 8; ++c)
        for (int b = 0; b < 4; ++b) out[256 * u + 32 * c + 4 * r + b] = static_cast<uint8_t>(p[2 + 4 * c + b] ^ 0x80);
      std::memcpy(d + 16 * u + 2 * r, p, 2);
    }
}

// Tile t of Q4_K (144-byte superblocks: d, dmin, scales[12], qs[128]; sub-block u's value i is
// the low (u even) or high (u odd) nibble of qs[32 (u / 2) + i]).
void pack_tile_q4k(const uint8_t* w, int64_t row_bytes, int64_t rows, int64_t supers, uint8_t* out) {
  for (int64_t s = 0; s < supers; ++s) {
    uint8_t* o = out + 1184 * s;
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* p = w + r * row_bytes + 144 * s;
      for (int u = 0; u < 8; ++u) {
        const uint8_t* qs = p + 16 + 32 * (u / 2);
        const int shift = 4 * (u % 2);
        for (int c = 0; c < 4; ++c)
          for (int b = 0; b < 4; ++b) {
            const int lo = (qs[4 * c + b] >> shift) & 0x0F, hi = (qs[16 + 4 * c + b] >> shift) & 0x0F;
            o[128 * u + 32 * c + 4 * r + b] = static_cast<uint8_t>(lo | hi << 4);
          }
        uint8_t sc, mn;
        kscale(p + 4, u, sc, mn);
        o[1024 + 8 * u + r] = sc;
        o[1088 + 16 * (u / 2) + 2 * r + (u % 2)] = mn;
      }
      std::memcpy(o + 1152 + 2 * r, p, 2);
      std::memcpy(o + 1168 + 2 * r, p + 2, 2);
    }
  }
}

}  // namespace

bool quant_pack_vnni() { return has_vnni(); }

bool quant_pack_format(QuantFormat f) { return packable(f) && dequant_matmul_int8_native(f); }

int64_t quant_packed_tile_bytes(QuantFormat f, int64_t k) {
  check(f, k, "quant_packed_tile_bytes");
  if (f == QuantFormat::Q4_K) return k / 256 * 1184;
  return k / 32 * (f == QuantFormat::Q4_1 ? 160 : f == QuantFormat::Q8_0 ? 272 : 144);
}

int64_t quant_packed_bytes(QuantFormat f, int64_t n, int64_t k) {
  return (std::max<int64_t>(n, 0) + 7) / 8 * quant_packed_tile_bytes(f, k);
}

void quant_pack(QuantFormat f, const uint8_t* w, int64_t n, int64_t k, uint8_t* out) {
  check(f, k, "quant_pack");
  const int64_t tile = quant_packed_tile_bytes(f, k);
  const QuantBlock blk = quant_block(f);
  const int64_t row_bytes = k / blk.elements * blk.bytes;
  const int64_t tiles = (n + 7) / 8;
  parallel_for(tiles, std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(1, tile)), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      uint8_t* o = out + t * tile;
      std::memset(o, 0, static_cast<size_t>(tile));  // padding rows: zero values and scales
      const int64_t rows = std::min<int64_t>(8, n - 8 * t);
      const uint8_t* src = w + 8 * t * row_bytes;
      if (f == QuantFormat::Q4_K) pack_tile_q4k(src, row_bytes, rows, k / 256, o);
      else if (f == QuantFormat::Q8_0) pack_tile_q8(src, row_bytes, rows, k / 32, o);
      else pack_tile_32(f == QuantFormat::Q4_1, src, row_bytes, rows, k / 32, o);
    }
  });
}

void quant_pack(QuantFormat f, const uint8_t* w, int64_t n, int64_t k, std::vector<uint8_t>& out) {
  check(f, k, "quant_pack");
  out.resize(static_cast<size_t>(quant_packed_bytes(f, n, k)));
  quant_pack(f, w, n, k, out.data());
}

void dequant_matmul_packed(QuantFormat f, const float* x, int64_t m, int64_t k, const uint8_t* packed, int64_t n,
                           float* y, PackedKernel kernel) {
  check(f, k, "dequant_matmul_packed");
  if (!quant_pack_format(f)) throw Error("dequant_matmul_packed: this CPU lacks AVX2 / FMA / F16C");
  if (kernel == PackedKernel::Vnni && !has_vnni())
    throw Error("dequant_matmul_packed: the VNNI kernel needs AVX-512 VNNI and VL, which this CPU lacks");
  if (m <= 0 || n <= 0) return;
  const bool vnni = kernel == PackedKernel::Vnni || (kernel == PackedKernel::Auto && has_vnni());
  const bool kfmt = f == QuantFormat::Q4_K;
  const int64_t xb = kfmt ? k / 256 : k / 32;
  std::vector<XBlockK> xk(kfmt ? static_cast<size_t>(m * xb) : 0);
  std::vector<XBlock> x32(kfmt ? 0 : static_cast<size_t>(m * xb));
  parallel_for(m, std::max<int64_t>(1, 65536 / k), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      if (kfmt) quantize_x_row_k(x + i * k, k, xk.data() + i * xb);
      else quantize_x_row(x + i * k, k, x32.data() + i * xb);
    }
  });
  const void* xq = kfmt ? static_cast<const void*>(xk.data()) : static_cast<const void*>(x32.data());
  // Chunks of about 64 K multiply-adds (a decode GEMV of 768 x 768 splits in 9).
  const int64_t tiles = (n + 7) / 8;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, 8 * m * k));
  parallel_for(tiles, grain, [&](int64_t t0, int64_t t1) {
    if (vnni) pack_kernels::tiles_vnni(f, xq, m, k, packed, t0, t1, n, y);
    else pack_kernels::tiles_avx2(f, xq, m, k, packed, t0, t1, n, y);
  });
}

}  // namespace rlx::cpu
