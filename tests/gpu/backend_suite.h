// The tests every GPU backend plugin gets (tests/gpu/opencl_test.cc, vulkan_test.cc), for real
// on whatever device the machine has: a conformance sweep of every op its generator covers against
// the reference kernels (odd shapes, broadcasting, no fallback), strided views through the backend
// interface, the random-graph differential test (incremental vs fresh, bitwise, with the CPU as
// fallback), and the kernel cache (a warm backend compiles nothing). Without a device the tests
// say so and skip; under CI=true a missing OpenCL or Vulkan device is a failure (scripts/setup.sh
// installs PoCL and lavapipe), a missing CUDA GPU a skip.
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>

#include "backends/gpu/codegen.h"
#include "backends/registry.h"
#include "engine/op_def.h"
#include "engine/ops.h"
#include "engine/session.h"
#include "kernels/ref/ref_kernels.h"
#include "tests/gpu/no_device.h"
#include "tests/session/random_graph.h"

namespace tessera::gpu_testing {

using namespace tessera::random_graph_testing;

// Which backend, and its kernel generator (to check that the swept op is one it covers).
struct Suite {
  std::string backend;
  absl::StatusOr<gpu::GeneratedKernel> (*generate)(const Graph&, const Node&);
};

// Plugins from the build, kernels cached in a directory of this test run.
struct Env {
  Env() {
    setenv("TESSERA_BACKEND_PATH", TESSERA_PLUGIN_DIR, 1);
    cache = std::filesystem::temp_directory_path() / ("tessera_gpu_test_" + std::to_string(getpid()));
    setenv("TESSERA_CACHE_DIR", cache.c_str(), 1);
    // PoCL's own compile cache must outlive the test's (it is created once per process).
    const std::filesystem::path pocl = std::filesystem::temp_directory_path() / "tessera_pocl_cache";
    std::filesystem::create_directories(pocl);
    setenv("POCL_CACHE_DIR", pocl.c_str(), 0);
  }
  ~Env() {
    std::error_code ec;
    std::filesystem::remove_all(cache, ec);
  }
  std::filesystem::path cache;
};

// The backend, or nullptr after saying why (tests/gpu/no_device.h).
inline std::unique_ptr<Backend> open_backend(const std::string& name) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = BackendRegistry().create(name);
  if (backend.ok()) {
    MESSAGE(name, " device: ", (*backend)->description());
    return std::move(*backend);
  }
  no_device(name, backend.status().message());
  return nullptr;
}

inline SessionOptions on_backend(const std::string& name, const std::string& fallback = "cpu") {
  SessionOptions options;
  options.backend_name = name;
  options.fallback_backend = fallback;
  return options;
}

inline std::vector<float> values(int64_t n, std::mt19937_64& rng, float lo = -2, float hi = 2) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

// Relative closeness with an absolute floor, NaN equal to NaN.
inline bool close(float got, float want, double tolerance) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
  if (std::isinf(want)) return got == want;
  return std::fabs(static_cast<double>(got) - want) <= tolerance * (1.0 + std::fabs(static_cast<double>(want)));
}

