// Shape: a static, fully known tensor shape. Element counts are checked for overflow where shapes
// come from user input (ONNX files, configs), so everything downstream may multiply freely.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "base/status.h"

namespace fr {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> d) : dims_(d) {}
  explicit Shape(std::vector<int64_t> d) : dims_(std::move(d)) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t operator[](int i) const { return dims_[static_cast<size_t>(i)]; }
  int64_t& operator[](int i) { return dims_[static_cast<size_t>(i)]; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims_) n *= d;
    return n;
  }
  bool operator==(const Shape&) const = default;
  std::string ToString() const;  // "[2, 3]"; "[]" for a scalar

  // Normalises a possibly negative axis into [0, rank); an error names the axis and rank.
  Result<int> Axis(int64_t axis) const;

 private:
  std::vector<int64_t> dims_;
};

// Validates user-supplied dims: each in [0, 2^40], and the product of the non-zero ones below 2^48.
Status CheckDims(const std::vector<int64_t>& dims);

// Numpy broadcasting of two shapes; an error if they are incompatible.
Result<Shape> Broadcast(const Shape& a, const Shape& b);

// Contiguous row-major strides, in elements.
std::vector<int64_t> Strides(const Shape& s);

}  // namespace fr
