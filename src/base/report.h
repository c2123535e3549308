// What the flowrun commands print for humans: a failure on stderr with its exit code, byte counts
// and milliseconds.
#pragma once

#include <cstdio>
#include <iostream>
#include <string>

#include "base/status.h"

namespace fr {

// Prints "flowrun: MESSAGE" on stderr; returns the status's exit code.
inline int Fail(const Status& s) {
  std::cerr << "flowrun: " << s.message() << std::endl;
  return s.exit_code();
}

// "512 B", "3.0 KiB", "1.25 MiB", "2.00 GiB".
inline std::string HumanBytes(double b) {
  char buf[32];
  if (b >= (1 << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1 << 30));
  else if (b >= (1 << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1 << 20));
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024);
  else std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

// Seconds as milliseconds: three decimals below 10 ms, else two.
inline std::string HumanMs(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, seconds < 1e-2 ? "%.3f" : "%.2f", seconds * 1e3);
  return buf;
}

}  // namespace fr
