// Gather and ScatterAdd against naive double references (ArgMax/ArgMin, TopK and Cumsum
// are in test_indexing_select.cpp).
#include <cmath>
#include <cstdint>
#include <vector>

#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using testing::error_message;
using testing::from_doubles;
using testing::random_tensor;
using testing::run_cpu1;
using testing::to_doubles;

const DType kAll[] = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I8,  DType::I16,
                      DType::I32, DType::I64, DType::U8,   DType::U32, DType::Bool};
const DType kIndexTypes[] = {DType::I8, DType::I16, DType::I32, DType::I64, DType::U8, DType::U32};

using testing::ravel;
using testing::unravel;
int64_t wrap(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

// ---- Gather -------------------------------------------------------------------------
struct GatherRef {
  std::vector<int64_t> dims;
  std::vector<double> values;
};
GatherRef ref_gather(const std::vector<double>& data, const std::vector<int64_t>& dd, const std::vector<double>& idx,
                     const std::vector<int64_t>& idims, int64_t axis) {
  GatherRef r;
  r.dims.assign(dd.begin(), dd.begin() + axis);
  r.dims.insert(r.dims.end(), idims.begin(), idims.end());
  r.dims.insert(r.dims.end(), dd.begin() + axis + 1, dd.end());
  const size_t ri = idims.size();
  for (int64_t o = 0; o < product(r.dims); ++o) {
    const std::vector<int64_t> u = unravel(o, r.dims);
    std::vector<int64_t> di(u.begin(), u.begin() + axis);
    const std::vector<int64_t> iu(u.begin() + axis, u.begin() + axis + static_cast<int64_t>(ri));
    di.push_back(wrap(static_cast<int64_t>(idx[static_cast<size_t>(ravel(iu, idims))]), dd[static_cast<size_t>(axis)]));
    di.insert(di.end(), u.begin() + axis + static_cast<int64_t>(ri), u.end());
    r.values.push_back(data[static_cast<size_t>(ravel(di, dd))]);
  }
  return r;
}

Tensor run_gather(const Tensor& data, const Tensor& idx, int64_t axis) {
  Graph g;
  Value x = g.input("x", data.shape_info());
  Value i = g.input("i", idx.shape_info());
  g.add_output(g.gather(x, i, axis));
  return run_cpu1(g, {{"x", data}, {"i", idx}});
}

void check_gather(DType dt, DType it, const std::vector<int64_t>& dd, const std::vector<int64_t>& idims,
                  const std::vector<double>& idx, int64_t axis, uint64_t seed) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " idx " + dtype_name(it) + " axis " + std::to_string(axis));
  const Tensor data = random_tensor(dt, dd, seed, -50, 50);
  const Tensor it_t = from_doubles(it, idims, idx);
  const int64_t a = axis < 0 ? axis + static_cast<int64_t>(dd.size()) : axis;
  const GatherRef ref = ref_gather(to_doubles(data), dd, idx, idims, a);
  const Tensor out = run_gather(data, it_t, axis);
  EXPECT_EQ(out.dtype(), dt);
  // Gather copies bits: exact for every dtype.
  EXPECT_TRUE(testing::all_close(out, ref.dims, ref.values, {0, 0}));
}

TEST(Indexing, GatherEveryDataDtypeNegativeIndices) {
  for (DType dt : kAll) check_gather(dt, DType::I64, {5, 3}, {2, 2}, {0, -1, 4, -5}, 0, 1);
}

TEST(Indexing, GatherEveryIndexDtype) {
  for (DType it : kIndexTypes) check_gather(DType::F32, it, {3, 6}, {4}, {5, 0, 2, 5}, 1, 2);
  // Signed index dtypes also take negative values.
  for (DType it : {DType::I8, DType::I16, DType::I32, DType::I64})
    check_gather(DType::F32, it, {3, 6}, {4}, {-6, -1, 2, -3}, -1, 3);
}

TEST(Indexing, GatherMultiDimIndicesInnerAxis) {
  // axis -2 of a rank-3 tensor with 2-d indices: out [2, 2, 3, 3].
  check_gather(DType::F32, DType::I32, {2, 4, 3}, {2, 3}, {0, -1, 3, -4, 2, 1}, -2, 4);
  check_gather(DType::F64, DType::I64, {2, 4, 3}, {3, 1, 2}, {0, 1, -1, 2, -3, 0}, 2, 5);
  check_gather(DType::BF16, DType::I64, {1, 4, 1}, {2, 2}, {3, 3, 0, -4}, 1, 6);
}

