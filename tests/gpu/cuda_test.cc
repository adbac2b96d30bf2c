// The CUDA backend: its generated kernels compile to PTX with NVRTC on every machine with the
// toolkit (no driver or GPU needed), and where a GPU exists the plugin runs every supported op
// against the reference kernels and gets the tests every GPU backend gets
// (tests/gpu/backend_suite.h, linear_suite.h). Without a GPU the run parts are visible skips,
// under CI=true too (no CI machine has one).
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>

#include "backends/gpu/codegen.h"
#include "backends/registry.h"
#include "engine/ops.h"
#include "engine/session.h"
#include "tests/gpu/backend_suite.h"
#include "tests/gpu/linear_suite.h"
#include "tests/support/quant_blocks.h"
#ifdef TESSERA_HAVE_NVRTC
#include "backends/cuda/nvrtc_compile.h"
#endif

using namespace tessera;

namespace {

// One graph holding a node of every kind the GPU generators cover.
struct Covered {
  Graph g;
  std::vector<Tensor> nodes;
  Covered() {
    Tensor x = g.input("x", {4, 6}, DType::F32), y = g.input("y", {6}, DType::F32);
    Tensor w = g.input("w", {5, 6}, DType::F32), m = g.input("m", {2, 6, 3}, DType::F32);
    for (int64_t f = 0; f < static_cast<int64_t>(UnaryFn::Count); ++f) nodes.push_back(unary(static_cast<UnaryFn>(f), x));
    for (BinaryFn fn : {BinaryFn::Add, BinaryFn::Sub, BinaryFn::Mul, BinaryFn::Div, BinaryFn::Pow, BinaryFn::Minimum, BinaryFn::Maximum})
      nodes.push_back(binary(fn, x, y));
    const Tensor operands[] = {x, y};
    nodes.push_back(fused_elementwise(operands, {FusedInstr{OpKind::Binary, static_cast<int64_t>(BinaryFn::Mul), 0, 1},
                                                 FusedInstr{OpKind::Unary, static_cast<int64_t>(UnaryFn::Exp), 2, -1}}));
    nodes.push_back(matmul(x, g.input("b", {6, 3}, DType::F32)));
    nodes.push_back(matmul(g.input("a", {2, 4, 6}, DType::F32), m));
    nodes.push_back(linear(x, w));
    // Linear with every quantised weight type (tiled kernels, byte-addressed weights).
    std::mt19937_64 rng(7);
    for (DType dtype : testing::kQuantizedDTypes) {
      const int64_t k = dtype_block_size(dtype);
      const std::vector<uint8_t> bytes = testing::random_quantized(dtype, 3, k, rng);
      nodes.push_back(linear(g.input("xq" + std::string(dtype_name(dtype)), {2, k}, DType::F32),
                             g.constant({3, k}, dtype, std::as_bytes(std::span<const uint8_t>(bytes)))));
    }
    nodes.push_back(softmax(x, -1));
    nodes.push_back(log_softmax(x, 0));
    nodes.push_back(rms_norm(x, y, 1e-6));
    nodes.push_back(slice(x, 1, 1, 6, 2));
    nodes.push_back(permute(m, {2, 0, 1}));
    nodes.push_back(expand(y, Shape{3, 6}));
    Tensor h = g.input("h", {2, 5, 3, 8}, DType::F32);
    nodes.push_back(rope(h, g.input("p32", {5}, DType::I32), 6, 10000.0, RopeMode::HalfSplit));
    nodes.push_back(rope(h, g.input("p64", {5}, DType::I64), 8, 10000.0, RopeMode::Interleaved));
    nodes.push_back(rope_multi(h, g.input("pm", {5, 2}, DType::I32), {2, 4}));
    nodes.push_back(layer_norm(x, y, y, 1e-5));
    Tensor kv = g.input("kv", {2, 5, 1, 8}, DType::F32);
    nodes.push_back(attention(h, kv, kv, AttentionParams{.scale = 0.3, .causal = true, .window = 2, .softcap = 5.0}));
    nodes.push_back(attention(h, kv, kv, AttentionParams{.scale = 0.3, .causal = false}));
    // Convolution nets and indexing (codegen_nn.cc).
    Tensor img = g.input("img", {2, 4, 7, 9}, DType::F32), bias = g.input("bias", {6}, DType::F32);
    nodes.push_back(conv2d(img, g.input("k", {6, 4, 3, 3}, DType::F32), bias, Conv2dParams{.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1}));
    nodes.push_back(conv2d(img, g.input("kg", {6, 2, 3, 1}, DType::F32), Tensor{},
                           Conv2dParams{.pad_h = 2, .dilation_h = 2, .groups = 2}));
    nodes.push_back(pool2d(img, PoolKind::Max, 3, 2, 1));
    nodes.push_back(pool2d(img, PoolKind::Avg, 2, 2));
    nodes.push_back(upsample_nearest(img, 2));
    nodes.push_back(concat(std::vector<Tensor>{img, img}, 1));
    nodes.push_back(group_norm(img, 2, g.input("gw", {4}, DType::F32), g.input("gb", {4}, DType::F32), 1e-5));
    nodes.push_back(sum(m, {1}));
    nodes.push_back(mean(m, {0, 2}, true));
    nodes.push_back(reduce(ReduceFn::Max, m, {2}));
    nodes.push_back(reshape(m, Shape{4, 9}));
    Tensor table = g.input("table", {40, 6}, DType::F32);
    nodes.push_back(gather(table, g.input("i32", {3}, DType::I32)));
    nodes.push_back(gather(table, g.input("i64", {2, 2}, DType::I64)));
  }
};

}  // namespace

