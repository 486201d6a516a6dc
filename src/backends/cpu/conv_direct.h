#pragma once
// Internal to the CPU conv kernels: the f32 conv of 2-d and 1-d windows as an implicit GEMM,
// without im2col (conv_direct.cpp). Each image (and group) is copied once into a zero-padded
// buffer split into stride phases: phase (py, px) of channel c holds the padded input's rows
// py, py + sy, ... and columns px, px + sx, ..., each phase a plane of hq x wq floats. Output
// positions are numbered on that grid, q = oy * wq + ox (columns ox >= ow are computed and
// thrown away), so that for every tap (c, ky, kx) the input of position q lies at
// buf[off[tap] + q]. Two tile kernels run over that per-tap offset table instead of im2col's
// rows: the spatial tiles of conv_gemm (6 channels x 16 consecutive grid positions, weights
// broadcast), and the channel lanes (16 channels in the lanes x 6 output positions, wherever
// they lie on the grid: none thrown away; the weights packed per call as k rows of 16), picked
// per shape (pick_kernel in conv_direct.cpp). Both sum the taps in im2col's (c, ky, kx) order,
// one FMA each from the bias: the bits of the im2col + tile kernel path. Needs AVX2 and FMA
// (conv_gemm_avx2_usable()).
#include <cstdint>

#include "backends/cpu/im2col.h"

