// Direct integer-loop references of MatMulInteger and ConvInteger (integer_reference.h).
#include "support/integer_reference.h"

#include <algorithm>
#include <random>

#include "support/test_util.h"

namespace rlx::testing {

std::vector<int64_t> int_values(const Tensor& t) {
  std::vector<int64_t> out;
  for (double v : to_doubles(t)) out.push_back(static_cast<int64_t>(v));
  return out;
}

Tensor random_ints(DType t, std::vector<int64_t> shape, uint64_t seed, int lo, int hi) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<double> v(static_cast<size_t>(product(shape)));
  for (double& x : v) x = d(rng);
  return from_doubles(t, std::move(shape), v);
}

Tensor random_int8(DType t, std::vector<int64_t> shape, uint64_t seed) {
  return t == DType::U8 ? random_ints(t, std::move(shape), seed, 0, 255)
                        : random_ints(t, std::move(shape), seed, -128, 127);
}

int32_t wrap32(int64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v))); }

std::vector<int32_t> ref_matmul_integer(const std::vector<int64_t>& ad0, const std::vector<int64_t>& a,
                                        const std::vector<int64_t>& bd0, const std::vector<int64_t>& b,
                                        const std::vector<int64_t>& za, const std::vector<int64_t>& zb,
                                        std::vector<int64_t>& out) {
  std::vector<int64_t> ad = ad0, bd = bd0;
  const bool a1 = ad.size() == 1, b1 = bd.size() == 1;
  if (a1) ad.insert(ad.begin(), 1);
  if (b1) bd.push_back(1);
  const int64_t M = ad[ad.size() - 2], K = ad.back(), N = bd.back();
  std::vector<int64_t> abd(ad.begin(), ad.end() - 2), bbd(bd.begin(), bd.end() - 2);
  const size_t r = std::max(abd.size(), bbd.size());
  abd.insert(abd.begin(), r - abd.size(), 1);
  bbd.insert(bbd.begin(), r - bbd.size(), 1);
  std::vector<int64_t> ob(r);
  for (size_t i = 0; i < r; ++i) ob[i] = std::max(abd[i], bbd[i]);
  out = ob;
  if (!a1) out.push_back(M);
  if (!b1) out.push_back(N);
  const int64_t nb = product(ob);
  std::vector<int32_t> y(static_cast<size_t>(nb * M * N));
  for (int64_t bi = 0; bi < nb; ++bi) {
    const auto idx = unravel(bi, ob);
    int64_t ia = 0, ib = 0;
    for (size_t d = 0; d < r; ++d) {
      ia = ia * abd[d] + (abd[d] == 1 ? 0 : idx[d]);
      ib = ib * bbd[d] + (bbd[d] == 1 ? 0 : idx[d]);
    }
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        const int64_t zav = za.size() == 1 ? za[0] : za[static_cast<size_t>(ia * M + i)];
        const int64_t zbv = zb.size() == 1 ? zb[0] : zb[static_cast<size_t>(ib * N + j)];
        int64_t s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += (a[static_cast<size_t>((ia * M + i) * K + k)] - zav) * (b[static_cast<size_t>((ib * K + k) * N + j)] - zbv);
        y[static_cast<size_t>((bi * M + i) * N + j)] = wrap32(s);
      }
  }
  return y;
}

std::vector<int32_t> ref_conv_integer(const std::vector<int64_t>& xd, const std::vector<int64_t>& x,
                                      const std::vector<int64_t>& wd, const std::vector<int64_t>& w, int64_t zx,
                                      const std::vector<int64_t>& zw, const ConvGeometry& geo,
                                      std::vector<int64_t>& yd) {
  const size_t nd = xd.size() - 2;
  const int64_t cout = wd[0], cg = wd[1], coutg = cout / geo.groups;
  std::vector<int64_t> s(nd), pb(nd), d(nd);
  yd = {xd[0], cout};
  for (size_t i = 0; i < nd; ++i) {
    s[i] = geo.stride.empty() ? 1 : geo.stride[i];
    d[i] = geo.dilation.empty() ? 1 : geo.dilation[i];
    pb[i] = geo.pads.empty() ? 0 : geo.pads[i];
    const int64_t pe = geo.pads.empty() ? 0 : geo.pads[nd + i];
    yd.push_back((xd[2 + i] + pb[i] + pe - d[i] * (wd[2 + i] - 1) - 1) / s[i] + 1);
  }
  const std::vector<int64_t> kd(wd.begin() + 2, wd.end());
  const auto xstr = contiguous_strides(xd), wstr = contiguous_strides(wd);
  std::vector<int32_t> y(static_cast<size_t>(product(yd)));
  for (int64_t oi = 0; oi < product(yd); ++oi) {
    const auto o = unravel(oi, yd);
    const int64_t n = o[0], co = o[1], g = co / coutg;
    const int64_t zwv = zw.size() == 1 ? zw[0] : zw[static_cast<size_t>(co)];
    int64_t acc = 0;
    for (int64_t ci = 0; ci < cg; ++ci)
      for (int64_t ki = 0; ki < product(kd); ++ki) {
        const auto tap = unravel(ki, kd);
        int64_t xo = n * xstr[0] + (g * cg + ci) * xstr[1], wo = co * wstr[0] + ci * wstr[1];
        bool inside = true;
        for (size_t a = 0; a < nd; ++a) {
          const int64_t p = o[2 + a] * s[a] - pb[a] + tap[a] * d[a];
          inside = inside && p >= 0 && p < xd[2 + a];
          xo += p * xstr[2 + a];
          wo += tap[a] * wstr[2 + a];
        }
        // A padded position reads x_zero: 0 after the subtraction.
        if (inside) acc += (x[static_cast<size_t>(xo)] - zx) * (w[static_cast<size_t>(wo)] - zwv);
      }
    y[static_cast<size_t>(oi)] = wrap32(acc);
  }
  return y;
}

}  // namespace rlx::testing
