// flowrun: the command line (DESIGN.md §5). Exit codes: 0 success, 2 bad input, 1 runtime failure.
#include <CLI/CLI.hpp>
#include <csignal>

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <iomanip>
#include <iostream>
#include <map>
#include <new>
#include <set>

#include "actor/runtime.h"
#include "actor/trace.h"
#include "actor/world.h"
#include "base/affinity.h"
#include "base/hash.h"
#include "base/process.h"
#include "base/report.h"
#include "base/watchdog.h"
#include "config/config.h"
#include "driver/checkpoint.h"
#include "driver/env.h"
#include "driver/evaluate.h"
#include "driver/pipeline.h"
#include "driver/run_files.h"
#include "driver/running_stats.h"
#include "driver/save.h"
#include "driver/step_log.h"
#include "ir/onnx_export.h"
#include "ops/cuda/backend.h"
#include "plan/plan_dump.h"
#include "plan/plan_serialize.h"
#include "search/command.h"

namespace fr {
namespace {

struct Args {
  std::string config;
  std::vector<std::string> set;
  bool dump = false;
  int ranks = 0;
  std::string format = "text";
  std::string trace;
  bool resume = false;
  std::string resume_dir;  // empty: checkpoint.dir
};

// Signals during training. SIGINT, and SIGTERM without checkpoint.dir, stop the run within 200 ms
// (the runtime polls g_stop_signal) and the process exits 128 + signal; outside a run the default
// action ends the process with the same status. With checkpoint.dir the first SIGTERM (a
// scheduler's preemption) instead winds the run down: every rank finishes the steps begun, a
// checkpoint is written and the process exits 0; a second SIGTERM stops as SIGINT does. SIGUSR1
// winds down alike, any number of times: Open MPI's mpirun passes it to the ranks as it is, while
// it follows the SIGTERM it passes on with SIGKILL a second later.
std::atomic<int> g_stop_signal{0};
std::atomic<bool> g_wind_down{false};
std::atomic<bool> g_preemptible{false};  // checkpoint.dir is set
std::atomic<bool> g_running{false};      // the runtime polls the flags

extern "C" void OnStopSignal(int sig) {
  if (sig == SIGUSR1) {
    g_wind_down.store(true);
    return;
  }
  if (sig == SIGTERM && g_preemptible.load() && !g_wind_down.exchange(true)) return;
  g_stop_signal.store(sig);
  if (g_running.load()) return;
  signal(sig, SIG_DFL);  // async-signal-safe; the signal is delivered once this handler returns
  raise(sig);
}

// What a run stopped by a signal (g_stop_signal) fails with.
Status Stopped(int rank) {
  return Status::Runtime("[actor] rank " + std::to_string(rank) + ": stopped by signal " + std::to_string(g_stop_signal.load()));
}

void CatchStopSignals(bool preemptible) {
  g_preemptible.store(preemptible);
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  if (preemptible) sigaction(SIGUSR1, &sa, nullptr);
}

// Kernel threads per rank (oneDNN's OpenMP team): the cores divided among the ranks on this node,
// and no more than the CPUs the rank is bound to (mpirun binds 2 ranks to a core each), unless
// OMP_NUM_THREADS says otherwise; 0 = leave OpenMP's default. Ranks that each take every core
// slow each other down, their teams spinning at barriers. The OpenMP team size is per thread, so
// every stream thread sets it (RunOptions::on_thread_start). Call after PinUnboundRank.
int RanksHere() {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  return local ? std::max(1, std::atoi(local)) : 1;
}
int Cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

// A plan that needs more memory on one rank than it has (on a GPU, the device's free memory; on
// the CPU, the node's memory over the ranks on it) would only get as far as a failed allocation
// (an abort) or the OOM killer; say so before running. The plan's figure is an estimate, so this
// catches the hopeless cases, not every tight one.
// The `k` largest registers of `rank` (a slot's bytes times its slots), named by the tensor they
// hold: "logits f32[8, 64, 256] x2 (1 MiB), ...".
std::string LargestRegisters(const ir::Plan& plan, const ir::Graph& g, int rank, size_t k) {
  std::vector<const ir::RegstDesc*> mine;
  for (const ir::RegstDesc& r : plan.regsts)
    if (r.rank == rank) mine.push_back(&r);
  auto total = [](const ir::RegstDesc* r) { return r->bytes() * r->regst_num; };
  std::sort(mine.begin(), mine.end(), [&](auto* a, auto* b) { return total(a) > total(b); });
  std::string s;
  for (size_t i = 0; i < mine.size() && i < k; ++i) {
    const ir::RegstDesc& r = *mine[i];
    const std::string name = r.value != ir::kNoValue ? g.value(r.value).name : "register " + std::to_string(r.id);
    s += (s.empty() ? "" : ", ") + name + " " + std::string(Name(r.type.dtype)) + r.type.shape.ToString() + " x" +
         std::to_string(r.regst_num) + " (" + HumanBytes(static_cast<double>(total(&r))) + ")";
  }
  return s;
}

// `sharers`: the ranks that drive this rank's device, which its free memory is shared by.
Status CheckMemory(const ir::Plan& plan, const ir::Graph& g, int rank, DeviceType device, int sharers) {
  const ir::Plan::Memory m = plan.MemoryOf(rank);
  const Backend* backend = BackendOf(device);
  const double free_on_device = backend ? backend->FreeBytes(0) : -1;
  const bool on_device = free_on_device >= 0;
  const double need = static_cast<double>(m.params + m.state + m.regsts);
  const double have = on_device ? free_on_device / std::max(1, sharers) : PhysicalMemoryBytes() / RanksHere();
  if (have <= 0 || need <= have) return Status::Ok();
  const std::string shared = sharers > 1 ? " (its share: " + std::to_string(sharers) + " ranks drive it)" : "";
  const std::string where = on_device ? "its " + std::string(Name(device)) + " device has " + HumanBytes(have) + " free" + shared
                                      : "its share of this machine is " + HumanBytes(have) + " of memory (over " +
                                            std::to_string(RanksHere()) + " rank(s) here)";
  return Status::Runtime("[train] rank " + std::to_string(rank) + " needs " + HumanBytes(need) + " (parameters " +
                         HumanBytes(static_cast<double>(m.params)) + ", optimizer state " + HumanBytes(static_cast<double>(m.state)) +
                         ", registers " + HumanBytes(static_cast<double>(m.regsts)) + "; the largest registers: " +
                         LargestRegisters(plan, g, rank, 3) + "; `flowrun plan --dump` lists them all) but " + where +
                         ": lower train.micro_batch or spread the model over more ranks");
}
int KernelThreads() {
  if (std::getenv("OMP_NUM_THREADS")) return 0;
  return std::max(1, std::min(Cores() / RanksHere(), AllowedCpus()));
}

// The step log of a run: rank 0's writes the JSONL file.
StepLogOptions LogOptionsOf(const Config& cfg, const Compiled& c, bool lead, int devices) {
  StepLogOptions lo;
  lo.steps = cfg.train.steps;
  lo.every = cfg.log.every;
  lo.jsonl = lead ? cfg.log.jsonl : "";
  lo.schedule = Schedule{cfg.optimizer.lr, cfg.schedule.min_lr, static_cast<int>(cfg.schedule.type), cfg.schedule.warmup,
                         cfg.train.steps};
  lo.flops_per_step = c.flops_per_step;
  lo.tokens_per_step = c.tokens_per_step;
  lo.tokens = cfg.data.format == DataConfig::Format::kTokens;
  lo.devices = devices;
  return lo;
}

// The runtime's settings for this rank: deadlines, signals, threads and polling.
actor::RunOptions RunOptionsOf(const Config& cfg, int kernel_threads) {
  actor::RunOptions ro;
  ro.stall_timeout = cfg.parallel.timeout;
  ro.stop_signal = &g_stop_signal;
  if (!cfg.checkpoint.dir.empty()) ro.wind_down = &g_wind_down;
  if (kernel_threads > 0) ro.on_thread_start = [kernel_threads] { omp_set_num_threads(kernel_threads); };
  ro.poll_max = actor::Stream::PollMaxFor(RanksHere(), Cores());
  ro.poll_spin = actor::Stream::PollSpinFor(RanksHere(), Cores());
  ro.progress_thread = AllowedCpus() > omp_get_max_threads();  // the kernel threads, as Train set them
  return ro;
}

int Train(const Args& a) {
  const std::string pinned = PinUnboundRank();
  // Bounds the waits on other ranks that nothing can interrupt (blocking MPI calls): a rank that
  // died or hung there would hold this one forever. Made before the world, so that it outlives
  // MPI_Finalize (the world's destructor).
  actor::Communicator* comm = nullptr;
  int rank = 0;
  Watchdog dog(actor::GiveUpWaiting("actor", "parallel.timeout", &comm, &rank));
  // The config first, for its parallel.timeout: MPI_Init waits for every rank, and a rank that
  // hangs or stops before it gets there would hold the others in it forever. Its errors are
  // reported once the world is joined, as every rank's are.
  auto cfg = LoadConfig(a.config, a.set);
  Result<actor::World> world = Status::Runtime("not joined");
  {
    if (const char* r = std::getenv("OMPI_COMM_WORLD_RANK")) rank = std::atoi(r);  // for the watchdog's message
    Watchdog::Phase phase(dog, "starting MPI with the other ranks (MPI_Init)", cfg.ok() ? cfg->parallel.timeout : ParallelConfig{}.timeout);
    world = actor::JoinWorld(nullptr, nullptr);
  }
  if (!world.ok()) return Fail(world.status());
  comm = world->comm.get();
  rank = world->rank;
  CatchStopSignals(false);
  if (world->rank == 0 && !pinned.empty()) std::cerr << "[train] " << pinned << "\n";
  const int kernel_threads = KernelThreads();
  if (kernel_threads > 0) omp_set_num_threads(kernel_threads);
  const bool lead = world->rank == 0;
  // On any rank's failure every rank must stop: abort the job, carrying the exit code.
  auto fail = [&](const Status& s) {
    int code = g_stop_signal.load() ? 128 + g_stop_signal.load() : 0;
    code = code ? (Fail(s), code) : Fail(s);
    if (world->comm && world->size > 1) world->comm->Abort(code);
    return code;
  };
  if (!cfg.ok()) return fail(cfg.status());
  CatchStopSignals(!cfg->checkpoint.dir.empty());
  if (cfg->parallel.ranks > 0 && cfg->parallel.ranks != world->size) {
    return fail(Status::Invalid("[config] " + cfg->path + ": parallel.ranks is " + std::to_string(cfg->parallel.ranks) +
                                " but the job has " + std::to_string(world->size) + " rank(s) (mpirun -n " +
                                std::to_string(cfg->parallel.ranks) + ")"));
  }
  auto device = PrepareDevice(*cfg);
  if (!device.ok()) return fail(device.status());
  {
    Watchdog::Phase phase(dog, "choosing the collectives' path with the other ranks", cfg->parallel.timeout);
    auto path = actor::UseDeviceCollectives(*world, cfg->parallel.device);
    if (!path.ok()) return fail(path.status());
    if (!path->empty()) *device += (device->empty() ? "" : "; ") + *path;
  }
  if (lead && !device->empty()) std::cerr << "[train] " << *device << "\n";
  // Before anything is compiled or written: no output replaces an input or a device, and no run is
  // lost to an output it cannot write.
  if (Status s = CheckRunOutputs(*cfg, a.trace, world->rank, world->size); !s.ok()) return fail(s);
  auto c = Compile(*cfg, world->size);
  if (!c.ok()) return fail(c.status());
  const ir::Plan& plan = c->plan;
  if (Status s = CheckMemory(plan, c->training.graph, world->rank, cfg->parallel.device, world->gpu_sharers); !s.ok()) return fail(s);
  if (!cfg->save.onnx.empty()) {  // before training: a run is not lost to a model it cannot save
    if (Status s = ir::CheckOnnxWeights(*c->model, SavedTypes(c->training)); !s.ok())
      return fail(Status::Invalid("[config] " + cfg->path + ": save.onnx: " + s.message()));
  }
  std::unique_ptr<Evaluator> eval;
  if (cfg->eval.given) {
    auto e = Evaluator::Make(*cfg, *c, world->rank, world->comm.get(), static_cast<int>(actor::SetUpCollectives(plan).groups.size()));
    if (!e.ok()) return fail(e.status());
    eval = std::move(*e);
  }
  const uint64_t plan_hash = ir::PlanHash(plan) ^ (eval ? SplitMix64(ir::PlanHash(eval->plan())) : 0);
  const actor::RunDigest digest{Fnv1a64(ConfigToYaml(*cfg)), InputSizesHash(*cfg), plan_hash};
  if (Status s = actor::AgreeOnRun(*world, digest, cfg->parallel.timeout); !s.ok()) return fail(s);
  if (world->comm) {
    const actor::CollectiveSetup setup = EvalCollectives(plan, eval ? &eval->plan() : nullptr);
    Watchdog::Phase phase(dog, "preparing the collectives with the other ranks", cfg->parallel.timeout);
    if (Status s = world->comm->Prepare(setup.groups, setup.input_bytes); !s.ok()) return fail(s);
    if (Status s = world->comm->PrepareLinks(setup.links); !s.ok()) return fail(s);
  }
  data::Loader loader(*c->dataset, c->input_field, cfg->data, cfg->train);
  actor::Runtime rt(plan, c->training.graph, world->rank, world->comm.get());
  RunningStats running(c->training.graph);
  int64_t step = 0;  // steps done
  if (a.resume) {
    const std::string dir = a.resume_dir.empty() ? cfg->checkpoint.dir : a.resume_dir;
    if (dir.empty())
      return fail(Status::Invalid("[config] " + cfg->path + ": --resume needs a folder: give one (--resume DIR) or set checkpoint.dir"));
    auto found = LatestCheckpoint(dir);
    if (!found.ok()) return fail(found.status());
    if (Status s = RestoreCheckpoint(*found, *cfg, plan, c->training.graph, rt, running, world->rank); !s.ok()) return fail(s);
    step = found->step;
    if (lead) std::cout << "resumed: " << found->path << " (step " << step << " of " << cfg->train.steps << ")" << std::endl;
  }
  StepLogOptions lo = LogOptionsOf(*cfg, *c, lead, world->size);
  lo.first_step = step;
  StepLog log(lo);
  if (Status s = log.Open(); !s.ok()) return fail(s);
  actor::RunOptions ro = RunOptionsOf(*cfg, kernel_threads);
  ro.feeder = &loader;
  ro.on_step = [&](const actor::StepRecord& r) { return log.OnStep(r); };
  ro.on_stat = [&](ir::ValueId stat, int64_t, int64_t, const Tensor& x) { running.Take(stat, x); };
  std::unique_ptr<actor::Tracer> tracer;
  Status kernel_trace = Status::Runtime("not started");
  if (!a.trace.empty()) {
    tracer = std::make_unique<actor::Tracer>(plan, world->rank);
    ro.on_act = [&](const ir::TaskDesc& t, int64_t act, bool begin) { tracer->Record(t, act, begin); };
    // On a device, its kernels' time too, on the host's clock from an origin the host waited on.
    auto on_device = std::find_if(plan.tasks.begin(), plan.tasks.end(), [](const ir::TaskDesc& t) { return t.device.type != DeviceType::kCpu; });
    if (on_device != plan.tasks.end()) {
      const double before = actor::Tracer::NowMicros();
      std::shared_ptr<Event> origin = rt.ComputeStream(on_device->device).RecordTimed();
      origin->Wait();
      tracer->SetDeviceOrigin(std::move(origin), before, actor::Tracer::NowMicros() - before);
      ro.on_device_act = [&](const ir::TaskDesc& t, int64_t act, std::shared_ptr<Event> b, std::shared_ptr<Event> e) {
        tracer->RecordDevice(t, act, std::move(b), std::move(e));
      };
      // On a GPU, its own record of each kernel too. Without CUPTI the trace still has the acts'
      // device time, and says so.
      if (on_device->device.type == DeviceType::kCuda) {
        kernel_trace = cuda::StartKernelTrace();
        if (!kernel_trace.ok() && lead)
          std::cerr << "flowrun: warning: " << kernel_trace.message()
                    << "; the trace has each act's device time, not each kernel's" << std::endl;
      }
    }
  }
  // Runs up to each checkpoint, writes it, and goes on; one run when there are none. A run that
  // winds down (SIGTERM) ends early on every rank alike; its checkpoint ends the training.
  const CheckpointConfig& ck = cfg->checkpoint;
  Status run;
  int64_t checkpointed = a.resume ? step : -1;  // the step of the newest checkpoint there is
  bool preempted = false;
  const EvalConfig& ev = cfg->eval;
  auto due = [&](int64_t every, int64_t at) { return at == cfg->train.steps || (every > 0 && at % every == 0); };
  while (run.ok() && step < cfg->train.steps && !preempted) {
    // To the next checkpoint or evaluation, or the end.
    int64_t until = cfg->train.steps;
    if (!ck.dir.empty() && ck.every > 0) until = std::min(until, (step / ck.every + 1) * ck.every);
    if (eval && ev.every > 0) until = std::min(until, (step / ev.every + 1) * ev.every);
    ro.first_step = step;
    ro.steps = until - step;
    g_running.store(true);
    run = rt.Run(ro);
    g_running.store(false);
    // A signal that came as the last step finished is still a stop, not a run to save.
    if (run.ok() && g_stop_signal.load() != 0)
      run = Stopped(world->rank);
    if (!run.ok()) break;
    step += rt.steps_done();
    preempted = rt.wound_down();
    if (eval && !preempted && due(ev.every, step)) {
      const auto began = std::chrono::steady_clock::now();
      g_running.store(true);
      Result<double> loss = eval->Evaluate(rt, running, ro);
      g_running.store(false);
      if (!loss.ok()) {
        run = loss.status();
        break;
      }
      if (lead) run = log.OnEval(step, *loss, std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
      if (!run.ok()) break;
    }
    if (!ck.dir.empty() && step != checkpointed && (preempted || due(ck.every, step))) {
      const auto began = std::chrono::steady_clock::now();
      run = WriteCheckpoint(*cfg, step, digest.plan, plan, c->training.graph, rt, running, *world);
      checkpointed = step;
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      log.Pause(secs);
      if (run.ok() && lead) {
        const std::string path = CheckpointPath(ck.dir, step);
        std::cout << "checkpoint: " << path << " (" << HumanBytes(static_cast<double>(CheckpointBytes(path))) << " in " << std::fixed
                  << std::setprecision(2) << secs << " s)" << std::defaultfloat << std::setprecision(6) << std::endl;
      }
    }
    // A second SIGTERM or a SIGINT while the checkpoint was written stops as it does in a run.
    if (run.ok() && g_stop_signal.load() != 0)
      run = Stopped(world->rank);
  }
  const Status logged = log.Close();  // a failed run's log too: it shows how it failed
  if (!run.ok() && !logged.ok()) Fail(logged);
  if (!run.ok()) return fail(run);
  if (!logged.ok()) return fail(logged);
  if (tracer) {
    if (kernel_trace.ok()) {
      // A trace without the kernels is still worth writing: the training itself succeeded.
      Result<std::vector<cuda::KernelSpan>> spans = cuda::TakeKernelTrace();
      if (spans.ok())
        tracer->AddDeviceSpans(std::move(*spans));
      else
        std::cerr << "flowrun: warning (rank " << world->rank << "): " << spans.status().message()
                  << "; the trace has each act's device time, not each kernel's" << std::endl;
    }
    if (Status s = tracer->Write(actor::TracePath(a.trace, world->rank, world->size)); !s.ok()) return fail(s);
  }
  if (preempted) {  // the training goes on from the checkpoint: not done, nothing to save
    if (lead)
      std::cout << "preempted (SIGTERM or SIGUSR1): stopped after step " << step << " of " << cfg->train.steps << " on " << world->size
                << " rank(s); checkpoint: " << CheckpointPath(ck.dir, step) << " (continue with flowrun train --resume)" << std::endl;
    if (world->size > 1) dog.Arm("finishing with the other ranks (MPI_Finalize)", cfg->parallel.timeout);
    return 0;
  }
  if (!cfg->save.onnx.empty()) {
    if (Status s = SaveTrained(plan, c->training, rt, world->comm.get(), world->rank, cfg->parallel.timeout, *c->model,
                                   running.Values(), cfg->save.onnx); !s.ok())
      return fail(s);
    if (lead) std::cout << "saved: " << cfg->save.onnx << " (model.onnx with the trained parameters)" << std::endl;
  }
  if (lead) {
    std::cout << "done: " << cfg->train.steps - lo.first_step << " steps on " << world->size << " rank(s), final loss " << log.last_loss()
              << ", " << log.MeanStepSeconds() * 1e3 << " ms/step, registers peak "
              << HumanBytes(rt.peak_register_bytes()) << " on rank 0" << std::endl;
  }
  // The world's destructor (MPI_Finalize) waits for every rank; the watchdog outlives it.
  if (world->size > 1) dog.Arm("finishing with the other ranks (MPI_Finalize)", cfg->parallel.timeout);
  return 0;
}

// What plan says about the model beside the plan: what trains, what is held constant and why,
// ties, BatchNorm's running statistics and dropout.
void PrintModelSummary(const ir::Graph& g, const std::vector<std::string>& frozen, bool evaluated, bool dump) {
  int64_t values = 0;
  for (ir::ValueId p : g.params) values += g.type(p).shape.numel();
  std::cout << "trains " << g.params.size() << " parameter tensors (" << values << " values)";
  if (!g.held.empty()) std::cout << "; holds " << g.held.size() << " float initializers constant:";
  std::cout << std::endl;
  for (const ir::Graph::Held& h : g.held)
    std::cout << "  " << h.name << " " << Name(h.type.dtype) << h.type.shape.ToString() << ": " << h.why << std::endl;
  for (const ir::Graph::Tie& t : g.tied)
    std::cout << "tied: " << t.copy << " is the transpose of " << t.table << " and trains as it (model.untie keeps it apart)" << std::endl;
  std::set<std::string> trained;
  for (ir::ValueId p : g.params) trained.insert(g.value(p).name);
  std::map<std::string, int> merged;  // original -> copies that train
  for (const ir::Graph::Copy& c : g.copies)
    if (trained.count(c.copy)) ++merged[c.original];
  if (!merged.empty()) {
    int copies = 0;
    for (const auto& [name, n] : merged) copies += n;
    std::cout << "untied: " << merged.size() << " initializers that several nodes read (the exporter merges equal ones of up to 1024 values) train as "
              << merged.size() + static_cast<size_t>(copies) << " parameters, each reader its own (model.tie keeps one)" << std::endl;
    if (dump)
      for (const auto& [name, n] : merged) std::cout << "  " << name << ": " << n + 1 << " copies" << std::endl;
  }
  if (!g.running.empty()) {
    std::cout << "batchnorm: " << g.running.size()
              << " running statistics follow each micro-batch's with the node's momentum and are saved, not trained"
              << (evaluated ? "; evaluations normalize with them" : "") << std::endl;
  }
  std::set<double> ratios;
  int drops = 0;
  for (const ir::Node& n : g.nodes) {
    if (n.op != OpKind::kDropout || n.phase != ir::Phase::kForward) continue;
    ++drops;
    ratios.insert(n.attrs.Float("ratio"));
  }
  if (drops > 0) {
    std::string list;
    for (double r : ratios) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%g", r);
      list += (list.empty() ? "" : ", ") + std::string(buf);
    }
    std::cout << "dropout: " << drops << " nodes drop (ratio " << list << "), seeded by train.seed; model.dropout: false turns them off" << std::endl;
  }
  if (dump) {
    std::cout << "parameters:" << std::endl;
    for (ir::ValueId p : g.params) std::cout << "  " << g.value(p).name << " " << g.type(p).shape.ToString() << std::endl;
  }
  for (const std::string& f : frozen)
    std::cout << "note: initializer '" << f << "' does not affect the loss and is not trained" << std::endl;
}

int Plan(const Args& a) {
  auto cfg = LoadConfig(a.config, a.set);
  if (!cfg.ok()) return Fail(cfg.status());
  int ranks = a.ranks > 0 ? a.ranks : cfg->parallel.ranks > 0 ? static_cast<int>(cfg->parallel.ranks) : 1;
  if (a.ranks > 0 && cfg->parallel.ranks > 0 && a.ranks != cfg->parallel.ranks) {
    return Fail(Status::Invalid("[config] " + cfg->path + ": parallel.ranks is " + std::to_string(cfg->parallel.ranks) +
                                " but --ranks is " + std::to_string(a.ranks)));
  }
  auto c = Compile(*cfg, ranks);
  if (!c.ok()) return Fail(c.status());
  const ir::Plan& p = c->plan;
  const ir::Graph& g = c->training.graph;
  if (a.format == "json") {
    std::cout << ir::DumpJson(p, g);
  } else if (a.format == "dot") {
    std::cout << ir::DumpDot(p, g);
  } else if (a.dump) {
    std::cout << ir::DumpText(p, g);
  } else {
    std::cout << cfg->path << ": " << g.nodes.size() << " ops, " << p.tasks.size() << " tasks, " << p.regsts.size()
              << " registers, " << p.edges.size() << " boxing edges on " << p.ranks << " rank(s); --dump shows them"
              << std::endl;
  }
  if (a.format == "text") {
    PrintModelSummary(g, c->training.frozen, c->eval_dataset != nullptr, a.dump);
    if (cfg->eval.given) {  // checked here as train checks it: a config train would refuse is refused
      ir::TrainingGraph eg;
      auto ep = CompileEval(*cfg, *c, static_cast<int>(actor::SetUpCollectives(p).groups.size()), &eg);
      if (!ep.ok()) return Fail(ep.status());
      std::cout << "eval: a forward-only plan of " << ep->tasks.size() << " tasks and " << ep->regsts.size() << " registers, "
                << cfg->eval.steps << " batch(es) of " << c->eval_dataset->size() << " held-out samples "
                << (cfg->eval.every > 0 ? "every " + std::to_string(cfg->eval.every) + " steps and " : "") << "at the end" << std::endl;
    }
  }
  return 0;
}

}  // namespace
}  // namespace fr

