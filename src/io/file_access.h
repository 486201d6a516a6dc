#pragma once
// Reading files safely, for every reader (ONNX models and external data, graph JSON and its
// side data, .npy, safetensors, CLI inputs):
//   - only regular files are read: a FIFO, device, socket or directory is an rlx::Error at
//     once (opening a FIFO for reading would block forever);
//   - every failure names the file, what it was for, and the OS reason (strerror);
//   - a file named by another file (external data, data_file) must stay inside the referring
//     file's folder after symbolic links are resolved.
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <string>

#include "ir/text.h"
#include <string_view>

namespace rlx::io {

// An open regular file (read-only, close-on-exec). `what` names it in every error, e.g.
// "ONNX model 'm.onnx'" or "external data file 'w.bin' of initializer 'w'".
class RegularFile {
 public:
  RegularFile(const std::string& path, const std::string& what);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  uint64_t size() const { return size_; }
  int fd() const { return fd_; }
  const std::string& what() const { return what_; }
  // Reads exactly `length` bytes from `offset` into `dst`; rlx::Error if the range lies
  // beyond the end or the read fails.
  void read_at(uint64_t offset, void* dst, uint64_t length) const;
  // The whole file.
  std::string read_all() const;

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string what_;
};

// The bytes of a file reader: a regular file mapped read-only (map_file), or a copy of bytes the
// caller gave (from_bytes readers fill `buffer`).
struct MappedBytes {
  std::string buffer;
  void* map = nullptr;
  size_t map_size = 0;
  MappedBytes() = default;
  ~MappedBytes();
  MappedBytes(const MappedBytes&) = delete;
  MappedBytes& operator=(const MappedBytes&) = delete;
  // Maps the regular file at `path` (an empty file maps nothing); rlx::Error naming `what`.
  void map_file(const std::string& path, const std::string& what);
  const uint8_t* data() const {
    return map ? static_cast<const uint8_t*>(map) : reinterpret_cast<const uint8_t*>(buffer.data());
  }
  size_t size() const { return map ? map_size : buffer.size(); }
};

// The whole regular file at `path` (see RegularFile).
std::string read_regular_file(const std::string& path, const std::string& what);

// Resolves `relative` (a path stored in a file) against `base_dir`: it must be non-empty and
// relative, and the resolved path, with every symbolic link followed, must lie inside
// base_dir (also resolved). Returns the resolved path; rlx::Error naming `what` otherwise.
std::filesystem::path resolve_inside(const std::string& base_dir, const std::string& relative,
                                     const std::string& what);

// Names and paths in messages are escaped with printable (src/ir/text.h).
using rlx::text::printable;

// ---- writing ---------------------------------------------------------------
// Every write, flush (fsync) and close is checked; errors name `what`, the path and the OS
// reason (e.g. "No space left on device" for /dev/full).

// A file written next to its destination under a temporary name and renamed onto it by
// commit(), so a failure never leaves a partial or stray file: the destructor removes the
// temporary file unless commit() ran. An existing destination that is not a regular file
// (a device such as /dev/full or /dev/null, a FIFO) is written in place instead (renaming
// onto it would replace the device); a directory is an error.
class StagedFile {
 public:
  StagedFile(std::string path, std::string what);
  ~StagedFile();
  StagedFile(const StagedFile&) = delete;
  StagedFile& operator=(const StagedFile&) = delete;

  void write(std::string_view bytes);  // appends
  // Flushes, closes and renames onto the destination.
  void commit();
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail(const std::string& action, int err);
  std::string path_, what_, temp_;  // temp_ empty: writing in place
  int fd_ = -1;
  bool committed_ = false;
};

// Writes `parts` (concatenated) to `path` through a StagedFile.
void write_file(const std::string& path, std::initializer_list<std::string_view> parts, const std::string& what);

// ---- JSON ------------------------------------------------------------------
// Rejects text whose arrays/objects nest deeper than `max_depth` (brackets inside strings do
// not count), before a recursive parser sees it; `what` names the document in the error.
void check_json_depth(std::string_view text, int max_depth, const std::string& what);

}  // namespace rlx::io
