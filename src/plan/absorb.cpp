// AbsorbIndex and arena_overlap (see absorb.h).
#include "plan/absorb.h"

#include <utility>

namespace rlx::plan {
namespace {

Value root_of(const TensorRef& r) { return r.loc.is_view ? r.loc.root : r.value; }

// The bytes [offset, offset + bytes) of the arena a result/operand occupies (empty for leaves).
std::pair<int64_t, int64_t> arena_range(const TensorRef& r) {
  if (r.loc.kind != Location::Kind::Arena || r.loc.bytes == 0) return {0, 0};
  return {r.loc.offset, r.loc.offset + r.loc.bytes};
}

}  // namespace

bool arena_overlap(const TensorRef& a, const TensorRef& b) {
  const auto [a0, a1] = arena_range(a);
  const auto [b0, b1] = arena_range(b);
  return a0 < a1 && b0 < b1 && a0 < b1 && b0 < a1;
}

bool step_reads(const Step& c, const TensorRef& v) {
  for (const TensorRef& r : c.in)
    if (r.value == v.value || (r.loc.is_view && r.loc.root == v.value) || arena_overlap(v, r)) return true;
  return false;
}

AbsorbIndex::AbsorbIndex(const Schedule& s) : s_(s) {
  for (const Step& st : s.steps)
    for (const TensorRef& r : st.in) ++uses_[root_of(r)];
  for (const TensorRef& r : s.outputs) uses_[root_of(r)] += 2;  // a graph output is never absorbed
  for (size_t i = 0; i < s.steps.size(); ++i) step_of_[s.steps[i].node] = i;
}

std::optional<size_t> AbsorbIndex::sole_producer(const TensorRef& r, size_t consumer) const {
  const std::optional<size_t> p = producer(r);
  if (!p || *p >= consumer || uses(r) != 1) return std::nullopt;
  return p;
}

std::optional<size_t> AbsorbIndex::producer(const TensorRef& r) const {
  const Value src = root_of(r);
  const auto it = step_of_.find(src.node);
  if (src.port != 0 || it == step_of_.end()) return std::nullopt;
  return it->second;
}

int AbsorbIndex::uses(const TensorRef& r) const {
  const auto u = uses_.find(root_of(r));
  return u == uses_.end() ? 0 : u->second;
}

bool AbsorbIndex::inputs_survive(size_t producer, size_t consumer, const std::set<size_t>& not_run,
                                 bool consumer_result) const {
  for (const TensorRef& r : s_.steps[producer].in) {
    if (consumer_result)
      for (const TensorRef& w : s_.steps[consumer].out)
        if (arena_overlap(w, r)) return false;
    for (size_t j = producer + 1; j < consumer; ++j) {
      if (not_run.count(j)) continue;
      for (const TensorRef& w : s_.steps[j].out)
        if (arena_overlap(w, r)) return false;
    }
  }
  return true;
}

void AbsorbIndex::keep_surviving(std::set<size_t>& taken, size_t consumer, const std::set<size_t>& not_run,
                                 bool consumer_result) const {
  for (bool changed = true; changed;) {
    changed = false;
    std::set<size_t> silent = not_run;
    silent.insert(taken.begin(), taken.end());
    for (size_t p : taken)
      if (!inputs_survive(p, consumer, silent, consumer_result)) {
        taken.erase(p);
        changed = true;
        break;
      }
  }
}

}  // namespace rlx::plan
