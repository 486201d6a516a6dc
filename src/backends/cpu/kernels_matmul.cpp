// CPU kernels for the contraction family: MatMul, DotGeneral, FusedMatMulBiasAct,
// LoraMatMul, GroupedMatMul.
//
// Every product goes through one batched core: f32/f64 call BLAS directly on the (contiguous)
// inputs, f16/bf16 are widened to f32 blocks, multiplied with sgemm and rounded on store, and
// integers use a plain loop accumulating in 64 bits (wrapping, like numpy).
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/blas.h"
#include "backends/cpu/elementwise_core.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/util.h"

namespace rlx::cpu {
namespace {

constexpr int64_t kGrain = 16384;
// Products below this many multiply-adds run single-threaded inside OpenBLAS, so batches of
// them are spread over our own pool instead.
constexpr int64_t kSmallGemm = 262144;

template <class T>
constexpr bool kIsHalf = std::is_same_v<T, f16> || std::is_same_v<T, bf16>;

// The accumulation type: f32 for f32/f16/bf16, f64 for f64, int64 for integers.
template <class T>
using acc_t = std::conditional_t<std::is_integral_v<T>, int64_t, compute_t<T>>;

// A batched product C[i] = op(A)[i] @ op(B)[i] over `batch` items; C is dense [batch, m, n].
struct MatPlan {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;  // A stored [k, m] / B stored [n, k]
  std::vector<int64_t> a_off, b_off;      // element offset of each item's A / B
  std::vector<int64_t> out_dims;          // result dims (numpy matmul only)
};

// numpy matmul of contiguous tensors with dims `ad` @ `bd`.
MatPlan plan_matmul(const std::vector<int64_t>& ad, const std::vector<int64_t>& bd, const char* what) {
  if (ad.empty() || bd.empty())
    throw Error(std::string(what) + ": operands must have rank >= 1, got " + dims_str(ad) + " and " + dims_str(bd));
  MatPlan p;
  const bool a1 = ad.size() == 1, b1 = bd.size() == 1;
  p.m = a1 ? 1 : ad[ad.size() - 2];
  p.k = ad.back();
  const int64_t kb = b1 ? bd[0] : bd[bd.size() - 2];
  p.n = b1 ? 1 : bd.back();
  if (kb != p.k)
    throw Error(std::string(what) + ": contracting dims differ: " + dims_str(ad) + " has K=" + std::to_string(p.k) +
                " but " + dims_str(bd) + " has K=" + std::to_string(kb));
  const std::vector<int64_t> ab(ad.begin(), ad.end() - (a1 ? 1 : 2));
  const std::vector<int64_t> bb(bd.begin(), bd.end() - (b1 ? 1 : 2));
  const std::vector<int64_t> ob = broadcast_dims(ab, bb);
  const auto as = broadcast_strides(ab, ob);
  const auto bs = broadcast_strides(bb, ob);
  p.batch = product(ob);
  p.a_off.resize(static_cast<size_t>(p.batch));
  p.b_off.resize(static_cast<size_t>(p.batch));
  std::vector<int64_t> idx(ob.size(), 0);
  for (int64_t i = 0; i < p.batch; ++i) {
    int64_t oa = 0, obb = 0;
    for (size_t d = 0; d < ob.size(); ++d) {
      oa += idx[d] * as[d];
      obb += idx[d] * bs[d];
    }
    p.a_off[i] = oa * p.m * p.k;
    p.b_off[i] = obb * p.k * p.n;
    for (size_t d = ob.size(); d-- > 0;) {
      if (++idx[d] < ob[d]) break;
      idx[d] = 0;
    }
  }
  p.out_dims = ob;
  if (!a1) p.out_dims.push_back(p.m);
  if (!b1) p.out_dims.push_back(p.n);
  return p;
}

// The batched product the plan resolved for the step (numpy matmul geometry).
MatPlan plan_from_geom(const plan::MatMulGeom& g) {
  MatPlan p;
  p.batch = g.batch, p.m = g.m, p.n = g.n, p.k = g.k;
  p.trans_a = g.trans_a, p.trans_b = g.trans_b;
  p.a_off.resize(static_cast<size_t>(p.batch));
  p.b_off.resize(static_cast<size_t>(p.batch));
  std::vector<int64_t> idx(g.batch_dims.size(), 0);
  int64_t oa = 0, ob = 0;
  for (int64_t i = 0; i < p.batch; ++i) {
    p.a_off[static_cast<size_t>(i)] = oa;
    p.b_off[static_cast<size_t>(i)] = ob;
    for (size_t d = g.batch_dims.size(); d-- > 0;) {
      oa += g.a_batch_strides[d];
      ob += g.b_batch_strides[d];
      if (++idx[d] < g.batch_dims[d]) break;
      oa -= g.a_batch_strides[d] * g.batch_dims[d];
      ob -= g.b_batch_strides[d] * g.batch_dims[d];
      idx[d] = 0;
    }
  }
  return p;
}

// Float core: C = A @ B through BLAS, batches spread over the pool when each is small.
template <class C>
void gemm_batched(const MatPlan& p, const C* a, const C* b, C* c) {
  const int64_t mn = p.m * p.n;
  if (mn == 0 || p.batch == 0) return;
  const int64_t lda = p.trans_a ? p.m : p.k;
  const int64_t ldb = p.trans_b ? p.k : p.n;
  auto one = [&](int64_t i) {
    gemm(p.trans_a, p.trans_b, p.m, p.n, p.k, C(1), a + p.a_off[i], lda, b + p.b_off[i], ldb, C(0), c + i * mn, p.n);
  };
  const int64_t work = mn * std::max<int64_t>(p.k, 1);
  if (p.batch > 1 && work < kSmallGemm) {
    parallel_for(p.batch, std::max<int64_t>(1, (int64_t{1} << 20) / work), [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) one(i);
    });
  } else {
    for (int64_t i = 0; i < p.batch; ++i) one(i);
  }
}

// Integer core: 64-bit wrapping accumulation, stored as O.
template <class T, class O>
void int_matmul(const MatPlan& p, const T* a, const T* b, O* c) {
  const int64_t rows = p.batch * p.m;
  if (rows == 0 || p.n == 0) return;
  const int64_t m = p.m, n = p.n, k = p.k;
  parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, n * std::max<int64_t>(k, 1))),
               [&](int64_t s, int64_t e) {
                 std::vector<uint64_t> acc(static_cast<size_t>(n));
                 for (int64_t r = s; r < e; ++r) {
                   const int64_t bi = r / m, i = r % m;
                   const T* A = a + p.a_off[bi];
                   const T* B = b + p.b_off[bi];
                   std::fill(acc.begin(), acc.end(), 0);
                   for (int64_t kk = 0; kk < k; ++kk) {
                     const auto av = static_cast<uint64_t>(static_cast<int64_t>(p.trans_a ? A[kk * m + i] : A[i * k + kk]));
                     if (p.trans_b) {
                       for (int64_t j = 0; j < n; ++j) acc[j] += av * static_cast<uint64_t>(static_cast<int64_t>(B[j * k + kk]));
                     } else {
                       const T* brow = B + kk * n;
                       for (int64_t j = 0; j < n; ++j) acc[j] += av * static_cast<uint64_t>(static_cast<int64_t>(brow[j]));
                     }
                   }
                   O* out = c + r * n;
                   for (int64_t j = 0; j < n; ++j) out[j] = static_cast<O>(static_cast<int64_t>(acc[j]));
                 }
               });
}

