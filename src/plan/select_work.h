#pragma once
// The backend-neutral work of the Select, Scan and Scatter families (plan/step_family.h: ArgMax /
// ArgMin, TopK, Sample; Cumsum; ScatterAdd, CacheWrite) and the Random family's claims, for the
// shader-language GPU backends (Vulkan / GLSL, WebGPU / WGSL): the claims, the tiles of each
// kernel (columns per workgroup, chunks of a scan, the kept slots of a ranked gather) and the
// scatter's parameter table. Every kernel here runs 256 invocations per workgroup.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "plan/schedule.h"
#include "rlx/graph.h"

namespace rlx::plan {

inline constexpr uint32_t kSelectWorkgroup = 256;  // invocations per workgroup of every kernel here
inline constexpr int64_t kTopKMax = 1024;          // kept elements sorted in workgroup memory

// What a backend's device offers these claims: f64 arithmetic (Sample's probabilities, Cumsum
// of f32 and Random transforms in double like the CPU) and the workgroup memory (0: unknown, no
// check). `name` is the device's, for messages.
struct SelectDevice {
  bool f64 = true;
  uint64_t shared_bytes = 0;
  std::string name;
};

// The op kinds of the Select, Scan, Scatter and Random families.
bool select_claims_kind(std::string_view op_name);
bool scan_claims_kind(std::string_view op_name);
bool scatter_claims_kind(std::string_view op_name);
bool random_claims_kind(std::string_view op_name);
// The claim checks of a node of those families (`backend`, e.g. "Vulkan", starts each refusal).
// With !dev.f64, f32 Cumsum is claimed only when `f32_scan_without_f64` (the backend sums f32
// another way that rounds as the CPU's double does).
bool select_family_claims_node(std::string_view backend, const SelectDevice& dev, const Graph& g, const Node& n,
                               std::string* why, bool f32_scan_without_f64 = false);

// Workgroup bytes of the ranked gather (TopK, Sample) for p2 slots of `key_bytes` keys (the
// radix counts, the keys and indices, and a scan's slots).
uint64_t radix_shared_bytes(uint32_t p2, uint32_t key_bytes);
// The smallest power of two >= max(n, 2): the sorted slots of a ranked gather keeping n.
uint32_t ranked_slots(int64_t n);
// The kept count of a Sample: top_k when it limits the vocabulary, else the vocabulary.
int64_t sample_kept(const ops::Sample& op, int64_t vocab);

// ArgMax / ArgMin over x [outer, len, inner] -> [outer, inner]: a workgroup takes `ti`
// consecutive columns (inner positions) x 256 / ti lanes along the axis; `tiles` workgroups of
// work in all. rlx::Error for an empty axis with elements to pick, or sizes past 32 bits.
struct ArgReduceWork {
  int64_t outer = 0, len = 0, inner = 0;
  uint32_t ti = 1;
  int64_t tiles = 0;
};
ArgReduceWork arg_reduce_work(const Step& st, std::string_view backend);

// TopK over [outer, len, inner]: one workgroup per line (outer x inner lines), `slots` sorted
// keys in workgroup memory. rlx::Error when k is outside [1, len] or above kTopKMax.
struct TopKWork {
  int64_t outer = 0, len = 0, inner = 0, k = 0;
  uint32_t slots = 2;
  bool largest = true;
};
TopKWork topk_work(const Step& st, std::string_view backend);

// Cumsum's chunked scan of [outer, len, inner]: a workgroup scans a tile of `ti` columns x `ch`
// axis positions (256 / ti lanes of `seg` positions); an axis of more than one chunk takes the
// chunk totals, their exclusive scan (the same decomposition over [outer, nch, inner]) and the
// chunks again with their carries.
struct ScanWork {
  int64_t outer = 0, len = 0, inner = 0;
  uint32_t ti = 1, seg = 8;
  int64_t ch = 0, nch = 0;
  int64_t tiles(int64_t chunks) const { return outer * chunks * ((inner + ti - 1) / ti); }
};
// `acc_bytes`: the accumulator's size (8-byte accumulators take shorter segments).
ScanWork scan_work(int64_t outer, int64_t len, int64_t inner, uint32_t acc_bytes);

// ScatterAdd: out = data, then the updates added in index order. An index position (o, m, j)
// (o: its coordinates before the axis, m on it, j after) writes out's element with o's and j's
// coordinates and the index on the axis, so index columns (o, j) never collide: by column, one
// invocation per column walks m; by destination (few columns on a short data axis), one per
// (column, axis position) walks the column's indices and adds the updates aimed at it.
struct ScatterAddWork {
  int64_t rank = 0, axis = 0, axis_size = 0, mid = 0, inner = 1, outer = 1, count = 0;
  bool by_dest = false;
  int64_t items = 0;  // invocations of work
  std::vector<int64_t> idx_dims, data_strides;
  // rank, axis, axis_size, mid, inner, outer, by_dest, then the index dims (8, padded with 1)
  // and data's element strides (8, padded with 0).
  std::vector<uint32_t> params() const;
};
ScatterAddWork scatter_add_work(const Step& st, std::string_view backend);

// RngUniform's clamp bounds (the CPU kernel's): the smallest value of float dtype t >= low and
// the largest < high, as doubles; rlx::Error starting with `what` when t has no value in
// [low, high).
struct UniformBounds {
  double lo = 0, hi = 0;
};
UniformBounds rng_uniform_bounds(DType t, double low, double high, const std::string& what);

// RngUniform's value low + (high - low) * (r * 2^-32) computed in double as the CPU does, when
// that computation is exact for every 32-bit r: the value is then (a + b * r) * 2^e exactly,
// with |a| + b * (2^32 - 1) < 2^53 (so a shader can compute it in 64-bit integers and round it
// once to f32). nullopt when a rounding of the double computation would have to be emulated
// (the width's significand needs more than 21 bits, or low and the width are too far apart), or
// when the values leave the f32 normal range (e outside [-126, 74]).
struct ExactUniform {
  int64_t a = 0;
  uint32_t b = 0;
  int e = 0;
};
std::optional<ExactUniform> rng_uniform_exact(double low, double high);

// rlx::Error naming `what` when `n` does not fit the kernels' 32-bit indices.
void select_require_32bit(const std::string& what, std::string_view backend, int64_t n, const std::string& of);

}  // namespace rlx::plan
