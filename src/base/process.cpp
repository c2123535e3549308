#include "base/process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>

extern char** environ;

namespace fr {

double PhysicalMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), size = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? static_cast<double>(pages) * static_cast<double>(size) : 0;
}

namespace {
std::atomic<double> g_memory_budget{0};
}  // namespace

double MemoryBudgetBytes() {
  const double set = g_memory_budget.load();
  if (set > 0) return set;
  const double have = PhysicalMemoryBytes();
  return have > 0 ? have : 1e18;
}

void SetMemoryBudgetBytes(double bytes) { g_memory_budget.store(bytes); }
namespace {

volatile sig_atomic_t g_child = 0;

// mpirun shares our terminal's process group, so Ctrl-C reaches it anyway; a signal sent to this
// process alone is passed on, and we still return mpirun's exit code.
extern "C" void ForwardToMpirun(int sig) {
  if (g_child > 0) ::kill(static_cast<pid_t>(g_child), sig);
}

}  // namespace

std::string FindOnPath(const std::string& name) {
  const char* env = std::getenv("PATH");
  std::stringstream path(env ? env : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(path, dir, ':')) {
    std::string p = (dir.empty() ? std::string(".") : dir) + "/" + name;
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

Result<int> RunUnderMpirun(int ranks, const std::vector<std::string>& args, const std::string& output, double timeout) {
  std::string mpirun = FindOnPath("mpirun");
  if (mpirun.empty()) {
    return Status::Invalid("mpirun not found on PATH: install openmpi-bin (Debian/Ubuntu: apt-get install openmpi-bin)");
  }
  std::error_code ec;
  std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) return Status::Runtime("cannot resolve /proc/self/exe: " + ec.message());
  std::vector<std::string> all = {mpirun, "-n", std::to_string(ranks), "--oversubscribe"};
  if (::geteuid() == 0) all.push_back("--allow-run-as-root");
  all.push_back(self);
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : all) argv.push_back(s.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  if (!output.empty()) {
    posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&files, STDOUT_FILENO, STDERR_FILENO);
  }
  struct sigaction fwd {}, old_int {}, old_term {}, old_hup {};
  fwd.sa_handler = ForwardToMpirun;
  sigemptyset(&fwd.sa_mask);
  sigaction(SIGINT, &fwd, &old_int);
  sigaction(SIGTERM, &fwd, &old_term);
  sigaction(SIGHUP, &fwd, &old_hup);
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, mpirun.c_str(), &files, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  Result<int> code = 0;
  if (rc != 0) {
    code = Status::Runtime("cannot start " + mpirun + ": " + std::strerror(rc));
  } else {
    g_child = pid;
    int st = 0;
    pid_t w;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                                  std::chrono::duration<double>(timeout));
    bool late = false;
    // Polls rather than blocks, so that a job past its deadline is ended (mpirun passes SIGTERM to
    // its ranks; SIGKILL if that did not do within 10 s).
    while ((w = ::waitpid(pid, &st, WNOHANG)) == 0 || (w < 0 && errno == EINTR)) {
      const auto now = std::chrono::steady_clock::now();
      if (!late && now > deadline) {
        late = true;
        ::kill(pid, SIGTERM);
      } else if (late && now > deadline + std::chrono::seconds(10)) {
        ::kill(pid, SIGKILL);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (w < 0) code = Status::Runtime(std::string("waiting for mpirun: ") + std::strerror(errno));
    else if (late) code = Status::Runtime("mpirun did not finish within " + std::to_string(static_cast<int>(timeout)) + " s: stopped");
    else if (WIFEXITED(st)) code = WEXITSTATUS(st);
    else code = 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    g_child = 0;
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  return code;
}

}  // namespace fr
