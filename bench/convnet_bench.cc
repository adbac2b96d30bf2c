// Whole conv nets (a program, not a test): the TAEF2 encoder on a 128x160 image, the TAEF2
// decoder on a 16x20 latent and the RDN x2 upscaler on a 200x240 image, each through a
// GraphSession with 1 and 2 threads:
//   full  a write of the whole input and a read of the whole output (everything recomputed)
//   edit  a write of a small box of the input (16x20 pixels; 2x2 latents for the decoder) and a
//         read of the whole output: only what depends on the box is recomputed. A round times a
//         net's full forwards, then its edits back to back, as an interactive session's edits
//         follow one another (and as the peer's forwards do). The decoder's
//         GroupNorm (in its first three blocks) averages over the whole image, so a latent edit
//         dirties every element after it: the decoder's edit is a full recompute plus planning.
// When .venv/bin/python exists, PyTorch runs the same nets in float32 without gradients with the
// same thread count (bench/peer_torch_convnets.py), one subprocess per round, alternating with
// our rounds so that both see the same machine load. PyTorch has no incremental edit: its full
// forward time is printed next to our edit time.
//
// With --backend NAME the same nets also run in sessions on that backend (a GPU plugin: opencl,
// vulkan, cuda), in the same rounds after ours; a table gives their times, the device, and the
// steps that ran on the CPU fallback per read (0: the whole net ran on the device).
//
// Usage: convnet_bench [--rounds R] [--reps K] [--threads LIST] [--only TEXT] [--no-peer]
//                      [--models DIR] [--backend NAME]
//   --rounds R     rounds of (ours, peer) per thread count (default 5)
//   --reps K       timed runs of each kind per net and round (default 2), after one warm-up
//   --threads LIST comma-separated thread counts (default 1,2)
//   --only TEXT    nets whose name contains TEXT
//   --no-peer      skip PyTorch
//   --models DIR   where taesd/ and upscaler/ are (default ../shared/models, or
//                  TESSERA_CONV_MODELS)
//   --backend NAME also time the nets on that backend (its CPU fallback uses the thread count)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/profile_table.h"
#include "engine/session.h"
#include "loaders/rdn.h"
#include "loaders/taesd.h"

using namespace tessera;

namespace {

struct Net {
  std::string name;                 // as bench/peer_torch_convnets.py knows it
  std::string file;                 // under the models directory
  std::string input, output;        // graph names
  Shape shape;                      // of the input
  Box edit;                         // the edited box of the input
  float scale;                      // inputs are uniform in [0, scale)
  std::unique_ptr<Graph> (*build)(const std::string&, const Shape&);
};

std::vector<Net> all_nets() {
  return {
      {"taef2_encoder", "taesd/taef2_encoder.safetensors", "image", "latent", {1, 3, 128, 160},
       Box{{0, 1}, {0, 3}, {56, 72}, {72, 92}}, 1.0f, taef2_encoder},
      {"taef2_decoder", "taesd/taef2_decoder.safetensors", "latent", "image", {1, 32, 16, 20},
       Box{{0, 1}, {0, 32}, {7, 9}, {9, 11}}, 3.0f, taef2_decoder},
      {"rdn_x2", "upscaler/rdn_x2.safetensors", "image", "upscaled", {1, 3, 200, 240},
       Box{{0, 1}, {0, 3}, {92, 108}, {110, 130}}, 255.0f, rdn_x2},
  };
}

std::vector<float> uniform_values(int64_t count, float scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v) x = uniform(rng);
  return v;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double load_average() {
  double load[1] = {0};
  return getloadavg(load, 1) == 1 ? load[0] : -1;
}

// One net in one session; two full inputs and two patches, alternated so that every write
// changes the values.
struct NetRun {
  const Net& net;
  std::unique_ptr<Graph> graph;
  std::unique_ptr<GraphSession> session;
  std::vector<float> inputs[2], patches[2], output;
  Box out_box;
  int full_count = 0, edit_count = 0;
  int64_t full_elements = 0, edit_elements = 0;
  int64_t full_fallback = 0, edit_fallback = 0;  // steps on the CPU fallback (device backends)

