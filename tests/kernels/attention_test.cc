#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernels/quant.h"
#include "tests/kernels/kernel_fixture.h"

using namespace tessera;
using tessera::kernel_testing::OpFixture;

namespace {

struct AttentionShape {
  Shape lead;  // leading dims
  int64_t t = 0, s = 0, hq = 0, hkv = 0, d = 0, dv = 0;
  AttentionParams params;
};

AttentionShape random_shape(std::mt19937_64& rng) {
  AttentionShape a;
  if (rng() % 4 == 0) a.lead.push_back(static_cast<int64_t>(rng() % 2) + 1);
  a.hkv = static_cast<int64_t>(rng() % 3) + 1;
  a.hq = a.hkv * (static_cast<int64_t>(rng() % 3) + 1);
  const int64_t dims[] = {1, 5, 8, 13, 16, 64, 72};
  a.d = dims[rng() % 7];
  a.dv = rng() % 3 == 0 ? dims[rng() % 7] : a.d;
  a.params.causal = rng() % 4 != 0;
  a.t = static_cast<int64_t>(rng() % 40) + 1;
  a.s = a.params.causal ? a.t : static_cast<int64_t>(rng() % 40) + 1;
  if (a.params.causal && rng() % 3 == 0) a.params.window = static_cast<int64_t>(rng() % 12) + 1;
  if (rng() % 3 == 0) a.params.softcap = 2.0 + static_cast<double>(rng() % 30);
  a.params.scale = 1.0 / std::sqrt(static_cast<double>(a.d));
  return a;
}

// [lead..., rows, heads, cols]
Shape shape_of(const AttentionShape& a, int64_t rows, int64_t heads, int64_t cols) {
  Shape s = a.lead;
  s.push_back(rows);
  s.push_back(heads);
  s.push_back(cols);
  return s;
}

// kv: the K/V dtype (q is f32).
void build(OpFixture& f, const AttentionShape& a, std::mt19937_64& rng, DType kv = DType::F32) {
  auto shape = [&](int64_t rows, int64_t heads, int64_t cols) { return shape_of(a, rows, heads, cols); };
  Tensor q = f.graph.input("q", shape(a.t, a.hq, a.d), DType::F32);
  Tensor k = f.graph.input("k", shape(a.s, a.hkv, a.d), kv);
  Tensor v = f.graph.input("v", shape(a.s, a.hkv, a.dv), kv);
  f.out = attention(q, k, v, a.params);
  // q, k in [-2, 2]: scaled scores up to 4 sqrt(D), enough for peaked softmaxes.
  f.prepare(rng, {{-2.0, 2.0}, {-2.0, 2.0}, {-1.0, 1.0}});
}

// Sets cpu::wide_vectors() for a scope (the AVX-512 attention kernels read it when chosen),
// restoring the CPU's choice after.
struct ScopedWideVectors {
  bool saved = cpu::wide_vectors();
  explicit ScopedWideVectors(bool wide) { cpu::set_wide_vectors(wide); }
  ~ScopedWideVectors() { cpu::set_wide_vectors(saved); }
};

std::string label(const AttentionShape& a) {
  return shape_string(a.lead) + " T=" + std::to_string(a.t) + " S=" + std::to_string(a.s) +
         " Hq=" + std::to_string(a.hq) + " Hkv=" + std::to_string(a.hkv) +
         " D=" + std::to_string(a.d) + " Dv=" + std::to_string(a.dv) +
         " causal=" + std::to_string(a.params.causal) +
         " window=" + std::to_string(a.params.window) +
         " softcap=" + std::to_string(a.params.softcap);
}

}  // namespace

