// Loads libflowrun_cuda.so on first use (ops/cuda/backend.h).
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "ops/cuda/backend.h"

namespace fr::cuda {
namespace {

constexpr const char* kModule = "libflowrun_cuda.so";

std::string ExeDir() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  return std::filesystem::path(buf).parent_path().string();
}

struct Loaded {
  const Api* api = nullptr;
  Status why;  // when api is null
};

const Loaded& Module() {
  static const Loaded loaded = [] {
    Loaded l;
    std::vector<std::string> tried;
    if (const char* env = std::getenv("FLOWRUN_CUDA_MODULE"); env && *env) {
      tried.push_back(env);
    } else {
      const std::string dir = ExeDir();
      tried.push_back(dir + "/" + kModule);
      tried.push_back(dir + "/../lib/flowrun/" + kModule);
    }
    std::string errors;
    for (const std::string& path : tried) {
      std::error_code ec;
      if (!std::filesystem::exists(path, ec)) {
        errors += (errors.empty() ? "" : "; ") + path + ": not found";
        continue;
      }
      void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        errors += (errors.empty() ? "" : "; ") + std::string(dlerror());
        continue;
      }
      auto entry = reinterpret_cast<const Api* (*)()>(dlsym(h, "flowrun_cuda_api"));
      const Api* api = entry ? entry() : nullptr;
      if (!api || api->version != kApiVersion) {
        errors += (errors.empty() ? "" : "; ") + path + ": not a CUDA module of this flowrun";
        continue;
      }
      l.api = api;
      return l;
    }
    l.why = Status::Runtime("[cuda] this flowrun has no CUDA backend (" + errors +
                            "); build it with nvcc on PATH: meson setup -Dcuda=enabled");
    return l;
  }();
  return loaded;
}

Status NotLoaded(const KernelCtx& ctx) { return Status::Runtime(Module().why.message() + " (op " + ctx.node.name + ")"); }

Status GroupNotLoaded(std::span<const KernelCtx> members) { return NotLoaded(members[0]); }

Status NoKernel(const KernelCtx& ctx) {
  return Status::Runtime("[cuda] " + ctx.node.name + ": op " + Def(ctx.node.op).name +
                         " has no CUDA kernel in this version of flowrun (flowrun ops lists the devices of each op)");
}

}  // namespace

Status Load() { return Module().api ? Status::Ok() : Module().why; }

int VisibleDevices() { return Module().api ? Module().api->visible_devices() : 0; }

Result<int> InitDevice(int local_rank) {
  if (!Module().api) return Module().why;
  return Module().api->init_device(local_rank);
}

void AllowTf32(bool allow) {
  if (Module().api) Module().api->allow_tf32(allow);
}

KernelFn KernelFor(OpKind k) {
  if (!Module().api) return NotLoaded;
  const KernelFn f = Module().api->kernel_for(k);
  return f ? f : NoKernel;
}

GroupKernelFn GroupKernelFor(OpKind k) {
  if (!Module().api) return GroupNotLoaded;
  return Module().api->group_kernel_for(k);
}

Status NcclNewId(GroupId* id) {
  if (!Module().api) return Module().why;
  return Module().api->nccl_new_id(id);
}

Result<std::unique_ptr<CollectiveGroup>> NcclMakeGroup(int members, const GroupId& id, int index) {
  if (!Module().api) return Module().why;
  return Module().api->nccl_make_group(members, id, index);
}

std::string NcclVersion() { return Module().api ? Module().api->nccl_version() : std::string(); }

Result<GpuInfo> Gpu() {
  if (!Module().api) return Module().why;
  return Module().api->gpu();
}

Result<double> GemmSeconds(int n, bool tf32, int reps) {
  if (!Module().api) return Module().why;
  return Module().api->gemm_seconds(n, tf32, reps);
}

Status StartKernelTrace() {
  if (!Module().api) return Module().why;
  return Module().api->kernel_trace_start();
}

Result<std::vector<KernelSpan>> TakeKernelTrace() {
  if (!Module().api) return Module().why;
  return Module().api->kernel_trace_take();
}

std::string GpuKey() { return Module().api ? Module().api->gpu_key() : std::string(); }

bool HasKernel(OpKind k) { return Module().api && Module().api->kernel_for(k) != nullptr; }

}  // namespace fr::cuda
