// The driver of conv_direct.h: the phase buffer of each (image, group), the per-tap offsets,
// the choice of tile kernel; spatial tiles: tasks of (image and group, chunk of output rows,
// group of 6-channel blocks) over the pool, each finished tile's valid columns copied into y or
// the epilogue's rows; channel lanes: tasks of (image and group, chunk of positions, group of
// 16-channel blocks) writing y's (or the epilogue's) rows directly.
#include "backends/cpu/conv_direct.h"
#include "backends/cpu/kernels.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "backends/cpu/conv_epilogue.h"
#include "backends/cpu/conv_gemm.h"
#include "backends/cpu/parallel.h"

namespace rlx::cpu {
namespace {

constexpr int64_t kRows = 6;    // rows of one register tile
// The channel lanes take sums past kLongSum taps in blocks of kTapBlock taps (bench_conv_direct
// --kernel 2, 1 thread: 1024 -> 256 3x3 at 64x64 (k 9216) 277-288 ms unblocked, 212-220 in
// blocks of 512, 205-208 of 1024 or 2048; 512 -> 512 at 32x32 (k 4608) 50-51 -> 48-49; sums of
// 1152-2304 taps no faster blocked).
constexpr int64_t kLongSum = 4096;
constexpr int64_t kTapBlock = 1024;
constexpr int64_t kSlack = 8;   // floats after a phase buffer (fill_phases writes whole vectors)

struct Geom {
  int64_t sy = 1, sx = 1;  // phases per axis: the strides, or 1 for the flat buffer
  int64_t step_y = 0, step_x = 1;  // floats from one output position to the next down / across
  int64_t hq = 0, wq = 0;  // one phase plane
  int64_t plane = 0;       // hq * wq
  int64_t slots = 0;       // phases some tap reads (a 1x1 stride-2 window reads one of four)
  int64_t chan = 0;        // floats per channel: slots * plane
  int64_t oh = 0, ow = 0;
  int64_t k = 0;           // cg * kh * kw
  int64_t size = 0;        // floats of one (image, group) buffer
  std::vector<int64_t> slot;  // sy * sx: the slot of phase (py, px), or -1 when no tap reads it
};

// The buffer layout: one plane per phase (the spatial tiles load consecutive outputs' inputs
// as one vector), or with `lanes` (the channel-lane kernel, which broadcasts each position's
// input) the padded input as it is, strides taken by the positions, when the window reads every
// phase (bench_conv_direct, ResNet export's 3x3 stride-2 layers: the phases' copy through
// masked loads and shuffles was a third of the conv; a 1x1 stride-2 window reads one phase of
// four, which is less to copy than the whole input).
Geom make_geom(const Window3& win, int64_t cg, bool lanes) {
  Geom g;
  const bool flat = lanes && win.tap_extent(1) >= win.stride[1] && win.tap_extent(2) >= win.stride[2];
  g.oh = win.out[1];
  g.ow = win.out[2];
  // The padded extent the outputs read, rounded up to whole phases.
  const int64_t hp = win.read_extent(1), wp = win.read_extent(2);
  g.sy = flat ? 1 : win.stride[1];
  g.sx = flat ? 1 : win.stride[2];
  g.hq = (hp + g.sy - 1) / g.sy;
  g.wq = (wp + g.sx - 1) / g.sx;
  g.step_y = flat ? win.stride[1] * g.wq : g.wq;
  g.step_x = flat ? win.stride[2] : 1;
  g.plane = g.hq * g.wq;
  // Phases only exist up to the kernel's extent (a stride above it leaves some unread).
  const int64_t py_n = std::min(g.sy, (win.k[1] - 1) * win.dil[1] + 1);
  const int64_t px_n = std::min(g.sx, (win.k[2] - 1) * win.dil[2] + 1);
  g.slot.assign(static_cast<size_t>(py_n * px_n), -1);
  for (int64_t ky = 0; ky < win.k[1]; ++ky)
    for (int64_t kx = 0; kx < win.k[2]; ++kx) {
      auto& sl = g.slot[static_cast<size_t>((ky * win.dil[1] % g.sy) * px_n + kx * win.dil[2] % g.sx)];
      if (sl < 0) sl = g.slots++;
    }
  g.chan = g.slots * g.plane;
  g.k = cg * win.k[1] * win.k[2];
  g.size = cg * g.chan;
  return g;
}

// off[(c * kh + ky) * kw + kx]: where tap (c, ky, kx) of output position q = 0 lies.
void make_offsets(const Window3& win, const Geom& g, int64_t cg, int32_t* off) {
  const int64_t kh = win.k[1], kw = win.k[2], px_n = std::min(g.sx, (kw - 1) * win.dil[2] + 1);
  for (int64_t c = 0; c < cg; ++c)
    for (int64_t ky = 0; ky < kh; ++ky)
      for (int64_t kx = 0; kx < kw; ++kx) {
        const int64_t ty = ky * win.dil[1], tx = kx * win.dil[2];
        const int64_t sl = g.slot[static_cast<size_t>((ty % g.sy) * px_n + tx % g.sx)];
        off[(c * kh + ky) * kw + kx] = static_cast<int32_t>(c * g.chan + sl * g.plane + (ty / g.sy) * g.wq + tx / g.sx);
      }
}

// The phase buffer of cg input planes `x`: each used phase plane gets its rectangle of input
// values and zeros around it (where the window reads padding, or nothing valid). The planes are
// written in memory order (each row may write up to 7 floats past its end, rewritten next; the
// buffer has kSlack floats after the last plane).
void fill_phases(const float* x, int64_t cg, int64_t x_plane, const Window3& win, const Geom& g, float* buf) {
  const int64_t h = win.in[1], w = win.in[2], pt = win.pad[1], pl = win.pad[2];
  const int64_t px_n = std::min(g.sx, (win.k[2] - 1) * win.dil[2] + 1);
  std::vector<int64_t> phase(static_cast<size_t>(g.slots));  // slot -> py * px_n + px
  for (size_t i = 0; i < g.slot.size(); ++i)
    if (g.slot[i] >= 0) phase[static_cast<size_t>(g.slot[i])] = static_cast<int64_t>(i);
  for (int64_t c = 0; c < cg; ++c)
    for (int64_t sl = 0; sl < g.slots; ++sl) {
      const int64_t py = phase[static_cast<size_t>(sl)] / px_n, px = phase[static_cast<size_t>(sl)] % px_n;
      conv_direct_fill_plane_avx2(x + c * x_plane, h, w, g.sy, g.sx, py - pt, px - pl, g.hq, g.wq,
                                  buf + c * g.chan + sl * g.plane);
    }
}

// Tasks wanted for a conv of `fmas` multiply-adds: ~4 per thread, or one on the calling thread
// below kMinParallel (about 15 us of work), where handing tasks to the pool's workers costs more
// than it saves.
int64_t tasks_wanted(int64_t fmas) {
  constexpr int64_t kMinParallel = int64_t{1} << 19;
  const int threads = num_threads();
  return threads > 1 && fmas >= kMinParallel ? 4 * static_cast<int64_t>(threads) : 1;
}

// Tasks per pool chunk: tasks of ~2^18 FMAs at least, all on the calling thread when one task
// is wanted.
int64_t task_grain(int64_t want, int64_t cost, int64_t tasks) {
  return want > 1 ? std::max<int64_t>(1, (int64_t{1} << 18) / cost) : tasks;
}

// With as many (image, group) buffers as threads or a multiple (a batch of 2 on 2 threads), one
// contiguous share of the tasks per thread, so that each thread fills only its own images'
// phase buffers (with dynamic chunks both threads filled both images: ResNet export at 2
// threads, best of 1000 runs 0.474 -> 0.420 ms); else `grain`.
int64_t image_grain(int64_t want, int64_t nblocks, int64_t tasks, int64_t grain) {
  const int64_t threads = num_threads();
  if (want <= 1 || threads <= 1 || nblocks < threads || nblocks % threads != 0) return grain;
  return tasks / threads;
}

// Row blocks per task: all `blocks` when the column pieces alone give `want` tasks, else fewer so
// that blocks x pieces make about `want` tasks.
int64_t blocks_per_task(int64_t blocks, int64_t pieces, int64_t want) {
  return pieces < want ? std::max<int64_t>(1, (blocks * pieces + want - 1) / want) : blocks;
}

// Per-thread buffers: the phase buffer (and which image and group of which call it holds), the
// raw tile and the epilogue's staging rows.
struct Scratch {
  std::vector<float> buf, tile, stage;
  uint64_t call = 0;
  int64_t ng = -1;
  // The phase buffer of image-and-group `ng` of conv call `call`, filled unless this thread
  // already holds it.
  const float* phases(const ConvDirect& d, const Geom& g, int64_t ng_, uint64_t call_) {
    if (call != call_ || ng != ng_) {
      buf.resize(static_cast<size_t>(g.size + kSlack));
      const int64_t plane = d.x_plane > 0 ? d.x_plane : d.win.in_size();
      fill_phases(d.x + ng_ * d.cg * plane, d.cg, plane, d.win, g, buf.data());
      call = call_;
      ng = ng_;
    }
    return buf.data();
  }
  void trim() {
    constexpr size_t kKeep = size_t{8} << 20;
    for (auto* v : {&buf, &tile, &stage})
      if (v->capacity() * sizeof(float) > kKeep) {
        std::vector<float>().swap(*v);
        if (v == &buf) ng = -1;
      }
  }
};

std::atomic<uint64_t> g_calls{0};
std::atomic<bool> g_enabled{true};
std::atomic<int> g_kernel{0};  // 0: chosen per shape, 1: spatial tiles, 2: channel lanes
std::atomic<int> g_zmm{-1};    // -1: the AVX-512 tile kernels where the CPU has AVX-512F, 0: never

}  // namespace

void set_conv_direct_enabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }
uint64_t conv_direct_runs() { return g_calls.load(std::memory_order_relaxed); }
void set_conv_direct_kernel(int which) { g_kernel.store(which, std::memory_order_relaxed); }
void set_conv_zmm(int mode) { g_zmm.store(mode, std::memory_order_relaxed); }
bool conv_zmm_enabled() { return g_zmm.load(std::memory_order_relaxed) != 0 && conv_direct_avx512_usable(); }

