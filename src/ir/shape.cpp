#include "rlx/shape.h"

#include "rlx/limits.h"


namespace rlx {

std::string Dim::str() const { return is_static() ? std::to_string(value) : sym; }

Shape Shape::of(std::initializer_list<int64_t> d, DType t) { return from(std::vector<int64_t>(d), t); }

Shape Shape::from(const std::vector<int64_t>& d, DType t) {
  Shape s;
  s.dtype = t;
  s.dims.reserve(d.size());
  for (int64_t v : d) s.dims.emplace_back(v);
  return s;
}

bool Shape::is_static() const {
  for (const Dim& d : dims)
    if (d.is_symbolic()) return false;
  return true;
}

int64_t Shape::numel() const { return checked_numel(concrete(), "shape " + str()); }

int64_t Shape::nbytes() const { return checked_nbytes(concrete(), dtype, "shape " + str()); }

void Shape::check_size(const std::string& what) const {
  std::vector<int64_t> known;
  known.reserve(dims.size());
  for (const Dim& d : dims) known.push_back(d.is_static() ? d.value : 1);
  checked_nbytes(known, dtype, what);
}

std::vector<int64_t> Shape::concrete() const {
  std::vector<int64_t> out;
  out.reserve(dims.size());
  for (const Dim& d : dims) {
    if (d.is_symbolic()) throw Error("shape " + str() + " has symbolic dim '" + d.sym + "'; a static size is needed here");
    out.push_back(d.value);
  }
  return out;
}

std::string Shape::str() const { return dtype_name(dtype) + dims_str(dims); }

std::optional<std::vector<Dim>> broadcast_dims(const std::vector<Dim>& a, const std::vector<Dim>& b) {
  const size_t r = std::max(a.size(), b.size());
  std::vector<Dim> out(r);
  for (size_t i = 0; i < r; ++i) {
    const Dim* da = i < r - a.size() ? nullptr : &a[i - (r - a.size())];
    const Dim* db = i < r - b.size() ? nullptr : &b[i - (r - b.size())];
    if (!da) { out[i] = *db; continue; }
    if (!db) { out[i] = *da; continue; }
    if (*da == *db) { out[i] = *da; continue; }
    const bool a1 = da->is_static() && da->value == 1;
    const bool b1 = db->is_static() && db->value == 1;
    if (a1) { out[i] = *db; continue; }
    if (b1) { out[i] = *da; continue; }
    // A symbolic dim against a static one (!= 1) binds to the static size.
    if (da->is_symbolic() && db->is_static()) { out[i] = *db; continue; }
    if (db->is_symbolic() && da->is_static()) { out[i] = *da; continue; }
    return std::nullopt;
  }
  return out;
}

std::vector<int64_t> broadcast_dims(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da == db || db == 1) out[i] = da;
    else if (da == 1) out[i] = db;
    else throw Error("shapes " + dims_str(a) + " and " + dims_str(b) + " do not broadcast (dim " +
                     std::to_string(i) + ": " + std::to_string(da) + " vs " + std::to_string(db) + ")");
  }
  return out;
}

int64_t normalize_axis(int64_t axis, int64_t rank, const std::string& what) {
  const int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    throw Error(what + ": axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank) +
                " (valid: " + std::to_string(-rank) + ".." + std::to_string(rank - 1) + ")");
  return a;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * dims[i + 1];
  return s;
}

int64_t product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    int64_t m;
    // The message only on overflow: product() runs in kernels' hot paths.
    if (d < 0 || __builtin_mul_overflow(n, d, &m)) n = checked_mul(n, d, "element count of " + dims_str(dims));
    else n = m;
  }
  return n;
}

std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

std::string dims_str(const std::vector<Dim>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + dims[i].str();
  return s + "]";
}

}  // namespace rlx
