// Graph JSON: every op is written and read generically through its visit(v) attribute list.
//
// Document:
//   {"format": "rlx-graph", "version": 1, "data_file": "<name>.bin" (side-file data only),
//    "nodes": [{"id": 0, "op": "input", "attrs": {...}, "inputs": [[node, port], ...],
//               "shapes": [{"dtype": "f32", "dims": [2, "seq"]}, ...]}, ...],
//    "outputs": [[node, port], ...], "output_names": [...], "weights": {name: tensor}}
// Subgraph attributes (If/While) are nested graph objects with the same "nodes", "outputs",
// "output_names", "weights" fields (null for a null subgraph).
//
// Reading is strict: unknown fields, ops and attribute names are errors; an absent attribute
// takes the op's default value; "id" must equal the node's position; inputs must refer to
// earlier nodes. Nodes are rebuilt through Graph::add_node, so shapes are re-inferred and
// verified, and then compared with the stored "shapes" (optional when reading).
#include <filesystem>
#include <memory>
#include <type_traits>

#include "io/json_detail.h"
#include "rlx/serialize.h"

namespace rlx {
namespace io {
namespace {

constexpr int kMaxSubgraphDepth = 32;
using ops::RegionStep;

template <class T> struct has_enum_names : std::false_type {};
template <class T>
  requires requires { EnumNames<T>::names; }
struct has_enum_names<T> : std::true_type {};

template <class E> json put_enum(E e, const std::string& where) {
  const auto i = static_cast<size_t>(e);
  if (i >= EnumNames<E>::names.size()) json_fail(where, "enum value " + std::to_string(i) + " is out of range");
  return EnumNames<E>::names[i];
}

template <class E> E get_enum(const json& j, const std::string& where) {
  const std::string s = get_string(j, where);
  const auto& names = EnumNames<E>::names;
  for (size_t i = 0; i < names.size(); ++i)
    if (s == names[i]) return static_cast<E>(i);
  std::string list;
  for (const char* n : names) list += std::string(list.empty() ? "" : ", ") + n;
  json_fail(where, "unknown value '" + printable(s) + "' (expected one of: " + list + ")");
}

json put_value(Value v) { return json::array({v.node, v.port}); }

// [node, port] referring to an existing value of `g` among its first `limit` nodes.
Value get_value(const json& j, const Graph& g, size_t limit, const std::string& where) {
  if (!j.is_array() || j.size() != 2) json_fail(where, "expected [node, port], got " + json_brief(j));
  const int64_t node = get_i64(j[0], where + "[0]");
  const int64_t port = get_i64(j[1], where + "[1]");
  if (node < 0 || static_cast<uint64_t>(node) >= limit)
    json_fail(where, "refers to node " + std::to_string(node) + ", which is not an earlier node (valid: 0.." +
                         std::to_string(static_cast<int64_t>(limit) - 1) + ")");
  const Node& n = g.node(static_cast<NodeId>(node));
  if (port < 0 || static_cast<uint64_t>(port) >= n.outputs.size())
    json_fail(where, "refers to output " + std::to_string(port) + " of " + node_label(n) + ", which has " +
                         std::to_string(n.outputs.size()) + " output(s)");
  return Value{static_cast<NodeId>(node), static_cast<uint32_t>(port)};
}

// Op with default attributes for a name.
template <size_t I = 0> std::optional<Op> default_op(std::string_view name) {
  if constexpr (I == std::variant_size_v<Op>) {
    return std::nullopt;
  } else {
    using T = std::variant_alternative_t<I, Op>;
    if (name == T::kName) return Op(std::in_place_index<I>);
    return default_op<I + 1>(name);
  }
}

// ---- writing ----------------------------------------------------------------
json encode_graph(const Graph& g, TensorWriter& data, const std::string& where);

struct AttrEncoder {
  TensorWriter& data;
  json& attrs;
  const std::string& where;

  template <class T> void operator()(const char* name, T& v) {
    attrs[name] = encode(v, json_at(where, std::string("attribute '") + name + "'"));
  }

