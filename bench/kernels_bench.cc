// Kernel benchmark (a program, not a test): GFLOP/s and GB/s of the optimised CPU kernels at
// the shapes of SmolLM2-135M and Gemma-3-270M.
//
// - linear, f32 x [M, K] times a quantised weight [N, K]^T, M = 1 (decode) and M = 128
//   (prefill). Weights are streamed from memory as in a real decode step: the kernel cycles
//   over enough distinct copies of the matrix (>= 96 MiB) that none is in cache. Weights sit in
//   transparent huge pages (as the engine's repacked weights would) unless --small-pages.
// - attention, one query row at context 128 and 1024 (decode; Gemma-3's sliding-window layers,
//   512 keys of 1024, too) and all rows of a causal context of 128 (prefill).
// Every configuration runs with 1 and 2 threads (a child process per thread count, since the
// pool's size is fixed per process by TESSERA_THREADS).
//
// Usage: kernels_bench [--threads N] [--isa portable|avx2|avx512|avx512vnni] [--small-pages] [--hot] [--cpu-time]
//                      [--quick] [--only TEXT] [--stream-prefetch BYTES]
// (--only runs the configurations whose label, e.g. "linear q4_K decode" or "attention gemma3
// prefill", contains TEXT; --stream-prefetch sets how far ahead one-row decode prefetches its
// weights, cpu::stream_prefetch_distance, 0 for none, in place of the CPU's default.)
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "engine/ops.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/linear_q8.h"
#include "kernels/quant.h"
#include "kernels/view.h"

using namespace tessera;

