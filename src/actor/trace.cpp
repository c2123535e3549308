#include "actor/trace.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "base/file.h"

namespace fr::actor {

Tracer::Tracer(const ir::Plan& plan, int rank)
    : plan_(plan), rank_(rank), open_(plan.tasks.size()) {}

namespace {

// A device track's thread id: its stream's plus this; a CUDA stream's track in the GPU's own
// record: kGpuTid plus its rank among the streams seen.
constexpr int kDeviceTid = 100;
constexpr int kGpuTid = 200;

// The step of act `act` of task t, with m micro-batches a step: variables and per-step tasks act
// once a step.
int64_t StepOf(const ir::TaskDesc& t, int64_t act, int64_t m) {
  return t.kind == ir::TaskKind::kVariable || t.per_step ? act : act / m;
}

// CPU time of the calling thread: an act's CPU time below its wall time means the OS ran something
// else on its core meanwhile (ranks sharing cores) or it waited (page faults, locks).
double ThreadCpuMicros() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}

}  // namespace

double Tracer::NowMicros() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Tracer::SetDeviceOrigin(std::shared_ptr<fr::Event> origin, double host_us, double uncertainty_us) {
  std::lock_guard<std::mutex> lock(mu_);
  origin_ = std::move(origin);
  origin_us_ = host_us;
  uncertainty_us_ = uncertainty_us;
}

void Tracer::RecordDevice(const ir::TaskDesc& t, int64_t act, std::shared_ptr<fr::Event> begin, std::shared_ptr<fr::Event> end) {
  std::lock_guard<std::mutex> lock(mu_);
  device_.push_back({t.id, act, std::move(begin), std::move(end)});
}

void Tracer::AddDeviceSpans(std::vector<cuda::KernelSpan> spans) {
  std::lock_guard<std::mutex> lock(mu_);
  spans_.insert(spans_.end(), std::make_move_iterator(spans.begin()), std::make_move_iterator(spans.end()));
}

std::vector<Tracer::Event> Tracer::device_events() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Event> out;
  if (!origin_) return out;
  for (const DeviceAct& d : device_) {
    if (!d.end->Done()) continue;
    const double b = d.begin->MillisSince(*origin_), e = d.end->MillisSince(*origin_);
    if (b < 0 || e < 0) continue;
    out.push_back({d.task, d.act, origin_us_ + b * 1e3, origin_us_ + e * 1e3, 0});
  }
  return out;
}

