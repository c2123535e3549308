// CPU kernels of the convolutional ops (ops/conv.cpp). A convolution is a GEMM over an im2col
// buffer: per sample and group, the input's windows laid out as columns [C/g * kH * kW, OH * OW],
// multiplied by the weight [M/g, C/g * kH * kW] with oneDNN's sgemm (as MatMul is); the gradients
// are the two other products, the data gradient folded back by col2im.
#include <dnnl.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/cpu/parallel.h"

namespace fr::cpu {
namespace {

struct Geometry {
  int64_t n, c, h, w;       // input
  int64_t m, oh, ow;        // output channels and size
  int64_t kh, kw, sh, sw, pt, pl, dh, dw, group;
  int64_t pb, pr;  // bottom and right pads
  int64_t cg() const { return c / group; }
  int64_t mg() const { return m / group; }
  int64_t rows() const { return cg() * kh * kw; }  // of the im2col buffer
  int64_t cols() const { return oh * ow; }
};

Geometry GeometryOf(const ir::Node& node, const fr::Shape& x, const fr::Shape& y) {
  const auto k = node.attrs.Ints("kernel"), s = node.attrs.IntsOr("strides", {1, 1}),
             p = node.attrs.IntsOr("pads", {0, 0, 0, 0}), d = node.attrs.IntsOr("dilations", {1, 1});
  return {x[0], x[1], x[2], x[3], y[1], y[2], y[3], k[0], k[1], s[0], s[1], p[0], p[1], d[0], d[1],
          node.attrs.Int("group", 1), p[2], p[3]};
}

void Sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
           float beta, float* c, int64_t ldc) {
  const dnnl_status_t s = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.f, a, lda, b, ldb, beta, c, ldc);
  FR_CHECK(s == dnnl_success, "dnnl_sgemm failed with status " + std::to_string(static_cast<int>(s)));
}

// With unit strides and the output as wide as the input (the common "same" convolution), window
// row (i, j) reads the input plane shifted by one linear offset: output position k reads input
// k + shift. The inside positions are oy in [y0, y1) and ox in [x0, x1); the positions between
// the first and the last inside one, [k0, k1), map into the plane, and those among them outside
// [x0, x1) read a neighbouring row, so they are set apart afterwards (im2col) or beforehand
// (col2im). One long copy or add per window row instead of one short masked loop per output row.
struct Shift {
  int64_t y0, y1, x0, x1, k0, k1, shift;
  bool empty() const { return y0 >= y1 || x0 >= x1; }
};
bool Linear(const Geometry& g) { return g.sh == 1 && g.sw == 1 && g.ow == g.w; }
Shift ShiftOf(const Geometry& g, int64_t i, int64_t j) {
  const int64_t dy = i * g.dh - g.pt, dx = j * g.dw - g.pl;  // iy = oy + dy, ix = ox + dx
  Shift s{};
  s.y0 = std::max<int64_t>(0, -dy);
  s.y1 = std::min(g.oh, g.h - dy);
  s.x0 = std::max<int64_t>(0, -dx);
  s.x1 = std::min(g.ow, g.w - dx);
  s.k0 = s.y0 * g.ow + s.x0;
  s.k1 = (s.y1 - 1) * g.ow + s.x1;
  s.shift = dy * g.w + dx;
  return s;
}

// row[oy * ow + ox] = v for the inside rows oy and the columns ox outside [x0, x1): column by
// column, a strided store (per output row, a fill of a float or two became a memset call each).
void SetPaddingColumns(const Geometry& g, const Shift& s, float* row, float v) {
  auto column = [&](int64_t ox) {
    for (int64_t oy = s.y0; oy < s.y1; ++oy) row[oy * g.ow + ox] = v;
  };
  for (int64_t ox = 0; ox < s.x0; ++ox) column(ox);
  for (int64_t ox = s.x1; ox < g.ow; ++ox) column(ox);
}

