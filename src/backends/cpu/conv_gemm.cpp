// The driver of conv_gemm.h: tasks of (column chunk, group of 6-row blocks) over the pool; each
// block runs the AVX2/FMA tile kernel (conv_gemm_avx2.cpp) or, for long sums and on CPUs
// without it, one single-threaded OpenBLAS product per task.
#include "backends/cpu/conv_gemm.h"

#include <algorithm>
#include <vector>

#include "backends/cpu/blas.h"
#include "backends/cpu/conv_epilogue.h"
#include "backends/cpu/parallel.h"

namespace rlx::cpu {
namespace {

constexpr int64_t kRows = 6;  // rows of one register tile

// Columns per chunk: the chunk's input rows (k x chunk floats) stay in L2 while every row block
// of the task runs over them; the 6 x chunk tile an epilogue reads stays in L1.
int64_t chunk_columns(int64_t n, int64_t k) {
  const int64_t c = std::clamp<int64_t>((49152 / std::max<int64_t>(1, k)) / 16 * 16, 64, 512);
  return std::min(c, n);
}

}  // namespace

void conv_gemm(const ConvGemm& g, bool parallel) {
  if (g.m <= 0 || g.n <= 0) return;
  // Long sums (k >= kBlasK) go to OpenBLAS, whose packed panels win there: the tile kernel
  // streams each 6-row block's k x 16 input panel from L2 (one thread, MobileNet's shapes:
  // 480 -> 112 at 14x14 0.35 vs 0.29 ms, 672 -> 160 at 7x7 0.22 vs 0.17 ms; k <= 160 even or
  // faster, k <= 64 at 112x112 0.40 vs 0.52 ms).
  constexpr int64_t kBlasK = 240;
  const bool avx2 = conv_gemm_avx2_usable() && g.k < kBlasK;
  const int64_t nc = avx2 ? chunk_columns(g.n, g.k) : g.n;
  const int64_t n_chunks = (g.n + nc - 1) / nc;
  const int64_t m_blocks = (g.m + kRows - 1) / kRows;
  // Enough tasks for ~4 per thread: split the rows when the columns give too few chunks.
  const int64_t want = parallel ? (avx2 ? 4 : 1) * static_cast<int64_t>(num_threads()) : 1;
  int64_t per_group = m_blocks;
  if (n_chunks < want) per_group = std::max<int64_t>(1, (m_blocks * n_chunks + want - 1) / want);
  const int64_t m_groups = (m_blocks + per_group - 1) / per_group;
  const int64_t tasks = n_chunks * m_groups;
  const int64_t cost = per_group * kRows * nc * std::max<int64_t>(1, g.k);
  const int64_t grain = parallel ? std::max<int64_t>(1, (int64_t{1} << 18) / cost) : tasks;

  parallel_for(tasks, grain, [&](int64_t tb, int64_t te) {
    thread_local std::vector<float> tile;  // the raw results an epilogue reads
    for (int64_t t = tb; t < te; ++t) {
      const int64_t j0 = (t / m_groups) * nc, cols = std::min(nc, g.n - j0);
      const int64_t r0 = (t % m_groups) * per_group * kRows, r1 = std::min(g.m, r0 + per_group * kRows);
      if (avx2) {
        // With an epilogue the raw tiles gather in `tile` (row blocks of `cols`, or whole rows
        // back to back when the chunk spans every column) and go through it ~4K values at once.
        // Rows of a partial chunk are padded by 8 floats (rows 2 KB apart alias in the L1 sets).
        const int64_t ld = cols == g.n ? cols : cols + 8;
        const int64_t flush_rows = g.epi ? std::max<int64_t>(kRows, (4096 / cols) / kRows * kRows) : 0;
        if (g.epi && tile.size() < static_cast<size_t>((flush_rows + kRows) * ld))
          tile.resize(static_cast<size_t>((flush_rows + kRows) * ld));
        int64_t pending = 0, first = r0;  // rows in `tile`, the first of them
        auto flush = [&] {
          if (cols == g.n) g.epi->apply(tile.data(), g.y_offset + first * g.n, pending * cols);
          else
            for (int64_t r = 0; r < pending; ++r)
              g.epi->apply(tile.data() + r * ld, g.y_offset + (first + r) * g.n + j0, cols);
          first += pending;
          pending = 0;
        };
        for (int64_t m0 = r0; m0 < r1; m0 += kRows) {
          const int64_t rows = std::min(kRows, r1 - m0);
          float* dst = g.epi ? tile.data() + pending * ld : g.y + m0 * g.n + j0;
          const int64_t ldc = g.epi ? ld : g.n;
          conv_gemm_block_avx2(rows, cols, g.k, g.w + m0 * g.k, g.k, g.b + j0, g.ldb, g.bias ? g.bias + m0 : nullptr,
                               dst, ldc);
          if (g.epi) {
            pending += rows;
            if (pending >= flush_rows || m0 + rows >= r1) flush();
          }
        }
        continue;
      }
      // Without AVX2/FMA: one product per task (bias first, the gemm accumulates onto it).
      const int64_t rows = r1 - r0;
      if (g.epi && tile.size() < static_cast<size_t>(rows * cols)) tile.resize(static_cast<size_t>(rows * cols));
      float* dst = g.epi ? tile.data() : g.y + r0 * g.n + j0;
      const int64_t ldc = g.epi ? cols : g.n;
      for (int64_t r = 0; r < rows; ++r) std::fill(dst + r * ldc, dst + r * ldc + cols, g.bias ? g.bias[r0 + r] : 0.f);
      if (g.k > 0) gemm(false, false, rows, cols, g.k, 1.f, g.w + r0 * g.k, g.k, g.b + j0, g.ldb, 1.f, dst, ldc);
      if (g.epi && cols == g.n) g.epi->apply(dst, g.y_offset + r0 * g.n, rows * cols);  // rows back to back
      else if (g.epi)
        for (int64_t r = 0; r < rows; ++r) g.epi->apply(dst + r * cols, g.y_offset + (r0 + r) * g.n + j0, cols);
    }
  });
}

}  // namespace rlx::cpu