namespace {

struct Options {
  bool small_pages = false;
  bool quick = false;
  bool hot = false;       // one copy of each matrix: weights stay in cache (compute-bound figures)
  bool cpu_time = false;  // time by this process's CPU time (for a busy machine, 1 thread)
  std::string only;       // run configurations whose label contains this
};

bool selected(const Options& options, const std::string& label) {
  return options.only.empty() || label.find(options.only) != std::string::npos;
}

// Random-ish but well-formed blocks: every f16 scale field holds a small positive value.
void fill_weights(DType dtype, uint8_t* bytes, int64_t size, std::mt19937_64& rng) {
  for (int64_t i = 0; i < size; i += 8) {
    const uint64_t r = rng();
    std::memcpy(bytes + i, &r, static_cast<size_t>(std::min<int64_t>(8, size - i)));
  }
  const uint16_t scale = float_to_half(0.01f);
  const int64_t block_bytes = dtype_block_bytes(dtype);
  for (int64_t b = 0; b + block_bytes <= size; b += block_bytes) {
    uint8_t* p = bytes + b;
    switch (dtype) {
      case DType::Q6_K:
        std::memcpy(p + 208, &scale, 2);
        break;
      case DType::Q4_1:
      case DType::Q5_1:
      case DType::Q4_K:
      case DType::Q5_K:
        std::memcpy(p + 2, &scale, 2);
        [[fallthrough]];
      default:
        std::memcpy(p, &scale, 2);
    }
  }
}

// Memory for weights: 2 MiB aligned and advised into transparent huge pages.
std::shared_ptr<uint8_t> weight_memory(int64_t bytes, const Options& options) {
  const size_t size = (static_cast<size_t>(bytes) + (2u << 20) - 1) & ~((2u << 20) - 1);
  void* p = std::aligned_alloc(2u << 20, size);
  if (p == nullptr) {
    std::fprintf(stderr, "out of memory\n");
    std::exit(1);
  }
  if (!options.small_pages) madvise(p, size, MADV_HUGEPAGE);
  std::memset(p, 0, size);
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

bool g_cpu_time = false;

double now_seconds() {
  if (!g_cpu_time)
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Runs fn repeatedly for about `seconds` after a warm-up; returns the mean seconds per call
// of the best of five rounds.
template <class F>
double time_calls(F&& fn, double seconds) {
  for (int i = 0; i < 3; ++i) fn();
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    int64_t calls = 0;
    const double start = now_seconds();
    double elapsed = 0;
    while (elapsed < seconds / 5) {
      fn();
      ++calls;
      elapsed = now_seconds() - start;
    }
    best = std::min(best, elapsed / static_cast<double>(calls));
  }
  return best;
}

// A plain read of n bytes in address order: what the memory gives one thread, to set a decode
// kernel's streaming rate against (the same bytes it streams, in the same run).
#if defined(__x86_64__)
__attribute__((target("avx2"))) uint64_t plain_read(const uint8_t* p, int64_t n) {
  __m256i a = _mm256_setzero_si256(), b = a;
  for (int64_t i = 0; i + 64 <= n; i += 64) {
    a = _mm256_xor_si256(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_xor_si256(b, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
  }
  return static_cast<uint64_t>(_mm256_extract_epi64(_mm256_xor_si256(a, b), 0));
}
#else
uint64_t plain_read(const uint8_t* p, int64_t n) {
  uint64_t all = 0;
  for (int64_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    all ^= v;
  }
  return all;
}
#endif

void bench_linear(DType dtype, int64_t k, int64_t n, int64_t m, const Options& options) {
  if (!selected(options,
                std::string("linear ") + dtype_name(dtype) + (m == 1 ? " decode" : " prefill")))
    return;
  const int64_t matrix_bytes = dtype_bytes(dtype, n * k);
  const int64_t copies =
      options.hot ? 1 : std::max<int64_t>(2, ((96ll << 20) + matrix_bytes - 1) / matrix_bytes);
  std::shared_ptr<uint8_t> memory = weight_memory(matrix_bytes * copies, options);
  std::mt19937_64 rng(static_cast<uint64_t>(k * 131 + n));
  fill_weights(dtype, memory.get(), matrix_bytes * copies, rng);
  Graph g;
  Tensor x = g.input("x", {m, k}, DType::F32);
  std::vector<NodeId> nodes;
  for (int64_t c = 0; c < copies; ++c)
    nodes.push_back(
        linear(x, g.constant_external({n, k}, dtype, memory.get() + c * matrix_bytes, memory)).id);
  std::vector<float> xs(static_cast<size_t>(m * k)), out(static_cast<size_t>(m * n));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : xs) v = u(rng);
  const KernelFn kernel = cpu::optimised_kernel(g, g.node(nodes[0]));
  const Box box{{0, m}, {0, n}};
  TensorView out_view = dense_view(out.data(), DType::F32, box);
  TensorView x_view = dense_view(xs.data(), DType::F32, Box{{0, m}, {0, k}});
  // What the cpu backend prepares once per weight (the int8 path's packed panels).
  std::vector<std::shared_ptr<const void>> prepared;
  for (NodeId id : nodes) prepared.push_back(cpu::prepare_node_data(g, g.node(id), kernel));
  int64_t next = 0;
  const double seconds = time_calls(
      [&] {
        const Node& node = g.node(nodes[static_cast<size_t>(next)]);
        const void* ready = prepared[static_cast<size_t>(next)].get();
        next = (next + 1) % copies;
        const TensorView views[2] = {
            x_view,
            dense_view(const_cast<void*>(g.constant_data(g.node(node.inputs[1]).constant).data),
                       dtype, Box{{0, n}, {0, k}})};
        KernelCall call{g, node, views, out_view, box};
        (void)kernel(call.with_prepared(ready));
      },
      options.quick ? 0.15 : 0.6);
  // Decode: a plain read of the same bytes the kernel streamed (its packed copies, or the
  // matrices themselves), timed the same way right after it.
  double plain = 0, plain_seconds = 0;  // the plain read's rate, and its time for the same bytes
  if (m == 1 && !options.hot) {
    const int64_t packed = cpu::q8::packed_bytes(dtype, n, k);
    const bool own = prepared[0] != nullptr && packed > 0;
    const int64_t span = own ? packed : matrix_bytes;
    next = 0;
    volatile uint64_t sink = 0;
    plain_seconds = time_calls(
        [&] {
          const auto* p = own ? static_cast<const uint8_t*>(prepared[static_cast<size_t>(next)].get())
                              : memory.get() + next * matrix_bytes;
          next = (next + 1) % copies;
          sink = sink ^ plain_read(p, span);
        },
        options.quick ? 0.15 : 0.6);
    plain = static_cast<double>(span) / plain_seconds * 1e-9;
  }
  const double flops = 2.0 * static_cast<double>(m * n * k);
  const double bytes = static_cast<double>(matrix_bytes + 4 * m * (k + n));
  std::printf("linear %-5s K=%5lld N=%6lld M=%4lld  %9.1f us  %7.1f GFLOP/s  %6.1f GB/s",
              dtype_name(dtype), static_cast<long long>(k), static_cast<long long>(n),
              static_cast<long long>(m), seconds * 1e6, flops / seconds * 1e-9,
              bytes / seconds * 1e-9);
  if (plain > 0) std::printf("  (plain read %.1f GB/s: %.0f%% of its rate)", plain, 100 * plain_seconds / seconds);
  std::printf("\n");
}

// q [T, hq, d] f32, k/v [T, hkv, d] of dtype kv; computes rows [first_row, T) of every head.
void bench_attention(const char* model, int64_t hq, int64_t hkv, int64_t d, int64_t context,
                     int64_t rows, const Options& options, DType kv = DType::F32, int64_t window = 0) {
  const std::string label = std::string("attention ") + model + (kv == DType::F32 ? "" : std::string(" kv ") + dtype_name(kv)) +
                            (window > 0 ? " window " + std::to_string(window) : "");
  if (!selected(options, label + (rows == 1 ? " decode" : " prefill"))) return;
  Graph g;
  Tensor q = g.input("q", {context, hq, d}, DType::F32);
  // (A q8_0 K/V cache is a cast: graph inputs are never quantised.)
  const DType input = kv == DType::Q8_0 ? DType::F32 : kv;
  Tensor k = g.input("k", {context, hkv, d}, input);
  Tensor v = g.input("v", {context, hkv, d}, input);
  if (kv == DType::Q8_0) {
    k = cast(k, kv);
    v = cast(v, kv);
  }
  AttentionParams params;
  params.scale = 1.0 / std::sqrt(static_cast<double>(d));
  params.window = window;
  Tensor a = attention(q, k, v, params);
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  // Decode streams K and V from memory (a session keeps every layer's): unless --hot, calls
  // cycle through copies of q, k, v totalling at least 96 MiB.
  const int64_t kv_bytes = dtype_bytes(kv, k.node().volume());
  const int64_t set_bytes = 4 * q.node().volume() + 2 * kv_bytes;
  const int64_t copies = options.hot ? 1 : std::max<int64_t>(2, ((96ll << 20) + set_bytes - 1) / set_bytes);
  std::vector<std::vector<float>> data;
  std::vector<std::vector<TensorView>> views(static_cast<size_t>(copies));
  for (int64_t c = 0; c < copies; ++c)
    for (Tensor t : {q, k, v}) {
      const int64_t n = t.node().volume();
      data.emplace_back(static_cast<size_t>(n));  // floats, or halves / q8_0 blocks at the start
      for (int64_t i = 0; i < n; ++i) {
        const float x = u(rng);
        if (t.dtype() == DType::F16)
          reinterpret_cast<uint16_t*>(data.back().data())[i] = float_to_half(x);
        else
          data.back()[static_cast<size_t>(i)] = x;
      }
      if (t.dtype() == DType::Q8_0) {
        std::vector<float> values = data.back();
        for (int64_t b = 0; b < n / 32; ++b)
          quant::quantize_q8_0(values.data() + 32 * b, reinterpret_cast<uint8_t*>(data.back().data()) + 34 * b);
      }
      views[static_cast<size_t>(c)].push_back(dense_view(data.back().data(), t.dtype(), Box::full(t.shape())));
    }
  std::vector<float> out(static_cast<size_t>(a.node().volume()));
  TensorView out_view = dense_view(out.data(), DType::F32, Box::full(a.shape()));
  const KernelFn kernel = cpu::optimised_kernel(g, a.node());
  const Box box{{context - rows, context}, {0, hq}, {0, d}};
  // Calls built once: a KernelCall allocates (and zeroes) worst-case scratch, which a session's
  // arena does not.
  std::vector<std::unique_ptr<KernelCall>> calls;
  for (int64_t c = 0; c < copies; ++c)
    calls.push_back(std::make_unique<KernelCall>(g, a.node(), views[static_cast<size_t>(c)], out_view, box));
  int64_t next = 0;
  const double seconds = time_calls(
      [&] {
        (void)kernel(*calls[static_cast<size_t>(next)]);
        next = (next + 1) % copies;
      },
      options.quick ? 0.15 : 0.5);
  // Visible keys summed over the rows; each costs a D-long dot product and a D-long axpy.
  double keys = 0;
  for (int64_t t = context - rows; t < context; ++t) keys += static_cast<double>(window > 0 ? std::min(t + 1, window) : t + 1);
  const double flops = 4.0 * static_cast<double>(hq * d) * keys;
  const int64_t read_keys = window > 0 ? std::min(context, window + rows - 1) : context;
  const double bytes = static_cast<double>(2 * dtype_bytes(kv, hkv * d * read_keys) + 4 * 2 * rows * hq * d);
  std::printf(
      "%-34s hq=%lld hkv=%lld D=%3lld ctx=%5lld rows=%4lld  %9.1f us  %7.1f GFLOP/s  "
      "%6.1f GB/s\n",
      label.c_str(), static_cast<long long>(hq), static_cast<long long>(hkv), static_cast<long long>(d),
      static_cast<long long>(context), static_cast<long long>(rows), seconds * 1e6,
      flops / seconds * 1e-9, bytes / seconds * 1e-9);
  // A decode row as a 2-member team runs it in phases (AttentionPhases; a team does when it has
  // more members than K/V heads): one member's scores tile (half the keys), then its values
  // part (half the columns).
  const AttentionPhases phases = cpu::attention_phases(g, a.node(), kernel);
  if (rows != 1 || !phases) return;
  std::vector<float> shared(static_cast<size_t>(phases.shared_bytes / 4 + 16));
  float* aligned = shared.data() + (64 - reinterpret_cast<uintptr_t>(shared.data()) % 64) % 64 / 4;
  const double scores = time_calls(
      [&] {
        (void)phases.scores(*calls[static_cast<size_t>(next)], 0, 2, aligned);
        next = (next + 1) % copies;
      },
      options.quick ? 0.15 : 0.5);
  Box part = box;
  part[2] = Interval(0, d / 2);
  std::vector<std::unique_ptr<KernelCall>> part_calls;
  for (int64_t c = 0; c < copies; ++c)
    part_calls.push_back(std::make_unique<KernelCall>(g, a.node(), views[static_cast<size_t>(c)], out_view, part));
  const double values = time_calls(
      [&] {
        (void)phases.values(*part_calls[static_cast<size_t>(next)], aligned);
        next = (next + 1) % copies;
      },
      options.quick ? 0.15 : 0.5);
  std::printf("  as 2 members' phases, each: scores %.1f us + values %.1f us (%s)\n", scores * 1e6, values * 1e6,
              part.to_string().c_str());
}

void run_suite(const Options& options) {
  std::printf("== 1 thread (kernels called directly), isa %s, %s pages, weights %s, decode prefetch %lld bytes ahead, "
              "%d-bit vectors where both run ==\n",
              cpu::isa_name(cpu::detected_isa()),
              options.small_pages ? "small" : "huge",
              options.hot ? "cache-resident (--hot)" : "streamed from memory",
              static_cast<long long>(cpu::stream_prefetch_distance()), cpu::wide_vectors() ? 512 : 256);
  if (options.cpu_time) std::printf("(times are process CPU time per call)\n");
  // K x N: SmolLM2-135M's MLP, Gemma-3-270M's (up, then down), the two output projections.
  const int64_t shapes[][2] = {{576, 1536}, {1536, 576}, {640, 2048}, {2048, 640}, {576, 49152}, {640, 262144}};
  for (DType dtype : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_0})
    for (const auto& shape : shapes) {
      if (shape[0] % dtype_block_size(dtype) != 0) continue;
      for (int64_t m : {1, 128}) bench_linear(dtype, shape[0], shape[1], m, options);
    }
  for (int64_t context : {128, 1024}) {
    bench_attention("smollm2", 9, 3, 64, context, 1, options);
    bench_attention("gemma3", 4, 1, 256, context, 1, options);
    bench_attention("smollm2", 9, 3, 64, context, 1, options, DType::F16);
    bench_attention("gemma3", 4, 1, 256, context, 1, options, DType::F16);
    bench_attention("smollm2", 9, 3, 64, context, 1, options, DType::Q8_0);
    bench_attention("gemma3", 4, 1, 256, context, 1, options, DType::Q8_0);
  }
  bench_attention("gemma3", 4, 1, 256, 1024, 1, options, DType::F16, 512);
  bench_attention("smollm2", 9, 3, 64, 128, 128, options);
  bench_attention("gemma3", 4, 1, 256, 128, 128, options);
  bench_attention("smollm2", 9, 3, 64, 128, 128, options, DType::F16);
  bench_attention("smollm2", 9, 3, 64, 128, 128, options, DType::Q8_0);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  int threads = 0;  // 0: both 1 and 2, in child processes
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--small-pages")
      options.small_pages = true;
    else if (arg == "--quick")
      options.quick = true;
    else if (arg == "--hot")
      options.hot = true;
    else if (arg == "--cpu-time")
      g_cpu_time = options.cpu_time = true;
    else if (arg == "--threads" && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (arg == "--only" && i + 1 < argc)
      options.only = argv[++i];
    else if (arg == "--isa" && i + 1 < argc)
      setenv("TESSERA_CPU_ISA", argv[++i], 1);
    else if (arg == "--stream-prefetch" && i + 1 < argc)
      setenv("TESSERA_STREAM_PREFETCH", argv[++i], 1);
    else {
      const bool help = arg == "--help" || arg == "-h";
      std::fprintf(help ? stdout : stderr,
                   "usage: %s [--threads N] [--isa portable|avx2|avx512|avx512vnni] [--small-pages] [--hot] "
                   "[--cpu-time] [--quick] [--only TEXT] [--stream-prefetch BYTES]\n",
                   argv[0]);
      return help ? 0 : 2;
    }
  }
  if (threads > 0) {
    setenv("TESSERA_THREADS", std::to_string(threads).c_str(), 1);
    run_suite(options);
    return 0;
  }
  for (int t : {1, 2}) {
    std::fflush(stdout);
    const pid_t child = fork();
    if (child == 0) {
      setenv("TESSERA_THREADS", std::to_string(t).c_str(), 1);
      run_suite(options);
      std::_Exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
  }
  return 0;
}
