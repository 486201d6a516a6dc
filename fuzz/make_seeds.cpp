// Writes the seed corpora of the fuzz targets (committed under fuzz/corpus/<target>/):
//   fuzz_onnx, fuzz_onnx_run: small ONNX models built here with the onnx protobuf classes (valid
//     ones covering control flow, recurrent ops, symbolic dims and fusion patterns, and near-miss
//     bad ones); the ONNX node cases of ../shared/onnx-node are not copied into the repository:
//     scripts/fuzz.sh adds them to the scratch corpus at run time when the folder is there;
//   fuzz_json: the rlx graph JSON of every seed model that imports, plus a few built directly and
//     a few bad documents;
//   fuzz_safetensors, fuzz_npy: small valid and bad files written byte by byte;
//   fuzz_gguf: files written with GgufWriter (every metadata type, every stored tensor type,
//     versions 2 and 3, a custom alignment) and bad variants of them patched byte by byte.
// Usage: fuzz_make_seeds OUT_DIR   (scripts/fuzz.sh --seeds runs it)
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "onnx/onnx_builder.h"
#include "rlx/gguf.h"
#include "rlx/onnx.h"
#include "rlx/serialize.h"

namespace fs = std::filesystem;
using rlx::Tensor;
using rlx::testing::OnnxBuilder;
using rlx::testing::set_attr;
using P = onnx::TensorProto;

namespace {

fs::path g_out;
std::vector<std::pair<std::string, std::string>> g_models;  // (name, bytes) of every ONNX seed

void write_file(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f.good()) throw std::runtime_error("cannot write " + path.string());
}

void onnx_seed(const std::string& name, const std::string& bytes) {
  for (const char* t : {"fuzz_onnx", "fuzz_onnx_run"}) write_file(g_out / t / (name + ".onnx"), bytes);
  g_models.emplace_back(name, bytes);
}

Tensor f32s(std::vector<int64_t> shape, float start = 0.5f, float step = -0.25f) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + step * static_cast<float>(i % 7);
  return Tensor::f32(std::move(shape), v);
}
Tensor i64s(std::vector<int64_t> values) {
  const int64_t n = static_cast<int64_t>(values.size());
  return Tensor::i64({n}, values);
}

