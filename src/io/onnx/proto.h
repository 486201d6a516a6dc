#pragma once
// Reading ONNX protobuf messages: ModelProto parsing, TensorProto -> rlx::Tensor, dtypes.
#include <onnx/onnx_pb.h>

#include <string>

#include "rlx/tensor.h"

namespace rlx::onnx_io {

// The ONNX TensorProto.DataType code -> rlx dtype; rlx::Error naming `where` for types rlx
// has no storage for (string, complex). The sub-byte types (int4, uint4, float4e2m1, int2, uint2)
// are packed in files (two or four values a byte, the first in the low bits) and unpacked to one
// element a byte by tensor_from_proto.
DType dtype_from_onnx(int32_t code, const std::string& where);
// The ONNX name of a TensorProto.DataType code ("FLOAT", "INT64", ...).
std::string onnx_type_name(int32_t code);

// Converts a TensorProto. External data is read from `base_dir` (the model's folder); an
// empty base_dir rejects external data. Every size and offset is validated.
Tensor tensor_from_proto(const onnx::TensorProto& t, const std::string& base_dir, const std::string& where);

onnx::ModelProto parse_model(const void* data, size_t size, const std::string& what);
std::string read_whole_file(const std::string& path, const std::string& what);

}  // namespace rlx::onnx_io
