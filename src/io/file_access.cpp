#include "io/file_access.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

std::string printable(const std::string& s, size_t max_len) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (out.size() >= max_len) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else out += static_cast<char>(c);  // UTF-8 bytes >= 0x80 stay as they are
  }
  return out;
}

}  // namespace rlx::io
