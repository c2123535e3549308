// --trace on CUDA: every kernel, copy and memset the GPU ran, with its own start and end, from
// CUPTI's activity records. The events flowrun records around each act bound its kernels' time
// from above (a gap where the GPU waits for the host's next launch inside an act counts as busy);
// these records do not, so the GPU's busy share of a step is read from them.
//
// libcupti is loaded here, on first use, not linked: a run without --trace neither needs nor loads
// it (CUDA's redistributable runtime does not always ship it). CUPTI stamps its records with the
// steady clock through a timestamp callback, the clock the host's acts are on.
#include <cupti_activity.h>
#include <cuda_runtime.h>
#include <cxxabi.h>
#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "ops/cuda/device.h"

namespace fr::cuda {
namespace {

struct Cupti {
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
  CUptiResult (*register_timestamp)(CUpti_TimestampCallbackFunc);
  CUptiResult (*enable)(CUpti_ActivityKind);
  CUptiResult (*disable)(CUpti_ActivityKind);
  CUptiResult (*flush_all)(uint32_t);
  CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**);
  CUptiResult (*dropped)(CUcontext, uint32_t, size_t*);
  CUptiResult (*result_string)(CUptiResult, const char**);
};

// Records come in buffers CUPTI asks for and hands back, from its own thread or in a flush.
constexpr size_t kBufferBytes = 8 << 20;
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET};

std::mutex g_mu;
const Cupti* g_api = nullptr;             // set once, by StartKernelTrace
std::vector<KernelSpan> g_spans;          // guarded by g_mu
std::unordered_map<const char*, std::string> g_names;  // guarded by g_mu: CUPTI's name -> demangled
size_t g_dropped = 0;                     // guarded by g_mu

uint64_t SteadyNanos() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

// "void fr::cuda::(anonymous namespace)::AddKernel<float>(float const*, ...)" -> up to the '('.
std::string KernelName(const char* mangled) {
  if (!mangled) return "kernel";
  auto it = g_names.find(mangled);
  if (it != g_names.end()) return it->second;
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && d ? d : mangled;
  std::free(d);
  if (size_t paren = name.find('('); paren != std::string::npos && paren > 0) name.resize(paren);
  if (name.rfind("void ", 0) == 0) name.erase(0, 5);
  g_names.emplace(mangled, name);
  return name;
}

const char* CopyKindName(uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "copy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "copy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "copy DtoD";
    default: return "copy";
  }
}

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(g_mu);
  CUpti_Activity* r = nullptr;
  while (g_api->next_record(buffer, valid, &r) == CUPTI_SUCCESS) {
    KernelSpan s;
    if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || r->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(r);
      s = {KernelName(k->name), k->start * 1e-3, k->end * 1e-3, k->streamId, KernelSpan::kKernel, 0};
    } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* c = reinterpret_cast<const CUpti_ActivityMemcpy6*>(r);
      s = {CopyKindName(c->copyKind), c->start * 1e-3, c->end * 1e-3, c->streamId, KernelSpan::kCopy, c->bytes};
    } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(r);
      s = {"memset", m->start * 1e-3, m->end * 1e-3, m->streamId, KernelSpan::kCopy, m->bytes};
    } else {
      continue;
    }
    if (s.end_us >= s.begin_us && s.begin_us > 0) g_spans.push_back(std::move(s));
  }
  size_t dropped = 0;
  if (g_api->dropped(nullptr, 0, &dropped) == CUPTI_SUCCESS) g_dropped += dropped;
  std::free(buffer);
}

Status CuptiError(const char* what, CUptiResult r) {
  const char* s = nullptr;
  if (g_api->result_string(r, &s) != CUPTI_SUCCESS || !s) s = "unknown error";
  return Status::Runtime(std::string("[cuda] --trace: CUPTI ") + what + ": " + s);
}

Result<const Cupti*> LoadCupti() {
  static const Cupti* api = nullptr;
  static std::string why;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libcupti.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      why = dlerror();
      return;
    }
    static Cupti c;
    bool ok = true;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (!fn) {
        ok = false;
        why += (why.empty() ? "" : ", ") + std::string(name) + " missing";
      }
    };
    sym(c.register_callbacks, "cuptiActivityRegisterCallbacks");
    sym(c.register_timestamp, "cuptiActivityRegisterTimestampCallback");
    sym(c.enable, "cuptiActivityEnable");
    sym(c.disable, "cuptiActivityDisable");
    sym(c.flush_all, "cuptiActivityFlushAll");
    sym(c.next_record, "cuptiActivityGetNextRecord");
    sym(c.dropped, "cuptiActivityGetNumDroppedRecords");
    sym(c.result_string, "cuptiGetResultString");
    if (ok) api = &c;
  });
  if (!api)
    return Status::Runtime("[cuda] --trace: CUPTI, which times each kernel, cannot be loaded (" + why +
                           "); it comes with the CUDA toolkit (extras/CUPTI) or pip's nvidia-cuda-cupti: put its lib folder on "
                           "LD_LIBRARY_PATH");
  return api;
}

}  // namespace

Status CuptiStart() {
  ASSIGN_OR_RETURN(const Cupti* api, LoadCupti());
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_api) return Status::Ok();  // already on
    g_api = api;
  }
  if (CUptiResult r = api->register_timestamp(SteadyNanos); r != CUPTI_SUCCESS) return CuptiError("timestamp callback", r);
  if (CUptiResult r = api->register_callbacks(BufferRequested, BufferCompleted); r != CUPTI_SUCCESS)
    return CuptiError("buffer callbacks", r);
  for (CUpti_ActivityKind k : kKinds)
    if (CUptiResult r = api->enable(k); r != CUPTI_SUCCESS) return CuptiError("enable", r);
  return Status::Ok();
}

Result<std::vector<KernelSpan>> CuptiTake() {
  const Cupti* api;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    api = g_api;
  }
  if (!api) return Status::Runtime("[cuda] --trace: the kernel trace was not started");
  // Everything queued has run, so every record is complete when forced out.
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess)
    return Status::Runtime(std::string("[cuda] --trace: cudaDeviceSynchronize: ") + cudaGetErrorString(e));
  if (CUptiResult r = api->flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); r != CUPTI_SUCCESS) return CuptiError("flush", r);
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_dropped > 0)
    return Status::Runtime("[cuda] --trace: CUPTI dropped " + std::to_string(g_dropped) +
                           " kernel records (its buffers were full): trace fewer steps");
  std::vector<KernelSpan> out;
  out.swap(g_spans);
  return out;
}

}  // namespace fr::cuda
