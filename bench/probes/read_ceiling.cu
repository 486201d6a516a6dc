// Probe: how fast can this GPU stream weights it only reads, and how close is rlx's GEMV to that?
// The decode bound in bench_cuda divides the token's bytes by the device-to-device copy rate
// (bytes read + written). This probe measures, on the same 16 layers x (46.1 + 23.1 MB) chain
// that bench/probes/mlp_fused.cu uses (distinct weights, 1.1 GB, past the L2, in a CUDA graph,
// programmatic launches), what kernels that only read reach:
//   - rlx's GEMV shape (24 warps x 8 16-byte words per lane in flight, one block per SM), with
//     and without its arithmetic (a checksum instead);
//   - grid-stride reads with 1-4 blocks per SM and 2-8 words per thread, and one kernel reading
//     the whole 1.1 GB (no kernel boundaries at all);
//   - GEMV designs aimed at the gap: a flat split (each warp an equal contiguous share, rows cut
//     between warps finished by the last of them), two register stages in rlx's row order, and
//     other grids (gate+up balanced at 4 rows per warp, down on more or fewer SMs);
// and cudaMemcpy's device-to-device rate for reference. The GEMV designs are checked against
// rlx's GEMV on one gate+up and one down product.
// Standalone; build and run with
//   nvcc -arch=sm_90 -O2 -o read_ceiling bench/probes/read_ceiling.cu && ./read_ceiling
// Results: docs/benchmarks.md (2026-11-23, session 18): reads alone stream at 3.1 TB/s, rlx's
// GEMV at 2.6 (2.9 without its arithmetic); the flat split loses (2.2 even without arithmetic),
// two register stages gain nothing, the balanced gate+up grid gains 1 us per layer here but
// loses in the decode pipeline.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>
#include "probe_util.cuh"

__device__ __forceinline__ uint4 ld_plain(const uint4* a) {
  uint4 r; asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(a)); return r; }

// rlx's GEMV shape (probe_util.cuh's gemv_rows), without a prologue, epilogue or prefetch;
// DOT = 0 keeps the loads and drops the arithmetic.
template <int W, int U, int DOT>
__global__ void __maxnreg__(64) gemv(const bf* x, const uint4* w, bf* out, int n, int kw) {
  gemv_rows<W, U, 0, DOT>(x, w, out, n, kw, 0, nullptr, nullptr, 0);
}

