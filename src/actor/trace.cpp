#include "actor/trace.h"

#include <cerrno>
#include <cstring>
#include <fstream>

namespace fr::actor {

Tracer::Tracer(const ir::Plan& plan, int rank)
    : plan_(plan), rank_(rank), start_(std::chrono::steady_clock::now()), open_(plan.tasks.size(), 0) {}

void Tracer::Record(const ir::TaskDesc& t, int64_t act, bool begin) {
  double now = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_).count();
  std::lock_guard<std::mutex> lock(mu_);
  if (begin) {
    open_[static_cast<size_t>(t.id)] = now;
  } else {
    events_.push_back({t.id, act, open_[static_cast<size_t>(t.id)], now});
  }
}

std::vector<Tracer::Event> Tracer::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}

namespace {

std::string Escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

}  // namespace

Status Tracer::Write(const std::string& path) const {
  std::ofstream f(path, std::ios::trunc);
  if (!f) return Status::Invalid("[actor] --trace: cannot write '" + path + "': " + std::strerror(errno));
  f << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  f << "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " << rank_ << ", \"args\": {\"name\": \"rank " << rank_ << "\"}}";
  for (size_t s = 0; s < plan_.streams.size(); ++s) {
    f << ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " << rank_ << ", \"tid\": " << s
      << ", \"args\": {\"name\": \"" << plan_.streams[s] << "\"}}";
  }
  const int64_t m = plan_.micro_batches;
  for (const Event& e : events()) {
    const ir::TaskDesc& t = plan_.tasks[static_cast<size_t>(e.task)];
    int64_t step = t.kind == ir::TaskKind::kVariable ? e.act : t.per_step ? e.act : e.act / m;
    char buf[160];
    std::snprintf(buf, sizeof buf, "\"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f", rank_, t.stream,
                  e.begin_us, e.end_us - e.begin_us);
    f << ",\n{\"name\": \"" << Escape(t.name) << "\", \"cat\": \"" << ir::Name(t.kind) << "\", " << buf
      << ", \"args\": {\"step\": " << step << ", \"micro\": " << (t.per_step || t.kind == ir::TaskKind::kVariable ? 0 : e.act % m)
      << "}}";
  }
  f << "\n]}\n";
  if (!f) return Status::Runtime("[actor] --trace: writing '" + path + "' failed");
  return Status::Ok();
}

std::string TracePath(const std::string& path, int rank, int ranks) {
  if (ranks <= 1) return path;
  size_t dot = path.rfind('.');
  size_t slash = path.rfind('/');
  std::string tag = ".rank" + std::to_string(rank);
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return path + tag;
  return path.substr(0, dot) + tag + path.substr(dot);
}

}  // namespace fr::actor
