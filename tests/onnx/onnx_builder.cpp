#include "onnx/onnx_builder.h"

#include <stdexcept>

namespace rlx::testing {
namespace {

int32_t onnx_code(DType t) {
  switch (t) {
    case DType::F32: return onnx::TensorProto::FLOAT;
    case DType::F16: return onnx::TensorProto::FLOAT16;
    case DType::BF16: return onnx::TensorProto::BFLOAT16;
    case DType::F64: return onnx::TensorProto::DOUBLE;
    case DType::I8: return onnx::TensorProto::INT8;
    case DType::I16: return onnx::TensorProto::INT16;
    case DType::I32: return onnx::TensorProto::INT32;
    case DType::I64: return onnx::TensorProto::INT64;
    case DType::U8: return onnx::TensorProto::UINT8;
    case DType::U32: return onnx::TensorProto::UINT32;
    case DType::Bool: return onnx::TensorProto::BOOL;
    case DType::U16: return onnx::TensorProto::UINT16;
    case DType::U64: return onnx::TensorProto::UINT64;
    case DType::F8E4M3FN: return 17;  // by number: libonnx-dev's schema may predate them
    case DType::F8E4M3FNUZ: return 18;
    case DType::F8E5M2: return 19;
    case DType::F8E5M2FNUZ: return 20;
    case DType::U4: return 21;
    case DType::I4: return 22;
    case DType::F4E2M1: return 23;
    case DType::F8E8M0: return 24;
    case DType::U2: return 25;
    case DType::I2: return 26;
  }
  throw std::logic_error("dtype");
}

onnx::ValueInfoProto value_info(const std::string& name, int32_t elem, const std::vector<int64_t>* dims,
                                const std::vector<std::string>& syms) {
  onnx::ValueInfoProto vi;
  vi.set_name(name);
  auto* tt = vi.mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  if (dims) {
    auto* sh = tt->mutable_shape();
    for (size_t i = 0; i < dims->size(); ++i) {
      auto* d = sh->add_dim();
      if ((*dims)[i] >= 0) d->set_dim_value((*dims)[i]);
      else if (i < syms.size() && !syms[i].empty()) d->set_dim_param(syms[i]);
    }
  }
  return vi;
}

}  // namespace

OnnxBuilder::OnnxBuilder(int64_t opset, int64_t ir_version) {
  m_.set_ir_version(ir_version);
  auto* o = m_.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  m_.mutable_graph()->set_name("test");
}

OnnxBuilder& OnnxBuilder::input(const std::string& name, int32_t elem, const std::vector<int64_t>& dims,
                                const std::vector<std::string>& syms) {
  *graph().add_input() = value_info(name, elem, &dims, syms);
  return *this;
}

OnnxBuilder& OnnxBuilder::output(const std::string& name, int32_t elem) {
  *graph().add_output() = value_info(name, elem, nullptr, {});
  return *this;
}

OnnxBuilder& OnnxBuilder::initializer(const std::string& name, const Tensor& t) {
  *graph().add_initializer() = to_proto(t, name);
  return *this;
}

onnx::NodeProto& OnnxBuilder::node(const std::string& op, const std::vector<std::string>& ins,
                                   const std::vector<std::string>& outs, const std::string& name) {
  auto* n = graph().add_node();
  n->set_op_type(op);
  n->set_name(name.empty() ? op + "_" + std::to_string(graph().node_size()) : name);
  for (const auto& i : ins) n->add_input(i);
  for (const auto& o : outs) n->add_output(o);
  return *n;
}

std::string OnnxBuilder::bytes() const { return m_.SerializeAsString(); }

onnx::TensorProto& external_f32_initializer(OnnxBuilder& b, const std::string& name, int64_t n,
                                            const std::string& location) {
  auto* t = b.graph().add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(n);
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* kv = t->add_external_data();
  kv->set_key("location");
  kv->set_value(location);
  return *t;
}

Graph import_built(const OnnxBuilder& b, const OnnxImportOptions& options) {
  const std::string s = b.bytes();
  return import_onnx_bytes(s.data(), s.size(), "", options);
}

onnx::TensorProto to_proto(const Tensor& t, const std::string& name) {
  onnx::TensorProto p;
  p.set_name(name);
  p.set_data_type(onnx_code(t.dtype()));
  for (int64_t d : t.shape()) p.add_dims(d);
  const int bits = dtype_bits(t.dtype());
  if (bits < 8) {  // packed: element i in bits [(i % per) * bits, ...) of byte i / per
    const int per = 8 / bits;
    const auto* src = static_cast<const uint8_t*>(t.raw());
    std::string packed(static_cast<size_t>((t.numel() + per - 1) / per), '\0');
    for (int64_t i = 0; i < t.numel(); ++i)
      packed[static_cast<size_t>(i / per)] = static_cast<char>(
          static_cast<uint8_t>(packed[static_cast<size_t>(i / per)]) | ((src[i] & ((1u << bits) - 1)) << ((i % per) * bits)));
    p.set_raw_data(packed);
    return p;
  }
  p.set_raw_data(std::string(static_cast<const char*>(t.raw()), t.nbytes()));
  return p;
}

void set_attr(onnx::NodeProto& n, const std::string& name, int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
void set_attr(onnx::NodeProto& n, const std::string& name, float v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
void set_attr(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
void set_attr(onnx::NodeProto& n, const std::string& name, const std::string& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}
void set_attr(onnx::NodeProto& n, const std::string& name, const onnx::GraphProto& g) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::GRAPH);
  *a->mutable_g() = g;
}
void set_attr(onnx::NodeProto& n, const std::string& name, const Tensor& t) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::TENSOR);
  *a->mutable_t() = to_proto(t);
}

}  // namespace rlx::testing
