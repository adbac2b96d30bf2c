// Conv2d benchmark (a program, not a test): time and GFLOP/s of our f32 conv2d per layer shape of
// the TAEF2 encoder at a 128x160 input and of the RDN upscaler at 200x240, each run as a
// one-conv graph through a GraphSession with 1 and 2 threads (a full recompute per run: the
// whole input is rewritten, the whole output read; the time of copying the output out, measured
// by reading it again, is subtracted). When .venv/bin/python exists, PyTorch runs
// the same shapes with the same thread count (bench/peer_torch_conv.py), one subprocess per
// round, alternating with our rounds so that both see the same machine load.
//
// Usage: conv_bench [--rounds R] [--reps K] [--threads LIST] [--only TEXT] [--no-peer]
//                   [--reference] [--cpu-time] [--backend NAME] [--tile 1|4]
//   --rounds R     rounds of (ours, peer) per thread count (default 3)
//   --reps K       timed runs per shape and round (default 3), after one warm-up
//   --threads LIST comma-separated thread counts (default 1,2)
//   --only TEXT    shapes whose label contains TEXT
//   --no-peer      skip PyTorch
//   --reference    also time the reference backend once per shape (1 thread; slow)
//   --cpu-time     time by process CPU time instead of wall time, ours and the peer's (for a
//                  busy machine; meaningful with 1 thread only)
//   --tile 4       every conv with Conv2dAttrs::tile 4 (the 3x3 stride-1 shapes run 4x4
//                  Winograd tiles; default 1: 2x2 tiles)
//   --backend NAME also time each shape on that backend (a GPU plugin: opencl, vulkan, cuda;
//                  its fallback on the CPU with the first thread count), rounds x reps runs
//                  beside ours, and print its device and the steps that fell back per run
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/ops.h"
#include "engine/session.h"

using namespace tessera;

namespace {

struct ConvShape {
  std::string label;
  int64_t channels, out_channels, height, width, kernel, stride, pad;

