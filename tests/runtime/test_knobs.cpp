// The tuning-knob registry (rlx/tuning.h, runtime/knobs.h): defaults, CompileOptions over the
// environment over the default, validation with errors naming the variable or member and its
// range, set_knob by name, a knob set through CompileOptions reaching the optimizer, the
// table in docs/development.md, and no RLX_* variable read anywhere else.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
// GCC 12 with the sanitizers' instrumentation reports -Wmaybe-uninitialized inside libstdc++'s
// std::regex (the move of a _State's std::function); not this file's code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <regex>
#pragma GCC diagnostic pop
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "models/transformer.h"
#include "passes/pipeline.h"
#include "runtime/backend.h"
#include "runtime/knobs.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::error_message;
using testing::ScopedEnv;

// Unsets every knob's variable for the test and restores them after.
class Knobs : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const KnobInfo& k : knob_table()) {
      if (const char* v = std::getenv(k.env)) saved_[k.env] = v;
      ::unsetenv(k.env);
    }
  }
  void TearDown() override {
    for (const KnobInfo& k : knob_table()) ::unsetenv(k.env);
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
  }

 private:
  std::map<std::string, std::string> saved_;
};

size_t count_kind(const Graph& g, const std::string& kind) {
  size_t n = 0;
  for (const Node& node : g.nodes())
    if (op_name(node.op) == kind) ++n;
  return n;
}

Graph bert_graph(int64_t seq) {
  Graph g;
  Value h = g.input("hidden", Shape::of({1, seq, 64}));
  Value m = g.input("mask", Shape::of({1, seq}));
  models::BertLayerConfig c;
  c.hidden = 64;
  c.num_heads = 4;
  c.ffn = 128;
  g.add_output(models::build_bert_layer(g, h, m, c, "l0"));
  return g;
}

Graph optimize_cpu(const Graph& g, const CompileOptions& o) {
  auto be = make_backend(Device::Cpu, o);
  return passes::optimize_for_backend(g, *be, o);
}

size_t attention_fusions(const Graph& g) {
  return count_kind(g, "fused_attention_block") + count_kind(g, "fused_transformer_layer");
}

TEST_F(Knobs, DefaultsWhenNothingIsSet) {
  const ResolvedKnobs k = resolve_knobs(CompileOptions{});
  EXPECT_EQ(k.fuse_attn_threshold(), 64);
  EXPECT_FALSE(k.pass_report());
  EXPECT_TRUE(k.disable_passes().empty());
  EXPECT_EQ(k.gemv_blocks_per_sm(), 4);
  EXPECT_TRUE(k.gemv_packed());
  EXPECT_FALSE(k.gemv_l2pf());
  EXPECT_EQ(k.gemv_lpr(), std::nullopt);  // auto: the lowering chooses
  EXPECT_EQ(k.gemv_carveout(), std::nullopt);
  EXPECT_EQ(k.cuda_attn_cluster(), 16);
  EXPECT_EQ(k.cuda_attn_decode_tc_warps(), 8);
  EXPECT_EQ(k.cuda_attn_decode_tc_keys(), std::nullopt);
  EXPECT_EQ(k.cuda_attn_tile(), "");
  EXPECT_EQ(k.cuda_attn_wgmma(), "");
  EXPECT_TRUE(k.cuda_graphs());
  EXPECT_TRUE(k.cuda_tiny_early());
  EXPECT_EQ(k.origin("gemv_packed"), "the default");
  EXPECT_EQ(process_knobs::cuda_device(), 0);
  EXPECT_EQ(process_knobs::cuda_pdl(), "");
  EXPECT_FALSE(process_knobs::cuda_profile());
  EXPECT_EQ(process_knobs::cache_dir(), "");
  EXPECT_EQ(process_knobs::bench_profile_run(), std::nullopt);
}

TEST_F(Knobs, EnvironmentBeatsTheDefault) {
  ScopedEnv packed("RLX_GEMV_PACKED", "0");
  ScopedEnv lpr("RLX_GEMV_LPR", "8");
  ScopedEnv carve("RLX_GEMV_CARVEOUT", "-1");  // an explicit -1 is not "auto"
  ScopedEnv tile("RLX_CUDA_ATTN_TILE", "4,2,32,0");
  ScopedEnv empty("RLX_GEMV_BLOCKS_PER_SM", "");  // empty = unset
  ScopedEnv device("RLX_CUDA_DEVICE", "3");
  const ResolvedKnobs k = resolve_knobs(CompileOptions{});
  EXPECT_FALSE(k.gemv_packed());
  EXPECT_EQ(k.gemv_lpr(), 8);
  EXPECT_EQ(k.gemv_carveout(), -1);
  EXPECT_EQ(k.cuda_attn_tile(), "4,2,32,0");
  EXPECT_EQ(k.gemv_blocks_per_sm(), 4);
  EXPECT_EQ(k.origin("gemv_packed"), "RLX_GEMV_PACKED");
  EXPECT_EQ(process_knobs::cuda_device(), 3);
  ScopedEnv lpr_auto("RLX_GEMV_LPR", "auto");
  EXPECT_EQ(resolve_knobs(CompileOptions{}).gemv_lpr(), std::nullopt);
}