TEST_CASE("cuda: every generated kernel compiles to PTX with NVRTC") {
#ifdef TESSERA_HAVE_NVRTC
  Covered c;
  MESSAGE("NVRTC ", cuda::nvrtc_version());
  for (const Tensor& t : c.nodes) {
    const Node& node = c.g.node(t.id);
    absl::StatusOr<gpu::GeneratedKernel> k = gpu::generate_cuda(c.g, node);
    REQUIRE_MESSAGE(k.ok(), k.status().message());
    absl::StatusOr<std::string> ptx = cuda::compile_to_ptx(k->source, k->name);
    REQUIRE_MESSAGE(ptx.ok(), ptx.status().message());
    CHECK(ptx->find(".entry " + k->name) != std::string::npos);
  }
#else
  MESSAGE("SKIPPED: built without the CUDA toolkit (NVRTC)");
#endif
}

TEST_CASE("cuda: the plugin runs the covered ops like the reference, where a GPU exists") {
  gpu_testing::Env env;
  if (gpu_testing::open_backend("cuda") == nullptr) return;
  Covered c;
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> u(-2, 2);
  for (size_t i = 0; i < c.nodes.size(); ++i) c.g.output("o" + std::to_string(i), c.nodes[i]);
  SessionOptions on_gpu;
  on_gpu.backend_name = "cuda";
  on_gpu.fallback_backend = "reference";
  SessionOptions ref;
  ref.backend = BackendKind::Reference;
  GraphSession gpu(c.g, on_gpu), cpu(c.g, ref);
  for (NodeId in : c.g.inputs()) {
    const Node& n = c.g.node(in);
    std::vector<float> v(static_cast<size_t>(Box::full(n.shape).volume()));
    for (float& x : v) x = u(rng);
    const std::string name = n.attrs_as<InputAttrs>().name;
    if (n.dtype != DType::F32) {  // positions and ids: small integers
      std::vector<int64_t> whole;
      for (float x : v) whole.push_back(static_cast<int64_t>(x * 10.0f) + 20);
      const std::vector<int32_t> narrow(whole.begin(), whole.end());
      for (GraphSession* s : {&gpu, &cpu})
        if (n.dtype == DType::I32) s->write<int32_t>(name, Box::full(n.shape), narrow);
        else s->write<int64_t>(name, Box::full(n.shape), whole);
      continue;
    }
    gpu.write<float>(name, Box::full(n.shape), v);
    cpu.write<float>(name, Box::full(n.shape), v);
  }
  for (size_t i = 0; i < c.nodes.size(); ++i) {
    const std::string name = "o" + std::to_string(i);
    const Box box = Box::full(c.g.node(c.nodes[i].id).shape);
    const std::vector<float> got = gpu.read<float>(name, box), want = cpu.read<float>(name, box);
    for (size_t k = 0; k < want.size(); ++k)
      CHECK((got[k] == doctest::Approx(want[k]).epsilon(1e-4) || (std::isnan(got[k]) && std::isnan(want[k]))));
  }
}

namespace {
const gpu_testing::Suite kCuda{"cuda", gpu::generate_cuda};
}  // namespace

TEST_CASE("cuda: conformance sweep against the reference kernels") { gpu_testing::conformance_sweep(kCuda); }

TEST_CASE("cuda: strided views through the backend interface match the reference kernel") { gpu_testing::strided_views(kCuda); }

TEST_CASE("cuda: random graphs, incremental reads bitwise equal to a fresh session") { gpu_testing::random_graphs(kCuda); }

TEST_CASE("cuda: kernels compile once per source and device, a warm backend compiles nothing") { gpu_testing::kernel_cache(kCuda); }

TEST_CASE("cuda: tiled f32 matmul and linear match the reference, sub-boxes bitwise equal") { gpu_testing::tiled_f32(kCuda); }

TEST_CASE("cuda: linear with every quantised weight type matches the reference, sub-boxes bitwise equal") {
  gpu_testing::quantised_linear(kCuda);
}

TEST_CASE("cuda: quantised linear through strided and partial views") { gpu_testing::quantised_strided_views(kCuda); }

TEST_CASE("cuda: matmul and linear timings (printed under TESSERA_GPU_TIMING=1)") { gpu_testing::timings(kCuda); }
