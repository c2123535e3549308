// Float exp, erf and tanh written without branches or library calls, so that loops over them
// vectorise (std::exp, std::erf and std::tanh are scalar calls that block it), and sums with
// independent partial accumulators, which vectorise without -ffast-math. Accuracy, checked by
// tests/ops against double references: Exp within 2 ulp on [-87, 88]; Erf within 3e-7 absolute;
// Tanh within 2e-7 relative.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace fr::cpu {

// e^x = 2^n e^r with n = round(x / ln 2) and |r| <= ln 2 / 2; e^r from its degree-7 Taylor
// polynomial, whose truncation error on that interval (5e-9 relative) is below float rounding.
// Below ln(FLT_MIN) the result is 0 (no denormals), so e^-inf = 0; above 88 it is +inf.
inline float Exp(float x) {
  constexpr float kLo = -87.33654f, kHi = 88.f;
  const float xc = std::min(std::max(x, kLo), kHi);
  const float t = xc * 1.44269504088896341f + 12582912.f;  // adding 1.5 * 2^23 rounds to an integer
  const float n = t - 12582912.f;
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;  // ln 2 split in two for exactness
  float p = 1.f / 5040;
  p = p * r + 1.f / 720;
  p = p * r + 1.f / 120;
  p = p * r + 1.f / 24;
  p = p * r + 1.f / 6;
  p = p * r + 0.5f;
  const float e = (p * r * r + r) + 1.f;
  // n read from t's bits, not converted from the float: converting a NaN (x NaN) is undefined,
  // reading its bits is not, and the result is NaN all the same through e.
  const int32_t ni = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(12582912.f);
  const float scale = std::bit_cast<float>((ni + 127) << 23);
  const float y = e * scale;
  return x < kLo ? 0.f : x > kHi ? std::numeric_limits<float>::infinity() : y;
}

// erf: for |x| < 0.5 the Taylor series 2/sqrt(pi) * sum (-1)^k x^(2k+1) / (k! (2k+1)) to k = 6;
// beyond, 1 - P(t) e^(-x^2) with t = 1 / (1 + p |x|) (Abramowitz and Stegun 7.1.26).
// ErfGivenExp: the same, given e = Exp(-x * x), for a caller that needs that too (GELU's
// gradient), so that it is computed once.
inline float ErfGivenExp(float x, float e) {
  const float z = x * x;
  float s = 1.f / 9360;
  s = s * z - 1.f / 1320;
  s = s * z + 1.f / 216;
  s = s * z - 1.f / 42;
  s = s * z + 1.f / 10;
  s = s * z - 1.f / 3;
  s = s * z + 1.f;
  const float small = 1.1283791670955126f * x * s;
  const float a = std::fabs(x);
  const float t = 1.f / (1.f + 0.3275911f * a);
  float q = 1.061405429f;
  q = q * t - 1.453152027f;
  q = q * t + 1.421413741f;
  q = q * t - 0.284496736f;
  q = q * t + 0.254829592f;
  const float big = 1.f - q * t * e;
  return a < 0.5f ? small : (x < 0.f ? -big : big);
}

inline float Erf(float x) { return ErfGivenExp(x, Exp(-(x * x))); }

// tanh: for |x| < 0.5 its Taylor series x - x^3/3 + 2x^5/15 - ... to x^15 (truncation 9e-9
// relative there); beyond, 1 - 2 / (e^(2|x|) + 1), which is 1 once e^(2|x|) overflows; computed
// for |x|, then given x's sign (so tanh(-0) = -0).
inline float Tanh(float x) {
  const float z = x * x;
  float p = static_cast<float>(-929569.0 / 638512875);
  p = p * z + static_cast<float>(21844.0 / 6081075);
  p = p * z + static_cast<float>(-1382.0 / 155925);
  p = p * z + static_cast<float>(62.0 / 2835);
  p = p * z + static_cast<float>(-17.0 / 315);
  p = p * z + static_cast<float>(2.0 / 15);
  p = p * z + static_cast<float>(-1.0 / 3);
  const float a = std::fabs(x);
  const float small = a + a * (z * p);
  const float big = 1.f - 2.f / (Exp(2.f * a) + 1.f);
  return std::copysign(a < 0.5f ? small : big, x);
}

// max of x[0..n), -inf for n = 0.
inline float MaxOf(const float* x, int64_t n) {
  float m[8];
  std::fill(m, m + 8, -std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; ++k) m[k] = std::max(m[k], x[j + k]);
  for (; j < n; ++j) m[0] = std::max(m[0], x[j]);
  return *std::max_element(m, m + 8);
}

// sum of f(j) for j < n, in 8 interleaved partial sums of type Acc combined in a fixed order: one
// running sum is a chain of dependent adds (a quarter of the speed), and the order fixes the bits.
template <typename Acc = float, typename F>
inline Acc SumOf(int64_t n, F f) {
  Acc s[8] = {};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; ++k) s[k] += f(j + k);
  for (; j < n; ++j) s[0] += f(j);
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

}  // namespace fr::cpu
