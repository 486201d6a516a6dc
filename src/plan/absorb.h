#pragma once
// Which steps of a Schedule a consumer step may absorb (compute itself, so the producer step is
// not run): the producer's result has no other use, and its inputs still hold their values when
// the consumer runs. The building blocks of the absorption plans (plan/absorb_plans.h), shared
// by every backend.
#include <cstddef>
#include <map>
#include <optional>
#include <set>

#include "plan/schedule.h"

namespace rlx::plan {

// True when two arena operands share bytes (leaves never do).
bool arena_overlap(const TensorRef& a, const TensorRef& b);
// True when step `c` reads `v`: the value itself, a view of it, or bytes it occupies.
bool step_reads(const Step& c, const TensorRef& v);

// Use counts and producers of a schedule's values, for planning which step a consumer absorbs.
class AbsorbIndex {
 public:
  explicit AbsorbIndex(const Schedule& s);
  // The step producing `r` (port 0 of its root value) when it runs before `consumer` and `r`
  // has no other use (a graph output always has another).
  std::optional<size_t> sole_producer(const TensorRef& r, size_t consumer) const;
  // The step producing `r` (port 0 of its root value), whatever its uses.
  std::optional<size_t> producer(const TensorRef& r) const;
  // How many step operands read `r`'s root value (a graph output counts 2).
  int uses(const TensorRef& r) const;
  // True when no step after `producer` up to and including `consumer` writes over the
  // producer's inputs, so the consumer can still read them. Steps in `not_run` (absorbed
  // themselves) write nothing. `consumer_result` false: the consumer's own result is left out
  // (a consumer that reads those inputs before any of its result is written checks it itself).
  bool inputs_survive(size_t producer, size_t consumer, const std::set<size_t>& not_run = {},
                      bool consumer_result = true) const;
  // Drops from `taken` (producers that `consumer` absorbs) each one whose inputs do not survive
  // until it (inputs_survive, the taken ones and `not_run` writing nothing), until every one
  // kept holds: a dropped producer runs, and may overwrite another's inputs.
  void keep_surviving(std::set<size_t>& taken, size_t consumer, const std::set<size_t>& not_run = {},
                      bool consumer_result = true) const;

 private:
  const Schedule& s_;
  std::map<Value, int> uses_;
  std::map<NodeId, size_t> step_of_;
};

}  // namespace rlx::plan
