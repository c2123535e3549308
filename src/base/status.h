// Status and Result<T>: the one error regime for everything a user can cause (a bad config, a bad
// ONNX file, an impossible hint, a rank mismatch). Broken internal invariants abort through FR_CHECK.
//
// A Status is either ok or carries a code and a message. Messages start with the component in
// brackets, e.g. "[config] configs/mlp.yaml:12:3: unknown key 'stpes' (did you mean 'steps'?)".
// The code picks the process exit code: kInvalidInput exits 2, kRuntime exits 1.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace fr {

enum class Code { kOk, kInvalidInput, kRuntime };

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return {}; }
  static Status Invalid(std::string msg) { return Status(Code::kInvalidInput, std::move(msg)); }
  static Status Runtime(std::string msg) { return Status(Code::kRuntime, std::move(msg)); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return msg_; }
  // The exit code a command returns for this status: 0, 2 (bad input) or 1 (runtime failure).
  int exit_code() const { return code_ == Code::kOk ? 0 : code_ == Code::kInvalidInput ? 2 : 1; }
  // Adds context in front of the message, keeping the code.
  Status With(const std::string& prefix) const {
    return ok() ? *this : Status(code_, prefix + msg_);
  }

 private:
  Status(Code c, std::string m) : code_(c), msg_(std::move(m)) {}
  Code code_ = Code::kOk;
  std::string msg_;
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T v) : v_(std::move(v)) {}                       // NOLINT: implicit by design
  Result(Status s) : v_(std::move(s)) { Check(); }        // NOLINT: implicit by design
  bool ok() const { return v_.index() == 0; }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<1>(v_);
  }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  void Check() const {
    if (std::get<1>(v_).ok()) {
      std::fprintf(stderr, "internal error: Result built from an ok Status\n");
      std::abort();
    }
  }
  std::variant<T, Status> v_;
};

[[noreturn]] inline void Fatal(const char* file, int line, const char* what, const std::string& msg) {
  std::fprintf(stderr, "internal error at %s:%d: %s %s\n", file, line, what, msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace fr

#define FR_CONCAT_INNER(a, b) a##b
#define FR_CONCAT(a, b) FR_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                 \
  do {                                        \
    ::fr::Status fr_status_ = (expr);         \
    if (!fr_status_.ok()) return fr_status_;  \
  } while (0)

#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) ASSIGN_OR_RETURN_IMPL(FR_CONCAT(fr_result_, __LINE__), lhs, expr)

// Broken invariants: abort with file and line. Never for user input.
#define FR_CHECK(cond, ...)                                                         \
  do {                                                                              \
    if (!(cond)) ::fr::Fatal(__FILE__, __LINE__, "check failed: " #cond, std::string(__VA_ARGS__)); \
  } while (0)
