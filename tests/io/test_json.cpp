// Graph JSON: round trip of a graph using every op kind (inline and side-file data), loaded
// graphs that run, base64, and every rejection path of the reader.
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "io/base64.h"
#include "rlx/limits.h"
#include "io/json_test_graphs.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::json;
using testing::error_message;
using testing::run_cpu;
namespace fs = std::filesystem;

void expect_same_graph(const Graph& a, const Graph& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const Node& na = a.nodes()[i];
    const Node& nb = b.nodes()[i];
    EXPECT_TRUE(op_equal(na.op, nb.op)) << "node " << i << " (" << op_name(na.op) << "): " << op_attrs_str(na.op)
                                        << " vs " << op_attrs_str(nb.op);
    EXPECT_EQ(na.inputs, nb.inputs) << "node " << i;
    EXPECT_EQ(na.outputs, nb.outputs) << "node " << i;
  }
  EXPECT_EQ(a.outputs(), b.outputs());
  EXPECT_EQ(a.output_names(), b.output_names());
  EXPECT_EQ(a.to_text(), b.to_text());
  ASSERT_EQ(a.weights().size(), b.weights().size());
  for (const auto& [name, t] : a.weights()) {
    auto it = b.weights().find(name);
    ASSERT_NE(it, b.weights().end()) << name;
    EXPECT_EQ(it->second.shape_info(), t.shape_info());
    EXPECT_EQ(std::memcmp(it->second.raw(), t.raw(), t.nbytes()), 0) << name;
  }
}

class Json : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rlx_json_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// ---- round trips ----------------------------------------------------------------------
TEST_F(Json, RoundTripsEveryOpKind) {
  const Graph g = json_test::all_ops_graph();
  std::set<size_t> kinds;
  json_test::collect_kinds(g, kinds);
  EXPECT_EQ(kinds.size(), std::variant_size_v<Op>) << "the test graph must use every op kind";

  const std::string text = graph_to_json(g);
  const Graph back = graph_from_json(text);
  expect_same_graph(g, back);
  EXPECT_NO_THROW(back.verify());
  EXPECT_EQ(graph_to_json(back), text);  // stable

  const json doc = json::parse(text);
  EXPECT_EQ(doc["format"], "rlx-graph");
  EXPECT_EQ(doc["version"], 1);
  EXPECT_NE(text.find("\"-inf\""), std::string::npos);           // Pad value
  EXPECT_NE(text.find("18446744073709551615"), std::string::npos);  // u64 seed
  EXPECT_NE(text.find("\"batch\""), std::string::npos);           // symbolic dim
}

void collect_tensors(const json& j, std::vector<const json*>& out) {
  if (j.is_object()) {
    if (j.contains("dtype") && j.contains("shape") && (j.contains("data") || j.contains("offset"))) out.push_back(&j);
    for (const auto& [k, v] : j.items()) collect_tensors(v, out);
  } else if (j.is_array()) {
    for (const auto& v : j) collect_tensors(v, out);
  }
}

TEST_F(Json, SideFileRoundTrip) {
  const Graph g = json_test::all_ops_graph();
  save_graph_json(g, path("g.json"), {.inline_data = false});
  ASSERT_TRUE(fs::exists(path("g.json.bin")));
  std::ifstream f(path("g.json"));
  const json doc = json::parse(f);
  EXPECT_EQ(doc["data_file"], "g.json.bin");
  std::vector<const json*> tensors;
  collect_tensors(doc, tensors);
  ASSERT_GT(tensors.size(), 20u);
  for (const json* t : tensors) {
    EXPECT_FALSE(t->contains("data"));
    EXPECT_EQ((*t)["offset"].get<uint64_t>() % 64, 0u);
  }
  const Graph back = load_graph_json(path("g.json"));
  expect_same_graph(g, back);

  // Inline files need no side file.
  save_graph_json(g, path("inline.json"));
  EXPECT_FALSE(fs::exists(path("inline.json.bin")));
  expect_same_graph(g, load_graph_json(path("inline.json")));
}

// A runnable graph: If(flag, x) {x * const * scale} {x}, then matmul with the weight `w`;
// `scale` is a param of the then-branch with a weight carried by the subgraph.
Graph runnable_graph() {
  Graph g;
  const Shape s = Shape::of({2, 4, 8});
  auto t = std::make_shared<Graph>();
  {
    const Value x = t->input("x", s);  // node 0
    const Value scaled = t->mul(x, t->constant(json_test::f32_values({8}, 0.5f, 0.25f)));
    t->add_output(t->mul(scaled, t->param("scale", Shape::of({8}))));
    t->set_weight("scale", json_test::f32_values({8}, 2.0f, -0.5f));
  }
  auto e = std::make_shared<Graph>();
  e->add_output(e->input("x", s));
  const Value x = g.input("x", s);
  const Value flag = g.input("flag", Shape({}, DType::Bool));
  const Value w = g.param("w", Shape::of({8, 8}));
  g.add_output(g.matmul(g.apply(ops::If{t, e}, {flag, x}), w), "y");
  g.set_weight("w", json_test::f32_values({8, 8}, -0.5f, 0.015625f));
  return g;
}

