// Running the built flowrun binary from a test: FLOWRUN_BIN (set by tests/meson.build), or
// build/src/flowrun from the repository root.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace fr::testing {

struct Output {
  int code = -1;
  std::string out;  // stdout and stderr together
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

// Runs `PREFIX FLOWRUN ARGS...` through the shell (prefix: environment assignments or a launcher
// such as mpirun, as written). The exit code is 128 + signal when a signal ended it.
inline Output Flowrun(const std::vector<std::string>& args, const std::string& prefix = "") {
  std::string cmd = prefix + Quote(Bin());
  for (const auto& a : args) cmd += " " + Quote(a);
  cmd += " 2>&1";
  Output r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  return r;
}

}  // namespace fr::testing
