// `flowrun search CONFIG`: the ranked table, the best candidate as YAML, --explain, --validate.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "base/file.h"
#include "base/output_check.h"
#include "base/process.h"
#include "base/report.h"
#include "driver/run_files.h"
#include "search/command.h"
#include "search/search.h"

namespace fr::search {
namespace {

// The median step time of a validation run's step log, leaving out the first `warm` steps.
Result<double> MeasuredStep(const std::string& jsonl, int warm) {
  std::ifstream in(jsonl);
  if (!in) return Status::Runtime("[search] no step log at " + jsonl);
  std::vector<double> ms;
  std::string line;
  int step = 0;
  while (std::getline(in, line)) {
    size_t at = line.find("\"step_ms\": ");
    if (at == std::string::npos) continue;
    if (++step <= warm) continue;
    ms.push_back(std::stod(line.substr(at + 11)));
  }
  if (ms.empty()) return Status::Runtime("[search] " + jsonl + " holds no step past the first " + std::to_string(warm));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] / 1e3;
}

// Runs the top K candidates under mpirun, `validate_repeats` rounds each over all K in turn (a
// shared machine's speed drifts within a minute: interleaving spreads the drift over all), each
// round starting one candidate further down the list so that no candidate always runs at the same
// point of a round, and compares each candidate's median step time with its prediction.
int Validate(const Outcome& o, const SearchArgs& a) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir = fs::temp_directory_path(ec) / ("flowrun-validate-" + std::to_string(::getpid()));
  fs::create_directories(dir, ec);
  if (ec) return Fail(Status::Runtime("[search] cannot create " + dir.string() + ": " + ec.message()));
  const size_t k = std::min(o.ranked.size(), static_cast<size_t>(a.validate));
  std::cout << "\nvalidate: the top " << k << " on this machine, " << a.validate_steps << " steps each under mpirun -n "
            << o.ranks << ", " << a.validate_repeats << " round(s) over all in turn (median step time past the first "
            << a.validate_warm << ", median over the rounds)\n"
            << std::flush;
  std::vector<std::vector<double>> runs(k);
  for (int round = 0; round < a.validate_repeats; ++round) {
    for (size_t j = 0; j < k; ++j) {
      const size_t i = (j + static_cast<size_t>(round)) % k;
      Config c = o.ranked[i].config;
      c.train.steps = a.validate_steps;
      c.log.every = 1;
      c.log.jsonl = (dir / ("candidate" + std::to_string(i + 1) + ".jsonl")).string();
      c.save.onnx.clear();  // a timing run: nothing to keep
      fs::path yaml = dir / ("candidate" + std::to_string(i + 1) + ".yaml");
      fs::path log = dir / ("candidate" + std::to_string(i + 1) + ".log");
      if (Status s = WriteFileAtomically(yaml.string(), ConfigToYaml(c)); !s.ok()) return Fail(s.With("[search] "));
      auto rc = RunUnderMpirun(o.ranks, {"train", yaml.string()}, log.string());
      if (!rc.ok()) return Fail(rc.status());
      if (*rc != 0) {
        std::cout << std::flush;
        return Fail(Status::Runtime("[search] validating " + o.ranked[i].Name() + ": the run exited " +
                                    std::to_string(*rc) + "; its config is " + yaml.string() + " and its output " +
                                    log.string()));
      }
      auto m = MeasuredStep(c.log.jsonl, a.validate_warm);
      if (!m.ok()) return Fail(m.status());
      runs[i].push_back(*m);
    }
  }
  std::printf("%-4s %-22s %12s %12s %8s %16s\n", "rank", "layout", "predicted ms", "measured ms", "ratio", "rounds' range");
  std::vector<double> predicted, measured;
  for (size_t i = 0; i < k; ++i) {
    std::vector<double>& r = runs[i];
    std::sort(r.begin(), r.end());
    const double m = r[r.size() / 2];
    predicted.push_back(o.ranked[i].step_s);
    measured.push_back(m);
    std::printf("%-4zu %-22s %12s %12s %8.2f %16s\n", i + 1, o.ranked[i].Name().c_str(), HumanMs(o.ranked[i].step_s).c_str(),
                HumanMs(m).c_str(), m / o.ranked[i].step_s, (HumanMs(r.front()) + " - " + HumanMs(r.back())).c_str());
  }
  if (k >= 2) {
    size_t best = static_cast<size_t>(std::min_element(measured.begin(), measured.end()) - measured.begin());
    std::printf("Spearman rank correlation, predicted vs measured: %.2f over %zu candidates\n", Spearman(predicted, measured), k);
    std::printf("the predicted best (%s) measured %s ms; the measured best (%s) %s ms: %.0f%% slower\n",
                o.ranked[0].Name().c_str(), HumanMs(measured[0]).c_str(), o.ranked[best].Name().c_str(),
                HumanMs(measured[best]).c_str(), 100 * (measured[0] / measured[best] - 1));
    // How evenly the model prices the candidates, whatever their order, and its scale here: far
    // from 1 all alike, the cluster: section no longer describes this machine (flowrun env).
    std::vector<double> ratio;
    double sum = 0, sq = 0;
    for (size_t i = 0; i < k; ++i) {
      ratio.push_back(measured[i] / predicted[i]);
      sum += ratio.back();
      sq += ratio.back() * ratio.back();
    }
    const double mean = sum / static_cast<double>(k);
    const double spread = std::sqrt(std::max(0.0, sq / static_cast<double>(k) - mean * mean)) / mean;
    std::sort(ratio.begin(), ratio.end());
    std::printf("measured / predicted: %.2f-%.2f, median %.2f, spread %.2f (standard deviation over mean)\n", ratio.front(),
                ratio.back(), k % 2 ? ratio[k / 2] : (ratio[k / 2 - 1] + ratio[k / 2]) / 2, spread);
  }
  fs::remove_all(dir, ec);
  return 0;
}

}  // namespace

