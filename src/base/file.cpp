#include "base/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

namespace fr {
namespace {

Status Cannot(const std::string& path, const std::string& why) {
  return Status::Invalid("cannot read '" + path + "': " + why);
}

Status CannotWrite(const std::string& path, int err) {
  return Status::Runtime("cannot write '" + path + "': " + std::strerror(err));
}

// Closes the descriptor on every return path.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Makes a rename in `folder` durable: without it a crash can lose the rename though the data is on
// disk. File systems that cannot sync a folder say EINVAL; that is no failure of the write.
int SyncFolder(const std::string& folder) {
  Fd d{::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (d.fd < 0) return errno;
  return ::fsync(d.fd) == 0 || errno == EINVAL ? 0 : errno;
}

std::string FolderOf(const std::string& path) {
  const std::filesystem::path p(path);
  return p.has_parent_path() ? p.parent_path().string() : ".";
}

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

Result<MappedFile> MappedFile::Open(const std::string& path) {
  // Not even opened unless regular: opening a pipe would let its writer go on, and closing it
  // again would cut the writer off before a ReadWholeFile of it.
  struct stat named {};
  if (::stat(path.c_str(), &named) != 0) return Cannot(path, std::strerror(errno));
  if (S_ISDIR(named.st_mode)) return Cannot(path, std::strerror(EISDIR));
  if (!S_ISREG(named.st_mode)) return Cannot(path, "not a regular file");
  Fd f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  if (f.fd < 0) return Cannot(path, std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return Cannot(path, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return Cannot(path, std::strerror(EISDIR));
  if (!S_ISREG(st.st_mode)) return Cannot(path, "not a regular file");
  const auto size = static_cast<size_t>(st.st_size);
  if (size == 0) return MappedFile(nullptr, 0);
  void* data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, f.fd, 0);
  if (data == MAP_FAILED) return Cannot(path, std::strerror(errno));
  ::madvise(data, size, MADV_SEQUENTIAL);  // a hint: readers checksum it front to back first
  return MappedFile(data, size);
}

MappedFile::MappedFile(MappedFile&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(data_, size_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

std::optional<FileId> IdOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

std::string WriteTarget(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  std::error_code ec;
  for (int hops = 0; hops < 40 && fs::is_symlink(p, ec); ++hops) {  // 40: the kernel's own limit
    const fs::path to = fs::read_symlink(p, ec);
    if (ec) break;
    p = to.is_absolute() ? to : p.parent_path() / to;
  }
  return p.string();
}

Result<AtomicFile> AtomicFile::Create(const std::string& path) {
  const std::string target = WriteTarget(path);
  std::error_code ec;
  std::filesystem::create_directories(FolderOf(target), ec);  // a failure shows in the open below
  const std::string base = target + ".partial." + std::to_string(::getpid());
  // O_EXCL: never into a file that is there (a leftover of a process with this pid).
  for (int n = 0;; ++n) {
    const std::string temp = n == 0 ? base : base + "." + std::to_string(n);
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      struct stat old {};
      if (::stat(target.c_str(), &old) == 0) (void)::fchmod(fd, old.st_mode & 07777);  // the replaced file's mode
      return AtomicFile(path, target, temp, fd);
    }
    if (errno != EEXIST || n >= 100) return CannotWrite(path, errno);
  }
}

AtomicFile::AtomicFile(AtomicFile&& o) noexcept
    : path_(std::move(o.path_)),
      target_(std::move(o.target_)),
      temp_(std::exchange(o.temp_, {})),
      fd_(std::exchange(o.fd_, -1)),
      size_(o.size_) {}

AtomicFile& AtomicFile::operator=(AtomicFile&& o) noexcept {
  if (this != &o) {
    Discard();
    path_ = std::move(o.path_);
    target_ = std::move(o.target_);
    temp_ = std::exchange(o.temp_, {});
    fd_ = std::exchange(o.fd_, -1);
    size_ = o.size_;
  }
  return *this;
}

AtomicFile::~AtomicFile() { Discard(); }

void AtomicFile::Discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
}

Status AtomicFile::Failed(int err) const { return CannotWrite(path_, err); }

Status AtomicFile::Append(std::string_view bytes) {
  if (fd_ < 0) return Failed(EBADF);
  for (std::string_view left = bytes; !left.empty();) {
    const ssize_t n = ::write(fd_, left.data(), left.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      [[maybe_unused]] const int cut = ::ftruncate(fd_, size_);  // no half record in a published file
      return Failed(err);
    }
    left.remove_prefix(static_cast<size_t>(n));
  }
  size_ += static_cast<int64_t>(bytes.size());
  return Status::Ok();
}

Status AtomicFile::Publish() {
  if (fd_ < 0) return Failed(EBADF);
  if (temp_.empty()) return Status::Ok();
  // Data on disk before the rename, so that the name never points at a file still being written.
  if (::fsync(fd_) != 0) return Failed(errno);
  if (::rename(temp_.c_str(), target_.c_str()) != 0) return Failed(errno);
  temp_.clear();
  if (const int err = SyncFolder(FolderOf(target_)); err != 0) return Failed(err);
  return Status::Ok();
}

Status AtomicFile::Commit() {
  RETURN_IF_ERROR(Publish());
  if (::fsync(fd_) != 0) return Failed(errno);  // what was appended since an earlier Publish
  if (::close(std::exchange(fd_, -1)) != 0) return Failed(errno);
  return Status::Ok();
}

Status WriteFileAtomically(const std::string& path, std::string_view bytes) {
  ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::Create(path));
  RETURN_IF_ERROR(f.Append(bytes));
  return f.Commit();
}

}  // namespace fr