// Flat split: the weight as one stream of 32-word groups (a row is kw / 32 of them), each warp a
// contiguous, equal share (groups [G w / NW, G (w + 1) / NW) of G), so every warp and every SM
// finishes together whatever the row count. A row cut between warps is finished by the last of
// its warps to arrive: each stores its partial sum in the row's slot (slot index = warp - first
// warp of the row), then counts in; the last adds the slots in order (deterministic) and resets
// the count for the next run. DB: two register stages of U words, the next stage's loads issued
// before the current one's arithmetic. DOT = 0: loads only.
__device__ __forceinline__ long long owner_of(long long grp, long long G, long long NW) { return ((grp + 1) * NW - 1) / G; }
template <int W, int U, int DB, int DOT, int MAXR>
__global__ void __maxnreg__(MAXR) gemv_flat(const bf* x, const uint4* w, bf* out, int n, int kw, float* slots,
                                            unsigned* cnt, int maxc) {
  __shared__ uint4 xs4[I / 8];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned long long pol = pol_ef();
  const int NW = gridDim.x * W, gw = blockIdx.x * W + warp;
  const int kpr = kw / 32;
  const int G = n * kpr, g0 = (int)((long long)G * gw / NW), ge = (int)((long long)G * (gw + 1) / NW);
  int g = g0;
  uint4 a[U], b[U];
#define FLAT_LOAD(v, at) _Pragma("unroll") for (int j = 0; j < U; ++j) if ((at) + j < ge) v[j] = ld_ef(w + (long long)((at) + j) * 32 + lane, pol);
  FLAT_LOAD(a, g);
  pdl_begin();
  const uint4* x4 = reinterpret_cast<const uint4*>(x);
  for (int i = threadIdx.x; i < kw; i += W * 32) xs4[i] = __ldcg(x4 + i);
  __syncthreads();
  int r = g0 / kpr;
  int c = (int)(g0 - r * kpr);
  float acc = 0.f;
  unsigned cs = 0;
  auto flush = [&](bool last_piece) {
    float s = DOT ? wsum(acc) : (float)(cs & 1);
    acc = 0.f;
    const int first = (int)owner_of(r * kpr, G, NW), lastw = (int)owner_of((r + 1) * kpr - 1, G, NW);
    if (lane == 0) {
      if (first == lastw) {
        out[r] = __float2bfloat16(s);
      } else {
        slots[r * maxc + (gw - first)] = s;
        __threadfence();
        const unsigned nc = (unsigned)(lastw - first + 1);
        if (atomicAdd(cnt + r, 1u) == nc - 1) {
          __threadfence();
          float t = 0.f;
          for (unsigned i = 0; i < nc; ++i) t += __ldcg(slots + r * maxc + i);
          out[r] = __float2bfloat16(t);
          cnt[r] = 0;
        }
      }
    }
    (void)last_piece;
  };
  auto consume = [&](const uint4 (&v)[U], int at) {
#pragma unroll
    for (int j = 0; j < U; ++j) {
      if (at + j < ge) {
        if (DOT) acc += dot8(v[j], xs4[c * 32 + lane]); else cs ^= mix(v[j]);
        if (++c == kpr) { flush(false); c = 0; ++r; }
      }
    }
  };
  if (DB) {
    for (;;) {
      if (g + U < ge) { FLAT_LOAD(b, g + U); }
      consume(a, g);
      g += U;
      if (g >= ge) break;
      if (g + U < ge) { FLAT_LOAD(a, g + U); }
      consume(b, g);
      g += U;
      if (g >= ge) break;
    }
  } else {  // as rlx's GEMV: the next words go out after this batch's arithmetic
    for (;;) {
      consume(a, g);
      g += U;
      if (g >= ge) break;
      FLAT_LOAD(a, g);
    }
  }
  if (c != 0) flush(true);
}

// rlx's row shape with two register stages of U words: each warp walks its batches (row, first
// word) in order, the stage after next loaded while this one's arithmetic runs, and both stages
// loaded before the programmatic-launch wait.
template <int W, int U, int DOT, int MAXR>
__global__ void __maxnreg__(MAXR) gemv_db(const bf* x, const uint4* w, bf* out, int n, int kw) {
  __shared__ uint4 xs4[I / 8];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned long long pol = pol_ef();
  const int stride = gridDim.x * W;
  int ra = blockIdx.x + gridDim.x * warp, qa = 0;  // stage A's batch
  int rb = ra, qb = qa + U * 32;                     // stage B's batch
  if (qb >= kw) qb = 0, rb += stride;
  uint4 a[U], b[U];
#define DB_LOAD(v, r, q0) if ((r) < n) { _Pragma("unroll") for (int j = 0; j < U; ++j) { const int q = (q0) + j * 32 + lane; if (q < kw) v[j] = ld_ef(w + (long long)(r) * kw + q, pol); } }
  DB_LOAD(a, ra, qa);
  DB_LOAD(b, rb, qb);
  pdl_begin();
  const uint4* x4 = reinterpret_cast<const uint4*>(x);
  for (int i = threadIdx.x; i < kw; i += W * 32) xs4[i] = __ldcg(x4 + i);
  __syncthreads();
  float acc = 0.f;
  unsigned cs = 0;
  // Consumes stage v (batch r, q0), then moves it two batches on and loads it.
  auto step = [&](uint4 (&v)[U], int& r, int& q0) {
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const int q = q0 + j * 32 + lane;
      if (q < kw) { if (DOT) acc += dot8(v[j], xs4[q]); else cs ^= mix(v[j]); }
    }
    const int cur = r;
    const bool done = q0 + U * 32 >= kw;
    for (int k = 0; k < 2; ++k) { q0 += U * 32; if (q0 >= kw) q0 = 0, r += stride; }
    DB_LOAD(v, r, q0);
    if (done) {
      const float sum = DOT ? wsum(acc) : (float)(cs & 1);
      if (lane == 0) out[cur] = __float2bfloat16(sum);
      acc = 0.f;
    }
  };
  for (;;) {
    if (ra >= n) break;
    step(a, ra, qa);
    if (rb >= n) break;
    step(b, rb, qb);
  }
}