// Elements of `src` widened to the compute type (only used for f16/bf16).
template <class T>
std::vector<compute_t<T>> widen(const T* src, int64_t n) {
  std::vector<compute_t<T>> out(static_cast<size_t>(n));
  parallel_for(n, kGrain, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) out[i] = load(src[i]);
  });
  return out;
}

// A read-only operand in the core's element type: the tensor itself or a widened copy.
template <class T>
struct Operand {
  using C = std::conditional_t<kIsHalf<T>, float, T>;
  std::vector<C> buf;
  const C* ptr = nullptr;
  explicit Operand(const Tensor& t) {
    if constexpr (kIsHalf<T>) {
      buf = widen(t.data<T>(), t.numel());
      ptr = buf.data();
    } else {
      ptr = t.data<T>();
    }
  }
};

// The product in accumulation type (multiply): writes batch*m*n values of acc_t<T> to `c`.
template <class T>
void multiply(const MatPlan& p, const typename Operand<T>::C* a, const typename Operand<T>::C* b, acc_t<T>* c) {
  if constexpr (std::is_integral_v<T>) int_matmul<T, int64_t>(p, a, b, c);
  else gemm_batched<acc_t<T>>(p, a, b, c);
}

// The product stored into `out` (T): directly where possible, else through an acc buffer.
template <class T>
void product_into(const MatPlan& p, const typename Operand<T>::C* a, const typename Operand<T>::C* b, T* out) {
  if constexpr (std::is_integral_v<T>) {
    int_matmul<T, T>(p, a, b, out);
  } else if constexpr (std::is_same_v<acc_t<T>, T>) {
    gemm_batched<T>(p, a, b, out);
  } else {
    const int64_t total = p.batch * p.m * p.n;
    std::vector<acc_t<T>> tmp(static_cast<size_t>(total));
    gemm_batched<acc_t<T>>(p, a, b, tmp.data());
    parallel_for(total, kGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) out[i] = store<T>(tmp[i]);
    });
  }
}