  json encode_step(const RegionStep& s, const std::string& at) {
    json j{{"kind", put_enum(s.kind, at)}, {"to", dtype_name(s.to)}, {"args", s.args}};
    switch (s.kind) {
      case RegionStepKind::Binary: j["op"] = put_enum(static_cast<BinaryKind>(s.op), at); break;
      case RegionStepKind::Compare: j["op"] = put_enum(static_cast<CompareKind>(s.op), at); break;
      case RegionStepKind::Activation: j["op"] = put_enum(static_cast<ActKind>(s.op), at); break;
      default: j["op"] = s.op; break;
    }
    return j;
  }

  template <class T> json encode(const T& v, const std::string& at) {
    if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, uint64_t> || std::is_same_v<T, bool> ||
                  std::is_same_v<T, std::string> || std::is_same_v<T, std::vector<int64_t>>) {
      return json(v);
    } else if constexpr (std::is_same_v<T, double>) {
      return put_f64(v);
    } else if constexpr (std::is_same_v<T, DType>) {
      return dtype_name(v);
    } else if constexpr (std::is_same_v<T, Shape>) {
      return put_shape(v);
    } else if constexpr (std::is_same_v<T, std::vector<Dim>>) {
      return put_dims(v);
    } else if constexpr (std::is_same_v<T, std::vector<double>>) {
      json a = json::array();
      for (double d : v) a.push_back(put_f64(d));
      return a;
    } else if constexpr (std::is_same_v<T, std::optional<ActKind>>) {
      return v ? put_enum(*v, at) : json(nullptr);
    } else if constexpr (std::is_same_v<T, std::vector<ActKind>>) {
      json a = json::array();
      for (size_t i = 0; i < v.size(); ++i) a.push_back(put_enum(v[i], at + "[" + std::to_string(i) + "]"));
      return a;
    } else if constexpr (std::is_same_v<T, Tensor>) {
      return data.write(v, at);
    } else if constexpr (std::is_same_v<T, SubgraphPtr>) {
      return v ? encode_graph(*v, data, at) : json(nullptr);
    } else if constexpr (std::is_same_v<T, std::vector<RegionStep>>) {
      json a = json::array();
      for (size_t i = 0; i < v.size(); ++i) a.push_back(encode_step(v[i], at + "[" + std::to_string(i) + "]"));
      return a;
    } else if constexpr (has_enum_names<T>::value) {
      return put_enum(v, at);
    } else {
      static_assert(sizeof(T) == 0, "graph JSON: unhandled attribute type");
    }
  }
};

json encode_graph(const Graph& g, TensorWriter& data, const std::string& where) {
  json nodes = json::array();
  for (const Node& n : g.nodes()) {
    const std::string label = json_at(where, node_label(n));
    json attrs = json::object();
    std::visit([&](const auto& o) {
      auto copy = o;  // visit() is non-const by design
      AttrEncoder enc{data, attrs, label};
      copy.visit(enc);
    }, n.op);
    json inputs = json::array();
    for (Value v : n.inputs) inputs.push_back(put_value(v));
    json shapes = json::array();
    for (const Shape& s : n.outputs) shapes.push_back(put_shape(s));
    nodes.push_back(json{{"id", n.id}, {"op", op_name(n.op)}, {"attrs", std::move(attrs)},
                         {"inputs", std::move(inputs)}, {"shapes", std::move(shapes)}});
  }
  json outputs = json::array();
  for (Value v : g.outputs()) outputs.push_back(put_value(v));
  json weights = json::object();
  for (const auto& [name, t] : g.weights()) weights[name] = data.write(t, json_at(where, "weight '" + name + "'"));
  return json{{"nodes", std::move(nodes)}, {"outputs", std::move(outputs)},
              {"output_names", g.output_names()}, {"weights", std::move(weights)}};
}

json encode_document(const Graph& g, TensorWriter& data) {
  json doc = encode_graph(g, data, "");
  doc["format"] = "rlx-graph";
  doc["version"] = 1;
  return doc;
}

// ---- reading ----------------------------------------------------------------
Graph decode_graph(const json& j, TensorReader& data, const std::string& where, int depth);

struct AttrDecoder {
  TensorReader& data;
  const json& attrs;
  const std::string& where;
  int depth;
  std::vector<std::string> known;

  template <class T> void operator()(const char* name, T& v) {
    known.emplace_back(name);
    auto it = attrs.find(name);
    if (it == attrs.end()) return;  // absent: the op's default
    decode(*it, v, json_at(where, std::string("attribute '") + name + "'"));
  }

