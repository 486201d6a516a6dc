// plan_dequant_gemv_groups (see gemv_groups.h).
#include "plan/gemv_groups.h"

#include "plan/absorb.h"

namespace rlx::plan {
namespace {

constexpr size_t kWindow = 4;  // steps looked across for the next member of a group

const ops::DequantMatMul* dequant_of(const Step& st) { return std::get_if<ops::DequantMatMul>(&st.op); }

// Rows of x of a DequantMatMul step (0 when K is not positive).
int64_t dequant_rows(const Step& st) {
  const int64_t k = dequant_of(st)->k;
  return k > 0 ? st.in.at(0).numel() / k : 0;
}

bool same_location(const Location& a, const Location& b) {
  return a.kind == b.kind && a.offset == b.offset && a.bytes == b.bytes && a.leaf == b.leaf && a.buffer == b.buffer;
}

// True when `b` can join a group led by `a`: same x (value and bytes), format, K, row size
// and dtypes.
bool same_product(const Step& a, const Step& b) {
  const auto *da = dequant_of(a), *db = dequant_of(b);
  return db && da->format == db->format && da->k == db->k && a.in[0].value == b.in[0].value &&
         same_location(a.in[0].loc, b.in[0].loc) && a.in[1].dims.size() == 2 && b.in[1].dims.size() == 2 &&
         a.in[1].dims[1] == b.in[1].dims[1] && a.out[0].dtype == b.out[0].dtype;
}

// The ElementwiseRegion silu(in[a]) * in[b] (either operand order of the product): a, b.
std::optional<std::pair<size_t, size_t>> silu_times(const Step& st) {
  const auto* reg = std::get_if<ops::ElementwiseRegion>(&st.op);
  if (!reg || reg->steps.size() != 2 || st.in.size() != 2) return std::nullopt;
  const RegionStep &s0 = reg->steps[0], &s1 = reg->steps[1];
  if (s0.kind != RegionStepKind::Activation || s0.op != static_cast<int32_t>(ActKind::Silu) || s0.args.size() != 1 ||
      s0.args[0] < 0 || s1.kind != RegionStepKind::Binary || s1.op != static_cast<int32_t>(BinaryKind::Mul) ||
      s1.args.size() != 2)
    return std::nullopt;
  const int32_t other = s1.args[0] == -1 ? s1.args[1] : s1.args[1] == -1 ? s1.args[0] : -2;
  if (other < 0 || other == s0.args[0]) return std::nullopt;
  return std::make_pair(static_cast<size_t>(s0.args[0]), static_cast<size_t>(other));
}

class Planner {
 public:
  Planner(const Schedule& s, const GemvGroupLimits& limits) : s_(s), limits_(limits), index_(s) {}

  std::map<size_t, GemvGroup> run() {
    std::map<size_t, GemvGroup> out;
    std::set<size_t> taken;
    for (size_t i = 0; i < s_.steps.size(); ++i) {
      if (taken.count(i) || !takes(s_.steps[i])) continue;
      GemvGroup g;
      g.members = members_from(i, taken);
      const size_t last = g.members.back();
      // What the launch writes: the members' results, unless an epilogue writes another value.
      std::vector<const TensorRef*> written;
      if (g.members.size() == 2) g.swiglu = swiglu_after(g, &g.gate);
      if (g.members.size() == 1) g.residual_add = residual_after(last);
      if (g.swiglu) written.push_back(&s_.steps[*g.swiglu].out[0]);
      else if (g.residual_add) written.push_back(&s_.steps[*g.residual_add].out[0]);
      else
        for (size_t m : g.members) written.push_back(&s_.steps[m].out[0]);
      g.norm = norm_before(g, written);
      if (g.members.size() == 1 && !g.norm && !g.residual_add) continue;  // nothing to merge
      for (size_t m : g.members) taken.insert(m);
      out[last] = std::move(g);
    }
    return out;
  }

 private:
  bool takes(const Step& st) const {
    if (!dequant_of(st) || st.out.at(0).numel() == 0) return false;
    const int64_t rows = dequant_rows(st);
    return rows > 0 && rows <= limits_.max_rows;
  }

  // Step i and the products after it (within kWindow) that join it.
  std::vector<size_t> members_from(size_t i, const std::set<size_t>& taken) const {
    std::vector<size_t> m{i};
    const TensorRef& x = s_.steps[i].in[0];
    for (size_t j = i + 1; j < s_.steps.size() && j <= i + kWindow && m.size() < limits_.max_members; ++j) {
      const Step& b = s_.steps[j];
      bool blocked = false;  // b needs a member's result, or writes over x or a result
      for (size_t k : m) blocked = blocked || step_reads(b, s_.steps[k].out[0]);
      for (const TensorRef& w : b.out) {
        blocked = blocked || arena_overlap(w, x);
        for (size_t k : m) blocked = blocked || arena_overlap(w, s_.steps[k].out[0]);
      }
      if (blocked) break;
      if (!taken.count(j) && takes(b) && same_product(s_.steps[i], b)) m.push_back(j);
    }
    return m;
  }

