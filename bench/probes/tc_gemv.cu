// Probe: does a tensor-core GEMV stream a bf16 weight closer to the read ceiling than rlx's
// CUDA-core GEMV? Session 18 found rlx's GEMV at 2.6 TB/s against 2.9 with the same loads and
// no arithmetic: per 16-byte weight word each lane issues a shared load of x, 16 conversions
// and 8 FMAs. Here the weight is packed in tiles of 16 rows x 16 k, 512 contiguous bytes that
// are exactly one warp's A fragments of `mma.m16n8k16` (each lane's 16-byte word is its four A
// registers), so one weight word costs one 8-byte shared load of x (B, every column the same x)
// and one mma. The k order inside a tile is permuted so that a lane's B fragment is 4 adjacent
// elements of x: lane (g = lane / 4, t = lane % 4) holds rows g and g + 8, k = 4t .. 4t + 3.
// A warp streams a tile row (16 output rows, all of K) in batches of U words per lane; WPR
// warps of a block split K and add their sums in shared memory (in slice order, deterministic).
// Same chain as read_ceiling.cu (16 layers x gate+up (46.1 MB) + down (23.1 MB), distinct
// weights, 1.1 GB, CUDA graph, programmatic launches), against rlx's GEMV measured in the same
// run; every tensor-core configuration is checked against rlx's GEMV on one gate+up and one
// down product.
// Standalone; build and run with
//   nvcc -arch=sm_90 -O2 -o tc_gemv bench/probes/tc_gemv.cu && ./tc_gemv
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>
#include "probe_util.cuh"

template <int W, int U, int DOT>
__global__ void __maxnreg__(64) gemv(const bf* x, const uint4* w, bf* out, int n, int kw) {
  gemv_rows<W, U, 0, DOT>(x, w, out, n, kw, 0, nullptr, nullptr, 0);
}

// Tile packing: dst word ((tile * kc + c) * 32 + lane), element e <- src row tile * 16 + g +
// 8 * ((e >> 1) & 1), column c * 16 + 4t + (e & 1) + 2 * (e >> 2). src: [n][k] row-major.
__global__ void pack_tiles(const bf* src, bf* dst, int n, int k) {
  const long long kc = k / 16, total = (long long)(n / 16) * kc * 256;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    const int e = (int)(i & 7), lane = (int)((i >> 3) & 31);
    const long long tc = i >> 8, tile = tc / kc, c = tc - tile * kc;
    const int g = lane >> 2, t = lane & 3;
    const long long row = tile * 16 + g + 8 * ((e >> 1) & 1), col = c * 16 + 4 * t + (e & 1) + 2 * (e >> 2);
    dst[i] = src[row * k + col];
  }
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], uint4 a, uint2 b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b.x), "r"(b.y));
}

// out[n] = W[n, :] . x over the tile-packed weight. Tiles go to (block, group) round-robin:
// tile = block + grid * (group + groups * round); the WPR warps of a group each take a
// contiguous slice of the tile row's kc chunks. DOT = 0: loads only (an xor checksum).
template <int W, int WPR, int U, int DOT>
__global__ void __maxnreg__(64) gemv_tc(const bf* x, const uint4* wp, bf* out, int n, int kc) {
  constexpr int GROUPS = W / WPR;
  __shared__ uint4 xs4[I / 8];
  __shared__ float red[2][W][16];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, group = warp / WPR, slice = warp % WPR;
  const int per = (kc + WPR - 1) / WPR, cb = slice * per, ce = min(kc, cb + per);
  const int tiles = n / 16, stride = gridDim.x * GROUPS;
  const unsigned long long pol = pol_ef();
  int tile = blockIdx.x + gridDim.x * group, q0 = cb;
  bool have = tile < tiles;
  uint4 wr[U];
#define TC_LOAD() { const uint4* p_ = wp + ((long long)tile * kc + q0) * 32 + lane; _Pragma("unroll") for (int j = 0; j < U; ++j) if (q0 + j < ce) wr[j] = ld_ef(p_ + j * 32, pol); }
  if (have) { TC_LOAD(); }
  pdl_begin();
  const uint4* x4 = reinterpret_cast<const uint4*>(x);
  for (int i = threadIdx.x; i < kc * 2; i += W * 32) xs4[i] = __ldcg(x4 + i);
  __syncthreads();
  const uint2* xs2 = reinterpret_cast<const uint2*>(xs4);  // 4 elements of x per entry
  const int t = lane & 3, g = lane >> 2;
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  unsigned cs = 0;
  int round = 0;
  while (have) {
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const int c = q0 + j;
      if (c < ce) {
        if (DOT) mma_bf16(d, wr[j], xs2[c * 4 + t]); else cs ^= mix(wr[j]);
      }
    }
    const int cur = tile;
    q0 += U;
    const bool done = q0 >= ce;
    if (done) tile += stride, q0 = cb;
    have = tile < tiles;
    if (have) { TC_LOAD(); }
    if (done) {
      if (!DOT) d[0] = d[2] = (float)(cs & 1);
      if (WPR == 1) {
        if (t == 0) out[cur * 16 + g] = __float2bfloat16(d[0]), out[cur * 16 + g + 8] = __float2bfloat16(d[2]);
      } else {
        if (t == 0) red[round & 1][warp][g] = d[0], red[round & 1][warp][g + 8] = d[2];
        asm volatile("bar.sync %0, %1;" ::"r"(1 + group), "r"(WPR * 32) : "memory");
        if (slice == 0 && lane < 16) {
          float s = 0.f;
#pragma unroll
          for (int q = 0; q < WPR; ++q) s += red[round & 1][warp + q][lane];
          out[cur * 16 + lane] = __float2bfloat16(s);
        }
      }
      d[0] = d[1] = d[2] = d[3] = 0.f;
      ++round;
    }
  }
}
#undef TC_LOAD