  RegionStep decode_step(const json& j, const std::string& at) {
    expect_object(j, at);
    check_keys(j, {"kind", "op", "to", "args"}, at);
    RegionStep s;
    s.kind = get_enum<RegionStepKind>(require_key(j, "kind", at), json_at(at, "field 'kind'"));
    if (auto it = j.find("to"); it != j.end()) s.to = get_dtype(*it, json_at(at, "field 'to'"));
    if (auto it = j.find("op"); it != j.end()) {
      const std::string op_at = json_at(at, "field 'op'");
      switch (s.kind) {
        case RegionStepKind::Binary: s.op = static_cast<int32_t>(get_enum<BinaryKind>(*it, op_at)); break;
        case RegionStepKind::Compare: s.op = static_cast<int32_t>(get_enum<CompareKind>(*it, op_at)); break;
        case RegionStepKind::Activation: s.op = static_cast<int32_t>(get_enum<ActKind>(*it, op_at)); break;
        default: {
          const int64_t v = get_i64(*it, op_at);
          if (v < INT32_MIN || v > INT32_MAX) json_fail(op_at, std::to_string(v) + " does not fit in int32");
          s.op = static_cast<int32_t>(v);
        }
      }
    }
    const std::string args_at = json_at(at, "field 'args'");
    const json& args = require_key(j, "args", at);
    expect_array(args, args_at);
    for (size_t i = 0; i < args.size(); ++i) {
      const int64_t v = get_i64(args[i], args_at + "[" + std::to_string(i) + "]");
      if (v < INT32_MIN || v > INT32_MAX) json_fail(args_at, std::to_string(v) + " does not fit in int32");
      s.args.push_back(static_cast<int32_t>(v));
    }
    return s;
  }