namespace {

// The tile kernel for coutg output channels and sums of k taps: 1 spatial, 2 channel lanes.
// Channel lanes from 16 output channels and 24 taps on: fewer channels leave lanes empty and
// shorter sums do not pay for the transposed stores (bench_conv_direct --smallk, 1 thread,
// fastest runs, spatial / channel lanes ms: 3x3 stride 2 at 56x56 from 32 channels to 8:
// 0.079 / 0.115, to 12: 0.129 / 0.139, to 16: 0.115 / 0.101, to 32: 0.293 / 0.250; 1x1 stride
// 2 at 28x28 from 16 channels to 32: 0.0076 / 0.0088; ResNet export layers 0.5-0.8x the spatial
// tiles' time: 2x64x6x5 0.090 / 0.065, the 7x7 stem 0.271 / 0.237).
int pick_kernel(int64_t coutg, int64_t k) {
  const int forced = g_kernel.load(std::memory_order_relaxed);
  if (forced != 0) return forced;
  return coutg >= 16 && k >= 24 ? 2 : 1;
}

}  // namespace

bool conv_direct_usable(const Window3& win, int64_t cg, int64_t coutg) {
  if (!g_enabled.load(std::memory_order_relaxed) || !conv_gemm_avx2_usable()) return false;
  if (win.in[0] != 1 || win.out[0] != 1 || win.k[0] != 1) return false;
  // Long sums stay on im2col + OpenBLAS (kernels_conv.cpp), past 1024 taps for the spatial
  // tiles (their 6 weight rows no longer stay in L1 over a chunk, and the columns thrown away
  // on small maps cost more than unfolding: bench_conv_direct --grid, 1 thread, 3x3 stride 1,
  // spatial / im2col ms: 64 ch (k 576) 0.85-1.0, 128 ch (k 1152) 6x6 1.22, 7x7 1.14, 10x10 ..
  // 28x28 0.98-1.04) and past 4096 for the channel lanes (their 16 x k weight panel streams
  // from L2 for every 6 positions: channel lanes / im2col ms, fastest runs: 128 ch 14x14
  // 0.555 / 0.674, 256 ch 7x7 0.620 / 0.750, batch 4 2.31 / 3.00, 256 ch 14x14 2.24 / 2.55,
  // 512 ch (k 4608) 7x7 3.37 / 3.30), or past 16384 on maps of 256 outputs or more, where long
  // sums run in blocks of taps (512 ch at 32x32 49.2 / 61.6 ms; 1024 -> 256 (k 9216) at 64x64
  // 205 / 270: the ISNet layers). Blocking k for the spatial tiles (the C tile reloaded per block
  // of 128-512 taps) measured no better at 256 and 512 channels.
  const int64_t k = cg * win.k[1] * win.k[2];
  const bool lanes = pick_kernel(coutg, k) == 2;
  const int64_t max_k = lanes ? (win.out[1] * win.out[2] >= 256 ? 16384 : 4096) : 1024;
  if (k >= max_k && g_kernel.load(std::memory_order_relaxed) == 0) return false;
  for (int a = 1; a < 3; ++a)
    if (win.pad[a] < 0 || win.stride[a] < 1 || win.dil[a] < 1 || win.out[a] < 1) return false;
  const Geom g = make_geom(win, cg, lanes);
  return g.size < (int64_t{1} << 31) - 64;
}

