// Conv (1-3 d), ConvTranspose (2-d) and Im2Col against naive double direct-loop references.
#include <cmath>
#include <cstring>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/conv_direct.h"
#include "backends/cpu/conv_gemm.h"
#include "backends/cpu/depthwise_avx2.h"
#include "backends/cpu/depthwise_channels_avx2.h"
#include "backends/cpu/parallel.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using testing::all_close;
using testing::error_message;
using testing::random_tensor;
using testing::ravel;
using testing::run_cpu1;
using testing::run_op;
using testing::to_doubles;
using testing::unravel;

const DType kFloats[] = {DType::F32, DType::F64, DType::F16, DType::BF16};

// Error message of building `op` on operands of the given shapes.
std::string build_error(const Op& op, const std::vector<Shape>& shapes) {
  return error_message([&] {
    Graph g;
    std::vector<Value> vs;
    for (size_t i = 0; i < shapes.size(); ++i) vs.push_back(g.input("x" + std::to_string(i), shapes[i]));
    g.apply(op, vs);
  });
}

testing::Tolerance conv_tol(DType t) {
  if (t == DType::F32) return {1e-5, 2e-5};  // sums of up to ~100 products
  return testing::default_tolerance(t);
}

// ---- Conv ---------------------------------------------------------------------------
struct ConvCase {
  std::vector<int64_t> x, w;
  bool bias = false;
  std::vector<int64_t> stride, pads, dilation;
  int64_t groups = 1;
};

std::vector<double> ref_conv(const ConvCase& c, const std::vector<double>& x, const std::vector<double>& w,
                             const std::vector<double>* b, std::vector<int64_t>& yd) {
  const size_t nd = c.x.size() - 2;
  const int64_t cout = c.w[0], cg = c.w[1], coutg = cout / c.groups;
  std::vector<int64_t> s(nd), pb(nd), d(nd);
  yd = {c.x[0], cout};
  for (size_t i = 0; i < nd; ++i) {
    s[i] = c.stride.empty() ? 1 : c.stride[i];
    d[i] = c.dilation.empty() ? 1 : c.dilation[i];
    pb[i] = c.pads.empty() ? 0 : c.pads[i];
    const int64_t pe = c.pads.empty() ? 0 : c.pads[nd + i];
    yd.push_back((c.x[2 + i] + pb[i] + pe - d[i] * (c.w[2 + i] - 1) - 1) / s[i] + 1);
  }
  const std::vector<int64_t> kd(c.w.begin() + 2, c.w.end());
  std::vector<std::vector<int64_t>> taps;  // every kernel multi-index
  for (int64_t ki = 0; ki < product(kd); ++ki) taps.push_back(unravel(ki, kd));
  const auto xstr = contiguous_strides(c.x), wstr = contiguous_strides(c.w);
  std::vector<double> y(static_cast<size_t>(product(yd)));
  for (int64_t oi = 0; oi < product(yd); ++oi) {
    const auto o = unravel(oi, yd);
    const int64_t n = o[0], co = o[1], g = co / coutg;
    double acc = b ? (*b)[co] : 0.0;
    for (int64_t ci = 0; ci < cg; ++ci)
      for (size_t ki = 0; ki < taps.size(); ++ki) {
        int64_t xo = n * xstr[0] + (g * cg + ci) * xstr[1], wo = co * wstr[0] + ci * wstr[1];
        bool inside = true;
        for (size_t a = 0; a < nd; ++a) {
          const int64_t p = o[2 + a] * s[a] - pb[a] + taps[ki][a] * d[a];
          inside = inside && p >= 0 && p < c.x[2 + a];
          xo += p * xstr[2 + a];
          wo += taps[ki][a] * wstr[2 + a];
        }
        if (inside) acc += x[xo] * w[wo];
      }
    y[oi] = acc;
  }
  return y;
}

void check_conv(const ConvCase& c, DType dt, uint64_t seed) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " x" + dims_str(c.x) + " w" + dims_str(c.w) + " groups " +
               std::to_string(c.groups));
  ops::Conv op;
  op.stride = c.stride;
  op.pads = c.pads;
  op.dilation = c.dilation;
  op.groups = c.groups;
  std::vector<Tensor> ins{random_tensor(dt, c.x, seed), random_tensor(dt, c.w, seed + 1)};
  if (c.bias) ins.push_back(random_tensor(dt, {c.w[0]}, seed + 2));
  const std::vector<double> b = c.bias ? to_doubles(ins[2]) : std::vector<double>{};
  std::vector<int64_t> yd;
  const auto ref = ref_conv(c, to_doubles(ins[0]), to_doubles(ins[1]), c.bias ? &b : nullptr, yd);
  const Tensor y = run_op(op, ins);
  EXPECT_EQ(y.dtype(), dt);
  EXPECT_TRUE(all_close(y, yd, ref, conv_tol(dt)));
}

TEST(Conv, Conv2dAttributesAllDtypes) {
  const std::vector<ConvCase> cases = {
      {{2, 3, 7, 6}, {4, 3, 3, 3}, true, {}, {}, {}, 1},
      {{2, 3, 7, 6}, {4, 3, 3, 2}, true, {2, 1}, {1, 0, 2, 1}, {1, 2}, 1},      // asymmetric pads
      {{1, 4, 6, 5}, {6, 2, 3, 2}, false, {2, 2}, {1, 1, 1, 1}, {}, 2},          // groups
      {{2, 3, 5, 5}, {3, 1, 3, 3}, false, {}, {1, 1, 1, 1}, {}, 3},              // depthwise
      {{1, 2, 5, 4}, {4, 1, 2, 2}, true, {}, {}, {2, 1}, 2},                     // depthwise x2
      {{2, 5, 4, 3}, {3, 5, 1, 1}, true, {}, {}, {}, 1},                         // 1x1 fast path
      {{3, 7, 1, 1}, {5, 7, 1, 1}, true, {}, {}, {}, 1},                         // 1x1 maps: one product
      {{2, 300, 1, 1}, {40, 300, 1, 1}, false, {}, {}, {}, 1},
      {{1, 2, 5, 5}, {2, 2, 1, 1}, false, {2, 2}, {1, 0, 0, 1}, {}, 1},          // 1x1 strided, padded
      {{1, 1, 3, 3}, {2, 1, 4, 5}, true, {}, {1, 1, 0, 1}, {}, 1},               // kernel == padded input
      {{1, 2, 4, 4}, {2, 2, 2, 2}, false, {3, 3}, {0, 0, 2, 2}, {3, 3}, 1},      // big stride/dilation
  };
  uint64_t seed = 10;
  for (const auto& c : cases)
    for (DType dt : kFloats) check_conv(c, dt, seed += 3);
}

TEST(Conv, Conv1d) {
  const std::vector<ConvCase> cases = {
      {{2, 4, 11}, {6, 2, 3}, true, {2}, {1, 2}, {2}, 2},
      {{3, 2, 5}, {3, 2, 5}, false, {}, {}, {}, 1},
      {{1, 3, 8}, {3, 1, 2}, true, {3}, {0, 1}, {}, 3},
  };
  uint64_t seed = 100;
  for (const auto& c : cases)
    for (DType dt : kFloats) check_conv(c, dt, seed += 3);
}

