// The BERT encoder layer of src/models on CUDA under the TF32 policy, within the policy's
// tolerance. Exact-f32 and bf16/f16 parity of the models is the shared case list (tests/parity:
// bert_layer_*, llama_block_*, transformer_demo_f32).
#include "cuda/cuda_test_util.h"
#include "parity/parity_cases.h"

namespace {

using namespace rlx;

TEST(CudaModels, BertLayerTf32WithinPolicyTolerance) {
  RLX_REQUIRE_CUDA();
  rlx::testing::CaseGraph c = rlx::testing::bert_layer_case(DType::F32);
  c.options.tolerance = [](DType) { return rlx::testing::Tolerance{1e-3, 1e-3}; };
  const auto rep = rlx::testing::cuda_parity(c.graph, Precision::Tf32, c.options);
  EXPECT_TRUE(rep.pass) << rep.text;
}

}  // namespace