// Columns of one sample's group: col[(ci * kh + i) * kw + j][oy * ow + ox] = x[ci][oy*sh - pt + i*dh][ox*sw - pl + j*dw].
void Im2Col(const Geometry& g, const float* x, float* col) {
  const bool linear = Linear(g);
  for (int64_t ci = 0; ci < g.cg(); ++ci)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        float* row = col + ((ci * g.kh + i) * g.kw + j) * g.cols();
        if (linear) {
          const Shift s = ShiftOf(g, i, j);
          if (s.empty()) {
            std::fill(row, row + g.cols(), 0.f);
            continue;
          }
          const float* plane = x + ci * g.h * g.w;
          std::fill(row, row + s.k0, 0.f);
          std::copy(plane + (s.k0 + s.shift), plane + (s.k1 + s.shift), row + s.k0);
          std::fill(row + s.k1, row + g.cols(), 0.f);
          SetPaddingColumns(g, s, row, 0.f);
          continue;
        }
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          const int64_t iy = oy * g.sh - g.pt + i * g.dh;
          float* out = row + oy * g.ow;
          if (iy < 0 || iy >= g.h) {
            std::fill(out, out + g.ow, 0.f);
            continue;
          }
          const float* in = x + (ci * g.h + iy) * g.w;
          for (int64_t ox = 0; ox < g.ow; ++ox) {
            const int64_t ix = ox * g.sw - g.pl + j * g.dw;
            out[ox] = ix >= 0 && ix < g.w ? in[ix] : 0.f;
          }
        }
      }
}

// The adjoint: adds each column entry back to the input element it was read from, window rows in
// order. The linear path overwrites the entries that read padding with -0, which added to any
// float leaves it as it was, and col is the caller's scratch.
void Col2Im(const Geometry& g, float* col, float* x) {
  const bool linear = Linear(g);
  for (int64_t ci = 0; ci < g.cg(); ++ci)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        float* row = col + ((ci * g.kh + i) * g.kw + j) * g.cols();
        if (linear) {
          const Shift s = ShiftOf(g, i, j);
          if (s.empty()) continue;
          SetPaddingColumns(g, s, row, -0.f);
          float* plane = x + ci * g.h * g.w;
          for (int64_t k = s.k0; k < s.k1; ++k) plane[k + s.shift] += row[k];
          continue;
        }
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          const int64_t iy = oy * g.sh - g.pt + i * g.dh;
          if (iy < 0 || iy >= g.h) continue;
          float* out = x + (ci * g.h + iy) * g.w;
          for (int64_t ox = 0; ox < g.ow; ++ox) {
            const int64_t ix = ox * g.sw - g.pl + j * g.dw;
            if (ix >= 0 && ix < g.w) out[ix] += row[oy * g.ow + ox];
          }
        }
      }
}

}  // namespace

Status Conv(const KernelCtx& c) {
  const Tensor &X = c.in[0], &W = c.in[1], &Y = c.out[0];
  const Geometry g = GeometryOf(c.node, X.shape(), Y.shape());
  const float* bias = c.in.size() > 2 && c.in[2].defined() ? c.in[2].data<float>() : nullptr;
  // Samples are independent: threads take whole samples.
  ParallelFor(g.n, g.m * g.rows() * g.cols(), [&](int64_t begin, int64_t end) {
    std::vector<float> col(static_cast<size_t>(g.rows() * g.cols()));
    for (int64_t s = begin; s < end; ++s)
      for (int64_t gr = 0; gr < g.group; ++gr) {
        Im2Col(g, X.data<float>() + (s * g.c + gr * g.cg()) * g.h * g.w, col.data());
        float* y = Y.data<float>() + (s * g.m + gr * g.mg()) * g.cols();
        if (bias) {
          for (int64_t o = 0; o < g.mg(); ++o) std::fill(y + o * g.cols(), y + (o + 1) * g.cols(), bias[gr * g.mg() + o]);
        }
        Sgemm(false, false, g.mg(), g.cols(), g.rows(), W.data<float>() + gr * g.mg() * g.rows(), g.rows(), col.data(),
              g.cols(), bias ? 1.f : 0.f, y, g.cols());
      }
  });
  return Status::Ok();
}