  template <class T> void decode(const json& j, T& v, const std::string& at) {
    if constexpr (std::is_same_v<T, int64_t>) {
      v = get_i64(j, at);
    } else if constexpr (std::is_same_v<T, uint64_t>) {
      v = get_u64(j, at);
    } else if constexpr (std::is_same_v<T, bool>) {
      v = get_bool(j, at);
    } else if constexpr (std::is_same_v<T, double>) {
      v = get_f64(j, at);
    } else if constexpr (std::is_same_v<T, std::string>) {
      v = get_string(j, at);
    } else if constexpr (std::is_same_v<T, DType>) {
      v = get_dtype(j, at);
    } else if constexpr (std::is_same_v<T, Shape>) {
      v = get_shape(j, at);
    } else if constexpr (std::is_same_v<T, std::vector<Dim>>) {
      v = get_dims(j, true, at);
    } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
      expect_array(j, at);
      v.clear();
      for (size_t i = 0; i < j.size(); ++i) v.push_back(get_i64(j[i], at + "[" + std::to_string(i) + "]"));
    } else if constexpr (std::is_same_v<T, std::vector<double>>) {
      expect_array(j, at);
      v.clear();
      for (size_t i = 0; i < j.size(); ++i) v.push_back(get_f64(j[i], at + "[" + std::to_string(i) + "]"));
    } else if constexpr (std::is_same_v<T, std::optional<ActKind>>) {
      if (j.is_null()) v.reset();
      else v = get_enum<ActKind>(j, at);
    } else if constexpr (std::is_same_v<T, std::vector<ActKind>>) {
      expect_array(j, at);
      v.clear();
      for (size_t i = 0; i < j.size(); ++i) v.push_back(get_enum<ActKind>(j[i], at + "[" + std::to_string(i) + "]"));
    } else if constexpr (std::is_same_v<T, Tensor>) {
      v = data.read(j, at);
    } else if constexpr (std::is_same_v<T, SubgraphPtr>) {
      if (j.is_null()) {
        v.reset();
      } else {
        if (depth + 1 > kMaxSubgraphDepth)
          json_fail(at, "subgraphs are nested more than " + std::to_string(kMaxSubgraphDepth) + " levels deep");
        v = std::make_shared<const Graph>(decode_graph(j, data, at, depth + 1));
      }
    } else if constexpr (std::is_same_v<T, std::vector<RegionStep>>) {
      expect_array(j, at);
      v.clear();
      for (size_t i = 0; i < j.size(); ++i) v.push_back(decode_step(j[i], at + "[" + std::to_string(i) + "]"));
    } else if constexpr (has_enum_names<T>::value) {
      v = get_enum<T>(j, at);
    } else {
      static_assert(sizeof(T) == 0, "graph JSON: unhandled attribute type");
    }
  }
};

void decode_node(const json& jn, size_t k, Graph& g, TensorReader& data, const std::string& where, int depth) {
  std::string label = json_at(where, "node " + std::to_string(k));
  expect_object(jn, label);
  check_keys(jn, {"id", "op", "attrs", "inputs", "shapes"}, label);
  const int64_t id = get_i64(require_key(jn, "id", label), json_at(label, "field 'id'"));
  if (id < 0 || static_cast<uint64_t>(id) != k)
    json_fail(label, "field 'id' is " + std::to_string(id) + " but the node is at position " + std::to_string(k) +
                         " (nodes are listed in id order 0, 1, ...)");
  const std::string name = get_string(require_key(jn, "op", label), json_at(label, "field 'op'"));
  std::optional<Op> op = default_op(name);
  if (!op) json_fail(label, "unknown op '" + printable(name) + "'");
  label += " (" + name + ")";

  if (auto it = jn.find("attrs"); it != jn.end()) {
    const std::string at = json_at(label, "field 'attrs'");
    expect_object(*it, at);
    AttrDecoder dec{data, *it, label, depth, {}};
    std::visit([&](auto& o) { o.visit(dec); }, *op);
    for (auto a = it->begin(); a != it->end(); ++a) {
      bool ok = false;
      for (const auto& kn : dec.known) ok = ok || kn == a.key();
      if (!ok) {
        std::string list;
        for (const auto& kn : dec.known) list += (list.empty() ? "" : ", ") + kn;
        json_fail(label, "unknown attribute '" + printable(a.key()) + "' for op '" + name + "' (its attributes: " +
                             (list.empty() ? "none" : list) + ")");
      }
    }
  }

  std::vector<Value> inputs;
  if (auto it = jn.find("inputs"); it != jn.end()) {
    const std::string at = json_at(label, "field 'inputs'");
    expect_array(*it, at);
    for (size_t i = 0; i < it->size(); ++i) inputs.push_back(get_value((*it)[i], g, k, at + "[" + std::to_string(i) + "]"));
  }

  try {
    g.add_node(std::move(*op), std::move(inputs));
  } catch (const Error& e) {
    json_fail(where, e.what());
  }

  if (auto it = jn.find("shapes"); it != jn.end()) {
    const std::string at = json_at(label, "field 'shapes'");
    expect_array(*it, at);
    const std::vector<Shape>& inferred = g.nodes().back().outputs;
    if (it->size() != inferred.size())
      json_fail(at, "lists " + std::to_string(it->size()) + " shapes but the op produces " +
                        std::to_string(inferred.size()) + " outputs");
    for (size_t i = 0; i < inferred.size(); ++i) {
      const std::string sat = at + "[" + std::to_string(i) + "]";
      const Shape stored = get_shape((*it)[i], sat);
      if (stored != inferred[i])
        json_fail(sat, "stored shape " + stored.str() + " differs from the re-inferred " + inferred[i].str());
    }
  }
}

Graph decode_graph(const json& j, TensorReader& data, const std::string& where, int depth) {
  expect_object(j, where.empty() ? "document" : where);
  if (depth == 0) check_keys(j, {"format", "version", "data_file", "nodes", "outputs", "output_names", "weights"}, "document");
  else check_keys(j, {"nodes", "outputs", "output_names", "weights"}, where);
  Graph g;
  const json& nodes = require_key(j, "nodes", where);
  expect_array(nodes, json_at(where, "field 'nodes'"));
  for (size_t k = 0; k < nodes.size(); ++k) decode_node(nodes[k], k, g, data, where, depth);

  const std::string out_at = json_at(where, "field 'outputs'");
  const json& outs = require_key(j, "outputs", where);
  expect_array(outs, out_at);
  std::vector<Value> outputs;
  for (size_t i = 0; i < outs.size(); ++i) outputs.push_back(get_value(outs[i], g, g.size(), out_at + "[" + std::to_string(i) + "]"));
  std::vector<std::string> names;
  if (auto it = j.find("output_names"); it != j.end()) {
    const std::string at = json_at(where, "field 'output_names'");
    expect_array(*it, at);
    for (size_t i = 0; i < it->size(); ++i) names.push_back(get_string((*it)[i], at + "[" + std::to_string(i) + "]"));
    if (!names.empty() && names.size() != outputs.size())
      json_fail(at, "has " + std::to_string(names.size()) + " names for " + std::to_string(outputs.size()) + " outputs");
  }
  g.set_outputs(std::move(outputs), std::move(names));

  if (auto it = j.find("weights"); it != j.end()) {
    const std::string at = json_at(where, "field 'weights'");
    expect_object(*it, at);
    for (auto w = it->begin(); w != it->end(); ++w) {
      const std::string wat = json_at(where, "weight '" + printable(w.key()) + "'");
      Tensor t = data.read(w.value(), wat);
      try {
        g.set_weight(w.key(), std::move(t));
      } catch (const Error& e) {
        json_fail(wat, e.what());
      }
    }
  }
  return g;
}

Graph decode_document(const std::string& text, const std::string& base_dir) {
  // Depth-capped (a document nested 100k deep would overflow the parser's stack) and
  // without duplicate keys.
  const json doc = parse_json_strict(text, "graph JSON");
  expect_object(doc, "document");
  const std::string fmt = get_string(require_key(doc, "format", "document"), "field 'format'");
  if (fmt != "rlx-graph") json_fail("field 'format'", "is '" + printable(fmt) + "', expected 'rlx-graph'");
  const int64_t version = get_i64(require_key(doc, "version", "document"), "field 'version'");
  if (version != 1)
    json_fail("field 'version'", "unsupported version " + std::to_string(version) + " (this build reads version 1)");
  std::string side_path;
  if (auto it = doc.find("data_file"); it != doc.end()) {
    const std::string name = get_string(*it, "field 'data_file'");
    // Relative, without "..", and inside the graph's folder once symbolic links are resolved.
    try {
      side_path = resolve_inside(base_dir.empty() ? "." : base_dir, name, "the side data file").string();
    } catch (const Error& e) {
      json_fail("field 'data_file'", e.what());
    }
  }
  TensorReader data(side_path);
  try {
    return decode_graph(doc, data, "", 0);
  } catch (const json::exception& e) {  // defensive: every access above is type-checked
    json_fail("", std::string("unexpected JSON structure: ") + e.what());
  }
}

}  // namespace
}  // namespace io