void generated_onnx() {
  {  // elementwise with symbolic dims
    OnnxBuilder b(17);
    b.input("x", P::FLOAT, {-1, 4}, {"batch"}).input("y", P::FLOAT, {-1, 4}, {"batch"}).output("z");
    b.node("Add", {"x", "y"}, {"s"});
    b.node("Mul", {"s", "x"}, {"m"});
    b.node("Tanh", {"m"}, {"z"});
    onnx_seed("gen_add_mul_sym", b.bytes());
  }
  {  // MatMul + Add + Relu (fusion), f32 and int32
    for (int32_t elem : {int32_t{P::FLOAT}, int32_t{P::INT32}}) {
      OnnxBuilder b(17);
      b.input("x", elem, {2, 4}).output("y", elem);
      if (elem == P::FLOAT) {
        b.initializer("w", f32s({4, 3})).initializer("bias", f32s({3}, -0.5f, 0.5f));
      } else {
        b.initializer("w", Tensor::i32({4, 3}, std::vector<int32_t>{1, -2, 3, 4, -5, 6, 7, 8, -9, 10, 11, 12}));
        b.initializer("bias", Tensor::i32({3}, std::vector<int32_t>{-100, 0, 100}));
      }
      b.node("MatMul", {"x", "w"}, {"mm"});
      b.node("Add", {"mm", "bias"}, {"a"});
      b.node("Relu", {"a"}, {"y"});
      onnx_seed(elem == P::FLOAT ? "gen_matmul_add_relu_f32" : "gen_matmul_add_relu_i32", b.bytes());
    }
  }
  {  // Gemm with transB
    OnnxBuilder b(13);
    b.input("a", P::FLOAT, {3, 5}).output("y");
    b.initializer("b", f32s({2, 5})).initializer("c", f32s({2}));
    auto& n = b.node("Gemm", {"a", "b", "c"}, {"y"});
    set_attr(n, "transB", int64_t{1});
    set_attr(n, "alpha", 0.5f);
    onnx_seed("gen_gemm", b.bytes());
  }
  {  // Reshape / Transpose / Softmax / MatMul: an attention-like block
    OnnxBuilder b(17);
    b.input("q", P::FLOAT, {1, 4, 8}).input("k", P::FLOAT, {1, 4, 8}).input("v", P::FLOAT, {1, 4, 8}).output("o");
    b.initializer("shape", i64s({1, 4, 2, 4})).initializer("scale", Tensor::scalar_f32(0.5f));
    b.node("Reshape", {"q", "shape"}, {"q4"});
    b.node("Reshape", {"k", "shape"}, {"k4"});
    b.node("Reshape", {"v", "shape"}, {"v4"});
    set_attr(b.node("Transpose", {"q4"}, {"qt"}), "perm", std::vector<int64_t>{0, 2, 1, 3});
    set_attr(b.node("Transpose", {"k4"}, {"kt"}), "perm", std::vector<int64_t>{0, 2, 3, 1});
    set_attr(b.node("Transpose", {"v4"}, {"vt"}), "perm", std::vector<int64_t>{0, 2, 1, 3});
    b.node("MatMul", {"qt", "kt"}, {"s"});
    b.node("Mul", {"s", "scale"}, {"ss"});
    set_attr(b.node("Softmax", {"ss"}, {"p"}), "axis", int64_t{-1});
    b.node("MatMul", {"p", "vt"}, {"o"});
    onnx_seed("gen_attention_block", b.bytes());
  }
  {  // LayerNormalization and a residual
    OnnxBuilder b(17);
    b.input("x", P::FLOAT, {2, -1, 8}, {"", "seq"}).output("y");
    b.initializer("g", f32s({8}, 1.0f, 0.0f)).initializer("bt", f32s({8}, 0.0f, 0.1f));
    set_attr(b.node("LayerNormalization", {"x", "g", "bt"}, {"n"}), "axis", int64_t{-1});
    b.node("Add", {"n", "x"}, {"y"});
    onnx_seed("gen_layernorm_residual", b.bytes());
  }
  {  // Loop with a trip count input and a condition
    OnnxBuilder body(17);
    body.input("i", P::INT64, {}).input("cond_in", P::BOOL, {}).input("acc", P::FLOAT, {2});
    body.output("cond_out", P::BOOL).output("acc_out");
    body.initializer("one", f32s({2}, 1.0f, 0.0f));
    body.node("Identity", {"cond_in"}, {"cond_out"});
    body.node("Add", {"acc", "one"}, {"acc_out"});
    OnnxBuilder b(17);
    b.input("n", P::INT64, {}).input("c", P::BOOL, {}).input("a0", P::FLOAT, {2}).output("a");
    set_attr(b.node("Loop", {"n", "c", "a0"}, {"a"}), "body", body.graph());
    onnx_seed("gen_loop", b.bytes());
    // The same loop without a trip count: ends only through the iteration cap.
    OnnxBuilder b2(17);
    b2.input("c", P::BOOL, {}).input("a0", P::FLOAT, {2}).output("a");
    set_attr(b2.node("Loop", {"", "c", "a0"}, {"a"}), "body", body.graph());
    onnx_seed("gen_loop_no_trip_count", b2.bytes());
  }
  {  // If
    OnnxBuilder then_b(17), else_b(17);
    then_b.output("t");
    then_b.initializer("tv", f32s({3}, 2.0f, 1.0f));
    then_b.node("Identity", {"tv"}, {"t"});
    else_b.output("e");
    else_b.node("Neg", {"x"}, {"e"});
    OnnxBuilder b(17);
    b.input("c", P::BOOL, {}).input("x", P::FLOAT, {3}).output("y");
    auto& n = b.node("If", {"c"}, {"y"});
    set_attr(n, "then_branch", then_b.graph());
    set_attr(n, "else_branch", else_b.graph());
    onnx_seed("gen_if", b.bytes());
  }
  {  // LSTM / GRU / RNN, seq 3
    struct Rec { const char* op; int gates; };
    for (Rec r : {Rec{"LSTM", 4}, Rec{"GRU", 3}, Rec{"RNN", 1}}) {
      OnnxBuilder b(14);
      const int64_t hidden = 2, in = 3;
      b.input("x", P::FLOAT, {3, 1, in}).output("y").output("h");
      b.initializer("w", f32s({1, r.gates * hidden, in})).initializer("r", f32s({1, r.gates * hidden, hidden}));
      set_attr(b.node(r.op, {"x", "w", "r"}, {"y", "h"}), "hidden_size", hidden);
      onnx_seed(std::string("gen_") + r.op, b.bytes());
    }
  }
  {  // Range from inputs, OneHot, CumSum, TopK
    OnnxBuilder b(17);
    b.input("start", P::FLOAT, {}).input("limit", P::FLOAT, {}).input("delta", P::FLOAT, {}).output("r");
    b.node("Range", {"start", "limit", "delta"}, {"r"});
    onnx_seed("gen_range", b.bytes());
    OnnxBuilder o(17);
    o.input("idx", P::INT64, {3}).output("oh");
    o.initializer("depth", Tensor::scalar_i64(4)).initializer("values", f32s({2}, 0.0f, 1.0f));
    o.node("OneHot", {"idx", "depth", "values"}, {"oh"});
    onnx_seed("gen_onehot", o.bytes());
    OnnxBuilder c(17);
    c.input("x", P::FLOAT, {2, 3}).output("y").output("v").output("i", P::INT64);
    c.initializer("axis", Tensor::scalar_i64(1)).initializer("k", i64s({2}));
    set_attr(c.node("CumSum", {"x", "axis"}, {"y"}), "exclusive", int64_t{1});
    c.node("TopK", {"x", "k"}, {"v", "i"});
    onnx_seed("gen_cumsum_topk", c.bytes());
  }
  {  // ReduceSum with axes as an input (opset 13), Squeeze/Unsqueeze, Gather, Expand, Slice, Concat
    OnnxBuilder b(13);
    b.input("x", P::FLOAT, {2, 3, 4}).input("idx", P::INT64, {2}).output("y").output("g").output("e").output("c");
    b.initializer("axes", i64s({1})).initializer("eshape", i64s({2, 2, 3, 4}));
    b.initializer("starts", i64s({0})).initializer("ends", i64s({2})).initializer("sax", i64s({2}));
    set_attr(b.node("ReduceSum", {"x", "axes"}, {"r"}), "keepdims", int64_t{1});
    b.node("Squeeze", {"r", "axes"}, {"y"});
    set_attr(b.node("Gather", {"x", "idx"}, {"g"}), "axis", int64_t{2});
    b.node("Expand", {"x", "eshape"}, {"e"});
    b.node("Slice", {"x", "starts", "ends", "sax"}, {"sl"});
    set_attr(b.node("Concat", {"sl", "sl"}, {"c"}), "axis", int64_t{0});
    onnx_seed("gen_shape_ops", b.bytes());
  }
  {  // Conv + MaxPool + Resize
    OnnxBuilder b(19);
    b.input("x", P::FLOAT, {1, 1, 4, 4}).output("y").output("z");
    b.initializer("w", f32s({2, 1, 3, 3})).initializer("scales", Tensor::f32({4}, std::vector<float>{1, 1, 0.5f, 0.5f}));
    set_attr(b.node("Conv", {"x", "w"}, {"c"}), "pads", std::vector<int64_t>{1, 1, 1, 1});
    set_attr(b.node("MaxPool", {"c"}, {"y"}), "kernel_shape", std::vector<int64_t>{2, 2});
    auto& rs = b.node("Resize", {"x", "", "scales"}, {"z"});
    set_attr(rs, "mode", std::string("linear"));
    set_attr(rs, "coordinate_transformation_mode", std::string("align_corners"));
    onnx_seed("gen_conv_pool_resize", b.bytes());
  }
  {  // DynamicQuantizeLinear, Cast chain, Where/Equal
    OnnxBuilder b(17);
    b.input("x", P::FLOAT, {5}).output("q", P::UINT8).output("s").output("zp", P::UINT8).output("w");
    b.node("DynamicQuantizeLinear", {"x"}, {"q", "s", "zp"});
    set_attr(b.node("Cast", {"x"}, {"h"}), "to", int64_t{P::FLOAT16});
    set_attr(b.node("Cast", {"h"}, {"hf"}), "to", int64_t{P::FLOAT});
    b.node("Equal", {"x", "hf"}, {"eq"});
    b.node("Where", {"eq", "x", "hf"}, {"w"});
    onnx_seed("gen_quant_cast_where", b.bytes());
  }
  // Near-miss bad models (each must be an rlx::Error).
  {
    OnnxBuilder b(17);
    b.input("x", P::FLOAT, {2}).output("y");
    b.node("Relu", {"x", "x"}, {"y"});
    onnx_seed("bad_relu_two_inputs", b.bytes());
    OnnxBuilder d(17);
    d.input("x", P::FLOAT, {2}).output("y");
    d.node("Relu", {"x"}, {"y"});
    d.node("Neg", {"x"}, {"y"});
    onnx_seed("bad_two_writers", d.bytes());
    OnnxBuilder r(13);
    r.input("x", P::FLOAT, {2, 3}).output("y");
    set_attr(r.node("ReduceSum", {"x"}, {"y"}), "axes", std::vector<int64_t>{1});
    onnx_seed("bad_reducesum_axes_attr_opset13", r.bytes());
    OnnxBuilder e(17);
    e.input("x", P::FLOAT, {1}).output("y");
    e.initializer("shape", i64s({4611686018427387905LL}));
    e.node("Expand", {"x", "shape"}, {"y"});
    onnx_seed("bad_expand_huge", e.bytes());
    OnnxBuilder a(23);
    a.input("q", P::FLOAT, {1, 2, 3, 4}).input("k", P::FLOAT, {}).input("v", P::FLOAT, {1, 2}).output("y");
    a.node("Attention", {"q", "k", "v"}, {"y"});
    onnx_seed("bad_attention_rank", a.bytes());
    OnnxBuilder w(17);
    w.input("x", P::FLOAT, {2}).output("y");
    w.initializer("x", f32s({2}));
    w.initializer("x", f32s({2}));
    w.node("Relu", {"x"}, {"y"});
    onnx_seed("bad_duplicate_initializer", w.bytes());
  }
}

