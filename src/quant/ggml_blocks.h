#pragma once
// The ggml block formats, written from their public description: the byte layout of one block
// of each type, a reference dequantizer to f32 and a reference quantizer from f32.
//
//   type  values/block bytes  layout (little-endian; d, m, dmin are f16)     value
//   Q4_0   32   18   d, qs[16]: value j in the low nibble of qs[j % 16]      d * (q - 8)
//                    (j < 16) or the high nibble (j >= 16)
//   Q4_1   32   20   d, m, qs[16] as Q4_0                                    d * q + m
//   Q5_0   32   22   d, qh[4] (u32: bit j = bit 4 of value j), qs[16]        d * (q - 16)
//   Q5_1   32   24   d, m, qh[4], qs[16]                                      d * q + m
//   Q8_0   32   34   d, qs[32] int8                                          d * q
//   Q4_K  256  144   d, dmin, scales[12] (8 x (6-bit scale, 6-bit min)),     d*sc*q - dmin*mn
//                    qs[128]: 64-value chunk c uses qs[32c..32c+32), sub-block 2c in the low
//                    nibbles, 2c+1 in the high nibbles
//   Q5_K  256  176   d, dmin, scales[12], qh[32], qs[128]: as Q4_K, bit 4 of   d*sc*q - dmin*mn
//                    value l of sub-block s in bit s of qh[l]
//   Q6_K  256  210   ql[128], qh[64], scales[16] int8, d: 16 sub-blocks of  d * sc * (q - 32)
//                    16; per 128-value half h, value 32k + l (k < 4, l < 32) has its low 4 bits
//                    in ql[64h + l + 32(k&1)] (nibble k>>1), its high 2 bits in qh[32h + l] at
//                    bit 2k, and scale sc[8h + l/16 + 2k]
//   Q2_K  256   84   scales[16] (low nibble scale, high nibble min of each d*sc*q - dmin*mn
//                    16-value sub-block), qs[64]: value 128c + 32s + l in bits 2s..2s+1 of
//                    qs[32c + l], d, dmin (dequantize only)
//   Q3_K  256  110   hmask[32], qs[64] (2-bit low parts as in Q2_K),        d * (sc-32) * q
//                    scales[12] (16 x 6 bits), d; q = low - 4 where bit k of hmask[l] is clear
//                    for value 32k + l (dequantize only)
//
// K-quant scales: sub-block j < 4 has scale scales[j] & 63 and min scales[j+4] & 63; j >= 4 has
// scale (scales[j+4] & 15) | (scales[j-4] >> 6) << 4 and min (scales[j+4] >> 4) | (scales[j] >> 6) << 4.
//
// The quantizers are simple (one pass, no search): valid blocks with a bounded error, not
// bit-identical to other tools' quantizers. The K-quant ones round sub-block scales and mins up,
// so every value stays inside its sub-block's range (the error is at most half a step).
#include <cstdint>
#include <optional>

#include "rlx/gguf.h"
#include "rlx/ops.h"

namespace rlx::quant {

// `n` values (a multiple of the block size) from n / block * block_bytes bytes at `src`.
// rlx::Error when the type has no dequantizer.
void dequantize(GgmlType type, const uint8_t* src, float* dst, int64_t n);
// `n` finite values to n / block * block_bytes bytes at `dst`; rlx::Error naming the index of
// a non-finite value or a block whose scale overflows f16, or a type without a quantizer.
void quantize(GgmlType type, const float* src, uint8_t* dst, int64_t n);

// The integers of one Q4_K / Q5_K / Q6_K superblock (256 values): q[i], its unsigned values (4, 5
// or 6 bits: value = d sc q - dmin mn for Q4_K / Q5_K, d sc (q - 32) for Q6_K), and its sub-block
// scales: Q4_K / Q5_K 8 scales and 8 mins (6 bits each), Q6_K 16 signed scales (mn not written).
// rlx::Error for another type.
void k_block_ints(GgmlType type, const uint8_t* block, uint8_t* q, int* sc, int* mn);

// The ggml type of a DequantMatMul weight format, and the format of a ggml type (F16 and BF16
// included: DequantMatMul takes them as 32-value "blocks"; nullopt for the other plain types and
// the block types DequantMatMul does not take).
GgmlType ggml_type_of(QuantFormat f);
std::optional<QuantFormat> quant_format_of(GgmlType t);

}  // namespace rlx::quant
