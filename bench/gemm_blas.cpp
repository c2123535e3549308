// GEMM peers: single-precision GEMM throughput of OpenBLAS and oneDNN on this machine, for the
// choice of CPU BLAS (README, "Dependencies"). Built and run by bench/gemm.sh; not part of flowrun.
#include <cblas.h>
#include <dnnl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

template <typename F>
double Gflops(int m, int n, int k, F f) {
  f();
  int reps = 0;
  auto t0 = std::chrono::steady_clock::now();
  double s = 0;
  do {
    f();
    ++reps;
    s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (s < 0.5);
  return 2.0 * m * n * k * reps / s / 1e9;
}

int main() {
  const int sizes[][3] = {{32, 128, 64}, {64, 128, 128}, {256, 256, 256}, {512, 512, 512}, {1024, 1024, 1024}};
  std::printf("{\"results\": [\n");
  bool first = true;
  for (auto& s : sizes) {
    int m = s[0], n = s[1], k = s[2];
    std::vector<float> a(static_cast<size_t>(m) * k, 0.5f), b(static_cast<size_t>(k) * n, 0.25f), c(static_cast<size_t>(m) * n);
    double ob = Gflops(m, n, k, [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.f, a.data(), k, b.data(), k, 0.f, c.data(), n);
    });
    double dn = Gflops(m, n, k, [&] {
      dnnl_sgemm('N', 'T', m, n, k, 1.f, a.data(), k, b.data(), k, 0.f, c.data(), n);
    });
    std::printf("%s  {\"m\": %d, \"n\": %d, \"k\": %d, \"openblas_gflops\": %.2f, \"onednn_gflops\": %.2f}", first ? "" : ",\n", m, n, k, ob, dn);
    first = false;
  }
  std::printf("\n]}\n");
  return 0;
}
