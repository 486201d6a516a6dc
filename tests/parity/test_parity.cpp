// Every case of the shared list (parity_cases.h) on every registered test device (devices.h)
// against the CPU oracle: Parity/Devices.MatchTheCpu/<device>_<case>. A device that is absent,
// or lacks a dtype or the precision policy a case needs, skips it with the reason printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <ostream>
#include <set>
#include <string>

#include "parity/parity_cases.h"
#include "support/devices.h"
#include "passes/pipeline.h"
#include "runtime/backend.h"

namespace {

using namespace rlx;
using namespace rlx::testing;

struct Param {
  size_t device, kase;
};

// gtest prints the parameter in listings and failures: "cuda x softmax_rows_f16".
void PrintTo(const Param& p, std::ostream* os) {
  *os << test_devices().at(p.device).name << " x " << parity_cases().at(p.kase).name;
}

class Devices : public ::testing::TestWithParam<Param> {};

TEST_P(Devices, MatchTheCpu) {
  const TestDevice& dev = test_devices().at(GetParam().device);
  const ParityCase& c = parity_cases().at(GetParam().kase);
  if (const std::string why = dev.unavailable ? dev.unavailable() : ""; !why.empty())
    GTEST_SKIP() << dev.name << " is not available: " << why;
  if (!dev.families.empty() && std::find(dev.families.begin(), dev.families.end(), c.family) == dev.families.end())
    GTEST_SKIP() << dev.name << " does not run the " << c.family << " family: " << dev.families_reason;
  const std::vector<CaseGraph> graphs = c.build();
  std::set<DType> needed(c.dtypes.begin(), c.dtypes.end());
  for (const CaseGraph& cg : graphs)
    for (DType t : graph_dtypes(cg.graph)) needed.insert(t);
  if (const std::string why = unsupported_reason(dev, {needed.begin(), needed.end()}, c.precision); !why.empty())
    GTEST_SKIP() << why;

  if (dev.skip_unclaimed) {
    const auto backend = make_backend_for_check(dev.device);
    for (const CaseGraph& cg : graphs) {
      try {
        passes::check_legalizable(cg.graph, *backend);
      } catch (const Error& e) {
        GTEST_SKIP() << dev.name << " does not run this case: " << e.what();
      }
    }
  }
  RunConfig oracle;  // the CPU with the optimizer on
  RunConfig side;
  side.label = dev.name + "/" + precision_name(c.precision);
  side.device = dev.device;
  side.options = dev.options;
  side.options.precision = c.precision;
  for (const CaseGraph& cg : graphs) {
    SCOPED_TRACE(c.name + (cg.label.empty() ? "" : " " + cg.label));
    ParityOptions o = cg.options;
    if (!o.tolerance && dev.tolerance) o.tolerance = dev.tolerance;
    ParityReport rep;
    try {
      rep = compare_configs(cg.graph, oracle, side, o);
    } catch (const Error& e) {
      const std::string m = e.what();
      for (const std::string& limit : dev.documented_limits)
        if (m.find(limit) != std::string::npos) GTEST_SKIP() << dev.name << " reports a documented limit: " << m;
      ADD_FAILURE() << m << "\n" << cg.graph.to_text();
      continue;
    }
    EXPECT_TRUE(rep.pass) << rep.text << cg.graph.to_text();
  }
}

std::vector<Param> all_params() {
  std::vector<Param> v;
  for (size_t d = 0; d < test_devices().size(); ++d)
    for (size_t c = 0; c < parity_cases().size(); ++c) v.push_back({d, c});
  return v;
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  std::string n = test_devices().at(info.param.device).name + "_" + parity_cases().at(info.param.kase).name;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Parity, Devices, ::testing::ValuesIn(all_params()), param_name);

// The list itself: unique names of [a-z0-9_] (they are test names), every family present, every
// case builds at least one verifiable graph without symbolic dims.
TEST(ParityCases, NamesAreUniqueAndEveryFamilyHasCases) {
  std::set<std::string> names;
  std::map<std::string, int> families;
  for (const ParityCase& c : parity_cases()) {
    EXPECT_TRUE(names.insert(c.name).second) << c.name << " is listed twice";
    for (char ch : c.name) EXPECT_TRUE(std::islower(static_cast<unsigned char>(ch)) || std::isdigit(ch) || ch == '_') << c.name;
    ++families[c.family];
  }
  for (const char* f : {"elementwise", "matmul", "rows", "reduce", "shape", "attention", "conv", "select", "model", "recurrent"})
    EXPECT_GT(families[f], 0) << f;
  EXPECT_EQ(families.size(), 10u);
}

TEST(ParityCases, EveryCaseBuildsStaticGraphs) {
  for (const ParityCase& c : parity_cases()) {
    SCOPED_TRACE(c.name);
    const auto graphs = c.build();
    EXPECT_FALSE(graphs.empty());
    for (const CaseGraph& g : graphs) {
      EXPECT_FALSE(g.graph.outputs().empty()) << g.label;
      for (NodeId id : g.graph.input_nodes())
        EXPECT_TRUE(g.graph.node(id).outputs.at(0).is_static()) << g.label;
    }
  }
}

// A device lacking a dtype or a policy skips with a reason naming it; CUDA and the unoptimized
// CPU are registered, and a backend registers with one call.
TEST(TestDevices, RegistryAndSkipReasons) {
  std::set<std::string> names;
  for (const TestDevice& d : test_devices()) names.insert(d.name);
  EXPECT_TRUE(names.count("cuda"));
  EXPECT_TRUE(names.count("cpu-unoptimized"));
  TestDevice d;
  d.name = "nof64";
  d.dtypes = {DType::F32, DType::F16};
  EXPECT_EQ(unsupported_reason(d, {DType::F32}, Precision::Fp32), "");
  EXPECT_EQ(unsupported_reason(d, {DType::F32, DType::F64, DType::I64}, Precision::Fp32), "nof64 does not run f64, i64");
  EXPECT_NE(unsupported_reason(d, {DType::F32}, Precision::Tf32).find("no tf32 precision policy"), std::string::npos)
      << unsupported_reason(d, {DType::F32}, Precision::Tf32);
}

}  // namespace