TEST_CASE("kernels: attention is optimised for f32 queries with f32, f16 or bf16 keys and values") {
  Graph g;
  AttentionParams p;
  Tensor q = g.input("q", {4, 2, 8}, DType::F32);
  for (DType kv : {DType::F32, DType::F16, DType::BF16}) {
    Tensor a = attention(q, g.input(std::string("k") + dtype_name(kv), {4, 1, 8}, kv),
                         g.input(std::string("v") + dtype_name(kv), {4, 1, 8}, kv), p);
    CHECK(a.dtype() == DType::F32);
    CHECK(static_cast<bool>(cpu::optimised_kernel(g, a.node())));
  }
  Tensor b = attention(g.input("qh", {4, 2, 8}, DType::F16), g.input("kh", {4, 1, 8}, DType::F16),
                       g.input("vh", {4, 1, 8}, DType::F16), p);
  CHECK_FALSE(static_cast<bool>(cpu::optimised_kernel(g, b.node())));
  // Half K/V only under an f32 q, and k and v of one dtype.
  CHECK_THROWS_AS(attention(b, g.input("k2", {4, 1, 8}, DType::BF16), g.input("v2", {4, 1, 8}, DType::BF16), p),
                  Error);
  CHECK_THROWS_AS(attention(q, g.input("k3", {4, 1, 8}, DType::F16), g.input("v3", {4, 1, 8}, DType::F32), p),
                  Error);
}

TEST_CASE("kernels: attention with f16 and bf16 keys and values matches the reference, sub-boxes bitwise") {
  // The reference reads the same half values (exactly), so the f32 tolerance holds.
  const uint64_t seed = 34;
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 40; ++trial) {
    const DType kv = trial % 2 == 0 ? DType::F16 : DType::BF16;
    const AttentionShape a = random_shape(rng);
    OpFixture f;
    build(f, a, rng, kv);
    CAPTURE(trial);
    CAPTURE(dtype_name(kv));
    CAPTURE(label(a));
    for (cpu::Isa isa : kernel_testing::test_isas()) {
      kernel_testing::check_close(f, isa, [](int64_t, double) { return 5e-5; });
      kernel_testing::check_sub_boxes(f, isa, rng);
    }
  }
}

TEST_CASE("kernels: attention matches the reference within tolerance") {
  // The output is a convex combination of v values in [-1, 1]. Float scores carry an error of
  // about (D / 8 + 4) * 2^-24 * scale * sum |q k| <= 1e-5 here, softmax weights a relative error
  // of twice that plus a few ulp of exp, and the weighted sum (at most 40 keys) ~40 * 2^-24:
  // 5e-5 absolute bounds all of it with margin.
  const uint64_t seed = 31;
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 60; ++trial) {
    const AttentionShape a = random_shape(rng);
    OpFixture f;
    build(f, a, rng);
    CAPTURE(seed);
    CAPTURE(trial);
    CAPTURE(label(a));
    for (cpu::Isa isa : kernel_testing::test_isas())
      kernel_testing::check_close(f, isa, [](int64_t, double) { return 5e-5; });
  }
}

TEST_CASE("kernels: attention sub-boxes are bitwise equal to the full box") {
  const uint64_t seed = 32;
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 40; ++trial) {
    const AttentionShape a = random_shape(rng);
    OpFixture f;
    build(f, a, rng);
    CAPTURE(seed);
    CAPTURE(trial);
    CAPTURE(label(a));
    for (cpu::Isa isa : kernel_testing::test_isas()) kernel_testing::check_sub_boxes(f, isa, rng);
  }
}

