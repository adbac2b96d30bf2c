// The integer linear path (kernels/cpu/linear_q8.h): int8 activations, and 24-bit activations as
// three int8 digits (LinearPath::Int24), against every weight dtype it covers, on every
// instruction set this CPU has, including AVX-512 VNNI.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/linear_q8.h"
#include "kernels/quant.h"
#include "tests/kernels/kernel_fixture.h"
#include "tests/support/scoped_env.h"
#include "tests/support/quant_blocks.h"

using namespace tessera;
using tessera::kernel_testing::OpFixture;

namespace {

constexpr DType kCovered[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                              DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K};

std::vector<cpu::Isa> all_isas() {
  std::vector<cpu::Isa> isas;
  for (cpu::Isa isa : {cpu::Isa::Portable, cpu::Isa::Avx2, cpu::Isa::Avx512, cpu::Isa::Avx512Vnni, cpu::Isa::Amx})
    if (cpu::isa_supported(isa)) isas.push_back(isa);
  return isas;
}

struct Case {
  OpFixture f;
  std::vector<uint8_t> weights;
  Shape x_shape;
  int64_t n = 0, k = 0;
  DType dtype = DType::Q8_0;
  cpu::LinearPath path = cpu::LinearPath::Int8;

  int64_t rows() const { return shape_volume(x_shape) / k; }
  const float* x() const { return reinterpret_cast<const float*>(f.buffers[0].data()); }
  KernelFn kernel(cpu::Isa isa) const { return cpu::linear_kernel_with(f.graph, f.node(), isa, path); }
};

constexpr cpu::LinearPath kPaths[] = {cpu::LinearPath::Int8, cpu::LinearPath::Int24};
const char* path_name(cpu::LinearPath path) { return path == cpu::LinearPath::Int8 ? "int8" : "int24"; }

void build(Case& c, DType dtype, const Shape& x_shape, int64_t n, std::mt19937_64& rng,
           cpu::LinearPath path = cpu::LinearPath::Int8) {
  c.path = path;
  c.dtype = dtype;
  c.x_shape = x_shape;
  c.k = x_shape.back();
  c.n = n;
  c.weights = testing::random_quantized(dtype, n, c.k, rng);
  Tensor x = c.f.graph.input("x", x_shape, DType::F32);
  Tensor w = c.f.graph.constant({n, c.k}, dtype, std::as_bytes(std::span<const uint8_t>(c.weights)));
  c.f.out = linear(x, w);
  c.f.prepare(rng, {testing::ValueRange{-1.0, 1.0}});
}

// Bound on |int8 path - reference| per output element (int24: d_x = amax / kDigitRange, and a
// rounding term of its own, below). Quantising x block by block moves each
// x_k by at most half a step d_x = amax / 127 (plus a rounding of x * (127 / amax)), so the dot
// product moves by at most sum_k |w_k| (d_x / 2 (1 + 2^-20) + 2^-22 |x_k|). On top come float
// roundings of both computations (the scales' products, the lanes' sums, the reference's own
// dequantisation and sum): (K / 8 + 16) 2^-22 sum_k (|w_k| + m_k) (|x_k| + d_x), with m_k the
// largest |w| of k's weight block (a dequantised K-quant value is a difference of two terms of
// at most that size).
std::vector<double> tolerances(const Case& c) {
  std::vector<float> w(static_cast<size_t>(c.n * c.k));
  quant::dequantize_row(c.dtype, c.weights.data(), w.data(), c.n * c.k);
  const int64_t a = cpu::q8::activation_block(c.dtype), wb = dtype_block_size(c.dtype);
  std::vector<double> tol(static_cast<size_t>(c.rows() * c.n));
  std::vector<double> step(static_cast<size_t>(c.k));
  // Int24 combines a block's three digit sums in float (two roundings) and adds one term per
  // block: its roundings grow with the blocks, not with K (tight enough that a wrong digit
  // weight, 65024 for 65025, fails).
  const double rounding_factor = c.path == cpu::LinearPath::Int8
                                     ? (static_cast<double>(c.k) / 8 + 16) * 0x1p-22
                                     : (static_cast<double>(c.k / a) + 8) * 0x1p-23;
  for (int64_t r = 0; r < c.rows(); ++r) {
    const float* x = c.x() + r * c.k;
    for (int64_t k0 = 0; k0 < c.k; k0 += a) {
      double amax = 0;
      for (int64_t k = k0; k < k0 + a; ++k) amax = std::max(amax, std::fabs(double{x[k]}));
      const double levels = c.path == cpu::LinearPath::Int8 ? 127 : static_cast<double>(cpu::q8::kDigitRange);
      for (int64_t k = k0; k < k0 + a; ++k) step[static_cast<size_t>(k)] = amax / levels;
    }
    for (int64_t j = 0; j < c.n; ++j) {
      const float* wj = w.data() + j * c.k;
      double quantisation = 0, rounding = 0;
      for (int64_t k0 = 0; k0 < c.k; k0 += wb) {
        double block_max = 0;
        for (int64_t k = k0; k < k0 + wb; ++k) block_max = std::max(block_max, std::fabs(double{wj[k]}));
        for (int64_t k = k0; k < k0 + wb; ++k) {
          const double wk = std::fabs(double{wj[k]}), xk = std::fabs(double{x[k]}), dk = step[static_cast<size_t>(k)];
          quantisation += wk * (dk / 2 * (1 + 0x1p-20) + 0x1p-22 * xk);
          rounding += (wk + block_max) * (xk + dk);
        }
      }
      tol[static_cast<size_t>(r * c.n + j)] = quantisation + rounding_factor * rounding + 1e-30;
    }
  }
  return tol;
}

Shape random_x_shape(std::mt19937_64& rng, int64_t k) {
  Shape s;
  if (rng() % 3 == 0) s.push_back(static_cast<int64_t>(rng() % 3) + 1);  // a batch dim
  s.push_back(static_cast<int64_t>(rng() % 9) + 1);
  s.push_back(k);
  return s;
}

int64_t random_k(std::mt19937_64& rng, DType dtype) {
  const int64_t block = cpu::q8::activation_block(dtype);
  return block * (static_cast<int64_t>(rng() % (block == 32 ? 12 : 4)) + 1);
}

void check_equal(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) FAIL(what, ": element ", i, ": ", a[i], " vs ", b[i]);
}

}  // namespace