void check_out(const Tensor& out, int64_t expected, const char* what) {
  if (out.numel() != expected)
    throw Error(std::string(what) + ": output buffer has " + std::to_string(out.numel()) + " elements, expected " +
                std::to_string(expected));
}

template <class F>
void visit_numeric(DType t, const char* what, F&& f) {
  if (t == DType::Bool) throw Error(std::string(what) + ": bool operands are not supported");
  visit_dtype(t, [&]<DType D>() {
    if constexpr (D != DType::Bool) f.template operator()<typename dtype_storage<D>::type>();
  });
}

}  // namespace

// ---- MatMul ------------------------------------------------------------------------------
void kernel(const ops::MatMul&, KernelContext& ctx) {
  const Tensor& a = ctx.in[0];
  const Tensor& b = ctx.in[1];
  Tensor& out = ctx.out[0];
  const MatPlan p = plan_from_geom(std::get<plan::MatMulGeom>(ctx.step.geom));
  check_out(out, p.batch * p.m * p.n, "matmul");
  visit_numeric(a.dtype(), "matmul", [&]<class T>() {
    Operand<T> A(a), B(b);
    product_into<T>(p, A.ptr, B.ptr, out.data<T>());
  });
}

// ---- DotGeneral --------------------------------------------------------------------------
namespace {

// Copies `src` (dims) permuted by `perm` into a dense buffer of C, converting elements.
template <class C, class T>
std::vector<C> permute_copy(const T* src, const std::vector<int64_t>& dims, const std::vector<int64_t>& perm) {
  const size_t r = perm.size();
  const auto st = contiguous_strides(dims);
  std::vector<int64_t> od(r), os(r);
  for (size_t i = 0; i < r; ++i) {
    od[i] = dims[perm[i]];
    os[i] = st[perm[i]];
  }
  const int64_t total = product(od);
  std::vector<C> out(static_cast<size_t>(total));
  if (total == 0) return out;
  const int64_t inner = r ? od[r - 1] : 1;
  const int64_t istride = r ? os[r - 1] : 0;
  const int64_t rows = total / inner;
  parallel_for(rows, std::max<int64_t>(1, kGrain / inner), [&](int64_t s, int64_t e) {
    std::vector<int64_t> idx(r ? r - 1 : 0);
    int64_t rem = s, off = 0;
    for (size_t d = idx.size(); d-- > 0;) {
      idx[d] = rem % od[d];
      rem /= od[d];
      off += idx[d] * os[d];
    }
    for (int64_t row = s; row < e; ++row) {
      C* dst = out.data() + row * inner;
      for (int64_t j = 0; j < inner; ++j) dst[j] = static_cast<C>(load(src[off + j * istride]));
      for (size_t d = idx.size(); d-- > 0;) {
        off += os[d];
        if (++idx[d] < od[d]) break;
        off -= idx[d] * os[d];
        idx[d] = 0;
      }
    }
  });
  return out;
}

bool is_identity(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return true;
}

std::vector<int64_t> concat3(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                             const std::vector<int64_t>& c) {
  std::vector<int64_t> out = a;
  out.insert(out.end(), b.begin(), b.end());
  out.insert(out.end(), c.begin(), c.end());
  return out;
}

// One side of a dot_general, laid out as [B, rows, K] (or [B, K, rows] with trans).
template <class T>
struct DotSide {
  using C = typename Operand<T>::C;
  std::vector<C> buf;
  const C* ptr = nullptr;
  bool trans = false;