TEST_F(Json, LoadedGraphRunsWithItsWeights) {
  const Graph g = runnable_graph();
  save_graph_json(g, path("r.json"), {.inline_data = false});
  const Graph back = load_graph_json(path("r.json"));
  const Tensor x = testing::random_tensor(DType::F32, {2, 4, 8}, 1);
  for (uint8_t flag : {0, 1}) {
    const NamedTensors in{{"x", x}, {"flag", Tensor::boolean({}, std::span<const uint8_t>(&flag, 1))}};
    const Tensor a = run_cpu(g, in)[0];
    const Tensor b = run_cpu(back, in)[0];
    EXPECT_EQ(a.to_f32(), b.to_f32());
  }
  const auto& branch = *std::get<ops::If>(back.nodes()[3].op).then_branch;
  ASSERT_EQ(branch.weights().count("scale"), 1u);
  EXPECT_EQ(branch.weights().at("scale").to_f32(), json_test::f32_values({8}, 2.0f, -0.5f).to_f32());
}

TEST_F(Json, AbsentAttributesTakeDefaults) {
  Graph g;
  const Value x = g.input("x", Shape::of({2, 3}));
  g.add_output(g.softmax(x, -1));
  json doc = json::parse(graph_to_json(g));
  doc["nodes"][1].erase("attrs");
  doc["nodes"][1].erase("shapes");
  const Graph back = graph_from_json(doc.dump());
  EXPECT_EQ(std::get<ops::Softmax>(back.nodes()[1].op).axis, -1);
  doc["nodes"][1]["attrs"] = json::object();
  doc["nodes"][1].erase("inputs");
  doc["nodes"][0].erase("inputs");
  EXPECT_THAT(error_message([&] { graph_from_json(doc.dump()); }), HasSubstr("softmax takes 1 inputs, got 0"));
}

