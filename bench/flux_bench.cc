// The FLUX.2-style transformer (loaders/flux.h) with its seeded random weights: times a full
// read of the velocity and the incremental reads after typical edits, and writes the weights
// file the PyTorch reference loads (scripts/reference_flux.py).
//
// Usage: flux_bench [--latent H W] [--text L] [--layers D S] [--seed S] [--threads T] [--repeats R]
//        flux_bench --write-weights PATH [--layers D S] [--seed S]
#include <algorithm>
#include <filesystem>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/error.h"
#include "engine/session.h"
#include "loaders/flux.h"

using namespace tessera;

namespace {

struct Options {
  int64_t height = 32, width = 32;  // latent size: (H/2) * (W/2) image tokens
  int64_t text = 32;
  int64_t double_layers = 1, single_layers = 2;  // FluxConfig's defaults
  uint64_t seed = 1;
  int threads = 0;
  int repeats = 3;
  std::string write_weights;
};

void print_usage(std::FILE* f) {
  std::fprintf(
      f,
      "usage: flux_bench [--latent H W] [--text L] [--layers D S] [--seed N] [--threads T]\n"
      "                  [--repeats R]\n"
      "       flux_bench --write-weights PATH [--layers D S] [--seed N]\n"
      "  Builds the FLUX.2-style transformer of the default FluxConfig with D double-stream\n"
      "  and S single-stream blocks and weights seeded by N, over a latent of H x W (even:\n"
      "  (H/2)*(W/2) image tokens) and L text tokens, then prints the time and elements\n"
      "  computed of: the first full read of the velocity, a repeated read, and reads after\n"
      "  changing the timestep, the last text token and one image token (median of R runs\n"
      "  each). --write-weights writes the weights as F32 safetensors with diffusers' names\n"
      "  and exits. Defaults: --latent 32 32 --text 32 --layers 1 2 --seed 1 --repeats 3.\n");
}

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      print_usage(stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) return false;
    if (arg == "--write-weights") {
      o->write_weights = argv[++i];
      continue;
    }
    const long long value = std::atoll(argv[++i]);
    if (arg == "--latent" && i + 1 < argc) {
      o->height = value;
      o->width = std::atoll(argv[++i]);
    } else if (arg == "--layers" && value >= 0 && i + 1 < argc) {
      o->double_layers = value;
      o->single_layers = std::atoll(argv[++i]);
    } else if (arg == "--text" && value > 0) {
      o->text = value;
    } else if (arg == "--seed" && value >= 0) {
      o->seed = static_cast<uint64_t>(value);
    } else if (arg == "--threads" && value >= 0) {
      o->threads = static_cast<int>(value);
    } else if (arg == "--repeats" && value > 0) {
      o->repeats = static_cast<int>(value);
    } else {
      return false;
    }
  }
  return true;
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