void Tracer::Record(const ir::TaskDesc& t, int64_t act, bool begin) {
  double now = NowMicros();
  double cpu = ThreadCpuMicros();
  std::lock_guard<std::mutex> lock(mu_);
  Open& o = open_[static_cast<size_t>(t.id)];
  if (begin) {
    o = {now, cpu};
  } else {
    events_.push_back({t.id, act, o.wall_us, now, cpu - o.cpu_us});
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

// The file in pieces of about a megabyte: a long run's trace is large, and need not be held twice.
Status Tracer::Write(const std::string& path) const {
  auto file = AtomicFile::Create(path);
  if (!file.ok()) return file.status().With("[actor] --trace: ");
  std::string buf;
  auto flush = [&](size_t above) {
    if (buf.size() <= above) return Status::Ok();
    Status s = file->Append(buf);
    buf.clear();
    return s.With("[actor] --trace: ");
  };
  buf += "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  buf += "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " + std::to_string(rank_) + ", \"args\": {\"name\": \"rank " +
         std::to_string(rank_) + "\"}}";
  const std::vector<Event> device = device_events();
  std::vector<bool> device_track(plan_.streams.size(), false);
  for (const Event& e : device) device_track[static_cast<size_t>(plan_.tasks[static_cast<size_t>(e.task)].stream)] = true;
  for (size_t s = 0; s < plan_.streams.size(); ++s) {
    buf += ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " + std::to_string(rank_) + ", \"tid\": " + std::to_string(s) +
           ", \"args\": {\"name\": \"" + ir::Name(plan_.streams[s]) + "\"}}";
    if (device_track[s])
      buf += ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " + std::to_string(rank_) +
             ", \"tid\": " + std::to_string(kDeviceTid + s) + ", \"args\": {\"name\": \"" + ir::Name(plan_.streams[s]) +
             " (device)\"}}";
  }
  if (!device.empty()) {
    char clock[160];
    std::snprintf(clock, sizeof clock,
                  ",\n{\"name\": \"device_clock\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"uncertainty_us\": %.3f}}", rank_,
                  uncertainty_us_);
    buf += clock;
  }
  const int64_t m = plan_.micro_batches;
  std::vector<Event> all = events();
  const size_t host_events = all.size();
  all.insert(all.end(), device.begin(), device.end());
  for (size_t i = 0; i < all.size(); ++i) {
    const Event& e = all[i];
    const bool on_device = i >= host_events;
    const ir::TaskDesc& t = plan_.tasks[static_cast<size_t>(e.task)];
    const int64_t step = StepOf(t, e.act, m);
    const int64_t micro = t.per_step || t.kind == ir::TaskKind::kVariable ? 0 : e.act % m;
    char times[160];
    std::snprintf(times, sizeof times, "\"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f", rank_,
                  on_device ? kDeviceTid + t.stream : t.stream, e.begin_us, e.end_us - e.begin_us);
    char cpu[48] = "";
    if (!on_device) std::snprintf(cpu, sizeof cpu, ", \"cpu_us\": %.3f", e.cpu_us);
    buf += ",\n{\"name\": \"" + Escape(t.name) + "\", \"cat\": \"" + ir::Name(t.kind) + "\", " + times + ", \"args\": {\"step\": " +
           std::to_string(step) + ", \"micro\": " + std::to_string(micro) + cpu + "}}";
    RETURN_IF_ERROR(flush(1 << 20));
  }
  // The GPU's own record: each span takes the step and name of the act that began on the device
  // last before it (the acts' events and CUPTI put the device on the host's clock each their own
  // way, so a span at an act's edge may take its neighbour's).
  std::lock_guard<std::mutex> lock(mu_);  // Write runs after the run: nothing waits on it
  const std::vector<cuda::KernelSpan>& spans = spans_;
  if (!spans.empty()) {
    std::vector<const Event*> acts;
    for (const Event& e : device) acts.push_back(&e);
    std::sort(acts.begin(), acts.end(), [](const Event* x, const Event* y) { return x->begin_us < y->begin_us; });
    std::vector<uint32_t> streams;
    for (const cuda::KernelSpan& k : spans) streams.push_back(k.stream);
    std::sort(streams.begin(), streams.end());
    streams.erase(std::unique(streams.begin(), streams.end()), streams.end());
    auto tid = [&](uint32_t stream) {
      return kGpuTid + static_cast<int>(std::lower_bound(streams.begin(), streams.end(), stream) - streams.begin());
    };
    for (uint32_t st : streams)
      buf += ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " + std::to_string(rank_) + ", \"tid\": " +
             std::to_string(tid(st)) + ", \"args\": {\"name\": \"gpu stream " + std::to_string(st) + "\"}}";
    for (const cuda::KernelSpan& k : spans) {
      auto after = std::upper_bound(acts.begin(), acts.end(), k.begin_us, [](double t, const Event* e) { return t < e->begin_us; });
      int64_t step = -1;
      std::string act;
      if (after != acts.begin()) {
        const Event& e = **std::prev(after);
        const ir::TaskDesc& t = plan_.tasks[static_cast<size_t>(e.task)];
        step = StepOf(t, e.act, m);
        act = t.name;
      }
      char times[160];
      std::snprintf(times, sizeof times, "\"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f", rank_,
                    tid(k.stream), k.begin_us, k.end_us - k.begin_us);
      const bool kernel = k.kind == cuda::KernelSpan::kKernel;
      buf += ",\n{\"name\": \"" + Escape(k.name) + "\", \"cat\": \"" + (kernel ? "gpu kernel" : "gpu copy") + "\", " + times +
             ", \"args\": {\"step\": " + std::to_string(step) + ", \"act\": \"" + Escape(act) + "\"" +
             (kernel ? std::string() : ", \"bytes\": " + std::to_string(k.bytes)) + "}}";
      RETURN_IF_ERROR(flush(1 << 20));
    }
  }
  buf += "\n]}\n";
  RETURN_IF_ERROR(flush(0));
  return file->Commit().With("[actor] --trace: ");
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
