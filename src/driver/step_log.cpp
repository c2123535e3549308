#include "driver/step_log.h"

#include <cmath>
#include <iostream>

namespace fr {
namespace {

std::string Si(double v) {
  char buf[32];
  if (v >= 1e9) std::snprintf(buf, sizeof buf, "%.1fG", v / 1e9);
  else if (v >= 1e6) std::snprintf(buf, sizeof buf, "%.1fM", v / 1e6);
  else if (v >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
  else std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string Clock(double s) {
  auto t = static_cast<int64_t>(s + 0.5);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(t / 3600), static_cast<long long>(t / 60 % 60), static_cast<long long>(t % 60));
  else std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(t / 60), static_cast<long long>(t % 60));
  return buf;
}

}  // namespace

Status StepLog::Open() {
  if (o_.jsonl.empty()) return Status::Ok();
  auto f = AtomicFile::Create(o_.jsonl);
  if (!f.ok()) return f.status().With("[train] log.jsonl: ");
  jsonl_.emplace(std::move(*f));
  return Status::Ok();
}

Status StepLog::Close() {
  if (!jsonl_) return Status::Ok();
  const Status s = jsonl_->Commit();
  jsonl_.reset();
  return s.With("[train] log.jsonl: ");
}

double StepLog::MeanStepSeconds() const {
  const int64_t after_first = o_.steps - o_.first_step - 1;
  return after_first > 0 ? (last_end_ - first_step_end_ - (paused_at_last_ - paused_at_first_)) / static_cast<double>(after_first) : last_end_;
}

Status StepLog::OnStep(const actor::StepRecord& r) {
  if (r.step == o_.first_step) {
    first_step_end_ = r.seconds;
    paused_at_first_ = paused_total_;
  }
  last_end_ = r.seconds;
  paused_at_last_ = paused_total_;
  last_loss_ = r.loss;
  const int64_t n = r.step + 1;
  const bool diverged = !std::isfinite(r.loss) || !std::isfinite(r.grad_norm);
  if (n % o_.every != 0 && n != o_.steps && !diverged) return Status::Ok();
  // Throughput over the steps since the last logged one.
  const double dt = (r.seconds - logged_seconds_ - paused_) / static_cast<double>(r.step - logged_step_);
  logged_seconds_ = r.seconds;
  paused_ = 0;
  logged_step_ = r.step;
  const double lr = o_.schedule.At(r.step);
  const double tps = static_cast<double>(o_.tokens_per_step) / dt;
  const double gflops = o_.flops_per_step / dt / 1e9 / o_.devices;
  const double eta = dt * static_cast<double>(o_.steps - n);
  char ms[32];
  std::snprintf(ms, sizeof ms, dt < 0.01 ? "%.2f" : "%.0f", dt * 1e3);
  char line[256];
  std::snprintf(line, sizeof line, "step %lld/%lld | loss %.4f | lr %.1e | gnorm %.2f | %s ms | %s %s | %.1f GFLOP/s/dev | eta %s",
                static_cast<long long>(n), static_cast<long long>(o_.steps), r.loss, lr, r.grad_norm, ms,
                Si(tps).c_str(), o_.tokens ? "tok/s" : "samples/s", gflops, Clock(eta).c_str());
  std::cout << line << std::endl;
  if (jsonl_) {
    char js[384];
    std::snprintf(js, sizeof js,
                  "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"gnorm\": %.9g, \"step_ms\": %.4f, \"%s\": %.2f, \"gflops_per_dev\": %.3f}",
                  static_cast<long long>(n), r.loss, lr, r.grad_norm, dt * 1e3, o_.tokens ? "tok_per_s" : "samples_per_s", tps,
                  gflops);
    RETURN_IF_ERROR(Record(std::string(js) + "\n"));
  }
  if (!diverged) return Status::Ok();
  char why[160];
  std::snprintf(why, sizeof why, "step %lld: the %s is %g (lr %.3g): training diverged; lower optimizer.lr or set optimizer.grad_clip",
                static_cast<long long>(n), std::isfinite(r.loss) ? "gradient norm" : "loss",
                std::isfinite(r.loss) ? r.grad_norm : r.loss, lr);
  return Status::Runtime("[train] " + std::string(why));
}

Status StepLog::OnEval(int64_t step, double loss, double seconds) {
  Pause(seconds);
  char line[160];
  std::snprintf(line, sizeof line, "eval step %lld/%lld | eval_loss %.4f | %.0f ms", static_cast<long long>(step),
                static_cast<long long>(o_.steps), loss, seconds * 1e3);
  std::cout << line << std::endl;
  if (!jsonl_) return Status::Ok();
  char js[160];
  std::snprintf(js, sizeof js, "{\"step\": %lld, \"eval_loss\": %.9g, \"eval_ms\": %.3f}\n", static_cast<long long>(step), loss, seconds * 1e3);
  return Record(js);
}

Status StepLog::Record(const std::string& line) {
  Status s = jsonl_->Append(line);
  if (s.ok()) s = jsonl_->Publish();  // at the first record; nothing after
  if (!s.ok()) {
    jsonl_.reset();  // unpublished, the earlier log at the path stays as it was
    return s.With("[train] log.jsonl: ");
  }
  return Status::Ok();
}

}  // namespace fr
