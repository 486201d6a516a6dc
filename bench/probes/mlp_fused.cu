// Probe: is a decode MLP faster as one kernel, and does another GEMV shape stream faster?
// Baseline: two GEMVs over packed (transposed) bf16 weights as rlx's decode runs them (gate+up,
// then down with the SwiGLU in its prologue and the residual in its epilogue; 24 warps of 8
// 16-byte words per lane in flight, 64 registers; the first weight words loaded before the
// programmatic-launch wait; 6 MB of the next weight prefetched into L2). Fused: one kernel in
// which each block computes the gate and up rows of its own slice of the intermediate, applies
// the SwiGLU in shared memory, multiplies the slice by the matching rows of the down weight
// (stored [I][H]) and adds its partial output into an f32 accumulator with vector reductions
// (`red.global.add.v4.f32`); the last block to finish adds the residual, stores the bf16 output
// and clears the accumulator. The other rows: the baseline with another block shape or with
// the 256-byte L2 fetch-size hint on the weight loads. 16 layers of distinct weights (1.1 GB,
// past the L2), captured in a CUDA graph; per-layer time from the replay.
// Standalone; build and run with
//   nvcc -arch=sm_90 -O2 -o mlp_fused bench/probes/mlp_fused.cu && ./mlp_fused
// Results: docs/benchmarks.md (2026-11-23, session 17): the fused kernel 26.4 us per layer
// against 25.7-26.0 for the two GEMVs; no other shape beat 24 warps x 8 words.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>
#include "probe_util.cuh"

constexpr int WARPS = 24, NT = WARPS * 32, U = 8;

// The baseline GEMV (probe_util.cuh's gemv_rows, with its arithmetic): out[n] = Wt[n, :] . a
// (+ res[n]); a = x, or SwiGLU(x[0:I], x[I:2I]). W_ warps of U_ words per lane in flight; HINT:
// loads with the 256-byte L2 fetch size.
template <int W_, int U_, int HINT, int MAXR>
__global__ void __maxnreg__(MAXR) gemv(const bf* x, const uint4* w, bf* out, int n, int kw, int swiglu,
                                       const bf* res, const char* pf, long long pfb) {
  gemv_rows<W_, U_, HINT, 1>(x, w, out, n, kw, swiglu, res, pf, pfb);
}

// The fused MLP. wgu: [2I][H] (gate rows, then up rows); wf: [I][H] (row i = column i of down).
// Block b owns intermediate indices [b * per, b * per + cnt).
__global__ void __maxnreg__(64) mlp(const bf* x, const uint4* wgu, const uint4* wf, const bf* res, bf* out,
                                              float* acc32, unsigned* counter, const char* pf, long long pfb, int own_pf) {
  constexpr int KW = H / 8;  // 16-byte words per row (256 = U * 32: one batch per row)
  constexpr int G = NT / KW; // row groups in the down phase (3)
  __shared__ uint4 xs4[KW];
  __shared__ float sg[128], sa[64];
  __shared__ float red[G][H];
  __shared__ int last;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int per = (I + gridDim.x - 1) / gridDim.x, i0 = blockIdx.x * per, cnt = max(0, min(I - i0, per));
  const unsigned long long pol = pol_ef();
  auto grow = [&](int t) { return t < cnt ? i0 + t : I + i0 + t - cnt; };
  int t = warp;
  uint4 wr[U];
#pragma unroll
  for (int j = 0; j < U; ++j) if (t < 2 * cnt) wr[j] = ld_ef(wgu + (long long)grow(t) * KW + j * 32 + lane, pol);
  if (own_pf && warp == WARPS - 2) {
    const long long bytes = (long long)cnt * H * 2;
    const char* base = reinterpret_cast<const char*>(wf + (long long)i0 * KW);
    for (long long o = 32768ll * lane; o < bytes; o += 32768ll * 32) pf_l2(base + o, (unsigned)min(32768ll, bytes - o));
  }
  prefetch_share(pf, pfb);
  pdl_begin();
  if (threadIdx.x < KW) xs4[threadIdx.x] = __ldcg(reinterpret_cast<const uint4*>(x) + threadIdx.x);
  __syncthreads();
  while (t < 2 * cnt) {
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < U; ++j) acc += dot8(wr[j], xs4[j * 32 + lane]);
    const int cur = t;
    t += WARPS;
    if (t < 2 * cnt) {
#pragma unroll
      for (int j = 0; j < U; ++j) wr[j] = ld_ef(wgu + (long long)grow(t) * KW + j * 32 + lane, pol);
    }
    acc = wsum(acc);
    if (lane == 0) sg[cur] = acc;
  }
  // The down rows' first words go out before the block's gate / up sums are all in.
  const int j4 = threadIdx.x % KW, grp = threadIdx.x / KW;
  uint4 wd[U];
  int k0 = grp;
