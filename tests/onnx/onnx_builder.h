#pragma once
// Builds small ONNX ModelProtos in tests (through the onnx protobuf classes).
#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

#include "rlx/onnx.h"
#include "rlx/tensor.h"

namespace rlx::testing {

class OnnxBuilder {
 public:
  explicit OnnxBuilder(int64_t opset = 17, int64_t ir_version = 8);

  // A tensor input/output; dims: >= 0 static, -1 none, or a name through `syms`.
  OnnxBuilder& input(const std::string& name, int32_t elem, const std::vector<int64_t>& dims,
                     const std::vector<std::string>& syms = {});
  OnnxBuilder& output(const std::string& name, int32_t elem = onnx::TensorProto::FLOAT);
  OnnxBuilder& initializer(const std::string& name, const Tensor& t);
  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& ins,
                        const std::vector<std::string>& outs, const std::string& name = "");
  onnx::ModelProto& model() { return m_; }
  onnx::GraphProto& graph() { return *m_.mutable_graph(); }
  std::string bytes() const;

 private:
  onnx::ModelProto m_;
};

// Imports the built model from its serialized bytes (no folder: external data is refused).
Graph import_built(const OnnxBuilder& b, const OnnxImportOptions& options = {});

// Adds initializer `name` (f32[n]) whose data is external at `location`; returns it so that
// callers can add more external_data keys (offset, length, ...).
onnx::TensorProto& external_f32_initializer(OnnxBuilder& b, const std::string& name, int64_t n,
                                            const std::string& location);

onnx::TensorProto to_proto(const Tensor& t, const std::string& name = "");
void set_attr(onnx::NodeProto& n, const std::string& name, int64_t v);
void set_attr(onnx::NodeProto& n, const std::string& name, float v);
void set_attr(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v);
void set_attr(onnx::NodeProto& n, const std::string& name, const std::string& v);
void set_attr(onnx::NodeProto& n, const std::string& name, const onnx::GraphProto& g);
void set_attr(onnx::NodeProto& n, const std::string& name, const Tensor& t);

}  // namespace rlx::testing