std::string graph_to_json(const Graph& g) {
  io::TensorWriter data(true);
  return io::encode_document(g, data).dump(1);
}

Graph graph_from_json(const std::string& json, const std::string& base_dir) {
  return translate_errors("graph_from_json", [&] {
    return io::decode_document(json, base_dir);
  });
}

void save_graph_json(const Graph& g, const std::string& path, const JsonOptions& opts) {
  translate_errors("save_graph_json", [&] {
    io::TensorWriter data(opts.inline_data);
    io::json doc = io::encode_document(g, data);
    // Both files are written under temporary names and renamed only once both are complete, so
    // a failure (disk full, no permission) leaves neither a partial file nor a stray side file.
    std::unique_ptr<io::StagedFile> side;
    if (!opts.inline_data) {
      // "<path>.bin" next to a device or FIFO (e.g. /dev/null.bin) would be a stray file in /dev.
      std::error_code ec;
      const auto st = std::filesystem::status(path, ec);
      if (!ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st) && !std::filesystem::is_directory(st))
        throw Error("save_graph_json: '" + io::printable(path) +
                    "' is not a regular file, so the side data file cannot go next to it; save with inline data");

      const std::string side_path = path + ".bin";
      doc["data_file"] = std::filesystem::path(side_path).filename().string();
      side = std::make_unique<io::StagedFile>(side_path, "save_graph_json: the side data file");
      side->write(data.side_data());
    }
    io::StagedFile f(path, "save_graph_json: the graph JSON file");
    f.write(doc.dump(1));
    if (side) side->commit();
    f.commit();
  });
}

Graph load_graph_json(const std::string& path) {
  return translate_errors("load_graph_json", [&] {
    const std::string text = io::read_regular_file(path, "graph JSON file '" + io::printable(path) + "'");
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    return graph_from_json(text, parent.empty() ? "." : parent.string());
  });
}

}  // namespace rlx
