// Scaled dot-product attention on the CPU (see attention_core.h for the exact score
// pipeline). Work is split into (batch, head, block of query rows) units; each unit does
//   S = scale * Q_blk @ K^T   (gemm, only over the key columns the block can see)
//   softcap / bias / mask, row softmax in place
//   O_blk = P @ V             (gemm, written straight into the strided output)
// (blocks of at most kSmallRows f32 rows: attention_small.h's kernels instead of the two gemms).
#include "backends/cpu/attention_core.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/attention_small.h"
#include "backends/cpu/blas.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/vec_rows.h"

namespace rlx::cpu::attn {
namespace {

constexpr int64_t kRowBlock = 64;

// Keys [lo, hi) that query row i may see before the per-key (custom / bias) masks.
struct KeyRange {
  int64_t lo, hi;
};

template <class C>
KeyRange key_range(const Problem<C>& p, int64_t b, int64_t i) {
  const int64_t pos = p.kv_len - p.q_len + i;
  KeyRange r{0, p.kv_len};
  if (p.mask == MaskKind::Positions) {
    const int64_t at = p.positions[b * p.positions_batch + i];
    r.hi = at < 0 ? 0 : std::min(at, p.kv_len - 1) + 1;
  } else if (p.mask == MaskKind::Causal || p.mask == MaskKind::SlidingWindow) {
    r.hi = std::clamp<int64_t>(pos + 1, 0, p.kv_len);
    if (p.mask == MaskKind::SlidingWindow) r.lo = std::clamp<int64_t>(pos - p.window + 1, 0, p.kv_len);
    if (r.lo > r.hi) r.lo = r.hi;
  }
  return r;
}

// One unit: query rows [i0, i1) of head h, or (heads > 1, one query row: i1 == i0 + 1) row i0 of
// heads h .. h + heads - 1, which share a KV head and every mask (no per-head bias): the group's
// rows then form one product against the keys they share, read once.
template <class C>
void run_unit(const Problem<C>& p, int64_t b, int64_t h, int64_t i0, int64_t i1, int64_t heads, std::vector<C>& scratch) {
  const int64_t rows = heads > 1 ? heads : i1 - i0;
  const int64_t q_ld = heads > 1 ? p.q.head : p.q.seq, o_ld = heads > 1 ? p.out.head : p.out.seq;
  const int64_t kh = h / (p.num_heads / p.num_kv_heads);
  // Columns the whole block can see: rows are ordered by position, so the first row has the
  // lowest window start and the last row the highest end.
  const KeyRange first = key_range(p, b, i0), last = key_range(p, b, i1 - 1);
  int64_t c0 = std::min(first.lo, last.lo);
  int64_t c1 = std::max(first.hi, last.hi);
  if (p.mask == MaskKind::Positions) {  // any order: the keys up to the block's largest position
    c0 = 0;
    for (int64_t i = i0; i < i1; ++i) c1 = std::max(c1, key_range(p, b, i).hi);
  }
  // Leading and trailing keys whose bias is -inf in every row of the block get weight 0 whatever
  // their score: they are not computed (a KV cache masked to its valid prefix costs O(prefix)).
  if (p.bias) {
    const C* bias = p.bias + b * p.bias_strides[0] + h * p.bias_strides[1];
    auto dead = [&](int64_t j) {
      for (int64_t i = i0; i < i1; ++i)
        if (!(bias[i * p.bias_strides[2] + j * p.bias_strides[3]] == -std::numeric_limits<C>::infinity())) return false;
      return true;
    };
    while (c1 > c0 && dead(c1 - 1)) --c1;
    while (c0 < c1 && dead(c0)) ++c0;
  }
  const int64_t ncol = std::max<int64_t>(c1 - c0, 0);
  const int64_t ld = std::max<int64_t>(ncol, 1);
  scratch.resize(static_cast<size_t>(rows * ld));
  C* s = scratch.data();

  const C* q = p.q.data + b * p.q.batch + i0 * p.q.seq + h * p.q.head;
  const C* k = p.k.data + b * p.k.batch + c0 * p.k.seq + kh * p.k.head;
  const C* v = p.v.data + b * p.v.batch + c0 * p.v.seq + kh * p.v.head;
  C* o = p.out.data + b * p.out.batch + i0 * p.out.seq + h * p.out.head;
  const int64_t d = p.head_dim;

  // A few f32 rows (decode): the small-product kernels; else BLAS.
  bool small = false;
  if constexpr (std::is_same_v<C, float>) small = rows <= kSmallRows && small_products_native(d);
  auto pv = [&] {
    if constexpr (std::is_same_v<C, float>) {
      if (small) return small_pv(rows, d, ncol, s, ld, v, p.v.seq, o, o_ld);
    }
    gemm(false, false, rows, d, ncol, C(1), s, ld, v, p.v.seq, C(0), o, o_ld);
  };
  if constexpr (std::is_same_v<C, float>) {
    if (small) small_qk(rows, ncol, d, p.scale, q, q_ld, k, p.k.seq, s, ld);
  }
  if (!small) gemm(false, true, rows, ncol, d, p.scale, q, q_ld, k, p.k.seq, C(0), s, ld);

  const C neg_inf = -std::numeric_limits<C>::infinity();
  const uint8_t* keep = p.keep ? p.keep + b * p.keep_batch : nullptr;
  if constexpr (std::is_same_v<C, float>) {
    // No mask, bias or softcap: every key of [c0, c1) counts as scored, so a row only needs its
    // max (a branch-free loop the compiler vectorizes; NaN never becomes the max, as below) to
    // tell an all -inf row (zeros) from the others (the vector softmax).
    if (p.mask == MaskKind::None && !keep && !p.bias && !(p.softcap > 0)) {
      for (int64_t r = 0; r < rows; ++r) {
        C* row = s + r * ld;
        C mx = neg_inf;
        for (int64_t j = 0; j < ncol; ++j) mx = row[j] > mx ? row[j] : mx;
        if (mx == neg_inf) std::fill(row, row + ncol, C(0));
        else softmax_row_f32(row, row, ncol, false);
      }
      pv();
      return;
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = heads > 1 ? i0 : i0 + r;
    C* row = s + r * ld;
    const KeyRange kr = key_range(p, b, i);
    const C* bias = p.bias ? p.bias + b * p.bias_strides[0] + h * p.bias_strides[1] + i * p.bias_strides[2]
                           : nullptr;
    C mx = neg_inf;
    for (int64_t j = c0; j < c1; ++j) {
      C& x = row[j - c0];
      if (j < kr.lo || j >= kr.hi || (keep && !keep[j])) {
        x = neg_inf;
        continue;
      }
      if (p.softcap > 0) x = p.softcap * std::tanh(x / p.softcap);
      if (bias) x += bias[j * p.bias_strides[3]];
      if (x > mx) mx = x;
    }
    if (mx == neg_inf) {  // every key masked (or -inf): the row outputs zeros
      std::fill(row, row + ncol, C(0));
      continue;
    }
    if constexpr (std::is_same_v<C, float>) {  // vector exp, sum in double (vec_rows.h)
      softmax_row_f32(row, row, ncol, false);
      continue;
    }
    C sum = 0;
    for (int64_t j = 0; j < ncol; ++j) {
      const C e = row[j] == neg_inf ? C(0) : std::exp(row[j] - mx);
      row[j] = e;
      sum += e;
    }
    const C inv = C(1) / sum;
    for (int64_t j = 0; j < ncol; ++j) row[j] *= inv;
  }
  pv();
}

}  // namespace

template <class C>
void run(const Problem<C>& p) {
  if (p.batch == 0 || p.num_heads == 0 || p.q_len == 0 || p.head_dim == 0) return;
  const int64_t group = p.num_heads / p.num_kv_heads;
  if (p.q_len == 1 && group > 1 && (!p.bias || p.bias_strides[1] == 0)) {  // decode: a unit per KV head
    const int64_t unit_cost = std::max<int64_t>(1, group * std::max<int64_t>(p.kv_len, 1) * p.head_dim * 4);
    parallel_for(p.batch * p.num_kv_heads, std::max<int64_t>(1, (int64_t{1} << 16) / unit_cost), [&](int64_t begin, int64_t end) {
      std::vector<C> scratch;
      for (int64_t u = begin; u < end; ++u)
        run_unit(p, u / p.num_kv_heads, (u % p.num_kv_heads) * group, 0, 1, group, scratch);
    });
    return;
  }
  const int64_t blocks = (p.q_len + kRowBlock - 1) / kRowBlock;
  const int64_t units = p.batch * p.num_heads * blocks;
  // Roughly 4 flops per (row, key, dim); aim for ~64K flops per task at least.
  const int64_t unit_cost = std::max<int64_t>(1, std::min(p.q_len, kRowBlock) * std::max<int64_t>(p.kv_len, 1) * p.head_dim * 4);
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / unit_cost);
  parallel_for(units, grain, [&](int64_t begin, int64_t end) {
    std::vector<C> scratch;
    for (int64_t u = begin; u < end; ++u) {
      const int64_t blk = u % blocks;
      const int64_t bh = u / blocks;
      const int64_t i0 = blk * kRowBlock;
      run_unit(p, bh / p.num_heads, bh % p.num_heads, i0, std::min(p.q_len, i0 + kRowBlock), 1, scratch);
    }
  });
}

template void run<float>(const Problem<float>&);
template void run<double>(const Problem<double>&);

std::vector<uint8_t> keep_flags(const Tensor& mask) {
  const int64_t n = mask.numel();
  std::vector<uint8_t> keep(static_cast<size_t>(n));
  visit_dtype(mask.dtype(), [&]<DType D>() {
    using T = typename dtype_storage<D>::type;
    const T* m = static_cast<const T*>(mask.raw());
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>)
        keep[static_cast<size_t>(i)] = !(static_cast<float>(m[i]) == 0.0f);
      else
        keep[static_cast<size_t>(i)] = !(m[i] == T(0));
    }
  });
  return keep;
}

}  // namespace rlx::cpu::attn
