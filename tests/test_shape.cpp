#include "support/test_util.h"

using namespace rlx;

TEST(ShapeCore, BroadcastStaticAndSymbolic) {
  auto r = broadcast_dims(std::vector<Dim>{Dim(3), Dim(1)}, std::vector<Dim>{Dim(4)});
  ASSERT_TRUE(r);
  EXPECT_EQ(Shape(*r).str(), "f32[3,4]");
  auto s = broadcast_dims(std::vector<Dim>{Dim::symbol("batch"), Dim(1)}, std::vector<Dim>{Dim(1), Dim(5)});
  ASSERT_TRUE(s);
  EXPECT_EQ(Shape(*s).str(), "f32[batch,5]");
  EXPECT_FALSE(broadcast_dims(std::vector<Dim>{Dim(3)}, std::vector<Dim>{Dim(4)}));
  EXPECT_FALSE(broadcast_dims(std::vector<Dim>{Dim::symbol("a")}, std::vector<Dim>{Dim::symbol("b")}));
  EXPECT_EQ(broadcast_dims(std::vector<int64_t>{2, 1, 4}, std::vector<int64_t>{3, 1}),
            (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(broadcast_dims(std::vector<int64_t>{0, 1}, std::vector<int64_t>{1, 5}), (std::vector<int64_t>{0, 5}));
  EXPECT_THAT(rlx::testing::error_message([] { broadcast_dims(std::vector<int64_t>{2}, std::vector<int64_t>{3}); }),
              ::testing::HasSubstr("do not broadcast"));
}

TEST(ShapeCore, AxisAndNumel) {
  EXPECT_EQ(normalize_axis(-1, 3, "x"), 2);
  EXPECT_EQ(normalize_axis(0, 3, "x"), 0);
  EXPECT_THAT(rlx::testing::error_message([] { normalize_axis(3, 3, "softmax"); }),
              ::testing::HasSubstr("softmax: axis 3 is out of range for rank 3"));
  Shape s({Dim(2), Dim::symbol("seq")}, DType::F16);
  EXPECT_FALSE(s.is_static());
  EXPECT_THAT(rlx::testing::error_message([&] { s.numel(); }), ::testing::HasSubstr("seq"));
  EXPECT_EQ(Shape::of({2, 3}, DType::I64).nbytes(), 48);
  EXPECT_EQ(contiguous_strides({2, 3, 4}), (std::vector<int64_t>{12, 4, 1}));
}