TEST_CASE("kernels: linear_q8 is chosen for the covered dtypes when TESSERA_LINEAR=int8") {
  const testing::ScopedEnv int8("TESSERA_LINEAR", "int8");
  std::mt19937_64 rng(30);
  for (DType dtype : kCovered) {
    Case c;
    build(c, dtype, {2, 256}, 3, rng);
    for (cpu::Isa isa : all_isas()) {
      CHECK(static_cast<bool>(c.kernel(isa)));
      CHECK(bool(c.kernel(isa) == cpu::q8::kernel(dtype, isa)));
      CHECK(bool(cpu::linear_kernel_with(c.f.graph, c.f.node(), isa, cpu::LinearPath::F32) != cpu::q8::kernel(dtype, isa)));
    }
  }
  for (DType plain : {DType::F32, DType::F16, DType::BF16}) CHECK(cpu::q8::activation_block(plain) == 0);
}

TEST_CASE("kernels: TESSERA_LINEAR picks the f32, int8 or (by default) int24 path for the covered dtypes") {
  std::mt19937_64 rng(29);
  for (DType dtype : kCovered) {
    Case c;
    build(c, dtype, {2, 256}, 3, rng);
    for (cpu::Isa isa : all_isas()) {
      const KernelFn int8 = cpu::q8::kernel(dtype, isa), int24 = cpu::q8::digits_kernel(dtype, isa);
      CHECK(bool(int8 != nullptr));
      CHECK(bool(int24 != nullptr));
      CHECK(bool(int8 != int24));
      for (const char* mode : {"f32", "int8", "int24", "", "other"}) {
        const testing::ScopedEnv env("TESSERA_LINEAR", mode);
        const KernelFn chosen = cpu::optimised_kernel_for(c.f.graph, c.f.node(), isa);
        const KernelFn want = std::string(mode) == "int8" ? int8 : std::string(mode) == "f32" ? nullptr : int24;
        if (want != nullptr) CHECK(bool(chosen == want));
        else CHECK(bool(chosen != int8 && chosen != int24 && chosen != nullptr));
      }
    }
  }
}

