#pragma once
// Builders of elementwise chains and geometries for the codegen tests (the GLSL checks in
// tests/codegen, the WGSL checks in tests/webgpu).
#include <cstdint>
#include <utility>
#include <vector>

#include "plan/schedule.h"
#include "rlx/ops.h"

namespace rlx::codegen::chain_test {

inline plan::ElementwiseGeom geom(std::vector<int64_t> dims, std::vector<std::vector<int64_t>> strides) {
  plan::ElementwiseGeom g;
  g.out_dims = std::move(dims);
  g.in_strides = std::move(strides);
  g.numel = 1;
  for (int64_t d : g.out_dims) g.numel *= d;
  return g;
}

inline RegionStep act(ActKind k, int32_t a) { return {RegionStepKind::Activation, static_cast<int32_t>(k), DType::F32, {a}}; }
inline RegionStep bin(BinaryKind k, int32_t a, int32_t b) {
  return {RegionStepKind::Binary, static_cast<int32_t>(k), DType::F32, {a, b}};
}
inline RegionStep cmp(CompareKind k, int32_t a, int32_t b) {
  return {RegionStepKind::Compare, static_cast<int32_t>(k), DType::F32, {a, b}};
}
inline RegionStep cast(DType to, int32_t a) { return {RegionStepKind::Cast, 0, to, {a}}; }
inline RegionStep where(int32_t c, int32_t a, int32_t b) { return {RegionStepKind::Where, 0, DType::F32, {c, a, b}}; }

}  // namespace rlx::codegen::chain_test
