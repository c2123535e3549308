#include "base/output_check.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "base/file.h"

namespace fr {
namespace {

namespace fs = std::filesystem;

Status Refuse(const NamedFile& f, const std::string& why) { return Status::Invalid(f.key + ": '" + f.path + "' " + why); }

bool SameExisting(const std::string& a, const std::string& b) {
  const auto ia = IdOf(a), ib = IdOf(b);
  return ia && ib && *ia == *ib;
}

// Absolute, with the symbolic links of the part that exists resolved: two outputs that are not
// written yet name one file exactly when these are equal.
std::string Resolved(const std::string& path) {
  std::error_code ec;
  const fs::path abs = fs::absolute(WriteTarget(path), ec);
  if (ec) return path;
  const fs::path p = fs::weakly_canonical(abs, ec);
  return ec ? abs.lexically_normal().string() : p.string();
}

bool SameOutput(const std::string& a, const std::string& b) {
  const bool ea = IdOf(a).has_value(), eb = IdOf(b).has_value();
  if (ea && eb) return SameExisting(a, b);
  return !ea && !eb && Resolved(a) == Resolved(b);
}

Status CheckKind(const NamedFile& out) {
  struct stat st {};
  if (::stat(out.path.c_str(), &st) != 0) return Status::Ok();  // absent; or unreachable, which the probe reports
  if (S_ISDIR(st.st_mode)) return Refuse(out, "is a directory");
  if (!S_ISREG(st.st_mode)) return Refuse(out, "is not a regular file (a device, a FIFO or a socket): refusing to replace it");
  return Status::Ok();
}

// Makes the folder if missing and a file in it: whatever stops a write there (no such folder, a
// file in the way, permissions, a read-only file system) shows now, not when the run ends.
Status ProbeFolder(const NamedFile& out) {
  const fs::path target(WriteTarget(out.path));
  const fs::path folder = target.has_parent_path() ? target.parent_path() : fs::path(".");
  auto cannot = [&](const std::string& why) {
    return Status::Invalid(out.key + ": cannot create a file in '" + folder.string() + "': " + why);
  };
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) return cannot(ec.message());
  std::string probe = (folder / ".flowrun-probe-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) return cannot(std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  return Status::Ok();
}

}  // namespace

Status CheckOutput(const NamedFile& out, const std::vector<NamedFile>& others, const std::vector<NamedFile>& inputs) {
  for (const NamedFile& in : inputs)
    if (SameExisting(out.path, in.path))
      return Refuse(out, "is " + in.key + " ('" + in.path + "'), an input of the run: refusing to overwrite it");
  RETURN_IF_ERROR(CheckKind(out));
  for (const NamedFile& o : others)
    if (SameOutput(out.path, o.path))
      return Refuse(out, "is the same file as " + o.key + " ('" + o.path + "'): each output needs a path of its own");
  return ProbeFolder(out);
}

}  // namespace fr
