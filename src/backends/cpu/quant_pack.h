#pragma once
// DequantMatMul weights repacked once for the CPU's 8-row kernels (Q4_0, Q4_1, Q8_0, Q4_K, Q5_K,
// Q6_K). A weight that is a Param or a Constant is packed at its first run (and again when
// the params generation changes: the executor's StepCache), so the product reads a layout made
// for it instead of unpacking the ggml blocks of every row on every call.
//
// Layout: rows in tiles of 8 (the last tile padded with zero rows), tiles one after the other,
// quant_packed_tile_bytes(f, k) each. Within a tile, the 32-value units u (sub-blocks for Q4_K)
// store their 4-bit values as 4 vectors of 32 bytes: in vector c, the 4 bytes 4r .. 4r + 3 hold
// row r's values 4c .. 4c + 3 in their low nibbles and 16 + 4c .. 16 + 4c + 3 in their high
// nibbles. So one AND (or a shift and an AND) gives a vector whose 32-bit lane r is four
// values of row r, and one u8 x s8 dot with four x values broadcast to every lane makes partial
// dots of all 8 rows at once: the accumulator's lanes are the 8 output columns.
//   Q4_0   per unit (144 bytes): 128 bytes of values, the 8 rows' f16 scales d (value = d (q - 8)).
//   Q4_1   per unit (160 bytes): the same, then the 8 rows' f16 mins m (value = d q + m).
//   Q8_0   per unit (272 bytes): 256 bytes, vector c (of 8) holding values 4c .. 4c + 3 of each
//          row as q + 128 (unsigned bytes), then the 8 rows' f16 d (value = d q).
//   Q4_K   per 256-value superblock (1184 bytes): 8 units x 128 bytes of values; the 6-bit
//          sub-block scales as bytes [u][r] (64); the 6-bit mins as bytes [p][r][e] = min of
//          sub-block 2p + e (64, so that widening 16 bytes to int16 pairs lane r with sub-blocks
//          2p and 2p + 1 for one multiply-add with x's two sums); the 8 rows' f16 d, then their
//          f16 dmin (value = d sc q - dmin mn).
//   Q5_K   as Q4_K with 160-byte units (1440 bytes): after a unit's 128 bytes of low nibbles, one
//          vector of fifth bits: bit c of byte 4r + b for value 4c + b, bit 4 + c for 16 + 4c + b.
//   Q6_K   per superblock (1680 bytes): 8 units of 192 bytes (the low nibbles, then two vectors of
//          top bits: bits 2c, 2c + 1 of byte 4r + b for value 4c + b, then for 16 + 4c + b); the
//          16 signed 8-bit sub-block scales as bytes [p][r][e] = scale of sub-block 2p + e (so
//          unit u's two scales pair in lane r, as Q4_K's mins); the 8 rows' f16 d
//          (value = d sc (q - 32)).
// Everything of a unit (32-value formats) or a superblock (K formats) is contiguous: a tile is
// one sequential stream (separate arrays of scales streamed Q4_0 from DRAM at 2/3 the speed).
// The packed form takes the bytes of the ggml blocks (Q4_K +2.8%, Q5_K +2.3%).

// Numbers: x is quantized to 8 bits as on the Int8 path (quant_matmul.h: 32-value blocks for
// Q4_0 / Q4_1 / Q8_0, 256-value blocks for the K formats), the integer dots are exact, the scales
// applied in f32 per unit (32-value formats) or per superblock (K formats: the sub-block scales
// and mins in integers), so
// the Int8 path's error bound holds. The AVX2 (vpmaddubsw) and AVX-512 VNNI (vpdpbusd) kernels
// compute the same integers and round the same way: their results are bit-identical.
#include <cstdint>
#include <vector>

#include "rlx/ops.h"

namespace rlx::cpu {

// The layout's sizes, shared by the packing and the kernels (valid for the packed formats).
// Bytes of the values of one 32-value unit of 8 rows: the nibble vectors (+ bit planes), or
// Q8_0's 8 vectors of bytes.
constexpr int64_t packed_unit_value_bytes(QuantFormat f) {
  return f == QuantFormat::Q8_0 ? 256 : f == QuantFormat::Q5_K ? 160 : f == QuantFormat::Q6_K ? 192 : 128;
}
// Bytes of one step of a tile: a 32-value unit with its scales (Q4_0, Q4_1, Q8_0), or a 256-value
// superblock: 8 units' values, then the scales (K formats).
constexpr int64_t packed_step_bytes(QuantFormat f) {
  switch (f) {
    case QuantFormat::Q4_0: return 128 + 16;
    case QuantFormat::Q4_1: return 128 + 32;
    case QuantFormat::Q8_0: return 256 + 16;
    case QuantFormat::Q6_K: return 8 * packed_unit_value_bytes(f) + 128 + 16;
    default: return 8 * packed_unit_value_bytes(f) + 128 + 32;  // Q4_K, Q5_K
  }
}

// Whether `f` has a packed form and this CPU runs its kernels (AVX2, FMA and F16C).
bool quant_pack_format(QuantFormat f);
// Whether this CPU runs the AVX-512 VNNI kernels (else the AVX2 ones).
bool quant_pack_vnni();

// Bytes of one tile of 8 rows of k values, and of n rows (rlx::Error when k is not a multiple
// of the format's block or f has no packed form).
int64_t quant_packed_tile_bytes(QuantFormat f, int64_t k);
int64_t quant_packed_bytes(QuantFormat f, int64_t n, int64_t k);

// Packs n rows of k values (ggml blocks, k / block.elements * block.bytes bytes a row) into out
// (quant_packed_bytes(f, n, k) bytes). Portable code (any CPU may pack).
void quant_pack(QuantFormat f, const uint8_t* w, int64_t n, int64_t k, uint8_t* out);
// The same into a vector (resized).
void quant_pack(QuantFormat f, const uint8_t* w, int64_t n, int64_t k, std::vector<uint8_t>& out);

enum class PackedKernel : uint8_t { Auto, Avx2, Vnni };

// y (m, n) = x (m, k) @ dequant(w)^T, w in packed form, over the thread pool. `kernel` picks the
// instruction set (tests run both; Vnni where the CPU lacks it is an rlx::Error).
void dequant_matmul_packed(QuantFormat f, const float* x, int64_t m, int64_t k, const uint8_t* packed, int64_t n,
                           float* y, PackedKernel kernel = PackedKernel::Auto);

namespace pack_kernels {
// Tiles [t0, t1) of the packed weight against the m quantized x rows (XBlock rows of k / 32
// blocks for Q4_0 / Q4_1 / Q8_0, XBlockK rows of k / 256 for Q4_K): y[i * n + j] for the tiles' rows
// j < n. quant_pack.cpp calls them after checking the CPU.
void tiles_avx2(QuantFormat f, const void* xq, int64_t m, int64_t k, const uint8_t* packed, int64_t t0, int64_t t1,
                int64_t n, float* y);
void tiles_vnni(QuantFormat f, const void* xq, int64_t m, int64_t k, const uint8_t* packed, int64_t t0, int64_t t1,
                int64_t n, float* y);
}  // namespace pack_kernels

}  // namespace rlx::cpu