// A graph with one op over inputs "in0".."inN" (f32, given shapes) checked on `backend` (one
// session: full read, a partial write, a sub-box read) against a reference-backend session, and
// the sub-box bitwise against a full read of a second session on the same backend.
// `dtypes` (default all f32) may make inputs after the first i32 or i64, filled with [0, 40).
inline void check_op(const Suite& suite, const std::vector<Shape>& shapes, const std::function<Tensor(std::vector<Tensor>&)>& build,
              double tolerance, std::mt19937_64& rng, const std::vector<DType>& dtypes = {}) {
  Graph g;
  std::vector<Tensor> ins;
  auto dtype = [&](size_t i) { return i < dtypes.size() ? dtypes[i] : DType::F32; };
  for (size_t i = 0; i < shapes.size(); ++i) ins.push_back(g.input("in" + std::to_string(i), shapes[i], dtype(i)));
  Tensor out = build(ins);
  g.output("out", out);
  const Node& node = g.node(out.id);
  REQUIRE_MESSAGE(suite.generate(g, node).ok(), op_display_name(node));
  GraphSession gpu(g, on_backend(suite.backend, "reference")), device_full(g, on_backend(suite.backend, "reference"));
  SessionOptions ref_options;
  ref_options.backend = BackendKind::Reference;
  GraphSession ref(g, ref_options);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const std::string name = "in" + std::to_string(i);
    const std::vector<float> v = values(Box::full(shapes[i]).volume(), rng, dtype(i) == DType::F32 ? -2 : 0, 40);
    if (dtype(i) == DType::I32 || dtype(i) == DType::I64) {
      std::vector<int64_t> whole(v.begin(), v.end());
      std::vector<int32_t> narrow(v.begin(), v.end());
      for (GraphSession* s : {&gpu, &device_full, &ref})
        if (dtype(i) == DType::I32) s->write<int32_t>(name, Box::full(shapes[i]), narrow);
        else s->write<int64_t>(name, Box::full(shapes[i]), whole);
      continue;
    }
    for (GraphSession* s : {&gpu, &device_full, &ref}) s->write<float>(name, Box::full(shapes[i]), v);
  }
  for (int round = 0; round < 2; ++round) {
    const Box box = round == 0 ? Box::full(node.shape) : random_box(node.shape, rng);
    const std::vector<float> got = gpu.read<float>("out", box);
    CHECK(gpu.stats().fallback_steps == 0);  // the op itself ran on the device
    const std::vector<float> want = ref.read<float>("out", box);
    for (size_t i = 0; i < want.size(); ++i)
      REQUIRE_MESSAGE(close(got[i], want[i], tolerance), op_display_name(node), " ", shape_string(node.shape), " element ", i,
                      ": ", got[i], " vs ", want[i]);
    // The sub-box equals the same elements of a full computation on the device, bit for bit.
    const std::vector<float> full = device_full.read<float>("out", Box::full(node.shape));
    std::vector<std::byte> full_bytes(full.size() * 4), got_bytes(got.size() * 4);
    std::memcpy(full_bytes.data(), full.data(), full_bytes.size());
    std::memcpy(got_bytes.data(), got.data(), got_bytes.size());
    REQUIRE_MESSAGE(extract(full_bytes, node.shape, box, 4) == got_bytes, op_display_name(node), " box ", box.to_string());
    const Box w = random_box(shapes[0], rng);
    const std::vector<float> v = values(w.volume(), rng);
    for (GraphSession* s : {&gpu, &device_full, &ref}) s->write<float>("in0", w, v);
  }
}


