// Files: reading an input whole or mapping it, and writing an output whole or not at all.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace fr {

// The bytes of `path`. A regular file is read in one allocation of its size (a GPT-2-sized ONNX
// model is 650 MB). A pipe is read to its end, so `flowrun train <(generate-config)` works; a named
// pipe that nobody writes to reads as empty instead of blocking the open forever. A directory, a
// device or a socket is an error. Errors (Invalid) read "cannot read 'PATH': REASON"; callers put
// their component and key in front.
Result<std::string> ReadWholeFile(const std::string& path);

// A regular file's bytes, mapped read-only: they stay in the kernel's page cache, shared by the
// processes of a node that map the same file and dropped under memory pressure, instead of being
// copied into this process's memory (a checkpoint restored onto another layout reads every rank's
// file, which read whole would hold the whole checkpoint in every rank). The file must not shrink
// while mapped. Errors (Invalid) read as ReadWholeFile's.
class MappedFile {
 public:
  static Result<MappedFile> Open(const std::string& path);
  MappedFile() = default;  // empty
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();
  std::string_view bytes() const { return {static_cast<const char*>(data_), size_}; }

 private:
  MappedFile(void* data, size_t size) : data_(data), size_(size) {}
  void* data_ = nullptr;  // null for an empty file
  size_t size_ = 0;
};

// Which file a path names, following symbolic links: two paths name the same file exactly when
// their ids are equal (hard links, symbolic links and "a/./b" spellings included). Empty when
// nothing is there.
struct FileId {
  uint64_t dev = 0, ino = 0;
  bool operator==(const FileId&) const = default;
};
std::optional<FileId> IdOf(const std::string& path);

// The file a write to `path` lands on: `path` itself, or, when it is a symbolic link, where the
// link points (followed to its end, relative targets taken from the link's folder), so that
// replacing the file keeps the link. The link's target need not exist.
std::string WriteTarget(const std::string& path);

// An output written whole or not at all: the bytes go to a temporary file beside the target
// (PATH.partial.PID in the target's folder, made if missing), and Commit renames it over the target
// once it is complete and on disk, so that a reader, or a crash, sees the old file or the new one,
// never a part. An AtomicFile that is destroyed unpublished removes its temporary file.
// Errors (Runtime) read "cannot write 'PATH': REASON" (errno's text), PATH as the caller gave it;
// callers put their component and key in front. Not thread-safe.
class AtomicFile {
 public:
  static Result<AtomicFile> Create(const std::string& path);
  AtomicFile(AtomicFile&& o) noexcept;
  AtomicFile& operator=(AtomicFile&& o) noexcept;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  // Writes every byte, or fails (a full disk, a file-size limit) and cuts the file back to what it
  // held before the call; after a failure, only the destructor is of use.
  Status Append(std::string_view bytes);
  // The open file, for a writer that writes itself (protobuf's streams); it checks its own writes
  // and reports a failure through Failed.
  int fd() const { return fd_; }
  Status Failed(int err) const;
  const std::string& temp_path() const { return temp_; }
  // Puts what is written so far at the target now (fsync, rename, fsync of the folder) and keeps
  // the file open: later Appends grow the target itself (a log, readable while it grows). Once
  // published, the file is never removed; a second Publish does nothing.
  Status Publish();
  // Publishes if not yet, then flushes the file to disk and closes it.
  Status Commit();

 private:
  AtomicFile(std::string path, std::string target, std::string temp, int fd)
      : path_(std::move(path)), target_(std::move(target)), temp_(std::move(temp)), fd_(fd) {}
  void Discard();

  std::string path_;    // as the caller gave it, for messages
  std::string target_;  // WriteTarget(path_)
  std::string temp_;    // beside target_; empty once published or discarded
  int fd_ = -1;
  int64_t size_ = 0;    // bytes written by Append
};

// AtomicFile::Create, Append(bytes), Commit.
Status WriteFileAtomically(const std::string& path, std::string_view bytes);

}  // namespace fr