  // lhs (k_last=true): canonical [B, free, K]; rhs (k_last=false): canonical [B, K, free].
  DotSide(const Tensor& t, const std::vector<int64_t>& batch, const std::vector<int64_t>& contract,
          const std::vector<int64_t>& free, bool k_last) {
    const auto canon = k_last ? concat3(batch, free, contract) : concat3(batch, contract, free);
    const auto swapped = k_last ? concat3(batch, contract, free) : concat3(batch, free, contract);
    const bool direct = is_identity(canon), alt = !direct && is_identity(swapped);
    trans = alt;
    if (direct || alt) {
      if constexpr (kIsHalf<T>) {
        buf = widen(t.data<T>(), t.numel());
        ptr = buf.data();
      } else {
        ptr = t.data<T>();
      }
    } else {
      buf = permute_copy<C>(t.data<T>(), t.shape(), canon);
      ptr = buf.data();
    }
  }
};

}  // namespace

void kernel(const ops::DotGeneral& op, KernelContext& ctx) {
  const Tensor& l = ctx.in[0];
  const Tensor& r = ctx.in[1];
  Tensor& out = ctx.out[0];
  auto norm = [](const std::vector<int64_t>& axes, int64_t rank) {
    std::vector<int64_t> o;
    for (int64_t a : axes) o.push_back(normalize_axis(a, rank, "dot_general"));
    return o;
  };
  const auto lb = norm(op.lhs_batch, l.rank()), lc = norm(op.lhs_contract, l.rank());
  const auto rb = norm(op.rhs_batch, r.rank()), rc = norm(op.rhs_contract, r.rank());
  if (lb.size() != rb.size() || lc.size() != rc.size())
    throw Error("dot_general: batch/contracting dim lists of lhs and rhs differ in length");
  auto free_axes = [](int64_t rank, const std::vector<int64_t>& b, const std::vector<int64_t>& c) {
    std::vector<int64_t> f;
    for (int64_t d = 0; d < rank; ++d)
      if (std::find(b.begin(), b.end(), d) == b.end() && std::find(c.begin(), c.end(), d) == c.end()) f.push_back(d);
    return f;
  };
  const auto lf = free_axes(l.rank(), lb, lc), rf = free_axes(r.rank(), rb, rc);
  MatPlan p;
  p.batch = 1;
  p.m = 1;
  p.n = 1;
  p.k = 1;
  for (size_t i = 0; i < lb.size(); ++i) {
    if (l.dim(lb[i]) != r.dim(rb[i]))
      throw Error("dot_general: batch dims differ: lhs " + dims_str(l.shape()) + " axis " + std::to_string(lb[i]) +
                  " vs rhs " + dims_str(r.shape()) + " axis " + std::to_string(rb[i]));
    p.batch *= l.dim(lb[i]);
  }
  for (size_t i = 0; i < lc.size(); ++i) {
    if (l.dim(lc[i]) != r.dim(rc[i]))
      throw Error("dot_general: contracting dims differ: lhs " + dims_str(l.shape()) + " axis " +
                  std::to_string(lc[i]) + " vs rhs " + dims_str(r.shape()) + " axis " + std::to_string(rc[i]));
    p.k *= l.dim(lc[i]);
  }
  if (lb.size() + lc.size() + lf.size() != static_cast<size_t>(l.rank()) ||
      rb.size() + rc.size() + rf.size() != static_cast<size_t>(r.rank()))
    throw Error("dot_general: batch and contracting axes must be distinct");
  for (int64_t d : lf) p.m *= l.dim(d);
  for (int64_t d : rf) p.n *= r.dim(d);
  check_out(out, p.batch * p.m * p.n, "dot_general");
  if (out.numel() == 0) return;
  visit_numeric(l.dtype(), "dot_general", [&]<class T>() {
    DotSide<T> A(l, lb, lc, lf, true), B(r, rb, rc, rf, false);
    p.trans_a = A.trans;
    p.trans_b = B.trans;
    p.a_off.resize(static_cast<size_t>(p.batch));
    p.b_off.resize(static_cast<size_t>(p.batch));
    for (int64_t i = 0; i < p.batch; ++i) {
      p.a_off[i] = i * p.m * p.k;
      p.b_off[i] = i * p.k * p.n;
    }
    product_into<T>(p, A.ptr, B.ptr, out.data<T>());
  });
}

