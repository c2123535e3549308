// job_runner SECONDS COMMAND [ARGS...]: runs a command as a tests/flowrun_cmd.h Job, for meson
// tests that launch mpirun themselves. Prints its output; exits with its exit code, or 1 when it
// ran past SECONDS (every process of it then killed) or left processes running.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "flowrun_cmd.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: job_runner SECONDS COMMAND [ARGS...]\n");
    return 2;
  }
  std::string cmd = "exec";
  for (int i = 2; i < argc; ++i) cmd += " " + fr::testing::Quote(argv[i]);
  const fr::testing::Output r = fr::testing::Shell(cmd, std::atof(argv[1]));
  std::fwrite(r.out.data(), 1, r.out.size(), stdout);
  if (r.left) std::printf("\n[job_runner] %d process(es) outlived the command: killed\n", r.left);
  if (r.timed_out || r.left) return 1;
  return r.code;
}
