#pragma once
// The CPU DequantMatMul core: y (m, n) = x (m, k) @ dequant(w)^T, x and y f32 row-major, w n rows
// of k / block.elements blocks of a QuantFormat (row_bytes = k / block.elements * block.bytes).
//
// Paths (DequantPath):
//   Reference    the oracle: each weight block is decoded to f32 with the ggml block decoders
//                (src/quant/ggml_blocks) and dotted with every row of x, accumulating in double.
//                Never decodes more than one block at a time.
//   Int8         x rows are quantized to 8-bit blocks (scale = max|x| / 127, round to nearest) of
//                32 values (XBlock) or, for the K formats, 256 values (XBlockK), and each weight
//                block is dotted with them in integers (AVX2: unsigned 4/5/6-bit weights x signed
//                8-bit x by _mm256_maddubs_epi16, summed to 32 bits by _mm256_madd_epi16, which
//                also applies the K formats' integer sub-block scales, so a 256-value superblock
//                is converted to f32 once; the block scales and the format's offset / min applied
//                in f32 with the x block sums). Up to 4 x rows share one unpacked weight block.
//                Formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K on CPUs with AVX2, FMA
//                and F16C; the others (Q2_K, Q3_K, or no AVX2) decode one weight row to f32 at a
//                time and dot it in f32 (no quantization of x). F16 / BF16 weights are never
//                quantized x-side either: 8 weights at a time are widened in registers
//                (quant_matmul_half_avx2.cpp) and multiplied with f32 x by FMA, so a 16-bit
//                matrix is read at 2 bytes a weight.
//   DequantGemm  tiles of up to 256 weight rows are decoded to f32 (AVX2 unpacking where Int8 is native,
//                else the reference decoders) and multiplied with OpenBLAS sgemm (no quantization
//                of x): the prefill path (many rows of x share each tile).
//   Int8Gemm     the prefill path of Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K (int8_gemm_format): x
//                quantized as for Int8 (32-value blocks, every format), weight rows unpacked 8 at a
//                time into a tile whose 32-bit lanes are the 8 rows (4 values each), so that one
//                _mm256_maddubs_epi16 with 4 x values broadcast makes partial dots of 8 output
//                columns; 4 x rows share each tile vector. The K formats' sub-block scales and mins
//                become per-32-value scales and offsets of the tile. Other formats (or no AVX2):
//                DequantGemm.
//   Auto         Int8 for m < kDequantGemmMinRows, else Int8Gemm where it applies, else DequantGemm.
// Every path runs over the CPU thread pool (parallel.h), split along n.
//
// Error of Int8 against the exact product with the dequantized weight: x is rounded to
// q = round(x / s) with s = max|x_block| / 127 per x block (32 values; 256 for the K formats),
// so |x - s q| <= s / 2 and
//   |y_int8 - y_exact| <= sum_blocks s_b / 2 * sum_{i in b} |w_i|   (+ f32 rounding),
// about 0.4% of sum |x_i w_i| for Gaussian data (tests/ops/test_dequant_matmul.cpp checks the bound).
#include <cstdint>
#include <vector>

#include "rlx/ops.h"

