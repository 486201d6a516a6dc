// Shape inference for the random / sampling ops: RngUniform, RngNormal, Sample.
#include <cmath>
#include <sstream>

#include "rlx/ops.h"

namespace rlx {
namespace {

std::string num_str(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

// The optional offset operand: an i64 scalar (shape [] or [1]).
void check_offset(const char* op, std::span<const Shape> in, size_t index) {
  if (in.size() <= index) return;
  const Shape& s = in[index];
  const bool scalar = s.rank() == 0 || (s.rank() == 1 && s[0].is_static() && s[0].value == 1);
  check(s.dtype == DType::I64 && scalar,
        std::string(op) + ": the offset operand must be an i64 scalar (shape [] or [1]), got " + s.str());
}

void check_rng_shape(const char* op, const Shape& shape) {
  check(is_float(shape.dtype), std::string(op) + ": output dtype must be a float type (f32, f16, bf16, f64), got " +
                                   shape.str());
  for (const Dim& d : shape.dims)
    check(d.is_symbolic() || d.value >= 0,
          std::string(op) + ": output shape " + shape.str() + " has a negative dim");
}

}  // namespace

std::vector<Shape> ops::RngUniform::infer(std::span<const Shape> in) const {
  check_rng_shape(kName, shape);
  check(std::isfinite(low) && std::isfinite(high),
        std::string(kName) + ": low and high must be finite, got low=" + num_str(low) + " high=" + num_str(high));
  check(low < high, std::string(kName) + ": requires low < high, got low=" + num_str(low) + " high=" + num_str(high));
  check_offset(kName, in, 0);
  return {shape};
}

std::vector<Shape> ops::RngNormal::infer(std::span<const Shape> in) const {
  check_rng_shape(kName, shape);
  check(std::isfinite(mean), std::string(kName) + ": mean must be finite, got " + num_str(mean));
  check(std::isfinite(stddev) && stddev >= 0,
        std::string(kName) + ": stddev must be finite and >= 0, got " + num_str(stddev));
  check_offset(kName, in, 0);
  return {shape};
}

std::vector<Shape> ops::Sample::infer(std::span<const Shape> in) const {
  const Shape& logits = in[0];
  check(is_float(logits.dtype), std::string(kName) + ": logits must be a float tensor, got " + logits.str());
  check(logits.rank() == 1 || logits.rank() == 2,
        std::string(kName) + ": logits must have shape (V) or (B, V), got " + logits.str());
  const Dim& vocab = logits.dims.back();
  check(vocab.is_symbolic() || vocab.value > 0,
        std::string(kName) + ": the vocabulary dim must be > 0, got " + logits.str());
  check(top_k >= 0, std::string(kName) + ": top_k must be >= 0 (0 = off), got " + std::to_string(top_k));
  check(top_p > 0 && top_p <= 1,
        std::string(kName) + ": top_p must be in (0, 1] (1 = off), got " + num_str(top_p));
  check(std::isfinite(temperature) && temperature >= 0,
        std::string(kName) + ": temperature must be finite and >= 0 (0 = greedy), got " + num_str(temperature));
  check_offset(kName, in, 1);
  if (logits.rank() == 1) return {Shape({}, DType::I64)};
  return {Shape({logits.dims[0]}, DType::I64)};
}

}  // namespace rlx
