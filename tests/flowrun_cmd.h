// Running the built flowrun binary from a test: FLOWRUN_BIN (set by tests/meson.build), or
// build/src/flowrun from the repository root.
//
// Every command runs as a Job: in a session of its own, with a deadline. mpirun gives each rank a
// process group of its own, so killing a group would leave ranks running; every process of the
// session is killed instead. Whatever the test does, a Job leaves nothing running behind it, and a
// command that hangs fails its test after the deadline instead of hanging CI.
#pragma once

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fr::testing {

struct Output {
  int code = -1;         // exit code, 128 + signal when a signal ended it; -1 when the deadline passed
  std::string out;       // stdout and stderr together
  bool timed_out = false;
  int left = 0;          // processes still running once the command had exited (then killed)
  double seconds = 0;    // from Finish's call to the command's exit (not the clean-up after it)
};

// Single-quoted for the shell.
inline std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline std::string Bin() {
  const char* b = std::getenv("FLOWRUN_BIN");
  return b && *b ? b : "build/src/flowrun";
}

struct Proc {
  pid_t pid = 0;
  pid_t parent = 0;
  std::string name;  // the executable's name, at most 15 characters (/proc/PID/stat)
};

// Processes of session `sid` that have not exited (zombies excluded).
inline std::vector<Proc> SessionProcesses(pid_t sid) {
  std::vector<Proc> found;
  DIR* d = ::opendir("/proc");
  if (!d) return found;
  while (dirent* e = ::readdir(d)) {
    const pid_t pid = static_cast<pid_t>(std::atol(e->d_name));
    if (pid <= 0) continue;
    std::ifstream stat("/proc/" + std::string(e->d_name) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // Only /proc/PID/stat: reading a busy process's cmdline or environ waits for its memory map
    // lock, seconds at a time.
    const size_t open = line.find('('), close = line.rfind(')');  // the name may hold spaces and parentheses
    if (open == std::string::npos || close == std::string::npos || close < open) continue;
    std::istringstream rest(line.substr(close + 1));
    char state = 0;
    long ppid = 0, pgrp = 0, session = 0;
    if (!(rest >> state >> ppid >> pgrp >> session) || session != sid || state == 'Z' || state == 'X') continue;
    found.push_back(Proc{pid, static_cast<pid_t>(ppid), line.substr(open + 1, close - open - 1)});
  }
  ::closedir(d);
  return found;
}

// A shell command running in a new session, its output going to a pipe that the Job drains.
class Job {
 public:
  explicit Job(const std::string& cmd) {
    int fds[2];
    if (::pipe(fds) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setsid();
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      ::close(fds[0]);
      ::close(fds[1]);
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(fds[1]);
    out_fd_ = fds[0];
    start_ = std::chrono::steady_clock::now();
  }
  ~Job() {
    KillAll();
    if (out_fd_ >= 0) ::close(out_fd_);
  }
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  pid_t pid() const { return pid_; }
  bool started() const { return pid_ > 0; }
  // Output so far (drains the pipe without blocking).
  const std::string& out() {
    Drain(0);
    return out_;
  }
  // The flowrun processes of the job (its ranks, under mpirun).
  std::vector<pid_t> Ranks() const {
    std::vector<pid_t> r;
    for (const Proc& p : SessionProcesses(pid_))
      if (p.name == "flowrun") r.push_back(p.pid);
    return r;
  }
  // Waits for the command to exit, at most `seconds` from now; drains its output all the while.
  // On the deadline every process of the session is killed and timed_out is set. Once the command
  // has exited, whatever is still running in its session is counted in `left` and killed.
  Output Finish(double seconds) {
    const auto called = std::chrono::steady_clock::now();
    const auto deadline = called + std::chrono::duration<double>(seconds);
    Output r;
    int status = 0;
    bool exited = false;
    while (!exited) {
      Drain(50);
      const pid_t w = ::waitpid(pid_, &status, WNOHANG);
      exited = w == pid_ || w < 0;
      if (!exited && std::chrono::steady_clock::now() > deadline) {
        KillAll();
        ::waitpid(pid_, &status, 0);
        r.timed_out = true;
        exited = true;
      }
    }
    reaped_ = true;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - called).count();
    // Ranks outliving their launcher still hold the pipe: a moment to go, then they count as left.
    const auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (!SessionProcesses(pid_).empty() && std::chrono::steady_clock::now() < grace) Drain(50);
    r.left = static_cast<int>(SessionProcesses(pid_).size());
    KillAll();
    Drain(0);
    r.out = out_;
    if (r.timed_out) {
      r.out += "\n[test] killed after " + std::to_string(seconds) + " s: the command did not finish";
    } else {
      r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    }
    return r;
  }
  // SIGKILL to every process of the session, until none is left (at most about a second).
  void KillAll() {
    if (pid_ <= 0) return;
    for (int i = 0; i < 50; ++i) {
      std::vector<Proc> ps = SessionProcesses(pid_);
      if (ps.empty()) break;
      for (const Proc& p : ps) ::kill(p.pid, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!reaped_) {
      int status = 0;
      ::waitpid(pid_, &status, 0);
      reaped_ = true;
    }
  }

 private:
  void Drain(int wait_ms) {
    if (out_fd_ < 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
      return;
    }
    pollfd p{out_fd_, POLLIN, 0};
    while (::poll(&p, 1, wait_ms) > 0) {
      char buf[4096];
      const ssize_t n = ::read(out_fd_, buf, sizeof buf);
      if (n <= 0) {
        ::close(out_fd_);
        out_fd_ = -1;
        return;
      }
      out_.append(buf, static_cast<size_t>(n));
      wait_ms = 0;
    }
  }

  pid_t pid_ = -1;
  int out_fd_ = -1;
  bool reaped_ = false;
  std::string out_;
  std::chrono::steady_clock::time_point start_;
};

// The rank (OMPI_COMM_WORLD_RANK) of process `pid`, or -1.
inline int RankOf(pid_t pid) {
  std::ifstream env("/proc/" + std::to_string(pid) + "/environ");
  std::string all((std::istreambuf_iterator<char>(env)), {});
  const std::string key = std::string("OMPI_COMM_WORLD_RANK=");
  for (size_t at = 0; at < all.size(); at = all.find('\0', at) + 1) {
    if (all.compare(at, key.size(), key) == 0) return std::atoi(all.c_str() + at + key.size());
    if (all.find('\0', at) == std::string::npos) break;
  }
  return -1;
}

// The pids of the job's `n` ranks, by rank, once all run (at most 20 s), or none. Taken once,
// before the test acts: reading /proc of a busy rank can stall for seconds on a loaded machine, so
// a test that timed its own scans would time the machine, not flowrun.
inline std::vector<pid_t> WaitForRanks(Job& j, int n) {
  for (int i = 0; i < 200; ++i) {
    std::vector<pid_t> ranks = j.Ranks();
    if (ranks.size() == static_cast<size_t>(n)) {
      std::vector<pid_t> by_rank(static_cast<size_t>(n), -1);
      for (pid_t p : ranks) {
        const int r = RankOf(p);
        if (r >= 0 && r < n) by_rank[static_cast<size_t>(r)] = p;
      }
      if (std::find(by_rank.begin(), by_rank.end(), -1) == by_rank.end()) return by_rank;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return {};
}

// Runs a shell command line as a Job, with a deadline.
inline Output Shell(const std::string& cmd, double deadline_s = 300) {
  Job j(cmd);
  return j.Finish(deadline_s);
}

// Runs `PREFIX FLOWRUN ARGS...` through the shell (prefix: environment assignments or a launcher
// such as mpirun, as written), as a Job with a deadline.
inline Output Flowrun(const std::vector<std::string>& args, const std::string& prefix = "", double deadline_s = 300) {
  std::string cmd = prefix + Quote(Bin());
  for (const auto& a : args) cmd += " " + Quote(a);
  return Shell(cmd, deadline_s);
}

}  // namespace fr::testing
