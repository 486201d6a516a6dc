#pragma once
// Data-movement kernels. Strided copy and concat move elements as unsigned words of the
// element's size (typedef <word> E;); gather takes the index type (typedef <int> I;); rope
// computes in f32 (typedef T for x/out, TC for cos/sin).
namespace rlx::cuda::ksrc {

inline constexpr const char* kCopy = R"CUDA(
// out[i] = in[in_offset + sum_d idx_d(i) * strides[d]] over `dims` (row-major, rank <= 8).
struct CopyDims { long long dims[8]; long long strides[8]; int rank; };
// Pad: out[i] = in[sum_d maps[map_off[d] + o_d] * in_strides[d]], or `fill` when any axis maps
// output index o_d to -1 (outside the constant pad). maps: per axis, the input index feeding each
// output index (crops, edge and reflect resolved on the host).
struct PadDims { long long out_dims[8]; long long in_strides[8]; long long map_off[8]; int rank; };
extern "C" __global__ void pad(const E* in, E* out, const long long* maps, PadDims g, E fill, long long total) {
  rlx_pdl_begin();
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    long long rem = i, off = 0;
    bool outside = false;
    for (int d = g.rank - 1; d >= 0; --d) {
      const long long o = rem % g.out_dims[d];
      rem /= g.out_dims[d];
      const long long j = maps[g.map_off[d] + o];
      if (j < 0) outside = true;
      else off += j * g.in_strides[d];
    }
    out[i] = outside ? fill : in[off];
  }
}
extern "C" __global__ void strided_copy(const E* in, E* out, CopyDims g, long long in_offset, long long total) {
  rlx_pdl_begin();
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    long long t = i, off = in_offset;
    for (int d = g.rank - 1; d >= 0; --d) {
      const long long c = t % g.dims[d];
      t /= g.dims[d];
      off += c * g.strides[d];
    }
    out[i] = in[off];
  }
}

// Concat of up to 16 inputs along an axis, the output viewed as [outer, width]; input k covers
// columns [col[k], col[k] + cols[k]) of every row.
struct ConcatArgs { const E* in[16]; long long col[16]; long long cols[16]; int count; };
extern "C" __global__ void concat(ConcatArgs a, E* out, long long outer, long long width) {
  rlx_pdl_begin();
  const long long total = outer * width;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    const long long r = i / width, c = i % width;
    int k = 0;
    while (k + 1 < a.count && c >= a.col[k + 1]) ++k;
    const long long local = c - a.col[k];
    if (local >= 0 && local < a.cols[k]) out[i] = a.in[k][r * a.cols[k] + local];
  }
}

// out[o, j, i] = data[o, idx[j], i] over [outer, nidx, inner]; negative indices count from the
// end; an index out of [-axis, axis) records error 1 and writes zero bits.
extern "C" __global__ void gather(const E* data, const I* idx, E* out, long long outer, long long axis, long long nidx,
                                  long long inner, int* err) {
  rlx_pdl_begin();
  const long long total = outer * nidx * inner;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    const long long in_ = i % inner, t = i / inner, j = t % nidx, o = t / nidx;
    long long k = (long long)idx[j];
    if (k < 0) k += axis;
    if (k < 0 || k >= axis) { report_error(err, 1); out[i] = (E)0; continue; }
    out[i] = data[(o * axis + k) * inner + in_];
  }
}
)CUDA";

inline constexpr const char* kRope = R"CUDA(
// x, out (batch, seq, heads, head_dim) contiguous; cos/sin rows of n_rot/2 per (seq) or (batch, seq).
// A second tensor (x2 -> out2, heads2 heads; heads2 = 0: none) with the same tables and shape
// but its head count is rotated in the same launch (the q and k of an attention).
extern "C" __global__ void rope(const T* x, const TC* cs, const TC* sn, T* out, long long batch, long long seq,
                                long long heads, long long head_dim, long long n_rot, int per_batch, int neox,
                                const T* x2, T* out2, long long heads2) {
  rlx_pdl_begin();
  const long long half = n_rot / 2;
  const long long per_head = half + (head_dim - n_rot);  // rotated pairs, then copied tail
  const long long total1 = batch * seq * heads * per_head, total = total1 + batch * seq * heads2 * per_head;
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total; t += (long long)gridDim.x * blockDim.x) {
    const bool second = t >= total1;
    const long long i = second ? t - total1 : t, nh = second ? heads2 : heads;
    const long long p = i % per_head, bsh = i / per_head;
    const long long s = (bsh / nh) % seq, b = bsh / (nh * seq);
    const T* xh = (second ? x2 : x) + bsh * head_dim;
    T* oh = (second ? out2 : out) + bsh * head_dim;
    if (p >= half) {
      const long long d = n_rot + (p - half);
      oh[d] = xh[d];
      continue;
    }
    long long i1, i2;
    rope_pair(neox != 0, p, half, i1, i2);
    const long long row = (per_batch ? b * seq + s : s) * half + p;
    const float c = to_f(cs[row]), sv = to_f(sn[row]);
    const float x1 = to_f(xh[i1]), x2v = to_f(xh[i2]);
    oh[i1] = from_f<T>(rope_rotate(true, x1, x2v, c, sv));
    oh[i2] = from_f<T>(rope_rotate(false, x1, x2v, c, sv));
  }
}
)CUDA";

}  // namespace rlx::cuda::ksrc
