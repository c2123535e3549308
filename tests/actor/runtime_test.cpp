// Runtime tests: back pressure, overlap of actors on different streams, message layout. The plan
// is the one-device training plan of a tiny MLP built in memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <chrono>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <type_traits>

#include "actor/runtime.h"
#include "actor/trace.h"
#include "ir/training.h"
#include "ops/op.h"
#include "plan/lower.h"
#include "temp_dir.h"

namespace fr {
namespace {

using Clock = std::chrono::steady_clock;

// x [4, 8] -> (MatMul W [8, 8] -> Tanh) x layers -> pred; mse against y [4, 8].
ir::TrainingGraph TinyMlp(int64_t micro_batches, int layers = 1) {
  ir::Graph g;
  Builder b(g);
  ir::ValueId y = g.AddValue("x", {DType::kF32, Shape{4, 8}}, ir::ValueKind::kInput);
  for (int l = 0; l < layers; ++l) {
    Tensor w(DType::kF32, Shape{8, 8});
    for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = 0.01f * static_cast<float>((i + l) % 7);
    const std::string s = std::to_string(l);
    ir::ValueId wv = g.AddValue("W" + s, {DType::kF32, Shape{8, 8}}, ir::ValueKind::kParam, w);
    ir::ValueId h = b.Op(OpKind::kMatMul, {y, wv}, {}, "mm" + s, ir::Phase::kForward);
    y = b.Op(OpKind::kTanh, {h}, {}, "tanh" + s, ir::Phase::kForward);
  }
  g.value(y).name = "pred";
  ir::TrainingSpec spec;
  spec.loss = ir::TrainingSpec::Loss::kMse;
  spec.loss_input = "pred";
  spec.labels = "y";
  spec.labels_type = {DType::kF32, Shape{4, 8}};
  spec.micro_batches = micro_batches;
  spec.optimizer.schedule = Schedule{0.1, 0, 0, 0, 10};
  auto tg = ir::BuildTraining(std::move(g), spec);
  EXPECT_TRUE(tg.ok()) << tg.status().message();
  return std::move(tg).value();
}

class ConstFeeder : public actor::Feeder {
 public:
  explicit ConstFeeder(int sleep_us = 0) : sleep_us_(sleep_us) {}
  Status Fill(const std::string&, int64_t step, int64_t micro, const Tensor& out) override {
    if (sleep_us_) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    for (float& v : out.span<float>()) v = 0.1f * static_cast<float>((step + micro) % 5);
    return Status::Ok();
  }

