// The Vulkan backend plugin, for real on whatever Vulkan device the machine has (Mesa lavapipe
// on the CI machines): a conformance sweep of every op it generates shaders for against the
// reference kernels (odd shapes, broadcasting, strided views), the random-graph differential
// test (incremental vs fresh, bitwise, with the CPU as fallback), and the SPIR-V cache (a warm
// backend compiles nothing). Without a device the tests say so and skip; under CI=true a missing
// Vulkan device is a failure (scripts/setup.sh installs lavapipe).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <unistd.h>
#include <random>
#include <string>

#include "backends/gpu/codegen.h"
#include "backends/registry.h"
#include "engine/op_def.h"
#include "engine/ops.h"
#include "engine/session.h"
#include "kernels/ref/ref_kernels.h"
#include "tests/session/random_graph.h"

using namespace tessera;
using namespace tessera::random_graph_testing;

namespace {

// Plugins from the build, kernels cached in a directory of this test run.
struct Env {
  Env() {
    setenv("TESSERA_BACKEND_PATH", TESSERA_PLUGIN_DIR, 1);
    cache = std::filesystem::temp_directory_path() / ("tessera_vulkan_test_" + std::to_string(getpid()));
    setenv("TESSERA_CACHE_DIR", cache.c_str(), 1);
  }
  ~Env() {
    std::error_code ec;
    std::filesystem::remove_all(cache, ec);
  }
  std::filesystem::path cache;
};

// The backend, or nullptr after saying why (a failure under CI=true).
std::unique_ptr<Backend> vulkan() {
  absl::StatusOr<std::unique_ptr<Backend>> backend = BackendRegistry().create("vulkan");
  if (backend.ok()) {
    MESSAGE("Vulkan device: ", (*backend)->description());
    return std::move(*backend);
  }
  const char* ci = std::getenv("CI");
  if (ci != nullptr && std::string(ci) == "true") FAIL("no Vulkan backend under CI: ", backend.status().message());
  MESSAGE("SKIPPED: no Vulkan backend here: ", backend.status().message());
  return nullptr;
}

SessionOptions on_vulkan(const std::string& fallback = "cpu") {
  SessionOptions options;
  options.backend_name = "vulkan";
  options.fallback_backend = fallback;
  return options;
}

std::vector<float> values(int64_t n, std::mt19937_64& rng, float lo = -2, float hi = 2) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

// Relative closeness with an absolute floor, NaN equal to NaN.
bool close(float got, float want, double tolerance) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
  if (std::isinf(want)) return got == want;
  return std::fabs(static_cast<double>(got) - want) <= tolerance * (1.0 + std::fabs(static_cast<double>(want)));
}

// A graph with one op over inputs "in0".."inN" (f32, given shapes) checked on Vulkan (one
// session: full read, a partial write, a sub-box read) against a reference-backend session.
// `dtypes` (default all f32) may make inputs after the first i32 or i64, filled with [0, 40).
void check_op(const std::vector<Shape>& shapes, const std::function<Tensor(std::vector<Tensor>&)>& build,
              double tolerance, std::mt19937_64& rng, const std::vector<DType>& dtypes = {}) {
  Graph g;
  std::vector<Tensor> ins;
  auto dtype = [&](size_t i) { return i < dtypes.size() ? dtypes[i] : DType::F32; };
  for (size_t i = 0; i < shapes.size(); ++i) ins.push_back(g.input("in" + std::to_string(i), shapes[i], dtype(i)));
  Tensor out = build(ins);
  g.output("out", out);
  const Node& node = g.node(out.id);
  REQUIRE_MESSAGE(gpu::generate_glsl(g, node).ok(), op_display_name(node));
  GraphSession gpu(g, on_vulkan("reference"));
  SessionOptions ref_options;
  ref_options.backend = BackendKind::Reference;
  GraphSession ref(g, ref_options);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const std::string name = "in" + std::to_string(i);
    const std::vector<float> v = values(Box::full(shapes[i]).volume(), rng, dtype(i) == DType::F32 ? -2 : 0, 40);
    if (dtype(i) == DType::I32 || dtype(i) == DType::I64) {
      std::vector<int64_t> whole(v.begin(), v.end());
      std::vector<int32_t> narrow(v.begin(), v.end());
      for (GraphSession* s : {&gpu, &ref})
        if (dtype(i) == DType::I32) s->write<int32_t>(name, Box::full(shapes[i]), narrow);
        else s->write<int64_t>(name, Box::full(shapes[i]), whole);
      continue;
    }
    gpu.write<float>(name, Box::full(shapes[i]), v);
    ref.write<float>(name, Box::full(shapes[i]), v);
  }
  for (int round = 0; round < 2; ++round) {
    const Box box = round == 0 ? Box::full(node.shape) : random_box(node.shape, rng);
    const std::vector<float> got = gpu.read<float>("out", box);
    CHECK(gpu.stats().fallback_steps == 0);  // the op itself ran on the device
    const std::vector<float> want = ref.read<float>("out", box);
    for (size_t i = 0; i < want.size(); ++i)
      REQUIRE_MESSAGE(close(got[i], want[i], tolerance), op_display_name(node), " ", shape_string(node.shape), " element ", i,
                      ": ", got[i], " vs ", want[i]);
    const Box w = random_box(shapes[0], rng);
    const std::vector<float> v = values(w.volume(), rng);
    gpu.write<float>("in0", w, v);
    ref.write<float>("in0", w, v);
  }
}

}  // namespace