// ---- FusedMatMulBiasAct ------------------------------------------------------------------
// Integers, f32 and f64 compute exactly what the unfused MatMul -> Add(bias) -> Activation ->
// Add(residual) chain computes: the product is stored like the MatMul kernel's (integers wrap),
// then each step runs the standalone Binary / Activation routine and wraps / rounds to the
// output dtype again, so an integer Relu sees the wrapped sum and NaN / -0.0 go through Relu
// as the standalone Relu treats them. f16/bf16: the same steps on the f32 accumulator with one
// rounding at the end, like the CUDA epilogues (the documented policy: a product that
// overflows f16 can end finite when the bias brings it back in range, and results may differ
// from the unfused graph by one rounding).
void kernel(const ops::FusedMatMulBiasAct& op, KernelContext& ctx) {
  const Tensor& x = ctx.in[0];
  const Tensor& w = ctx.in[1];
  const Tensor* bias = op.has_bias(ctx.in.size()) ? &ctx.in[2] : nullptr;
  const Tensor* res = op.residual ? &ctx.in.back() : nullptr;
  Tensor& out = ctx.out[0];
  const auto& geom = std::get<plan::MatMulGeom>(ctx.step.geom);
  const MatPlan p = plan_from_geom(geom);
  const int64_t total = p.batch * p.m * p.n;
  check_out(out, total, "fused_matmul_bias_act");
  const int64_t nb = bias ? geom.bias_len : 0;
  const int64_t last = out.rank() == 0 ? 1 : out.shape().back();
  if (res && res->numel() != total)
    throw Error("fused_matmul_bias_act: residual has " + std::to_string(res->numel()) + " elements, expected " +
                std::to_string(total));
  if (bias && bias->numel() != nb)
    throw Error("fused_matmul_bias_act: bias has " + std::to_string(bias->numel()) + " elements but the plan expects " +
                std::to_string(nb));
  if (bias && nb != 1 && nb != last)
    throw Error("fused_matmul_bias_act: bias has " + std::to_string(nb) + " elements, expected " +
                std::to_string(last) + " or 1");
  const DType dt = x.dtype();
  if (bias && bias->dtype() != dt)
    throw Error(std::string("fused_matmul_bias_act: bias dtype ") + dtype_name(bias->dtype()) +
                " differs from the operands' " + dtype_name(dt));
  if (res && res->dtype() != dt)
    throw Error(std::string("fused_matmul_bias_act: residual dtype ") + dtype_name(res->dtype()) +
                " differs from the operands' " + dtype_name(dt));
  if (total == 0) return;
  visit_numeric(dt, "fused_matmul_bias_act", [&]<class T>() {
    // E: the type the epilogue steps store into. T itself, except f16/bf16, whose epilogue runs
    // on the f32 accumulator and rounds once (the CUDA backend's policy, docs/passes.md).
    using E = std::conditional_t<kIsHalf<T>, float, T>;
    constexpr DType de = dtype_of<E>();
    Operand<T> X(x), W(w);
    T* o = out.data<T>();
    // Bias and residual as E; the residual may share the output's buffer (in-place planning),
    // so it is copied before the product overwrites it.
    std::vector<E> res_copy, bias_copy;
    const E* rv = nullptr;
    const E* bv = nullptr;
    if constexpr (kIsHalf<T>) {
      if (res) res_copy = widen(res->data<T>(), total);
      if (bias) bias_copy = widen(bias->data<T>(), nb);
      rv = res ? res_copy.data() : nullptr;
      bv = bias ? bias_copy.data() : nullptr;
    } else {
      rv = res ? res->data<T>() : nullptr;
      bv = bias ? bias->data<T>() : nullptr;
      if (rv && rv < o + total && o < rv + total) {
        res_copy.assign(rv, rv + total);
        rv = res_copy.data();
      }
    }
    std::vector<E> acc_buf;
    E* acc = nullptr;
    if constexpr (kIsHalf<T>) {
      acc_buf.resize(static_cast<size_t>(total));
      acc = acc_buf.data();
      gemm_batched<float>(p, X.ptr, W.ptr, acc);
    } else {
      acc = o;
      product_into<T>(p, X.ptr, W.ptr, o);  // exactly the MatMul kernel's result
    }
    parallel_for(total, kGrain, [&](int64_t s, int64_t e) {
      if (bv) {
        if (nb == 1) {
          binary_span(BinaryKind::Add, de, acc + s, 1, bv, 0, acc + s, e - s);
        } else {
          for (int64_t i = s; i < e;) {  // pieces of one bias row each
            const int64_t j = i % nb, cnt = std::min(e - i, nb - j);
            binary_span(BinaryKind::Add, de, acc + i, 1, bv + j, 1, acc + i, cnt);
            i += cnt;
          }
        }
      }
      if (op.activation) activation_span(*op.activation, de, acc + s, acc + s, e - s);
      if (rv) binary_span(BinaryKind::Add, de, acc + s, 1, rv + s, 1, acc + s, e - s);
      if constexpr (kIsHalf<T>)
        for (int64_t i = s; i < e; ++i) o[i] = store<T>(acc[i]);
    });
  });
}