// ---- base64 -----------------------------------------------------------------------------
TEST(Base64, KnownVectorsAndRoundTrips) {
  const std::pair<std::string, std::string> known[] = {
      {"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"}, {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="},
      {"foobar", "Zm9vYmFy"}, {std::string("\xff\xfe\x00", 3), "//4A"}};
  for (const auto& [raw, enc] : known) {
    EXPECT_EQ(io::base64_encode(raw.data(), raw.size()), enc);
    const auto dec = io::base64_decode(enc);
    EXPECT_EQ(std::string(dec.begin(), dec.end()), raw);
  }
  std::string bytes;
  for (int n = 0; n < 70; ++n) {
    const std::string enc = io::base64_encode(bytes.data(), bytes.size());
    const auto dec = io::base64_decode(enc);
    EXPECT_EQ(std::string(dec.begin(), dec.end()), bytes);
    EXPECT_EQ(io::base64_decoded_size(enc), bytes.size());
    bytes += static_cast<char>(n * 37 + 11);
  }
}

TEST(Base64, RejectsMalformedText) {
  EXPECT_THAT(error_message([] { io::base64_decode("abc"); }), HasSubstr("not a multiple of 4"));
  EXPECT_THAT(error_message([] { io::base64_decode("ab!d"); }), HasSubstr("invalid character '!' at position 2"));
  EXPECT_THAT(error_message([] { io::base64_decode("a=bc"); }), HasSubstr("invalid character '='"));
  EXPECT_THAT(error_message([] { io::base64_decode("ab==abcd"); }), HasSubstr("invalid character '='"));
  EXPECT_THAT(error_message([] { io::base64_decode("Zh=="); }), HasSubstr("non-zero padding bits"));
  EXPECT_THAT(error_message([] { io::base64_decode("Zm9="); }), HasSubstr("non-zero padding bits"));
  EXPECT_THAT(error_message([] { io::base64_decode(std::string("ab\0d", 4)); }), HasSubstr("code 0"));
}

// ---- rejection paths --------------------------------------------------------------------
// nodes: 0 input x f32[2,3], 1 constant f32[3], 2 add, 3 softmax; output softmax.
Graph small_graph() {
  Graph g;
  const Value x = g.input("x", Shape::of({2, 3}));
  const Value c = g.constant(Tensor::f32({3}, std::vector<float>{1, 2, 3}));
  g.add_output(g.softmax(g.add(x, c), -1), "probs");
  return g;
}

std::string load_error(const json& doc, const std::string& base_dir = ".") {
  return error_message([&] { graph_from_json(doc.dump(), base_dir); });
}

struct Mutation {
  const char* what;
  std::function<void(json&)> mutate;
  std::string expect;
};

void check_mutations(const json& base, const std::vector<Mutation>& cases) {
  for (const Mutation& m : cases) {
    SCOPED_TRACE(m.what);
    json doc = base;
    m.mutate(doc);
    const std::string msg = load_error(doc);
    EXPECT_THAT(msg, HasSubstr("graph JSON"));
    EXPECT_THAT(msg, HasSubstr(m.expect));
  }
}

TEST_F(Json, RejectsMalformedDocuments) {
  EXPECT_THAT(error_message([] { graph_from_json("{\"format\": "); }), HasSubstr("malformed JSON"));
  EXPECT_THAT(error_message([] { graph_from_json(""); }), HasSubstr("malformed JSON"));
  EXPECT_THAT(error_message([] { graph_from_json("[1, 2]"); }), HasSubstr("document: expected an object, got array"));
  EXPECT_THAT(error_message([] { graph_from_json(R"({"format": "rlx-graph", "version": 1, "version": 1})"); }),
              HasSubstr("duplicate key 'version'"));
  std::string dup = graph_to_json(small_graph());
  const size_t at = dup.find("\"axis\"");
  ASSERT_NE(at, std::string::npos);
  dup.insert(at, "\"axis\": 0, ");
  EXPECT_THAT(error_message([&] { graph_from_json(dup); }), HasSubstr("duplicate key 'axis'"));
  EXPECT_THAT(error_message([] { load_graph_json("/nonexistent/dir/g.json"); }),
              AllOf(HasSubstr("cannot open"), HasSubstr("No such file or directory")));
  const json base = json::parse(graph_to_json(small_graph()));
  check_mutations(base, {
      {"format", [](json& d) { d["format"] = "onnx"; }, "is 'onnx', expected 'rlx-graph'"},
      {"no format", [](json& d) { d.erase("format"); }, "missing field 'format'"},
      {"version", [](json& d) { d["version"] = 2; }, "unsupported version 2"},
      {"version type", [](json& d) { d["version"] = "1"; }, "field 'version': expected an integer, got string '1'"},
      {"extra field", [](json& d) { d["extra"] = 1; }, "unknown field 'extra'"},
      {"nodes type", [](json& d) { d["nodes"] = json::object(); }, "field 'nodes': expected an array, got object"},
      {"no nodes", [](json& d) { d.erase("nodes"); }, "missing field 'nodes'"},
      {"node type", [](json& d) { d["nodes"][2] = 5; }, "node 2: expected an object, got integer 5"},
      {"node field", [](json& d) { d["nodes"][2]["bogus"] = 1; }, "node 2: unknown field 'bogus'"},
      {"no id", [](json& d) { d["nodes"][2].erase("id"); }, "node 2: missing field 'id'"},
      {"id", [](json& d) { d["nodes"][2]["id"] = 7; }, "node 2: field 'id' is 7 but the node is at position 2"},
      {"op", [](json& d) { d["nodes"][2]["op"] = "frobnicate"; }, "node 2: unknown op 'frobnicate'"},
      {"op type", [](json& d) { d["nodes"][2]["op"] = 3; }, "node 2: field 'op': expected a string"},
      {"unknown attr", [](json& d) { d["nodes"][3]["attrs"]["axes"] = 1; },
       "node 3 (softmax): unknown attribute 'axes' for op 'softmax' (its attributes: axis)"},
      {"attr on no-attr op", [](json& d) { d["nodes"][0]["attrs"]["value"] = 1; },
       "node 0 (input): unknown attribute 'value' for op 'input' (its attributes: name, shape)"},
      {"int attr string", [](json& d) { d["nodes"][3]["attrs"]["axis"] = "last"; },
       "node 3 (softmax): attribute 'axis': expected an integer, got string 'last'"},
      {"int attr float", [](json& d) { d["nodes"][3]["attrs"]["axis"] = 1.5; }, "expected an integer, got number 1.5"},
      {"int attr overflow", [](json& d) { d["nodes"][3]["attrs"]["axis"] = std::numeric_limits<uint64_t>::max(); },
       "does not fit in int64"},
      {"attrs type", [](json& d) { d["nodes"][3]["attrs"] = json::array(); },
       "node 3 (softmax): field 'attrs': expected an object"},
      {"enum", [](json& d) { d["nodes"][2]["attrs"]["kind"] = "plus"; },
       "node 2 (binary): attribute 'kind': unknown value 'plus' (expected one of: add, sub"},
      {"dtype", [](json& d) { d["nodes"][0]["attrs"]["shape"]["dtype"] = "f128"; }, "unknown dtype 'f128'"},
      {"negative dim", [](json& d) { d["nodes"][0]["attrs"]["shape"]["dims"] = {2, -3}; },
       "node 0 (input): attribute 'shape': field 'dims'[1]: dim -3 is negative"},
      {"empty symbol", [](json& d) { d["nodes"][0]["attrs"]["shape"]["dims"] = {2, ""}; }, "non-empty name"},
      {"dim type", [](json& d) { d["nodes"][0]["attrs"]["shape"]["dims"] = {2, true}; },
       "a dim is an integer or a symbol name (string), got true"},
      {"shape field", [](json& d) { d["nodes"][0]["attrs"]["shape"]["rank"] = 2; }, "unknown field 'rank'"},
      {"string attr", [](json& d) { d["nodes"][0]["attrs"]["name"] = json::array(); },
       "attribute 'name': expected a string, got array"},
      {"forward input", [](json& d) { d["nodes"][2]["inputs"][1] = {5, 0}; },
       "node 2 (binary): field 'inputs'[1]: refers to node 5, which is not an earlier node (valid: 0..1)"},
      {"self input", [](json& d) { d["nodes"][2]["inputs"][1] = {2, 0}; }, "refers to node 2, which is not an earlier"},
      {"negative input", [](json& d) { d["nodes"][2]["inputs"][1] = {-1, 0}; }, "refers to node -1"},
      {"port", [](json& d) { d["nodes"][2]["inputs"][1] = {1, 3}; },
       "refers to output 3 of node 1 (constant), which has 1 output(s)"},
      {"input pair", [](json& d) { d["nodes"][2]["inputs"][1] = {1}; }, "field 'inputs'[1]: expected [node, port]"},
      {"inputs type", [](json& d) { d["nodes"][2]["inputs"] = "x"; }, "field 'inputs': expected an array"},
      {"arity", [](json& d) { d["nodes"][2]["inputs"] = {{0, 0}}; }, "binary takes 2 inputs, got 1"},
      {"inference", [](json& d) { d["nodes"][2]["inputs"] = {{0, 0}, {0, 0}}; d["nodes"][0]["attrs"]["shape"]["dims"] = {2, 4}; },
       "stored shape f32[2,3] differs from the re-inferred f32[2,4]"},
      {"shape count", [](json& d) { d["nodes"][2]["shapes"] = json::array(); }, "lists 0 shapes but the op produces 1"},
      {"outputs", [](json& d) { d["outputs"] = {{9, 0}}; }, "field 'outputs'[0]: refers to node 9"},
      {"outputs type", [](json& d) { d["outputs"] = 3; }, "field 'outputs': expected an array"},
      {"output names", [](json& d) { d["output_names"] = {"a", "b"}; }, "has 2 names for 1 outputs"},
      {"output name type", [](json& d) { d["output_names"] = {1}; }, "field 'output_names'[0]: expected a string"},
      {"weights type", [](json& d) { d["weights"] = json::array(); }, "field 'weights': expected an object"},
      {"weight name", [](json& d) { d["weights"]["nope"] = d["nodes"][1]["attrs"]["value"]; },
       "weight 'nope': set_weight: the graph has no param named 'nope'"},
  });
}

TEST_F(Json, RejectsInvalidShapeInference) {
  // A constant of the wrong length: Graph::add_node's error, prefixed.
  json doc = json::parse(graph_to_json(small_graph()));
  const std::vector<float> four{1, 2, 3, 4};
  doc["nodes"][1]["attrs"]["value"] = {{"dtype", "f32"}, {"shape", {4}}, {"data", io::base64_encode(four.data(), 16)}};
  doc["nodes"][1].erase("shapes");
  const std::string msg = load_error(doc);
  EXPECT_THAT(msg, HasSubstr("graph JSON: node 2 (binary) with inputs (f32[2,3], f32[4])"));
}

TEST_F(Json, RejectsBadTensors) {
  const json base = json::parse(graph_to_json(small_graph()));
  const auto value = [](json& d) -> json& { return d["nodes"][1]["attrs"]["value"]; };
  const std::vector<uint8_t> bad_bool{1, 2, 0};
  check_mutations(base, {
      {"no dtype", [&](json& d) { value(d).erase("dtype"); }, "attribute 'value': missing field 'dtype'"},
      {"dtype", [&](json& d) { value(d)["dtype"] = "float"; }, "attribute 'value': field 'dtype': unknown dtype 'float'"},
      {"size", [&](json& d) { value(d)["data"] = "AAAA"; }, "base64 data holds 3 bytes but f32[3] needs 12"},
      {"base64 char", [&](json& d) { value(d)["data"] = "AAAA!AAAAAAAAAAA"; }, "invalid character '!' at position 4"},
      {"data type", [&](json& d) { value(d)["data"] = 5; }, "field 'data': expected a string"},
      {"both", [&](json& d) { value(d)["offset"] = 0; }, "not both"},
      {"neither", [&](json& d) { value(d).erase("data"); }, "not neither"},
      {"no side file", [&](json& d) { value(d).erase("data"); value(d)["offset"] = 0; value(d)["nbytes"] = 12; },
       "names no \"data_file\""},
      {"negative offset", [&](json& d) { value(d).erase("data"); value(d)["offset"] = -64; value(d)["nbytes"] = 12; },
       "field 'offset': expected a non-negative integer, got -64"},
      {"shape", [&](json& d) { value(d)["shape"] = {-3}; }, "field 'shape'[0]: dim -3 is negative"},
      {"shape type", [&](json& d) { value(d)["shape"] = "3"; }, "field 'shape': expected an array"},
      {"symbolic tensor", [&](json& d) { value(d)["shape"] = {"n"}; }, "field 'shape'[0]: expected an integer"},
      {"huge", [&](json& d) { value(d)["shape"] = {1LL << 40, 1LL << 40}; }, "more elements than a 64-bit count holds"},
      {"tensor field", [&](json& d) { value(d)["layout"] = "nchw"; }, "unknown field 'layout'"},
      {"tensor type", [&](json& d) { value(d) = "AAAA"; }, "attribute 'value': expected an object"},
      {"bool data",
       [&](json& d) {
         value(d) = {{"dtype", "bool"}, {"shape", {3}}, {"data", io::base64_encode(bad_bool.data(), 3)}};
       },
       "bool tensor element 1 is 2"},
  });
}

TEST_F(Json, RejectsBadAttributeValuesOfEveryKind) {
  Graph g;
  const Value x = g.input("x", Shape::of({2, 8}));
  g.apply(ops::Sample{.top_k = 2, .seed = 5}, {x});
  g.apply(ops::FusedSwiGLU{.gate_first = true}, {x});
  g.apply(ops::Resize{.scales = {1.0, 2.0}, .sizes = {}}, {x});
  g.apply(ops::FusedMatMulBiasAct{.activation = ActKind::Relu}, {x, g.constant(json_test::f32_values({8, 3}, 0, 1))});
  g.apply(ops::Reshape{.shape = {Dim::symbol("k"), Dim(-1)}}, {g.input("y", Shape({Dim::symbol("k"), Dim(3)}))});
  g.add_output(x);
  const json base = json::parse(graph_to_json(g));
  check_mutations(base, {
      {"u64 negative", [](json& d) { d["nodes"][1]["attrs"]["seed"] = -1; },
       "node 1 (sample): attribute 'seed': expected a non-negative integer, got -1"},
      {"u64 string", [](json& d) { d["nodes"][1]["attrs"]["seed"] = "5"; }, "expected a non-negative integer, got string"},
      {"double", [](json& d) { d["nodes"][1]["attrs"]["top_p"] = "high"; },
       "attribute 'top_p': expected a number (or \"nan\", \"inf\", \"-inf\"), got string 'high'"},
      {"double validated", [](json& d) { d["nodes"][1]["attrs"]["top_p"] = "nan"; }, "top_p must be in (0, 1]"},
      {"bool", [](json& d) { d["nodes"][2]["attrs"]["gate_first"] = 1; },
       "node 2 (fused_swiglu): attribute 'gate_first': expected true or false, got integer 1"},
      {"double list", [](json& d) { d["nodes"][3]["attrs"]["scales"] = {1.0, "x"}; },
       "attribute 'scales'[1]: expected a number"},
      {"int list", [](json& d) { d["nodes"][3]["attrs"]["sizes"] = {1, 2.5}; }, "attribute 'sizes'[1]: expected an integer"},
      {"optional enum", [](json& d) { d["nodes"][5]["attrs"]["activation"] = "swish"; },
       "attribute 'activation': unknown value 'swish'"},
      {"dims", [](json& d) { d["nodes"][7]["attrs"]["shape"] = {"k", 2.5}; },
       "attribute 'shape'[1]: a dim is an integer or a symbol name"},
  });
  // Optional activation null and symbolic/negative reshape dims load back.
  json doc = base;
  doc["nodes"][5]["attrs"]["activation"] = nullptr;
  const Graph back = graph_from_json(doc.dump());
  EXPECT_FALSE(std::get<ops::FusedMatMulBiasAct>(back.nodes()[5].op).activation.has_value());
  EXPECT_EQ(std::get<ops::Reshape>(back.nodes()[7].op).shape, (std::vector<Dim>{Dim::symbol("k"), Dim(-1)}));
}

TEST_F(Json, RejectsBadSubgraphsAndRegions) {
  const json base = json::parse(graph_to_json(runnable_graph()));
  // nodes: 0 x, 1 flag, 2 w, 3 if, 4 matmul. The If's then_branch: 0 x, 1 constant, 2 mul.
  check_mutations(base, {
      {"nested op", [](json& d) { d["nodes"][3]["attrs"]["then_branch"]["nodes"][2]["op"] = "mull"; },
       "node 3 (if): attribute 'then_branch': node 2: unknown op 'mull'"},
      {"nested field", [](json& d) { d["nodes"][3]["attrs"]["else_branch"]["format"] = "rlx-graph"; },
       "attribute 'else_branch': unknown field 'format'"},
      {"nested type", [](json& d) { d["nodes"][3]["attrs"]["else_branch"] = 3; },
       "attribute 'else_branch': expected an object"},
      {"null branch", [](json& d) { d["nodes"][3]["attrs"]["else_branch"] = nullptr; }, "else_branch is null"},
      {"nested shapes",
       [](json& d) {
         json& in0 = d["nodes"][3]["attrs"]["then_branch"]["nodes"][0];
         in0["attrs"]["shape"]["dims"] = {2, 4, 4};
         in0.erase("shapes");
       },
       "attribute 'then_branch': node 2 (binary)"},
  });
  // Deep nesting is refused before recursion gets deep.
  json deep = {{"nodes", json::array()}, {"outputs", json::array()}};
  for (int i = 0; i < 40; ++i)
    deep = {{"nodes", {{{"id", 0}, {"op", "if"}, {"attrs", {{"then_branch", deep}}}}}}, {"outputs", json::array()}};
  deep["format"] = "rlx-graph";
  deep["version"] = 1;
  EXPECT_THAT(load_error(deep), HasSubstr("nested more than 32 levels deep"));

  Graph r;
  const Value x = r.input("x", Shape::of({4}));
  r.add_output(r.apply(ops::ElementwiseRegion{.steps = {{RegionStepKind::Activation, static_cast<int32_t>(ActKind::Exp),
                                                        DType::F32, {0}}}},
                       {x}));
  const json region = json::parse(graph_to_json(r));
  EXPECT_EQ(region["nodes"][1]["attrs"]["steps"][0]["op"], "exp");
  check_mutations(region, {
      {"kind", [](json& d) { d["nodes"][1]["attrs"]["steps"][0]["kind"] = "loop"; },
       "attribute 'steps'[0]: field 'kind': unknown value 'loop'"},
      {"op for kind", [](json& d) { d["nodes"][1]["attrs"]["steps"][0]["op"] = "add"; },
       "field 'op': unknown value 'add' (expected one of: gelu"},
      {"args", [](json& d) { d["nodes"][1]["attrs"]["steps"][0]["args"] = "0"; }, "field 'args': expected an array"},
      {"arg range", [](json& d) { d["nodes"][1]["attrs"]["steps"][0]["args"] = {1LL << 40}; }, "does not fit in int32"},
      {"step field", [](json& d) { d["nodes"][1]["attrs"]["steps"][0]["extra"] = 0; }, "unknown field 'extra'"},
      {"no args", [](json& d) { d["nodes"][1]["attrs"]["steps"][0].erase("args"); }, "missing field 'args'"},
      {"steps type", [](json& d) { d["nodes"][1]["attrs"]["steps"] = json::object(); }, "expected an array"},
  });
}

TEST_F(Json, RejectsBadSideFiles) {
  const Graph g = small_graph();
  save_graph_json(g, path("s.json"), {.inline_data = false});
  std::ifstream f(path("s.json"));
  const json base = json::parse(f);
  const auto value = [](json& d) -> json& { return d["nodes"][1]["attrs"]["value"]; };
  EXPECT_EQ(base["nodes"][1]["attrs"]["value"]["nbytes"], 12);
  const std::string dir = dir_.string();
  const auto err = [&](const std::function<void(json&)>& mutate) {
    json d = base;
    mutate(d);
    return load_error(d, dir);
  };
  EXPECT_NO_THROW(graph_from_json(base.dump(), dir));
  EXPECT_THAT(err([](json& d) { d["data_file"] = "/etc/passwd"; }), HasSubstr("must be a path relative"));
  EXPECT_THAT(err([](json& d) { d["data_file"] = "../s.json.bin"; }), HasSubstr("leaves the folder"));
  EXPECT_THAT(err([](json& d) { d["data_file"] = ""; }), HasSubstr("the path is empty"));
  EXPECT_THAT(err([](json& d) { d["data_file"] = 3; }), HasSubstr("field 'data_file': expected a string"));
  EXPECT_THAT(err([](json& d) { d["data_file"] = "missing.bin"; }), HasSubstr("cannot open the side data file"));
  EXPECT_THAT(err([&](json& d) { value(d)["offset"] = 64; }), HasSubstr("lie outside the side data file"));
  EXPECT_THAT(err([&](json& d) { value(d)["offset"] = std::numeric_limits<uint64_t>::max(); }),
              HasSubstr("lie outside the side data file"));
  EXPECT_THAT(err([&](json& d) { value(d)["nbytes"] = 8; }), HasSubstr("field 'nbytes': is 8 but f32[3] needs 12"));
  EXPECT_THAT(err([&](json& d) { value(d).erase("nbytes"); }), HasSubstr("missing field 'nbytes'"));
  // A truncated side file.
  fs::resize_file(path("s.json.bin"), 6);
  EXPECT_THAT(error_message([&] { load_graph_json(path("s.json")); }),
              HasSubstr("bytes [0, 0+12) lie outside the side data file"));
}

// ---- hardening (issue 26) --------------------------------------------------------------

// 100k nested brackets must be rejected before the recursive parser (or a dump() in an error
// message) can overflow the stack; brackets inside strings do not count.
TEST_F(Json, DeeplyNestedDocumentsAreRejectedBeforeParsing) {
  const std::string deep_array(100000, '[');
  EXPECT_THAT(error_message([&] { graph_from_json(deep_array); }),
              AllOf(HasSubstr("graph JSON"), HasSubstr("nested deeper than 256")));
  // Deep inside an otherwise valid document (an attribute value, an input reference).
  std::string doc = graph_to_json(small_graph());
  const size_t at = doc.find("\"axis\"");
  ASSERT_NE(at, std::string::npos);
  std::string deep_attr = doc;
  deep_attr.insert(at, "\"deep\": " + std::string(100000, '[') + std::string(100000, ']') + ", ");
  EXPECT_THAT(error_message([&] { graph_from_json(deep_attr); }), HasSubstr("nested deeper than 256"));
  std::string deep_objects;
  for (int i = 0; i < 100000; ++i) deep_objects += "{\"a\":";
  EXPECT_THAT(error_message([&] { graph_from_json(deep_objects); }), HasSubstr("nested deeper than 256"));
  // The same through a file.
  std::ofstream(path("deep.json")) << deep_array;
  EXPECT_THAT(error_message([&] { load_graph_json(path("deep.json")); }), HasSubstr("nested deeper than 256"));
  // Brackets inside a string are text: the document is parsed and the op name is what is wrong.
  json base = json::parse(doc);
  base["nodes"][1]["op"] = std::string(5000, '[');
  const std::string msg = load_error(base);
  EXPECT_THAT(msg, HasSubstr("unknown op"));
  EXPECT_LT(msg.size(), 1000u) << "a 5000-character name must be cut in the message";
  // The limit is the size policy's: a lower one rejects a normal document, a higher one
  // accepts deeper (still well-formed) nesting.
  Limits low;
  low.max_nesting_depth = 3;
  {
    ScopedLimits scoped(low);
    EXPECT_THAT(error_message([&] { graph_from_json(doc); }), HasSubstr("nested deeper than 3"));
  }
  EXPECT_NO_THROW(graph_from_json(doc));
}

// A bad [node, port] reference that is a huge array must not be dumped into the message.
TEST_F(Json, MessagesNeverDumpLargeOrControlCharacterValues) {
  json base = json::parse(graph_to_json(small_graph()));
  json big = json::array();
  for (int i = 0; i < 100000; ++i) big.push_back(i);
  base["outputs"][0] = big;
  const std::string msg = load_error(base);
  EXPECT_THAT(msg, HasSubstr("expected [node, port], got an array of 100000 element(s)"));
  EXPECT_LT(msg.size(), 400u);
  // Control characters in names are escaped in messages.
  json esc = json::parse(graph_to_json(small_graph()));
  esc["nodes"][1]["op"] = "add\x1b[31m\n";
  EXPECT_THAT(load_error(esc), AllOf(HasSubstr("unknown op 'add\\x1b[31m\\n'"), Not(HasSubstr("\x1b"))));
  json key = json::parse(graph_to_json(small_graph()));
  key["nodes"][1]["attrs"]["bad\x07key"] = 1;
  EXPECT_THAT(load_error(key), AllOf(HasSubstr("bad\\x07key"), Not(HasSubstr("\x07"))));
  json fld = json::parse(graph_to_json(small_graph()));
  fld["bogus\x01"] = 1;
  EXPECT_THAT(load_error(fld), HasSubstr("unknown field 'bogus\\x01'"));
}

// Shapes of tensors stored in the JSON go through the size policy's checked helpers: a
// wrapping byte count (2^62 + 1 elements of f32 would be 4 bytes) is an error, not a 4-byte tensor.
TEST_F(Json, TensorShapesAreCheckedAgainstOverflowAndTheSizePolicy) {
  json base = json::parse(graph_to_json(small_graph()));
  json& value = base["nodes"][1]["attrs"]["value"];
  value["shape"] = json::array({int64_t{4611686018427387905}});
  EXPECT_THAT(load_error(base), AllOf(HasSubstr("attribute 'value'"), HasSubstr("field 'shape'")));
  value["shape"] = json::array({int64_t{1} << 32, int64_t{1} << 32});
  EXPECT_THAT(load_error(base), HasSubstr("field 'shape'"));
  value["shape"] = json::array({int64_t{1} << 41});  // fits int64, over 2^40 elements
  EXPECT_THAT(load_error(base), HasSubstr("field 'shape'"));
  // An input declared with a huge static shape fails shape inference with the node named.
  json in = json::parse(graph_to_json(small_graph()));
  in["nodes"][0]["attrs"]["shape"]["dims"] = json::array({int64_t{4611686018427387905}});
  in["nodes"][0].erase("shapes");
  const std::string msg = load_error(in);
  EXPECT_THAT(msg, HasSubstr("graph JSON"));
  EXPECT_THAT(msg, HasSubstr("input"));
}

// data_file: symbolic links out of the graph's folder, FIFOs and devices are rejected (a FIFO
// would block forever in open); a link inside the folder is fine.
TEST_F(Json, SideFileMustBeARegularFileInsideTheGraphFolder) {
  const Graph g = small_graph();
  save_graph_json(g, path("s.json"), {.inline_data = false});
  std::ifstream f(path("s.json"));
  const json base = json::parse(f);
  const std::string dir = dir_.string();
  const auto err = [&](const std::string& data_file) {
    json d = base;
    d["data_file"] = data_file;
    return load_error(d, dir);
  };
  // A secret outside the folder, reached through a link inside it.
  const fs::path outside = fs::temp_directory_path() / ("rlx_json_secret_" + std::to_string(::getpid()));
  { std::ofstream(outside) << std::string(64, 'S'); }
  fs::create_symlink(outside, dir_ / "escape.bin");
  EXPECT_THAT(err("escape.bin"), AllOf(HasSubstr("field 'data_file'"), HasSubstr("outside the folder")));
  fs::create_directory_symlink("/etc", dir_ / "etc_link");
  EXPECT_THAT(err("etc_link/passwd"), HasSubstr("outside the folder"));
  fs::create_symlink("/dev/zero", dir_ / "zero.bin");
  EXPECT_THAT(err("zero.bin"), HasSubstr("outside the folder"));
  fs::remove(outside);
  // A FIFO inside the folder: an error at once, no hang.
  ASSERT_EQ(::mkfifo((dir_ / "fifo.bin").c_str(), 0600), 0);
  EXPECT_THAT(err("fifo.bin"), AllOf(HasSubstr("side data file"), HasSubstr("is a FIFO")));
  fs::create_directory(dir_ / "sub.bin");
  EXPECT_THAT(err("sub.bin"), HasSubstr("is a directory"));
  // A link that stays inside the folder is read.
  fs::create_symlink("s.json.bin", dir_ / "alias.bin");
  json ok = base;
  ok["data_file"] = "alias.bin";
  EXPECT_NO_THROW(graph_from_json(ok.dump(), dir));
}

// The graph JSON file itself: a FIFO, a directory or a missing file is named with the reason.
TEST_F(Json, GraphFileMustBeARegularFile) {
  ASSERT_EQ(::mkfifo(path("g.json").c_str(), 0600), 0);
  EXPECT_THAT(error_message([&] { load_graph_json(path("g.json")); }), HasSubstr("is a FIFO"));
  EXPECT_THAT(error_message([&] { load_graph_json(dir_.string()); }), HasSubstr("is a directory"));
  EXPECT_THAT(error_message([&] { load_graph_json("/dev/null"); }), HasSubstr("is a character device"));
}

// Writing is checked: a full device is an error with the OS reason, and a failed save leaves
// neither the JSON nor a stray side file (nor a temporary file) behind.
TEST_F(Json, SaveReportsWriteFailuresAndLeavesNoStrayFiles) {
  const Graph g = small_graph();
  EXPECT_THAT(error_message([&] { save_graph_json(g, "/dev/full"); }),
              AllOf(HasSubstr("/dev/full"), HasSubstr("No space left on device")));
  EXPECT_THAT(error_message([&] { save_graph_json(g, "/dev/null", {.inline_data = false}); }),
              HasSubstr("is not a regular file, so the side data file cannot go next to it"));
  EXPECT_FALSE(fs::exists("/dev/null.bin"));
  EXPECT_THAT(error_message([&] { save_graph_json(g, path("missing/dir/g.json"), {.inline_data = false}); }),
              AllOf(HasSubstr("cannot create"), HasSubstr("No such file or directory")));
  // The side file can be written but the JSON cannot (its name is a directory): nothing is left.
  fs::create_directory(dir_ / "taken.json");
  EXPECT_THAT(error_message([&] { save_graph_json(g, path("taken.json"), {.inline_data = false}); }),
              HasSubstr("is a directory"));
  EXPECT_FALSE(fs::exists(path("taken.json.bin")));
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  // A successful save replaces an existing file completely.
  { std::ofstream(path("g.json")) << std::string(100000, 'x'); }
  save_graph_json(g, path("g.json"));
  EXPECT_NO_THROW(load_graph_json(path("g.json")));
}

}  // namespace
}  // namespace rlx
