// GPU tests of the tiled matmul / linear kernels (backends/gpu/codegen_linear.h), for every
// backend plugin with a device here (tests/gpu/opencl_test.cc, vulkan_test.cc): f32 matmul and
// linear on tile-sized and odd shapes, linear with every GGUF block type the generators decode
// (weights uploaded once as raw blocks), strided and partial activation views through the
// backend interface, and sub-box reads bitwise equal to a full read on the same device, both for
// boxes on the per-element path and on the tiled path. Plus timings (printed, never asserted)
// under TESSERA_GPU_TIMING=1.
#pragma once

#include <chrono>

#include "kernels/quant.h"
#include "tests/gpu/backend_suite.h"
#include "tests/support/quant_blocks.h"

namespace tessera::gpu_testing {

// The named f32 inputs of a dot graph and their values.
using Inputs = std::vector<std::pair<std::string, std::vector<float>>>;

inline std::vector<float> read_box(const Graph& g, const SessionOptions& options, const Inputs& inputs, const Box& box) {
  GraphSession s(g, options);
  for (const auto& [name, v] : inputs) s.write<float>(name, Box::full(g.node(g.find_input(name)).shape), v);
  return s.read<float>("out", box);
}

// Elements of `box` out of a dense row-major full tensor.
inline std::vector<float> part(const std::vector<float>& full, const Shape& shape, const Box& box) {
  std::vector<std::byte> bytes(full.size() * 4);
  std::memcpy(bytes.data(), full.data(), bytes.size());
  const std::vector<std::byte> got = extract(bytes, shape, box, 4);
  std::vector<float> out(got.size() / 4);
  std::memcpy(out.data(), got.data(), got.size());
  return out;
}

// `out` of `g` on the device: against the reference within `tolerance`, with the dot op on the
// device (no fallback step), then boxes read by fresh device sessions bitwise equal to the full
// read: a one-row box (per-element path), a box of >= kTileMinRows rows at odd offsets (tiled),
// and random boxes.
inline std::vector<float> check_dot(const Suite& suite, const Graph& g, const Inputs& inputs, double tolerance, std::mt19937_64& rng) {
  const Node& node = g.node(g.find_output("out"));
  CAPTURE(shape_string(node.shape));
  REQUIRE_MESSAGE(suite.generate(g, node).ok(), op_display_name(node));
  const Box full = Box::full(node.shape);
  SessionOptions ref_options;
  ref_options.backend = BackendKind::Reference;
  const std::vector<float> want = read_box(g, ref_options, inputs, full);
  GraphSession gpu(g, on_backend(suite.backend, "reference"));
  for (const auto& [name, v] : inputs) gpu.write<float>(name, Box::full(g.node(g.find_input(name)).shape), v);
  const std::vector<float> got = gpu.read<float>("out", full);
  CHECK(gpu.stats().fallback_steps == 0);
  for (size_t i = 0; i < want.size(); ++i)
    REQUIRE_MESSAGE(close(got[i], want[i], tolerance), "element ", i, ": ", got[i], " vs ", want[i]);
  const int r = node.rank();
  std::vector<Box> boxes;
  if (r >= 2) {
    Box one = full;
    one[r - 2] = Interval(node.shape[r - 2] / 2, node.shape[r - 2] / 2 + 1);
    boxes.push_back(one);
    if (node.shape[r - 2] >= gpu::kTileMinRows + 2) {
      Box tiled = full;
      tiled[r - 2] = Interval(1, node.shape[r - 2] - 1);
      tiled[r - 1] = Interval(std::min<int64_t>(3, node.shape[r - 1] - 1), node.shape[r - 1]);
      boxes.push_back(tiled);
    }
  }
  for (int i = 0; i < 3; ++i) boxes.push_back(random_box(node.shape, rng));
  for (const Box& box : boxes) {
    const std::vector<float> sub = read_box(g, on_backend(suite.backend, "reference"), inputs, box);
    CHECK_MESSAGE(std::memcmp(sub.data(), part(got, node.shape, box).data(), sub.size() * 4) == 0, "box ", box.to_string());
  }
  return got;
}

inline Inputs random_inputs(const Graph& g, std::mt19937_64& rng) {
  Inputs inputs;
  for (NodeId in : g.inputs()) {
    const Node& n = g.node(in);
    inputs.emplace_back(n.attrs_as<InputAttrs>().name, values(shape_volume(n.shape), rng));
  }
  return inputs;
}

// f32 matmul and linear: tile-multiple and odd sizes, K not a multiple of the 32-long chunk,
// broadcast batch axes, rank-1 and rank-3 activations.
inline void tiled_f32(const Suite& suite) {
  Env env;
  if (open_backend(suite.backend) == nullptr) return;
  std::mt19937_64 rng(21);
  auto matmul_case = [&](const Shape& a, const Shape& b) {
    Graph g;
    g.output("out", matmul(g.input("a", a, DType::F32), g.input("b", b, DType::F32)));
    check_dot(suite, g, random_inputs(g, rng), 1e-5, rng);
  };
  matmul_case({64, 96}, {96, 64});
  matmul_case({70, 45}, {45, 50});
  matmul_case({2, 1, 40, 33}, {3, 33, 37});
  matmul_case({5, 7}, {7, 9});
  auto linear_case = [&](const Shape& x, int64_t n) {
    Graph g;
    g.output("out", linear(g.input("x", x, DType::F32), g.input("w", {n, x.back()}, DType::F32)));
    check_dot(suite, g, random_inputs(g, rng), 1e-5, rng);
  };
  linear_case({3, 20, 70}, 39);
  linear_case({33, 64}, 65);
  linear_case({19}, 5);
}

// linear with each quantised weight type as a constant: tiled (M >= kTileMinRows, M and N not
// multiples of 32), per-element (few rows), rank 3 and rank 1 activations; K = 2 blocks.
inline void quantised_linear(const Suite& suite) {
  Env env;
  if (open_backend(suite.backend) == nullptr) return;
  std::mt19937_64 rng(23);
  for (DType dtype : testing::kQuantizedDTypes) {
    const std::string type = dtype_name(dtype);
    CAPTURE(type);
    const int64_t k = 2 * dtype_block_size(dtype);
    for (const auto& [x_shape, n] : std::vector<std::pair<Shape, int64_t>>{{{37, k}, 45}, {{5, k}, 33}, {{2, 19, k}, 17}, {{k}, 7}}) {
      Graph g;
      const std::vector<uint8_t> bytes = testing::random_quantized(dtype, n, k, rng);
      Tensor w = g.constant({n, k}, dtype, std::as_bytes(std::span<const uint8_t>(bytes)));
      g.output("out", linear(g.input("x", x_shape, DType::F32), w));
      const Inputs inputs = random_inputs(g, rng);
      // Against the double-precision reference: K is up to 512 and decoded weights reach ~80
      // (q6_K), so an f32 sum drifts further than the f32 sweep's 1e-5; the bitwise check
      // against the host's f32 sum below is the exact one.
      const std::vector<float> got = check_dot(suite, g, inputs, 1e-3, rng);
      // The device decodes blocks exactly as the CPU does and sums in f32 in order of k.
      std::vector<float> row(static_cast<size_t>(k));
      double worst = 0;
      const std::vector<float>& x = inputs[0].second;
      for (int64_t j = 0; j < n; ++j) {
        quant::dequantize_row(dtype, bytes.data() + j * dtype_bytes(dtype, k), row.data(), k);
        for (int64_t i = 0; i < static_cast<int64_t>(x.size()) / k; ++i) {
          float acc = 0;
          for (int64_t kk = 0; kk < k; ++kk) acc = acc + x[static_cast<size_t>(i * k + kk)] * row[static_cast<size_t>(kk)];
          worst = std::max(worst, std::fabs(static_cast<double>(got[static_cast<size_t>(i * n + j)]) - acc));
        }
      }
      CHECK_MESSAGE(worst == 0, shape_string(x_shape), ": the device differs from the f32 host sum by ", worst);
    }
  }
}

// Quantised linear through the backend interface: x read through a view that holds only rows
// [2, rows) and skips every other element of its rows, weights as raw blocks, the output written
// into every other column of a wider buffer; a per-element box and a tiled box, both equal to
// the host's f32 sum in order of k over the exactly decoded weights.
inline void quantised_strided_views(const Suite& suite) {
  Env env;
  std::unique_ptr<Backend> backend = open_backend(suite.backend);
  if (backend == nullptr) return;
  std::mt19937_64 rng(29);
  for (DType dtype : {DType::Q4_1, DType::Q4_K, DType::Q6_K}) {
    const std::string type = dtype_name(dtype);
    CAPTURE(type);
    const int64_t rows = 40, k = dtype_block_size(dtype) * 2, n = 37, first = 2;
    Graph g;
    const std::vector<uint8_t> ws = testing::random_quantized(dtype, n, k, rng);
    Tensor x = g.input("x", {rows, k}, DType::F32);
    Tensor w = g.constant({n, k}, dtype, std::as_bytes(std::span<const uint8_t>(ws)));
    Plan plan;
    plan.steps.push_back(PlanStep{linear(x, w).id});
    absl::StatusOr<std::unique_ptr<PreparedPlan>> prepared = backend->prepare(g, plan);
    REQUIRE_MESSAGE(prepared.ok(), prepared.status().message());
    const std::vector<float> xs = values((rows - first) * k * 2, rng);
    auto upload = [&](const void* host, int64_t bytes) {
      absl::StatusOr<BufferHandle> b = backend->allocate(bytes);
      REQUIRE(b.ok());
      const Box all{{0, bytes}};
      REQUIRE(backend->copy_in(BufferRegion{*b, 0, DType::Bool, all}, all, host).ok());
      return *b;
    };
    const std::vector<float> zeros(static_cast<size_t>(rows * n * 2));
    const BufferHandle xb = upload(xs.data(), static_cast<int64_t>(xs.size() * 4));
    const BufferHandle wb = upload(ws.data(), static_cast<int64_t>(ws.size()));
    const BufferHandle ob = upload(zeros.data(), static_cast<int64_t>(zeros.size() * 4));
    KernelInput inputs[2];
    static_cast<TensorView&>(inputs[0]) = dense_view(reinterpret_cast<void*>(xb.id), DType::F32, Box{{first, rows}, {0, k}});
    inputs[0].strides = {2 * k, 2};
    inputs[0].shape = {rows, k};
    static_cast<TensorView&>(inputs[1]) = dense_view(reinterpret_cast<void*>(wb.id), dtype, Box::full(Shape{n, k}));
    inputs[1].shape = {n, k};
    TensorView ov = dense_view(reinterpret_cast<void*>(ob.id), DType::F32, Box::full(Shape{rows, n}));
    ov.strides = {2 * n, 2};
    const Box boxes[] = {Box{{3, 5}, {2, 30}}, Box{{first + 1, rows - 1}, {1, n}}};
    const StepLaunch launch{0, inputs, ov, std::span<const Box>(boxes, 2)};
    REQUIRE(backend->run(**prepared, std::span<const StepLaunch>(&launch, 1), {}).ok());
    REQUIRE(backend->synchronize().ok());
    std::vector<float> got(zeros.size());
    const Box all{{0, static_cast<int64_t>(got.size())}};
    REQUIRE(backend->copy_out(BufferRegion{ob, 0, DType::F32, all}, all, got.data()).ok());
    std::vector<float> row(static_cast<size_t>(k));
    const int64_t row_bytes = dtype_bytes(dtype, k);
    for (const Box& box : boxes)
      for (int64_t j = box.begin(1); j < box.end(1); ++j) {
        quant::dequantize_row(dtype, ws.data() + j * row_bytes, row.data(), k);
        for (int64_t i = box.begin(0); i < box.end(0); ++i) {
          float want = 0;  // the kernel's sum: f32, in order of k
          for (int64_t kk = 0; kk < k; ++kk)
            want = want + xs[static_cast<size_t>((i - first) * 2 * k + 2 * kk)] * row[static_cast<size_t>(kk)];
          REQUIRE_MESSAGE(got[static_cast<size_t>(i * 2 * n + 2 * j)] == want, i, ", ", j);
        }
      }
    CHECK(got[1] == 0.0f);  // the holes between written columns stay untouched
    prepared->reset();
    for (BufferHandle b : {xb, wb, ob}) backend->free(b);
  }
}

// Seconds per read of the whole output of `g` (inputs written once; the read repeated after a
// write that dirties everything), after one warm-up read.
inline double time_read(const Graph& g, const SessionOptions& options, const Inputs& inputs, int repeats) {
  GraphSession s(g, options);
  for (const auto& [name, v] : inputs) s.write<float>(name, Box::full(g.node(g.find_input(name)).shape), v);
  const Box full = Box::full(g.node(g.find_output("out")).shape);
  s.read<float>("out", full);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < repeats; ++i) {
    s.write<float>(inputs[0].first, Box::full(g.node(g.find_input(inputs[0].first)).shape), inputs[0].second);
    s.read<float>("out", full);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / repeats;
}

// Prints the time of a 512 x 576 x 1536 matmul, the same linear with q4_1 and q4_K weights (K
// 768 for whole q4_K super-blocks) for 512 rows and for one row (decode), Gemma-3's q8_0 output
// layer for one row, on the backend and on the CPU backend. Nothing is asserted.
inline void timings(const Suite& suite) {
  if (std::getenv("TESSERA_GPU_TIMING") == nullptr) {
    MESSAGE("timings skipped (set TESSERA_GPU_TIMING=1 to print them)");
    return;
  }
  Env env;
  if (open_backend(suite.backend) == nullptr) return;
  std::mt19937_64 rng(31);
  const int64_t m = 512, k = 576, n = 1536;
  struct Case {
    std::string what;
    Graph g;
  };
  std::vector<std::unique_ptr<Case>> cases;
  auto add = [&](const std::string& what) {
    cases.push_back(std::make_unique<Case>());
    cases.back()->what = what;
    return &cases.back()->g;
  };
  Graph* mm = add("matmul f32 512x576 . 576x1536");
  mm->output("out", matmul(mm->input("a", {m, k}, DType::F32), mm->input("b", {k, n}, DType::F32)));
  for (DType dtype : {DType::Q4_1, DType::Q4_K})
    for (int64_t rows : {m, int64_t{1}}) {
      const int64_t kk = dtype_block_size(dtype) == 256 ? 768 : k;  // whole super-blocks for the K-quants
      Graph* g = add(absl::StrCat("linear ", dtype_name(dtype), " ", rows, "x", kk, " . (", n, "x", kk, ")^T"));
      const std::vector<uint8_t> w = testing::random_quantized(dtype, n, kk, rng);
      Tensor weight = g->constant({n, kk}, dtype, std::as_bytes(std::span<const uint8_t>(w)));
      g->output("out", linear(g->input("x", {rows, kk}, DType::F32), weight));
    }
  {  // Gemma-3's output layer for one token: the largest decode linear of the two real models
    const int64_t vocab = 262144, dim = 640;
    Graph* g = add(absl::StrCat("linear q8_0 1x", dim, " . (", vocab, "x", dim, ")^T"));
    const std::vector<uint8_t> w = testing::random_quantized(DType::Q8_0, vocab, dim, rng);
    Tensor weight = g->constant({vocab, dim}, DType::Q8_0, std::as_bytes(std::span<const uint8_t>(w)));
    g->output("out", linear(g->input("x", {1, dim}, DType::F32), weight));
  }
  for (const auto& c : cases) {
    const Inputs inputs = random_inputs(c->g, rng);
    const double device = time_read(c->g, on_backend(suite.backend), inputs, 3);
    const double cpu = time_read(c->g, SessionOptions{}, inputs, 3);
    MESSAGE(suite.backend, ": ", c->what, ": ", device * 1e3, " ms (cpu backend ", cpu * 1e3, " ms)");
  }
}

}  // namespace tessera::gpu_testing