// The 24-bit split: X = round(x * (kDigitRange / amax)) is 65025 h + 255 m + l exactly, with
// every digit in [-127, 127], and s X is within half a step s = amax / kDigitRange of x (plus float
// rounding); the digit rows' scales and sums, and the x row's sums the kernels read.
TEST_CASE("kernels: int24 activations are three int8 digits of x to within half a step of amax / kDigitRange") {
  std::mt19937_64 rng(28);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (int64_t block : {32, 256}) {
    const cpu::q8::RowLayout layout(1024, block);
    std::vector<float> x(1024);
    for (float& v : x) v = u(rng);
    x[5] = 0.0f;
    std::fill(x.begin() + 512, x.begin() + 512 + block, 0.0f);  // a block of zeros: scale 0
    x[700] = 4000.0f;                                           // an outlier
    std::vector<std::byte> storage(static_cast<size_t>(3 * layout.row_bytes));
    std::byte* const rows[3] = {storage.data(), storage.data() + layout.row_bytes, storage.data() + 2 * layout.row_bytes};
    cpu::q8::quantize_digits(x.data(), 1, layout, rows);
    const cpu::q8::QRow h = cpu::q8::qrow(rows[0], layout), m = cpu::q8::qrow(rows[1], layout), l = cpu::q8::qrow(rows[2], layout);
    for (int64_t i = 0; i < 1024; ++i) {
      const int64_t b = i / block;
      const double s = l.d[b];
      CHECK(h.d[b] == static_cast<float>(l.d[b] * 65025.0f));
      CHECK(m.d[b] == static_cast<float>(l.d[b] * 255.0f));
      CHECK(std::max({std::abs(int{h.q[i]}), std::abs(int{m.q[i]}), std::abs(int{l.q[i]})}) <= 127);
      const double value = 65025.0 * h.q[i] + 255.0 * m.q[i] + l.q[i];
      CHECK(std::fabs(value) <= static_cast<double>(cpu::q8::kDigitRange));
      // Half a step, plus the float roundings of x * (kDigitRange / amax) near 2^23 (the int8
      // bound's form).
      const double xi = x[static_cast<size_t>(i)];
      CHECK(std::fabs(value * s - xi) <= s / 2 * (1 + 0x1p-20) + 0x1p-22 * std::fabs(xi));
    }
    for (const cpu::q8::QRow* q : {&h, &m, &l}) {
      int32_t total = 0;
      for (int64_t i = 0; i < 32; ++i) total += q->q[i];
      CHECK(total == q->sums[0]);
    }
    // The x row's sums per 32 elements: float(sum X) in the high row, s * float(sum X) in the low.
    for (int64_t j = 0; j < 1024 / 32; ++j) {
      int64_t sum = 0;
      for (int64_t i = 32 * j; i < 32 * j + 32; ++i) sum += 65025 * h.q[i] + 255 * m.q[i] + l.q[i];
      CHECK(h.scaled_sums[j] == static_cast<float>(sum));
      CHECK(l.scaled_sums[j] == l.d[32 * j / block] * static_cast<float>(sum));
    }
  }
}

TEST_CASE("kernels: linear_q8 is within the quantisation bound and bitwise equal on every ISA") {
  const uint64_t seed = 31;
  std::mt19937_64 rng(seed);
  for (cpu::LinearPath path : kPaths)
  for (DType dtype : kCovered) {
    for (int trial = 0; trial < 5; ++trial) {
      Case c;
      const int64_t k = random_k(rng, dtype);
      build(c, dtype, random_x_shape(rng, k), static_cast<int64_t>(rng() % 40) + 1, rng, path);
      const std::string path_label = path_name(path);
      CAPTURE(path_label);
      CAPTURE(seed);
      CAPTURE(trial);
      CAPTURE(std::string(dtype_name(dtype)));
      CAPTURE(shape_string(c.x_shape));
      CAPTURE(c.n);
      const Box full = Box::full(c.f.node().shape);
      const std::vector<float> ref = c.f.run(ref::reference_kernel(OpKind::Linear), full);
      const std::vector<float> portable = c.f.run(c.kernel(cpu::Isa::Portable), full);
      const std::vector<double> tol = tolerances(c);
      for (size_t i = 0; i < ref.size(); ++i)
        if (!(std::fabs(double{portable[i]} - ref[i]) <= tol[i]))
          FAIL("element ", i, ": integer path ", portable[i], " vs reference ", ref[i], " (bound ", tol[i], ")");
      for (cpu::Isa isa : all_isas()) {
        const std::string isa_label = cpu::isa_name(isa);
        CAPTURE(isa_label);
        check_equal(c.f.run(c.kernel(isa), full), portable, "ISA vs portable");
      }
    }
  }
}