TEST_F(Knobs, CompileOptionsBeatTheEnvironment) {
  ScopedEnv packed("RLX_GEMV_PACKED", "0");
  ScopedEnv lpr("RLX_GEMV_LPR", "8");
  ScopedEnv tile("RLX_CUDA_ATTN_TILE", "4,2,32,0");
  CompileOptions o;
  o.tuning.gemv_packed = true;
  o.tuning.gemv_lpr = 16;
  o.tuning.cuda_attn_tile = "8,1,128,1";
  const ResolvedKnobs k = resolve_knobs(o);
  EXPECT_TRUE(k.gemv_packed());
  EXPECT_EQ(k.gemv_lpr(), 16);
  EXPECT_EQ(k.cuda_attn_tile(), "8,1,128,1");
  EXPECT_EQ(k.origin("gemv_packed"), "CompileOptions::tuning.gemv_packed");
  // A member that is set is used even when the variable is malformed...
  ScopedEnv bad("RLX_GEMV_TC", "maybe");
  o.tuning.gemv_tc = false;
  EXPECT_FALSE(resolve_knobs(o).gemv_tc());
  // ... and an empty string member counts as unset.
  o.tuning.gemv_tc.reset();
  o.tuning.cuda_attn_tile = "";
  EXPECT_THAT(error_message([&] { resolve_knobs(o); }), HasSubstr("RLX_GEMV_TC='maybe'"));
}

TEST_F(Knobs, MalformedOrOutOfRangeVariableIsAnErrorNamingIt) {
  for (const char* bad : {"99", "0", "8x", "abc", " 8", "99999999999999999999", "auto"}) {
    ScopedEnv e("RLX_GEMV_BLOCKS_PER_SM", bad);
    const std::string msg = error_message([] { resolve_knobs(CompileOptions{}); });
    EXPECT_THAT(msg, AllOf(HasSubstr(std::string("RLX_GEMV_BLOCKS_PER_SM='") + bad + "'"), HasSubstr("[1, 64]"),
                           HasSubstr("gemv_blocks_per_sm")))
        << bad;
  }
  {
    ScopedEnv e("RLX_GEMV_LPR", "33");
    EXPECT_THAT(error_message([] { resolve_knobs(CompileOptions{}); }),
                AllOf(HasSubstr("RLX_GEMV_LPR='33'"), HasSubstr("[1, 32] or 'auto'")));
  }
  {
    ScopedEnv e("RLX_FUSE_ATTN_THRESHOLD", "-1");
    EXPECT_THAT(error_message([] { resolve_knobs(CompileOptions{}); }), HasSubstr("RLX_FUSE_ATTN_THRESHOLD='-1'"));
  }
  {
    ScopedEnv e("RLX_CUDA_PDL", "sometimes");
    EXPECT_THAT(error_message([] { process_knobs::cuda_pdl(); }),
                AllOf(HasSubstr("RLX_CUDA_PDL='sometimes'"), HasSubstr("one of 0, 1, all")));
  }
  {
    ScopedEnv e("RLX_CUDA_DEVICE", "gpu0");
    EXPECT_THAT(error_message([] { process_knobs::cuda_device(); }), HasSubstr("RLX_CUDA_DEVICE='gpu0'"));
  }
}

TEST_F(Knobs, OutOfRangeMemberIsAnErrorNamingIt) {
  CompileOptions o;
  o.tuning.gemv_lpr = 0;
  EXPECT_THAT(error_message([&] { resolve_knobs(o); }),
              AllOf(HasSubstr("CompileOptions::tuning.gemv_lpr='0'"), HasSubstr("[1, 32]")));
  o.tuning.gemv_lpr.reset();
  o.tuning.cuda_attn_cluster = 17;
  EXPECT_THAT(error_message([&] { resolve_knobs(o); }),
              AllOf(HasSubstr("CompileOptions::tuning.cuda_attn_cluster='17'"), HasSubstr("[0, 16]")));
  // ... also through Session::compile, whatever the device.
  o.tuning.cuda_attn_cluster = -2;
  EXPECT_THAT(error_message([&] { Session(Device::Cpu).compile(bert_graph(8), o); }),
              HasSubstr("cuda_attn_cluster"));
}