TEST(Indexing, GatherScalarIndexRemovesAxis) {
  const Tensor data = random_tensor(DType::F32, {3, 4, 2}, 7);
  const Tensor idx = Tensor::scalar_i64(-2);
  const Tensor out = run_gather(data, idx, 1);
  const GatherRef ref = ref_gather(to_doubles(data), {3, 4, 2}, {-2}, {}, 1);
  EXPECT_EQ(ref.dims, (std::vector<int64_t>{3, 2}));
  EXPECT_TRUE(testing::all_close(out, {3, 2}, ref.values, {0, 0}));
}

TEST(Indexing, GatherZeroSize) {
  // Empty indices -> empty axis.
  check_gather(DType::F32, DType::I64, {3, 4}, {0}, {}, 1, 8);
  check_gather(DType::F32, DType::I64, {3, 4}, {2, 0}, {}, 0, 9);
  // Empty outer dim: indices still validated, output empty.
  check_gather(DType::F32, DType::I32, {0, 4}, {3}, {1, -1, 0}, 1, 10);
  const Tensor data = Tensor::zeros(DType::F32, {0, 4});
  EXPECT_THAT(error_message([&] { run_gather(data, from_doubles(DType::I64, {1}, {4}), 1); }),
              HasSubstr("index 4 is out of range"));
  // Gathering from an empty axis: any index is out of range.
  EXPECT_THAT(error_message([&] { run_gather(Tensor::zeros(DType::F32, {2, 0}), from_doubles(DType::I64, {1}, {0}), 1); }),
              HasSubstr("axis is empty"));
}

TEST(Indexing, GatherSymbolicDimsPassThrough) {
  const Shape data({Dim::symbol("b"), 7, 3}, DType::F16);
  const Shape idx({Dim::symbol("s")}, DType::I32);
  const std::vector<Shape> out = ops::Gather{1}.infer(std::vector<Shape>{data, idx});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], Shape({Dim::symbol("b"), Dim::symbol("s"), 3}, DType::F16));
}

TEST(Indexing, GatherBadInputs) {
  Graph g;
  Value x = g.input("x", Shape::of({5, 3}));
  Value fi = g.input("fi", Shape::of({2}, DType::F32));
  Value bi = g.input("bi", Shape::of({2}, DType::Bool));
  Value ii = g.input("ii", Shape::of({2}, DType::I64));
  EXPECT_THAT(error_message([&] { g.gather(x, fi, 0); }), HasSubstr("integer dtype"));
  EXPECT_THAT(error_message([&] { g.gather(x, bi, 0); }), HasSubstr("integer dtype"));
  EXPECT_THAT(error_message([&] { g.gather(x, ii, 2); }), HasSubstr("axis 2 is out of range"));
  EXPECT_THAT(error_message([&] { g.gather(x, ii, -3); }), HasSubstr("f32[5,3]"));
  Value s = g.input("s", Shape::of({}));
  EXPECT_THAT(error_message([&] { g.gather(s, ii, 0); }), HasSubstr("scalar"));

  const Tensor data = random_tensor(DType::F32, {5, 3}, 11);
  const std::string m1 = error_message([&] { run_gather(data, from_doubles(DType::I64, {3}, {0, 5, 1}), 0); });
  EXPECT_THAT(m1, HasSubstr("gather"));
  EXPECT_THAT(m1, HasSubstr("index 5 is out of range for axis 0 of size 5"));
  EXPECT_THAT(m1, HasSubstr("[-5, 4]"));
  EXPECT_THAT(error_message([&] { run_gather(data, from_doubles(DType::I32, {2}, {-6, 0}), 0); }),
              HasSubstr("index -6"));
  EXPECT_THAT(error_message([&] { run_gather(data, from_doubles(DType::U8, {1}, {3}), 1); }), HasSubstr("index 3"));
}