TEST_CASE("kernels: attention decode row equals the same row of a long prefill") {
  // SmolLM2- and Gemma-like heads, and more heads than one batch of rows holds (20 query heads
  // over 4 K/V heads), at a context longer than a key block, with and without a window.
  struct Case {
    int64_t d, hq, hkv, window;
    DType kv = DType::F32;
  };
  std::mt19937_64 rng(33);
  for (const Case& c : {Case{64, 4, 1, 0}, Case{256, 4, 1, 0}, Case{64, 9, 3, 0}, Case{16, 20, 4, 0},
                        Case{64, 9, 3, 100}, Case{64, 9, 3, 0, DType::F16}, Case{256, 4, 1, 0, DType::F16},
                        Case{20, 6, 2, 30, DType::F16}}) {
    CAPTURE(dtype_name(c.kv));
    CAPTURE(c.d);
    CAPTURE(c.hq);
    CAPTURE(c.window);
    AttentionShape a;
    a.t = a.s = 300;
    a.hq = c.hq;
    a.hkv = c.hkv;
    a.d = a.dv = c.d;
    a.params.scale = 0.125;
    a.params.window = c.window;
    OpFixture f;
    build(f, a, rng, c.kv);
    for (cpu::Isa isa : kernel_testing::test_isas()) {
      // Up to 300 keys, in several key blocks: the bound of the random shapes' test scaled.
      kernel_testing::check_close(f, isa, [](int64_t, double) { return 2e-4; });
      const KernelFn fast = f.optimised(isa);
      const std::vector<float> full = f.run(fast, Box::full(f.node().shape));
      const int64_t row = c.hq * c.d;
      for (int64_t t : {0, 7, 8, 47, 48, 150, 299}) {
        const std::vector<float> one = f.run(fast, Box{{t, t + 1}, {0, c.hq}, {0, c.d}});
        CHECK(std::memcmp(one.data(), full.data() + t * row, one.size() * sizeof(float)) == 0);
        // Some of the heads and some of the columns.
        const Box part{{t, t + 1}, {1, c.hq}, {c.d / 4, c.d}};
        const std::vector<float> some = f.run(fast, part);
        for (int64_t h = 1; h < c.hq; ++h)
          CHECK(std::memcmp(some.data() + (h - 1) * (c.d - c.d / 4), full.data() + t * row + h * c.d + c.d / 4,
                            static_cast<size_t>(c.d - c.d / 4) * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("kernels: attention's AVX-512 path gives the AVX2 path's bits, in both vector widths") {
  // The AVX-512 path reduces eight (or four) keys' scores together; in its 512-bit form
  // (cpu::wide_vectors()) it runs two keys' score chains per 512-bit vector (D a multiple of 8),
  // sums 64 or 128 value columns per sweep of 512-bit vectors (48 or 64 of 256-bit ones after
  // them) and runs its softmax's exps 16 lanes wide (with and without a softcap); in its
  // 256-bit form, 64 or 48 columns a sweep of 256-bit vectors. Each in the same order per
  // element as the AVX2 path: its output must be bitwise equal, for every group size (1 to 4
  // query heads per K/V head), head dims with and without a tail of 8, columns beyond a whole
  // chunk, keys beyond a block and not a multiple of 8 or 16, and both K/V dtypes read in place.
  if (!cpu::isa_supported(cpu::Isa::Avx512)) {
    MESSAGE("skipped: this CPU has no AVX-512");
    return;
  }
  struct Case {
    int64_t d, dv, hq, hkv, t, s, window;
    bool causal;
  };
  std::mt19937_64 rng(35);
  for (DType kv : {DType::F32, DType::F16})
    for (const Case& c : {Case{64, 64, 9, 3, 1, 130, 0, false}, Case{64, 64, 9, 3, 70, 70, 0, true},
                          Case{256, 256, 4, 1, 3, 101, 0, false}, Case{72, 120, 2, 1, 60, 60, 20, true},
                          Case{13, 50, 8, 2, 57, 57, 0, true}, Case{5, 200, 3, 3, 2, 97, 0, false},
                          Case{64, 48, 12, 3, 9, 250, 0, false}, Case{32, 136, 4, 4, 5, 77, 0, false},
                          Case{128, 64, 2, 2, 40, 40, 0, true}}) {
      CAPTURE(dtype_name(kv));
      CAPTURE(c.d);
      CAPTURE(c.dv);
      CAPTURE(c.hq);
      CAPTURE(c.hkv);
      AttentionShape a;
      a.t = c.t;
      a.s = c.s;
      a.hq = c.hq;
      a.hkv = c.hkv;
      a.d = c.d;
      a.dv = c.dv;
      a.params.causal = c.causal;
      a.params.window = c.window;
      a.params.scale = 1.0 / std::sqrt(static_cast<double>(c.d));
      a.params.softcap = c.s > 100 ? 5.0 : 0.0;  // softcapped scores take the scalar scaling
      OpFixture f;
      build(f, a, rng, kv);
      const Box full = Box::full(f.node().shape);
      const std::vector<float> avx2 = f.run(f.optimised(cpu::Isa::Avx2), full);
      for (bool wide : {false, true}) {
        CAPTURE(wide);
        const ScopedWideVectors width(wide);
        const KernelFn fast = f.optimised(cpu::Isa::Avx512);
        REQUIRE(bool(fast != f.optimised(cpu::Isa::Avx2)));
        const std::vector<float> out = f.run(fast, full);
        CHECK(std::memcmp(out.data(), avx2.data(), out.size() * sizeof(float)) == 0);
      }
    }
}

TEST_CASE("kernels: the AVX-512 attention's vector width follows cpu::wide_vectors") {
  // Two kernels for each K/V dtype it reads in place, one per width, each with its phases.
  if (!cpu::isa_supported(cpu::Isa::Avx512)) {
    MESSAGE("skipped: this CPU has no AVX-512");
    return;
  }
  std::mt19937_64 rng(38);
  for (DType kv : {DType::F32, DType::F16}) {
    AttentionShape a;
    a.t = a.s = 20;
    a.hq = 4;
    a.hkv = 2;
    a.d = a.dv = 16;
    a.params.causal = true;
    OpFixture f;
    build(f, a, rng, kv);
    KernelFn kernels[2];
    for (bool wide : {false, true}) {
      const ScopedWideVectors width(wide);
      CHECK(cpu::wide_vectors() == wide);
      kernels[wide] = f.optimised(cpu::Isa::Avx512);
      CHECK(static_cast<bool>(cpu::attention_phases(f.graph, f.node(), kernels[wide])));
    }
    CHECK(bool(kernels[0] != kernels[1]));
  }
}

namespace {

// A decode attention for the phase tests: head dim d, hq query and hkv K/V heads, the query
// position t of s keys.
struct PhaseCase {
  int64_t d, hq, hkv, t, s, window;
  bool causal;
  double softcap;
  AttentionParams params() const {
    AttentionParams p;
    p.causal = causal;
    p.window = window;
    p.softcap = softcap;
    p.scale = 1.0 / std::sqrt(static_cast<double>(d));
    return p;
  }
};

// One query position t of f's attention (hq heads of d columns) through `phases`: the scores
// cut into 1, 2, 3 and 5 tiles of keys, then the values of the whole position, some heads and
// some columns from them, each bitwise equal to the fused kernel `fast` on the position; more
// than one position refused.
void check_phases(OpFixture& f, KernelFn fast, const AttentionPhases& phases, int64_t t, int64_t hq, int64_t d) {
  const Box position{{t, t + 1}, {0, hq}, {0, d}};
  const std::vector<float> fused = f.run(fast, position);
  for (int tiles : {1, 2, 3, 5}) {
    CAPTURE(tiles);
    std::vector<float> shared(static_cast<size_t>(phases.shared_bytes / 4 + 16), std::nanf(""));
    float* aligned = shared.data() + (64 - reinterpret_cast<uintptr_t>(shared.data()) % 64) % 64 / 4;
    std::vector<float> unused(static_cast<size_t>(position.volume()));
    const TensorView unused_view = dense_view(unused.data(), DType::F32, position);
    for (int tile = tiles; tile-- > 0;)
      REQUIRE(phases.scores(KernelCall{f.graph, f.node(), f.views, unused_view, position}, tile, tiles, aligned).ok());
    // The whole position, some heads, some columns.
    for (const Box& part : {position, Box{{t, t + 1}, {1, hq}, {0, d}},
                            Box{{t, t + 1}, {0, hq}, {d / 2, d}}, Box{{t, t + 1}, {2, 3}, {3, d - 1}}}) {
      CAPTURE(part.to_string());
      std::vector<float> out(static_cast<size_t>(part.volume()));
      const TensorView view = dense_view(out.data(), DType::F32, part);
      REQUIRE(phases.values(KernelCall{f.graph, f.node(), f.views, view, part}, aligned).ok());
      for (int64_t h = part.begin(1); h < part.end(1); ++h)
        CHECK(std::memcmp(out.data() + (h - part.begin(1)) * part.extent(2), fused.data() + h * d + part.begin(2),
                          static_cast<size_t>(part.extent(2)) * sizeof(float)) == 0);
    }
  }
  // More than one position is refused.
  const Box two{{t - 1, t + 1}, {0, hq}, {0, d}};
  std::vector<float> out(static_cast<size_t>(two.volume()));
  const TensorView view = dense_view(out.data(), DType::F32, two);
  if (t > 0) CHECK(phases.values(KernelCall{f.graph, f.node(), f.views, view, two}, out.data()).code() ==
                     absl::StatusCode::kInvalidArgument);
}

}  // namespace

TEST_CASE("kernels: attention's two phases give the fused kernel's bits, however they are cut") {
  // AttentionPhases (a team's decode attention): the scores of every query head, cut into tiles
  // of keys, then the values of any part of the position's box (heads or columns) from them,
  // must equal the fused kernel's output bit for bit: for each K/V dtype read in place, head
  // dims with and without a tail of 8, GQA groups of 1 to 4, windows, softcaps and no mask.
  std::mt19937_64 rng(37);
  for (cpu::Isa isa : kernel_testing::test_isas())
    for (bool wide : {false, true})
    for (DType kv : {DType::F32, DType::F16})
      for (const PhaseCase& c : {PhaseCase{64, 9, 3, 299, 300, 0, true, 0}, PhaseCase{256, 4, 1, 250, 300, 0, true, 0},
                            PhaseCase{256, 4, 1, 299, 300, 100, true, 0}, PhaseCase{20, 8, 2, 140, 141, 0, true, 30},
                            PhaseCase{64, 4, 4, 0, 77, 0, false, 0}, PhaseCase{16, 12, 3, 63, 64, 40, true, 5}}) {
        if (wide && isa < cpu::Isa::Avx512) continue;  // one width below AVX-512
        CAPTURE(cpu::isa_name(isa));
        CAPTURE(wide);
        CAPTURE(dtype_name(kv));
        CAPTURE(c.d);
        CAPTURE(c.hq);
        CAPTURE(c.window);
        const ScopedWideVectors width(wide);
        AttentionShape a;
        a.t = c.causal ? c.s : 1;
        a.s = c.s;
        a.hq = c.hq;
        a.hkv = c.hkv;
        a.d = a.dv = c.d;
        a.params = c.params();
        OpFixture f;
        build(f, a, rng, kv);
        const KernelFn fast = f.optimised(isa);
        const AttentionPhases phases = cpu::attention_phases(f.graph, f.node(), fast);
        if (isa == cpu::Isa::Portable) {
          CHECK_FALSE(phases);  // the portable path has none: a team cuts its heads
          continue;
        }
        REQUIRE(phases);
        check_phases(f, fast, phases, c.t, c.hq, c.d);
      }
}

namespace {

// Q8_0 blocks of random values in [-range, range] for a tensor of `shape` (last axis whole blocks).
std::vector<std::byte> q8_0_values(const Shape& shape, float range, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-range, range);
  const int64_t n = shape_volume(shape);
  std::vector<std::byte> bytes(static_cast<size_t>(dtype_bytes(DType::Q8_0, n)));
  float block[32];
  for (int64_t b = 0; b < n / 32; ++b) {
    for (float& x : block) x = u(rng);
    quant::quantize_q8_0(block, reinterpret_cast<uint8_t*>(bytes.data()) + 34 * b);
  }
  return bytes;
}

}  // namespace

TEST_CASE("kernels: attention over q8_0 keys and values matches the reference, sub-boxes bitwise") {
  // Every ISA's kernel against the reference and on sub-boxes; the AVX2 kernel serves the AVX2
  // and AVX-512 caps with the same bits; the portable and AVX-512 VNNI kernels have their own.
  std::vector<cpu::Isa> isas = kernel_testing::test_isas();
  if (cpu::isa_supported(cpu::Isa::Avx512Vnni)) isas.push_back(cpu::Isa::Avx512Vnni);
  const uint64_t seed = 35;
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 30; ++trial) {
    AttentionShape a = random_shape(rng);
    a.d = 32 * (static_cast<int64_t>(rng() % 3) + 1);
    a.dv = rng() % 3 == 0 ? 32 * (static_cast<int64_t>(rng() % 3) + 1) : a.d;
    a.params.scale = 1.0 / std::sqrt(static_cast<double>(a.d));
    OpFixture f;
    auto shape = [&](int64_t rows, int64_t heads, int64_t cols) { return shape_of(a, rows, heads, cols); };
    Tensor q = f.graph.input("q", shape(a.t, a.hq, a.d), DType::F32);
    const Shape ks = shape(a.s, a.hkv, a.d), vs = shape(a.s, a.hkv, a.dv);
    Tensor k = f.graph.constant(ks, DType::Q8_0, q8_0_values(ks, 2.0f, rng));
    Tensor v = f.graph.constant(vs, DType::Q8_0, q8_0_values(vs, 1.0f, rng));
    f.out = attention(q, k, v, a.params);
    f.prepare(rng, {{-2.0, 2.0}});
    CAPTURE(trial);
    CAPTURE(label(a));
    const Box full = Box::full(f.node().shape);
    for (cpu::Isa isa : isas) {
      kernel_testing::check_close(f, isa, [](int64_t, double) { return 5e-5; });
      kernel_testing::check_sub_boxes(f, isa, rng);
    }
    if (cpu::isa_supported(cpu::Isa::Avx512)) {
      const std::vector<float> wide = f.run(f.optimised(cpu::Isa::Avx512), full);
      const std::vector<float> narrow = f.run(f.optimised(cpu::Isa::Avx2), full);
      CHECK(std::memcmp(wide.data(), narrow.data(), wide.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("kernels: the q8_0 attention's phases give the fused kernel's bits, however they are cut") {
  // The AVX-512 VNNI kernel over q8_0 K/V has phases (a team's decode attention), each element
  // bitwise equal to the fused call; the plain kernel of the other paths has none.
  std::mt19937_64 rng(41);
  for (const PhaseCase& c : {PhaseCase{64, 9, 3, 299, 300, 0, true, 0}, PhaseCase{256, 4, 1, 250, 300, 0, true, 0},
                        PhaseCase{256, 4, 1, 299, 300, 100, true, 0}, PhaseCase{32, 8, 2, 140, 141, 0, true, 30},
                        PhaseCase{64, 4, 4, 0, 77, 0, false, 0}, PhaseCase{96, 12, 3, 63, 64, 40, true, 5}}) {
    CAPTURE(c.d);
    CAPTURE(c.hq);
    CAPTURE(c.window);
    OpFixture f;
    const Shape qs{c.causal ? c.s : 1, c.hq, c.d}, ks{c.s, c.hkv, c.d};
    Tensor q = f.graph.input("q", qs, DType::F32);
    Tensor k = f.graph.constant(ks, DType::Q8_0, q8_0_values(ks, 2.0f, rng));
    Tensor v = f.graph.constant(ks, DType::Q8_0, q8_0_values(ks, 1.0f, rng));
    f.out = attention(q, k, v, c.params());
    f.prepare(rng, {{-2.0, 2.0}});
    for (cpu::Isa isa : kernel_testing::test_isas()) CHECK_FALSE(cpu::attention_phases(f.graph, f.node(), f.optimised(isa)));
    if (!cpu::isa_supported(cpu::Isa::Avx512Vnni)) {
      MESSAGE("no AVX-512 VNNI on this CPU: the q8_0 phases are not tested");
      continue;
    }
    const KernelFn fast = f.optimised(cpu::Isa::Avx512Vnni);
    const AttentionPhases phases = cpu::attention_phases(f.graph, f.node(), fast);
    REQUIRE(phases);
    check_phases(f, fast, phases, c.t, c.hq, c.d);
  }
}