TEST(Conv, Conv3d) {
  const std::vector<ConvCase> cases = {
      {{1, 2, 5, 6, 4}, {4, 1, 2, 3, 2}, true, {1, 2, 1}, {0, 1, 1, 1, 0, 0}, {2, 1, 1}, 2},
      {{2, 3, 3, 4, 4}, {2, 3, 1, 2, 2}, false, {}, {}, {}, 1},
  };
  uint64_t seed = 200;
  for (const auto& c : cases)
    for (DType dt : kFloats) check_conv(c, dt, seed += 3);
}

TEST(Conv, ParallelPaths) {
  check_conv({{4, 8, 10, 10}, {8, 4, 3, 3}, true, {}, {1, 1, 1, 1}, {}, 2}, DType::F32, 300);  // many tasks
  check_conv({{1, 16, 14, 14}, {4, 16, 3, 3}, true, {1, 1}, {}, {}, 1}, DType::F32, 301);     // one big task
  check_conv({{1, 16, 14, 14}, {4, 16, 3, 3}, false, {2, 1}, {1, 1, 1, 1}, {}, 1}, DType::BF16, 302);
  // wide outputs of one task: output columns split over the threads (odd last slice)
  check_conv({{1, 6, 41, 43}, {4, 6, 3, 3}, true, {}, {1, 1, 1, 1}, {}, 1}, DType::F32, 303);
  check_conv({{1, 8, 37, 39}, {8, 8, 1, 1}, true, {}, {}, {}, 1}, DType::F32, 304);  // pointwise
  check_conv({{1, 8, 37, 39}, {8, 8, 1, 1}, false, {}, {}, {}, 1}, DType::F16, 305);
  // The f32 tile kernel: channel counts that leave 1..5 rows of a 6-row tile, column counts
  // with 1..15 left over a 16-wide tile, more than one column chunk, long k.
  check_conv({{1, 37, 29, 31}, {71, 37, 1, 1}, true, {}, {}, {}, 1}, DType::F32, 306);
  check_conv({{2, 5, 7, 9}, {13, 5, 3, 3}, true, {2, 2}, {1, 1, 1, 1}, {}, 1}, DType::F32, 307);
  check_conv({{1, 300, 7, 7}, {20, 300, 1, 1}, false, {}, {}, {}, 1}, DType::F32, 308);
  check_conv({{1, 4, 3, 5}, {8, 4, 1, 1}, true, {}, {}, {}, 1}, DType::F32, 309);
}

// Convs whose unfolded input exceeds 4 MiB run in bands of output columns, each unfolded
// alone (a band ends mid-row; f16/bf16 convert on the way in and out): strides, dilation,
// asymmetric pads, groups, batches, 1x1 with f16 storage, 1-d.
TEST(Conv, BandedLargeOutputs) {
  check_conv({{1, 16, 130, 130}, {8, 16, 3, 3}, true, {}, {1, 1, 1, 1}, {}, 1}, DType::F32, 320);
  check_conv({{2, 48, 131, 129}, {6, 24, 3, 2}, true, {2, 1}, {1, 0, 2, 1}, {2, 1}, 2}, DType::F32, 321);
  check_conv({{1, 16, 130, 130}, {8, 16, 3, 3}, true, {}, {1, 1, 1, 1}, {}, 1}, DType::F16, 322);
  check_conv({{1, 16, 97, 101}, {5, 16, 3, 3}, false, {1, 2}, {2, 1, 1, 2}, {}, 1}, DType::BF16, 323);
  check_conv({{1, 64, 160, 130}, {4, 64, 1, 1}, true, {}, {}, {}, 1}, DType::F16, 324);  // pointwise, converted
  check_conv({{1, 64, 20000}, {3, 64, 5}, true, {}, {2, 2}, {}, 1}, DType::F32, 325);
}