 private:
  int sleep_us_;
};

struct Event {
  int task;
  int64_t act;
  bool begin;
  Clock::time_point t;
};

std::vector<Event> RunTraced(const ir::Plan& plan, const ir::Graph& g, actor::Feeder& feeder, int slow_task,
                             int slow_us) {
  std::mutex mu;
  std::vector<Event> events;
  actor::Runtime rt(plan, g);
  actor::RunOptions ro;
  ro.feeder = &feeder;
  ro.stall_timeout = 30;
  ro.on_act = [&](const ir::TaskDesc& t, int64_t act, bool begin) {
    if (begin && t.id == slow_task) std::this_thread::sleep_for(std::chrono::microseconds(slow_us));
    std::lock_guard<std::mutex> lock(mu);
    events.push_back({t.id, act, begin, Clock::now()});
  };
  Status s = rt.Run(ro);
  EXPECT_TRUE(s.ok()) << s.message();
  return events;
}

TEST(Runtime, MessagesAreTriviallyCopyable) { EXPECT_TRUE(std::is_trivially_copyable_v<actor::Msg>); }

TEST(Runtime, BackPressureBoundsRegstsInFlight_1n1d) {
  ir::TrainingGraph tg = TinyMlp(4);
  auto plan = boxing::LowerOneDevice(tg, 6, 4);
  ASSERT_TRUE(plan.ok());
  const ir::TaskDesc& data = plan->tasks[0];
  ASSERT_EQ(data.kind, ir::TaskKind::kData);
  const ir::RegstDesc& x = plan->regsts[static_cast<size_t>(data.out[0])];
  ASSERT_EQ(x.regst_num, 2);
  ASSERT_FALSE(x.consumers.empty());
  ConstFeeder feeder;
  // Every consumer of x is slow; the data loader must never run more than regst_num ahead of the
  // slowest one.
  std::vector<Event> ev = RunTraced(*plan, tg.graph, feeder, x.consumers.front(), 2000);
  std::map<int, int64_t> finished;  // task -> acts finished so far
  int64_t max_ahead = 0, data_acts = 0;
  for (const Event& e : ev) {
    if (!e.begin) { finished[e.task] = e.act + 1; continue; }
    if (e.task != data.id) continue;
    ++data_acts;
    int64_t slowest = INT64_MAX;
    for (int c : x.consumers) slowest = std::min(slowest, finished[c]);
    // Slots in use when act k starts: the pieces the slowest reader has not finished, plus piece k.
    max_ahead = std::max(max_ahead, e.act - slowest + 1);
  }
  EXPECT_EQ(data_acts, 24);
  EXPECT_LE(max_ahead, x.regst_num) << "the loader ran ahead of its slowest reader";
  EXPECT_EQ(max_ahead, x.regst_num) << "with a slow reader the loader should fill every slot";
}

TEST(Runtime, LoaderOverlapsCompute_1n1d) {
  ir::TrainingGraph tg = TinyMlp(2);
  auto plan = boxing::LowerOneDevice(tg, 5, 2);
  ASSERT_TRUE(plan.ok());
  ConstFeeder feeder(3000);  // a slow loader on its own stream
  int compute = -1;
  for (const ir::TaskDesc& t : plan->tasks)
    if (t.kind == ir::TaskKind::kCompute && compute < 0) compute = t.id;
  std::vector<Event> ev = RunTraced(*plan, tg.graph, feeder, compute, 3000);
  // Intervals of data acts and of the slow compute task's acts must overlap in time somewhere.
  std::map<std::pair<int, int64_t>, Clock::time_point> begin;
  std::vector<std::pair<Clock::time_point, Clock::time_point>> data_iv, comp_iv;
  for (const Event& e : ev) {
    if (e.begin) { begin[{e.task, e.act}] = e.t; continue; }
    auto iv = std::make_pair(begin[{e.task, e.act}], e.t);
    if (e.task == 0) data_iv.push_back(iv);
    if (e.task == compute) comp_iv.push_back(iv);
  }
  int overlaps = 0;
  for (const auto& d : data_iv)
    for (const auto& c : comp_iv) overlaps += d.first < c.second && c.first < d.second;
  EXPECT_GE(overlaps, 3) << "the data stream should prefetch while compute runs";
}

TEST(Runtime, PoolReusesFreedMemoryBySize) {
  actor::RegstPool pool;
  Tensor a = pool.Take(DType::kF32, Shape{4, 8}, Device{});
  void* first = a.raw();
  pool.Give(std::move(a));
  Tensor b = pool.Take(DType::kI32, Shape{32}, Device{});  // same bytes, other type and shape
  EXPECT_EQ(b.raw(), first);
  Tensor c = pool.Take(DType::kF32, Shape{4, 8}, Device{});  // b is in use: new memory
  EXPECT_NE(c.raw(), first);
  Tensor view = c.Reshaped(Shape{32});
  pool.Give(std::move(c));  // still shared by `view`: must not be handed out again
  Tensor d = pool.Take(DType::kF32, Shape{4, 8}, Device{});
  EXPECT_NE(d.raw(), view.raw());
  EXPECT_EQ(pool.peak_bytes(), 2 * 128);  // c's memory left the pool with `view`
}

// Slots take memory from the pool when filled and give it back when read, so a step needs far
// less than one allocation per slot; the losses stay those of the parity tests.
TEST(Runtime, RegistersShareMemoryAcrossTheStep_1n1d) {
  ir::TrainingGraph tg = TinyMlp(2, 6);
  auto plan = boxing::LowerOneDevice(tg, 4, 2);
  ASSERT_TRUE(plan.ok());
  int64_t every_slot = 0, largest = 0;
  for (const ir::RegstDesc& r : plan->regsts) {
    if (plan->tasks[static_cast<size_t>(r.producer)].kind == ir::TaskKind::kVariable) continue;
    every_slot += r.bytes() * r.regst_num;
    largest = std::max(largest, r.bytes());
  }
  ConstFeeder feeder;
  actor::Runtime rt(*plan, tg.graph);
  actor::RunOptions ro;
  ro.feeder = &feeder;
  Status s = rt.Run(ro);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_GE(rt.peak_register_bytes(), largest);
  EXPECT_LT(rt.peak_register_bytes(), every_slot * 3 / 4) << "every slot " << every_slot;
}

TEST(Runtime, KernelFailureStopsTheRun_1n1d) {
  ir::TrainingGraph tg = TinyMlp(1);
  auto plan = boxing::LowerOneDevice(tg, 3, 1);
  ASSERT_TRUE(plan.ok());
  struct Failing : actor::Feeder {
    Status Fill(const std::string&, int64_t step, int64_t, const Tensor&) override {
      return step == 1 ? Status::Invalid("[data] broken sample") : Status::Ok();
    }
  } feeder;
  actor::Runtime rt(*plan, tg.graph);
  actor::RunOptions ro;
  ro.feeder = &feeder;
  Status s = rt.Run(ro);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("broken sample"), std::string::npos);
}

// Blocks are kept per device: memory given back on one device is never handed out on another.
TEST(Runtime, PoolKeepsDevicesApart) {
  actor::RegstPool pool;
  const Device sim{DeviceType::kSim, 0};
  Tensor a = pool.Take(DType::kF32, Shape{4, 8}, Device{});
  void* cpu_block = a.raw();
  pool.Give(std::move(a));
  Tensor b = pool.Take(DType::kF32, Shape{4, 8}, sim);
  EXPECT_NE(b.raw(), cpu_block);
  EXPECT_EQ(b.device(), sim);
  void* sim_block = b.raw();
  pool.Give(std::move(b));
  Tensor c = pool.Take(DType::kF32, Shape{4, 8}, Device{});
  EXPECT_EQ(c.raw(), cpu_block);
  Tensor d = pool.Take(DType::kF32, Shape{4, 8}, sim);
  EXPECT_EQ(d.raw(), sim_block);
}

// On a device, the plan runs everything but the loader and the sinks there, and copies exactly
// where data crosses between it and the host: the inputs in, the loss and the norm out.
TEST(Runtime, SimPlanCopiesAtTheHostEdgesOnly) {
  ir::TrainingGraph tg = TinyMlp(2);
  auto plan = boxing::LowerOneDevice(tg, 3, 2, DeviceType::kSim);
  ASSERT_TRUE(plan.ok());
  const Device sim{DeviceType::kSim, 0}, cpu{};
  std::vector<std::string> copies;
  for (const ir::TaskDesc& t : plan->tasks) {
    const bool host = t.kind == ir::TaskKind::kData || t.kind == ir::TaskKind::kLossSink || t.kind == ir::TaskKind::kNormSink;
    EXPECT_EQ(t.device, host ? cpu : sim) << t.name;
    if (t.kind == ir::TaskKind::kCopy) {  // runs on the device side, between the host and the device
      copies.push_back(t.name);
      EXPECT_EQ(plan->streams[static_cast<size_t>(t.stream)], ir::StreamKind::kCopy);
      const Device from = plan->regsts[static_cast<size_t>(t.in[0].regst)].device;
      const Device to = plan->regsts[static_cast<size_t>(t.out[0])].device;
      EXPECT_TRUE((from == cpu && to == sim) || (from == sim && to == cpu)) << t.name;
      continue;
    }
    for (int r : t.out) EXPECT_EQ(plan->regsts[static_cast<size_t>(r)].device, t.device) << t.name;
    for (const ir::TaskInput& in : t.in)
      if (in.regst >= 0) {
        EXPECT_EQ(plan->regsts[static_cast<size_t>(in.regst)].device, t.device) << t.name;
      }
  }
  std::sort(copies.begin(), copies.end());
  EXPECT_EQ(copies, (std::vector<std::string>{"grad_norm_sq:0->cpu", "loss/sum:0->cpu", "x->sim:0", "y->sim:0"}));
  auto on_cpu = boxing::LowerOneDevice(tg, 3, 2);
  ASSERT_TRUE(on_cpu.ok());
  for (const ir::TaskDesc& t : on_cpu->tasks) EXPECT_NE(t.kind, ir::TaskKind::kCopy) << t.name;
  EXPECT_EQ(std::count(on_cpu->streams.begin(), on_cpu->streams.end(), ir::StreamKind::kCopy), 0);
}

std::vector<actor::StepRecord> RunPlan(const ir::Plan& plan, const ir::Graph& g, std::vector<Tensor>* params) {
  ConstFeeder feeder;
  actor::Runtime rt(plan, g);
  actor::RunOptions ro;
  ro.feeder = &feeder;
  std::vector<actor::StepRecord> steps;
  ro.on_step = [&](const actor::StepRecord& r) {
    steps.push_back(r);
    return Status::Ok();
  };
  Status s = rt.Run(ro);
  EXPECT_TRUE(s.ok()) << s.message();
  for (ir::ValueId p : g.params) params->push_back(rt.Param(p).ToHost());
  return steps;
}

// The same training on the sim device and on the CPU: the same losses, norms and trained
// parameters, bit for bit, with the device's memory taken through its backend.
TEST(Runtime, SimDeviceTrainsAsTheCpu_1n1d) {
  ir::TrainingGraph tg = TinyMlp(2, 3);
  auto cpu_plan = boxing::LowerOneDevice(tg, 5, 2);
  auto sim_plan = boxing::LowerOneDevice(tg, 5, 2, DeviceType::kSim);
  ASSERT_TRUE(cpu_plan.ok() && sim_plan.ok());
  const Backend& sim = *BackendOf(DeviceType::kSim);
  const int64_t before = sim.allocations();
  std::vector<Tensor> cpu_params, sim_params;
  const auto cpu_steps = RunPlan(*cpu_plan, tg.graph, &cpu_params);
  EXPECT_EQ(sim.allocations(), before) << "a CPU plan allocated on the sim device";
  const auto sim_steps = RunPlan(*sim_plan, tg.graph, &sim_params);
  EXPECT_GT(sim.allocations(), before);
  EXPECT_EQ(sim.live_bytes(), 0) << "the sim device's memory outlived the run";
  ASSERT_EQ(cpu_steps.size(), 5u);
  ASSERT_EQ(sim_steps.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(sim_steps[i].loss, cpu_steps[i].loss) << "step " << i;
    EXPECT_EQ(sim_steps[i].grad_norm, cpu_steps[i].grad_norm) << "step " << i;
  }
  ASSERT_EQ(sim_params.size(), cpu_params.size());
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    EXPECT_EQ(sim_params[i].device(), Device{});
    EXPECT_EQ(std::memcmp(sim_params[i].raw(), cpu_params[i].raw(), cpu_params[i].bytes()), 0) << "parameter " << i;
  }
}

