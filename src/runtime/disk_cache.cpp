#include "runtime/disk_cache.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "runtime/knobs.h"

namespace rlx {
namespace {

std::vector<char> read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return {};
  return std::vector<char>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void write_file_atomic(const std::filesystem::path& p, const char* data, size_t size) {
  std::error_code ec;
  std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) return;
  // Unique per process and call: concurrent writers of one key never share a temporary.
  static std::atomic<uint64_t> counter{0};
  const auto tmp = p.string() + ".tmp" + std::to_string(static_cast<long long>(::getpid())) + "." +
                   std::to_string(counter.fetch_add(1));
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) return;
    f.write(data, static_cast<std::streamsize>(size));
    if (!f) return;
  }
  std::filesystem::rename(tmp, p, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

}  // namespace

uint64_t fnv1a64(std::string_view s, uint64_t h) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string kernel_cache_dir(const std::string& sub) {
  if (const std::string d = process_knobs::cache_dir(); !d.empty()) return d == "off" ? "" : d + "/" + sub;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/rlx/" + sub;
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/rlx/" + sub;
  return "";
}

std::vector<char> disk_cache_load(const std::string& dir, const std::string& key, const std::string& ext,
                                  const std::string& source) {
  if (dir.empty()) return {};
  const std::filesystem::path file = std::filesystem::path(dir) / (key + ext);
  const std::vector<char> src = read_file(file.string() + ".src");
  if (src.size() != source.size() || !std::equal(source.begin(), source.end(), src.begin())) return {};
  return read_file(file);
}

void disk_cache_store(const std::string& dir, const std::string& key, const std::string& ext, const std::string& source,
                      const std::vector<char>& bytes) {
  if (dir.empty()) return;
  const std::filesystem::path file = std::filesystem::path(dir) / (key + ext);
  write_file_atomic(file.string() + ".src", source.data(), source.size());
  write_file_atomic(file, bytes.data(), bytes.size());
}

}  // namespace rlx