typedef void (*Gemv)(const bf*, const uint4*, bf*, int, int);
struct Tc { Gemv k; int warps, wpr; };
template <int W, int WPR, int U, int DOT>
constexpr Tc tc() { return {gemv_tc<W, WPR, U, DOT>, W, WPR}; }

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const long long per_layer = 3ll * I * H;  // elements: gate+up (2 I H) then down (I H)
  bf *all, *allp;
  CK(cudaMalloc(&all, per_layer * L * 2));
  CK(cudaMalloc(&allp, per_layer * L * 2));
  fill<<<2048, 256>>>(all, per_layer * L, 17, 0.05f);
  for (int l = 0; l < L; ++l) {
    pack_tiles<<<2048, 256>>>(all + per_layer * l, allp + per_layer * l, 2 * I, H);
    pack_tiles<<<2048, 256>>>(all + per_layer * l + 2ll * I * H, allp + per_layer * l + 2ll * I * H, H, I);
  }
  bf *x, *y;
  CK(cudaMalloc(&x, 2 * I * 2));
  CK(cudaMalloc(&y, 2 * I * 2));
  fill<<<8, 256>>>(x, 2 * I, 5, 0.05f);
  CK(cudaDeviceSynchronize());
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto gu = [&](const bf* base, int l) { return reinterpret_cast<const uint4*>(base + per_layer * l); };
  auto dn = [&](const bf* base, int l) { return reinterpret_cast<const uint4*>(base + per_layer * l + 2ll * I * H); };
  // Tensor-core configurations: gate+up's and down's (warps, warps per tile row).
  struct Cfg { const char* name; Tc g, d; };
  const Cfg cfgs[] = {
      {"tc g+u 24w/4, down 16w/16", tc<24, 4, 8, 1>(), tc<16, 16, 8, 1>()},
      {"tc g+u 32w/8, down 32w/32", tc<32, 8, 8, 1>(), tc<32, 32, 8, 1>()},
      {"tc g+u 32w/8, down 32w/32, loads only", tc<32, 8, 8, 0>(), tc<32, 32, 8, 0>()},
      {"tc g+u 32w/4, down 32w/32", tc<32, 4, 8, 1>(), tc<32, 32, 8, 1>()},
      {"tc g+u 32w/16, down 32w/32", tc<32, 16, 8, 1>(), tc<32, 32, 8, 1>()},
      {"tc g+u 32w/32, down 32w/32", tc<32, 32, 8, 1>(), tc<32, 32, 8, 1>()},
      {"tc g+u 24w/8, down 32w/32", tc<24, 8, 8, 1>(), tc<32, 32, 8, 1>()},
      {"tc g+u 24w/24, down 32w/32", tc<24, 24, 8, 1>(), tc<32, 32, 8, 1>()},
      {"tc g+u 16w/8, down 32w/32", tc<16, 8, 8, 1>(), tc<32, 32, 8, 1>()},
      {"tc g+u 32w/8, down 24w/24", tc<32, 8, 8, 1>(), tc<24, 24, 8, 1>()},
      {"tc g+u 32w/8, down 32w/16", tc<32, 8, 8, 1>(), tc<32, 16, 8, 1>()},
      {"tc g+u 32w/8 U6, down 32w/32 U6", tc<32, 8, 6, 1>(), tc<32, 32, 6, 1>()},
      {"tc g+u 32w/8 U4, down 32w/32 U4", tc<32, 8, 4, 1>(), tc<32, 32, 4, 1>()},
  };
  constexpr int NC = sizeof(cfgs) / sizeof(cfgs[0]);
  auto tc_blocks = [&](const Tc& c, int n) { const int groups = c.warps / c.wpr; return std::min(sms, (n / 16 + groups - 1) / groups); };
  auto capture_rlx = [&](Gemv k) {
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int l = 0; l < L; ++l) {
      launch(k, std::min(sms, (2 * I + 23) / 24), 768, s, (const bf*)x, gu(all, l), y, 2 * I, H / 8);
      launch(k, std::min(sms, (H + 23) / 24), 768, s, (const bf*)y, dn(all, l), x, H, I / 8);
    }
    return end_capture(s);
  };
  auto capture_tc = [&](const Cfg& c) {
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int l = 0; l < L; ++l) {
      launch(c.g.k, tc_blocks(c.g, 2 * I), c.g.warps * 32, s, (const bf*)x, gu(allp, l), y, 2 * I, H / 16);
      launch(c.d.k, tc_blocks(c.d, H), c.d.warps * 32, s, (const bf*)y, dn(allp, l), x, H, I / 16);
    }
    return end_capture(s);
  };
  std::vector<cudaGraphExec_t> ex;
  std::vector<const char*> names;
  ex.push_back(capture_rlx(gemv<24, 8, 1>)), names.push_back("rlx GEMV 24 warps x 8 words");
  ex.push_back(capture_rlx(gemv<24, 8, 0>)), names.push_back("rlx GEMV shape, loads only");
  for (const Cfg& c : cfgs) ex.push_back(capture_tc(c)), names.push_back(c.name);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  std::vector<std::vector<float>> t(ex.size());
  for (int r = 0; r < 25; ++r)
    for (size_t m = 0; m < ex.size(); ++m) {
      const float ms = time_on(s, e0, e1, [&] { CK(cudaGraphLaunch(ex[m], s)); });
      if (r >= 5) t[m].push_back(ms);
    }
  const double bytes = L * 3.0 * I * H * 2;
  for (size_t m = 0; m < ex.size(); ++m) {
    std::sort(t[m].begin(), t[m].end());
    const double med = t[m][t[m].size() / 2];
    printf("%-44s %8.2f us / layer  %6.0f GB/s read  (best %.2f us)\n", names[m], med * 1000 / L, bytes / (med * 1e6),
           t[m][0] * 1000 / L);
  }
  // Each configuration against rlx's GEMV on one gate+up and one down product (fresh x).
  bf *ya, *yb, *xd;
  CK(cudaMalloc(&ya, 2 * I * 2)); CK(cudaMalloc(&yb, 2 * I * 2)); CK(cudaMalloc(&xd, I * 2));
  fill<<<8, 256>>>(xd, I, 9, 0.05f);
  for (int m = 0; m < NC; ++m)
    for (int which = 0; which < 2; ++which) {
      const Tc& c = which ? cfgs[m].d : cfgs[m].g;
      const int nn = which ? H : 2 * I, kk = which ? I : H;
      launch(gemv<24, 8, 1>, std::min(sms, (nn + 23) / 24), 768, s, (const bf*)xd, which ? dn(all, 3) : gu(all, 3), ya, nn, kk / 8);
      launch(c.k, tc_blocks(c, nn), c.warps * 32, s, (const bf*)xd, which ? dn(allp, 3) : gu(allp, 3), yb, nn, kk / 16);
      double mx = 0;
      const double md = max_abs_diff(s, ya, yb, nn, &mx);
      printf("check %-44s %s: max |rlx - tc| %.4g (max |y| %.4g)\n", cfgs[m].name, which ? "down" : "gate+up", md, mx);
    }
  return 0;
}
