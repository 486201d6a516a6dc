#pragma once
// Internal to the CPU integer kernels (MatMulInteger, ConvInteger): the exact integer product
//   C (m x n, i32) = A (m x k) @ B (k x n)
// of 8-bit operands whose zero points are subtracted while they are packed, so both packed
// operands hold i16 values in [-255, 255]. Each product of a pair of values fits in 32 bits and
// so does the sum of two; the running sums wrap modulo 2^32 (what ONNX asks of the 32-bit
// accumulation), on every path, so the AVX2 and the portable tiles give the same bits.
//
// Packed layouts (kp = (k + 1) / 2 pairs of k; an odd k's last pair holds a 0):
//   A: blocks of kIntRows rows, block b = [kp][kIntRows][2] i16 (rows past m are 0);
//   B: panels of kIntCols columns, panel q = [kp][kIntCols][2] i16 (columns past n are 0).
// A tile multiplies a block by a panel with one vpmaddwd (two k's at once) per row and 8 columns.
#include <cstdint>
#include <functional>
#include <type_traits>

namespace rlx::cpu {

inline constexpr int64_t kIntRows = 6;
inline constexpr int64_t kIntCols = 16;

inline int64_t int_pairs(int64_t k) { return (k + 1) / 2; }
// i16 values of packed A / of the B panels covering `cols` columns.
inline int64_t int_packed_a_size(int64_t m, int64_t k) { return (m + kIntRows - 1) / kIntRows * kIntRows * 2 * int_pairs(k); }
inline int64_t int_packed_b_size(int64_t cols, int64_t k) { return (cols + kIntCols - 1) / kIntCols * kIntCols * 2 * int_pairs(k); }

// Packs A: a(i, kk) = src[i * lda + kk] - zero[i * zero_stride] (zero_stride 0: one zero point).
template <class T>
void pack_int_a(const T* src, int64_t lda, const T* zero, int64_t zero_stride, int64_t m, int64_t k, int16_t* dst) {
  static_assert(std::is_same_v<T, uint8_t> || std::is_same_v<T, int8_t>);
  const int64_t kp = int_pairs(k);
  const int64_t blocks = (m + kIntRows - 1) / kIntRows;
  for (int64_t b = 0; b < blocks; ++b) {
    int16_t* blk = dst + b * kp * kIntRows * 2;
    for (int64_t r = 0; r < kIntRows; ++r) {
      const int64_t i = b * kIntRows + r;
      if (i >= m) {
        for (int64_t p = 0; p < kp; ++p) blk[(p * kIntRows + r) * 2] = blk[(p * kIntRows + r) * 2 + 1] = 0;
        continue;
      }
      const T* row = src + i * lda;
      const int z = zero[i * zero_stride];
      for (int64_t kk = 0; kk < k; ++kk) blk[((kk >> 1) * kIntRows + r) * 2 + (kk & 1)] = static_cast<int16_t>(row[kk] - z);
      if (k & 1) blk[((k >> 1) * kIntRows + r) * 2 + 1] = 0;
    }
  }
}

// Row helpers of the packing, on AVX2 where usable:
//   int_widen: dst[i] = src[i] - zero for i < n;
//   int_interleave: the rows r0, r1 (panels * kIntCols values each) as pair p of the panels at dst.
void int_widen(const uint8_t* src, int64_t n, int zero, int16_t* dst);
void int_widen(const int8_t* src, int64_t n, int zero, int16_t* dst);
void int_interleave(const int16_t* r0, const int16_t* r1, int64_t panels, int64_t kp, int64_t p, int16_t* dst);

// Fills the B panels of `cols` columns from rows given one at a time: row(kk, out) writes the
// `cols` values of row kk (zero points subtracted) to out[0, cols). `tmp` holds 2 * cols + 2 *
// kIntCols i16 of scratch.
template <class RowFn>
void pack_int_b_rows(int64_t k, int64_t cols, const RowFn& row, int16_t* tmp, int16_t* dst) {
  const int64_t kp = int_pairs(k);
  const int64_t panels = (cols + kIntCols - 1) / kIntCols;
  const int64_t padded = panels * kIntCols;
  int16_t* r0 = tmp;
  int16_t* r1 = tmp + padded;
  for (int64_t j = cols; j < padded; ++j) r0[j] = r1[j] = 0;
  for (int64_t p = 0; p < kp; ++p) {
    row(2 * p, r0);
    if (2 * p + 1 < k) row(2 * p + 1, r1);
    else
      for (int64_t j = 0; j < cols; ++j) r1[j] = 0;
    int_interleave(r0, r1, panels, kp, p, dst);
  }
}

// The product C = A @ B: `a` packed A (m rows), pack_b(j0, cols, dst) packs the B panels of
// columns [j0, j0 + cols) into dst (int_packed_b_size(cols, k) values; cols is a multiple of
// kIntCols except at the end), C rows ldc apart. Chunks of columns (and, when they are too few,
// groups of row blocks) run on the pool when `parallel`.
struct IntGemm {
  int64_t m = 0, n = 0, k = 0;
  const int16_t* a = nullptr;
  std::function<void(int64_t, int64_t, int16_t*)> pack_b;
  int32_t* c = nullptr;
  int64_t ldc = 0;
};
void int_gemm(const IntGemm& g, bool parallel);

// One tile: rows [0, rows) (rows <= kIntRows) of a block times the columns [0, cols) (cols <=
// kIntCols) of a panel, stored to c (rows ldc apart). The AVX2 tile (int_gemm_avx2.cpp) is used
// only when int_gemm_avx2_usable().
void int_tile_portable(int64_t rows, int64_t cols, int64_t kp, const int16_t* a, const int16_t* b, int32_t* c,
                       int64_t ldc);
// The tile (and row helpers) int_gemm runs: the best the CPU has (Auto), or, for tests, one
// forced (a forced tile the CPU lacks runs as Auto). Returns the previous choice.
enum class IntPath { Auto, Portable, Avx2, Vnni };
IntPath int_gemm_force_path(IntPath p);
bool int_gemm_avx2_usable();
void int_tile_avx2(int64_t rows, int64_t cols, int64_t kp, const int16_t* a, const int16_t* b, int32_t* c,
                   int64_t ldc);
void int_widen_avx2(const uint8_t* src, int64_t n, int zero, int16_t* dst);
void int_widen_avx2(const int8_t* src, int64_t n, int zero, int16_t* dst);
void int_interleave_avx2(const int16_t* r0, const int16_t* r1, int64_t panels, int64_t kp, int64_t p, int16_t* dst);
// The same tile on vpdpwssd (the multiply and the add in one instruction) for CPUs with AVX-512
// VNNI and VL (on ymm registers); used when int_gemm_vnni_usable().
bool int_gemm_vnni_usable();
void int_tile_vnni(int64_t rows, int64_t cols, int64_t kp, const int16_t* a, const int16_t* b, int32_t* c,
                   int64_t ldc);

}  // namespace rlx::cpu
