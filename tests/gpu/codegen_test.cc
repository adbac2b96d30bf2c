// GPU kernel generation, without a device: one source per op, attributes and rank (sizes,
// offsets and strides are arguments, so the number of compiled kernels stays bounded), and a
// clear Unimplemented for what has no kernel (the session runs it on its fallback).
#include <doctest/doctest.h>

#include "backends/gpu/codegen.h"
#include "engine/ops.h"

using namespace tessera;

TEST_CASE("gpu codegen: sources depend on op, attributes and rank, never on sizes") {
  auto source = [](const Shape& shape, auto&& build) {
    Graph g;
    Tensor x = g.input("x", shape, DType::F32);
    Tensor y = build(g, x);
    absl::StatusOr<gpu::GeneratedKernel> k = gpu::generate_opencl(g, g.node(y.id));
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
  auto eps = [](double e) { return [e](Graph&, Tensor x) { return rms_norm(x, Tensor{}, e); }; };
  CHECK(source({2, 8}, eps(1e-6)) != source({2, 8}, eps(1e-5)));
}

TEST_CASE("gpu codegen: what has no kernel is Unimplemented, naming the op") {
  Graph g;
  Tensor x = g.input("x", {4, 6}, DType::F32);
  Tensor c = cumsum(x, 0);
  Tensor cmp = binary(BinaryFn::Lt, x, x);
  Tensor i = g.input("i", {4}, DType::I32);
  for (const Tensor& t : {c, cmp, i + i}) {
    absl::StatusOr<gpu::GeneratedKernel> k = gpu::generate_opencl(g, g.node(t.id));
    CHECK(k.status().code() == absl::StatusCode::kUnimplemented);
  }
  CHECK(std::string(gpu::generate_opencl(g, g.node(c.id)).status().message()).find("cumsum") != std::string::npos);
}