  // True when writing `w` during the launch cannot change what the launch reads: x, the
  // members' weights, `also` (the norm's inputs), except `in_place` (read then written
  // element by element at the same place).
  bool safe_to_write(const TensorRef& w, const std::vector<size_t>& members, const std::vector<TensorRef>& also,
                     const TensorRef* in_place = nullptr) const {
    if (w.loc.is_view) return false;
    if (arena_overlap(w, s_.steps[members.front()].in[0])) return false;
    for (size_t m : members)
      if (arena_overlap(w, s_.steps[m].in[1])) return false;
    for (const TensorRef& r : also) {
      if (!arena_overlap(w, r)) continue;
      if (!in_place || r.value != in_place->value || !same_location(w.loc, r.loc)) return false;
    }
    return true;
  }

  // The Add right after the single member `m` that only consumes its result.
  std::optional<size_t> residual_after(size_t m) const {
    const size_t a = m + 1;
    if (a >= s_.steps.size()) return std::nullopt;
    const Step& add = s_.steps[a];
    const auto* bin = std::get_if<ops::Binary>(&add.op);
    if (!bin || bin->kind != BinaryKind::Add || add.in.size() != 2) return std::nullopt;
    const TensorRef& y = s_.steps[m].out[0];
    for (size_t port : {size_t{0}, size_t{1}}) {
      const TensorRef &p = add.in[port], &r = add.in[1 - port];
      if (p.value != y.value || p.loc.is_view || index_.sole_producer(p, a) != m) continue;
      if (r.value == y.value || r.dims != y.dims || r.dtype != y.dtype || add.out[0].dims != y.dims ||
          add.out[0].dtype != y.dtype)
        return std::nullopt;
      if (!safe_to_write(add.out[0], {m}, {r}, &r)) return std::nullopt;
      return a;
    }
    return std::nullopt;
  }

  // The region silu(gate) * up right after the second of two members of one N that only
  // consumes their results; sets *gate to the member that is silu's operand.
  std::optional<size_t> swiglu_after(const GemvGroup& g, size_t* gate) const {
    const size_t r = g.members[1] + 1;
    if (r >= s_.steps.size()) return std::nullopt;
    const Step& reg = s_.steps[r];
    const auto ab = silu_times(reg);
    if (!ab) return std::nullopt;
    const TensorRef &y0 = s_.steps[g.members[0]].out[0], &y1 = s_.steps[g.members[1]].out[0];
    const TensorRef &a = reg.in[ab->first], &b = reg.in[ab->second];
    size_t gm = 0;
    if (a.value == y0.value && b.value == y1.value) gm = 0;
    else if (a.value == y1.value && b.value == y0.value) gm = 1;
    else return std::nullopt;
    if (a.loc.is_view || b.loc.is_view || y0.dims != y1.dims || reg.out[0].dims != y0.dims ||
        reg.out[0].dtype != y0.dtype || index_.sole_producer(a, r) != g.members[gm] ||
        index_.sole_producer(b, r) != g.members[1 - gm])
      return std::nullopt;
    if (!safe_to_write(reg.out[0], g.members, {})) return std::nullopt;
    *gate = gm;
    return r;
  }

  // The RmsNorm producing x, read by the members alone, whose inputs survive until the launch
  // and are not written by it.
  std::optional<size_t> norm_before(const GemvGroup& g, const std::vector<const TensorRef*>& written) const {
    if (limits_.max_norm_values <= 0) return std::nullopt;
    const Step& first = s_.steps[g.members.front()];
    const TensorRef& x = first.in[0];
    const int64_t k = dequant_of(first)->k, rows = dequant_rows(first);
    const std::optional<size_t> pi = index_.producer(x);
    if (!pi || x.loc.is_view || index_.uses(x) != static_cast<int>(g.members.size()) || rows * k > limits_.max_norm_values)
      return std::nullopt;
    const Step& p = s_.steps[*pi];
    if (!std::holds_alternative<ops::RmsNorm>(p.op) || p.in.size() != 2 || p.out.at(0).value != x.value)
      return std::nullopt;
    const auto& ag = std::get<AxisGeom>(p.geom);
    if (ag.outer != rows || ag.axis != k || ag.inner != 1 || p.in[1].numel() != k) return std::nullopt;
    for (const TensorRef& r : p.in)
      if (r.dtype != x.dtype) return std::nullopt;
    const std::set<size_t> silent(g.members.begin(), g.members.end() - 1);
    if (!index_.inputs_survive(*pi, g.members.back(), silent, false)) return std::nullopt;
    for (const TensorRef* w : written)
      if (!safe_to_write(*w, g.members, p.in)) return std::nullopt;
    return pi;
  }

  const Schedule& s_;
  GemvGroupLimits limits_;
  AbsorbIndex index_;
};

}  // namespace

std::map<size_t, GemvGroup> plan_dequant_gemv_groups(const Schedule& s, const GemvGroupLimits& limits) {
  if (limits.max_rows <= 0 || limits.max_members == 0) return {};
  return Planner(s, limits).run();
}

std::set<size_t> steps_not_run(const std::map<size_t, GemvGroup>& groups) {
  std::set<size_t> out;
  for (const auto& [launch, g] : groups) {
    out.insert(g.members.begin(), g.members.end() - 1);
    for (const auto& st : {g.norm, g.residual_add, g.swiglu})
      if (st) out.insert(*st);
  }
  return out;
}

}  // namespace rlx::plan