#pragma unroll
  for (int m = 0; m < U; ++m) { const int k = k0 + m * G; if (k < cnt) wd[m] = ld_ef(wf + (long long)(i0 + k) * KW + j4, pol); }
  __syncthreads();
  if (threadIdx.x < cnt) sa[threadIdx.x] = silu_mul(sg[threadIdx.x], sg[cnt + threadIdx.x]);
  __syncthreads();
  float o[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) o[e] = 0.f;
  while (k0 < cnt) {
#pragma unroll
    for (int m = 0; m < U; ++m) {
      const int k = k0 + m * G;
      if (k < cnt) {
        const bf* wb = reinterpret_cast<const bf*>(&wd[m]);
        const float a = sa[k];
#pragma unroll
        for (int e = 0; e < 8; ++e) o[e] = fmaf(__bfloat162float(wb[e]), a, o[e]);
      }
    }
    k0 += U * G;
#pragma unroll
    for (int m = 0; m < U; ++m) { const int k = k0 + m * G; if (k < cnt) wd[m] = ld_ef(wf + (long long)(i0 + k) * KW + j4, pol); }
  }
#pragma unroll
  for (int e = 0; e < 8; ++e) red[grp][j4 * 8 + e] = o[e];
  __syncthreads();
  if (threadIdx.x < H / 4) {
    const int j = threadIdx.x * 4;
    float s[4];
    for (int e = 0; e < 4; ++e) { s[e] = 0.f; for (int g = 0; g < G; ++g) s[e] += red[g][j + e]; }
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(acc32 + j), "f"(s[0]), "f"(s[1]), "f"(s[2]), "f"(s[3]) : "memory");
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int j = threadIdx.x; j < H; j += NT) {
    out[j] = __float2bfloat16(__ldcg(acc32 + j) + __bfloat162float(res[j]));
    acc32[j] = 0.f;
  }
  if (threadIdx.x == 0) *counter = 0;
}