// conv_direct_bands (large maps and f16: bands of output rows, each band's input rows fed to
// conv_direct) gives the bits of conv_direct over the whole image: several bands, strides,
// dilation, groups, bands that read only padding (their outputs are the bias), f16 values
// converted on the way in and rounded on the way out.
TEST(Conv, DirectBandsMatchTheWholeImage) {
  if (!cpu::conv_gemm_avx2_usable()) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
  struct Case {
    std::vector<int64_t> x, w, stride, pads, dil;
    int64_t groups;
  };
  const std::vector<Case> cases = {
      {{1, 64, 100, 130}, {16, 64, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1},
      {{2, 64, 61, 140}, {20, 32, 3, 3}, {2, 2}, {1, 1, 0, 0}, {2, 2}, 2},
      {{1, 48, 10, 150}, {8, 48, 3, 3}, {1, 1}, {40, 1, 40, 1}, {1, 1}, 1},  // rows of padding only
      {{1, 40, 90, 200}, {24, 40, 5, 3}, {1, 2}, {2, 1, 2, 1}, {1, 1}, 1},
  };
  uint64_t seed = 1200;
  for (const Case& c : cases) {
    SCOPED_TRACE("x" + dims_str(c.x) + " w" + dims_str(c.w));
    const int64_t cg = c.x[1] / c.groups, coutg = c.w[0] / c.groups;
    const int64_t oh = (c.x[2] + c.pads[0] + c.pads[2] - c.dil[0] * (c.w[2] - 1) - 1) / c.stride[0] + 1;
    const int64_t ow = (c.x[3] + c.pads[1] + c.pads[3] - c.dil[1] * (c.w[3] - 1) - 1) / c.stride[1] + 1;
    const cpu::Window3 win = cpu::make_window({c.x[2], c.x[3]}, {oh, ow}, {c.w[2], c.w[3]}, c.stride, c.pads, c.dil);
    ASSERT_TRUE(cpu::conv_direct_bands_usable(win, cg, coutg));
    const Tensor x = random_tensor(DType::F32, c.x, seed++), w = random_tensor(DType::F32, c.w, seed++);
    const Tensor bias = random_tensor(DType::F32, {c.w[0]}, seed++);
    const int64_t ny = c.x[0] * c.w[0] * oh * ow;
    std::vector<float> whole(static_cast<size_t>(ny)), banded(static_cast<size_t>(ny), std::nanf(""));
    cpu::ConvOperands co;
    co.win = win;
    co.n_batch = c.x[0];
    co.groups = c.groups;
    co.cg = cg;
    co.coutg = coutg;
    co.w = w.data<float>();
    co.bias = bias.data<float>();
    cpu::ConvDirect d;
    static_cast<cpu::ConvOperands&>(d) = co;
    d.x = x.data<float>();
    d.y = whole.data();
    cpu::conv_direct(d);
    cpu::ConvBands b;
    static_cast<cpu::ConvOperands&>(b) = co;
    b.x = x.data<float>();
    b.y = banded.data();
    for (int threads : {1, 3}) {
      cpu::ScopedThreads t(threads);
      cpu::conv_direct_bands(b);
      ASSERT_EQ(0, std::memcmp(whole.data(), banded.data(), whole.size() * sizeof(float))) << threads << " thread(s)";
    }
    // f16 values: the same sums over the f16 input's f32 values, rounded once to f16.
    const Tensor xh = x.cast(DType::F16);
    const Tensor xr = xh.cast(DType::F32);
    d.x = xr.data<float>();
    cpu::conv_direct(d);
    std::vector<f16> yh(static_cast<size_t>(ny));
    b.x = xh.raw();
    b.x_f16 = true;
    b.y = yh.data();
    b.y_f16 = true;
    cpu::conv_direct_bands(b);
    for (int64_t i = 0; i < ny; ++i)
      ASSERT_EQ(f32_to_f16_bits(whole[size_t(i)]), yh[size_t(i)].bits) << "f16 output " << i;
  }
}

// The direct depthwise kernel (one input channel per group): strides 1/2/3, asymmetric pads,
// dilation, channel multipliers, odd widths (vector remainders), taps that miss the input
// entirely, 1-d and 3-d, many planes (parallel), every float dtype.
TEST(Conv, Depthwise) {
  const std::vector<ConvCase> cases = {
      {{1, 5, 19, 23}, {5, 1, 3, 3}, true, {1, 1}, {1, 1, 1, 1}, {}, 5},
      {{2, 6, 21, 17}, {6, 1, 3, 3}, true, {2, 2}, {1, 1, 1, 1}, {}, 6},          // stride 2
      {{1, 4, 13, 29}, {4, 1, 5, 5}, false, {2, 3}, {2, 1, 2, 3}, {}, 4},         // 5x5, stride 3 in x
      {{1, 3, 11, 12}, {3, 1, 3, 3}, true, {1, 1}, {2, 2, 2, 2}, {2, 2}, 3},      // dilation
      {{1, 3, 9, 10}, {6, 1, 3, 2}, true, {1, 2}, {0, 1, 1, 0}, {1, 1}, 3},       // multiplier 2
      {{1, 2, 3, 3}, {2, 1, 3, 3}, true, {1, 1}, {3, 3, 3, 3}, {}, 2},            // rows/cols of pad only
      {{1, 2, 2, 40}, {2, 1, 1, 7}, false, {1, 1}, {0, 3, 0, 3}, {1, 3}, 2},      // 1 x k, long rows
      {{2, 3, 33}, {3, 1, 5}, true, {2}, {2, 2}, {1}, 3},                         // 1-d
      {{1, 2, 5, 6, 7}, {4, 1, 3, 3, 3}, true, {1, 2, 1}, {1, 1, 1, 1, 0, 1}, {}, 2},  // 3-d, multiplier 2
      {{1, 2, 9, 17}, {6, 1, 3, 3}, true, {1, 1}, {1, 2, 1, 0}, {}, 2},            // x-padded copy, multiplier 3
      {{2, 3, 8, 21}, {3, 1, 3, 5}, false, {1, 1}, {3, 4, 3, 4}, {2, 2}, 3},       // x-padded copy, dilated
  };
  uint64_t seed = 500;
  for (const auto& c : cases)
    for (DType dt : kFloats) check_conv(c, dt, seed += 3);
  check_conv({{2, 96, 28, 28}, {96, 1, 3, 3}, true, {1, 1}, {1, 1, 1, 1}, {}, 96}, DType::F32, 600);  // many planes
  check_conv({{1, 64, 57, 57}, {64, 1, 3, 3}, false, {2, 2}, {0, 0, 1, 1}, {}, 64}, DType::F32, 601);
  // Maps past 128 x 128 outputs on the plane kernels (smaller ones take the channel kernel).
  check_conv({{1, 3, 130, 131}, {3, 1, 3, 3}, true, {1, 1}, {1, 1, 1, 1}, {}, 3}, DType::F32, 602);
  check_conv({{1, 2, 262, 259}, {2, 1, 5, 5}, false, {2, 2}, {2, 2, 2, 2}, {}, 2}, DType::F32, 603);
}

// The f32 depthwise kernel eight channels at a time (depthwise_channels_avx2.h) against a double
// reference, for 1..8 channels a block, windows with and without the row-reuse kernels (3/5/7
// wide at x stride 1, 3/5 at stride 2; others: 4 wide, stride 3, dilation), and bit for bit
// against the plane kernel (depthwise_padded_avx2) where that one runs: the same sums in the
// same order.
TEST(Conv, DepthwiseChannelKernel) {
  struct Geo {
    int64_t h, w, kh, kw, sy, sx, pt, pl, pb, pr, dy, dx;
  };
  const std::vector<Geo> geos = {
      {7, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},  {8, 7, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1},  {9, 9, 5, 5, 2, 2, 2, 2, 2, 2, 1, 1},
      {14, 14, 3, 3, 2, 2, 0, 0, 1, 1, 1, 1}, {7, 7, 7, 7, 1, 1, 3, 3, 3, 3, 1, 1},  {10, 11, 4, 4, 3, 3, 1, 2, 1, 0, 1, 1},
      {9, 8, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2},  {1, 30, 1, 5, 1, 1, 0, 2, 0, 2, 1, 1},  {3, 3, 3, 3, 1, 1, 3, 3, 3, 3, 1, 1},
      {5, 9, 2, 3, 1, 2, 0, 1, 1, 1, 1, 1}};
  uint64_t seed = 900;
  for (const Geo& g : geos) {
    cpu::Window3 win = cpu::make_window(
        {g.h, g.w}, {(g.h + g.pt + g.pb - g.dy * (g.kh - 1) - 1) / g.sy + 1, (g.w + g.pl + g.pr - g.dx * (g.kw - 1) - 1) / g.sx + 1},
        {g.kh, g.kw}, {g.sy, g.sx}, {g.pt, g.pl, g.pb, g.pr}, {g.dy, g.dx});
    if (!cpu::depthwise_channels_usable(win)) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
    for (int64_t nch : {1, 5, 8}) {
      SCOPED_TRACE("input " + std::to_string(g.h) + "x" + std::to_string(g.w) + " window " + std::to_string(g.kh) + "x" +
                   std::to_string(g.kw) + " stride " + std::to_string(g.sx) + " dilation " + std::to_string(g.dx) +
                   ", " + std::to_string(nch) + " channels");
      const int64_t in_sz = win.in_size(), out_sz = win.out_size(), k = win.k_size();
      const std::vector<double> xd = to_doubles(random_tensor(DType::F32, {nch * in_sz}, seed++));
      const std::vector<double> wd = to_doubles(random_tensor(DType::F32, {nch * k}, seed++));
      const std::vector<double> bd = to_doubles(random_tensor(DType::F32, {nch}, seed++));
      const std::vector<float> x(xd.begin(), xd.end()), w(wd.begin(), wd.end()), b(bd.begin(), bd.end());
      std::vector<float> y(static_cast<size_t>(nch * out_sz), std::nanf(""));
      cpu::DepthwiseChannelsScratch scratch;
      cpu::depthwise_channels_avx2(x.data(), nch, w.data(), b.data(), win, y.data(), scratch);
      for (int64_t j = 0; j < nch; ++j)
        for (int64_t oy = 0; oy < win.out[1]; ++oy)
          for (int64_t ox = 0; ox < win.out[2]; ++ox) {
            double want = b[size_t(j)];
            for (int64_t ky = 0; ky < g.kh; ++ky)
              for (int64_t kx = 0; kx < g.kw; ++kx) {
                const int64_t iy = oy * g.sy - g.pt + ky * g.dy, ix = ox * g.sx - g.pl + kx * g.dx;
                if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
                  want += double(x[size_t(j * in_sz + iy * g.w + ix)]) * w[size_t(j * k + ky * g.kw + kx)];
              }
            ASSERT_NEAR(y[size_t(j * out_sz + oy * win.out[2] + ox)], want, 1e-5 * (1 + std::abs(want)))
                << "channel " << j << " at " << oy << "," << ox;
          }
      if (!cpu::depthwise_padded_usable(win)) continue;
      const cpu::PaddedPlane pg = cpu::depthwise_padded_geometry(win);
      for (int64_t j = 0; j < nch; ++j) {
        std::vector<float> padded(static_cast<size_t>(pg.width * pg.height), 0.f), plane(static_cast<size_t>(out_sz));
        for (int64_t r = 0; r < g.h; ++r)
          std::copy(x.begin() + j * in_sz + r * g.w, x.begin() + j * in_sz + (r + 1) * g.w,
                    padded.begin() + (r + g.pt) * pg.width + g.pl);
        cpu::depthwise_padded_avx2(padded.data(), pg, w.data() + j * k, b[size_t(j)], win, plane.data());
        ASSERT_EQ(0, std::memcmp(plane.data(), y.data() + j * out_sz, plane.size() * sizeof(float)))
            << "channel " << j << ": not the plane kernel's bits";
      }
    }
  }
}

// The f32 direct (implicit-GEMM) conv of 2-d and 1-d windows (backends/cpu/conv_direct.h) at
// 1 and 3 threads, with the tile kernel it picks and with each of its two forced: against the
// double reference; the two kernels give the same bits, and so does the im2col path (the
// direct one switched off) where it runs the same tile kernel (one group, k < 240).
void check_conv_direct(const ConvCase& c, uint64_t seed) {
  SCOPED_TRACE("x" + dims_str(c.x) + " w" + dims_str(c.w) + " groups " + std::to_string(c.groups));
  ops::Conv op;
  op.stride = c.stride;
  op.pads = c.pads;
  op.dilation = c.dilation;
  op.groups = c.groups;
  std::vector<Tensor> ins{random_tensor(DType::F32, c.x, seed), random_tensor(DType::F32, c.w, seed + 1)};
  if (c.bias) ins.push_back(random_tensor(DType::F32, {c.w[0]}, seed + 2));
  const std::vector<double> b = c.bias ? to_doubles(ins[2]) : std::vector<double>{};
  std::vector<int64_t> yd;
  const auto ref = ref_conv(c, to_doubles(ins[0]), to_doubles(ins[1]), c.bias ? &b : nullptr, yd);
  int64_t k = 1;
  for (size_t i = 1; i < c.w.size(); ++i) k *= c.w[i];
  // Sums of k products of values in [-1, 1]: f32 rounding grows with k.
  const testing::Tolerance tol{1e-5, 2e-5 * std::max(1.0, std::sqrt(static_cast<double>(k) / 16))};
  Graph g;
  std::vector<Value> vs;
  NamedTensors feed;
  for (size_t i = 0; i < ins.size(); ++i) {
    vs.push_back(g.input("in" + std::to_string(i), ins[i].shape_info()));
    feed.emplace_back("in" + std::to_string(i), ins[i]);
  }
  g.add_output(g.apply(op, vs));
  const bool avx2 = cpu::conv_gemm_avx2_usable();
  for (int threads : {1, 3}) {
    CompileOptions o;
    o.num_threads = threads;
    CompiledGraph cg = Session(Device::Cpu).compile(g, o);
    std::vector<Tensor> y;
    for (int kernel : {0, 1, 2}) {  // picked, spatial tiles, channel lanes
      SCOPED_TRACE(std::to_string(threads) + " thread(s), kernel " + std::to_string(kernel));
      cpu::set_conv_direct_kernel(kernel);
      const uint64_t runs = cpu::conv_direct_runs();
      cpu::reset_parallel_stats();
      y.push_back(cg.run(feed)[0]);
      if (avx2) {
        EXPECT_EQ(cpu::conv_direct_runs(), runs + 1) << "the direct path did not run";
        // From 512K multiply-adds on the conv splits over the threads.
        if (threads > 1 && product(yd) * k >= (int64_t{1} << 19)) {
          EXPECT_EQ(cpu::max_parallel_threads_since_reset(), threads);
        }
      }
      EXPECT_TRUE(all_close(y.back(), yd, ref, tol));
    }
    // Both kernels on AVX2 give the bits of their AVX-512 forms (32-channel blocks of the
    // channel lanes, zmm spatial tiles).
    cpu::set_conv_zmm(0);
    for (int kernel : {1, 2}) {
      cpu::set_conv_direct_kernel(kernel);
      const Tensor narrow = cg.run(feed)[0];
      EXPECT_EQ(0, std::memcmp(narrow.raw(), y[static_cast<size_t>(kernel)].raw(), narrow.nbytes()))
          << "kernel " << kernel << ": the AVX2 and AVX-512 forms differ";
    }
    cpu::set_conv_zmm(-1);
    cpu::set_conv_direct_kernel(0);
    EXPECT_EQ(0, std::memcmp(y[1].raw(), y[2].raw(), y[1].nbytes())) << "the two kernels' bits differ";
    cpu::set_conv_direct_enabled(false);
    const Tensor y0 = cg.run(feed)[0];
    cpu::set_conv_direct_enabled(true);
    ASSERT_EQ(y0.shape(), y[0].shape());
    if (k < 240 && c.groups == 1) {
      EXPECT_EQ(0, std::memcmp(y[0].raw(), y0.raw(), y0.nbytes())) << "not the im2col path's bits";
    }
  }
}

// The channel lanes on AVX-512 (blocks of 32 channels in two zmm registers, of up to 16 in one):
// channel counts that fill blocks of 32, leave a last block of 1..16 or 17..31, position counts
// that leave 1..7 of an 8-position tile, long sums in blocks of taps (the partial sums reloaded),
// stride 2 on the flat buffer; the bits of the 16-channel blocks, and switching between the two
// between runs repacks a Param weight.
TEST(Conv, WideChannelBlocksMatchTheNarrowOnes) {
  if (!cpu::conv_direct_avx512_usable()) GTEST_SKIP() << "this CPU has no AVX-512F: the 32-channel blocks never run";
  const std::vector<ConvCase> cases = {
      {{1, 8, 9, 10}, {32, 8, 3, 3}, true, {}, {1, 1, 1, 1}, {}, 1},
      {{1, 6, 9, 11}, {16, 6, 3, 3}, true, {}, {1, 1, 1, 1}, {}, 1},     // one zmm register
      {{1, 4, 7, 8}, {9, 4, 3, 3}, false, {}, {1, 1, 1, 1}, {}, 1},      // part of one
      {{2, 5, 7, 9}, {17, 5, 3, 3}, true, {}, {1, 1, 1, 1}, {}, 1},      // 17: 16 + 1 in one block
      {{1, 6, 11, 7}, {48, 6, 3, 3}, false, {}, {1, 1, 1, 1}, {}, 1},    // 32 + a 16-channel block
      {{1, 7, 5, 13}, {61, 7, 3, 3}, true, {2, 2}, {1, 1, 1, 1}, {}, 1},  // 32 + 29, stride 2
      {{1, 3, 4, 3}, {40, 3, 3, 3}, true, {}, {1, 1, 1, 1}, {}, 1},      // 12 positions
      {{1, 520, 16, 17}, {33, 520, 3, 3}, true, {}, {1, 1, 1, 1}, {}, 1},  // k 4680: tap blocks
  };
  uint64_t seed = 900;
  cpu::set_conv_direct_kernel(2);
  for (const auto& c : cases) {
    SCOPED_TRACE("x" + dims_str(c.x) + " w" + dims_str(c.w));
    ops::Conv op;
    op.stride = c.stride;
    op.pads = c.pads;
    Graph g;
    const Value x = g.input("x", Shape::from(c.x));
    const Value w = g.param("w", Shape::from(c.w));
    std::vector<Value> ins{x, w};
    if (c.bias) ins.push_back(g.param("b", Shape::of({c.w[0]})));
    g.add_output(g.apply(op, ins));
    CompiledGraph cg = Session(Device::Cpu).compile(g);
    const Tensor xv = random_tensor(DType::F32, c.x, seed++), wv = random_tensor(DType::F32, c.w, seed++);
    const Tensor bv = random_tensor(DType::F32, {c.w[0]}, seed++);
    cg.set_param("w", wv);
    if (c.bias) cg.set_param("b", bv);
    const NamedTensors feed{{"x", xv}};
    const Tensor wide = cg.run(feed)[0];
    cpu::set_conv_zmm(0);
    const Tensor narrow = cg.run(feed)[0];
    cpu::set_conv_zmm(-1);
    const Tensor wide_again = cg.run(feed)[0];
    EXPECT_EQ(0, std::memcmp(wide.raw(), narrow.raw(), wide.nbytes())) << "16- and 32-channel blocks differ";
    EXPECT_EQ(0, std::memcmp(wide.raw(), wide_again.raw(), wide.nbytes())) << "stale packed weights";
    std::vector<int64_t> yd;
    const std::vector<double> b = to_doubles(bv);
    const auto ref = ref_conv(c, to_doubles(xv), to_doubles(wv), c.bias ? &b : nullptr, yd);
    const double k = static_cast<double>(c.w[1] * c.w[2] * c.w[3]);
    EXPECT_TRUE(all_close(wide, yd, ref, testing::Tolerance{1e-5, 2e-5 * std::max(1.0, std::sqrt(k / 16.0))}));
  }
  cpu::set_conv_direct_kernel(0);
}

// conv_gemm's tiles (pointwise convs, sums under 240 taps) on AVX-512 give the bits of the AVX2
// ones: 1..6 rows of a 6-row block, column tails of 1..15 past whole vectors, with and without
// bias.
TEST(Conv, ZmmGemmTilesMatchTheAvx2Ones) {
  if (!cpu::conv_direct_avx512_usable()) GTEST_SKIP() << "this CPU has no AVX-512F: the zmm tiles never run";
  const std::vector<ConvCase> cases = {
      {{1, 16, 23, 29}, {64, 16, 1, 1}, true, {}, {}, {}, 1},   // 667 columns: 10 x 64 + 16 + 11
      {{2, 24, 7, 9}, {13, 24, 1, 1}, false, {}, {}, {}, 1},    // 13 rows: 6 + 6 + 1
      {{1, 40, 5, 5}, {11, 40, 1, 1}, true, {}, {}, {}, 1},     // 11 rows, 25 columns
      {{1, 200, 6, 7}, {20, 200, 1, 1}, true, {}, {}, {}, 1},   // k 200
  };
  uint64_t seed = 950;
  for (const auto& c : cases) {
    SCOPED_TRACE("x" + dims_str(c.x) + " w" + dims_str(c.w));
    ops::Conv op;
    Graph g;
    std::vector<Value> ins{g.input("x", Shape::from(c.x)), g.input("w", Shape::from(c.w))};
    if (c.bias) ins.push_back(g.input("b", Shape::of({c.w[0]})));
    g.add_output(g.apply(op, ins));
    CompiledGraph cg = Session(Device::Cpu).compile(g);
    const Tensor xv = random_tensor(DType::F32, c.x, seed++), wv = random_tensor(DType::F32, c.w, seed++);
    const Tensor bv = random_tensor(DType::F32, {c.w[0]}, seed++);
    NamedTensors feed{{"x", xv}, {"w", wv}};
    if (c.bias) feed.emplace_back("b", bv);
    const Tensor zmm = cg.run(feed)[0];
    cpu::set_conv_zmm(0);
    const Tensor avx2 = cg.run(feed)[0];
    cpu::set_conv_zmm(-1);
    EXPECT_EQ(0, std::memcmp(zmm.raw(), avx2.raw(), zmm.nbytes())) << "zmm and AVX2 tiles differ";
    std::vector<int64_t> yd;
    const std::vector<double> b = to_doubles(bv);
    const auto ref = ref_conv(c, to_doubles(xv), to_doubles(wv), c.bias ? &b : nullptr, yd);
    const double k = static_cast<double>(c.w[1]);
    EXPECT_TRUE(all_close(zmm, yd, ref, testing::Tolerance{1e-5, 2e-5 * std::max(1.0, std::sqrt(k / 16.0))}));
  }
}

// The channel-lane kernel keeps a Param weight's packed form across runs: a set_param between
// runs must repack (the numbers of a fresh compile with the new weights), and a weight that is
// an input is packed on every run.
TEST(Conv, PackedWeightsFollowSetParam) {
  for (bool weight_is_param : {true, false}) {
    SCOPED_TRACE(weight_is_param ? "param weight" : "input weight");
    Graph g;
    ops::Conv op;
    op.pads = {1, 1, 1, 1};
    const Value x = g.input("x", Shape::of({1, 32, 9, 10}));
    const Value w = weight_is_param ? g.param("w", Shape::of({32, 32, 3, 3})) : g.input("w", Shape::of({32, 32, 3, 3}));
    g.add_output(g.apply(op, {x, w}));
    const Tensor xv = random_tensor(DType::F32, {1, 32, 9, 10}, 70);
    auto run_with = [&](CompiledGraph& cg, const Tensor& wv) {
      NamedTensors feed{{"x", xv}};
      if (weight_is_param) cg.set_param("w", wv);
      else feed.emplace_back("w", wv);
      return cg.run(feed)[0];
    };
    CompiledGraph cg = Session(Device::Cpu).compile(g);
    const Tensor w1 = random_tensor(DType::F32, {32, 32, 3, 3}, 71), w2 = random_tensor(DType::F32, {32, 32, 3, 3}, 72);
    const Tensor y1 = run_with(cg, w1);
    const Tensor y1_again = run_with(cg, w1);
    const Tensor y2 = run_with(cg, w2);
    CompiledGraph fresh = Session(Device::Cpu).compile(g);
    const Tensor y2_fresh = run_with(fresh, w2);
    EXPECT_EQ(0, std::memcmp(y1.raw(), y1_again.raw(), y1.nbytes()));
    EXPECT_NE(0, std::memcmp(y1.raw(), y2.raw(), y1.nbytes())) << "the new weights changed nothing";
    EXPECT_EQ(0, std::memcmp(y2.raw(), y2_fresh.raw(), y2.nbytes())) << "stale packed weights";
  }
}

TEST(Conv, DirectPath) {
  const std::vector<ConvCase> cases = {
      // kernel sizes 1..7, stride 1, same padding; odd widths, widths below 16
      {{1, 3, 9, 7}, {5, 3, 1, 1}, true, {}, {1, 1, 1, 1}, {}, 1},        // 1x1 with padding
      {{1, 4, 8, 11}, {7, 4, 2, 2}, false, {}, {0, 0, 1, 1}, {}, 1},
      {{2, 5, 13, 17}, {13, 5, 3, 3}, true, {}, {1, 1, 1, 1}, {}, 1},     // 13 = 2 x 6 + 1 rows
      {{1, 3, 10, 9}, {8, 3, 4, 4}, true, {}, {2, 1, 1, 2}, {}, 1},
      {{1, 2, 12, 5}, {11, 2, 5, 5}, false, {}, {2, 2, 2, 2}, {}, 1},
      {{1, 3, 7, 6}, {9, 3, 6, 6}, true, {}, {3, 2, 2, 3}, {}, 1},
      {{1, 3, 15, 14}, {4, 3, 7, 7}, true, {}, {3, 3, 3, 3}, {}, 1},
      {{1, 2, 6, 21}, {3, 2, 1, 7}, true, {}, {0, 3, 0, 3}, {}, 1},       // 1 x 7
      {{1, 2, 21, 6}, {5, 2, 7, 1}, false, {}, {3, 0, 3, 0}, {}, 1},      // 7 x 1
      {{1, 4, 1, 1}, {2, 4, 3, 3}, true, {}, {1, 1, 1, 1}, {}, 1},        // 1 x 1 input
      {{1, 3, 5, 3}, {6, 3, 3, 3}, true, {}, {}, {}, 1},                  // no padding, 3 x 1 output
      // strides, dilations, asymmetric and oversized pads
      {{2, 3, 33, 29}, {16, 3, 7, 7}, true, {2, 2}, {3, 3, 3, 3}, {}, 1},  // a ResNet stem
      {{1, 5, 17, 19}, {10, 5, 3, 3}, true, {2, 2}, {1, 1, 1, 1}, {}, 1},
      {{1, 5, 17, 20}, {10, 5, 3, 3}, false, {2, 2}, {0, 0, 1, 1}, {}, 1},  // even input, end pads only
      {{1, 6, 16, 14}, {9, 6, 1, 1}, true, {2, 2}, {}, {}, 1},              // 1x1 stride 2 (one phase)
      {{1, 4, 11, 13}, {5, 4, 3, 2}, true, {1, 2}, {2, 0, 1, 3}, {}, 1},
      {{1, 3, 20, 22}, {4, 3, 3, 3}, true, {3, 3}, {1, 2, 0, 1}, {}, 1},
      {{1, 4, 19, 23}, {6, 4, 3, 3}, false, {1, 1}, {2, 2, 2, 2}, {2, 2}, 1},  // dilation 2
      {{1, 3, 14, 25}, {5, 3, 3, 4}, true, {1, 2}, {1, 3, 2, 1}, {1, 3}, 1},   // dilation 3 with stride 2
      {{1, 2, 12, 12}, {3, 2, 2, 2}, true, {2, 2}, {0, 0, 0, 0}, {3, 3}, 1},   // dilation above the stride
      {{1, 2, 5, 4}, {3, 2, 3, 3}, true, {}, {4, 5, 3, 2}, {}, 1},             // pads beyond the kernel
      {{1, 2, 9, 9}, {3, 2, 2, 2}, false, {4, 4}, {}, {}, 1},                  // stride above the kernel
      // stride 2 over rows of 16+ values per phase (the phase fill's vector path and its tail)
      {{1, 3, 21, 75}, {6, 3, 7, 7}, true, {2, 2}, {3, 3, 3, 3}, {}, 1},
      {{1, 4, 9, 68}, {5, 4, 3, 3}, false, {2, 2}, {0, 0, 1, 1}, {}, 1},
      {{1, 2, 9, 81}, {3, 2, 3, 3}, true, {2, 2}, {1, 2, 1, 2}, {1, 2}, 1},
      // channel counts leaving 1..5 rows of a 6-row tile, long rows (several row chunks)
      {{1, 7, 40, 61}, {17, 7, 3, 3}, true, {}, {1, 1, 1, 1}, {}, 1},
      {{1, 5, 31, 33}, {40, 5, 3, 3}, true, {}, {1, 1, 1, 1}, {}, 1},          // 16 + 16 + 8 channels
      {{2, 6, 23, 9}, {29, 6, 3, 3}, false, {1, 1}, {1, 1, 1, 1}, {}, 1},
      {{1, 3, 60, 130}, {4, 3, 3, 3}, true, {}, {1, 1, 1, 1}, {}, 1},
      {{1, 8, 9, 300}, {3, 8, 3, 3}, false, {1, 1}, {1, 1, 1, 1}, {}, 1},     // one row wider than a chunk
      // k from small to past 1000
      {{1, 1, 8, 9}, {2, 1, 3, 3}, true, {}, {1, 1, 1, 1}, {}, 1},             // k 9
      {{2, 32, 12, 10}, {32, 32, 3, 3}, true, {}, {1, 1, 1, 1}, {}, 1},        // k 288
      {{2, 64, 6, 5}, {64, 64, 3, 3}, true, {}, {1, 1, 1, 1}, {}, 1},          // k 576 (the ResNet export)
      {{1, 113, 7, 9}, {20, 113, 3, 3}, false, {}, {1, 1, 1, 1}, {}, 1},       // k 1017
      {{2, 128, 5, 4}, {37, 128, 3, 3}, true, {}, {1, 1, 1, 1}, {}, 1},        // k 1152, 16 + 16 + 5 channels
      {{1, 520, 16, 17}, {18, 520, 3, 3}, false, {}, {1, 1, 1, 1}, {}, 1},     // k 4680 over 272 positions
      // batches, groups of several channels, 1-d; large enough (> 4M multiply-adds) to split
      // over the threads
      {{3, 6, 10, 7}, {8, 6, 3, 3}, true, {}, {1, 1, 1, 1}, {}, 1},
      {{2, 24, 30, 34}, {40, 24, 3, 3}, true, {}, {1, 1, 1, 1}, {}, 1},
      {{1, 20, 61, 45}, {26, 20, 3, 3}, false, {2, 1}, {1, 1, 1, 1}, {}, 1},
      {{2, 8, 11, 9}, {12, 2, 3, 3}, true, {1, 1}, {1, 1, 1, 1}, {}, 4},
      {{1, 6, 13, 12}, {10, 3, 3, 3}, false, {2, 2}, {1, 0, 1, 2}, {}, 2},
      {{2, 4, 37}, {6, 4, 5}, true, {}, {2, 2}, {}, 1},
      {{1, 3, 40}, {5, 3, 3}, false, {2}, {1, 0}, {2}, 1},
  };
  uint64_t seed = 700;
  for (const auto& c : cases) check_conv_direct(c, seed += 3);
}

TEST(Conv, ZeroBatchAndZeroCout) {
  check_conv({{0, 3, 5, 5}, {4, 3, 3, 3}, true, {}, {}, {}, 1}, DType::F32, 400);
  check_conv({{2, 3, 5, 5}, {0, 3, 3, 3}, false, {}, {}, {}, 1}, DType::F32, 401);
}

TEST(Conv, KnownValues) {
  // 1-d: x = [1, 2, 3, 4], w = [1, 10], pads 1/0 -> [0*1+1*10, 1+20, 2+30, 3+40].
  ops::Conv op;
  op.pads = {1, 0};
  const float xv[] = {1, 2, 3, 4}, wv[] = {1, 10};
  const Tensor y = run_op(op, {Tensor::f32({1, 1, 4}, xv), Tensor::f32({1, 1, 2}, wv)});
  EXPECT_TRUE(all_close(y, {1, 1, 4}, {10, 21, 32, 43}));
}

TEST(Conv, InferSymbolic) {
  ops::Conv op;
  op.pads = {1, 1, 1, 1};
  const Shape x({Dim::symbol("n"), 3, Dim::symbol("h"), 8});
  const auto out = infer_op(op, std::vector<Shape>{x, Shape::of({4, 3, 3, 3})});
  EXPECT_EQ(out[0], Shape({Dim::symbol("n"), 4, Dim::symbol("h"), 8}));
  op.stride = {2, 2};
  EXPECT_THAT(error_message([&] { infer_op(op, std::vector<Shape>{x, Shape::of({4, 3, 3, 3})}); }),
              HasSubstr("symbolic"));
  EXPECT_THAT(error_message([&] {
                infer_op(ops::Conv{}, std::vector<Shape>{Shape({1, Dim::symbol("c"), 4, 4}), Shape::of({4, 3, 3, 3})});
              }),
              HasSubstr("must be static"));
}

TEST(Conv, BadInputs) {
  ops::Conv op;
  EXPECT_THAT(build_error(op, {Shape::of({1, 4, 5, 5}), Shape::of({2, 3, 3, 3})}), HasSubstr("channel mismatch"));
  op.groups = 3;
  EXPECT_THAT(build_error(op, {Shape::of({1, 4, 5, 5}), Shape::of({3, 2, 3, 3})}), HasSubstr("divisible by groups=3"));
  op.groups = 2;
  EXPECT_THAT(build_error(op, {Shape::of({1, 4, 5, 5}), Shape::of({3, 2, 3, 3})}), HasSubstr("Cout=3"));
  op.groups = 0;
  EXPECT_THAT(build_error(op, {Shape::of({1, 4, 5, 5}), Shape::of({4, 4, 3, 3})}), HasSubstr("groups must be >= 1"));
  op = ops::Conv{};
  op.pads = {1, 0, 1, 0};
  EXPECT_THAT(build_error(op, {Shape::of({1, 1, 3, 3}), Shape::of({1, 1, 6, 3})}),
              HasSubstr("larger than the padded input 5"));
  op = ops::Conv{};
  EXPECT_THAT(build_error(op, {Shape::of({1, 1, 3, 3}), Shape::of({1, 1, 3})}), HasSubstr("weight must have rank 4"));
  EXPECT_THAT(build_error(op, {Shape::of({1, 3}), Shape::of({1, 3})}), HasSubstr("rank 3..5"));
  EXPECT_THAT(build_error(op, {Shape::of({1, 1, 2, 2, 2, 2}), Shape::of({1, 1, 1, 1, 1, 1})}), HasSubstr("rank 3..5"));
  EXPECT_THAT(build_error(op, {Shape::of({1, 1, 3, 3}, DType::I32), Shape::of({1, 1, 1, 1}, DType::I32)}),
              HasSubstr("float tensor"));
  EXPECT_THAT(build_error(op, {Shape::of({1, 1, 3, 3}), Shape::of({1, 1, 1, 1}, DType::F16)}),
              HasSubstr("dtype must match"));
  EXPECT_THAT(build_error(op, {Shape::of({1, 1, 3, 3}), Shape::of({2, 1, 1, 1}), Shape::of({3})}),
              HasSubstr("bias must be f32[2]"));
  EXPECT_THAT(build_error(op, {Shape::of({1, 1, 3, 3}), Shape::of({2, 1, 0, 1})}), HasSubstr("kernel sizes must be >= 1"));
  op.stride = {1, 0};
  EXPECT_THAT(build_error(op, {Shape::of({1, 1, 3, 3}), Shape::of({1, 1, 1, 1})}), HasSubstr("stride values must be >= 1"));
  op.stride = {};
  op.pads = {1, 1};
  EXPECT_THAT(build_error(op, {Shape::of({1, 1, 3, 3}), Shape::of({1, 1, 1, 1})}), HasSubstr("pads"));
  op.pads = {-1, 0, 0, 0};
  EXPECT_THAT(build_error(op, {Shape::of({1, 1, 3, 3}), Shape::of({1, 1, 1, 1})}), HasSubstr(">= 0"));
  op.pads = {};
  op.dilation = {1};
  EXPECT_THAT(build_error(op, {Shape::of({1, 1, 3, 3}), Shape::of({1, 1, 1, 1})}), HasSubstr("dilation must be empty or have 2"));
}

// ---- ConvTranspose ------------------------------------------------------------------
struct ConvTCase {
  std::vector<int64_t> x, w;
  bool bias = false;
  std::vector<int64_t> stride, pads, dilation, output_padding;
  int64_t groups = 1;
};

std::vector<double> ref_conv_transpose(const ConvTCase& c, const std::vector<double>& x, const std::vector<double>& w,
                                       const std::vector<double>* b, std::vector<int64_t>& yd) {
  const int64_t cin = c.x[1], cing = cin / c.groups, coutg = c.w[1], cout = coutg * c.groups;
  int64_t s[2], pb[2], d[2];
  yd = {c.x[0], cout};
  for (int i = 0; i < 2; ++i) {
    s[i] = c.stride.empty() ? 1 : c.stride[i];
    d[i] = c.dilation.empty() ? 1 : c.dilation[i];
    pb[i] = c.pads.empty() ? 0 : c.pads[i];
    const int64_t pe = c.pads.empty() ? 0 : c.pads[2 + i];
    const int64_t op = c.output_padding.empty() ? 0 : c.output_padding[i];
    yd.push_back((c.x[2 + i] - 1) * s[i] - pb[i] - pe + d[i] * (c.w[2 + i] - 1) + op + 1);
  }
  std::vector<double> y(static_cast<size_t>(product(yd)), 0.0);
  for (int64_t n = 0; n < c.x[0]; ++n)
    for (int64_t ci = 0; ci < cin; ++ci)
      for (int64_t iy = 0; iy < c.x[2]; ++iy)
        for (int64_t ix = 0; ix < c.x[3]; ++ix)
          for (int64_t co = 0; co < coutg; ++co)
            for (int64_t ky = 0; ky < c.w[2]; ++ky)
              for (int64_t kx = 0; kx < c.w[3]; ++kx) {
                const int64_t oy = iy * s[0] - pb[0] + ky * d[0], ox = ix * s[1] - pb[1] + kx * d[1];
                if (oy < 0 || oy >= yd[2] || ox < 0 || ox >= yd[3]) continue;
                const int64_t oc = (ci / cing) * coutg + co;
                y[ravel({n, oc, oy, ox}, yd)] += x[ravel({n, ci, iy, ix}, c.x)] * w[ravel({ci, co, ky, kx}, c.w)];
              }
  if (b)
    for (int64_t i = 0; i < product(yd); ++i) y[i] += (*b)[unravel(i, yd)[1]];
  return y;
}

void check_conv_transpose(const ConvTCase& c, DType dt, uint64_t seed) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " x" + dims_str(c.x) + " w" + dims_str(c.w));
  ops::ConvTranspose op;
  op.stride = c.stride;
  op.pads = c.pads;
  op.dilation = c.dilation;
  op.output_padding = c.output_padding;
  op.groups = c.groups;
  std::vector<Tensor> ins{random_tensor(dt, c.x, seed), random_tensor(dt, c.w, seed + 1)};
  if (c.bias) ins.push_back(random_tensor(dt, {c.w[1] * c.groups}, seed + 2));
  const std::vector<double> b = c.bias ? to_doubles(ins[2]) : std::vector<double>{};
  std::vector<int64_t> yd;
  const auto ref = ref_conv_transpose(c, to_doubles(ins[0]), to_doubles(ins[1]), c.bias ? &b : nullptr, yd);
  const Tensor y = run_op(op, ins);
  EXPECT_EQ(y.dtype(), dt);
  EXPECT_TRUE(all_close(y, yd, ref, conv_tol(dt)));
}

