#include "base/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace fr {
namespace {

Status Cannot(const std::string& path, const std::string& why) {
  return Status::Invalid("cannot read '" + path + "': " + why);
}

// Closes the descriptor on every return path.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Result<std::string> ReadWholeFile(const std::string& path) {
  // O_NONBLOCK: opening a named pipe for reading otherwise waits for a writer, possibly forever.
  Fd f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  if (f.fd < 0) return Cannot(path, std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return Cannot(path, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return Cannot(path, std::strerror(EISDIR));
  const bool regular = S_ISREG(st.st_mode);
  if (!regular && !S_ISFIFO(st.st_mode)) return Cannot(path, "not a file or a pipe (a device or a socket)");
  // Reads block from here on: a pipe with a writer is waited for, one without reads as its end.
  const int flags = ::fcntl(f.fd, F_GETFL);
  if (flags < 0 || ::fcntl(f.fd, F_SETFL, flags & ~O_NONBLOCK) != 0) return Cannot(path, std::strerror(errno));
  // A regular file's size and one byte more, so its end is read without growing the buffer.
  std::string bytes(regular ? static_cast<size_t>(st.st_size) + 1 : size_t{1} << 16, '\0');
  size_t have = 0;
  for (;;) {
    if (have == bytes.size()) bytes.resize(2 * bytes.size());
    const ssize_t n = ::read(f.fd, bytes.data() + have, bytes.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Cannot(path, std::strerror(errno));
    if (n == 0) break;
    have += static_cast<size_t>(n);
  }
  bytes.resize(have);
  return bytes;
}

}  // namespace fr
