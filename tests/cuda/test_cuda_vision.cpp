// Resize and Im2Col on CUDA: no kernel of their own, they run as the shared legalize's
// decomposition (Gathers, a Pad, a lerp), which leaves only ops CUDA claims. Their parity with the
// CPU kernels is the shared case list (tests/parity: resize_*, im2col_*).
#include <string>
#include <vector>

#include "backends/cuda/lower.h"
#include "cuda/cuda_test_util.h"
#include "passes/legalize.h"

namespace {

using namespace rlx;
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

}  // namespace