int RunSearch(const SearchArgs& a) {
  auto cfg = LoadConfig(a.config, a.set);
  if (!cfg.ok()) return Fail(cfg.status());
  Options opt;
  opt.ranks = a.ranks;
  opt.micro_batches = a.micro_batches;
  if (!a.mesh.empty()) {
    auto mesh = ParseMesh(a.mesh);
    if (!mesh.ok()) return Fail(mesh.status());
    opt.mesh = *mesh;
  }
  // Before the search: --out must not replace the config, the model or a data file, nor a device.
  if (!a.out.empty()) {
    if (Status s = CheckOutput({"--out", a.out}, {}, RunInputs(*cfg)); !s.ok()) return Fail(s.With("[search] "));
  }
  opt.exact = std::max(opt.exact, a.validate);
  opt.progress = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  auto o = Search(*cfg, opt);
  if (!o.ok()) return Fail(o.status());
  if (!cfg->cluster.given) {
    std::cout << "note: " << cfg->path << " has no cluster: section; prices use the defaults (run `flowrun env`)\n";
  }
  std::cout << "search: " << cfg->path << " on " << o->ranks << " rank(s)" << (a.mesh.empty() ? "" : ", stage mesh " + a.mesh)
            << "\n" << Table(*o, a.top);
  if (a.explain) std::cout << Explain(*o);
  std::printf("search time %.2f s (training graphs %.2f s, quick pricing %.2f s, full pricing %.2f s)\n", o->seconds,
              o->graphs_s, o->quick_s, o->exact_s);
  if (o->ranked.empty()) return Fail(Status::Invalid("[search] " + cfg->path + ": no candidate fits this cluster"));
  if (!a.out.empty()) {
    const std::string best = "# flowrun search: " + o->ranked[0].Name() + ", predicted " + HumanMs(o->ranked[0].step_s) +
                             " ms/step; run with: mpirun -n " + std::to_string(o->ranks) + " flowrun train " + a.out + "\n" +
                             ConfigToYaml(o->ranked[0].config);
    if (Status s = WriteFileAtomically(a.out, best); !s.ok()) return Fail(s.With("[search] --out: "));
    std::cout << "best: " << o->ranked[0].Name() << " written to " << a.out << " (mpirun -n " << o->ranks << " flowrun train "
              << a.out << ")\n";
  }
  std::cout << std::flush;
  if (a.validate > 0) return Validate(*o, a);
  return 0;
}

}  // namespace fr::search