namespace rlx::cpu {

enum class DequantPath : uint8_t { Auto, Reference, Int8, DequantGemm, Int8Gemm };

// Rows of x at or above this count use DequantGemm under Auto.
inline constexpr int64_t kDequantGemmMinRows = 16;

// x quantized to 8 bits, one block per 32 values of a row.
struct XBlock {
  float d;         // scale: x ~= d * q
  float dsum;      // d * (sum[0] + sum[1])
  int16_t sum[2];  // sum of q[0..16) and q[16..32)
  int8_t q[32];
};

// y[i * n + j] for i < m, j < n. rlx::Error when k is not a multiple of the block size.
void dequant_matmul(DequantPath path, QuantFormat f, const float* x, int64_t m, int64_t k, const uint8_t* w,
                    int64_t n, float* y);

// x quantized to 8 bits for the K formats (Q4_K, Q5_K, Q6_K): one block per 256 values, so a whole
// weight superblock accumulates in integers and is scaled once.
struct XBlockK {
  float d;            // scale: x ~= d * q
  int16_t bsum[16];   // sums of q over each 16 values
  int16_t usum[8];    // sums of q over each 32 values (bsum[2u] + bsum[2u + 1])
  int8_t q[256];
};

// Whether Int8Gemm runs `f` on this CPU (else it falls back to DequantGemm).
bool int8_gemm_format(QuantFormat f);
// Whether Int8 runs the integer kernels for `f` on this CPU (else the f32 row fallback).
bool dequant_matmul_int8_native(QuantFormat f);
// Whether `f` is F16 / BF16 and this CPU runs the widen-in-registers kernels for it.
bool dequant_matmul_half_native(QuantFormat f);
inline bool is_half_format(QuantFormat f) { return f == QuantFormat::F16 || f == QuantFormat::BF16; }

// Quantizes `k` values (a multiple of 32) to k / 32 blocks.
void quantize_x_row(const float* x, int64_t k, XBlock* out);
// Quantizes `k` values (a multiple of 256) to k / 256 blocks.
void quantize_x_row_k(const float* x, int64_t k, XBlockK* out);
// m rows of k values quantized by quantize_x_row / quantize_x_row_k (row i's blocks at
// i * k / 32 / i * k / 256), over the thread pool.
std::vector<XBlock> quantize_x_rows(const float* x, int64_t m, int64_t k);
std::vector<XBlockK> quantize_x_rows_k(const float* x, int64_t m, int64_t k);

namespace avx2 {
// Int8 kernels (quant_matmul_avx2.cpp; call only when dequant_matmul_int8_native(f)):
// y[i * ldy + j] for i < m, j in [n0, n1), x quantized as m rows of k / 32 blocks.
void int8_rows(QuantFormat f, const XBlock* xq, int64_t m, int64_t k, const uint8_t* w, int64_t row_bytes,
               int64_t n0, int64_t n1, float* y, int64_t ldy);
// The same for Q4_K, Q5_K, Q6_K with x in 256-value blocks.
void int8_rows_k(QuantFormat f, const XBlockK* xq, int64_t m, int64_t k, const uint8_t* w, int64_t row_bytes,
                 int64_t n0, int64_t n1, float* y, int64_t ldy);
// Int8Gemm (call only when int8_gemm_format(f) and the CPU runs Int8 natively): y[i * ldy + j]
// for i < m, j in [n0, n1), x quantized as m rows of k / 32 blocks, weight rows taken 8 at a
// time into `scratch` (int8_gemm_scratch_bytes(k), 32-byte aligned).
void int8_gemm(QuantFormat f, const XBlock* xq, int64_t m, int64_t k, const uint8_t* w, int64_t row_bytes, int64_t n0,
               int64_t n1, float* y, int64_t ldy, uint8_t* scratch);
inline int64_t int8_gemm_scratch_bytes(int64_t k) { return k / 32 * (256 + 64); }
// `rows` weight rows of k values to f32 (out: rows x k), the same values as the reference
// decoders (src/quant/ggml_blocks) up to f32 rounding of d * q + m (one FMA instead of two roundings).
void decode_rows(QuantFormat f, const uint8_t* w, int64_t row_bytes, int64_t rows, int64_t k, float* out);
// One x block quantized as quantize_x_row (32 values) / quantize_x_row_k (256 values) do, to the
// same bits, on vector lanes; false (nothing written) when a value is not finite (the scalar
// code then makes the block's scale NaN). Call only when dequant_matmul_int8_native().
bool quantize32(const float* v, XBlock& out);
bool quantize256(const float* v, XBlockK& out);
// F16 / BF16 weights (quant_matmul_half_avx2.cpp; call only when dequant_matmul_half_native(f)):
// y[i * ldy + j] = x row i . weight row j for i < m, j in [n0, n1), x f32 (m rows of k).
void half_rows(QuantFormat f, const float* x, int64_t m, int64_t k, const uint8_t* w, int64_t row_bytes, int64_t n0,
               int64_t n1, float* y, int64_t ldy);
// decode_rows for F16 / BF16 (exact: every 16-bit value is an f32).
void decode_half_rows(QuantFormat f, const uint8_t* w, int64_t row_bytes, int64_t rows, int64_t k, float* out);
}  // namespace avx2

}  // namespace rlx::cpu
