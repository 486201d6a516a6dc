#pragma once
// The Llama decoder's sampling head (GgufLlamaOptions::sample_candidates) and the selection it
// runs: the top k of long rows as a tree of TopKs over chunks.
#include <cstdint>
#include <utility>

#include "rlx/graph.h"

namespace rlx::models {

// The top k of each row of x (rows, n) (largest first, ties by lower index, as one TopK): when
// there are fewer than 64 rows, rows longer than `split_above` are cut into chunks of `chunk` (>= k) entries, each chunk's top k
// selected on its own (a GPU runs one workgroup per row, so a single long row would run on one
// core), and the chunks' winners selected again, until a row is short enough for one TopK. The
// chunks' winners stay in index order, so ties still go to the lower index. Returns the values
// (rows, k) and their i64 indices (rows, k).
std::pair<Value, Value> top_k_rows(Graph& g, Value x, int64_t rows, int64_t n, int64_t k, int64_t split_above = 4096,
                                   int64_t chunk = 1024);

// Adds the inputs sample_history (batch, history) i64, sample_penalty (batch) f32 and
// sample_inv_temperature (batch) f32 and the outputs sample_logits (batch, k) f32, sample_ids
// (batch, k) i64 and sample_mass (batch) f32 for the first row of `logits` (batch, R, vocab) f32
// (GgufLlamaOptions::sample_candidates says what they hold).
void add_sampling_head(Graph& g, Value logits, int64_t vocab, int64_t batch, int64_t k, int64_t history);

}  // namespace rlx::models