TEST(ConvTranspose, AttributesAllDtypes) {
  const std::vector<ConvTCase> cases = {
      {{2, 3, 4, 5}, {3, 2, 3, 3}, false, {}, {}, {}, {}, 1},
      {{2, 3, 4, 5}, {3, 2, 3, 3}, true, {2, 3}, {1, 0, 0, 2}, {}, {1, 2}, 1},
      {{1, 4, 3, 3}, {4, 3, 2, 2}, true, {2, 2}, {}, {2, 1}, {1, 0}, 2},
      {{1, 3, 4, 4}, {3, 1, 3, 3}, false, {2, 2}, {1, 1, 1, 1}, {}, {1, 1}, 3},
      {{1, 2, 3, 3}, {2, 2, 2, 2}, true, {}, {}, {2, 2}, {1, 1}, 1},  // output_padding < dilation
      {{0, 2, 3, 3}, {2, 2, 2, 2}, true, {}, {}, {}, {}, 1},          // empty batch
  };
  uint64_t seed = 500;
  for (const auto& c : cases)
    for (DType dt : kFloats) check_conv_transpose(c, dt, seed += 3);
}

TEST(ConvTranspose, KnownValues) {
  // x = [[1, 2]], w = 1x1 kernel [[3]] with stride 2 -> [[3, 0, 6]].
  ops::ConvTranspose op;
  op.stride = {1, 2};
  const float xv[] = {1, 2}, wv[] = {3};
  const Tensor y = run_op(op, {Tensor::f32({1, 1, 1, 2}, xv), Tensor::f32({1, 1, 1, 1}, wv)});
  EXPECT_TRUE(all_close(y, {1, 1, 1, 3}, {3, 0, 6}));
}