void json_seeds() {
  size_t n = 0;
  for (const auto& [name, bytes] : g_models) {
    try {
      const rlx::Graph g = rlx::import_onnx_bytes(bytes.data(), bytes.size(), "");
      const std::string json = rlx::graph_to_json(g);
      if (json.size() > 8192) continue;
      write_file(g_out / "fuzz_json" / (name + ".json"), json);
      ++n;
    } catch (const rlx::Error&) {
    }
  }
  // Built directly: transformer ops the ONNX importer does not produce, a Param without a
  // weight, and a graph carrying its weights.
  {
    rlx::Graph g;
    const auto x = g.input("x", rlx::Shape({rlx::Dim::symbol("seq"), rlx::Dim(8)}));
    const auto w = g.param("w", rlx::Shape::of({8, 8}));
    const auto gamma = g.param("gamma", rlx::Shape::of({8}));
    g.set_weight("gamma", f32s({8}, 1.0f, 0.0f));
    const auto h = g.rms_norm(g.matmul(x, w), gamma);
    g.add_output(g.softmax(g.silu(h)), "y");
    write_file(g_out / "fuzz_json" / "built_rms_norm_params.json", rlx::graph_to_json(g));
  }
  {
    rlx::Graph g;
    const auto q = g.input("q", rlx::Shape::of({1, 2, 4, 8}));
    const auto k = g.input("k", rlx::Shape::of({1, 2, 2, 8}));
    const auto v = g.input("v", rlx::Shape::of({1, 2, 2, 8}));
    rlx::ops::Attention attrs;  // BSHD, grouped-query, causal
    attrs.num_heads = 4;
    attrs.num_kv_heads = 2;
    attrs.head_dim = 8;
    attrs.mask_kind = rlx::MaskKind::Causal;
    g.add_output(g.attention(q, k, v, std::nullopt, attrs), "o");
    write_file(g_out / "fuzz_json" / "built_attention.json", rlx::graph_to_json(g));
  }
  // Bad documents.
  write_file(g_out / "fuzz_json" / "bad_nested.json", std::string(300, '[') + std::string(300, ']'));
  write_file(g_out / "fuzz_json" / "bad_truncated.json", "{\"nodes\": [{\"op\": \"input\", \"name\": \"x\"");
  // A side file outside the graph's folder (must be refused, whatever is there).
  {
    rlx::Graph g;
    const auto x = g.input("x", rlx::Shape::of({2}));
    g.add_output(g.add(x, g.param("w", rlx::Shape::of({2}))), "y");
    g.set_weight("w", f32s({2}));
    const std::string json = rlx::graph_to_json(g);
    write_file(g_out / "fuzz_json" / "bad_data_file.json", "{\"data_file\": \"../../etc/passwd\", " + json.substr(1));
  }
  std::cout << "make_seeds: " << n << " JSON graphs from ONNX seeds\n";
}

