#include "io/file_access.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <atomic>

#include "rlx/error.h"

namespace rlx::io {

RegularFile::RegularFile(const std::string& path, const std::string& what) : what_(what) {
  // O_NONBLOCK: opening a FIFO without a writer would otherwise wait forever; it is rejected
  // below as not a regular file. Reads from a regular file ignore the flag.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) throw Error("cannot open " + what_ + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    throw Error("cannot read " + what_ + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    throw Error(what_ + " is " + kind + "; only regular files are read");
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

MappedBytes::~MappedBytes() {
  if (map) munmap(map, map_size);
}

void MappedBytes::map_file(const std::string& path, const std::string& what) {
  const RegularFile file(path, what);  // regular files only (a FIFO would block in open)
  const auto size = static_cast<size_t>(file.size());
  if (size == 0) return;
  void* m = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, file.fd(), 0);
  if (m == MAP_FAILED) throw Error("cannot map " + what + ": " + std::strerror(errno));
  map = m;
  map_size = size;
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

void RegularFile::read_at(uint64_t offset, void* dst, uint64_t length) const {
  if (offset > size_ || length > size_ - offset)
    throw Error(what_ + ": bytes [" + std::to_string(offset) + ", " + std::to_string(offset) + "+" +
                std::to_string(length) + ") lie beyond the end of the file (" + std::to_string(size_) + " bytes)");
  auto* out = static_cast<char*>(dst);
  uint64_t done = 0;
  while (done < length) {
    const ssize_t n = ::pread(fd_, out + done, static_cast<size_t>(length - done), static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("reading " + what_ + " failed: " + std::strerror(errno));
    if (n == 0) throw Error("reading " + what_ + " failed: the file ended early (it changed while being read?)");
    done += static_cast<uint64_t>(n);
  }
}

std::string RegularFile::read_all() const {
  std::string bytes;
  try {
    bytes.resize(static_cast<size_t>(size_));
  } catch (const std::exception&) {
    throw Error("out of memory reading " + what_ + " (" + std::to_string(size_) + " bytes)");
  }
  read_at(0, bytes.data(), size_);
  return bytes;
}

std::string read_regular_file(const std::string& path, const std::string& what) {
  return RegularFile(path, what).read_all();
}

std::filesystem::path resolve_inside(const std::string& base_dir, const std::string& relative,
                                     const std::string& what) {
  namespace fs = std::filesystem;
  if (relative.empty()) throw Error(what + ": the path is empty");
  const fs::path rel(relative);
  if (rel.is_absolute())
    throw Error(what + ": '" + printable(relative) + "' must be a path relative to the folder of the file naming it");
  for (const auto& part : rel)
    if (part == "..") throw Error(what + ": '" + printable(relative) + "' leaves the folder of the file naming it");
  std::error_code ec;
  const fs::path base = fs::canonical(base_dir.empty() ? "." : base_dir, ec);
  if (ec) throw Error(what + ": cannot resolve the folder '" + printable(base_dir) + "': " + ec.message());
  const fs::path full = fs::weakly_canonical(base / rel, ec);
  if (ec) throw Error(what + ": cannot resolve '" + printable(relative) + "': " + ec.message());
  // Inside base: base's components are a prefix of full's.
  auto b = base.begin(), f = full.begin();
  for (; b != base.end(); ++b, ++f)
    if (f == full.end() || *b != *f)
      throw Error(what + ": '" + printable(relative) + "' resolves to '" + printable(full.string()) +
                  "', outside the folder '" + printable(base.string()) +
                  "' (through a symbolic link); only files inside it are read");
  return full;
}


// ---- writing ---------------------------------------------------------------

StagedFile::StagedFile(std::string path, std::string what) : path_(std::move(path)), what_(std::move(what)) {
  if (path_.empty()) throw Error(what_ + ": cannot write: the path is empty");
  struct stat st {};
  const bool exists = ::stat(path_.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode))
    throw Error(what_ + " '" + printable(path_) + "': cannot write: it is a directory");
  if (exists && !S_ISREG(st.st_mode)) {
    // A device or FIFO: write in place (O_NONBLOCK so a FIFO without a reader fails at once).
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd_ < 0) fail("cannot open it for writing", errno);
    return;
  }
  static std::atomic<unsigned> counter{0};
  const std::filesystem::path p(path_);
  temp_ = (p.parent_path() / ("." + p.filename().string() + ".tmp" + std::to_string(::getpid()) + "_" +
                              std::to_string(counter++)))
              .string();
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int err = errno;
    temp_.clear();
    fail("cannot create a temporary file next to it", err);
  }
  // Keep the permissions of a file being replaced.
  if (exists) (void)::fchmod(fd_, st.st_mode & 07777);
}

StagedFile::~StagedFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
}

void StagedFile::fail(const std::string& action, int err) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
  committed_ = true;  // nothing left to clean up
  throw Error(what_ + " '" + printable(path_) + "': cannot write: " + action + ": " + std::strerror(err));
}

void StagedFile::write(std::string_view bytes) {
  if (fd_ < 0) throw Error(what_ + " '" + printable(path_) + "': cannot write: the file is closed");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("write failed", errno);
    if (n == 0) fail("write failed", EIO);
    done += static_cast<size_t>(n);
  }
}

void StagedFile::commit() {
  if (fd_ < 0) throw Error(what_ + " '" + printable(path_) + "': cannot write: the file is closed");
  if (!temp_.empty() && ::fsync(fd_) != 0) fail("flushing to disk failed", errno);
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) fail("closing failed", errno);
  if (!temp_.empty() && ::rename(temp_.c_str(), path_.c_str()) != 0)
    fail("renaming the temporary file onto it failed", errno);
  committed_ = true;
}

void write_file(const std::string& path, std::initializer_list<std::string_view> parts, const std::string& what) {
  StagedFile f(path, what);
  for (std::string_view p : parts) f.write(p);
  f.commit();
}

// ---- JSON ------------------------------------------------------------------

void check_json_depth(std::string_view text, int max_depth, const std::string& what) {
  int depth = 0;
  bool in_str = false, esc = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_str) {
      if (esc) esc = false;
      else if (c == '\\') esc = true;
      else if (c == '"') in_str = false;
      continue;
    }
    if (c == '"') {
      in_str = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth)
        throw Error(what + ": JSON nested deeper than " + std::to_string(max_depth) + " levels (at byte " +
                    std::to_string(i) + "); the limit is Limits::max_nesting_depth");
    } else if (c == '}' || c == ']') {
      if (depth > 0) --depth;
    }
  }
}

}  // namespace rlx::io