Status ConvGradData(const KernelCtx& c) {
  const Tensor &dY = c.in[0], &W = c.in[1], &dX = c.out[0];
  const Geometry g = GeometryOf(c.node, dX.shape(), dY.shape());
  dX.Zero();
  ParallelFor(g.n, g.m * g.rows() * g.cols(), [&](int64_t begin, int64_t end) {
    std::vector<float> col(static_cast<size_t>(g.rows() * g.cols()));
    for (int64_t s = begin; s < end; ++s)
      for (int64_t gr = 0; gr < g.group; ++gr) {
        // col = W_g^T [rows, M/g] x dY_g [M/g, cols]
        Sgemm(true, false, g.rows(), g.cols(), g.mg(), W.data<float>() + gr * g.mg() * g.rows(), g.rows(),
              dY.data<float>() + (s * g.m + gr * g.mg()) * g.cols(), g.cols(), 0.f, col.data(), g.cols());
        Col2Im(g, col.data(), dX.data<float>() + (s * g.c + gr * g.cg()) * g.h * g.w);
      }
  });
  return Status::Ok();
}

// The weight gradient sums over samples in groups of this many, each group's samples in order into
// a partial sum of its own, then the partial sums in order: the same order on any number of
// threads, which take whole groups. (One GEMM per sample split between threads by oneDNN is
// slower than on one: 8-16 rows by 72-144 columns over a few hundred terms.)
constexpr int64_t kSamplesPerPartial = 4;

Status ConvGradWeight(const KernelCtx& c) {
  const Tensor &dY = c.in[0], &X = c.in[1], &dW = c.out[0];
  const Geometry g = GeometryOf(c.node, X.shape(), dY.shape());
  const int64_t parts = (g.n + kSamplesPerPartial - 1) / kSamplesPerPartial, size = g.m * g.rows();
  // Group q's samples accumulate into acc(q): dW itself when there is one group.
  std::vector<float> partial(static_cast<size_t>(parts > 1 ? parts * size : 0), 0.f);
  dW.Zero();
  auto acc = [&](int64_t q) { return parts > 1 ? partial.data() + q * size : dW.data<float>(); };
  ParallelFor(parts, kSamplesPerPartial * g.m * g.rows() * g.cols(), [&](int64_t begin, int64_t end) {
    std::vector<float> col(static_cast<size_t>(g.rows() * g.cols()));
    for (int64_t q = begin; q < end; ++q)
      for (int64_t s = q * kSamplesPerPartial; s < std::min(g.n, (q + 1) * kSamplesPerPartial); ++s)
        for (int64_t gr = 0; gr < g.group; ++gr) {
          Im2Col(g, X.data<float>() + (s * g.c + gr * g.cg()) * g.h * g.w, col.data());
          // dW_g [M/g, rows] += dY_g [M/g, cols] x col^T [cols, rows]
          Sgemm(false, true, g.mg(), g.rows(), g.cols(), dY.data<float>() + (s * g.m + gr * g.mg()) * g.cols(), g.cols(),
                col.data(), g.cols(), 1.f, acc(q) + gr * g.mg() * g.rows(), g.rows());
        }
  });
  if (parts > 1) {
    float* w = dW.data<float>();
    for (int64_t q = 0; q < parts; ++q)
      for (int64_t i = 0; i < size; ++i) w[i] += partial[static_cast<size_t>(q * size + i)];
  }
  return Status::Ok();
}

namespace {

// Calls f(plane, oy, ox, y0, x0) per output element, with its window's top-left input position.
template <typename F>
void ForEachWindow(const Geometry& g, F f) {
  for (int64_t p = 0; p < g.n * g.c; ++p)
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox) f(p, oy, ox, oy * g.sh - g.pt, ox * g.sw - g.pl);
}

// The input index of each output's maximum, as PyTorch picks it: the first in scan order, or the
// last NaN; -1 for a window entirely in the padding.
std::vector<int64_t> ArgMax(const Geometry& g, const float* x) {
  std::vector<int64_t> at(static_cast<size_t>(g.n * g.c * g.oh * g.ow), -1);
  size_t o = 0;
  ForEachWindow(g, [&](int64_t p, int64_t, int64_t, int64_t y0, int64_t x0) {
    float best = -std::numeric_limits<float>::infinity();
    int64_t arg = -1;
    for (int64_t i = 0; i < g.kh; ++i) {
      const int64_t iy = y0 + i * g.dh;
      if (iy < 0 || iy >= g.h) continue;
      for (int64_t j = 0; j < g.kw; ++j) {
        const int64_t ix = x0 + j * g.dw;
        if (ix < 0 || ix >= g.w) continue;
        const int64_t idx = (p * g.h + iy) * g.w + ix;
        if (arg < 0) arg = idx;  // a window of -inf keeps its first element
        if (x[idx] > best || std::isnan(x[idx])) {
          best = x[idx];
          arg = idx;
        }
      }
    }
    at[o++] = arg;
  });
  return at;
}

}  // namespace