  int64_t out_height() const { return (height + 2 * pad - kernel) / stride + 1; }
  int64_t out_width() const { return (width + 2 * pad - kernel) / stride + 1; }
  double flops() const {
    return 2.0 * static_cast<double>(out_channels * out_height() * out_width() * channels * kernel *
                                     kernel);
  }
  std::string spec() const {
    return absl::StrCat(channels, ",", out_channels, ",", height, ",", width, ",", kernel, ",",
                        stride, ",", pad);
  }
};

std::vector<ConvShape> all_shapes() {
  return {
      {"taef 3->64 3x3 @128x160", 3, 64, 128, 160, 3, 1, 1},
      {"taef 64->64 3x3 @128x160", 64, 64, 128, 160, 3, 1, 1},
      {"taef 64->64 3x3 s2 @128x160", 64, 64, 128, 160, 3, 2, 1},
      {"taef 64->64 3x3 @64x80", 64, 64, 64, 80, 3, 1, 1},
      {"taef 64->64 3x3 s2 @64x80", 64, 64, 64, 80, 3, 2, 1},
      {"taef 64->64 3x3 @32x40", 64, 64, 32, 40, 3, 1, 1},
      {"taef 64->64 3x3 s2 @32x40", 64, 64, 32, 40, 3, 2, 1},
      {"taef 64->64 3x3 @16x20", 64, 64, 16, 20, 3, 1, 1},
      {"taef 64->256 1x1 @16x20", 64, 256, 16, 20, 1, 1, 0},
      {"taef 256->64 1x1 @16x20", 256, 64, 16, 20, 1, 1, 0},
      {"taef 64->32 3x3 @16x20", 64, 32, 16, 20, 3, 1, 1},
      {"rdn 3->64 3x3 @200x240", 3, 64, 200, 240, 3, 1, 1},
      {"rdn 64->64 3x3 @200x240", 64, 64, 200, 240, 3, 1, 1},
      {"rdn 64->4 3x3 @200x240", 64, 4, 200, 240, 3, 1, 1},
      {"rdn 68->64 1x1 @200x240", 68, 64, 200, 240, 1, 1, 0},
      {"rdn 128->64 1x1 @200x240", 128, 64, 200, 240, 1, 1, 0},
      {"rdn 64->64 5x5 @200x240", 64, 64, 200, 240, 5, 1, 2},
      {"rdn 64->32 3x3 @200x240", 64, 32, 200, 240, 3, 1, 1},
      {"rdn 32->12 3x3 @200x240", 32, 12, 200, 240, 3, 1, 1},
      {"rdn 12->3 3x3 @400x480", 12, 3, 400, 480, 3, 1, 1},
  };
}

struct Options {
  int rounds = 3, reps = 3;
  std::vector<int> threads = {1, 2};
  std::string only;
  bool peer = true, reference = false;
  bool cpu_time = false;  // time by this process's CPU time (a busy machine, 1 thread)
  std::string backend;    // a device backend timed beside ours
  int64_t tile = 1;       // Conv2dAttrs::tile of every conv
};

bool g_cpu_time = false;

// Seconds on the chosen clock: wall time, or this process's CPU time with --cpu-time.
double now_seconds() {
  if (g_cpu_time) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One conv as a graph with random weights and bias, and a session over it.
struct ConvRun {
  Graph graph;
  std::unique_ptr<GraphSession> session;
  std::vector<float> input, output;
  Box in_box, out_box;

  ConvRun(const ConvShape& s, SessionOptions options, int64_t tile) {
    std::mt19937_64 rng(5);
    std::normal_distribution<float> normal(0.0f, 0.1f);
    auto random = [&](int64_t count) {
      std::vector<float> v(static_cast<size_t>(count));
      for (float& x : v) x = normal(rng);
      return v;
    };
    const Shape x_shape = {1, s.channels, s.height, s.width};
    Tensor x = graph.input("x", x_shape, DType::F32);
    Tensor w = graph.constant({s.out_channels, s.channels, s.kernel, s.kernel},
                              random(s.out_channels * s.channels * s.kernel * s.kernel));
    Tensor b = graph.constant({s.out_channels}, random(s.out_channels));
    Conv2dParams p;
    p.stride_h = p.stride_w = s.stride;
    p.pad_h = p.pad_w = s.pad;
    p.tile = tile;
    Tensor out = conv2d(x, w, b, p);
    graph.output("out", out);
    session = std::make_unique<GraphSession>(graph, std::move(options));
    in_box = Box::full(x_shape);
    out_box = Box::full(graph.node(out.id).shape);
    input = random(in_box.volume());
    output.resize(static_cast<size_t>(out_box.volume()));
    time_once();  // warm-up: compiles the plan
  }

  double copy_seconds = 1e30;  // the least time seen for copying the valid output out
  int64_t fallback_steps = 0;  // of the last computing read

  // Seconds of one read of the whole output after a write of the whole input, less the copy of
  // the output into the caller's buffer (its least time, from a second read that finds the
  // output valid: per-run differences would be noisier than the copy itself).
  double time_once() {
    session->write("x", in_box, input);
    const std::span<std::byte> out = std::as_writable_bytes(std::span<float>(output));
    const double start = now_seconds();
    session->read("out", out_box, out);
    const double computed = now_seconds();
    fallback_steps = session->stats().fallback_steps;
    session->read("out", out_box, out);
    const double copied = now_seconds();
    copy_seconds = std::min(copy_seconds, copied - computed);
    return computed - start;
  }
};

// Runs the peer for one round; appends its samples to samples[shape]. False when it failed.
bool run_peer(const std::vector<ConvShape>& shapes, int threads, int reps,
              std::vector<std::vector<double>>& samples) {
  std::string spec;
  for (const ConvShape& s : shapes) spec += (spec.empty() ? "" : ";") + s.spec();
  const std::string command =
      absl::StrCat(".venv/bin/python bench/peer_torch_conv.py --threads ", threads, " --reps ",
                   reps, g_cpu_time ? " --cpu-time" : "", " --shapes '", spec, "'");
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return false;
  char line[4096];
  while (std::fgets(line, sizeof(line), pipe) != nullptr) {
    std::istringstream in(line);
    size_t index;
    if (!(in >> index) || index >= samples.size()) continue;
    for (double t; in >> t;) samples[index].push_back(t);
  }
  return pclose(pipe) == 0;
}

double min_of(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::min_element(v.begin(), v.end());
}
double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

void print_usage(std::FILE* f) {
  std::fprintf(
      f,
      "usage: conv_bench [--rounds R] [--reps K] [--threads LIST] [--only TEXT] [--no-peer] "
      "[--reference]\n"
      "                  [--cpu-time] [--backend NAME] [--tile 1|4]\n"
      "Times our conv2d per TAEF2 / RDN layer shape through a GraphSession, beside PyTorch\n"
      "(bench/peer_torch_conv.py via .venv/bin/python) when available, and with --backend NAME\n"
      "on that backend too (opencl, vulkan, cuda: plugins on TESSERA_BACKEND_PATH).\n");
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (arg == "--help" || arg == "-h") {
      print_usage(stdout);
      std::exit(0);
    } else if (arg == "--no-peer") {
      o.peer = false;
    } else if (arg == "--cpu-time") {
      o.cpu_time = true;
    } else if (arg == "--reference") {
      o.reference = true;
    } else if (const char* v =
                   (arg == "--rounds" || arg == "--reps" || arg == "--threads" || arg == "--only" ||
                    arg == "--backend" || arg == "--tile")
                       ? value()
                       : nullptr) {
      if (arg == "--backend") o.backend = v;
      if (arg == "--tile") {
        o.tile = std::atoi(v);
        if (o.tile != 1 && o.tile != 4) return false;
      }
      if (arg == "--rounds") o.rounds = std::max(1, std::atoi(v));
      if (arg == "--reps") o.reps = std::max(1, std::atoi(v));
      if (arg == "--only") o.only = v;
      if (arg == "--threads") {
        o.threads.clear();
        std::stringstream list(v);
        for (std::string item; std::getline(list, item, ',');)
          if (std::atoi(item.c_str()) > 0) o.threads.push_back(std::atoi(item.c_str()));
        if (o.threads.empty()) return false;
      }
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse(argc, argv, options)) {
    print_usage(stderr);
    return 2;
  }
  std::vector<ConvShape> shapes;
  for (const ConvShape& s : all_shapes())
    if (options.only.empty() || s.label.find(options.only) != std::string::npos)
      shapes.push_back(s);
  g_cpu_time = options.cpu_time;
  const bool peer = options.peer && access(".venv/bin/python", X_OK) == 0;
  const size_t count = shapes.size();
  // ours[t][shape], theirs[t][shape]: seconds per run.
  std::vector<std::vector<std::vector<double>>> ours(options.threads.size()),
      theirs(options.threads.size());
  for (size_t t = 0; t < options.threads.size(); ++t) {
    const int threads = options.threads[t];
    std::fprintf(stderr, "%d thread(s): building %zu sessions\n", threads, count);
    std::vector<std::unique_ptr<ConvRun>> runs;
    for (const ConvShape& s : shapes) {
      SessionOptions so;
      so.threads = threads;
      runs.push_back(std::make_unique<ConvRun>(s, so, options.tile));
    }
    ours[t].assign(count, {});
    theirs[t].assign(count, {});
    for (int round = 0; round < options.rounds; ++round) {
      std::fprintf(stderr, "%d thread(s): round %d/%d\n", threads, round + 1, options.rounds);
      for (size_t k = 0; k < count; ++k)
        for (int rep = 0; rep < options.reps; ++rep) ours[t][k].push_back(runs[k]->time_once());
      if (peer && !run_peer(shapes, threads, options.reps, theirs[t]))
        std::fprintf(stderr, "peer_torch_conv.py failed (round %d)\n", round + 1);
    }
    for (size_t k = 0; k < count; ++k)
      for (double& seconds : ours[t][k]) seconds = std::max(seconds - runs[k]->copy_seconds, 1e-9);
  }
  // On the device backend: its own rounds of every shape, after ours (seconds per run).
  std::vector<std::vector<double>> device(count);
  std::vector<int64_t> device_fallback(count, 0);
  std::string device_name;
  if (!options.backend.empty()) {
    if (std::getenv("TESSERA_BACKEND_PATH") == nullptr) setenv("TESSERA_BACKEND_PATH", TESSERA_PLUGIN_DIR, 1);
    try {
      std::vector<std::unique_ptr<ConvRun>> runs;
      for (const ConvShape& s : shapes) {
        std::fprintf(stderr, "%s: building %s\n", options.backend.c_str(), s.label.c_str());
        SessionOptions so;
        so.threads = options.threads[0];
        so.backend_name = options.backend;
        runs.push_back(std::make_unique<ConvRun>(s, so, options.tile));
      }
      device_name = runs.empty() ? options.backend : runs[0]->session->backend().description();
      for (int round = 0; round < options.rounds; ++round) {
        std::fprintf(stderr, "%s: round %d/%d\n", options.backend.c_str(), round + 1, options.rounds);
        for (size_t k = 0; k < count; ++k)
          for (int rep = 0; rep < options.reps; ++rep) device[k].push_back(runs[k]->time_once());
      }
      for (size_t k = 0; k < count; ++k) {
        device_fallback[k] = runs[k]->fallback_steps;
        for (double& seconds : device[k]) seconds = std::max(seconds - runs[k]->copy_seconds, 1e-9);
      }
    } catch (const Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    }
  }
  std::vector<double> reference(count, 0);
  if (options.reference) {
    for (size_t k = 0; k < count; ++k) {
      std::fprintf(stderr, "reference: %s\n", shapes[k].label.c_str());
      SessionOptions so;
      so.threads = 1;
      so.backend = BackendKind::Reference;
      ConvRun run(shapes[k], so, options.tile);  // its warm-up run is one full run too
      reference[k] = run.time_once();
    }
  }
  std::printf(
      "conv2d f32 through a GraphSession (ms: min / median over %d rounds x %d runs; GFLOP/s at "
      "the min)\n",
      options.rounds, options.reps);
  std::printf("%-30s %7s", "shape", "GFLOP");
  for (int threads : options.threads)
    std::printf(" | %dt ours ms (GF/s)       %s", threads,
                peer ? "torch ms (GF/s)       ratio" : "");
  if (!options.backend.empty()) std::printf(" | %-8s ms (GF/s)     fb", options.backend.c_str());
  if (options.reference) std::printf(" | ref 1t ms  speed-up");
  std::printf("\n");
  double total_flops = 0;
  std::vector<double> total_ours(options.threads.size()), total_theirs(options.threads.size());
  for (size_t k = 0; k < count; ++k) {
    const double gflop = shapes[k].flops() * 1e-9;
    total_flops += gflop;
    std::printf("%-30s %7.3f", shapes[k].label.c_str(), gflop);
    for (size_t t = 0; t < options.threads.size(); ++t) {
      const double a = min_of(ours[t][k]), am = median_of(ours[t][k]);
      total_ours[t] += a;
      std::printf(" | %7.2f/%7.2f (%5.1f)", a * 1e3, am * 1e3, gflop / a);
      if (peer) {
        const double b = min_of(theirs[t][k]), bm = median_of(theirs[t][k]);
        total_theirs[t] += b;
        std::printf(" %7.2f/%7.2f (%5.1f) %5.2f", b * 1e3, bm * 1e3, b > 0 ? gflop / b : 0.0,
                    b > 0 ? a / b : 0.0);
      }
    }
    if (!options.backend.empty())
      std::printf(" | %7.2f/%7.2f (%5.1f) %2lld", min_of(device[k]) * 1e3, median_of(device[k]) * 1e3,
                  gflop / min_of(device[k]), static_cast<long long>(device_fallback[k]));
    if (options.reference)
      std::printf(" | %9.1f %7.1fx", reference[k] * 1e3, reference[k] / min_of(ours[0][k]));
    std::printf("\n");
  }
  std::printf("%-30s %7.3f", "total (sum of mins)", total_flops);
  for (size_t t = 0; t < options.threads.size(); ++t) {
    std::printf(" | %7.2f         (%5.1f)", total_ours[t] * 1e3, total_flops / total_ours[t]);
    if (peer)
      std::printf(" %7.2f         (%5.1f) %5.2f", total_theirs[t] * 1e3,
                  total_theirs[t] > 0 ? total_flops / total_theirs[t] : 0.0,
                  total_theirs[t] > 0 ? total_ours[t] / total_theirs[t] : 0.0);
  }
  if (!options.backend.empty()) {
    double total_device = 0;
    for (size_t k = 0; k < count; ++k) total_device += min_of(device[k]);
    std::printf(" | %7.2f         (%5.1f)", total_device * 1e3, total_flops / total_device);
  }
  std::printf("\n(ratio: our time / PyTorch's time, below 1 is faster)\n");
  if (!options.backend.empty())
    std::printf("%s: %s (fb: steps run on the CPU fallback per run; its threads: %d)\n", options.backend.c_str(),
                device_name.c_str(), options.threads[0]);
  return 0;
}
