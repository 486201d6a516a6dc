// CompiledGraph::export_web: what it refuses, and that the bundle's model.json and weights.bin
// describe the compiled program (buffers, kernels, dispatches, inputs, outputs, initial bytes).
// Running bundles in a browser: tests/web/test_export_web.py (ctest web_export).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "rlx/session.h"
#include "support/test_util.h"
#include "webgpu/webgpu_test_util.h"

namespace rlx {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

CompileOptions web_options() {
  CompileOptions o;
  o.tuning.webgpu_limits = "web";
  return o;
}

// ids (i64 [n]) -> rows of a param table, plus a constant row, and the ids doubled.
Graph lookup_graph(Dim n) {
  Graph g;
  const Value ids = g.input("ids", Shape({n}, DType::I64));
  const Value table = g.param("table", Shape::of({6, 4}));
  const std::vector<float> r{0.5f, -1.0f, 2.0f, 0.25f};
  const Value row = g.constant(Tensor::f32({4}, r));
  g.add_output(g.add(g.gather(table, ids, 0), row), "rows");
  g.add_output(g.add(ids, ids), "twice");
  return g;
}

Tensor table_value() {
  std::vector<float> v(24);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f - 3.0f;
  return Tensor::f32({6, 4}, v);
}

std::string thrown(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("rlx_web_export_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

TEST(WebExport, RefusesGraphsOfOtherDevicesAndTargets) {
  auto cpu = Session(Device::Cpu).compile(lookup_graph(Dim(3)));
  cpu.set_param("table", table_value());
  EXPECT_NE(thrown([&] { cpu.export_web(fresh_dir("cpu").string()); }).find("compiled for cpu"), std::string::npos);
  RLX_REQUIRE_WEBGPU();
  auto adapter = Session(Device::WebGpu).compile(lookup_graph(Dim(3)));
  adapter.set_param("table", table_value());
  EXPECT_NE(thrown([&] { adapter.export_web(fresh_dir("adapter").string()); }).find("webgpu_limits=web"),
            std::string::npos);
}

TEST(WebExport, SymbolicDimsAndParamsMustBeGiven) {
  RLX_REQUIRE_WEBGPU();
  auto cg = Session(Device::WebGpu).compile(lookup_graph(Dim::symbol("n")), web_options());
  const std::string dir = fresh_dir("dims").string();
  EXPECT_NE(thrown([&] { cg.export_web(dir, {{{"n", 3}}}); }).find("params without values 'table'"), std::string::npos);
  cg.set_param("table", table_value());
  EXPECT_NE(thrown([&] { cg.export_web(dir); }).find("give a value to the symbolic dims 'n'"), std::string::npos);
  EXPECT_NE(thrown([&] { cg.export_web(dir, {{{"n", 3}, {"m", 2}}}); }).find("'m' is not a symbolic dim"),
            std::string::npos);
  EXPECT_NE(thrown([&] { cg.export_web(dir, {{{"n", -1}}}); }).find("negative"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir)) << "nothing is written when the export is refused";
  // A file where the folder should be.
  const fs::path file = fresh_dir("file");
  std::ofstream(file) << "x";
  EXPECT_NE(thrown([&] { cg.export_web(file.string(), {{{"n", 3}}}); }).find("cannot create the folder"),
            std::string::npos);
  fs::remove(file);
}

TEST(WebExport, ManifestAndWeightsDescribeTheProgram) {
  RLX_REQUIRE_WEBGPU();
  auto cg = Session(Device::WebGpu).compile(lookup_graph(Dim::symbol("n")), web_options());
  cg.set_param("table", table_value());
  const fs::path dir = fresh_dir("manifest");
  const WebExportSummary s = cg.export_web(dir.string(), {{{"n", 3}}});
  for (const char* f : {"model.json", "weights.bin", "rlx-web.js", "index.html"}) EXPECT_TRUE(fs::exists(dir / f)) << f;
  EXPECT_EQ(s.files.size(), 4u);
  EXPECT_NE(s.target.find("default limits"), std::string::npos) << s.target;
  const json m = json::parse(std::ifstream(dir / "model.json"));
  EXPECT_EQ(m["format"], "rlx-web-bundle");
  EXPECT_EQ(m["version"], 1);
  // The input and outputs with their dtypes as the device stores them.
  ASSERT_EQ(m["inputs"].size(), 1u);
  EXPECT_EQ(m["inputs"][0]["name"], "ids");
  EXPECT_EQ(m["inputs"][0]["dtype"], "i64");
  EXPECT_EQ(m["inputs"][0]["storage"], "i32");
  EXPECT_EQ(m["inputs"][0]["dims"], json::array({3}));
  ASSERT_EQ(m["outputs"].size(), 2u);
  EXPECT_EQ(m["outputs"][0]["name"], "rows");
  EXPECT_EQ(m["outputs"][0]["dims"], json::array({3, 4}));
  EXPECT_EQ(m["outputs"][1]["name"], "twice");
  EXPECT_EQ(m["outputs"][1]["dtype"], "i64");
  // Every command refers to existing buffers and kernels, each dispatch binds what its kernel declares.
  const size_t nbuf = m["buffers"].size(), nker = m["kernels"].size();
  size_t dispatches = 0;
  for (const json& c : m["commands"]) {
    if (c["op"] == "dispatch") {
      ++dispatches;
      ASSERT_LT(c["kernel"].get<size_t>(), nker);
      const json& k = m["kernels"][c["kernel"].get<size_t>()];
      EXPECT_EQ(c["buffers"].size() + 1, k["bindings"].size());
      EXPECT_EQ(k["bindings"].back(), "uniform");
      for (const json& b : c["buffers"]) EXPECT_LT(b.get<size_t>(), nbuf);
      EXPECT_NE(k["wgsl"].get<std::string>().find("@compute"), std::string::npos);
      EXPECT_LE(c["uniform"].size(), 64u);
    } else {
      EXPECT_LT(c["dst"].get<size_t>(), nbuf);
    }
  }
  EXPECT_EQ(dispatches, s.dispatches);
  EXPECT_GT(dispatches, 0u);
  EXPECT_EQ(m["buffers"][m["flag"].get<size_t>()]["role"], "flag");
  EXPECT_NE(m["errors"]["1"].get<std::string>().find("gather"), std::string::npos);
  // weights.bin: the param's bytes (f32 as stored) and the constant row, where the manifest says.
  const auto bytes = fs::file_size(dir / "weights.bin");
  EXPECT_EQ(bytes, m["weights"]["bytes"].get<uint64_t>());
  std::vector<char> blob(bytes);
  std::ifstream(dir / "weights.bin", std::ios::binary).read(blob.data(), static_cast<std::streamsize>(bytes));
  bool saw_param = false;
  for (const json& b : m["buffers"]) {
    if (b["role"] != "param") continue;
    ASSERT_EQ(b["name"], "table");
    const uint64_t off = b["init"][0], len = b["init"][1];
    ASSERT_EQ(len, 24u * 4);
    std::vector<float> v(24);
    std::memcpy(v.data(), blob.data() + off, len);
    const Tensor want = table_value();
    for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i], want.data<float>()[i]);
    saw_param = true;
  }
  EXPECT_TRUE(saw_param);
  fs::remove_all(dir);

  // f16 weights: the param as 2-byte halves, rounded; the i64 input untouched.
  WebExportOptions half;
  half.dims = {{"n", 3}};
  half.f16_weights = true;
  const WebExportSummary h = cg.export_web(dir.string(), half);
  EXPECT_LT(h.weight_bytes, s.weight_bytes);
  const json mh = json::parse(std::ifstream(dir / "model.json"));
  std::vector<char> hb(fs::file_size(dir / "weights.bin"));
  std::ifstream(dir / "weights.bin", std::ios::binary).read(hb.data(), static_cast<std::streamsize>(hb.size()));
  for (const json& b : mh["buffers"]) {
    if (b["role"] != "param") continue;
    ASSERT_EQ(b["init"].size(), 3u);
    EXPECT_EQ(b["init"][2], "f16");
    ASSERT_EQ(b["init"][1].get<uint64_t>(), 24u * 2);
    const Tensor want = table_value();
    for (size_t i = 0; i < 24; ++i) {
      uint16_t bits;
      std::memcpy(&bits, hb.data() + b["init"][0].get<uint64_t>() + 2 * i, 2);
      EXPECT_EQ(f16_bits_to_f32(bits), f16_bits_to_f32(f32_to_f16_bits(want.data<float>()[i])));
    }
  }
  fs::remove_all(dir);
  // A weight f16 cannot hold is refused, naming it.
  std::vector<float> big(24, 1.0f);
  big[5] = 1e6f;
  cg.set_param("table", Tensor::f32({6, 4}, big));
  EXPECT_NE(thrown([&] { cg.export_web(dir.string(), half); }).find("'table' element 5"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rlx