// The variables of an update group wait for each other and update in one group kernel call:
// the same losses and parameters, bit for bit, as each updating alone, with micro-batches and
// the sim device's copies between them.
TEST(Runtime, UpdateGroupsTrainAsOneByOne_1n1d) {
  ir::TrainingGraph tg = TinyMlp(2, 3);
  auto grouped = boxing::LowerOneDevice(tg, 5, 2, DeviceType::kSim);
  ASSERT_TRUE(grouped.ok()) << grouped.status().message();
  ir::Plan alone = *grouped;
  int members = 0;
  for (ir::TaskDesc& t : alone.tasks) {
    members += t.update_group == 0;
    t.update_group = -1;
  }
  EXPECT_EQ(members, 3) << "the three layers' weights are one group";
  std::vector<Tensor> grouped_params, alone_params;
  const auto grouped_steps = RunPlan(*grouped, tg.graph, &grouped_params);
  const auto alone_steps = RunPlan(alone, tg.graph, &alone_params);
  ASSERT_EQ(grouped_steps.size(), 5u);
  ASSERT_EQ(alone_steps.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(grouped_steps[i].loss, alone_steps[i].loss) << "step " << i;
  ASSERT_EQ(grouped_params.size(), alone_params.size());
  for (size_t i = 0; i < alone_params.size(); ++i)
    EXPECT_EQ(std::memcmp(grouped_params[i].raw(), alone_params[i].raw(), alone_params[i].bytes()), 0) << "parameter " << i;
}

// Copies onto the sim device that take 3 ms each, with 4 micro-batches of different data: the
// consumers of a copied slot wait for the copy's event (else they read the last micro-batch's
// data, or none), and the data task waits for the copy that reads its slot before filling it
// again (else the copy reads the next one's). Both would change the losses.
TEST(Runtime, SlowSimCopiesTrainAsTheCpu_1n1d) {
  ir::TrainingGraph tg = TinyMlp(4, 2);
  auto cpu_plan = boxing::LowerOneDevice(tg, 3, 4);
  auto sim_plan = boxing::LowerOneDevice(tg, 3, 4, DeviceType::kSim);
  ASSERT_TRUE(cpu_plan.ok() && sim_plan.ok());
  std::vector<Tensor> cpu_params, sim_params;
  const auto cpu_steps = RunPlan(*cpu_plan, tg.graph, &cpu_params);
  SetSimCopyLatency(3000);
  const auto sim_steps = RunPlan(*sim_plan, tg.graph, &sim_params);
  SetSimCopyLatency(0);
  ASSERT_EQ(cpu_steps.size(), 3u);
  ASSERT_EQ(sim_steps.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(sim_steps[i].loss, cpu_steps[i].loss) << "step " << i;
    EXPECT_EQ(sim_steps[i].grad_norm, cpu_steps[i].grad_norm) << "step " << i;
  }
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    EXPECT_EQ(std::memcmp(sim_params[i].raw(), cpu_params[i].raw(), cpu_params[i].bytes()), 0) << "parameter " << i;
  }
}