std::string safetensors(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  for (size_t i = 0; i < data_bytes; ++i) out += static_cast<char>(i * 37 + 1);
  return out;
}

void safetensors_seeds() {
  const fs::path d = g_out / "fuzz_safetensors";
  write_file(d / "two_tensors.safetensors",
             safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"I32","shape":[2],"data_offsets":[8,16]},"__metadata__":{"k":"v"}})", 16));
  write_file(d / "all_dtypes.safetensors",
             safetensors(R"({"f16":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
                         R"("bf16":{"dtype":"BF16","shape":[1,2],"data_offsets":[4,8]},)"
                         R"("f64":{"dtype":"F64","shape":[],"data_offsets":[8,16]},)"
                         R"("i8":{"dtype":"I8","shape":[2],"data_offsets":[16,18]},)"
                         R"("i16":{"dtype":"I16","shape":[1],"data_offsets":[18,20]},)"
                         R"("i64":{"dtype":"I64","shape":[1],"data_offsets":[20,28]},)"
                         R"("u8":{"dtype":"U8","shape":[2],"data_offsets":[28,30]},)"
                         R"("bool":{"dtype":"BOOL","shape":[2],"data_offsets":[30,32]},)"
                         R"("u32":{"dtype":"U32","shape":[1],"data_offsets":[32,36]}})", 36));
  write_file(d / "zero_length_between.safetensors",
             safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12));
  write_file(d / "duplicate_name.safetensors",
             safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8));
  write_file(d / "huge_shape.safetensors",
             safetensors(R"({"a":{"dtype":"F32","shape":[4611686018427387905],"data_offsets":[0,4]}})", 4));
  write_file(d / "bad_header_length.safetensors", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10));
}

