// The absorption plans of absorb_plans.h: GEMV prologues, the decode attention's KV concats and
// RoPEs, and RoPE pairs.
#include "plan/absorb_plans.h"

#include <optional>
#include <set>

namespace rlx::plan {
namespace {

// The seq axis of a rank-4 attention operand in this layout.
size_t seq_axis(AttnLayout layout) { return layout == AttnLayout::BSHD ? 1 : 2; }

// The decode-shaped Attention steps of `s` (at most limits.max_rows_per_kv_head query rows per
// KV head), in order.
std::vector<size_t> decode_attention_steps(const Schedule& s, const DecodeAttentionLimits& limits) {
  std::vector<size_t> out;
  for (size_t i = 0; i < s.steps.size(); ++i)
    if (std::holds_alternative<ops::Attention>(s.steps[i].op)) {
      const auto& g = std::get<AttentionGeom>(s.steps[i].geom);
      if (g.q_len * g.group <= limits.max_rows_per_kv_head) out.push_back(i);
    }
  return out;
}

}  // namespace

int64_t skinny_rows(const Step& st) {
  const auto* g = std::get_if<MatMulGeom>(&st.geom);
  if (!g || (!std::holds_alternative<ops::MatMul>(st.op) && !std::holds_alternative<ops::FusedMatMulBiasAct>(st.op)))
    return 0;
  if (g->trans_a || g->trans_b || g->k == 0 || g->n == 0) return 0;
  // A batch against one shared weight was folded into m by the geometry
  // (fold_shared_weight_batch); a batch left here has a weight per item.
  return g->batch == 1 ? g->m : 0;
}

std::map<size_t, size_t> plan_gemv_prologues(const Schedule& s, const GemvRowsFn& gemv_rows) {
  const AbsorbIndex index(s);
  std::map<size_t, size_t> out;
  for (size_t ci = 0; ci < s.steps.size(); ++ci) {
    const Step& c = s.steps[ci];
    const int64_t rows = gemv_rows(c);
    if (!rows) continue;
    const std::optional<size_t> pi = index.sole_producer(c.in.at(0), ci);
    if (!pi) continue;
    const Step& p = s.steps[*pi];
    const int64_t k = std::get<MatMulGeom>(c.geom).k;
    const DType t = c.out.at(0).dtype;
    bool ok = false;
    if (std::holds_alternative<ops::RmsNorm>(p.op)) {
      const auto& ag = std::get<AxisGeom>(p.geom);
      ok = ag.outer == rows && ag.axis == k && p.in.at(1).numel() == k && (p.in.size() < 3 || p.in[2].numel() == k);
    } else if (std::holds_alternative<ops::FusedSwiGLU>(p.op)) {
      ok = p.out.at(0).numel() == rows * k && !p.in.at(0).dims.empty() && p.in[0].dims.back() == 2 * k;
    }
    for (const TensorRef& r : p.in) ok = ok && r.dtype == t;
    // The producer's inputs must still hold their values when the GEMV reads them.
    if (ok && index.inputs_survive(*pi, ci)) out[ci] = *pi;
  }
  return out;
}

std::map<size_t, std::vector<size_t>> plan_attention_concats(const Schedule& s, const DecodeAttentionLimits& limits) {
  const AbsorbIndex index(s);
  std::map<size_t, std::vector<size_t>> out;
  for (size_t ai : decode_attention_steps(s, limits)) {
    const Step& a = s.steps[ai];
    const auto& g = std::get<AttentionGeom>(a.geom);
    const size_t axis = seq_axis(g.layout);
    std::set<size_t> taken;
    for (size_t port : {size_t{1}, size_t{2}}) {
      const std::optional<size_t> ci = index.sole_producer(a.in.at(port), ai);
      if (!ci) continue;
      const Step& c = s.steps[*ci];
      const auto* cat = std::get_if<ops::Concat>(&c.op);
      if (cat == nullptr || c.in.size() != 2 || c.out.at(0).dims.size() != 4) continue;
      const int64_t ax = cat->axis < 0 ? cat->axis + 4 : cat->axis;
      bool ok = ax == static_cast<int64_t>(axis) && c.out[0].dtype == a.in[port].dtype;
      for (const TensorRef& r : c.in) {
        ok = ok && r.dtype == c.out[0].dtype && r.dims.size() == 4;
        for (size_t d = 0; ok && d < 4; ++d) ok = d == axis || r.dims[d] == c.out[0].dims[d];
      }
      // The attention reads the concat's value (not a view of part of it).
      if (ok && a.in[port].value == c.out[0].value && !a.in[port].loc.is_view) taken.insert(*ci);
    }
    // The parts must still be intact when the attention runs. The memory plan may have reused
    // one concat's part for the other concat's result; a concat that is absorbed writes
    // nothing, so the check skips the other taken one, and drops candidates until both hold.
    index.keep_surviving(taken, ai);
    if (!taken.empty()) out[ai].assign(taken.begin(), taken.end());
  }
  return out;
}

std::map<size_t, std::vector<AttentionNarrow>> plan_attention_narrows(const Schedule& s) {
  const AbsorbIndex index(s);
  std::map<size_t, std::vector<AttentionNarrow>> out;
  for (size_t ai = 0; ai < s.steps.size(); ++ai) {
    const Step& a = s.steps[ai];
    if (!std::holds_alternative<ops::Attention>(a.op)) continue;
    const auto& g = std::get<AttentionGeom>(a.geom);
    if (g.layout != AttnLayout::BSHD) continue;
    std::map<size_t, AttentionNarrow> found;  // by Narrow step
    for (size_t port : {size_t{0}, size_t{1}, size_t{2}}) {
      const TensorRef& r = a.in.at(port);
      const std::optional<size_t> ni = index.sole_producer(r, ai);
      if (!ni) continue;
      const Step& n = s.steps[*ni];
      const auto* ax = std::get_if<AxisGeom>(&n.geom);
      if (!std::holds_alternative<ops::Narrow>(n.op) || ax == nullptr || ax->inner != 1) continue;
      // The operand is the slice's value or a reshape of all of it, in the slice's dtype.
      const TensorRef& sl = n.out.at(0);
      const bool whole = r.value == sl.value ||
                         (r.loc.is_view && r.loc.root == sl.value && r.loc.offset == sl.loc.offset);
      if (!whole || r.numel() != sl.numel() || r.dtype != sl.dtype || n.in.at(0).dtype != sl.dtype) continue;
      // [b, seq, heads, head_dim] with the standard BSHD strides, each row one slice row.
      const AttnStrides& st = port == 0 ? g.q : port == 1 ? g.k : g.v;
      const int64_t seq = port == 0 ? g.q_len : g.kv_len, heads = port == 0 ? g.num_heads : g.num_kv_heads;
      const int64_t e = heads * g.head_dim;
      if (r.dims.size() != 4 || st.head != g.head_dim || st.seq != e || st.batch != seq * e || ax->out_axis != e ||
          ax->outer != g.batch * seq)
        continue;
      found[*ni] = AttentionNarrow{port, *ni, n.in[0], ax->start, ax->axis};
    }
    std::set<size_t> taken;
    for (const auto& [step, an] : found) taken.insert(step);
    index.keep_surviving(taken, ai);
    for (const auto& [step, an] : found)
      if (taken.count(step)) out[ai].push_back(an);
  }
  return out;
}

std::map<size_t, std::vector<size_t>> plan_attention_ropes(const Schedule& s,
                                                          const std::map<size_t, std::vector<size_t>>& concats,
                                                          const DecodeAttentionLimits& limits) {
  const AbsorbIndex index(s);
  std::map<size_t, std::vector<size_t>> out;
  for (size_t ai : decode_attention_steps(s, limits)) {
    const Step& a = s.steps[ai];
    const auto& g = std::get<AttentionGeom>(a.geom);
    if (g.layout != AttnLayout::BSHD) continue;  // the rope rows are [b, s, h, d]
    const auto ci = concats.find(ai);
    const std::vector<size_t> taken_concats = ci == concats.end() ? std::vector<size_t>{} : ci->second;
    // The Rope step whose result `r` is (read whole by `consumer`, used nowhere else), rotating
    // `heads` heads of `seq` rows of the attention's head_dim and dtype.
    auto rope_of = [&](const TensorRef& r, size_t consumer, int64_t heads, int64_t seq) -> std::optional<size_t> {
      const std::optional<size_t> ri = index.sole_producer(r, consumer);
      if (!ri || r.loc.is_view) return std::nullopt;
      const Step& p = s.steps[*ri];
      if (!std::holds_alternative<ops::Rope>(p.op) || p.out.at(0).value != r.value) return std::nullopt;
      const auto& rg = std::get<RopeGeom>(p.geom);
      const bool ok = rg.batch == g.batch && rg.seq == seq && rg.heads == heads && rg.head_dim == g.head_dim &&
                      p.in.at(0).dtype == a.out.at(0).dtype && p.out.at(0).dtype == a.out.at(0).dtype &&
                      p.in.at(1).dtype == p.in.at(2).dtype;
      return ok ? ri : std::nullopt;
    };
    const std::optional<size_t> rq = rope_of(a.in.at(0), ai, g.num_heads, g.q_len);
    std::set<size_t> taken;
    if (rq) taken.insert(*rq);
    for (size_t c : taken_concats) {  // the new K rows: the second part of the absorbed K concat
      const Step& cat = s.steps[c];
      if (cat.out.at(0).value != a.in.at(1).value) continue;
      const int64_t rows = cat.in.at(1).dims.at(1);
      if (rows > limits.max_rotated_k_rows) continue;
      const auto rk = rope_of(cat.in.at(1), c, g.num_heads / g.group, rows);
      // One pair of tables and one rotation for both.
      if (rk && (!rq || same_rotation(s.steps[*rq], s.steps[*rk]))) taken.insert(*rk);
    }
    // Their inputs must still hold when the attention runs (its own result: the lowering checks).
    index.keep_surviving(taken, ai, std::set<size_t>(taken_concats.begin(), taken_concats.end()), false);
    if (!taken.empty()) out[ai].assign(taken.begin(), taken.end());  // either rope alone is fine too
  }
  return out;
}

bool same_rotation(const Step& a, const Step& b) {
  const auto& ga = std::get<RopeGeom>(a.geom);
  const auto& gb = std::get<RopeGeom>(b.geom);
  return std::get<ops::Rope>(a.op).style == std::get<ops::Rope>(b.op).style && ga.n_rot == gb.n_rot &&
         ga.per_batch == gb.per_batch && a.in.at(1).value == b.in.at(1).value && a.in.at(2).value == b.in.at(2).value;
}

namespace {
// Pairs of steps that `alike` accepts (a before b), at most 8 steps apart, no step between
// them reading the first's result, neither writing what the other reads, the first's inputs
// intact at the second: second -> first. `kind` says which steps may pair at all.
template <class Kind, class Alike>
std::map<size_t, size_t> plan_pairs(const Schedule& s, Kind kind, Alike alike) {
  constexpr size_t kWindow = 8;  // steps between the two looked across (a q / k projection, a cache write)
  const AbsorbIndex index(s);
  std::map<size_t, size_t> out;
  std::set<size_t> used;
  for (size_t i = 0; i + 1 < s.steps.size(); ++i) {
    const Step& a = s.steps[i];
    if (used.count(i) || !kind(a) || a.out.at(0).numel() == 0) continue;
    for (size_t j = i + 1; j < s.steps.size() && j <= i + kWindow; ++j) {
      const Step& b = s.steps[j];
      if (step_reads(b, a.out[0])) break;  // a's result is needed before the pair would run (so b never reads it)
      if (used.count(j) || !kind(b) || !alike(a, b)) continue;
      // b does not write what a reads (both run at once), and a's inputs still hold at j.
      bool ok = !arena_overlap(a.out[0], b.out[0]) && b.out[0].numel() > 0 && index.inputs_survive(i, j);
      for (const TensorRef& r : a.in) ok = ok && !arena_overlap(b.out[0], r);
      if (!ok) continue;
      out[j] = i;
      used.insert(i), used.insert(j);
      break;
    }
  }
  return out;
}
}  // namespace

std::map<size_t, size_t> plan_rope_pairs(const Schedule& s) {
  return plan_pairs(
      s, [](const Step& st) { return std::holds_alternative<ops::Rope>(st.op); },
      [](const Step& a, const Step& b) {
        const auto &ga = std::get<RopeGeom>(a.geom), &gb = std::get<RopeGeom>(b.geom);
        return same_rotation(a, b) && ga.batch == gb.batch && ga.seq == gb.seq && ga.head_dim == gb.head_dim &&
               a.out.at(0).dtype == b.out.at(0).dtype && a.in.at(0).dtype == b.in.at(0).dtype;
      });
}

std::map<size_t, size_t> plan_cache_write_pairs(const Schedule& s) {
  return plan_pairs(
      s, [](const Step& st) { return std::holds_alternative<ops::CacheWrite>(st.op); },
      [](const Step& a, const Step& b) {
        return a.in.at(2).value == b.in.at(2).value && a.in[0].dims == b.in[0].dims && a.in[1].dims == b.in[1].dims &&
               a.in[0].dtype == b.in[0].dtype && a.in[1].dtype == b.in[1].dtype && a.out.at(0).dtype == b.out[0].dtype;
      });
}

std::map<size_t, size_t> plan_cache_write_ropes(const Schedule& s, const std::map<size_t, size_t>& pairs) {
  const AbsorbIndex index(s);
  std::map<size_t, size_t> launched_at;  // a paired first write -> the step whose launch runs it
  for (const auto& [second, first] : pairs) launched_at[first] = second;
  std::map<size_t, size_t> out;
  for (size_t ci = 0; ci < s.steps.size(); ++ci) {
    const Step& c = s.steps[ci];
    if (!std::holds_alternative<ops::CacheWrite>(c.op)) continue;
    const TensorRef& rows = c.in.at(1);
    const std::optional<size_t> ri = index.sole_producer(rows, ci);
    if (!ri || rows.loc.is_view) continue;
    const Step& r = s.steps[*ri];
    if (!std::holds_alternative<ops::Rope>(r.op) || r.out.at(0).value != rows.value) continue;
    // The rope's rows are the cache write's (B, S) rows of `inner` values, in the cache's dtype.
    const auto& g = std::get<RopeGeom>(r.geom);
    const TensorRef& cache = c.in.at(0);
    if (cache.dims.size() < 2 || rows.dims.size() < 2) continue;
    const int64_t b = cache.dims[0], m = cache.dims[1];
    const int64_t inner = b * m > 0 ? cache.numel() / (b * m) : 0;
    const bool ok = g.batch == b && g.seq == rows.dims[1] && g.heads * g.head_dim == inner &&
                    r.in.at(0).dtype == cache.dtype && r.out[0].dtype == cache.dtype &&
                    r.in.at(1).dtype == r.in.at(2).dtype;
    if (!ok) continue;
    // The rope's inputs must hold where the write is launched (a paired first write writes
    // nothing at its own place).
    const auto at = launched_at.find(ci);
    const size_t launch = at == launched_at.end() ? ci : at->second;
    const std::set<size_t> silent = launch == ci ? std::set<size_t>{} : std::set<size_t>{ci};
    if (index.inputs_survive(*ri, launch, silent)) out[ci] = *ri;
  }
  return out;
}

std::map<size_t, size_t> plan_cache_write_q_ropes(const Schedule& s, const std::map<size_t, size_t>& pairs,
                                                  const std::map<size_t, size_t>& ropes) {
  const AbsorbIndex index(s);
  std::map<size_t, size_t> launched_at, write_of;  // a paired first write -> its launch; rope -> its write
  for (const auto& [second, first] : pairs) launched_at[first] = second;
  for (const auto& [write, rope] : ropes) write_of[rope] = write;
  std::map<size_t, size_t> out;
  for (const auto& [second, first] : plan_rope_pairs(s))
    for (const auto& [taken, other] : {std::pair{second, first}, std::pair{first, second}}) {
      const auto w = write_of.find(taken);
      if (w == write_of.end() || write_of.count(other)) continue;
      const auto at = launched_at.find(w->second);
      const size_t launch = at == launched_at.end() ? w->second : at->second;
      // Rotated element by element there: its result must not overlap its input (an in-place rope).
      if (other >= launch || out.count(launch) || arena_overlap(s.steps[other].out.at(0), s.steps[other].in.at(0)))
        continue;
      bool read = false;
      for (size_t j = other + 1; j <= launch && !read; ++j) read = step_reads(s.steps[j], s.steps[other].out.at(0));
      std::set<size_t> silent = {taken};
      if (launch != w->second) silent.insert(w->second);
      if (!read && index.inputs_survive(other, launch, silent)) out[launch] = other;
      break;
    }
  return out;
}

}  // namespace rlx::plan