Status MaxPool(const KernelCtx& c) {
  const Geometry g = GeometryOf(c.node, c.in[0].shape(), c.out[0].shape());
  const float* x = c.in[0].data<float>();
  float* y = c.out[0].data<float>();
  const std::vector<int64_t> at = ArgMax(g, x);
  for (size_t o = 0; o < at.size(); ++o) y[o] = at[o] >= 0 ? x[at[o]] : -std::numeric_limits<float>::infinity();
  return Status::Ok();
}

Status MaxPoolGrad(const KernelCtx& c) {
  const Geometry g = GeometryOf(c.node, c.in[1].shape(), c.in[0].shape());
  const float* dy = c.in[0].data<float>();
  float* dx = c.out[0].data<float>();
  c.out[0].Zero();
  const std::vector<int64_t> at = ArgMax(g, c.in[1].data<float>());
  for (size_t o = 0; o < at.size(); ++o)
    if (at[o] >= 0) dx[at[o]] += dy[o];
  return Status::Ok();
}

namespace {

// How many elements window (y0, x0) averages over: its whole size with count_include_pad (the
// part inside the padded input), else only the part inside the input.
int64_t Divisor(const Geometry& g, int64_t y0, int64_t x0, bool include_pad) {
  auto span = [](int64_t start, int64_t k, int64_t lo, int64_t hi) {
    return std::max<int64_t>(0, std::min(start + k, hi) - std::max(start, lo));
  };
  if (include_pad) return span(y0, g.kh, -g.pt, g.h + g.pb) * span(x0, g.kw, -g.pl, g.w + g.pr);
  return span(y0, g.kh, 0, g.h) * span(x0, g.kw, 0, g.w);
}

}  // namespace

Status AveragePool(const KernelCtx& c) {
  const Geometry g = GeometryOf(c.node, c.in[0].shape(), c.out[0].shape());
  const bool include_pad = c.node.attrs.Int("count_include_pad") != 0;
  const float* x = c.in[0].data<float>();
  float* y = c.out[0].data<float>();
  size_t o = 0;
  ForEachWindow(g, [&](int64_t p, int64_t, int64_t, int64_t y0, int64_t x0) {
    float sum = 0.f;
    for (int64_t iy = std::max<int64_t>(y0, 0); iy < std::min(y0 + g.kh, g.h); ++iy)
      for (int64_t ix = std::max<int64_t>(x0, 0); ix < std::min(x0 + g.kw, g.w); ++ix) sum += x[(p * g.h + iy) * g.w + ix];
    y[o++] = sum / static_cast<float>(std::max<int64_t>(1, Divisor(g, y0, x0, include_pad)));
  });
  return Status::Ok();
}

Status AveragePoolGrad(const KernelCtx& c) {
  const Geometry g = GeometryOf(c.node, c.out[0].shape(), c.in[0].shape());
  const bool include_pad = c.node.attrs.Int("count_include_pad") != 0;
  const float* dy = c.in[0].data<float>();
  float* dx = c.out[0].data<float>();
  c.out[0].Zero();
  size_t o = 0;
  ForEachWindow(g, [&](int64_t p, int64_t, int64_t, int64_t y0, int64_t x0) {
    const float share = dy[o++] / static_cast<float>(std::max<int64_t>(1, Divisor(g, y0, x0, include_pad)));
    for (int64_t iy = std::max<int64_t>(y0, 0); iy < std::min(y0 + g.kh, g.h); ++iy)
      for (int64_t ix = std::max<int64_t>(x0, 0); ix < std::min(x0 + g.kw, g.w); ++ix) dx[(p * g.h + iy) * g.w + ix] += share;
  });
  return Status::Ok();
}

}  // namespace fr::cpu