std::string npy(const std::string& descr, bool fortran, const std::string& shape, size_t data_bytes, int major = 1) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                       ", 'shape': " + shape + ", }";
  const size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  const size_t n = header.size();
  out += static_cast<char>(n & 0xff);
  out += static_cast<char>((n >> 8) & 0xff);
  if (major != 1) out += std::string(2, '\0');
  out += header;
  for (size_t i = 0; i < data_bytes; ++i) out += static_cast<char>(i % 2);
  return out;
}

void npy_seeds() {
  const fs::path d = g_out / "fuzz_npy";
  write_file(d / "f32_2x3.npy", npy("<f4", false, "(2, 3)", 24));
  write_file(d / "i64_fortran.npy", npy("<i8", true, "(2, 2)", 32));
  write_file(d / "bool_scalar.npy", npy("|b1", false, "()", 1));
  write_file(d / "f16_v2.npy", npy("<f2", false, "(4,)", 8, 2));
  write_file(d / "u8_empty.npy", npy("|u1", false, "(0, 5)", 0));
  write_file(d / "bad_big_endian.npy", npy(">f4", false, "(1,)", 4));
  write_file(d / "bad_huge_shape.npy", npy("<f4", false, "(4611686018427387905,)", 4));
  write_file(d / "bad_truncated.npy", npy("<f8", false, "(3,)", 7));
}