namespace rlx::cpu {

class ConvEpilogue;
struct StepCache;

// What both entry points of the direct path take besides the values: the geometry, the
// weights, and where the results go.
struct ConvOperands {
  Window3 win;
  int64_t n_batch = 0, groups = 1, cg = 0, coutg = 0;  // input / output channels per group
  const float* w = nullptr;     // groups * coutg rows of cg * win.k_size()
  const float* bias = nullptr;  // groups * coutg values or nullptr
  const ConvEpilogue* epi = nullptr;  // when set, gets the results instead of y
  // Where the packed weights of the channel-lane kernel are kept across runs (weights that only
  // change with the params generation), or null: packed on every call.
  StepCache* weight_cache = nullptr;
  uint64_t params_generation = 0;
};

struct ConvDirect : ConvOperands {
  const float* x = nullptr;  // n_batch x groups * cg planes of win.in_size()
  int64_t x_plane = 0;       // floats from one input plane to the next (0: win.in_size())
  float* y = nullptr;        // unused when `epi` is set
};

// Whether conv_direct runs this geometry (cg input and coutg output channels per group):
// AVX2/FMA, a 2-d or 1-d window, sums short enough, offsets within int32, and the path not
// switched off.
bool conv_direct_usable(const Window3& win, int64_t cg, int64_t coutg);

// Switches the path off (false) or on for the whole process (tests and benchmarks compare it
// with the im2col path); how many convs it has run in this process (tests).
void set_conv_direct_enabled(bool on);
uint64_t conv_direct_runs();
// Which tile kernel the path runs: 0 the one chosen per shape, 1 spatial, 2 channel lanes
// (tests and benchmarks; a forced kernel also takes sums past the cut to im2col).
void set_conv_direct_kernel(int which);
// Whether the conv tile kernels run their AVX-512 forms (the channel lanes in blocks of 32
// channels, conv_gemm's zmm tiles): -1 (default) where the CPU has AVX-512F, 0 never (the AVX2
// kernels; tests and benchmarks compare the two, which give the same bits).
void set_conv_zmm(int mode);
// Whether they do now (the CPU has AVX-512F and set_conv_zmm did not switch them off).
bool conv_zmm_enabled();
// conv_gemm's tiles in zmm registers (conv_gemm_avx512.cpp): what conv_gemm_block_avx2 /
// conv_direct_block_avx2 compute, with the same bits.
void conv_gemm_block_avx512(int64_t rows, int64_t cols, int64_t k, const float* a, int64_t lda, const float* b,
                            int64_t ldb, const float* bias, float* c, int64_t ldc);
void conv_direct_block_avx512(int64_t rows, int64_t cols, int64_t k, const float* a, int64_t lda, const float* b,
                              const int32_t* off, const float* bias, float* c, int64_t ldc);

// Runs the conv on the pool's threads (tasks of image and group, output row chunk and group of
// 6-channel blocks); the epilogue, when set, gets every finished row segment instead of y.
void conv_direct(const ConvDirect& d);

// A conv of large maps or of f16 values through conv_direct, in bands of output rows
// (conv_direct_bands.cpp): each task takes one band of one image and group, whose input rows
// (converted to f32 when x is f16) feed conv_direct on the calling thread into a band buffer,
// which then goes through the epilogue, or into y (converted when y is f16). The phase buffers
// stay band-sized (a whole 64 x 512 x 512 image is 64 MiB) and each input row is filled about
// once, where im2col would write each value kh x kw times. Same sums as conv_direct.
struct ConvBands : ConvOperands {  // weight_cache used when groups == 1
  const void* x = nullptr;  // f32 or f16 (x_f16) planes
  bool x_f16 = false;
  void* y = nullptr;  // f32 or f16 (y_f16); unused with an epilogue
  bool y_f16 = false;
};
// Whether conv_direct_bands takes this conv (conv_direct_usable for a band of its rows).
bool conv_direct_bands_usable(const Window3& win, int64_t cg, int64_t coutg);
void conv_direct_bands(const ConvBands& b);

// The tile kernel with a per-k offset table (conv_gemm_avx2.cpp): rows [0, rows) (<= 6),
// columns [0, cols):
//   c[r * ldc + j] = bias[r] (0 without bias) + sum_k a[r * lda + k] * b[off[k] + j].
void conv_direct_block_avx2(int64_t rows, int64_t cols, int64_t k, const float* a, int64_t lda, const float* b,
                            const int32_t* off, const float* bias, float* c, int64_t ldc);

// The channel-lane tile kernel (conv_direct_avx2.cpp): nch <= 16 output channels x npos
// positions,
//   c[m * ldc + j] = bias[m] + sum_k w[k * 16 + m] * b[pos[j] + off[k]],
// w the channel block's weights packed as k rows of 16 floats, bias 16 values; with bias null
// the sums start from the values c holds (the taps after an earlier block of them: the same
// sums, taken in blocks of taps).
void conv_direct_cl_avx2(int64_t nch, int64_t npos, int64_t k, const float* w, const float* b, const int32_t* off,
                         const int32_t* pos, const float* bias, float* c, int64_t ldc);
// One phase plane of the buffer: d[rr * wq + jj] = x[(rr * sy + oy) * w + jj * sx + ox] where
// that lies inside the h x w input plane x, else 0 (oy = py - pad top, ox = px - pad left), for
// rr < hq, jj < wq, the rows in order, each row written as whole vectors of 8 (up to 7 floats
// past the plane's end).
void conv_direct_fill_plane_avx2(const float* x, int64_t h, int64_t w, int64_t sy, int64_t sx, int64_t oy, int64_t ox,
                                 int64_t hq, int64_t wq, float* d);
// dst[kk * 16 + r] = w[r * k + kk] for r < rows (<= 16), zeros for r >= rows (k rows of 16).
void conv_direct_pack_avx2(const float* w, int64_t rows, int64_t k, float* dst);

// The channel-lane kernel on AVX-512F (conv_direct_avx512.cpp): as conv_direct_cl_avx2 with
// nch <= 32 channels, w packed as k rows of 32 floats (conv_direct_pack32_avx512) when nch > 16,
// else of 16 (conv_direct_pack_avx2), bias 32 or 16 values. Same sums in the same order (same
// bits).
bool conv_direct_avx512_usable();
void conv_direct_cl32_avx512(int64_t nch, int64_t npos, int64_t k, const float* w, const float* b, const int32_t* off,
                             const int32_t* pos, const float* bias, float* c, int64_t ldc);
void conv_direct_pack32_avx512(const float* w, int64_t rows, int64_t k, float* dst);

}  // namespace rlx::cpu
