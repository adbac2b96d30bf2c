// GPU kernel generation, without a device: one source per op, attributes and rank (sizes,
// offsets and strides are arguments, so the number of compiled kernels stays bounded), and a
// clear Unimplemented for what has no kernel (the session runs it on its fallback).
#include <doctest/doctest.h>

#include <random>

#include "backends/gpu/codegen.h"
#include "engine/ops.h"
#include "tests/support/quant_blocks.h"

using namespace tessera;

TEST_CASE("gpu codegen: sources depend on op, attributes and rank, never on sizes") {
  for (auto* generate : {&gpu::generate_opencl, &gpu::generate_glsl}) {
    auto source = [generate](const Shape& shape, auto&& build) {
      Graph g;
      Tensor x = g.input("x", shape, DType::F32);
      Tensor y = build(g, x);
      absl::StatusOr<gpu::GeneratedKernel> k = (*generate)(g, g.node(y.id));
      REQUIRE(k.ok());
      return k->source;
    };
    auto soft = [](Graph&, Tensor x) { return softmax(x, -1); };
    auto norm = [](Graph&, Tensor x) { return rms_norm(x, Tensor{}, 1e-6); };
    auto lin = [](Graph& g, Tensor x) { return linear(x, g.input("w", {5, x.shape().back()}, DType::F32)); };
    CHECK(source({3, 7}, soft) == source({100, 9}, soft));
    CHECK(source({3, 7}, soft) != source({3, 7, 2}, soft));
    CHECK(source({2, 64}, norm) == source({9, 576}, norm));
    CHECK(source({2, 64}, lin) == source({17, 576}, lin));
    auto rot = [](Graph& g, Tensor x) { return rope(x, g.input("p", {x.dim(-3)}, DType::I32), 4, 10000.0, RopeMode::Interleaved); };
    auto att = [](Graph&, Tensor x) { return attention(x, x, x, AttentionParams{.scale = 0.5}); };
    CHECK(source({3, 2, 8}, rot) == source({9, 4, 16}, rot));
    CHECK(source({3, 2, 8}, att) == source({11, 4, 64}, att));
    CHECK(source({2, 8}, [](Graph&, Tensor x) { return layer_norm(x, Tensor{}, Tensor{}, 1e-5); }) ==
          source({7, 80}, [](Graph&, Tensor x) { return layer_norm(x, Tensor{}, Tensor{}, 1e-5); }));
    // Convolution nets and indexing: sizes (channels, kernel size, rows) come from the shape arguments.
    auto conv = [](Graph& g, Tensor x) {
      return conv2d(x, g.input("k", {8, x.dim(1), 3, 3}, DType::F32), Tensor{}, Conv2dParams{.stride_h = 2, .pad_h = 1});
    };
    auto gn = [](Graph&, Tensor x) { return group_norm(x, 2, Tensor{}, Tensor{}, 1e-5); };
    auto red = [](Graph&, Tensor x) { return mean(x, {1, 3}); };
    auto emb = [](Graph& g, Tensor x) { return gather(x, g.input("ids", {5}, DType::I32)); };
    CHECK(source({1, 3, 8, 9}, conv) == source({2, 64, 40, 30}, conv));
    CHECK(source({1, 4, 8, 9}, gn) == source({2, 64, 40, 30}, gn));
    CHECK(source({1, 4, 8, 9}, red) == source({2, 64, 40, 30}, red));
    CHECK(source({9, 4}, emb) == source({1000, 64}, emb));
    auto eps = [](double e) { return [e](Graph&, Tensor x) { return rms_norm(x, Tensor{}, e); }; };
    CHECK(source({2, 8}, eps(1e-6)) != source({2, 8}, eps(1e-5)));
  }
}

TEST_CASE("gpu codegen: what has no kernel is Unimplemented, naming the op") {
  Graph g;
  Tensor x = g.input("x", {4, 6}, DType::F32);
  Tensor c = cumsum(x, 0);
  Tensor cmp = binary(BinaryFn::Lt, x, x);
  Tensor i = g.input("i", {4}, DType::I32);
  for (const Tensor& t : {c, cmp, i + i}) {
    CHECK(gpu::generate_opencl(g, g.node(t.id)).status().code() == absl::StatusCode::kUnimplemented);
    CHECK(gpu::generate_glsl(g, g.node(t.id)).status().code() == absl::StatusCode::kUnimplemented);
  }
  CHECK(std::string(gpu::generate_opencl(g, g.node(c.id)).status().message()).find("cumsum") != std::string::npos);
  CHECK(std::string(gpu::generate_glsl(g, g.node(c.id)).status().message()).find("cumsum") != std::string::npos);
}