namespace {

// Output channels in the lanes (conv_direct_cl_avx2): the weights of each 16-channel block
// packed once per call; tasks of (image and group, chunk of output positions, group of
// channel blocks); the tiles write y's rows (or the staging rows) directly.
void conv_direct_channels(const ConvDirect& d, const Geom& g, const int32_t* off, uint64_t call) {
  // On AVX-512 blocks of 32 channels when there are more than 16 (a last block of up to 16 is
  // packed 16 wide in its 32-wide slot), else of 16 (one zmm register); on AVX2 blocks of 16.
  const bool zmm = conv_zmm_enabled();
  const int64_t block = zmm && d.coutg > 16 ? 32 : 16;
  const int64_t p = g.oh * g.ow, cgk = g.k;
  const int64_t nmb = (d.coutg + block - 1) / block;
  thread_local std::vector<float> wpk_call, bpk;
  thread_local std::vector<int32_t> posq;
  // The packed weights: kept in the step's cache when the weights are fixed across runs
  // (ResNet export, 2 threads: packing on every call was 15-20% of the run), else per call.
  const size_t wpk_size = static_cast<size_t>(d.groups * nmb * cgk * block);
  std::vector<float>& wpk = d.weight_cache ? d.weight_cache->packed.data : wpk_call;
  const bool packed =
      d.weight_cache && d.weight_cache->packed.fresh(d.w, d.params_generation, block) && wpk.size() == wpk_size;
  if (!packed) wpk.resize(wpk_size);
  bpk.assign(static_cast<size_t>(d.groups * nmb * block), 0.f);
  for (int64_t grp = 0; grp < d.groups; ++grp)
    for (int64_t blk = 0; blk < nmb; ++blk) {
      const int64_t m0 = blk * block, rows = std::min(block, d.coutg - m0), at = grp * nmb + blk;
      const float* src = d.w + (grp * d.coutg + m0) * cgk;
      if (!packed && rows > 16) conv_direct_pack32_avx512(src, rows, cgk, wpk.data() + at * cgk * block);
      else if (!packed) conv_direct_pack_avx2(src, rows, cgk, wpk.data() + at * cgk * block);
      if (d.bias) std::copy(d.bias + grp * d.coutg + m0, d.bias + grp * d.coutg + m0 + rows, bpk.data() + at * block);
    }
  posq.resize(static_cast<size_t>(p));
  for (int64_t oy = 0, i = 0; oy < g.oh; ++oy)
    for (int64_t ox = 0; ox < g.ow; ++ox) posq[static_cast<size_t>(i++)] = static_cast<int32_t>(oy * g.step_y + ox * g.step_x);
  const float* wp = wpk.data();
  const float* bp = bpk.data();
  const int32_t* pq = posq.data();

  const int64_t tap_block = cgk > kLongSum ? kTapBlock : std::max<int64_t>(cgk, 1);
  // Chunks of ~240 positions (a multiple of both tiles, 6 and 8 positions); enough tasks for ~4
  // a thread.
  const int64_t nblocks = d.n_batch * d.groups;
  // With several threads and too few (image, channel block) pairs, shorter chunks (of 24 or
  // more positions) make the tasks.
  const int64_t want = tasks_wanted(nblocks * p * nmb * block * cgk);
  int64_t n_chunks = ceil_div(p, 240);
  if (want > 1) n_chunks = std::max(n_chunks, std::min(ceil_div(want, nblocks * nmb), ceil_div(p, 24)));
  const int64_t chunk = ceil_div(ceil_div(p, n_chunks), 24) * 24;
  const int64_t n_pchunks = ceil_div(p, chunk);
  const int64_t per_group = blocks_per_task(nmb, nblocks * n_pchunks, want);
  const int64_t m_groups = (nmb + per_group - 1) / per_group;
  const int64_t tasks = nblocks * n_pchunks * m_groups;
  const int64_t cost = per_group * block * chunk * std::max<int64_t>(1, cgk);
  const int64_t grain = image_grain(want, nblocks, tasks, task_grain(want, cost, tasks));

  parallel_for(tasks, grain, [&](int64_t tb, int64_t te) {
    thread_local Scratch s;
    for (int64_t t = tb; t < te; ++t) {
      const int64_t ng = t / (n_pchunks * m_groups), rem = t % (n_pchunks * m_groups);
      const int64_t pc = rem / m_groups, mg = rem % m_groups;
      const int64_t grp = ng % d.groups;
      const float* phases = s.phases(d, g, ng, call);
      const int64_t p0 = pc * chunk, np = std::min(chunk, p - p0);
      const int64_t b0 = mg * per_group, b1 = std::min(nmb, b0 + per_group);
      const int64_t r0 = b0 * block, r1 = std::min(d.coutg, b1 * block);
      const int64_t y0 = ng * d.coutg * p;
      // With an epilogue the rows gather in `stage` (rows of np; whole planes back to back when
      // the chunk is the whole image) and go through it ~4K values at once.
      const int64_t flush_rows = d.epi ? std::max<int64_t>(block, (4096 / np) / block * block) : 0;
      if (d.epi && s.stage.size() < static_cast<size_t>((flush_rows + block) * np))
        s.stage.resize(static_cast<size_t>((flush_rows + block) * np));
      int64_t pending = 0, first = r0;
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int64_t m0 = blk * block, rows = std::min(block, d.coutg - m0);
        float* dst = d.epi ? s.stage.data() + pending * np : d.y + y0 + m0 * p + p0;
        const float* wb = wp + (grp * nmb + blk) * cgk * block;
        // Long sums in blocks of taps over all the chunk's positions: a block's weights stay in
        // L1 from one tile to the next (a whole 16 x k panel streamed from L2 or L3 per tile).
        for (int64_t k0 = 0; k0 < std::max<int64_t>(cgk, 1); k0 += tap_block) {
          const int64_t kb = std::min(tap_block, cgk - k0);
          const float* bias = k0 == 0 ? bp + (grp * nmb + blk) * block : nullptr;
          if (zmm) {
            conv_direct_cl32_avx512(rows, np, kb, wb + k0 * (rows > 16 ? 32 : 16), phases, off + k0, pq + p0, bias, dst,
                                    d.epi ? np : p);
          } else {
            conv_direct_cl_avx2(rows, np, kb, wb + k0 * 16, phases, off + k0, pq + p0, bias, dst, d.epi ? np : p);
          }
        }
        if (!d.epi) continue;
        pending += rows;
        if (pending >= flush_rows || m0 + rows >= r1) {
          if (np == p) d.epi->apply(s.stage.data(), y0 + first * p, pending * p);
          else
            for (int64_t r = 0; r < pending; ++r) d.epi->apply(s.stage.data() + r * np, y0 + (first + r) * p + p0, np);
          first += pending;
          pending = 0;
        }
      }
    }
    s.trim();
  });
}

}  // namespace