std::vector<float> random_values(std::mt19937_64& rng, size_t n) {
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

int run(const Options& o) {
  FluxConfig config;
  config.seed = o.seed;
  config.num_layers = o.double_layers;
  config.num_single_layers = o.single_layers;
  const FluxWeights weights = flux_random_weights(config);
  if (!o.write_weights.empty()) {
    write_flux_safetensors(weights, o.write_weights);
    std::printf("wrote %zu tensors to %s\n", weights.shapes.size(), o.write_weights.c_str());
    return 0;
  }
  const int64_t tokens = (o.height / 2) * (o.width / 2);
  auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Graph> graph = build_flux(config, weights, tokens, o.text);
  SessionOptions session_options;
  session_options.threads = o.threads;
  GraphSession session(*graph, session_options);
  const double build_ms = ms_since(start);

  std::mt19937_64 rng(o.seed);
  const std::vector<float> latent =
      random_values(rng, static_cast<size_t>(32 * o.height * o.width));
  session.write("img", Box::full(Shape{tokens, config.in_channels}),
                pack_latents(latent, 32, o.height, o.width));
  session.write("txt", Box::full(Shape{o.text, config.joint_attention_dim}),
                random_values(rng, static_cast<size_t>(o.text * config.joint_attention_dim)));
  session.write("img_ids", Box::full(Shape{tokens, 4}), image_ids(o.height, o.width));
  session.write("txt_ids", Box::full(Shape{o.text, 4}), text_ids(o.text));
  const Box out = Box::full(Shape{tokens, config.in_channels});

  std::printf(
      "flux_bench: %lld image tokens (latent %lldx%lld), %lld text tokens, %zu weight tensors, "
      "build + session %.1f ms\n",
      static_cast<long long>(tokens), static_cast<long long>(o.height),
      static_cast<long long>(o.width), static_cast<long long>(o.text), weights.shapes.size(),
      build_ms);
  std::printf("| %-34s | %10s | %14s |\n", "read after", "ms", "elements");
  std::printf("|%s|%s|%s|\n", std::string(36, '-').c_str(), std::string(12, '-').c_str(),
              std::string(16, '-').c_str());
  auto measure = [&](const char* what, auto&& edit, int repeats) {
    std::vector<double> times;
    int64_t elements = 0;
    for (int r = 0; r < repeats; ++r) {
      edit(r);
      start = std::chrono::steady_clock::now();
      session.read<float>("velocity", out);
      times.push_back(ms_since(start));
      elements = session.stats().elements_computed;
    }
    std::sort(times.begin(), times.end());
    std::printf("| %-34s | %10.3f | %14lld |\n", what, times[times.size() / 2],
                static_cast<long long>(elements));
  };
  measure(
      "first full read", [](int) {}, 1);
  measure(
      "nothing changed", [](int) {}, o.repeats);
  measure(
      "timestep changed",
      [&](int r) {
        const float t = 0.5f + 0.01f * static_cast<float>(r);
        session.write("timestep", Box{{0, 1}}, std::vector<float>{t});
      },
      o.repeats);
  measure(
      "last text token changed",
      [&](int) {
        session.write("txt", Box{{o.text - 1, o.text}, {0, config.joint_attention_dim}},
                      random_values(rng, static_cast<size_t>(config.joint_attention_dim)));
      },
      o.repeats);
  measure(
      "one image token changed",
      [&](int) {
        session.write("img", Box{{tokens / 2, tokens / 2 + 1}, {0, config.in_channels}},
                      random_values(rng, static_cast<size_t>(config.in_channels)));
      },
      o.repeats);

  // Side by side with diffusers (when .venv/bin/python is there), alternating rounds: a sampler
  // step here (new image tokens and timestep: everything but the text-only path recomputed)
  // against one forward of Flux2Transformer2DModel with the same config and token counts.
  if (!std::filesystem::exists(".venv/bin/python")) {
    std::printf("(no .venv/bin/python: diffusers peer skipped)\n");
    return 0;
  }
  const std::string peer = absl::StrCat(".venv/bin/python bench/peer_diffusers_flux.py --latent ", o.height, " ", o.width,
                                        " --text ", o.text, " --layers ", o.double_layers, " ", o.single_layers,
                                        " --threads ", o.threads > 0 ? o.threads : 1, " --repeats ", o.repeats);
  std::vector<double> ours, theirs;
  for (int round = 0; round < 3; ++round) {
    for (int r = 0; r < o.repeats; ++r) {
      session.write("img", out, pack_latents(random_values(rng, static_cast<size_t>(32 * o.height * o.width)), 32, o.height,
                                             o.width));
      session.write("timestep", Box{{0, 1}}, std::vector<float>{0.9f - 0.1f * static_cast<float>(r)});
      start = std::chrono::steady_clock::now();
      session.read<float>("velocity", out);
      ours.push_back(ms_since(start));
    }
    FILE* f = popen(peer.c_str(), "r");
    char line[256] = {};
    double lo = 0, mid = 0;
    if (f != nullptr && std::fgets(line, sizeof(line), f) != nullptr && std::sscanf(line, "peer_ms %lf %lf", &lo, &mid) == 2) {
      theirs.push_back(lo);
      theirs.push_back(mid);
    }
    if (f != nullptr) pclose(f);
  }
  auto stats = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? std::string("n/a") : absl::StrFormat("min %.2f ms, median %.2f ms", v.front(), v[v.size() / 2]);
  };
  double load[1] = {0};
  getloadavg(load, 1);
  std::printf("sampler step, %d thread(s): tessera %s; diffusers (PyTorch) forward %s  (load average %.2f)\n",
              o.threads > 0 ? o.threads : 1, stats(ours).c_str(), stats(theirs).c_str(), load[0]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse(argc, argv, &options) || options.height <= 0 || options.width <= 0 ||
      options.height % 2 != 0 || options.width % 2 != 0) {
    print_usage(stderr);
    return 2;
  }
  try {
    return run(options);
  } catch (const Error& e) {
    std::fprintf(stderr, "flux_bench: %s\n", e.what());
    return 1;
  }
}