  // `backend`: a backend name, or "" for the default CPU backend.
  NetRun(const Net& n, const std::string& models, int threads, const std::string& backend = "", bool profile = false)
      : net(n) {
    graph = n.build(models + "/" + n.file, n.shape);
    SessionOptions options;
    options.threads = threads;
    options.profile = profile;
    options.backend_name = backend;
    options.hints = {{n.input, InputHint::Kind::Edits}};
    session = std::make_unique<GraphSession>(*graph, std::move(options));
    out_box = Box::full(graph->node(graph->find_output(n.output)).shape);
    output.resize(static_cast<size_t>(out_box.volume()));
    for (int k = 0; k < 2; ++k) {
      inputs[k] = uniform_values(shape_volume(n.shape), n.scale, 11 + k);
      patches[k] = uniform_values(n.edit.volume(), n.scale, 21 + k);
    }
    time_full();  // warm-up: compiles the plans
    time_edit();
  }

  double read_output() {
    session->read(net.output, out_box, std::as_writable_bytes(std::span<float>(output)));
    return now_seconds();
  }

  // Seconds of a write of the whole input and a read of the whole output.
  double time_full() {
    const double start = now_seconds();
    session->write(net.input, Box::full(net.shape), inputs[full_count++ % 2]);
    const double end = read_output();
    full_elements = session->stats().elements_computed;
    full_fallback = session->stats().fallback_steps;
    return end - start;
  }