// Grid-stride reads: thread t reads words t, t + S, ... U at a time (S = all threads).
template <int U, int EF>
__global__ void stream(const uint4* w, long long n16, unsigned* sink) {
  const long long S = (long long)gridDim.x * blockDim.x;
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  const unsigned long long pol = pol_ef();
  unsigned cs = 0;
  uint4 r[U];
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  for (; i + (U - 1) * S < n16; i += U * S) {
#pragma unroll
    for (int j = 0; j < U; ++j) r[j] = EF ? ld_ef(w + i + j * S, pol) : ld_plain(w + i + j * S);
#pragma unroll
    for (int j = 0; j < U; ++j) cs ^= mix(r[j]);
  }
  for (; i < n16; i += S) cs ^= mix(ld_plain(w + i));
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (cs == 0x9e3779b9u) sink[0] = cs;  // practically never; keeps the loads
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  // One allocation so that the "one kernel" rows can read all layers at once.
  const long long per_layer = 3ll * I * H;  // elements: gate+up (2 I H) then down (I H)
  bf* all;
  CK(cudaMalloc(&all, per_layer * L * 2));
  fill<<<2048, 256>>>(all, per_layer * L, 17, 0.05f);
  bf *x, *y;
  CK(cudaMalloc(&x, 2 * I * 2));
  CK(cudaMalloc(&y, 2 * I * 2));
  fill<<<8, 256>>>(x, 2 * I, 5, 0.05f);
  unsigned* sink;
  CK(cudaMalloc(&sink, 4));
  CK(cudaDeviceSynchronize());
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // Split-row slots: a row of kw / 32 groups meets at most maxc warps (each holds >= 8 groups).
  const int maxc = 8;
  float *slots_gu, *slots_dn;
  unsigned *cnt_gu, *cnt_dn;
  CK(cudaMalloc(&slots_gu, 2ll * I * maxc * 4)); CK(cudaMalloc(&slots_dn, 1ll * H * maxc * 4));
  CK(cudaMalloc(&cnt_gu, 2ll * I * 4)); CK(cudaMalloc(&cnt_dn, 1ll * H * 4));
  CK(cudaMemset(cnt_gu, 0, 2ll * I * 4)); CK(cudaMemset(cnt_dn, 0, 1ll * H * 4));
  auto gu = [&](int l) { return reinterpret_cast<const uint4*>(all + per_layer * l); };
  auto dn = [&](int l) { return reinterpret_cast<const uint4*>(all + per_layer * l + 2ll * I * H); };
  typedef void (*Gemv)(const bf*, const uint4*, bf*, int, int);
  typedef void (*Stream)(const uint4*, long long, unsigned*);
  typedef void (*Flat)(const bf*, const uint4*, bf*, int, int, float*, unsigned*, int);
  struct Cfg { const char* name; Gemv g; int warps; Stream st; int threads, per_sm; bool whole; Flat fl = nullptr; Gemv g2 = nullptr; int gu_blocks = 0, dn_blocks = 0, warps2 = 0; };
  const Cfg cfgs[] = {
      {"GEMV 24 warps x 8 words (rlx)", gemv<24, 8, 1>, 24, nullptr, 0, 0, false},
      {"GEMV shape, loads only", gemv<24, 8, 0>, 24, nullptr, 0, 0, false},
      {"stream 1x1024 thr, 8 words, ef", nullptr, 0, stream<8, 1>, 1024, 1, false},
      {"stream 2x1024 thr, 2 words, ef", nullptr, 0, stream<2, 1>, 1024, 2, false},
      {"row DB 24 warps x 2x4", gemv_db<24, 4, 1, 64>, 24, nullptr, 0, 0, false},
      {"row DB 24 warps x 2x4, loads only", gemv_db<24, 4, 0, 64>, 24, nullptr, 0, 0, false},
      {"row DB 24 warps x 2x6, 80 regs", gemv_db<24, 6, 1, 80>, 24, nullptr, 0, 0, false},
      {"row DB 32 warps x 2x4", gemv_db<32, 4, 1, 64>, 32, nullptr, 0, 0, false},
      {"row DB 24x2x4, all SMs", gemv_db<24, 4, 1, 64>, 24, nullptr, 0, 0, false, nullptr, nullptr, 132, 132, 24},
      {"row DB g+u 22w x 128, down 16w x 128", gemv_db<22, 4, 1, 64>, 22, nullptr, 0, 0, false, nullptr, gemv_db<16, 4, 1, 64>, 128, 128, 16},
      {"row DB g+u 22w x 128, down 32w x 64", gemv_db<22, 4, 1, 64>, 22, nullptr, 0, 0, false, nullptr, gemv_db<32, 4, 1, 64>, 128, 64, 32},
      {"rlx g+u 22w x 128, down 24w x 86", gemv<22, 8, 1>, 22, nullptr, 0, 0, false, nullptr, gemv<24, 8, 1>, 128, 86, 24},
      {"rlx g+u 22w x 128, down 24w x 11 words", gemv<22, 8, 1>, 22, nullptr, 0, 0, false, nullptr, gemv<24, 11, 1>, 128, 86, 24},
      {"rlx g+u 22w x 128, down 16w x 128", gemv<22, 8, 1>, 22, nullptr, 0, 0, false, nullptr, gemv<16, 8, 1>, 128, 128, 16},
      {"rlx g+u 22w x 128, down 32w x 64", gemv<22, 8, 1>, 22, nullptr, 0, 0, false, nullptr, gemv<32, 8, 1>, 128, 64, 32},
      {"rlx g+u 22w x 128 loads only, down too", gemv<22, 8, 0>, 22, nullptr, 0, 0, false, nullptr, gemv<24, 8, 0>, 128, 86, 24},
      {"rlx g+u 24w x 132, down 22w x 94", gemv<24, 8, 1>, 24, nullptr, 0, 0, false, nullptr, gemv<22, 8, 1>, 132, 94, 22},
      {"flat 24 warps x 2x4, 2 blocks/SM", nullptr, 12, nullptr, 0, 0, false, gemv_flat<12, 4, 1, 1, 64>},
  };
  constexpr int NC = sizeof(cfgs) / sizeof(cfgs[0]);
  auto capture = [&](const Cfg& c) {
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    if (c.whole) {
      launch(c.st, sms * c.per_sm, c.threads, s, reinterpret_cast<const uint4*>(all), per_layer * L / 8, sink);
    } else {
      for (int l = 0; l < L; ++l) {
        if (c.fl) {
          launch(c.fl, c.warps == 12 ? 2 * sms : sms, c.warps * 32, s, (const bf*)x, gu(l), y, 2 * I, H / 8, slots_gu, cnt_gu, maxc);
          launch(c.fl, c.warps == 12 ? 2 * sms : sms, c.warps * 32, s, (const bf*)y, dn(l), x, H, I / 8, slots_dn, cnt_dn, maxc);
        } else if (c.gu_blocks) {
          launch(c.g, c.gu_blocks, c.warps * 32, s, (const bf*)x, gu(l), y, 2 * I, H / 8);
          launch(c.g2 ? c.g2 : c.g, c.dn_blocks, c.warps2 * 32, s, (const bf*)y, dn(l), x, H, I / 8);
        } else if (c.g) {
          const int gb = std::min(sms, (2 * I + c.warps - 1) / c.warps), db = std::min(sms, (H + c.warps - 1) / c.warps);
          launch(c.g, gb, c.warps * 32, s, (const bf*)x, gu(l), y, 2 * I, H / 8);
          launch(c.g, db, c.warps * 32, s, (const bf*)y, dn(l), x, H, I / 8);
        } else {
          launch(c.st, sms * c.per_sm, c.threads, s, gu(l), 2ll * I * H / 8, sink);
          launch(c.st, sms * c.per_sm, c.threads, s, dn(l), 1ll * I * H / 8, sink);
        }
      }
    }
    return end_capture(s);
  };
  cudaGraphExec_t ex[NC];
  for (int m = 0; m < NC; ++m) ex[m] = capture(cfgs[m]);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  // Copy reference: 1 GiB device to device, counted as bytes read + written.
  const long long cb = 1ll << 30;
  void *ca, *cbuf;
  CK(cudaMalloc(&ca, cb)); CK(cudaMalloc(&cbuf, cb));
  CK(cudaMemset(ca, 1, cb));
  std::vector<float> t[NC + 1];
  for (int r = 0; r < 25; ++r) {
    for (int m = 0; m < NC; ++m) {
      const float ms = time_on(s, e0, e1, [&] { CK(cudaGraphLaunch(ex[m], s)); });
      if (r >= 5) t[m].push_back(ms);
    }
    const float ms = time_on(s, e0, e1, [&] { CK(cudaMemcpyAsync(cbuf, ca, cb, cudaMemcpyDeviceToDevice, s)); });
    if (r >= 5) t[NC].push_back(ms);
  }
  const double bytes = L * 3.0 * I * H * 2;
  for (int m = 0; m < NC; ++m) {
    std::sort(t[m].begin(), t[m].end());
    const double med = t[m][t[m].size() / 2];
    printf("%-40s %8.1f us / layer  %6.0f GB/s read  (best %.1f us)\n", cfgs[m].name, med * 1000 / L, bytes / (med * 1e6),
           t[m][0] * 1000 / L);
  }
  // The flat kernels against rlx's GEMV, one gate+up and one down product (fresh inputs).
  {
    bf *ya, *yb, *xd;
    CK(cudaMalloc(&ya, 2 * I * 2)); CK(cudaMalloc(&yb, 2 * I * 2)); CK(cudaMalloc(&xd, I * 2));
    fill<<<8, 256>>>(xd, I, 9, 0.05f);
    const Flat fls[] = {gemv_flat<24, 8, 0, 1, 64>, gemv_flat<24, 4, 1, 1, 64>, gemv_flat<24, 6, 1, 1, 80>, gemv_flat<32, 4, 1, 1, 64>};
    const Gemv dbs[] = {gemv_db<24, 4, 1, 64>, gemv_db<24, 6, 1, 80>, gemv_db<32, 4, 1, 64>, gemv_db<16, 4, 1, 64>};
    for (int f = 0; f < 8; ++f)
      for (int which = 0; which < 2; ++which) {
        const int nn = which ? H : 2 * I, kw = which ? I / 8 : H / 8, wps = f == 3 || f == 6 ? 32 : f == 7 ? 16 : 24;
        const uint4* wt = which ? dn(3) : gu(3);
        launch(gemv<24, 8, 1>, std::min(sms, (nn + 23) / 24), 768, s, (const bf*)xd, wt, ya, nn, kw);
        for (int rep = 0; rep < 2; ++rep)  // twice: the counts must have been reset
          if (f < 4) launch(fls[f], sms, wps * 32, s, (const bf*)xd, wt, yb, nn, kw, which ? slots_dn : slots_gu, which ? cnt_dn : cnt_gu, maxc);
          else launch(dbs[f - 4], std::min(sms, (nn + wps - 1) / wps), wps * 32, s, (const bf*)xd, wt, yb, nn, kw);
        double mx = 0;
        const double md = max_abs_diff(s, ya, yb, nn, &mx);
        printf("check %s kernel %d, %s: max |rlx - it| %.4g (max |y| %.4g)\n", f < 4 ? "flat" : "row DB", f, which ? "down" : "gate+up", md, mx);
      }
  }
  std::sort(t[NC].begin(), t[NC].end());
  printf("%-40s %8.3f ms / GiB    %6.0f GB/s (read + written)\n", "cudaMemcpy device to device", t[NC][t[NC].size() / 2],
         2.0 * cb / (t[NC][t[NC].size() / 2] * 1e6));
  return 0;
}