TEST_CASE("kernels: linear_q8 sub-boxes are bitwise equal to the full box") {
  const uint64_t seed = 32;
  std::mt19937_64 rng(seed);
  for (cpu::LinearPath path : kPaths)
  for (DType dtype : kCovered) {
    for (int trial = 0; trial < 3; ++trial) {
      Case c;
      // Widths up to 70 cross the 16-column items and the 4- and 2-column tiles.
      build(c, dtype, random_x_shape(rng, random_k(rng, dtype)), static_cast<int64_t>(rng() % 70) + 1, rng, path);
      const std::string path_label = path_name(path);
      CAPTURE(path_label);
      CAPTURE(seed);
      CAPTURE(trial);
      CAPTURE(std::string(dtype_name(dtype)));
      CAPTURE(shape_string(c.x_shape));
      for (cpu::Isa isa : all_isas()) kernel_testing::check_sub_boxes(c.f, isa, rng);
    }
  }
}

TEST_CASE("kernels: linear_q8 gives the same bits for one row and for chunks of many rows") {
  // 150 rows cross the quantisation chunks (64 rows, 21 for int24) and the 4-row tiles.
  std::mt19937_64 rng(33);
  for (cpu::LinearPath path : kPaths)
  for (DType dtype : kCovered) {
    Case c;
    build(c, dtype, {150, 512}, 37, rng, path);
    const std::string path_label = path_name(path);
      CAPTURE(path_label);
    CAPTURE(std::string(dtype_name(dtype)));
    for (cpu::Isa isa : all_isas()) {
      const KernelFn fast = c.kernel(isa);
      const std::vector<float> full = c.f.run(fast, Box{{0, 150}, {0, 37}});
      for (int64_t row : {0, 1, 63, 64, 127, 149}) {
        const std::vector<float> one = c.f.run(fast, Box{{row, row + 1}, {0, 37}});
        CHECK(std::memcmp(one.data(), full.data() + row * 37, 37 * sizeof(float)) == 0);
      }
      const std::vector<float> middle = c.f.run(fast, Box{{61, 70}, {5, 30}});
      for (int64_t r = 0; r < 9; ++r)
        CHECK(std::memcmp(middle.data() + r * 25, full.data() + (61 + r) * 37 + 5, 25 * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("kernels: linear_q8 one-row decode equals the portable path for any block count and width") {
  // One x row takes the four-panel body (64 columns); 1 to 9 blocks and widths that are not a
  // multiple of a panel. With and without the decode's weight prefetch (stream_prefetch_distance:
  // on or off by CPU), at an odd distance too.
  std::mt19937_64 rng(36);
  const int64_t detected = cpu::stream_prefetch_distance();
  struct Restore {
    int64_t bytes;
    ~Restore() { cpu::set_stream_prefetch_distance(bytes); }
  } restore{detected};
  for (int64_t prefetch : {int64_t{0}, int64_t{6} << 10, int64_t{100}})
  for (cpu::LinearPath path : kPaths)
  for (DType dtype : kCovered) {
    const int64_t block = cpu::q8::activation_block(dtype);
    for (int64_t blocks = 1; blocks <= (block == 32 ? 9 : 3); ++blocks) {
      Case c;
      build(c, dtype, {1, blocks * block}, static_cast<int64_t>(rng() % 80) + 1, rng, path);
      const std::string path_label = path_name(path);
      CAPTURE(path_label);
      CAPTURE(std::string(dtype_name(dtype)));
      CAPTURE(blocks);
      CAPTURE(prefetch);
      cpu::set_stream_prefetch_distance(prefetch);
      REQUIRE(cpu::stream_prefetch_distance() == prefetch);
      const Box full = Box::full(c.f.node().shape);
      const std::vector<float> portable = c.f.run(c.kernel(cpu::Isa::Portable), full);
      for (cpu::Isa isa : all_isas()) {
        const std::string isa_label = cpu::isa_name(isa);
        CAPTURE(isa_label);
        check_equal(c.f.run(c.kernel(isa), full), portable, "one row vs portable");
      }
    }
  }
}

TEST_CASE("kernels: linear_q8 reads a strided x like a contiguous one, and zero rows give zeros") {
  std::mt19937_64 rng(34);
  for (cpu::LinearPath path : kPaths)
  for (DType dtype : kCovered) {
    Case c;
    const int64_t m = 5, k = 512;
    build(c, dtype, {m, k}, 9, rng, path);
    const std::string path_label = path_name(path);
      CAPTURE(path_label);
    auto* x = reinterpret_cast<float*>(c.f.buffers[0].data());
    std::fill(x + 2 * k, x + 3 * k, 0.0f);  // row 2: amax 0
    CAPTURE(std::string(dtype_name(dtype)));
    std::vector<float> transposed(static_cast<size_t>(m * k));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < k; ++j) transposed[j * m + i] = x[i * k + j];
    for (cpu::Isa isa : all_isas()) {
      const KernelFn fast = c.kernel(isa);
      const Box full = Box::full(c.f.node().shape);
      const std::vector<float> expected = c.f.run(fast, full);
      for (int64_t j = 0; j < 9; ++j) CHECK(expected[2 * 9 + j] == 0.0f);
      std::vector<TensorView> views = c.f.views;
      views[0].data = transposed.data();
      views[0].strides[0] = 1;
      views[0].strides[1] = m;
      std::vector<float> result(static_cast<size_t>(full.volume()));
      TensorView out = dense_view(result.data(), DType::F32, full);
      REQUIRE(fast(KernelCall{c.f.graph, c.f.node(), views, out, full}).ok());
      check_equal(result, expected, "strided x");
    }
  }
}

TEST_CASE("kernels: linear_q8 quantises each activation to within half a step of its block scale") {
  std::mt19937_64 rng(35);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (int64_t block : {32, 256}) {
    const cpu::q8::RowLayout layout(1024, block);
    std::vector<float> x(1024);
    for (float& v : x) v = u(rng);
    std::vector<std::byte> a(static_cast<size_t>(layout.row_bytes)), b(a.size());
    cpu::q8::quantize_row_portable(x.data(), 1, layout, a.data());
    const cpu::q8::QRow q = cpu::q8::qrow(a.data(), layout);
    for (int64_t i = 0; i < 1024; ++i) {
      const double d = q.d[i / block];
      CHECK(std::fabs(q.q[i] * d - x[static_cast<size_t>(i)]) <= d / 2 * (1 + 1e-5) + 1e-6);
    }
    int32_t total = 0;
    for (int64_t i = 0; i < 32; ++i) total += q.q[i];
    CHECK(total == q.sums[0]);
  }
}

// Real models feed the down projections "massive activations" (SmolLM2-135M: one |x| of ~5800
// among values of ~1-50 in a row of 1536), which squash the rest of their block to a few
// levels. That loss is the scheme's, not the kernel's: here every output must equal the scheme
// computed exactly in double (the same amax, d = amax / 127 and q = nearbyint(x * (127 / amax))
// in float, then sum_k w_k * d * q_k) up to float rounding only, on rows with such outliers.
TEST_CASE("kernels: linear_q8 equals the int8 scheme evaluated exactly, also with massive outliers") {
  std::mt19937_64 rng(36);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (DType dtype : kCovered) {
    Case c;
    const int64_t k = 2 * cpu::q8::activation_block(dtype) + 512, m = 6, n = 21;
    build(c, dtype, {m, k}, n, rng);
    auto* x = reinterpret_cast<float*>(c.f.buffers[0].data());
    for (int64_t r = 0; r < m; ++r) {
      const float spread = r % 2 == 0 ? 1.0f : 50.0f;
      for (int64_t i = 0; i < k; ++i) x[r * k + i] = spread * u(rng);
      for (int outlier = 0; outlier <= r % 3; ++outlier)
        x[r * k + static_cast<int64_t>(rng() % static_cast<uint64_t>(k))] = (rng() % 2 ? 5800.0f : -5800.0f) * (1 + u(rng) / 4);
    }
    std::vector<float> w(static_cast<size_t>(n * k));
    quant::dequantize_row(dtype, c.weights.data(), w.data(), n * k);
    const int64_t a = cpu::q8::activation_block(dtype), wb = dtype_block_size(dtype);
    std::vector<double> want(static_cast<size_t>(m * n)), tol(want.size()), xq(static_cast<size_t>(k));
    for (int64_t r = 0; r < m; ++r) {
      const float* xr = x + r * k;
      for (int64_t k0 = 0; k0 < k; k0 += a) {
        float amax = 0.0f;
        for (int64_t i = k0; i < k0 + a; ++i) amax = std::max(amax, std::fabs(xr[i]));
        const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        for (int64_t i = k0; i < k0 + a; ++i) xq[static_cast<size_t>(i)] = double{d} * std::nearbyint(xr[i] * id);
      }
      for (int64_t j = 0; j < n; ++j) {
        const float* wj = w.data() + j * k;
        double sum = 0, magnitude = 0;
        for (int64_t k0 = 0; k0 < k; k0 += wb) {
          double block_max = 0;
          for (int64_t i = k0; i < k0 + wb; ++i) block_max = std::max(block_max, std::fabs(double{wj[i]}));
          for (int64_t i = k0; i < k0 + wb; ++i) {
            sum += double{wj[i]} * xq[static_cast<size_t>(i)];
            magnitude += (std::fabs(double{wj[i]}) + block_max) * std::fabs(xq[static_cast<size_t>(i)]);
          }
        }
        want[static_cast<size_t>(r * n + j)] = sum;
        // Float roundings only (the scales' products, the lanes' sums, the dequantised weights).
        tol[static_cast<size_t>(r * n + j)] = (static_cast<double>(k) / 8 + 16) * 0x1p-22 * magnitude + 1e-30;
      }
    }
    CAPTURE(std::string(dtype_name(dtype)));
    for (cpu::Isa isa : all_isas()) {
      const std::string isa_label = cpu::isa_name(isa);
      CAPTURE(isa_label);
      const std::vector<float> got = c.f.run(c.kernel(isa), Box::full(c.f.node().shape));
      for (size_t i = 0; i < got.size(); ++i)
        if (!(std::fabs(double{got[i]} - want[i]) <= tol[i]))
          FAIL("element ", i, ": int8 path ", got[i], " vs the exact scheme ", want[i], " (bound ", tol[i], ")");
    }
  }
}

TEST_CASE("kernels: linear_q8 with the backend's packed weight equals panels packed in the call") {
  // The cpu backend packs a constant weight once (cpu::prepare_node_data); without it the kernel
  // packs each panel into its scratch. Both read the same panel bytes: the same bits, for any box.
  const testing::ScopedEnv int8("TESSERA_LINEAR", "int8");
  std::mt19937_64 rng(37);
  for (cpu::LinearPath path : kPaths)
  for (DType dtype : kCovered) {
    Case c;
    build(c, dtype, {5, 2 * cpu::q8::activation_block(dtype)}, 83, rng, path);  // 83: a partial last panel
    const std::string path_label = path_name(path);
      CAPTURE(path_label);
    CAPTURE(std::string(dtype_name(dtype)));
    for (cpu::Isa isa : all_isas()) {
      const KernelFn fast = c.kernel(isa);
      std::shared_ptr<const void> packed = cpu::prepare_node_data(c.f.graph, c.f.node(), fast);
      REQUIRE(packed != nullptr);
      CHECK(cpu::prepared_bytes(c.f.graph, c.f.node(), fast) ==
            cpu::q8::packed_bytes(dtype, 83, 2 * cpu::q8::activation_block(dtype)));
      for (const Box& box : {Box{{0, 5}, {0, 83}}, Box{{2, 3}, {17, 70}}, Box{{0, 5}, {64, 83}}}) {
        const std::vector<float> own = c.f.run(fast, box);
        std::vector<float> result(static_cast<size_t>(box.volume()));
        TensorView out = dense_view(result.data(), DType::F32, box);
        KernelCall call{c.f.graph, c.f.node(), c.f.views, out, box};
        REQUIRE(fast(call.with_prepared(packed.get())).ok());
        check_equal(result, own, "packed once vs packed in the call");
      }
    }
    // Only the integer paths want anything prepared.
    CHECK(cpu::prepare_node_data(c.f.graph, c.f.node(), cpu::linear_kernel_with(c.f.graph, c.f.node(), cpu::Isa::Portable, cpu::LinearPath::F32)) == nullptr);
  }
}

// AMX (Isa::Amx): int8 calls of kAmxMinRows or more x rows run their integer sums on tiles, 8 x
// rows per pass (every covered type but Q6_K, which stays on VNNI; int24 stays on VNNI); any row
// count, width, depth and box gives the bits of the VNNI path, with the backend's packed weight too.
TEST_CASE("kernels: linear_q8 on AMX tiles equals the VNNI path for any row count, width and box") {
  if (!cpu::isa_supported(cpu::Isa::Amx)) {
    MESSAGE("SKIPPED: no AMX-INT8 on this CPU (or the kernel refused the tile state): the AMX path is not run here");
    return;
  }
  std::mt19937_64 rng(38);
  for (cpu::LinearPath path : kPaths)
  for (DType dtype : kCovered) {
    for (int64_t rows : {2, 3, 7, 8, 9, 15, 16, 17, 33, 64, 65, 130}) {
      if (path == cpu::LinearPath::Int8 && rows < 7) continue;
      Case c;
      const int64_t block = cpu::q8::activation_block(dtype);
      const int64_t k = block * (static_cast<int64_t>(rng() % (block == 32 ? 9 : 3)) + 1);
      const int64_t n = static_cast<int64_t>(rng() % 90) + 1;
      build(c, dtype, {rows, k}, n, rng, path);
      const std::string path_label = path_name(path);
      CAPTURE(path_label);
      CAPTURE(std::string(dtype_name(dtype)));
      CAPTURE(rows);
      CAPTURE(k);
      CAPTURE(n);
      const KernelFn amx = c.kernel(cpu::Isa::Amx), vnni = c.kernel(cpu::Isa::Avx512Vnni);
      const Box full = Box::full(c.f.node().shape);
      const int64_t before = cpu::q8::amx_tile_calls();
      const std::vector<float> want = c.f.run(vnni, full);
      check_equal(c.f.run(amx, full), want, "AMX vs VNNI");
      // Int24 rows run the VNNI path's digit tiles there (linear_q8.h).
      CHECK((cpu::q8::amx_tile_calls() > before) ==
            (path == cpu::LinearPath::Int8 && rows >= cpu::q8::kAmxMinRows && cpu::q8::amx_tiles(dtype)));
      // The backend's packed weight, and sub-boxes.
      std::shared_ptr<const void> packed = cpu::prepare_node_data(c.f.graph, c.f.node(), amx);
      REQUIRE(packed != nullptr);
      for (int trial = 0; trial < 3; ++trial) {
        const int64_t j0 = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
        const Box box = trial == 0   ? full
                        : trial == 1 ? Box{{1, rows}, {j0, j0 + 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(n - j0))}}
                                     : testing::random_box(c.f.node().shape, rng);
        std::vector<float> result(static_cast<size_t>(box.volume()));
        TensorView out = dense_view(result.data(), DType::F32, box);
        KernelCall call{c.f.graph, c.f.node(), c.f.views, out, box};
        REQUIRE(amx(call.with_prepared(packed.get())).ok());
        std::vector<float> expected;
        for (int64_t r = box.begin(0); r < box.end(0); ++r)
          for (int64_t j = box.begin(1); j < box.end(1); ++j) expected.push_back(want[static_cast<size_t>(r * n + j)]);
        check_equal(result, expected, "AMX sub-box vs VNNI full");
      }
    }
  }
}

// A group launch (cpu::group_kernel, kernels/view.h): linears reading the same x rows run as
// one call, each x chunk quantised once, the members' panels one after the other. Each member's
// output must be bitwise its own launch's: for every covered dtype, both activation paths and
// every instruction set, with the backend's packed weights, panels packed in the call, or a mix;
// members of different widths (a partial last panel), column sub-boxes, an empty member, and x
// rows that are a sub-range. Members whose x rows differ are refused with an error.
TEST_CASE("kernels: a group of linears sharing x rows gives each member its own launch's bits") {
  std::mt19937_64 rng(41);
  for (cpu::LinearPath path : kPaths)
    for (DType dtype : kCovered) {
      const int64_t k = 2 * cpu::q8::activation_block(dtype), rows = 3;
      const int64_t widths[] = {83, 40, 16};
      Graph g;
      Tensor x = g.input("x", {rows, k}, DType::F32);
      std::vector<std::vector<uint8_t>> weights;
      std::vector<NodeId> members;
      for (int64_t n : widths) {
        weights.push_back(testing::random_quantized(dtype, n, k, rng));
        Tensor w = g.constant({n, k}, dtype, std::as_bytes(std::span<const uint8_t>(weights.back())));
        members.push_back(linear(x, w).id);
      }
      testing::Buffer xb = testing::make_buffer(g.node(x.id));
      testing::fill_box(xb, g.node(x.id), Box::full(g.node(x.id).shape), testing::ValueRange{-1.0, 1.0}, rng);
      auto views_of = [&](NodeId id) {
        const Node& w = g.node(g.node(id).inputs[1]);
        return std::vector<TensorView>{dense_view(xb.data(), DType::F32, Box{{0, rows}, {0, k}}),
                                       dense_view(const_cast<void*>(g.constant_data(w.constant).data), dtype,
                                                  Box::full(w.shape))};
      };
      const std::string path_label = path_name(path);
      CAPTURE(path_label);
      CAPTURE(std::string(dtype_name(dtype)));
      for (cpu::Isa isa : all_isas()) {
        CAPTURE(std::string(cpu::isa_name(isa)));
        const KernelFn one = cpu::linear_kernel_with(g, g.node(members[0]), isa, path);
        const GroupKernelFn group = cpu::group_kernel(one);
        REQUIRE((group != nullptr));
        CHECK((cpu::linear_kernel_with(g, g.node(members[1]), isa, path) == one));
        std::vector<std::shared_ptr<const void>> packed;
        for (NodeId id : members) packed.push_back(cpu::prepare_node_data(g, g.node(id), one));
        for (int variant = 0; variant < 4; ++variant) {
          // 0: all packed, full boxes; 1: none packed, rows [1, 3); 2: a mix, column sub-boxes;
          // 3: the second member empty.
          const Interval row_range = variant == 1 ? Interval(1, 3) : Interval(0, rows);
          std::vector<Box> boxes;
          for (size_t m = 0; m < members.size(); ++m) {
            const int64_t n = widths[m];
            Interval cols(0, n);
            if (variant == 2) cols = Interval(static_cast<int64_t>(m) * 3 + 1, n - 1);
            if (variant == 3 && m == 1) cols = Interval(5, 5);
            boxes.push_back(Box{row_range, cols});
          }
          std::vector<std::vector<float>> alone, grouped;
          std::vector<TensorView> outs;
          std::vector<std::vector<TensorView>> views;
          for (size_t m = 0; m < members.size(); ++m) {
            alone.emplace_back(static_cast<size_t>(boxes[m].volume()));
            grouped.emplace_back(static_cast<size_t>(boxes[m].volume()));
            views.push_back(views_of(members[m]));
          }
          for (size_t m = 0; m < members.size(); ++m) outs.push_back(dense_view(grouped[m].data(), DType::F32, boxes[m]));
          std::vector<std::unique_ptr<KernelCall>> calls;
          for (size_t m = 0; m < members.size(); ++m) {
            const bool with_packed = variant == 0 || (variant == 2 && m != 1) || variant == 3;
            const TensorView own_out = dense_view(alone[m].data(), DType::F32, boxes[m]);
            KernelCall call{g, g.node(members[m]), views[m], own_out, boxes[m]};
            REQUIRE(one(call.with_prepared(with_packed ? packed[m].get() : nullptr)).ok());
            calls.push_back(std::make_unique<KernelCall>(g, g.node(members[m]), views[m], outs[m], boxes[m]));
            calls.back()->with_prepared(with_packed ? packed[m].get() : nullptr);
          }
          std::vector<KernelArgs> args;
          for (const auto& call : calls) args.push_back(*call);
          REQUIRE(group(std::span<const KernelArgs>(args.data(), args.size())).ok());
          for (size_t m = 0; m < members.size(); ++m) {
            CAPTURE(variant);
            CAPTURE(m);
            check_equal(grouped[m], alone[m], "group member vs its own launch");
          }
        }
        // Different x rows: refused, nothing computed by a member that does not share them.
        std::vector<float> a(static_cast<size_t>(widths[0])), b(static_cast<size_t>(2 * widths[1]));
        const Box box_a{{0, 1}, {0, widths[0]}}, box_b{{1, 3}, {0, widths[1]}};
        const std::vector<TensorView> va = views_of(members[0]), vb = views_of(members[1]);
        KernelCall call_a{g, g.node(members[0]), va, dense_view(a.data(), DType::F32, box_a), box_a};
        KernelCall call_b{g, g.node(members[1]), vb, dense_view(b.data(), DType::F32, box_b), box_b};
        const KernelArgs mixed[] = {call_a, call_b};
        const absl::Status refused = group(std::span<const KernelArgs>(mixed, 2));
        CHECK(refused.code() == absl::StatusCode::kInvalidArgument);
      }
    }
}