int main(int argc, char** argv) {
  CLI::App app{"flowrun: distributed training of ONNX models, as simple as one device"};
  // Command-line errors read like every other error: "flowrun: ...", then where to look.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "flowrun: " + std::string(e.what()) + "\nRun with --help for more information.\n";
  });
  app.set_version_flag("--version", std::string("flowrun ") + FLOWRUN_VERSION);
  app.require_subcommand(1);
  fr::Args args;
  auto* train = app.add_subcommand("train", "train the model a config describes");
  train->add_option("config", args.config, "the YAML config")->required();
  train->add_option("--set", args.set, "override a config key: key.path=value (repeatable)");
  auto* resume = train->add_option("--resume", args.resume_dir,
                                   "continue from the newest committed checkpoint in DIR (default checkpoint.dir), or DIR itself (a step-N folder)")
                     ->expected(0, 1);
  train->add_option("--trace", args.trace, "write a Chrome trace (Perfetto) of every act to FILE (several ranks: one file each, .rankN before FILE's extension)");
  auto* plan = app.add_subcommand("plan", "compile only and show the plan");
  plan->add_option("config", args.config, "the YAML config")->required();
  plan->add_option("--set", args.set, "override a config key: key.path=value (repeatable)");
  plan->add_flag("--dump", args.dump, "print every op, boxing edge, task and register");
  plan->add_option("--ranks", args.ranks, "plan for N ranks (default: parallel.ranks, or 1)")->check(CLI::Range(1, 1 << 20));
  plan->add_option("--format", args.format, "text (with --dump), json or dot")->check(CLI::IsMember({"text", "json", "dot"}));
  fr::search::SearchArgs search_args;
  auto* search = app.add_subcommand("search", "suggest parallel strategies, ranked by the cost model, and write the best as YAML");
  search->add_option("config", search_args.config, "the YAML config (its cluster: section describes the machine)")->required();
  search->add_option("--set", search_args.set, "override a config key: key.path=value (repeatable)");
  search->add_option("--ranks", search_args.ranks, "search for N ranks (default: parallel.ranks, or cluster nodes x devices_per_node)")
      ->check(CLI::Range(1, 1 << 20));
  search->add_option("--top", search_args.top, "rows in the table (default 10)")->check(CLI::Range(1, 1 << 20));
  search->add_option("--out", search_args.out, "write the best candidate here (default best.yaml; \"\" for none)");
  search->add_flag("--explain", search_args.explain, "compare the winner with the runner-up, per stage and per boxing edge");
  search->add_option("--micro-batches", search_args.micro_batches, "micro-batch counts per step to try (default 1, 2, 4, ... 32 that divide)")
      ->check(CLI::Range(1, 1 << 20));
  search->add_option("--mesh", search_args.mesh, "only layouts whose stages have this device mesh: AxB (dp A, tp B) or N (dp N or tp N)");
  search->add_option("--validate", search_args.validate, "run the top K candidates here and compare predicted with measured step time")
      ->check(CLI::Range(0, 1 << 20));
  search->add_option("--validate-steps", search_args.validate_steps, "steps per validation run (default 12)")->check(CLI::Range(2, 1 << 20));
  search->add_option("--validate-repeats", search_args.validate_repeats,
                     "rounds over all validated candidates, taking each one's median (default 3)")
      ->check(CLI::Range(1, 100));
  std::string inspect_path, inspect_config, inspect_export;
  auto* inspect = app.add_subcommand("inspect", "show a checkpoint: its step, layout, files and tensors");
  inspect->add_option("checkpoint", inspect_path, "a checkpoint folder (step-N), or a checkpoint.dir for its newest")->required();
  inspect->add_option("--config", inspect_config, "show how this config differs from the checkpoint's");
  inspect->add_option("--export", inspect_export, "write the trained model as ONNX (as save: does) to FILE");
  auto* ops = app.add_subcommand("ops", "list the ONNX ops flowrun imports, their opsets and the devices with a kernel");
  fr::EnvArgs env_args;
  auto* env = app.add_subcommand("env", "measure this machine and print a cluster: section for configs");
  auto* env_ranks = env->add_option("--ranks", env_args.ranks, "measure with N ranks at once, N >= 2 (default 2)");
  env->add_option("--out", env_args.out, "write the section to FILE instead of stdout");
  env->add_option("--device", env_args.device, "measure the CPUs (cpu, the default) or each rank's GPU (cuda)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  env->add_flag("--tf32", env_args.tf32, "with --device cuda: TF32 GEMMs, as parallel.tf32 allows them");
  env->add_option("--repeats", env_args.repeats, "measure R times and write each figure's median (default 1)")
      ->check(CLI::Range(1, 100));
  env->add_option("--timeout", env_args.timeout,
                  "seconds the ranks may take in all before they stop, naming the wait (default 300 a repeat)")
      ->check(CLI::PositiveNumber);
  env->add_flag("--launched", env_args.launched, "set by flowrun on the ranks it starts")->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  // Memory running out (a plan for a vast --ranks, a model larger than the machine) is the
  // user's to fix, not a crash: say so and exit 1, as for any other error.
  try {
    if (train->parsed()) {
      args.resume = resume->count() > 0;
      return fr::Train(args);
    }
    if (inspect->parsed()) return fr::InspectCheckpoint(inspect_path, inspect_config, inspect_export);
    if (ops->parsed()) {
      std::cout << fr::ir::OnnxOpsTable();
      return 0;
    }
    if (search->parsed()) return fr::search::RunSearch(search_args);
    if (env->parsed()) {
      env_args.ranks_given = env_ranks->count() > 0;
      return fr::RunEnv(env_args, &argc, &argv);
    }
    return fr::Plan(args);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "flowrun: out of memory: this process could not allocate what the command needs (plans grow with "
                 "the rank count and the model; try fewer --ranks, a smaller batch, or a machine with more memory)\n");
    return 1;
  }
}