// ---- LoraMatMul --------------------------------------------------------------------------
void kernel(const ops::LoraMatMul& op, KernelContext& ctx) {
  const Tensor& x = ctx.in[0];
  Tensor& out = ctx.out[0];
  const MatPlan pm = plan_matmul(x.shape(), ctx.in[1].shape(), "lora_matmul (x @ w)");
  const MatPlan pd = plan_matmul(x.shape(), ctx.in[2].shape(), "lora_matmul (x @ a)");
  const MatPlan pu = plan_matmul(pd.out_dims, ctx.in[3].shape(), "lora_matmul ((x @ a) @ b)");
  if (pu.out_dims != pm.out_dims)
    throw Error("lora_matmul: x @ w is " + dims_str(pm.out_dims) + " but (x @ a) @ b is " + dims_str(pu.out_dims));
  const int64_t total = pm.batch * pm.m * pm.n;
  check_out(out, total, "lora_matmul");
  if (!is_float(x.dtype())) throw Error("lora_matmul: operands must be float, got " + std::string(dtype_name(x.dtype())));
  visit_numeric(x.dtype(), "lora_matmul", [&]<class T>() {
    if constexpr (!std::is_integral_v<T>) {
      using A = acc_t<T>;
      Operand<T> X(x), W(ctx.in[1]), Ad(ctx.in[2]), Bu(ctx.in[3]);
      std::vector<A> main(static_cast<size_t>(total));
      std::vector<A> down(static_cast<size_t>(pd.batch * pd.m * pd.n));
      std::vector<A> up(static_cast<size_t>(total));
      gemm_batched<A>(pm, X.ptr, W.ptr, main.data());
      gemm_batched<A>(pd, X.ptr, Ad.ptr, down.data());
      gemm_batched<A>(pu, down.data(), Bu.ptr, up.data());
      const A scale = static_cast<A>(op.scale);
      T* o = out.data<T>();
      parallel_for(total, kGrain, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) o[i] = store<T>(main[i] + scale * up[i]);
      });
    }
  });
}