// The ops of convolution nets and indexing on odd shapes: conv2d (padding, stride, dilation,
// groups, 1x1, with and without bias), pool2d, upsample, concat, group_norm, reduce, reshape,
// gather.
inline void conv_net_ops(const Suite& suite, std::mt19937_64& rng) {
  auto conv = [](Conv2dParams p, bool bias) {
    return [p, bias](std::vector<Tensor>& in) { return conv2d(in[0], in[1], bias ? in[2] : Tensor{}, p); };
  };
  check_op(suite, {{2, 5, 9, 11}, {11, 5, 3, 3}, {11}}, conv(Conv2dParams{.pad_h = 1, .pad_w = 1}, true), 1e-5, rng);
  check_op(suite, {{1, 3, 13, 10}, {4, 3, 3, 3}, {4}}, conv(Conv2dParams{.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1}, true),
           1e-5, rng);
  check_op(suite, {{1, 4, 10, 9}, {6, 2, 3, 2}},
           conv(Conv2dParams{.stride_h = 2, .stride_w = 1, .pad_h = 2, .pad_w = 1, .dilation_h = 2, .dilation_w = 3, .groups = 2}, false),
           1e-5, rng);
  check_op(suite, {{2, 7, 5, 6}, {3, 7, 1, 1}, {3}}, conv(Conv2dParams{}, true), 1e-5, rng);
  // The epilogue: relu; a residual (conv first, with bias; residual first, without) and relu.
  check_op(suite, {{2, 7, 5, 6}, {3, 7, 1, 1}, {3}}, conv(Conv2dParams{.relu = true}, true), 1e-5, rng);
  check_op(suite, {{2, 5, 9, 11}, {11, 5, 3, 3}, {11}, {2, 11, 9, 11}},
           [](std::vector<Tensor>& in) {
             return conv2d(in[0], in[1], in[2], in[3],
                           Conv2dParams{.pad_h = 1, .pad_w = 1, .residual = ConvResidual::ConvFirst, .relu = true});
           },
           1e-5, rng);
  check_op(suite, {{1, 4, 10, 9}, {6, 4, 3, 3}, {1, 6, 5, 9}},
           [](std::vector<Tensor>& in) {
             return conv2d(in[0], in[1], Tensor{}, in[2],
                           Conv2dParams{.stride_h = 2, .pad_h = 1, .pad_w = 1, .residual = ConvResidual::ResidualFirst});
           },
           1e-5, rng);
  for (PoolKind kind : {PoolKind::Max, PoolKind::Avg})
    check_op(suite, {{2, 3, 9, 8}}, [kind](std::vector<Tensor>& in) { return pool2d(in[0], kind, 3, 2, 1); }, 1e-5, rng);
  check_op(suite, {{2, 3, 4, 5}}, [](std::vector<Tensor>& in) { return upsample_nearest(in[0], 2); }, 0, rng);
  check_op(suite, {{2, 3, 4, 5}, {2, 2, 4, 5}, {2, 1, 4, 5}},
           [](std::vector<Tensor>& in) { return concat(std::vector<Tensor>{in[0], in[1], in[2]}, 1); }, 0, rng);
  check_op(suite, {{3, 4}, {3, 7}}, [](std::vector<Tensor>& in) { return concat(std::vector<Tensor>{in[0], in[1]}, -1); }, 0, rng);
  check_op(suite, {{2, 6, 5, 7}, {6}, {6}}, [](std::vector<Tensor>& in) { return group_norm(in[0], 3, in[1], in[2], 1e-5); }, 1e-4, rng);
  check_op(suite, {{3, 8, 9}}, [](std::vector<Tensor>& in) { return group_norm(in[0], 2, Tensor{}, Tensor{}, 1e-6); }, 1e-4, rng);
  check_op(suite, {{3, 5, 7}}, [](std::vector<Tensor>& in) { return sum(in[0], {1}); }, 1e-5, rng);
  check_op(suite, {{3, 5, 7}}, [](std::vector<Tensor>& in) { return mean(in[0], {0, 2}, true); }, 1e-5, rng);
  for (ReduceFn fn : {ReduceFn::Max, ReduceFn::Min, ReduceFn::Prod}) {
    CAPTURE(fn_name(fn));
    check_op(suite, {{4, 3, 6}}, [fn](std::vector<Tensor>& in) { return reduce(fn, in[0], {2}); }, 1e-5, rng);
  }
  check_op(suite, {{6, 35}}, [](std::vector<Tensor>& in) { return reshape(in[0], Shape{3, 5, 2, 7}); }, 0, rng);
  check_op(suite, {{3, 4, 5}}, [](std::vector<Tensor>& in) { return reshape(in[0], Shape{60}); }, 0, rng);
  for (DType ids : {DType::I32, DType::I64})
    check_op(suite, {{40, 6}, {3, 4}}, [](std::vector<Tensor>& in) { return gather(in[0], in[1]); }, 0, rng, {DType::F32, ids});
}