TEST_F(Knobs, BoolParsing) {
  for (const char* on : {"1", "true", "TRUE", "on", "On", "yes"}) {
    ScopedEnv e("RLX_CUDA_GRAPHS", on);
    EXPECT_TRUE(resolve_knobs(CompileOptions{}).cuda_graphs()) << on;
    CompileOptions o;
    set_knob(o, "gemv_l2pf", on);
    EXPECT_EQ(o.tuning.gemv_l2pf, true) << on;
  }
  for (const char* off : {"0", "false", "False", "off", "no", "NO"}) {
    ScopedEnv e("RLX_CUDA_GRAPHS", off);
    EXPECT_FALSE(resolve_knobs(CompileOptions{}).cuda_graphs()) << off;
    CompileOptions o;
    set_knob(o, "gemv_l2pf", off);
    EXPECT_EQ(o.tuning.gemv_l2pf, false) << off;
  }
  for (const char* bad : {"2", "-1", "maybe", "y", "onn"}) {
    ScopedEnv e("RLX_CUDA_GRAPHS", bad);
    EXPECT_THAT(error_message([] { resolve_knobs(CompileOptions{}); }),
                AllOf(HasSubstr(std::string("RLX_CUDA_GRAPHS='") + bad + "'"), HasSubstr("true/false")))
        << bad;
    CompileOptions o;
    EXPECT_THAT(error_message([&] { set_knob(o, "cuda_graphs", bad); }), HasSubstr("knob cuda_graphs")) << bad;
  }
  ScopedEnv p("RLX_CUDA_PROFILE", "on");
  EXPECT_TRUE(process_knobs::cuda_profile());
}

TEST_F(Knobs, SetByName) {
  CompileOptions o;
  set_knob(o, "gemv_packed", "0");
  EXPECT_EQ(o.tuning.gemv_packed, false);
  set_knob(o, "RLX_GEMV_LPR", "4");  // the variable's name works too
  EXPECT_EQ(o.tuning.gemv_lpr, 4);
  set_knob(o, "gemv_lpr", "auto");
  EXPECT_EQ(o.tuning.gemv_lpr, std::nullopt);
  set_knob(o, "cuda_attn_wgmma", "2,128,2,1");
  EXPECT_EQ(o.tuning.cuda_attn_wgmma, "2,128,2,1");
  set_knob(o, "fuse_attn_threshold", "0");
  EXPECT_EQ(o.tuning.fuse_attn_threshold, 0);
  set_knob(o, "pass_report", "yes");
  EXPECT_TRUE(o.pass_report);
  set_knob(o, "disable_passes", "cse, dce");
  EXPECT_EQ(o.disabled_passes, (std::vector<std::string>{"cse", "dce"}));

  EXPECT_THAT(error_message([&] { set_knob(o, "gemv_pakced", "0"); }),
              AllOf(HasSubstr("unknown knob 'gemv_pakced'"), HasSubstr("gemv_packed"), HasSubstr("rlx knobs")));
  EXPECT_THAT(error_message([&] { set_knob(o, "gemv_lpr", "64"); }),
              AllOf(HasSubstr("knob gemv_lpr='64'"), HasSubstr("[1, 32] or 'auto'")));
  EXPECT_THAT(error_message([&] { set_knob(o, "fuse_attn_threshold", "auto"); }), HasSubstr("fuse_attn_threshold"));
  EXPECT_THAT(error_message([&] { set_knob(o, "cuda_device", "1"); }),
              AllOf(HasSubstr("process setting"), HasSubstr("RLX_CUDA_DEVICE")));
}

TEST_F(Knobs, CompileOptionReachesTheOptimizer) {
  const Graph g = bert_graph(16);  // batch * seq = 16
  EXPECT_GT(attention_fusions(optimize_cpu(g, CompileOptions{})), 0u);
  CompileOptions low;
  low.tuning.fuse_attn_threshold = 8;
  EXPECT_EQ(attention_fusions(optimize_cpu(g, low)), 0u);
  {
    // The member beats the variable in both directions.
    ScopedEnv e("RLX_FUSE_ATTN_THRESHOLD", "8");
    EXPECT_EQ(attention_fusions(optimize_cpu(g, CompileOptions{})), 0u);
    CompileOptions high;
    high.tuning.fuse_attn_threshold = 64;
    EXPECT_GT(attention_fusions(optimize_cpu(g, high)), 0u);
  }
  // The same through Session::compile and set_knob, and the result still runs.
  CompileOptions by_name;
  set_knob(by_name, "fuse_attn_threshold", "8");
  set_knob(by_name, "disable_passes", "fuse_matmul_bias_act");
  EXPECT_EQ(count_kind(optimize_cpu(g, by_name), "fused_matmul_bias_act"), 0u);
  EXPECT_NO_THROW(Session(Device::Cpu).compile(g, by_name));
  // A bad variable read by the optimizer fails the compile with its name.
  ScopedEnv bad("RLX_DISABLE_PASSES", "fuse_nothing");
  EXPECT_THAT(error_message([&] { optimize_cpu(g, CompileOptions{}); }),
              HasSubstr("RLX_DISABLE_PASSES: unknown pass 'fuse_nothing'"));
}

