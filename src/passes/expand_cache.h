#pragma once
// Decompositions of the KV-cache ops for backends without their kernels (used by the shared
// legalize, expand_node): CacheWrite as a where over the whole cache, and Attention with a
// Positions mask as the same Attention with the additive Bias mask those positions make.
#include <optional>
#include <vector>

#include "rlx/graph.h"

namespace rlx::passes {

// CacheWrite [cache (B, M, ...), rows (B, S, ...), positions (S)]: hit = (positions[:, None] ==
// iota(M)) (S, M); cache row j takes rows[:, last s with hit[s, j]] when any, else keeps its
// value (Where over the whole cache). (B, S) positions: the same per batch entry. A position
// outside [0, M) writes nothing here (the kernels raise an error instead). nullopt when M is
// symbolic (with (B, S) positions, also B or S).
std::optional<Value> expand_cache_write(Graph& g, const std::vector<Value>& in);

// Attention [q, k, v, positions] with MaskKind::Positions: the Bias mask (1 or B, 1, Sq, Skv) of
// q's dtype, 0 where key j <= positions[(b,) i] and -inf elsewhere. nullopt when Skv is symbolic.
std::optional<Value> expand_positions_attention(Graph& g, const ops::Attention& op, const std::vector<Value>& in);

}  // namespace rlx::passes