inline void conformance_sweep(const Suite& suite) {
  Env env;
  if (open_backend(suite.backend) == nullptr) return;
  std::mt19937_64 rng(5);
  for (int64_t f = 0; f < static_cast<int64_t>(UnaryFn::Count); ++f) {
    const UnaryFn fn = static_cast<UnaryFn>(f);
    CAPTURE(fn_name(fn));
    const double tolerance = fn == UnaryFn::Floor || fn == UnaryFn::Ceil || fn == UnaryFn::Round || fn == UnaryFn::Sign ? 0 : 1e-5;
    check_op(suite, {{3, 7, 5}}, [&](std::vector<Tensor>& in) { return unary(fn, in[0]); }, tolerance, rng);
  }
  for (BinaryFn fn : {BinaryFn::Add, BinaryFn::Sub, BinaryFn::Mul, BinaryFn::Div, BinaryFn::Pow, BinaryFn::Minimum,
                      BinaryFn::Maximum}) {
    CAPTURE(fn_name(fn));
    check_op(suite, {{5, 1, 9}, {3, 9}}, [&](std::vector<Tensor>& in) { return binary(fn, in[0], in[1]); }, 1e-5, rng);
  }
  check_op(suite, {{4, 13}, {13}}, [](std::vector<Tensor>& in) {
    const Tensor operands[] = {in[0], in[1]};
    return fused_elementwise(operands, {FusedInstr{OpKind::Binary, static_cast<int64_t>(BinaryFn::Mul), 0, 1},
                                               FusedInstr{OpKind::Unary, static_cast<int64_t>(UnaryFn::Tanh), 2, -1},
                                               FusedInstr{OpKind::Binary, static_cast<int64_t>(BinaryFn::Add), 3, 0}});
  }, 1e-5, rng);
  // Movement: slice (start and step), permute and expand are copies with moved addressing.
  check_op(suite, {{5, 9, 7}}, [](std::vector<Tensor>& in) { return slice(in[0], 1, 2, 9, 3); }, 0, rng);
  check_op(suite, {{4, 3, 6}}, [](std::vector<Tensor>& in) { return permute(in[0], {2, 0, 1}); }, 0, rng);
  check_op(suite, {{3, 1}}, [](std::vector<Tensor>& in) { return expand(in[0], Shape{2, 3, 5}); }, 0, rng);
  check_op(suite, {{2, 5, 7}, {7, 3}}, [](std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, 1e-5, rng);
  check_op(suite, {{3, 1, 4, 6}, {2, 6, 5}}, [](std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, 1e-5, rng);
  check_op(suite, {{6, 11}, {9, 11}}, [](std::vector<Tensor>& in) { return linear(in[0], in[1]); }, 1e-5, rng);
  check_op(suite, {{5, 17}}, [](std::vector<Tensor>& in) { return softmax(in[0], -1); }, 1e-5, rng);
  check_op(suite, {{6, 4, 3}}, [](std::vector<Tensor>& in) { return softmax(in[0], 0); }, 1e-5, rng);
  check_op(suite, {{5, 17}}, [](std::vector<Tensor>& in) { return log_softmax(in[0], 1); }, 1e-5, rng);
  check_op(suite, {{3, 4, 33}}, [](std::vector<Tensor>& in) { return rms_norm(in[0], Tensor{}, 1e-6); }, 1e-5, rng);
  check_op(suite, {{3, 33}, {33}}, [](std::vector<Tensor>& in) { return rms_norm(in[0], in[1], 1e-6); }, 1e-5, rng);
  // Rotary embeddings with i32 and i64 positions, pass-through columns past n_rot.
  for (RopeMode mode : {RopeMode::HalfSplit, RopeMode::Interleaved})
    for (DType positions : {DType::I32, DType::I64}) {
      check_op(suite, {{2, 5, 3, 14}, {5}}, [&](std::vector<Tensor>& in) { return rope(in[0], in[1], 10, 10000.0, mode, 0.5); }, 1e-4,
               rng, {DType::F32, positions});
      check_op(suite, {{7, 2, 8}, {7}}, [&](std::vector<Tensor>& in) { return rope(in[0], in[1], 8, 500.0, mode); }, 1e-4, rng,
               {DType::F32, positions});
    }
  for (DType positions : {DType::I32, DType::I64})
    check_op(suite, {{2, 5, 3, 18}, {5, 3}}, [](std::vector<Tensor>& in) { return rope_multi(in[0], in[1], {4, 6, 4}, 1000.0); },
             1e-4, rng, {DType::F32, positions});
  check_op(suite, {{3, 4, 37}}, [](std::vector<Tensor>& in) { return layer_norm(in[0], Tensor{}, Tensor{}, 1e-5); }, 1e-5, rng);
  check_op(suite, {{5, 37}, {37}}, [](std::vector<Tensor>& in) { return layer_norm(in[0], in[1], Tensor{}, 1e-5); }, 1e-5, rng);
  check_op(suite, {{5, 37}, {37}}, [](std::vector<Tensor>& in) { return layer_norm(in[0], Tensor{}, in[1], 1e-5); }, 1e-5, rng);
  check_op(suite, {{2, 3, 37}, {37}, {37}}, [](std::vector<Tensor>& in) { return layer_norm(in[0], in[1], in[2], 1e-5); }, 1e-5,
           rng);  // Attention: causal with GQA, a sliding window with softcap, non-causal with S != T and Dv != D.
  check_op(suite, {{2, 5, 4, 6}, {2, 5, 2, 6}, {2, 5, 2, 7}},
           [](std::vector<Tensor>& in) { return attention(in[0], in[1], in[2], AttentionParams{.scale = 0.4}); }, 1e-5, rng);
  check_op(suite, {{7, 3, 5}, {7, 1, 5}, {7, 1, 5}}, [](std::vector<Tensor>& in) {
    return attention(in[0], in[1], in[2], AttentionParams{.scale = 0.5, .causal = true, .window = 3, .softcap = 2.0});
  }, 1e-5, rng);
  check_op(suite, {{1, 4, 3, 5}, {1, 6, 3, 5}, {1, 6, 3, 3}}, [](std::vector<Tensor>& in) {
    return attention(in[0], in[1], in[2], AttentionParams{.scale = 0.3, .causal = false});
  }, 1e-5, rng);
  conv_net_ops(suite, rng);
}

// conv2d through the backend interface: x read through a strided view holding only the rows
// the box needs, the output written into every other column of a wider buffer; a box of part of
// the channels (a partial tile) and rows, checked against a double-precision loop.
inline void strided_conv(Backend& backend) {
  std::mt19937_64 rng(13);
  const int64_t c = 4, o = 5, h = 6, w = 7;
  Graph g;
  Tensor x = g.input("x", {1, c, h, w}, DType::F32);
  Tensor k = g.input("k", {o, c, 3, 3}, DType::F32);
  Tensor bias = g.input("bias", {o}, DType::F32);
  Tensor out = conv2d(x, k, bias, Conv2dParams{.pad_h = 1, .pad_w = 1});
  Plan plan;
  plan.steps.push_back(PlanStep{out.id});
  absl::StatusOr<std::unique_ptr<PreparedPlan>> prepared = backend.prepare(g, plan);
  REQUIRE(prepared.ok());
  const std::vector<float> xs = values(c * h * w * 2, rng), ks = values(o * c * 9, rng), bs = values(o, rng);
  auto upload = [&](const std::vector<float>& host) {
    absl::StatusOr<BufferHandle> b = backend.allocate(static_cast<int64_t>(host.size() * 4));
    REQUIRE(b.ok());
    const Box all{{0, static_cast<int64_t>(host.size())}};
    REQUIRE(backend.copy_in(BufferRegion{*b, 0, DType::F32, all}, all, host.data()).ok());
    return *b;
  };
  const BufferHandle xb = upload(xs), kb = upload(ks), bb = upload(bs), ob = upload(std::vector<float>(static_cast<size_t>(o * h * w * 2)));
  const std::array<int64_t, kMaxRank> x_strides{c * h * w * 2, h * w * 2, w * 2, 2};
  const Box box{{0, 1}, {1, 4}, {2, 5}, {0, w}};
  KernelInput inputs[3];
  // Rows [1, 6) only: the view's data is the element (0, 0, 1, 0).
  static_cast<TensorView&>(inputs[0]) =
      dense_view(reinterpret_cast<void*>(xb.id + 4 * static_cast<uint64_t>(x_strides[2])), DType::F32, Box{{0, 1}, {0, c}, {1, 6}, {0, w}});
  inputs[0].strides = x_strides;
  inputs[0].shape = {1, c, h, w};
  static_cast<TensorView&>(inputs[1]) = dense_view(reinterpret_cast<void*>(kb.id), DType::F32, Box::full(Shape{o, c, 3, 3}));
  inputs[1].shape = {o, c, 3, 3};
  static_cast<TensorView&>(inputs[2]) = dense_view(reinterpret_cast<void*>(bb.id), DType::F32, Box::full(Shape{o}));
  inputs[2].shape = {o};
  TensorView ov = dense_view(reinterpret_cast<void*>(ob.id), DType::F32, Box::full(Shape{1, o, h, w}));
  ov.strides = {o * h * w * 2, h * w * 2, w * 2, 2};
  const StepLaunch launch{0, inputs, ov, std::span<const Box>(&box, 1)};
  REQUIRE(backend.run(**prepared, std::span<const StepLaunch>(&launch, 1), {}).ok());
  REQUIRE(backend.synchronize().ok());
  std::vector<float> got(static_cast<size_t>(o * h * w * 2));
  const Box all{{0, static_cast<int64_t>(got.size())}};
  REQUIRE(backend.copy_out(BufferRegion{ob, 0, DType::F32, all}, all, got.data()).ok());
  for (int64_t oc = 0; oc < o; ++oc)
    for (int64_t r = 0; r < h; ++r)
      for (int64_t col = 0; col < w; ++col) {
        const float value = got[static_cast<size_t>(oc * h * w * 2 + r * w * 2 + col * 2)];
        const int64_t point[4] = {0, oc, r, col};
        if (!box.contains_point(point)) {
          CHECK(value == 0.0f);  // outside the box: untouched
          continue;
        }
        double want = bs[static_cast<size_t>(oc)];
        for (int64_t ic = 0; ic < c; ++ic)
          for (int64_t kh = 0; kh < 3; ++kh)
            for (int64_t kw = 0; kw < 3; ++kw) {
              const int64_t y = r - 1 + kh, z = col - 1 + kw;
              if (y < 0 || y >= h || z < 0 || z >= w) continue;
              want += static_cast<double>(xs[static_cast<size_t>(ic * x_strides[1] + y * x_strides[2] + z * 2)]) *
                      ks[static_cast<size_t>(((oc * c + ic) * 3 + kh) * 3 + kw)];
            }
        CHECK(close(value, static_cast<float>(want), 1e-5));
      }
  prepared->reset();
}

inline void strided_views(const Suite& suite) {
  Env env;
  std::unique_ptr<Backend> backend = open_backend(suite.backend);
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
  strided_conv(*backend);
}

inline void random_graphs(const Suite& suite) {
  Env env;
  if (open_backend(suite.backend) == nullptr) return;
  int64_t device_steps = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    Graph g;
    RandomGraph gen(g, rng);
    gen.grow(16);
    g.output("out", gen.pool().back());
    GraphSession session(g, on_backend(suite.backend));
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
      GraphSession fresh(g, on_backend(suite.backend));
      for (size_t i = 0; i < gen.inputs().size(); ++i) fresh.write(gen.inputs()[i].name, Box::full(gen.inputs()[i].shape), current[i]);
      std::vector<std::byte> full(static_cast<size_t>(out.size_bytes()));
      fresh.read("out", Box::full(out.shape), full);
      REQUIRE_MESSAGE(extract(full, out.shape, box, dtype_size(out.dtype)) == got, "box ", box.to_string());
    }
  }
  CHECK(device_steps > 0);
}

inline void kernel_cache(const Suite& suite) {
  Env env;
  if (open_backend(suite.backend) == nullptr) return;
  Graph g;
  Tensor x = g.input("x", {4, 6}, DType::F32);
  g.output("y", softmax(exp(x) * x, -1));
  const std::vector<float> v(24, 0.5f);
  auto run = [&] {
    GraphSession s(g, on_backend(suite.backend));
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

}  // namespace tessera::gpu_testing
