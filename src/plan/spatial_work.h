#pragma once
// The backend-neutral work of a Spatial-family step (plan/step_family.h: Conv, ConvTranspose,
// Pool, Resize, Im2Col) for the shader-language GPU backends (Vulkan / GLSL, WebGPU / WGSL):
// the window geometry lifted to three spatial dims (so one kernel per variant serves every
// shape), the kernel choice of a convolution, the 32-bit parameter table each kernel reads after
// its operand offsets, the Resize source tables, the 32-bit index checks and the claims.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "plan/schedule.h"
#include "rlx/graph.h"

namespace rlx::plan {

// A sliding-window geometry over three spatial dims (missing leading dims: size 1, kernel 1,
// stride 1, pad 0, dilation 1).
struct Window3 {
  std::array<int64_t, 3> in{1, 1, 1}, out{1, 1, 1}, k{1, 1, 1}, stride{1, 1, 1};
  std::array<int64_t, 3> pad{0, 0, 0}, pad_end{0, 0, 0}, dil{1, 1, 1};
};

// Conv / ConvTranspose. For Conv `win.in` is x's grid and `win.out` y's, cg the input channels
// of a group, w (Cout, cg, k..); for ConvTranspose the same names hold with cg = Cin / groups,
// w (Cin, coutg, k..), and output position o reads input i where o = i * stride - pad + kk * dil.
struct ConvWork {
  bool transposed = false, bias = false;
  Window3 win;
  int64_t n = 0, cin = 0, cg = 0, cout = 0, coutg = 0, groups = 1;
  // An implicit GEMM per group of (16 * tm) output channels x 64 output columns (n, position)
  // per workgroup, K = cg x window in chunks of 16, when a group has at least 8 output channels;
  // else a direct kernel (one invocation per output element: depthwise, small multipliers).
  bool gemm = false;
  int tm = 1;
  // n, cin, cg, cout, coutg, groups, then in, out, k, stride, pad, dil (3 each; i32 bits).
  std::vector<uint32_t> params() const;
  // The GEMM's workgroups before any grid limit: column tiles (x), channel tiles (y), groups (z).
  std::array<int64_t, 3> gemm_tiles() const;
};
ConvWork conv_work(const Step& st, std::string_view backend);

// Pool (max / average): one output element per invocation.
struct PoolWork {
  Window3 win;
  int64_t planes = 0;  // N * C
  bool is_max = true, count_pad = false;
  // planes, then in, out, k, stride, pad, pad_end, dil (3 each; i32 bits).
  std::vector<uint32_t> params() const;
};
PoolWork pool_work(const Step& st, std::string_view backend);

// Resize through per-axis tables (plan::resize_axis_table, the CPU's): for each axis in order,
// out_dims[axis] entries of `entry_words` words: lo, hi and the weight of hi (one f32 word, or
// the two words (low, high) of a double with f64_weights).
struct ResizeWork {
  bool linear = false;
  int rank = 0;
  int entry_words = 3;
  std::vector<uint32_t> table;
  std::vector<uint32_t> params;  // total, out dims (rank), x's element strides (rank)
};
ResizeWork resize_work(const Step& st, bool f64_weights, std::string_view backend);

// Im2Col (torch unfold order): y (N, C*kh*kw, oh*ow) from x (N, C, H, W).
struct Im2ColWork {
  std::vector<uint32_t> params;  // total, H, W, oh, ow, kh, kw, s0, s1, p0, p1, d0, d1
};
Im2ColWork im2col_work(const Step& st, std::string_view backend);

// rlx::Error naming the step when an operand (or `extra`, a derived extent) does not fit the
// kernels' 32-bit signed indices.
void spatial_index_check(const Step& st, std::string_view backend, int64_t extra = 0);

// The op kinds the spatial kernels take, and the dtype / rank checks they share (`backend`
// starts each refusal): Conv / ConvTranspose of floats (ConvTranspose 2-d), max pools of floats
// and integers, average pools of floats, nearest Resize of any dtype and linear of floats,
// Im2Col of any dtype; every operand but Resize's in x's dtype.
bool spatial_claims_kind(std::string_view op_name);
bool spatial_claims_node(std::string_view backend, const Graph& g, const Node& n, std::string* why);

}  // namespace rlx::plan