// ---- ScatterAdd ------------------------------------------------------------------------
std::vector<double> ref_scatter_add(std::vector<double> data, const std::vector<int64_t>& dd,
                                    const std::vector<double>& idx, const std::vector<int64_t>& idims,
                                    const std::vector<double>& upd, int64_t axis) {
  for (int64_t p = 0; p < product(idims); ++p) {
    std::vector<int64_t> q = unravel(p, idims);
    q[static_cast<size_t>(axis)] = wrap(static_cast<int64_t>(idx[static_cast<size_t>(p)]), dd[static_cast<size_t>(axis)]);
    data[static_cast<size_t>(ravel(q, dd))] += upd[static_cast<size_t>(p)];
  }
  return data;
}

Tensor run_scatter(const Tensor& data, const Tensor& idx, const Tensor& upd, int64_t axis) {
  Graph g;
  Value x = g.input("x", data.shape_info());
  Value i = g.input("i", idx.shape_info());
  Value u = g.input("u", upd.shape_info());
  g.add_output(g.scatter_add(x, i, u, axis));
  return run_cpu1(g, {{"x", data}, {"i", idx}, {"u", upd}});
}

// Random indices in [-n, n) for axis size n (duplicates likely).
std::vector<double> random_indices(int64_t count, int64_t n, uint64_t seed) {
  const std::vector<double> r = to_doubles(random_tensor(DType::F64, {count}, seed, 0, 1));
  std::vector<double> out;
  for (double v : r) out.push_back(std::floor(v * 2 * static_cast<double>(n)) - static_cast<double>(n));
  return out;
}

void check_scatter(DType dt, DType it, const std::vector<int64_t>& dd, const std::vector<int64_t>& idims, int64_t axis,
                   uint64_t seed) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " idx " + dtype_name(it) + " axis " + std::to_string(axis));
  const int64_t a = axis < 0 ? axis + static_cast<int64_t>(dd.size()) : axis;
  const bool is_int_t = is_int(dt);
  const Tensor data = random_tensor(dt, dd, seed, is_int_t ? 0 : -4, is_int_t ? 10 : 4);
  const Tensor upd = random_tensor(dt, idims, seed + 1, is_int_t ? 0 : -4, is_int_t ? 10 : 4);
  std::vector<double> idx = random_indices(product(idims), dd[static_cast<size_t>(a)], seed + 2);
  if (!is_signed_int(it))
    for (double& v : idx) v = wrap(static_cast<int64_t>(v), dd[static_cast<size_t>(a)]);
  const Tensor idx_t = from_doubles(it, idims, idx);
  std::vector<double> ref = ref_scatter_add(to_doubles(data), dd, idx, idims, to_doubles(upd), a);
  const Tensor out = run_scatter(data, idx_t, upd, axis);
  if (dt == DType::I8) {  // wraps in the dtype's width
    for (double& v : ref) v = static_cast<double>(static_cast<int8_t>(static_cast<int64_t>(v)));
  }
  if (dt == DType::U8) {
    for (double& v : ref) v = static_cast<double>(static_cast<uint8_t>(static_cast<int64_t>(v)));
  }
  // f16/bf16 round after every addition.
  const testing::Tolerance tol = dt == DType::F16 ? testing::Tolerance{4e-3, 1e-2}
                                 : dt == DType::BF16 ? testing::Tolerance{3e-2, 6e-2}
                                                     : testing::default_tolerance(dt);
  EXPECT_TRUE(testing::all_close(out, dd, ref, tol));
}

TEST(Indexing, ScatterAddEveryDtype) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I8, DType::I16, DType::I32, DType::I64,
                   DType::U8, DType::U32})
    check_scatter(dt, DType::I64, {4, 5}, {6, 5}, 0, 20);
}

TEST(Indexing, ScatterAddAxesAndIndexDtypes) {
  check_scatter(DType::F32, DType::I32, {4, 5}, {4, 3}, 1, 21);        // fewer columns than data
  check_scatter(DType::F32, DType::I64, {3, 4, 5}, {2, 3, 7}, -1, 22);  // smaller non-axis dims
  check_scatter(DType::F64, DType::I16, {3, 4, 5}, {3, 6, 2}, 1, 23);
  check_scatter(DType::F32, DType::U8, {3, 4, 5}, {5, 4, 5}, 0, 24);
  check_scatter(DType::F32, DType::I8, {6}, {10}, 0, 25);
  check_scatter(DType::F32, DType::U32, {2, 1100}, {2, 1100}, 1, 26);  // inner blocks
  check_scatter(DType::F32, DType::I64, {3, 1100}, {5, 1030}, 0, 27);
}