TEST(ConvTranspose, BadInputs) {
  ops::ConvTranspose op;
  EXPECT_THAT(build_error(op, {Shape::of({1, 2, 3, 3, 3}), Shape::of({2, 2, 1, 1, 1})}),
              HasSubstr("1-d and 3-d transposed convolution are not supported"));
  EXPECT_THAT(build_error(op, {Shape::of({1, 2, 3}), Shape::of({2, 2, 1})}), HasSubstr("2-d only"));
  EXPECT_THAT(build_error(op, {Shape::of({1, 3, 3, 3}), Shape::of({2, 2, 1, 1})}), HasSubstr("channel mismatch"));
  op.groups = 2;
  EXPECT_THAT(build_error(op, {Shape::of({1, 3, 3, 3}), Shape::of({3, 2, 1, 1})}), HasSubstr("divisible by groups=2"));
  op.groups = 1;
  op.stride = {2, 2};
  op.output_padding = {2, 0};
  EXPECT_THAT(build_error(op, {Shape::of({1, 2, 3, 3}), Shape::of({2, 2, 1, 1})}),
              HasSubstr("output_padding[0]=2 must be smaller than stride (2) or dilation (1)"));
  op.output_padding = {};
  op.stride = {};
  op.pads = {2, 2, 2, 2};
  EXPECT_THAT(build_error(op, {Shape::of({1, 2, 3, 3}), Shape::of({2, 2, 1, 1})}), HasSubstr("must be positive"));
  op.pads = {};
  EXPECT_THAT(build_error(op, {Shape::of({1, 2, 3, 3}, DType::I64), Shape::of({2, 2, 1, 1}, DType::I64)}),
              HasSubstr("float tensor"));
  EXPECT_THAT(build_error(op, {Shape::of({1, 2, 3, 3}), Shape::of({2, 2, 1, 1}), Shape::of({3})}),
              HasSubstr("bias must be f32[2]"));
}

