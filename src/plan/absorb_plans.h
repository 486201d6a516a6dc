#pragma once
// Absorption plans over a Schedule: which producer steps a consumer step computes itself (so the
// producer is not run) or which neighbouring steps run in one launch. Backend-neutral: each
// plan checks the dataflow (AbsorbIndex) and the shapes; what a backend's kernels can take
// (rows of its GEMV kernel, query rows of its decode attention kernel) comes in as a parameter.
// The backend lowers a consumer with the producers it absorbed, or runs them first where its
// kernel cannot read them after all.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "plan/absorb.h"
#include "plan/schedule.h"

namespace rlx::plan {

// The rows of a skinny matrix product that multiplies one row-major matrix by one shared
// row-major weight: a MatMul or FusedMatMulBiasAct step with no transposed operand and k, n > 0,
// whose A rows are m with batch 1 (a batch of A items against one shared weight arrives folded
// into m by the geometry). 0 for any other step. A backend's GEMV kernel takes a
// subset of these (at most so many rows, aligned weights, its dtypes).
int64_t skinny_rows(const Step& st);

// Rows of `st` that the backend's GEMV kernel takes with an absorbed A producer, 0 when it does
// not take the step (see skinny_rows).
using GemvRowsFn = std::function<int64_t(const Step& st)>;

// GEMVs (steps with gemv_rows(step) > 0) whose A operand is computed by an earlier step used by
// nothing else, an RmsNorm over rows of k or a FusedSwiGLU of those rows, in the GEMV's dtype:
// the GEMV computes A in its prologue and the producer step is not run. Returns consumer step
// index -> producer step index. A producer is absorbed only when no step in between (and not the
// GEMV's result) overwrites its inputs.
std::map<size_t, size_t> plan_gemv_prologues(const Schedule& s, const GemvRowsFn& gemv_rows);

// What a backend's decode attention kernel takes, deciding which Attention steps are
// decode-shaped and what they absorb.
struct DecodeAttentionLimits {
  // An Attention step is decode-shaped when it has at most this many query rows per KV head
  // (q_len * group): the decode kernel takes it and can read a KV operand in two parts.
  int64_t max_rows_per_kv_head = 0;
  // At most this many new K rows are rotated on load (their RoPE absorbed by the attention).
  int64_t max_rotated_k_rows = 0;
};

// Decode-shaped Attention steps whose K and/or V input is a Concat of two tensors along the
// sequence used by nothing else (a KV cache and the new rows): the decode kernel reads both
// parts in place and the Concat step is not run. Returns attention step index -> the absorbed
// concat steps (only when no step in between, nor the attention's result, overwrites the
// concat's inputs). A lowering that cannot read them in place runs the concats.
std::map<size_t, std::vector<size_t>> plan_attention_concats(const Schedule& s, const DecodeAttentionLimits& limits);

// An Attention operand (q, k or v) read in place from the tensor a Narrow step slices along its
// last axis, e.g. a BERT layer's fused q/k/v projection: row o of the operand is columns start ..
// start + len - 1 of row o of the [rows, width] source, so the operand's BSHD strides become
// (seq * width, width, head_dim) from element `start` of the source.
struct AttentionNarrow {
  size_t port = 0;   // 0 q, 1 k, 2 v
  size_t step = 0;   // the Narrow step, not run
  TensorRef source;  // its input
  int64_t start = 0;
  int64_t width = 0;
};

// BSHD Attention steps whose q / k / v are such slices, each used by nothing else: the attention
// reads the source in place and the Narrow steps are not run. Returns attention step index ->
// the absorbed slices (only those whose source no step in between, nor the attention's result,
// overwrites).
std::map<size_t, std::vector<AttentionNarrow>> plan_attention_narrows(const Schedule& s);

// The Rope steps that decode-shaped BSHD Attention steps absorb, given the planned concats:
// the RoPE of q and that of the new K rows (the second part of an absorbed K concat, at most
// limits.max_rotated_k_rows rows), each used only there, with one pair of tables: the decode
// kernel reads their inputs and rotates on load, and the Rope steps are not run. Returns
// attention step index -> the absorbed rope steps (only when no step in between overwrites a
// rope's inputs; where the attention's result does, the lowering runs the rope step unless the
// kernel writes its result after every read).
std::map<size_t, std::vector<size_t>> plan_attention_ropes(const Schedule& s,
                                                          const std::map<size_t, std::vector<size_t>>& concats,
                                                          const DecodeAttentionLimits& limits);

// Rope steps with the same tables and geometry but the head count (the q and k of an attention),
// at most 8 steps apart, neither reading the other's result, no step between them reading the
// first's result or writing over its inputs: both run in the second one's launch.
// Returns second step index -> first step index.
std::map<size_t, size_t> plan_rope_pairs(const Schedule& s);

// CacheWrite steps with the same positions, cache shape and dtypes (the k and v caches of an
// attention), at most 8 steps apart, neither reading the other's result, no step between them
// reading the first's result or writing over its inputs: both run in the second one's launch.
// Returns second step index -> first step index.
std::map<size_t, size_t> plan_cache_write_pairs(const Schedule& s);

// CacheWrite steps whose new rows are the whole result of a Rope step used nowhere else (the
// keys of a decoder, rotated before they are cached): the cache write reads the rope's input
// and writes the rotated rows, and the Rope step is not run. `pairs` (plan_cache_write_pairs,
// or empty): a paired first write runs in its second's launch, so its rope's inputs must still
// hold there. Returns cache-write step index -> rope step index.
std::map<size_t, size_t> plan_cache_write_ropes(const Schedule& s, const std::map<size_t, size_t>& pairs);

// The other rope of a RoPE pair (plan_rope_pairs: a decoder block's q and k) whose partner a
// cache write absorbs (`ropes`, plan_cache_write_ropes, given `pairs`), run in that write's launch
// instead: the launch (the write, or the second write of its pair) comes after it, no step in
// between reads its result, its inputs still hold there, and its result does not overlap its
// input (the launch rotates element by element). Returns launch step index -> rope step index.
std::map<size_t, size_t> plan_cache_write_q_ropes(const Schedule& s, const std::map<size_t, size_t>& pairs,
                                                  const std::map<size_t, size_t>& ropes);

// True when two Rope steps rotate alike: one pair of tables, indexed the same way (per position
// or per batch and position), the same style and rotated dims (their heads and rows may differ).
bool same_rotation(const Step& a, const Step& b);

}  // namespace rlx::plan