  // Seconds of a write of the edit box and a read of the whole output.
  double time_edit() {
    const double start = now_seconds();
    session->write(net.input, net.edit, patches[edit_count++ % 2]);
    const double end = read_output();
    edit_elements = session->stats().elements_computed;
    edit_fallback = session->stats().fallback_steps;
    return end - start;
  }
};

// Runs the peer for one round; appends its samples to samples[net]. False when it failed.
bool run_peer(const std::vector<Net>& nets, const std::string& models, int threads, int reps,
              std::vector<std::vector<double>>& samples) {
  std::string names;
  for (const Net& n : nets) names += (names.empty() ? "" : ",") + n.name;
  const std::string command =
      absl::StrCat(".venv/bin/python bench/peer_torch_convnets.py --threads ", threads,
                   " --reps ", reps, " --models '", models, "' --nets ", names);
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

struct Options {
  int rounds = 5, reps = 2;
  std::vector<int> threads = {1, 2};
  std::string only, models, backend;
  bool peer = true;
  bool profile = false;  // --profile: per-op times of a full forward and an edit, no peer
};

void print_usage(std::FILE* f) {
  std::fprintf(f,
               "usage: convnet_bench [--rounds R] [--reps K] [--threads LIST] [--only TEXT] "
               "[--no-peer] [--models DIR] [--backend NAME] [--profile]\n"
               "Times the TAEF2 encoder/decoder and the RDN x2 upscaler (full forward and a small "
               "edit)\nthrough a GraphSession, beside PyTorch (bench/peer_torch_convnets.py) when "
               ".venv/bin/python exists,\nand with --backend NAME on that backend too (opencl, vulkan, "
               "cuda: plugins on TESSERA_BACKEND_PATH).\n"
               "--profile: instead, the time per op (SessionOptions::profile) of each net's full forward and\n"
               "edit on the first thread count, averaged over --reps runs after a warm-up; no peer.\n");
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool takes_value = arg == "--rounds" || arg == "--reps" || arg == "--threads" ||
                             arg == "--only" || arg == "--models" || arg == "--backend";
    if (arg == "--help" || arg == "-h") {
      print_usage(stdout);
      std::exit(0);
    } else if (arg == "--no-peer") {
      o.peer = false;
    } else if (arg == "--profile") {
      o.profile = true;
    } else if (takes_value && i + 1 < argc) {
      const char* v = argv[++i];
      if (arg == "--rounds") o.rounds = std::max(1, std::atoi(v));
      if (arg == "--reps") o.reps = std::max(1, std::atoi(v));
      if (arg == "--only") o.only = v;
      if (arg == "--models") o.models = v;
      if (arg == "--backend") o.backend = v;
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
  if (options.models.empty()) {
    const char* dir = std::getenv("TESSERA_CONV_MODELS");
    options.models = dir != nullptr && *dir != '\0' ? dir : "../shared/models";
  }
  std::vector<Net> nets;
  for (Net& n : all_nets())
    if (options.only.empty() || n.name.find(options.only) != std::string::npos)
      nets.push_back(std::move(n));
  if (options.profile) {
    try {
      for (const Net& n : nets) {
        NetRun run(n, options.models, options.threads.front(), options.backend, /*profile=*/true);
        for (const bool edit : {false, true}) {
          run.session->clear_profile();
          double seconds = 0;
          for (int rep = 0; rep < options.reps; ++rep) seconds += edit ? run.time_edit() : run.time_full();
          std::printf("%s, %d thread(s), %s: %.2f ms a run, %lld elements computed\n", n.name.c_str(),
                      options.threads.front(), edit ? "edit" : "full forward", seconds / options.reps * 1e3,
                      static_cast<long long>(edit ? run.edit_elements : run.full_elements));
          bench::print_profile(run.session->stats().profile, options.reps, "run");
        }
      }
    } catch (const Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    }
    return 0;
  }
  const bool peer = options.peer && access(".venv/bin/python", X_OK) == 0;
  const bool on_device = !options.backend.empty();
  if (on_device && std::getenv("TESSERA_BACKEND_PATH") == nullptr) setenv("TESSERA_BACKEND_PATH", TESSERA_PLUGIN_DIR, 1);
  const size_t count = nets.size(), thread_counts = options.threads.size();
  // [thread count][net]: seconds per run; elements of the last full and edit reads.
  std::vector<std::vector<std::vector<double>>> full(thread_counts), edit(thread_counts),
      theirs(thread_counts);
  std::vector<std::vector<int64_t>> full_elements(thread_counts), edit_elements(thread_counts);
  // The same on the device backend, and its fallback steps per full / edit read.
  std::vector<std::vector<std::vector<double>>> device_full(thread_counts), device_edit(thread_counts);
  std::vector<std::vector<std::pair<int64_t, int64_t>>> device_fallback(thread_counts);
  std::string device_name;
  std::vector<double> loads;
  try {
    for (size_t t = 0; t < thread_counts; ++t) {
      const int threads = options.threads[t];
      std::fprintf(stderr, "%d thread(s): loading %zu nets\n", threads, count);
      std::vector<std::unique_ptr<NetRun>> runs;
      for (const Net& n : nets) runs.push_back(std::make_unique<NetRun>(n, options.models, threads));
      std::vector<std::unique_ptr<NetRun>> device_runs;
      if (on_device) {
        std::fprintf(stderr, "%d thread(s): loading %zu nets on %s\n", threads, count, options.backend.c_str());
        for (const Net& n : nets) device_runs.push_back(std::make_unique<NetRun>(n, options.models, threads, options.backend));
        if (!device_runs.empty()) device_name = device_runs[0]->session->backend().description();
      }
      device_full[t].assign(count, {});
      device_edit[t].assign(count, {});
      full[t].assign(count, {});
      edit[t].assign(count, {});
      theirs[t].assign(count, {});
      for (int round = 0; round < options.rounds; ++round) {
        loads.push_back(load_average());
        std::fprintf(stderr, "%d thread(s): round %d/%d (load %.2f)\n", threads, round + 1,
                     options.rounds, loads.back());
        // Edits back to back after the full forwards, as an interactive session runs them (and as
        // the peer's forwards run back to back).
        for (size_t k = 0; k < count; ++k) {
          for (int rep = 0; rep < options.reps; ++rep) full[t][k].push_back(runs[k]->time_full());
          for (int rep = 0; rep < options.reps; ++rep) edit[t][k].push_back(runs[k]->time_edit());
        }
        for (size_t k = 0; k < device_runs.size(); ++k) {
          for (int rep = 0; rep < options.reps; ++rep) device_full[t][k].push_back(device_runs[k]->time_full());
          for (int rep = 0; rep < options.reps; ++rep) device_edit[t][k].push_back(device_runs[k]->time_edit());
        }
        if (peer && !run_peer(nets, options.models, threads, options.reps, theirs[t]))
          std::fprintf(stderr, "peer_torch_convnets.py failed (round %d)\n", round + 1);
      }
      for (size_t k = 0; k < count; ++k) {
        full_elements[t].push_back(runs[k]->full_elements);
        edit_elements[t].push_back(runs[k]->edit_elements);
      }
      for (const auto& run : device_runs) device_fallback[t].emplace_back(run->full_fallback, run->edit_fallback);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  loads.push_back(load_average());
  std::printf("conv nets, f32, through a GraphSession (ms: min / median over %d rounds x %d runs)\n",
              options.rounds, options.reps);
  std::printf("%-14s %3s | %-19s | %-19s | %-19s | %6s %6s | %s\n", "net", "thr", "ours full",
              peer ? "torch full" : "", "ours edit", "full", "edit", "elements edit / full");
  for (size_t t = 0; t < thread_counts; ++t)
    for (size_t k = 0; k < count; ++k) {
      const double ours = min_of(full[t][k]), torch = min_of(theirs[t][k]);
      const double edited = min_of(edit[t][k]);
      std::printf("%-14s %3d | %8.1f / %8.1f | ", nets[k].name.c_str(), options.threads[t],
                  ours * 1e3, median_of(full[t][k]) * 1e3);
      if (peer)
        std::printf("%8.1f / %8.1f | ", torch * 1e3, median_of(theirs[t][k]) * 1e3);
      else
        std::printf("%19s | ", "");
      std::printf("%8.1f / %8.1f | %6.2f %6.2f | %lld / %lld (%.1f%%)\n", edited * 1e3,
                  median_of(edit[t][k]) * 1e3, torch > 0 ? ours / torch : 0.0,
                  torch > 0 ? edited / torch : 0.0,
                  static_cast<long long>(edit_elements[t][k]),
                  static_cast<long long>(full_elements[t][k]),
                  100.0 * static_cast<double>(edit_elements[t][k]) /
                      static_cast<double>(std::max<int64_t>(1, full_elements[t][k])));
    }
  std::printf(
      "(full / edit ratio columns: our min time / PyTorch's min full time, below 1 is faster; "
      "edit boxes: 16x20 pixels, 2x2 latents for taef2_decoder, whose GroupNorm makes a latent "
      "edit dirty everywhere)\n");
  if (on_device) {
    std::printf("\non %s: %s (ms: min / median; fallback: steps run on the CPU per read)\n", options.backend.c_str(),
                device_name.c_str());
    std::printf("%-14s %3s | %-19s | %-19s | %-19s | %s\n", "net", "thr", "full", "edit", "cpu full (above)",
                "fallback full / edit");
    for (size_t t = 0; t < thread_counts; ++t)
      for (size_t k = 0; k < count; ++k)
        std::printf("%-14s %3d | %8.1f / %8.1f | %8.1f / %8.1f | %8.1f / %8.1f | %lld / %lld\n", nets[k].name.c_str(),
                    options.threads[t], min_of(device_full[t][k]) * 1e3, median_of(device_full[t][k]) * 1e3,
                    min_of(device_edit[t][k]) * 1e3, median_of(device_edit[t][k]) * 1e3, min_of(full[t][k]) * 1e3,
                    median_of(full[t][k]) * 1e3, static_cast<long long>(device_fallback[t][k].first),
                    static_cast<long long>(device_fallback[t][k].second));
  }
  std::printf("load average (1 min) seen: min %.2f, max %.2f\n",
              *std::min_element(loads.begin(), loads.end()),
              *std::max_element(loads.begin(), loads.end()));
  return 0;
}