TEST(Indexing, ScatterAddIntegerWrapAndExactValues) {
  // i8: 100 + 100 wraps to -56; duplicate indices accumulate.
  const Tensor data = from_doubles(DType::I8, {3}, {100, 0, -128});
  const Tensor idx = from_doubles(DType::I64, {4}, {0, 2, -1, 1});
  const Tensor upd = from_doubles(DType::I8, {4}, {100, -1, -1, 5});
  EXPECT_TRUE(testing::all_close(run_scatter(data, idx, upd, 0), {3}, {-56, 5, 126}, {0, 0}));
}

TEST(Indexing, ScatterAddZeroSize) {
  const Tensor data = random_tensor(DType::F32, {3, 4}, 30);
  const Tensor out = run_scatter(data, Tensor::zeros(DType::I64, {0, 4}), Tensor::zeros(DType::F32, {0, 4}), 0);
  EXPECT_TRUE(testing::all_close(out, {3, 4}, to_doubles(data), {0, 0}));
  const Tensor e = run_scatter(Tensor::zeros(DType::F32, {0, 4}), Tensor::zeros(DType::I64, {0, 2}),
                               Tensor::zeros(DType::F32, {0, 2}), 1);
  EXPECT_EQ(e.shape(), (std::vector<int64_t>{0, 4}));
}

TEST(Indexing, ScatterAddBadInputs) {
  Graph g;
  Value x = g.input("x", Shape::of({4, 5}));
  Value i = g.input("i", Shape::of({2, 5}, DType::I64));
  Value u = g.input("u", Shape::of({2, 5}));
  EXPECT_THAT(error_message([&] { g.scatter_add(x, g.input("fi", Shape::of({2, 5})), u, 0); }),
              HasSubstr("integer dtype"));
  EXPECT_THAT(error_message([&] { g.scatter_add(x, i, g.input("u2", Shape::of({2, 4})), 0); }),
              HasSubstr("must have the shape of indices"));
  EXPECT_THAT(error_message([&] { g.scatter_add(x, i, g.input("u3", Shape::of({2, 5}, DType::F64)), 0); }),
              HasSubstr("dtype of data"));
  EXPECT_THAT(error_message([&] {
                g.scatter_add(x, g.input("i3", Shape::of({10}, DType::I64)), g.input("u4", Shape::of({10})), 0);
              }),
              HasSubstr("rank of data"));
  EXPECT_THAT(error_message([&] {
                g.scatter_add(x, g.input("i4", Shape::of({2, 6}, DType::I64)), g.input("u5", Shape::of({2, 6})), 0);
              }),
              HasSubstr("exceeds data f32[4,5]"));
  EXPECT_THAT(error_message([&] { g.scatter_add(x, i, u, 2); }), HasSubstr("axis 2 is out of range"));
  Value bx = g.input("bx", Shape::of({4, 5}, DType::Bool));
  EXPECT_THAT(error_message([&] { g.scatter_add(bx, i, g.input("bu", Shape::of({2, 5}, DType::Bool)), 0); }),
              HasSubstr("bool"));
  // Along the axis the indices may be longer than data (the size is not constrained).
  EXPECT_NO_THROW(g.scatter_add(x, g.input("i5", Shape::of({9, 5}, DType::I64)), g.input("u6", Shape::of({9, 5})), 0));

  const Tensor data = random_tensor(DType::F32, {4, 5}, 31);
  const Tensor upd = random_tensor(DType::F32, {1, 2}, 32);
  const std::string m = error_message([&] { run_scatter(data, from_doubles(DType::I32, {1, 2}, {1, 5}), upd, 1); });
  EXPECT_THAT(m, HasSubstr("index 5 is out of range for axis 1 of size 5"));
  EXPECT_THAT(m, HasSubstr("scatter_add"));
  EXPECT_THAT(error_message([&] { run_scatter(data, from_doubles(DType::I32, {1, 2}, {-5, -6}), upd, 1); }),
              HasSubstr("index -6"));
}

}  // namespace
}  // namespace rlx
