// The Vulkan backend plugin on the machine's Vulkan device (Mesa lavapipe on the CI machines):
// the tests every GPU backend gets (tests/gpu/backend_suite.h), plus the special values of its
// GLSL function forms and views deep in buffers larger than one storage-buffer binding.
#include "tests/gpu/backend_suite.h"
#include "tests/gpu/linear_suite.h"
#include "tests/support/scoped_env.h"

using namespace tessera;
using namespace tessera::gpu_testing;

namespace {
const Suite kVulkan{"vulkan", gpu::generate_glsl};
}  // namespace

TEST_CASE("vulkan: conformance sweep against the reference kernels") { conformance_sweep(kVulkan); }

TEST_CASE("vulkan: strided views through the backend interface match the reference kernel") { strided_views(kVulkan); }

TEST_CASE("vulkan: random graphs, incremental reads bitwise equal to a fresh session") { random_graphs(kVulkan); }

TEST_CASE("vulkan: shaders compile once per source and device, a warm backend compiles nothing") { kernel_cache(kVulkan); }

TEST_CASE("vulkan: tiled f32 matmul and linear match the reference, sub-boxes bitwise equal") { tiled_f32(kVulkan); }

TEST_CASE("vulkan: linear with every quantised weight type matches the reference, sub-boxes bitwise equal") {
  quantised_linear(kVulkan);
}

TEST_CASE("vulkan: quantised linear through strided and partial views") { quantised_strided_views(kVulkan); }

TEST_CASE("vulkan: matmul and linear timings (printed under TESSERA_GPU_TIMING=1)") { timings(kVulkan); }

// Where device memory is not host-mappable as cached memory (discrete GPUs), copies go through
// a staging buffer by the queue; TESSERA_VULKAN_STAGING=1 takes that path on any device.
TEST_CASE("vulkan: staged copies (TESSERA_VULKAN_STAGING=1): views, partial boxes and random graphs") {
  testing::ScopedEnv staging("TESSERA_VULKAN_STAGING", "1");
  {
    Env env;
    std::unique_ptr<Backend> backend = open_backend("vulkan");
    if (backend == nullptr) return;
    CHECK_MESSAGE(backend->description().find("[staged copies]") != std::string::npos, backend->description());
  }
  strided_views(kVulkan);
  random_graphs(kVulkan);
  tiled_f32(kVulkan);
}

TEST_CASE("vulkan: NaN and infinities follow the reference (minimum, maximum, pow, erf)") {
  Env env;
  if (open_backend("vulkan") == nullptr) return;
  const float nan = std::nanf(""), inf = INFINITY;
  const std::vector<float> a = {nan, 1.0f, -2.0f, 0.0f, -0.5f, 3.0f, inf, -inf, -inf, -0.0f, 0.5f, -1.0f};
  const std::vector<float> b = {1.0f, nan, 3.0f, -1.0f, 2.0f, 0.0f, 2.0f, 0.5f, -3.0f, -3.0f, -inf, inf};
  Graph g;
  Tensor x = g.input("a", {12}, DType::F32), y = g.input("b", {12}, DType::F32);
  g.output("min", binary(BinaryFn::Minimum, x, y));
  g.output("max", binary(BinaryFn::Maximum, x, y));
  g.output("pow", binary(BinaryFn::Pow, x, y));
  g.output("erf", unary(UnaryFn::Erf, x));
  GraphSession gpu(g, on_backend("vulkan", "reference"));
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

TEST_CASE("vulkan: views deep in buffers larger than one binding, launches of more items than work groups") {
  Env env;
  std::unique_ptr<Backend> backend = open_backend("vulkan");
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
