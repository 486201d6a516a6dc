// The driver of int_gemm.h: tasks of (column chunk, group of row blocks) over the pool; each
// task packs its chunk's B panels once and runs every row block of its group over them, one
// tile (kIntRows x kIntCols) at a time, on the VNNI, AVX2 or portable tile (the first the CPU
// runs), and the packing's row helpers.
#include "backends/cpu/int_gemm.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "backends/cpu/parallel.h"

namespace rlx::cpu {
namespace {

// The CPU's paths, asked once (the row helpers run in the packing's inner loops), and the path
// tests force.
const bool kAvx2 = int_gemm_avx2_usable();
const bool kVnni = int_gemm_vnni_usable();
std::atomic<IntPath> g_forced{IntPath::Auto};

bool use_avx2() { return kAvx2 && g_forced.load(std::memory_order_relaxed) != IntPath::Portable; }

// Columns per chunk: the chunk's packed panels (k x cols i16) stay in L2 (~192 KB) while every
// row block of the task runs over them.
int64_t chunk_columns(int64_t n, int64_t k) {
  const int64_t c = std::clamp<int64_t>((98304 / std::max<int64_t>(1, k)) / kIntCols * kIntCols, kIntCols, 512);
  return std::min(c, (n + kIntCols - 1) / kIntCols * kIntCols);
}

}  // namespace

void int_tile_portable(int64_t rows, int64_t cols, int64_t kp, const int16_t* a, const int16_t* b, int32_t* c,
                       int64_t ldc) {
  uint32_t acc[kIntRows][kIntCols] = {};
  for (int64_t p = 0; p < kp; ++p) {
    const int16_t* bp = b + p * kIntCols * 2;
    const int16_t* ap = a + p * kIntRows * 2;
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t a0 = ap[2 * r], a1 = ap[2 * r + 1];
      for (int64_t j = 0; j < kIntCols; ++j)  // |a0 b0 + a1 b1| <= 2 * 255^2: no overflow
        acc[r][j] += static_cast<uint32_t>(a0 * bp[2 * j] + a1 * bp[2 * j + 1]);
    }
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) c[r * ldc + j] = static_cast<int32_t>(acc[r][j]);
}

IntPath int_gemm_force_path(IntPath p) { return g_forced.exchange(p); }

void int_widen(const uint8_t* src, int64_t n, int zero, int16_t* dst) {
  if (use_avx2()) return int_widen_avx2(src, n, zero, dst);
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<int16_t>(src[i] - zero);
}

void int_widen(const int8_t* src, int64_t n, int zero, int16_t* dst) {
  if (use_avx2()) return int_widen_avx2(src, n, zero, dst);
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<int16_t>(src[i] - zero);
}

void int_interleave(const int16_t* r0, const int16_t* r1, int64_t panels, int64_t kp, int64_t p, int16_t* dst) {
  if (use_avx2()) return int_interleave_avx2(r0, r1, panels, kp, p, dst);
  for (int64_t q = 0; q < panels; ++q) {
    int16_t* d = dst + (q * kp + p) * kIntCols * 2;
    for (int64_t j = 0; j < kIntCols; ++j) {
      d[2 * j] = r0[q * kIntCols + j];
      d[2 * j + 1] = r1[q * kIntCols + j];
    }
  }
}

void int_gemm(const IntGemm& g, bool parallel) {
  if (g.m <= 0 || g.n <= 0) return;
  const int64_t kp = int_pairs(g.k);
  const int64_t nc = chunk_columns(g.n, g.k);
  const int64_t n_chunks = (g.n + nc - 1) / nc;
  const int64_t m_blocks = (g.m + kIntRows - 1) / kIntRows;
  // Enough tasks for ~4 per thread: split the row blocks when the columns give too few chunks.
  const int64_t want = parallel ? 4 * static_cast<int64_t>(num_threads()) : 1;
  int64_t per_group = m_blocks;
  if (n_chunks < want) per_group = std::max<int64_t>(1, (m_blocks * n_chunks + want - 1) / want);
  const int64_t m_groups = (m_blocks + per_group - 1) / per_group;
  const int64_t tasks = n_chunks * m_groups;
  const int64_t cost = per_group * kIntRows * nc * std::max<int64_t>(1, g.k);
  const int64_t grain = parallel ? std::max<int64_t>(1, (int64_t{1} << 18) / cost) : tasks;
  const IntPath forced = g_forced.load(std::memory_order_relaxed);
  auto tile = kVnni ? int_tile_vnni : kAvx2 ? int_tile_avx2 : int_tile_portable;
  if (forced == IntPath::Portable) tile = int_tile_portable;
  if (forced == IntPath::Avx2 && kAvx2) tile = int_tile_avx2;

  parallel_for(tasks, grain, [&](int64_t tb, int64_t te) {
    thread_local std::vector<int16_t> panels;
    for (int64_t t = tb; t < te; ++t) {
      const int64_t j0 = (t / m_groups) * nc, cols = std::min(nc, g.n - j0);
      const int64_t b0 = (t % m_groups) * per_group, b1 = std::min(m_blocks, b0 + per_group);
      const auto need = static_cast<size_t>(int_packed_b_size(cols, g.k));
      if (panels.size() < need) panels.resize(need);
      g.pack_b(j0, cols, panels.data());
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int64_t rows = std::min(kIntRows, g.m - blk * kIntRows);
        const int16_t* a = g.a + blk * kp * kIntRows * 2;
        int32_t* c = g.c + blk * kIntRows * g.ldc + j0;
        for (int64_t q = 0; q * kIntCols < cols; ++q)
          tile(rows, std::min(kIntCols, cols - q * kIntCols), kp, a, panels.data() + q * kp * kIntCols * 2,
               c + q * kIntCols, g.ldc);
      }
    }
    if (panels.capacity() > (size_t{4} << 20)) std::vector<int16_t>().swap(panels);
  });
}

}  // namespace rlx::cpu