TEST_F(Knobs, TableIsConsistent) {
  std::set<std::string> names, envs;
  bool process_seen = false;
  for (const KnobInfo& k : knob_table()) {
    const std::string name = k.name, env = k.env;
    EXPECT_TRUE(names.insert(name).second) << name;
    EXPECT_TRUE(envs.insert(env).second) << env;
    std::string upper = "RLX_";
    for (char c : name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(env, upper) << "the variable is the name in upper case after RLX_";
    EXPECT_NE(std::string(k.doc), "") << name;
    EXPECT_EQ(find_knob(name), &k);
    EXPECT_EQ(find_knob(env), &k);
    if (k.scope == KnobScope::Process) {
      process_seen = true;
      EXPECT_EQ(std::string(k.field), "") << name;
    } else {
      EXPECT_FALSE(process_seen) << "compile knobs come first: " << name;
      EXPECT_NE(std::string(k.field), "") << name;
    }
    if (k.type == KnobType::Int) {
      EXPECT_LE(k.lo, k.hi) << name;
    }
    if (k.auto_default) {
      EXPECT_EQ(k.type, KnobType::Int) << name;
    }
  }
  EXPECT_EQ(find_knob("nope"), nullptr);
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST_F(Knobs, DevelopmentDocHoldsTheTable) {
  const std::string doc = read_text(std::filesystem::path(RLX_SOURCE_DIR) / "docs" / "development.md");
  const std::string begin = "<!-- knobs:begin (generated by `rlx knobs --markdown`) -->\n", end = "<!-- knobs:end -->";
  const size_t b = doc.find(begin), e = doc.find(end);
  ASSERT_NE(b, std::string::npos) << "docs/development.md has no '" << begin << "'";
  ASSERT_NE(e, std::string::npos);
  EXPECT_EQ(doc.substr(b + begin.size(), e - b - begin.size()), knob_table_markdown())
      << "docs/development.md's knob table differs from the registry: regenerate it with `rlx knobs --markdown`";
  for (const KnobInfo& k : knob_table()) {
    EXPECT_NE(doc.find(std::string("`") + k.name + "`"), std::string::npos) << k.name;
    EXPECT_NE(doc.find(std::string("`") + k.env + "`"), std::string::npos) << k.env;
  }
}

TEST_F(Knobs, NoOtherCodeReadsAnRlxVariable) {
  namespace fs = std::filesystem;
  const fs::path root(RLX_SOURCE_DIR);
  std::set<std::string> envs;
  for (const KnobInfo& k : knob_table()) envs.insert(k.env);
  // A getenv of anything but a literal non-RLX_ name, or a call of the old helpers.
  const std::regex getenv_call(R"re(getenv\s*\(\s*("([A-Za-z0-9_]*)")?)re");
  const std::regex helper_call(R"re(\b(env_int|env_off|env_flag)\s*\(\s*("(RLX_[A-Z0-9_]*)")?)re");
  std::vector<std::string> violations;
  for (const char* dir : {"src", "tools", "bench", "include", "examples"}) {
    if (!fs::exists(root / dir)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".h" && ext != ".cc" && ext != ".hpp")) continue;
      const std::string rel = fs::relative(entry.path(), root).generic_string();
      if (rel == "src/runtime/knobs.cpp") continue;
      std::istringstream text(read_text(entry.path()));
      std::string line;
      for (int no = 1; std::getline(text, line); ++no) {
        const std::string where = rel + ":" + std::to_string(no) + ": " + line;
        for (std::sregex_iterator m(line.begin(), line.end(), getenv_call), stop; m != stop; ++m) {
          const std::string name = (*m)[2].str();
          if ((*m)[1].matched && name.rfind("RLX_", 0) != 0) continue;  // HOME, XDG_CACHE_HOME, ...
          violations.push_back(where);
          if ((*m)[1].matched && !envs.count(name)) violations.push_back(where + "  (" + name + " is not in the table)");
        }
        for (std::sregex_iterator m(line.begin(), line.end(), helper_call), stop; m != stop; ++m) {
          violations.push_back(where);
          if ((*m)[2].matched && !envs.count((*m)[3].str()))
            violations.push_back(where + "  (" + (*m)[3].str() + " is not in the table)");
        }
      }
    }
  }
  for (const std::string& v : violations)
    ADD_FAILURE() << "an RLX_* variable read outside the knob registry (use ResolvedKnobs / process_knobs, "
                     "src/runtime/knobs.h):\n  "
                  << v;
}

}  // namespace
}  // namespace rlx