TEST_CASE("gpu codegen: GLSL kernels have the OpenCL kernels' shape, and their parameters fit 32 bits") {
  Graph g;
  Tensor x = g.input("x", {4, 6}, DType::F32);
  Tensor h = g.input("h", {3, 2, 6}, DType::F32);
  for (const Tensor& t : {softmax(x, 0), rms_norm(x, Tensor{}, 1e-6), exp(x), linear(x, g.input("w", {3, 6}, DType::F32)),
                          layer_norm(x, Tensor{}, Tensor{}, 1e-5), attention(h, h, h, AttentionParams{.scale = 0.5}),
                          rope(h, g.input("p", {3}, DType::I64), 6, 10000.0, RopeMode::HalfSplit),
                          conv2d(g.input("img", {1, 2, 5, 5}, DType::F32), g.input("k", {3, 2, 3, 3}, DType::F32), Tensor{}),
                          group_norm(h, 2, Tensor{}, Tensor{}, 1e-5), sum(h, {0}), gather(x, g.input("i", {2}, DType::I64))}) {
    absl::StatusOr<gpu::GeneratedKernel> cl = gpu::generate_opencl(g, g.node(t.id)), gl = gpu::generate_glsl(g, g.node(t.id));
    REQUIRE((cl.ok() && gl.ok()));
    CHECK(cl->shape == gl->shape);
    CHECK(cl->axis == gl->axis);
    CHECK(cl->depth == gl->depth);
    CHECK(gl->source.find("#version 450") == 0);
  }
  // items, depth, out base, strides, begin, extent, then base, strides and red per input.
  gpu::InputLayout out, in;
  out.strides[0] = 6, out.strides[1] = 1;
  in.base = 7, in.strides[1] = 2, in.red = 3, in.shape = {4, 6, 1, 1, 1, 1, 1, 1};
  std::vector<int32_t> params;
  const gpu::InputLayout inputs[] = {in};
  REQUIRE(gpu::append_glsl_params(out, Box{{1, 3}, {0, 6}}, 12, 5, inputs, params).ok());
  REQUIRE(params.size() == static_cast<size_t>(gpu::kGlslFixedParams + gpu::kGlslInputParams));
  CHECK(params[0] == 12);
  CHECK(params[1] == 5);
  CHECK(params[3] == 6);
  CHECK(params[11] == 1);  // begin
  CHECK(params[20] == 6);  // extent of axis 1
  CHECK(params[21] == 1);  // extents past the rank
  CHECK(params[27] == 7);
  CHECK(params[29] == 2);
  CHECK(params[36] == 3);
  CHECK(params[37] == 4);  // the input's shape
  CHECK(params[38] == 6);
  CHECK(params[44] == 1);
  in.base = int64_t{1} << 31;
  const gpu::InputLayout big[] = {in};
  CHECK(gpu::append_glsl_params(out, Box{{1, 3}, {0, 6}}, 12, 5, big, params).code() == absl::StatusCode::kOutOfRange);
  CHECK(params.size() == static_cast<size_t>(gpu::kGlslFixedParams + gpu::kGlslInputParams));  // nothing appended
}

TEST_CASE("gpu codegen: linear with quantised weights is one tiled kernel per block type and rank") {
  std::mt19937_64 rng(3);
  auto kernel = [&](auto* generate, DType dtype, const Shape& x_shape, int64_t n) {
    Graph g;
    const int64_t k = x_shape.back();
    const std::vector<uint8_t> bytes = testing::random_quantized(dtype, n, k, rng);
    Tensor w = g.constant({n, k}, dtype, std::as_bytes(std::span<const uint8_t>(bytes)));
    Tensor y = linear(g.input("x", x_shape, DType::F32), w);
    absl::StatusOr<gpu::GeneratedKernel> code = (*generate)(g, g.node(y.id));
    REQUIRE_MESSAGE(code.ok(), code.status().message());
    return *code;
  };
  for (auto* generate : {&gpu::generate_opencl, &gpu::generate_glsl, &gpu::generate_cuda}) {
    for (DType dtype : testing::kQuantizedDTypes) {
      const int64_t block = dtype_block_size(dtype);
      const gpu::GeneratedKernel a = kernel(generate, dtype, {3, 2 * block}, 5), b = kernel(generate, dtype, {40, 4 * block}, 9);
      CHECK(a.source == b.source);
      CHECK(a.shape == gpu::KernelShape::Tiles);
      CHECK(a.local_size == gpu::kTileLocalSize);
      CHECK(a.depth == 2 * block);
      CHECK(a.source != kernel(generate, dtype, {2, 3, block}, 5).source);  // rank
    }
    CHECK(kernel(generate, DType::Q4_K, {2, 256}, 3).source != kernel(generate, DType::Q6_K, {2, 256}, 3).source);
  }
  // f16 weights have no device decoder: the session runs them on its fallback.
  Graph g;
  Tensor y = linear(g.input("x", {2, 8}, DType::F32), cast(g.input("w", {3, 8}, DType::F32), DType::F16));
  CHECK(gpu::generate_opencl(g, g.node(y.id)).status().code() == absl::StatusCode::kUnimplemented);
}

TEST_CASE("gpu codegen: tiled launches cover the box (per-element below kTileMinRows rows, else 32 x 32 tiles)") {
  gpu::GeneratedKernel k;
  k.shape = gpu::KernelShape::Tiles;
  k.local_size = gpu::kTileLocalSize;
  CHECK(gpu::work_items(k, Box{{0, 1}, {0, 1536}}) == 1536);                        // decode row: one item per element
  CHECK(gpu::work_items(k, Box{{0, 3}, {0, 5}}) == 64);                             // rounded up to whole groups
  CHECK(gpu::work_items(k, Box{{0, 7}}) == 64);                                     // rank 1
  CHECK(gpu::work_items(k, Box{{5, 5 + 512}, {0, 1536}}) == 16 * 48 * 64);          // tiles
  CHECK(gpu::work_items(k, Box{{0, 2}, {3, 40}, {0, 33}}) == 2 * 2 * 2 * 64);       // leading axes, partial tiles
  CHECK(gpu::work_items(k, Box{{0, 2}, {3, 3}, {0, 33}}) == 0);
  CHECK(gpu::address_unit(DType::Q4_K) == 1);
  CHECK(gpu::address_unit(DType::F32) == 4);
}
