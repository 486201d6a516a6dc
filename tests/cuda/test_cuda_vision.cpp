// Resize and Im2Col on CUDA: no kernel of their own, they run as the shared legalize's
// decomposition (Gathers, a Pad, a lerp) and must match the CPU kernels (shared parity harness).
// Skipped with the reason printed when no CUDA device is present.
#include <string>
#include <vector>

#include "backends/cuda/lower.h"
#include "cuda/cuda_test_util.h"
#include "passes/legalize.h"

namespace {

using namespace rlx;
using rlx::testing::expect_cuda_parity;
using rlx::testing::kCudaFloats;

std::vector<Dim> dims_of(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

// Without a device: CUDA has no Resize or Im2Col kernel, and the legalize leaves none of either,
// only ops CUDA claims.
TEST(CudaVisionClaims, ResizeAndIm2ColLegalizeToClaimedOps) {
  Graph g;
  const Value x = g.input("x", Shape::of({2, 3, 8, 10}, DType::BF16));
  ops::Resize lin;
  lin.mode = ResizeMode::Linear, lin.scales = {1, 1, 2, 1.5};
  ops::Resize near;
  near.sizes = {2, 3, 5, 5};
  ops::Im2Col cols;
  cols.kernel = {3, 3}, cols.pads = {1, 1, 1, 1};
  g.add_output(g.apply(lin, {x}));
  g.add_output(g.apply(near, {x}));
  g.add_output(g.apply(cols, {x}));
  const passes::ClaimFn claims = [](const Graph& gg, const Node& n) { return cuda::cuda_claims_node(gg, n, nullptr); };
  for (const char* kind : {"resize", "im2col"}) EXPECT_FALSE(cuda::cuda_claims_kind(kind)) << kind;
  const Graph l = passes::legalize(g, claims, "cuda");
  for (const Node& n : l.nodes()) {
    EXPECT_NE(op_name(n.op), std::string("resize"));
    EXPECT_NE(op_name(n.op), std::string("im2col"));
    EXPECT_TRUE(claims(l, n)) << node_label(n);
  }
}

TEST(CudaVision, ResizeNearestAndLinearEveryCoord) {
  RLX_REQUIRE_CUDA();
  struct Case {
    std::vector<int64_t> x;
    std::vector<double> scales;
    std::vector<int64_t> sizes;
  };
  const std::vector<Case> cases = {{{2, 3, 17, 24}, {1, 1, 2, 2}, {}},   // a 2x upsample of an image batch
                                   {{1, 4, 30, 22}, {}, {1, 4, 11, 16}},  // a downsample to sizes
                                   {{3, 40}, {1, 1.75}, {}}};
  const ResizeCoord coords[] = {ResizeCoord::HalfPixel, ResizeCoord::Asymmetric, ResizeCoord::AlignCorners,
                                ResizeCoord::PytorchHalfPixel};
  for (const Case& c : cases)
    for (ResizeMode mode : {ResizeMode::Nearest, ResizeMode::Linear})
      for (ResizeCoord coord : coords)
        for (DType t : kCudaFloats) {
          SCOPED_TRACE(std::string(enum_name(mode)) + " " + enum_name(coord) + " " + dims_str(c.x) + " " +
                       dtype_name(t));
          ops::Resize op;
          op.mode = mode, op.coord = coord, op.scales = c.scales, op.sizes = c.sizes;
          Graph g;
          g.add_output(g.apply(op, {g.input("x", Shape(dims_of(c.x), t))}));
          expect_cuda_parity(g);
        }
  // Nearest moves any dtype.
  for (DType t : {DType::I32, DType::I64, DType::Bool}) {
    ops::Resize op;
    op.nearest = NearestRound::Floor, op.sizes = {7, 9};
    Graph g;
    g.add_output(g.apply(op, {g.input("x", Shape::of({4, 5}, t))}));
    expect_cuda_parity(g);
  }
}

TEST(CudaVision, Im2ColStridesPadsDilations) {
  RLX_REQUIRE_CUDA();
  struct Case {
    std::vector<int64_t> x, kernel, stride, pads, dilation;
  };
  const std::vector<Case> cases = {{{2, 3, 16, 16}, {3, 3}, {}, {1, 1, 1, 1}, {}},
                                   {{1, 8, 15, 12}, {2, 3}, {2, 1}, {1, 0, 2, 1}, {}},
                                   {{2, 2, 20, 18}, {3, 2}, {1, 2}, {0, 1, 1, 0}, {2, 3}}};
  for (const Case& c : cases)
    for (DType t : kCudaFloats) {
      SCOPED_TRACE(dims_str(c.x) + " " + dtype_name(t));
      ops::Im2Col op;
      op.kernel = c.kernel, op.stride = c.stride, op.pads = c.pads, op.dilation = c.dilation;
      Graph g;
      g.add_output(g.apply(op, {g.input("x", Shape(dims_of(c.x), t))}));
      expect_cuda_parity(g);
    }
}

}  // namespace