void conv_direct(const ConvDirect& d) {
  const Window3& win = d.win;
  const bool lanes = pick_kernel(d.coutg, d.cg * win.k[1] * win.k[2]) == 2;
  const Geom g = make_geom(win, d.cg, lanes);
  if (d.n_batch <= 0 || d.coutg <= 0) return;
  const int64_t p = g.oh * g.ow;
  std::vector<int32_t> off(static_cast<size_t>(std::max<int64_t>(1, g.k)));
  make_offsets(win, g, d.cg, off.data());
  const uint64_t call = g_calls.fetch_add(1, std::memory_order_relaxed) + 1;
  if (lanes) {
    conv_direct_channels(d, g, off.data(), call);
    return;
  }

  // Chunks of whole output rows, ~512 positions of the grid each: the weights of a 6-row block
  // stay in L1 over the chunk's tiles; the tile stays in L1 for the copy-out.
  const int64_t nblocks = d.n_batch * d.groups;
  // Balanced: 24 rows of 22 as 12 + 12, not 23 + 1.
  const int64_t max_rows = std::clamp<int64_t>(512 / g.wq, 1, g.oh);
  const int64_t rows_per_chunk = ceil_div(g.oh, ceil_div(g.oh, max_rows));
  const int64_t n_chunks = ceil_div(g.oh, rows_per_chunk);
  const int64_t m_blocks = (d.coutg + kRows - 1) / kRows;
  const int64_t want = tasks_wanted(nblocks * n_chunks * ((rows_per_chunk - 1) * g.wq + g.ow) * m_blocks * kRows * g.k);
  const int64_t per_group = blocks_per_task(m_blocks, nblocks * n_chunks, want);
  const int64_t m_groups = (m_blocks + per_group - 1) / per_group;
  const int64_t tasks = nblocks * n_chunks * m_groups;
  const int64_t chunk_cols = (rows_per_chunk - 1) * g.wq + g.ow;
  const int64_t cost = per_group * kRows * chunk_cols * std::max<int64_t>(1, g.k);
  const int64_t grain = image_grain(want, nblocks, tasks, task_grain(want, cost, tasks));
  const int64_t cgk = g.k;

  parallel_for(tasks, grain, [&](int64_t tb, int64_t te) {
    thread_local Scratch s;
    for (int64_t t = tb; t < te; ++t) {
      const int64_t ng = t / (n_chunks * m_groups), rem = t % (n_chunks * m_groups);
      const int64_t chunk = rem / m_groups, mg = rem % m_groups;
      const int64_t grp = ng % d.groups;
      const float* phases = s.phases(d, g, ng, call);
      const int64_t oy0 = chunk * rows_per_chunk, oy1 = std::min(g.oh, oy0 + rows_per_chunk), nrows = oy1 - oy0;
      const int64_t q0 = oy0 * g.wq, cols = (nrows - 1) * g.wq + g.ow, seg = nrows * g.ow;
      const int64_t ld = (cols + 7) / 8 * 8 + 8;
      const int64_t r0 = mg * per_group * kRows, r1 = std::min(d.coutg, r0 + per_group * kRows);
      const int64_t y0 = ng * d.coutg * p;  // flat index of this (image, group)'s first output
      if (s.tile.size() < static_cast<size_t>(kRows * ld)) s.tile.resize(static_cast<size_t>(kRows * ld));
      // With an epilogue the valid values gather in `stage` (rows of `seg`; whole planes back
      // to back when the chunk is the whole image) and go through it ~4K values at once.
      const int64_t flush_rows = d.epi ? std::max<int64_t>(kRows, (4096 / seg) / kRows * kRows) : 0;
      if (d.epi && s.stage.size() < static_cast<size_t>((flush_rows + kRows) * seg))
        s.stage.resize(static_cast<size_t>((flush_rows + kRows) * seg));
      int64_t pending = 0, first = r0;
      auto flush = [&] {
        if (nrows == g.oh) d.epi->apply(s.stage.data(), y0 + first * p, pending * p);
        else
          for (int64_t r = 0; r < pending; ++r)
            d.epi->apply(s.stage.data() + r * seg, y0 + (first + r) * p + oy0 * g.ow, seg);
        first += pending;
        pending = 0;
      };
      const float* wg = d.w + grp * d.coutg * cgk;
      const float* bg = d.bias ? d.bias + grp * d.coutg : nullptr;
      const float* b = phases + q0;
      for (int64_t m0 = r0; m0 < r1; m0 += kRows) {
        const int64_t rows = std::min(kRows, r1 - m0);
        float* dst = d.epi ? s.stage.data() + pending * seg : d.y + y0 + m0 * p + oy0 * g.ow;
        const int64_t ldd = d.epi ? seg : p;
        if (g.wq == g.ow) {  // no columns to drop (1-wide windows): straight to the destination
          conv_direct_block_avx2(rows, cols, cgk, wg + m0 * cgk, cgk, b, off.data(), bg ? bg + m0 : nullptr, dst, ldd);
        } else {
          conv_direct_block_avx2(rows, cols, cgk, wg + m0 * cgk, cgk, b, off.data(), bg ? bg + m0 : nullptr,
                                 s.tile.data(), ld);
          for (int64_t r = 0; r < rows; ++r) {
            const float* src = s.tile.data() + r * ld;
            float* dr = dst + r * ldd;
            for (int64_t oy = 0; oy < nrows; ++oy)
              std::memcpy(dr + oy * g.ow, src + oy * g.wq, static_cast<size_t>(g.ow) * sizeof(float));
          }
        }
        if (d.epi) {
          pending += rows;
          if (pending >= flush_rows || m0 + rows >= r1) flush();
        }
      }
    }
    s.trim();
  });
}

}  // namespace rlx::cpu