// ---- GroupedMatMul -----------------------------------------------------------------------
void kernel(const ops::GroupedMatMul&, KernelContext& ctx) {
  const Tensor& x = ctx.in[0];
  const Tensor& w = ctx.in[1];
  const Tensor& idx_t = ctx.in[2];
  Tensor& out = ctx.out[0];
  if (x.rank() != 2 || w.rank() != 3 || idx_t.rank() != 1 || x.dim(1) != w.dim(1) || idx_t.dim(0) != x.dim(0))
    throw Error("grouped_matmul: expected x (M, K), w (E, K, N), idx (M); got " + dims_str(x.shape()) + ", " +
                dims_str(w.shape()) + ", " + dims_str(idx_t.shape()));
  const int64_t M = x.dim(0), K = x.dim(1), E = w.dim(0), N = w.dim(2);
  check_out(out, M * N, "grouped_matmul");
  const std::vector<int64_t> idx = idx_t.to_i64();
  if (!is_int(idx_t.dtype())) throw Error("grouped_matmul: idx must be an integer tensor");
  for (int64_t i = 0; i < M; ++i)
    if (idx[i] < 0 || idx[i] >= E)
      throw Error("grouped_matmul: idx[" + std::to_string(i) + "] = " + std::to_string(idx[i]) +
                  " is out of range for " + std::to_string(E) + " experts (valid: 0.." + std::to_string(E - 1) + ")");
  if (M == 0 || N == 0) return;
  // Rows grouped by expert (counting sort keeps the row order within an expert).
  std::vector<int64_t> start(static_cast<size_t>(E + 1), 0), rows(static_cast<size_t>(M));
  for (int64_t i = 0; i < M; ++i) ++start[idx[i] + 1];
  for (int64_t e = 0; e < E; ++e) start[e + 1] += start[e];
  {
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < M; ++i) rows[fill[idx[i]]++] = i;
  }
  visit_numeric(x.dtype(), "grouped_matmul", [&]<class T>() {
    using A = acc_t<T>;
    using Cm = typename Operand<T>::C;
    Operand<T> W(w);
    const T* xs = x.data<T>();
    T* o = out.data<T>();
    for (int64_t e = 0; e < E; ++e) {
      const int64_t cnt = start[e + 1] - start[e];
      if (cnt == 0) continue;
      const int64_t* rs = rows.data() + start[e];
      // Gather this expert's rows of x into a dense [cnt, K] block.
      std::vector<Cm> xb(static_cast<size_t>(cnt * K));
      for (int64_t r = 0; r < cnt; ++r)
        for (int64_t kk = 0; kk < K; ++kk) xb[r * K + kk] = static_cast<Cm>(load(xs[rs[r] * K + kk]));
      MatPlan p;
      p.batch = 1;
      p.m = cnt;
      p.n = N;
      p.k = K;
      p.a_off = {0};
      p.b_off = {e * K * N};
      std::vector<A> yb(static_cast<size_t>(cnt * N));
      multiply<T>(p, xb.data(), W.ptr, yb.data());
      for (int64_t r = 0; r < cnt; ++r)
        for (int64_t j = 0; j < N; ++j) {
          if constexpr (std::is_integral_v<T>) o[rs[r] * N + j] = static_cast<T>(yb[r * N + j]);
          else o[rs[r] * N + j] = store<T>(yb[r * N + j]);
        }
    }
  });
}

}  // namespace rlx::cpu