// ---- Im2Col -------------------------------------------------------------------------
std::vector<double> ref_im2col(const std::vector<double>& x, const std::vector<int64_t>& xd, const int64_t k[2],
                               const int64_t s[2], const int64_t p[4], const int64_t d[2], std::vector<int64_t>& yd) {
  const int64_t oh = (xd[2] + p[0] + p[2] - d[0] * (k[0] - 1) - 1) / s[0] + 1;
  const int64_t ow = (xd[3] + p[1] + p[3] - d[1] * (k[1] - 1) - 1) / s[1] + 1;
  yd = {xd[0], xd[1] * k[0] * k[1], oh * ow};
  std::vector<double> y;
  for (int64_t n = 0; n < xd[0]; ++n)
    for (int64_t c = 0; c < xd[1]; ++c)
      for (int64_t ky = 0; ky < k[0]; ++ky)
        for (int64_t kx = 0; kx < k[1]; ++kx)
          for (int64_t oy = 0; oy < oh; ++oy)
            for (int64_t ox = 0; ox < ow; ++ox) {
              const int64_t iy = oy * s[0] - p[0] + ky * d[0], ix = ox * s[1] - p[1] + kx * d[1];
              const bool in = iy >= 0 && iy < xd[2] && ix >= 0 && ix < xd[3];
              y.push_back(in ? x[ravel({n, c, iy, ix}, xd)] : 0.0);
            }
  return y;
}

