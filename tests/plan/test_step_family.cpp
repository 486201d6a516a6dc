// StepFamily: every op kind has one family, found the same way from the op and from its name.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>

#include "plan/step_family.h"

namespace rlx {
namespace {

template <size_t... I>
void expect_name_agrees(std::index_sequence<I...>) {
  (
      [] {
        using T = std::variant_alternative_t<I, Op>;
        const Op op = T{};
        EXPECT_EQ(plan::step_family(std::string_view(T::kName)), std::optional(plan::step_family(op))) << T::kName;
      }(),
      ...);
}

TEST(StepFamily, NameAndOpAgreeForEveryKind) {
  expect_name_agrees(std::make_index_sequence<std::variant_size_v<Op>>{});
  EXPECT_EQ(plan::step_family(std::string_view("no_such_op")), std::nullopt);
}

TEST(StepFamily, KindsOfEachFamily) {
  using plan::StepFamily;
  auto fam = [](const char* name) { return plan::step_family(std::string_view(name)).value(); };
  EXPECT_EQ(fam("param"), StepFamily::Leaf);
  EXPECT_EQ(fam("elementwise_region"), StepFamily::Elementwise);
  EXPECT_EQ(fam("cast"), StepFamily::Elementwise);
  EXPECT_EQ(fam("fused_matmul_bias_act"), StepFamily::Matmul);
  EXPECT_EQ(fam("grouped_matmul"), StepFamily::Matmul);
  EXPECT_EQ(fam("dequant_matmul"), StepFamily::Matmul);
  EXPECT_EQ(fam("matmul_integer"), StepFamily::Matmul);
  EXPECT_EQ(fam("reduce"), StepFamily::Rows);
  EXPECT_EQ(fam("fused_residual_rms_norm"), StepFamily::Rows);
  EXPECT_EQ(fam("pad"), StepFamily::Copy);
  EXPECT_EQ(fam("gather"), StepFamily::Copy);
  EXPECT_EQ(fam("rope"), StepFamily::Rope);
  EXPECT_EQ(fam("fused_transformer_layer"), StepFamily::Attention);
  EXPECT_EQ(fam("sample"), StepFamily::Select);
  EXPECT_EQ(fam("cumsum"), StepFamily::Scan);
  EXPECT_EQ(fam("scatter_add"), StepFamily::Scatter);
  EXPECT_EQ(fam("rng_normal"), StepFamily::Random);
  EXPECT_EQ(fam("conv_transpose"), StepFamily::Spatial);
  EXPECT_EQ(fam("conv_integer"), StepFamily::Spatial);
  EXPECT_EQ(fam("while"), StepFamily::Control);
  EXPECT_EQ(fam("recurrent"), StepFamily::Control);
}

TEST(StepFamily, NamesAreDistinct) {
  std::set<std::string> names;
  for (int f = 0; f <= static_cast<int>(plan::StepFamily::Control); ++f)
    names.insert(plan::family_name(static_cast<plan::StepFamily>(f)));
  EXPECT_EQ(names.size(), static_cast<size_t>(plan::StepFamily::Control) + 1);
  EXPECT_EQ(names.count("?"), 0u);
}

}  // namespace
}  // namespace rlx
