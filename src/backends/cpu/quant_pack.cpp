// Packing of DequantMatMul weights into 8-row tiles and the packed product's dispatch
// (quant_pack.h). The kernels live in quant_pack_kernels.cpp.
#include "backends/cpu/quant_pack.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "backends/cpu/int_gemm.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/quant_matmul.h"
#include "quant/ggml_blocks.h"
#include "rlx/error.h"

namespace rlx::cpu {
namespace {

bool is_k(QuantFormat f) { return f == QuantFormat::Q4_K || f == QuantFormat::Q5_K || f == QuantFormat::Q6_K; }

bool packable(QuantFormat f) {
  return f == QuantFormat::Q4_0 || f == QuantFormat::Q4_1 || f == QuantFormat::Q8_0 || is_k(f);
}

void check(QuantFormat f, int64_t k, const char* what) {
  if (!packable(f))
    throw Error(std::string(what) + ": " + enum_name(f) + " has no packed form (Q4_0, Q4_1, Q8_0, Q4_K, Q5_K and Q6_K have)");
  const int64_t e = quant_block(f).elements;
  if (k <= 0 || k % e != 0)
    throw Error(std::string(what) + ": k = " + std::to_string(k) + " is not a positive multiple of the " +
                enum_name(f) + " block size " + std::to_string(e));
}

// Tile of a 32-value format, one unit after the other. Q4_0 (18-byte blocks d, qs[16]) / Q4_1
// (20-byte d, m, qs[16]): a block's byte qs[i] holds value i (low nibble) and 16 + i (high
// nibble), which is the packed byte layout of one row: vector c, byte 4r + b is qs[4c + b] of
// row r; then the 8 rows' d (and m). Q8_0 (34-byte d, qs[32] signed): vector c (of 8), byte
// 4r + b is qs[4c + b] of row r plus 128 (an unsigned byte); then the 8 rows' d.
void pack_tile_32(QuantFormat f, const uint8_t* w, int64_t row_bytes, int64_t rows, int64_t units, uint8_t* out) {
  const bool q8 = f == QuantFormat::Q8_0, q4_1 = f == QuantFormat::Q4_1;
  const int64_t bs = quant_block(f).bytes, qoff = q4_1 ? 4 : 2, vals = packed_unit_value_bytes(f);
  const int64_t unit = packed_step_bytes(f);
  for (int64_t u = 0; u < units; ++u)
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* p = w + r * row_bytes + u * bs;
      uint8_t* up = out + unit * u;
      for (int c = 0; c < vals / 32; ++c)
        for (int b = 0; b < 4; ++b)
          up[32 * c + 4 * r + b] = static_cast<uint8_t>(p[qoff + 4 * c + b] ^ (q8 ? 0x80 : 0));
      std::memcpy(up + vals + 2 * r, p, 2);
      if (q4_1) std::memcpy(up + vals + 16 + 2 * r, p + 2, 2);
    }
}

// Tile of a K format (Q4_K 144-, Q5_K 176-, Q6_K 210-byte superblocks; their integers from
// quant::k_block_ints), quant_pack.h's layout: per superblock 8 units of nibble vectors (+ Q5_K's
// bit plane, Q6_K's two), then the scales.
void pack_tile_k(QuantFormat f, const uint8_t* w, int64_t row_bytes, int64_t rows, int64_t supers, uint8_t* out) {
  const int64_t unit = packed_unit_value_bytes(f), scales = 8 * unit, super = packed_step_bytes(f);
  const int64_t block = quant_block(f).bytes;
  const GgmlType type = quant::ggml_type_of(f);
  uint8_t q[256];
  int sc[16], mn[8];
  for (int64_t s = 0; s < supers; ++s) {
    uint8_t* o = out + super * s;
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* p = w + r * row_bytes + block * s;
      quant::k_block_ints(type, p, q, sc, mn);
      for (int u = 0; u < 8; ++u) {
        uint8_t* up = o + unit * u;
        const uint8_t* v = q + 32 * u;
        for (int c = 0; c < 4; ++c)
          for (int b = 0; b < 4; ++b) {
            const int lo = v[4 * c + b], hi = v[16 + 4 * c + b];
            up[32 * c + 4 * r + b] = static_cast<uint8_t>((lo & 0x0F) | (hi & 0x0F) << 4);
            if (f == QuantFormat::Q5_K) up[128 + 4 * r + b] |= static_cast<uint8_t>(((lo >> 4) & 1) << c | ((hi >> 4) & 1) << (4 + c));
            if (f == QuantFormat::Q6_K) {
              up[128 + 4 * r + b] |= static_cast<uint8_t>((lo >> 4) << (2 * c));
              up[160 + 4 * r + b] |= static_cast<uint8_t>((hi >> 4) << (2 * c));
            }
          }
      }
      if (f == QuantFormat::Q6_K) {
        for (int j = 0; j < 16; ++j) o[scales + 16 * (j / 2) + 2 * r + j % 2] = static_cast<uint8_t>(sc[j]);
        std::memcpy(o + scales + 128 + 2 * r, p + 208, 2);
        continue;
      }
      for (int u = 0; u < 8; ++u) {
        o[scales + 8 * u + r] = static_cast<uint8_t>(sc[u]);
        o[scales + 64 + 16 * (u / 2) + 2 * r + u % 2] = static_cast<uint8_t>(mn[u]);
      }
      std::memcpy(o + scales + 128 + 2 * r, p, 2);
      std::memcpy(o + scales + 144 + 2 * r, p + 2, 2);
    }
  }
}

}  // namespace

bool quant_pack_vnni() { return int_gemm_vnni_usable(); }

bool quant_pack_format(QuantFormat f) { return packable(f) && dequant_matmul_int8_native(f); }

int64_t quant_packed_tile_bytes(QuantFormat f, int64_t k) {
  check(f, k, "quant_packed_tile_bytes");
  return k / (is_k(f) ? 256 : 32) * packed_step_bytes(f);
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
      if (is_k(f)) pack_tile_k(f, src, row_bytes, rows, k / 256, o);
      else pack_tile_32(f, src, row_bytes, rows, k / 32, o);
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
  if (kernel == PackedKernel::Vnni && !quant_pack_vnni())
    throw Error("dequant_matmul_packed: the VNNI kernel needs AVX-512 VNNI and VL, which this CPU lacks");
  if (m <= 0 || n <= 0) return;
  const bool vnni = kernel == PackedKernel::Vnni || (kernel == PackedKernel::Auto && quant_pack_vnni());
  const bool kfmt = is_k(f);
  const std::vector<XBlockK> xk = kfmt ? quantize_x_rows_k(x, m, k) : std::vector<XBlockK>{};
  const std::vector<XBlock> x32 = kfmt ? std::vector<XBlock>{} : quantize_x_rows(x, m, k);
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
