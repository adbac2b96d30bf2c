// The OpenCL backend plugin on the machine's OpenCL device (PoCL on the CI machines): the
// tests every GPU backend gets (tests/gpu/backend_suite.h).
#include "tests/gpu/backend_suite.h"
#include "tests/gpu/linear_suite.h"

using namespace tessera;
using namespace tessera::gpu_testing;

namespace {
const Suite kOpenCl{"opencl", gpu::generate_opencl};
}  // namespace

TEST_CASE("opencl: conformance sweep against the reference kernels") { conformance_sweep(kOpenCl); }

TEST_CASE("opencl: strided views through the backend interface match the reference kernel") { strided_views(kOpenCl); }

TEST_CASE("opencl: random graphs, incremental reads bitwise equal to a fresh session") { random_graphs(kOpenCl); }

TEST_CASE("opencl: kernels compile once per source and device, a warm backend compiles nothing") { kernel_cache(kOpenCl); }

TEST_CASE("opencl: tiled f32 matmul and linear match the reference, sub-boxes bitwise equal") { tiled_f32(kOpenCl); }

TEST_CASE("opencl: linear with every quantised weight type matches the reference, sub-boxes bitwise equal") {
  quantised_linear(kOpenCl);
}

TEST_CASE("opencl: quantised linear through strided and partial views") { quantised_strided_views(kOpenCl); }

TEST_CASE("opencl: matmul and linear timings (printed under TESSERA_GPU_TIMING=1)") { timings(kOpenCl); }