void gguf_seeds() {
  using rlx::GgmlType;
  using rlx::GgufValue;
  using rlx::GgufValueType;
  const fs::path d = g_out / "fuzz_gguf";
  std::vector<float> values(256);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(static_cast<int>(i % 23) - 11) * 0.37f;
  const Tensor row = Tensor::f32({1, 256}, values);
  // Every metadata type and every tensor type rlx reads.
  rlx::GgufWriter all(3);
  all.add("general.architecture", GgufValue::string("llama"));
  all.add("t.u8", GgufValue::u8(7));
  all.add("t.i8", GgufValue::i8(-7));
  all.add("t.u16", GgufValue::u16(700));
  all.add("t.i16", GgufValue::i16(-700));
  all.add("t.u32", GgufValue::u32(70000));
  all.add("t.i32", GgufValue::i32(-70000));
  all.add("t.u64", GgufValue::u64(uint64_t{1} << 40));
  all.add("t.i64", GgufValue::i64(-(int64_t{1} << 40)));
  all.add("t.f32", GgufValue::f32(0.25f));
  all.add("t.f64", GgufValue::f64(-0.5));
  all.add("t.bool", GgufValue::boolean(true));
  all.add("t.strings", GgufValue::strings({"<s>", "</s>", ""}));
  all.add("t.f32s", GgufValue::array_of(GgufValueType::F32, {1.5, -2}));
  all.add("t.bools", GgufValue::array_of_i64(GgufValueType::Bool, {0, 1}));
  all.add("t.nested", GgufValue::array(GgufValueType::Array, {GgufValue::strings({"a"}),
                                                              GgufValue::array_of_i64(GgufValueType::I16, {-3, 4})}));
  all.add("general.quantization_version", GgufValue::u32(2));
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                     GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K})
    all.add_tensor(std::string("w.") + rlx::ggml_type_name(t), row, t);
  all.add_tensor("i8", Tensor::of<int8_t>({3}, std::vector<int8_t>{-1, 0, 1}));
  all.add_tensor("i32", Tensor::i32({2}, std::vector<int32_t>{5, -5}));
  all.add_tensor("i64", Tensor::i64({1, 1}, std::vector<int64_t>{9}));
  all.add_tensor("f64", Tensor::f64({2}, std::vector<double>{0.5, 2}));
  const std::string all_bytes = all.bytes();
  write_file(d / "all_types.gguf", all_bytes);
  // Version 2, alignment 64, an empty tensor.
  rlx::GgufWriter v2(2);
  v2.set_alignment(64);
  v2.add("general.name", GgufValue::string("v2"));
  v2.add_tensor("a", Tensor::f32({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6}));
  v2.add_tensor("empty", Tensor::f32({0, 32}, {}));
  v2.add_tensor("q", row, GgmlType::Q8_0);
  const std::string v2_bytes = v2.bytes();
  write_file(d / "v2_align64.gguf", v2_bytes);
  write_file(d / "empty.gguf", rlx::GgufWriter().bytes());
  // Bad variants.
  auto patched = [](std::string b, size_t at, const std::string& with) { return b.replace(at, with.size(), with); };
  write_file(d / "bad_truncated.gguf", all_bytes.substr(0, all_bytes.size() / 2));
  write_file(d / "bad_magic.gguf", patched(v2_bytes, 0, "GGML"));
  write_file(d / "bad_big_endian.gguf", patched(v2_bytes, 4, std::string("\0\0\0\3", 4)));
  write_file(d / "bad_version1.gguf", patched(v2_bytes, 4, std::string("\1\0\0\0", 4)));
  write_file(d / "bad_kv_count.gguf", patched(v2_bytes, 16, std::string("\xff\xff\xff\xff\xff\xff\xff\x0f", 8)));
  // Tensor 'q' moved onto tensor 'a' (offset 0) or off the alignment, and given a type number
  // rlx does not know (4: Q4_2, removed from the format).
  const size_t q_info_at = v2_bytes.find(std::string("\1\0\0\0\0\0\0\0q", 9));
  if (q_info_at != std::string::npos) {
    // name "q": length 1, 'q', n_dims u32, 2 dims u64, type u32, offset u64
    const size_t type_at = q_info_at + 9 + 4 + 16;
    write_file(d / "bad_overlap.gguf", patched(v2_bytes, type_at + 4, std::string(8, '\0')));
    write_file(d / "bad_type.gguf", patched(v2_bytes, type_at, std::string("\4\0\0\0", 4)));
    write_file(d / "bad_unaligned.gguf", patched(v2_bytes, type_at + 4, std::string("\x20\0\0\0\0\0\0\0", 8)));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: fuzz_make_seeds OUT_DIR\n";
    return 2;
  }
  g_out = argv[1];
  try {
    generated_onnx();
    json_seeds();
    safetensors_seeds();
    npy_seeds();
    gguf_seeds();
  } catch (const std::exception& e) {
    std::cerr << "make_seeds: " << e.what() << "\n";
    return 1;
  }
  std::cout << "make_seeds: " << g_models.size() << " ONNX models in " << g_out << "\n";
  return 0;
}