TEST_CASE("vulkan: conformance sweep against the reference kernels") {
  Env env;
  if (vulkan() == nullptr) return;
  std::mt19937_64 rng(5);
  for (int64_t f = 0; f < static_cast<int64_t>(UnaryFn::Count); ++f) {
    const UnaryFn fn = static_cast<UnaryFn>(f);
    CAPTURE(fn_name(fn));
    const double tolerance = fn == UnaryFn::Floor || fn == UnaryFn::Ceil || fn == UnaryFn::Round || fn == UnaryFn::Sign ? 0 : 1e-5;
    check_op({{3, 7, 5}}, [&](std::vector<Tensor>& in) { return unary(fn, in[0]); }, tolerance, rng);
  }
  for (BinaryFn fn : {BinaryFn::Add, BinaryFn::Sub, BinaryFn::Mul, BinaryFn::Div, BinaryFn::Pow, BinaryFn::Minimum,
                      BinaryFn::Maximum}) {
    CAPTURE(fn_name(fn));
    check_op({{5, 1, 9}, {3, 9}}, [&](std::vector<Tensor>& in) { return binary(fn, in[0], in[1]); }, 1e-5, rng);
  }
  check_op({{4, 13}, {13}}, [](std::vector<Tensor>& in) {
    const Tensor operands[] = {in[0], in[1]};
    return fused_elementwise(operands, {FusedInstr{OpKind::Binary, static_cast<int64_t>(BinaryFn::Mul), 0, 1},
                                               FusedInstr{OpKind::Unary, static_cast<int64_t>(UnaryFn::Tanh), 2, -1},
                                               FusedInstr{OpKind::Binary, static_cast<int64_t>(BinaryFn::Add), 3, 0}});
  }, 1e-5, rng);
  // Movement: slice (start and step), permute and expand are copies with moved addressing.
  check_op({{5, 9, 7}}, [](std::vector<Tensor>& in) { return slice(in[0], 1, 2, 9, 3); }, 0, rng);
  check_op({{4, 3, 6}}, [](std::vector<Tensor>& in) { return permute(in[0], {2, 0, 1}); }, 0, rng);
  check_op({{3, 1}}, [](std::vector<Tensor>& in) { return expand(in[0], Shape{2, 3, 5}); }, 0, rng);
  check_op({{2, 5, 7}, {7, 3}}, [](std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, 1e-5, rng);
  check_op({{3, 1, 4, 6}, {2, 6, 5}}, [](std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, 1e-5, rng);
  check_op({{6, 11}, {9, 11}}, [](std::vector<Tensor>& in) { return linear(in[0], in[1]); }, 1e-5, rng);
  check_op({{5, 17}}, [](std::vector<Tensor>& in) { return softmax(in[0], -1); }, 1e-5, rng);
  check_op({{6, 4, 3}}, [](std::vector<Tensor>& in) { return softmax(in[0], 0); }, 1e-5, rng);
  check_op({{5, 17}}, [](std::vector<Tensor>& in) { return log_softmax(in[0], 1); }, 1e-5, rng);
  check_op({{3, 4, 33}}, [](std::vector<Tensor>& in) { return rms_norm(in[0], Tensor{}, 1e-6); }, 1e-5, rng);
  check_op({{3, 33}, {33}}, [](std::vector<Tensor>& in) { return rms_norm(in[0], in[1], 1e-6); }, 1e-5, rng);
  // Rotary embeddings with i32 and i64 positions, pass-through columns past n_rot.
  for (RopeMode mode : {RopeMode::HalfSplit, RopeMode::Interleaved})
    for (DType positions : {DType::I32, DType::I64}) {
      check_op({{2, 5, 3, 14}, {5}}, [&](std::vector<Tensor>& in) { return rope(in[0], in[1], 10, 10000.0, mode, 0.5); }, 1e-4,
               rng, {DType::F32, positions});
      check_op({{7, 2, 8}, {7}}, [&](std::vector<Tensor>& in) { return rope(in[0], in[1], 8, 500.0, mode); }, 1e-4, rng,
               {DType::F32, positions});
    }
  for (DType positions : {DType::I32, DType::I64})
    check_op({{2, 5, 3, 18}, {5, 3}}, [](std::vector<Tensor>& in) { return rope_multi(in[0], in[1], {4, 6, 4}, 1000.0); },
             1e-4, rng, {DType::F32, positions});
  check_op({{3, 4, 37}}, [](std::vector<Tensor>& in) { return layer_norm(in[0], Tensor{}, Tensor{}, 1e-5); }, 1e-5, rng);
  check_op({{5, 37}, {37}}, [](std::vector<Tensor>& in) { return layer_norm(in[0], in[1], Tensor{}, 1e-5); }, 1e-5, rng);
  check_op({{5, 37}, {37}}, [](std::vector<Tensor>& in) { return layer_norm(in[0], Tensor{}, in[1], 1e-5); }, 1e-5, rng);
  check_op({{2, 3, 37}, {37}, {37}}, [](std::vector<Tensor>& in) { return layer_norm(in[0], in[1], in[2], 1e-5); }, 1e-5,
           rng);  // Attention: causal with GQA, a sliding window with softcap, non-causal with S != T and Dv != D.
  check_op({{2, 5, 4, 6}, {2, 5, 2, 6}, {2, 5, 2, 7}},
           [](std::vector<Tensor>& in) { return attention(in[0], in[1], in[2], AttentionParams{.scale = 0.4}); }, 1e-5, rng);
  check_op({{7, 3, 5}, {7, 1, 5}, {7, 1, 5}}, [](std::vector<Tensor>& in) {
    return attention(in[0], in[1], in[2], AttentionParams{.scale = 0.5, .causal = true, .window = 3, .softcap = 2.0});
  }, 1e-5, rng);
  check_op({{1, 4, 3, 5}, {1, 6, 3, 5}, {1, 6, 3, 3}}, [](std::vector<Tensor>& in) {
    return attention(in[0], in[1], in[2], AttentionParams{.scale = 0.3, .causal = false});
  }, 1e-5, rng);
}

TEST_CASE("vulkan: NaN and infinities follow the reference (minimum, maximum, pow, erf)") {
  Env env;
  if (vulkan() == nullptr) return;
  const float nan = std::nanf(""), inf = INFINITY;
  const std::vector<float> a = {nan, 1.0f, -2.0f, 0.0f, -0.5f, 3.0f, inf, -inf, -inf, -0.0f, 0.5f, -1.0f};
  const std::vector<float> b = {1.0f, nan, 3.0f, -1.0f, 2.0f, 0.0f, 2.0f, 0.5f, -3.0f, -3.0f, -inf, inf};
  Graph g;
  Tensor x = g.input("a", {12}, DType::F32), y = g.input("b", {12}, DType::F32);
  g.output("min", binary(BinaryFn::Minimum, x, y));
  g.output("max", binary(BinaryFn::Maximum, x, y));
  g.output("pow", binary(BinaryFn::Pow, x, y));
  g.output("erf", unary(UnaryFn::Erf, x));
  GraphSession gpu(g, on_vulkan("reference"));
  SessionOptions ref_options;
  ref_options.backend = BackendKind::Reference;
  GraphSession ref(g, ref_options);
  for (GraphSession* s : {&gpu, &ref}) {
    s->write<float>("a", Box::full(Shape{12}), a);
    s->write<float>("b", Box::full(Shape{12}), b);
  }
  for (const char* out : {"min", "max", "pow", "erf"}) {
    const std::vector<float> got = gpu.read<float>(out, Box::full(Shape{12}));
    CHECK(gpu.stats().fallback_steps == 0);
    const std::vector<float> want = ref.read<float>(out, Box::full(Shape{12}));
    for (size_t i = 0; i < want.size(); ++i)
      CHECK_MESSAGE(close(got[i], want[i], 1e-5), std::string(out), "(", a[i], ", ", b[i], "): ", got[i], " vs ", want[i]);
  }
}

TEST_CASE("vulkan: strided views through the backend interface match the reference kernel") {
  Env env;
  std::unique_ptr<Backend> backend = vulkan();
  if (backend == nullptr) return;
  std::mt19937_64 rng(9);
  // out = x . w^T with x read through a view that skips every other element of its rows, and
  // the output written into every other column of a wider buffer.
  Graph g;
  const int64_t rows = 5, k = 12, n = 7;
  Tensor x = g.input("x", {rows, k}, DType::F32);
  Tensor w = g.input("w", {n, k}, DType::F32);
  Tensor out = linear(x, w);
  Plan plan;
  plan.steps.push_back(PlanStep{out.id});
  absl::StatusOr<std::unique_ptr<PreparedPlan>> prepared = backend->prepare(g, plan);
  REQUIRE(prepared.ok());
  const std::vector<float> xs = values(rows * k * 2, rng), ws = values(n * k, rng);
  auto upload = [&](const std::vector<float>& host) {
    absl::StatusOr<BufferHandle> b = backend->allocate(static_cast<int64_t>(host.size() * 4));
    REQUIRE(b.ok());
    const Box all{{0, static_cast<int64_t>(host.size())}};
    REQUIRE(backend->copy_in(BufferRegion{*b, 0, DType::F32, all}, all, host.data()).ok());
    return *b;
  };
  const BufferHandle xb = upload(xs), wb = upload(ws), ob = upload(std::vector<float>(static_cast<size_t>(rows * n * 2)));
  TensorView xv = dense_view(reinterpret_cast<void*>(xb.id), DType::F32, Box::full(Shape{rows, k}));
  xv.strides = {2 * k, 2};
  TensorView ov = dense_view(reinterpret_cast<void*>(ob.id), DType::F32, Box::full(Shape{rows, n}));
  ov.strides = {2 * n, 2};
  KernelInput inputs[2];
  static_cast<TensorView&>(inputs[0]) = xv;
  inputs[0].shape = {rows, k};
  static_cast<TensorView&>(inputs[1]) = dense_view(reinterpret_cast<void*>(wb.id), DType::F32, Box::full(Shape{n, k}));
  inputs[1].shape = {n, k};
  const Box box{{1, 4}, {2, 7}};
  const StepLaunch launch{0, inputs, ov, std::span<const Box>(&box, 1)};
  REQUIRE(backend->run(**prepared, std::span<const StepLaunch>(&launch, 1), {}).ok());
  REQUIRE(backend->synchronize().ok());
  std::vector<float> got(static_cast<size_t>(rows * n * 2));
  const Box all{{0, rows * n * 2}};
  REQUIRE(backend->copy_out(BufferRegion{ob, 0, DType::F32, all}, all, got.data()).ok());
  for (int64_t r = box.begin(0); r < box.end(0); ++r)
    for (int64_t j = box.begin(1); j < box.end(1); ++j) {
      double want = 0;
      for (int64_t kk = 0; kk < k; ++kk) want += static_cast<double>(xs[static_cast<size_t>(r * 2 * k + 2 * kk)]) * ws[static_cast<size_t>(j * k + kk)];
      CHECK(close(got[static_cast<size_t>(r * 2 * n + 2 * j)], static_cast<float>(want), 1e-5));
    }
  CHECK(got[1] == 0.0f);  // the holes between written columns stay untouched
  // Host pointers are not device memory.
  float host[4] = {};
  TensorView bad = dense_view(host, DType::F32, Box::full(Shape{2, 2}));
  const StepLaunch wrong{0, inputs, bad, std::span<const Box>(&box, 1)};
  CHECK_FALSE(backend->run(**prepared, std::span<const StepLaunch>(&wrong, 1), {}).ok());
  prepared->reset();
}

TEST_CASE("vulkan: views deep in buffers larger than one binding; launches of more items than work groups") {
  Env env;
  std::unique_ptr<Backend> backend = vulkan();
  if (backend == nullptr) return;
  const int64_t n = 4'500'000;              // more work items than 65535 groups of 64
  const int64_t offset = int64_t{150} << 20;  // past lavapipe's 128 MiB storage-buffer range
  Graph g;
  Tensor x = g.input("x", {n}, DType::F32);
  Tensor y = unary(UnaryFn::Neg, x);
  Plan plan;
  plan.steps.push_back(PlanStep{y.id});
  absl::StatusOr<std::unique_ptr<PreparedPlan>> prepared = backend->prepare(g, plan);
  REQUIRE(prepared.ok());
  absl::StatusOr<BufferHandle> xb = backend->allocate(offset + n * 4), yb = backend->allocate(n * 4);
  REQUIRE((xb.ok() && yb.ok()));
  std::vector<float> host(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) host[static_cast<size_t>(i)] = static_cast<float>(i % 1000) - 500.0f;
  const Box all = Box::full(Shape{n});
  REQUIRE(backend->copy_in(BufferRegion{*xb, offset, DType::F32, all}, all, host.data()).ok());
  KernelInput in;
  static_cast<TensorView&>(in) = dense_view(reinterpret_cast<void*>(xb->id + offset), DType::F32, all);
  in.shape = {n};
  const TensorView out = dense_view(reinterpret_cast<void*>(yb->id), DType::F32, all);
  const StepLaunch launch{0, std::span<const KernelInput>(&in, 1), out, std::span<const Box>(&all, 1)};
  REQUIRE(backend->run(**prepared, std::span<const StepLaunch>(&launch, 1), {}).ok());
  REQUIRE(backend->synchronize().ok());
  std::vector<float> got(static_cast<size_t>(n));
  REQUIRE(backend->copy_out(BufferRegion{*yb, 0, DType::F32, all}, all, got.data()).ok());
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) wrong += got[static_cast<size_t>(i)] != -host[static_cast<size_t>(i)];
  CHECK(wrong == 0);
  prepared->reset();
  backend->free(*xb);
  backend->free(*yb);
  // Offsets in the shaders are 32-bit: tensors of 2^31 elements or more stay on the host.
  Graph h;
  Tensor huge = exp(h.input("x", {int64_t{1} << 31}, DType::F32));
  CHECK(backend->supports(h, h.node(huge.id)).code() == absl::StatusCode::kUnimplemented);
}

TEST_CASE("vulkan: random graphs, incremental reads bitwise equal to a fresh Vulkan session") {
  Env env;
  if (vulkan() == nullptr) return;
  int64_t device_steps = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    Graph g;
    RandomGraph gen(g, rng);
    gen.grow(16);
    g.output("out", gen.pool().back());
    GraphSession session(g, on_vulkan());
    std::vector<std::vector<std::byte>> current;
    for (const InputSpec& in : gen.inputs()) {
      current.push_back(random_values(in, shape_volume(in.shape), rng));
      session.write(in.name, Box::full(in.shape), current.back());
    }
    for (int step = 0; step < 4; ++step) {
      CAPTURE(step);
      const size_t k = rng() % gen.inputs().size();
      const InputSpec& in = gen.inputs()[k];
      const Box wbox = random_box(in.shape, rng);
      const std::vector<std::byte> data = random_values(in, wbox.volume(), rng);
      session.write(in.name, wbox, data);
      scatter(current[k], in.shape, wbox, data, 4);
      const Node& out = g.node(g.find_output("out"));
      const Box box = random_box(out.shape, rng);
      std::vector<std::byte> got(static_cast<size_t>(box.volume() * dtype_size(out.dtype)));
      session.read("out", box, got);
      device_steps += session.stats().steps - session.stats().fallback_steps;
      GraphSession fresh(g, on_vulkan());
      for (size_t i = 0; i < gen.inputs().size(); ++i) fresh.write(gen.inputs()[i].name, Box::full(gen.inputs()[i].shape), current[i]);
      std::vector<std::byte> full(static_cast<size_t>(out.size_bytes()));
      fresh.read("out", Box::full(out.shape), full);
      REQUIRE_MESSAGE(extract(full, out.shape, box, dtype_size(out.dtype)) == got, "box ", box.to_string());
    }
  }
  CHECK(device_steps > 0);
}

TEST_CASE("vulkan: shaders compile once per source and device; a warm backend compiles nothing") {
  Env env;
  if (vulkan() == nullptr) return;
  Graph g;
  Tensor x = g.input("x", {4, 6}, DType::F32);
  g.output("y", softmax(exp(x) * x, -1));
  const std::vector<float> v(24, 0.5f);
  auto run = [&] {
    GraphSession s(g, on_vulkan());
    s.write<float>("x", Box::full(Shape{4, 6}), v);
    s.read<float>("y", Box::full(Shape{4, 6}));
    s.read<float>("y", Box{{1, 2}, {0, 6}});  // another box: the same kernels
    return s.backend().stats();
  };
  const BackendStats cold = run();
  CHECK(cold.kernels_compiled > 0);
  const BackendStats warm = run();  // a new backend: kernels from the disk cache
  CHECK(warm.kernels_compiled == 0);
  CHECK(warm.kernels_loaded == cold.kernels_compiled);
}
