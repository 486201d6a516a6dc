// CompiledGraph::set_param: a copy of a tensor someone else still holds (the caller may change
// it afterwards), the tensor itself when it is the only handle to its bytes (no copy of large
// weights; Generator gives its weights this way).
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "rlx/rlx.h"

namespace rlx {
namespace {

CompiledGraph add_param_graph() {
  Graph g;
  g.add_output(g.add(g.input("x", Shape::of({4})), g.param("w", Shape::of({4}))));
  return Session(Device::Cpu).compile(g);
}

std::vector<float> run(CompiledGraph& cg) {
  return cg.run({{"x", Tensor::f32({4}, std::vector<float>{1, 1, 1, 1})}}).at(0).to_f32();
}

TEST(SetParam, CopiesWhatOthersHoldAndTakesWhatItIsGiven) {
  CompiledGraph cg = add_param_graph();
  Tensor w = Tensor::f32({4}, std::vector<float>{1, 2, 3, 4});
  cg.set_param("w", w);  // an lvalue: copied
  w.data<float>()[0] = 100;
  EXPECT_EQ(run(cg), (std::vector<float>{2, 3, 4, 5}));

  Tensor shared = Tensor::f32({4}, std::vector<float>{5, 6, 7, 8});
  Tensor other = shared;  // a second handle to the same bytes
  EXPECT_FALSE(shared.owns_alone());
  cg.set_param("w", std::move(shared));  // not alone: still copied, `shared` left as it was
  EXPECT_FALSE(shared.is_borrowed());  // NOLINT(bugprone-use-after-move): it kept its bytes
  other.data<float>()[0] = 100;
  EXPECT_EQ(run(cg), (std::vector<float>{6, 7, 8, 9}));

  Tensor mine = Tensor::f32({4}, std::vector<float>{10, 20, 30, 40});
  EXPECT_TRUE(mine.owns_alone());
  cg.set_param("w", std::move(mine));  // taken as is: `mine` is moved from, its bytes the param's
  EXPECT_TRUE(mine.is_borrowed());  // NOLINT(bugprone-use-after-move): checking that it was taken
  EXPECT_EQ(run(cg), (std::vector<float>{11, 21, 31, 41}));

  // The checks hold for both forms.
  EXPECT_THROW(cg.set_param("w", Tensor::f32({3}, std::vector<float>{1, 2, 3})), Error);
  EXPECT_THROW(cg.set_param("nope", Tensor::f32({4}, std::vector<float>{1, 2, 3, 4})), Error);
  Tensor borrowed_src = Tensor::f32({4}, std::vector<float>{0, 0, 0, 1});
  Tensor borrowed = Tensor::borrow(DType::F32, {4}, borrowed_src.raw());
  EXPECT_FALSE(borrowed.owns_alone());
  cg.set_param("w", std::move(borrowed));  // borrowed bytes: copied
  borrowed_src.data<float>()[3] = 100;
  EXPECT_EQ(run(cg), (std::vector<float>{1, 1, 1, 2}));
}

}  // namespace
}  // namespace rlx