// wf[i][j] = wd[j][i]
__global__ void transpose(const bf* wd, bf* wf) {
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < (long long)H * I; e += (long long)gridDim.x * blockDim.x) {
    const long long j = e / I, i = e % I;
    wf[i * H + j] = wd[e];
  }
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::vector<bf*> wgu(L + 1), wd(L), wf(L), xa(L + 1), xb(L + 1);
  std::vector<float*> acc(L);
  unsigned* ctr;
  for (int l = 0; l <= L; ++l) {
    CK(cudaMalloc(&wgu[l], 2ll * I * H * 2));
    fill<<<1024, 256>>>(wgu[l], 2ll * I * H, 17 + l, 2.f / 45.f);
    CK(cudaMalloc(&xa[l], H * 2)); CK(cudaMalloc(&xb[l], H * 2));
    if (l == L) break;
    CK(cudaMalloc(&wd[l], 1ll * I * H * 2)); CK(cudaMalloc(&wf[l], 1ll * I * H * 2));
    fill<<<1024, 256>>>(wd[l], 1ll * I * H, 91 + l, 2.f / 75.f);
    transpose<<<1024, 256>>>(wd[l], wf[l]);
    CK(cudaMalloc(&acc[l], H * 4));
    CK(cudaMemset(acc[l], 0, H * 4));
  }
  CK(cudaMalloc(&ctr, L * sizeof(unsigned)));
  CK(cudaMemset(ctr, 0, L * sizeof(unsigned)));
  fill<<<8, 256>>>(xa[0], H, 5, 2.f);
  CK(cudaMemcpy(xb[0], xa[0], H * 2, cudaMemcpyDeviceToDevice));
  bf* gu;
  CK(cudaMalloc(&gu, 2ll * I * 2));
  CK(cudaDeviceSynchronize());
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const long long six = 6ll << 20;
  const int per = (I + sms - 1) / sms, fblocks = (I + per - 1) / per;
  typedef void (*GemvFn)(const bf*, const uint4*, bf*, int, int, int, const bf*, const char*, long long);
  struct Cfg { const char* name; GemvFn fn; int warps; };
  const Cfg cfgs[] = {
      {"two GEMVs, 24 warps x 8 words (rlx)", gemv<24, 8, 0, 64>, 24},
      {"fused (one kernel, split-K down)", nullptr, 24},
      {"two GEMVs, L2::256B fetch hint", gemv<24, 8, 1, 64>, 24},
      {"two GEMVs, 32 warps x 8 words", gemv<32, 8, 0, 64>, 32},
      {"two GEMVs, 16 warps x 16 words", gemv<16, 16, 0, 128>, 16},
      {"two GEMVs, 24 warps x 12 words", gemv<24, 12, 0, 80>, 24},
      {"two GEMVs, 32 warps x 8, 256B hint", gemv<32, 8, 1, 64>, 32},
  };
  constexpr int NC = sizeof(cfgs) / sizeof(cfgs[0]);
  auto capture = [&](const Cfg& c) {
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    const int gb = std::min(sms, (2 * I + c.warps - 1) / c.warps), db = std::min(sms, (H + c.warps - 1) / c.warps);
    for (int l = 0; l < L; ++l) {
      if (c.fn) {
        launch(c.fn, gb, c.warps * 32, s, (const bf*)xa[l], (const uint4*)wgu[l], gu, 2 * I, H / 8, 0, (const bf*)nullptr,
               (const char*)wd[l], six);
        launch(c.fn, db, c.warps * 32, s, (const bf*)gu, (const uint4*)wd[l], xa[l + 1], H, I / 8, 1, (const bf*)xa[l],
               (const char*)wgu[l + 1], six);
      } else {
        launch(mlp, fblocks, NT, s, (const bf*)xb[l], (const uint4*)wgu[l], (const uint4*)wf[l], (const bf*)xb[l], xb[l + 1],
               acc[l], ctr + l, (const char*)wgu[l + 1], six, 0);
      }
    }
    return end_capture(s);
  };
  cudaGraphExec_t ex[NC];
  for (int m = 0; m < NC; ++m) ex[m] = capture(cfgs[m]);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  std::vector<float> t[NC];
  for (int r = 0; r < 25; ++r)
    for (int m = 0; m < NC; ++m) {
      const float ms = time_on(s, e0, e1, [&] { CK(cudaGraphLaunch(ex[m], s)); });
      if (r >= 5) t[m].push_back(ms);
    }
  for (int m = 0; m < NC; ++m) {
    std::sort(t[m].begin(), t[m].end());
    const double med = t[m][t[m].size() / 2];
    const double bytes = L * 3.0 * I * H * 2;
    printf("%-40s %8.1f us / layer  %6.0f GB/s  (min %.1f)\n", cfgs[m].name, med * 1000 / L, bytes / (med * 1e6),
           t[m][0] * 1000 / L);
  }
  for (int l : {1, L}) {
    double mx = 0;
    const double md = max_abs_diff(s, xa[l], xb[l], H, &mx);
    printf("layer %2d output: max |baseline - fused| %.4g (max |x| %.4g)\n", l, md, mx);
  }
  return 0;
}
