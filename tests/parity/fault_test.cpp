// Failures under mpirun (issue: many ranks): a world-size mismatch is exit 2 with a clear message;
// a killed rank or a hung rank stops the others with a non-zero exit, naming the rank, within the
// timeout; SIGTERM stops every rank. Runs the binary named by FLOWRUN_BIN from the repository root.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;

std::string Bin() {
  const char* b = std::getenv("FLOWRUN_BIN");
  return b ? b : "build/src/flowrun";
}

struct Job {
  pid_t pid = -1;
  std::string log;
};

// Starts `mpirun -n 2 flowrun train` on a long data-parallel run in its own process group.
Job Start(const std::string& extra) {
  Job j;
  j.log = "/tmp/flowrun_fault_" + std::to_string(::getpid()) + ".log";
  std::string cmd = "exec mpirun --oversubscribe --allow-run-as-root -n 2 " + Bin() +
                    " train configs/mlp.yaml --set train.steps=1000000 --set log.every=100000"
                    " --set 'parallel.sbp={x: [\"S(0)\"]}' --set parallel.timeout=5 " + extra + " > " + j.log + " 2>&1";
  j.pid = ::fork();
  if (j.pid == 0) {
    ::setpgid(0, 0);
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return j;
}

// A rank process of the job (a child of mpirun running flowrun), or -1.
pid_t RankPid(pid_t mpirun, int nth) {
  std::string cmd = "pgrep -P " + std::to_string(mpirun) + " -f 'flowrun train' | sed -n " + std::to_string(nth + 1) + "p";
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[64] = {0};
  if (p && std::fgets(buf, sizeof buf, p)) {}
  if (p) ::pclose(p);
  return buf[0] ? static_cast<pid_t>(std::atol(buf)) : -1;
}

// Waits for the job; returns its exit status (128 + signal if killed) and the seconds it took.
std::pair<int, double> Wait(const Job& j, Clock::time_point since) {
  int status = 0;
  ::waitpid(j.pid, &status, 0);
  double s = std::chrono::duration<double>(Clock::now() - since).count();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), s};
}

std::string Log(const Job& j) {
  std::ifstream f(j.log);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

pid_t WaitForRank(const Job& j, int nth) {
  for (int i = 0; i < 100; ++i) {
    pid_t r = RankPid(j.pid, nth);
    if (r > 0) {
      std::this_thread::sleep_for(std::chrono::seconds(2));  // let it train for a while
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return -1;
}

TEST(Fault, WorldSizeMismatch_1n2d) {
  std::string cmd = "mpirun --oversubscribe --allow-run-as-root -n 2 " + Bin() +
                    " train configs/mlp.yaml --set parallel.ranks=3 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  int status = ::pclose(p);
  EXPECT_EQ(WEXITSTATUS(status), 2) << out;
  EXPECT_NE(out.find("parallel.ranks is 3 but the job has 2 rank(s)"), std::string::npos) << out;
}

TEST(Fault, KilledRankStopsTheJob_1n2d) {
  Job j = Start("");
  pid_t victim = WaitForRank(j, 1);
  ASSERT_GT(victim, 0);
  auto t0 = Clock::now();
  ::kill(victim, SIGKILL);
  auto [code, secs] = Wait(j, t0);
  std::string log = Log(j);
  EXPECT_NE(code, 0) << log;
  EXPECT_LT(secs, 10.0) << log;
  EXPECT_NE(log.find("rank 1"), std::string::npos) << log;
}

TEST(Fault, HungRankIsNamedWithinTheTimeout_1n2d) {
  Job j = Start("");
  pid_t victim = WaitForRank(j, 1);
  ASSERT_GT(victim, 0);
  auto t0 = Clock::now();
  ::kill(victim, SIGSTOP);
  auto [code, secs] = Wait(j, t0);
  ::kill(victim, SIGKILL);
  std::string log = Log(j);
  EXPECT_NE(code, 0) << log;
  EXPECT_LT(secs, 15.0) << "parallel.timeout is 5 s\n" << log;
  EXPECT_NE(log.find("no progress for 5 s"), std::string::npos) << log;
  EXPECT_NE(log.find("with rank(s) 1"), std::string::npos) << log;
}

TEST(Fault, SigtermStopsEveryRank_1n2d) {
  Job j = Start("");
  ASSERT_GT(WaitForRank(j, 1), 0);
  auto t0 = Clock::now();
  ::kill(j.pid, SIGTERM);  // mpirun forwards it to the ranks
  auto [code, secs] = Wait(j, t0);
  std::string log = Log(j);
  EXPECT_NE(code, 0) << log;
  EXPECT_LT(secs, 10.0) << log;
  EXPECT_NE(log.find("stopped by signal 15"), std::string::npos) << log;
}

}  // namespace