// A Runtime runs again from where it stopped: steps 0-1 and then 2-4 train as steps 0-4 in one
// run, bit for bit (the optimizer state and the parameters carry over; the data, the schedule and
// the optimizer see the global step).
TEST(Runtime, RunsInSpansAsInOne_1n1d) {
  ir::TrainingGraph tg = TinyMlp(2, 2);
  auto plan = boxing::LowerOneDevice(tg, 5, 2);
  ASSERT_TRUE(plan.ok());
  std::vector<Tensor> whole_params;
  const auto whole = RunPlan(*plan, tg.graph, &whole_params);
  ConstFeeder feeder;
  actor::Runtime rt(*plan, tg.graph);
  std::vector<actor::StepRecord> spans;
  for (auto [first, steps] : {std::pair<int64_t, int64_t>{0, 2}, {2, 3}}) {
    actor::RunOptions ro;
    ro.feeder = &feeder;
    ro.first_step = first;
    ro.steps = steps;
    ro.on_step = [&](const actor::StepRecord& r) {
      spans.push_back(r);
      return Status::Ok();
    };
    Status s = rt.Run(ro);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  ASSERT_EQ(whole.size(), 5u);
  ASSERT_EQ(spans.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(spans[i].step, static_cast<int64_t>(i));
    EXPECT_EQ(spans[i].loss, whole[i].loss) << "step " << i;
    EXPECT_EQ(spans[i].grad_norm, whole[i].grad_norm) << "step " << i;
  }
  for (size_t i = 0; i < tg.graph.params.size(); ++i) {
    const Tensor p = rt.Param(tg.graph.params[i]);
    EXPECT_EQ(std::memcmp(p.raw(), whole_params[i].raw(), p.bytes()), 0) << "parameter " << i;
  }
}

// A kernel is only ever given its own device's tensors: a plan that forgot a copy stops before
// the run, naming the task.
// The GPU's own record of its kernels (CUPTI on CUDA) goes into the trace as a track per CUDA
// stream, each span labelled with the step and name of the act that began on the device last
// before it. Spans are placed here by hand just inside device acts of a sim run.
TEST(Trace, DeviceSpansTakeTheActThatBeganLastOnTheDevice_1n1d) {
  ir::TrainingGraph tg = TinyMlp(2, 2);
  auto plan = boxing::LowerOneDevice(tg, 3, 2, DeviceType::kSim);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  actor::Runtime rt(*plan, tg.graph);
  actor::Tracer tracer(*plan, 0);
  ConstFeeder feeder;
  actor::RunOptions ro;
  ro.feeder = &feeder;
  ro.stall_timeout = 30;
  ro.on_act = [&](const ir::TaskDesc& t, int64_t act, bool begin) { tracer.Record(t, act, begin); };
  Device sim{DeviceType::kSim, 0};
  const double before = actor::Tracer::NowMicros();
  std::shared_ptr<fr::Event> origin = rt.ComputeStream(sim).RecordTimed();
  origin->Wait();
  tracer.SetDeviceOrigin(origin, before, actor::Tracer::NowMicros() - before);
  ro.on_device_act = [&](const ir::TaskDesc& t, int64_t act, std::shared_ptr<fr::Event> b, std::shared_ptr<fr::Event> e) {
    tracer.RecordDevice(t, act, std::move(b), std::move(e));
  };
  ASSERT_TRUE(rt.Run(ro).ok());
  std::vector<actor::Tracer::Event> acts = tracer.device_events();
  ASSERT_GE(acts.size(), 4u);
  std::sort(acts.begin(), acts.end(), [](const auto& x, const auto& y) { return x.begin_us < y.begin_us; });
  // One span just after the start of the first, a middle and the last device act (stream 7), a
  // copy on stream 3, and one before any act. The acts chosen begin apart from their neighbours.
  auto apart = [&](size_t i) {
    return (i == 0 || acts[i - 1].begin_us < acts[i].begin_us) && (i + 1 == acts.size() || acts[i].begin_us + 0.01 < acts[i + 1].begin_us);
  };
  size_t m = acts.size() / 2;
  while (m + 1 < acts.size() && !apart(m)) ++m;
  ASSERT_TRUE(apart(0) && apart(m) && apart(acts.size() - 1)) << "device acts begin at the same time";
  const actor::Tracer::Event& first = acts.front();
  const actor::Tracer::Event& mid = acts[m];
  const actor::Tracer::Event& last = acts.back();
  auto span = [](std::string name, double at, uint32_t stream, cuda::KernelSpan::Kind kind) {
    cuda::KernelSpan k;
    k.name = std::move(name);
    k.begin_us = at;
    k.end_us = at + 0.5;
    k.stream = stream;
    k.kind = kind;
    k.bytes = kind == cuda::KernelSpan::kCopy ? 4096 : 0;
    return k;
  };
  tracer.AddDeviceSpans({span("k_first", first.begin_us + 0.001, 7, cuda::KernelSpan::kKernel),
                         span("k_mid", mid.begin_us + 0.001, 7, cuda::KernelSpan::kKernel),
                         span("copy HtoD", last.begin_us + 0.001, 3, cuda::KernelSpan::kCopy),
                         span("k_before", first.begin_us - 10, 7, cuda::KernelSpan::kKernel)});
  testing::TempDir dir;
  const std::string path = dir / "trace.json";
  ASSERT_TRUE(tracer.Write(path).ok());
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  const std::string file = text.str();
  auto step_of = [&](const actor::Tracer::Event& e) {
    const ir::TaskDesc& t = plan->tasks[static_cast<size_t>(e.task)];
    return t.kind == ir::TaskKind::kVariable || t.per_step ? e.act : e.act / plan->micro_batches;
  };
  auto line_of = [&](const std::string& name) {
    const size_t at = file.find("{\"name\": \"" + name + "\"");
    return at == std::string::npos ? std::string() : file.substr(at, file.find('\n', at) - at);
  };
  auto expect = [&](const std::string& name, int tid, const std::string& cat, int64_t step, const std::string& act) {
    const std::string line = line_of(name);
    ASSERT_FALSE(line.empty()) << name << " is not in the trace";
    EXPECT_NE(line.find("\"cat\": \"" + cat + "\""), std::string::npos) << line;
    EXPECT_NE(line.find("\"tid\": " + std::to_string(tid) + ","), std::string::npos) << line;
    EXPECT_NE(line.find("\"step\": " + std::to_string(step) + ", \"act\": \"" + act + "\""), std::string::npos) << line;
  };
  // Streams 3 and 7, in that order: tracks 200 and 201.
  EXPECT_NE(file.find("\"tid\": 200, \"args\": {\"name\": \"gpu stream 3\"}"), std::string::npos);
  EXPECT_NE(file.find("\"tid\": 201, \"args\": {\"name\": \"gpu stream 7\"}"), std::string::npos);
  expect("k_first", 201, "gpu kernel", step_of(first), plan->tasks[static_cast<size_t>(first.task)].name);
  expect("k_mid", 201, "gpu kernel", step_of(mid), plan->tasks[static_cast<size_t>(mid.task)].name);
  expect("copy HtoD", 200, "gpu copy", step_of(last), plan->tasks[static_cast<size_t>(last.task)].name);
  expect("k_before", 201, "gpu kernel", -1, "");
  EXPECT_NE(line_of("copy HtoD").find("\"bytes\": 4096"), std::string::npos);
  EXPECT_NE(step_of(first), step_of(last)) << "the run's first and last device acts are in one step";
}

TEST(RuntimeDeathTest, ATensorFromAnotherDeviceIsCaught) {
  ir::TrainingGraph tg = TinyMlp(1);
  auto plan = boxing::LowerOneDevice(tg, 2, 1, DeviceType::kSim);
  ASSERT_TRUE(plan.ok());
  for (ir::TaskDesc& t : plan->tasks) {  // the first layer moved to the host, its inputs left on sim
    if (t.kind != ir::TaskKind::kCompute) continue;
    t.device = Device{};
    break;
  }
  EXPECT_DEATH(
      {
        std::vector<Tensor> params;
        RunPlan(*plan, tg.graph, &params);
      },
      "mm0 on cpu reads regst [0-9]+ on sim:0: a copy between devices is missing");
}

// A busy stream polls its hook at most every Hooks::poll_busy while more messages wait, and always
// once its queue runs dry: 1000 messages queued before it starts are handled with a handful of
// polls, not one per message.
TEST(Stream, BusyThreadPollsAtMostEveryPollBusy) {
  std::atomic<int> handled{0}, polls{0};
  actor::Stream::Hooks hooks;
  hooks.handle = [&](const actor::Msg&) { handled.fetch_add(1); };
  hooks.poll = [&] {
    polls.fetch_add(1);
    return actor::Stream::Poll::kIdle;
  };
  hooks.poll_busy = std::chrono::seconds(10);
  actor::Stream s("compute", std::move(hooks));
  for (int i = 0; i < 1000; ++i) s.Push(actor::Msg{});
  s.Start();
  for (int i = 0; i < 2000 && handled.load() < 1000; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  s.Stop();
  s.Join();
  EXPECT_EQ(handled.load(), 1000);
  EXPECT_GE(polls.load(), 1) << "it polls before it idles";
  EXPECT_LE(polls.load(), 3);
}

// With work in flight, a stream with Hooks::poll_spin polls again at once instead of sleeping:
// many more polls in the same time than one that sleeps kPollMin and more between them.
TEST(Stream, SpinningThreadPollsWithoutSleeping) {
  auto polls_in = [](std::chrono::microseconds spin) {
    std::atomic<int> polls{0};
    actor::Stream::Hooks hooks;
    hooks.handle = [](const actor::Msg&) {};
    hooks.poll = [&] {
      polls.fetch_add(1);
      return actor::Stream::Poll::kWaiting;
    };
    hooks.poll_spin = spin;
    actor::Stream s("compute", std::move(hooks));
    s.Push(actor::Msg{});  // its last work: the spin window starts here
    s.Start();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    s.Stop();
    s.Join();
    return polls.load();
  };
  const int sleeping = polls_in(std::chrono::microseconds(0));
  const int spinning = polls_in(std::chrono::seconds(10));
  EXPECT_LE(sleeping, 2000) << "kPollMin is 10 us: at most one poll per 10 us in 20 ms";  // here: 75
  EXPECT_GT(spinning, 4 * sleeping) << sleeping << " polls sleeping";  // here: 280k
}

}  // namespace
}  // namespace fr