TEST(Im2Col, MatchesReference) {
  const int64_t k[2] = {2, 3}, s[2] = {1, 2}, p[4] = {1, 0, 1, 2}, d[2] = {2, 1};
  for (DType dt : {DType::F32, DType::F16, DType::F64, DType::I64, DType::U8}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor x = random_tensor(dt, {2, 3, 5, 6}, 600, 0, 50);
    ops::Im2Col op;
    op.kernel = {2, 3};
    op.stride = {1, 2};
    op.pads = {1, 0, 1, 2};
    op.dilation = {2, 1};
    std::vector<int64_t> yd;
    const auto ref = ref_im2col(to_doubles(x), x.shape(), k, s, p, d, yd);
    EXPECT_TRUE(all_close(run_op(op, {x}), yd, ref));
  }
}

TEST(Im2Col, UnfoldOrder) {
  // torch.nn.functional.unfold(arange(1, 10).view(1, 1, 3, 3), 2) rows: patches per kernel tap.
  ops::Im2Col op;
  op.kernel = {2, 2};
  const float xv[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const Tensor y = run_op(op, {Tensor::f32({1, 1, 3, 3}, xv)});
  EXPECT_TRUE(all_close(y, {1, 4, 4}, {1, 2, 4, 5, 2, 3, 5, 6, 4, 5, 7, 8, 5, 6, 8, 9}));
}

TEST(Im2Col, BadInputs) {
  ops::Im2Col op;
  op.kernel = {2, 2};
  EXPECT_THAT(build_error(op, {Shape::of({1, 3, 4})}), HasSubstr("rank 4"));
  op.kernel = {2};
  EXPECT_THAT(build_error(op, {Shape::of({1, 1, 4, 4})}), HasSubstr("kernel must have 2 sizes"));
  op.kernel = {5, 2};
  EXPECT_THAT(build_error(op, {Shape::of({1, 1, 4, 4})}), HasSubstr("larger than the padded input 4"));
  op.kernel = {2, 2};
  op.pads = {1, 1};
  EXPECT_THAT(build_error(op, {Shape::of({1, 1, 4, 4})}), HasSubstr("pads"));
}

}  // namespace
}  // namespace rlx
