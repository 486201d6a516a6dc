#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <system_error>

#include "cli.h"
#include "rlx/onnx.h"

namespace rlx::cli {

std::pair<std::string, std::string> split_assignment(const std::string& s, const std::string& what) {
  const auto eq = s.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
    throw UsageError(what + " expects NAME=VALUE, got '" + s + "'");
  return {s.substr(0, eq), s.substr(eq + 1)};
}

int64_t parse_count(const std::string& s, const std::string& what) {
  if (s.empty() || s.size() > 18 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    throw UsageError(what + " expects a non-negative integer, got '" + s + "'");
  return std::stoll(s);
}

Graph load_graph_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw Error("cannot open graph file '" + path + "': no such file");
  if (std::filesystem::is_directory(path, ec))
    throw Error("cannot open graph file '" + path + "': it is a directory");
  try {
    if (std::filesystem::path(path).extension() == ".onnx") return import_onnx(path);
    return load_graph_json(path);
  } catch (const Error& e) {
    throw Error("cannot load graph file '" + path + "': " + e.what());
  }
}

std::string quoted_list(const std::vector<std::string>& names, size_t limit) {
  if (names.empty()) return "(none)";
  std::string s;
  const size_t n = std::min(limit, names.size());
  for (size_t i = 0; i < n; ++i) s += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > n) s += " and " + std::to_string(names.size() - n) + " more";
  return s;
}

std::string with_commas(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

std::string format_bytes(int64_t bytes, bool exact) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0) std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  std::string s = buf;
  if (exact && u > 0) s += " (" + with_commas(bytes) + " bytes)";
  return s;
}

std::vector<std::string> output_labels(const Graph& g) {
  std::vector<std::string> out;
  const auto& names = g.output_names();
  for (size_t i = 0; i < g.outputs().size(); ++i)
    out.push_back(i < names.size() && !names[i].empty() ? names[i] : "output_" + std::to_string(i));
  return out;
}

std::string file_safe(const std::string& name) {
  std::string s = name;
  for (char& c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.';
    if (!ok) c = '_';
  }
  if (s.empty() || s == "." || s == "..") s = "_" + s;
  return s;
}

Latency latency_stats(std::vector<double> ms) {
  if (ms.empty()) throw Error("latency_stats: no samples");
  std::sort(ms.begin(), ms.end());
  auto rank = [&](double p) {
    const auto k = static_cast<size_t>(std::ceil(p * static_cast<double>(ms.size())));
    return ms[std::clamp<size_t>(k, 1, ms.size()) - 1];
  };
  Latency l;
  l.p50 = rank(0.5);
  l.p90 = rank(0.9);
  l.min = ms.front();
  l.max = ms.back();
  l.mean = std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(ms.size());
  return l;
}

}  // namespace rlx::cli
