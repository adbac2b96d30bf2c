// Core demo: a small transformer with random weights decodes token by token. Per token it
// prints the elements the session computed against what a fresh session computing the whole
// prefix needs, and checks that both give bitwise the same logits.
#include <cstdio>
#include <cstring>
#include <string_view>

#include "engine/session.h"
#include "examples/tiny_transformer.h"

using namespace tessera;
using namespace tessera::examples;

int main(int argc, char** argv) {
  const bool smoke = argc > 1 && std::string_view(argv[1]) == "--smoke";
  TinyConfig config;
  config.capacity = smoke ? 32 : 128;
  const int new_tokens = smoke ? 8 : 48;
  try {
    Graph g;
    build_tiny_transformer(g, config);
    GraphSession session(g);
    std::vector<int32_t> tokens = {3, 14, 15, 9, 26, 5, 35, 8};
    int64_t t = static_cast<int64_t>(tokens.size());
    session.write("ids", Box{{0, t}}, tokens);
    std::vector<float> logits = session.read<float>("logits", Box{{t - 1, t}, {0, config.vocab}});
    std::printf("prompt of %lld tokens: %lld elements computed, %.3f ms\n", static_cast<long long>(t),
                static_cast<long long>(session.stats().elements_computed), session.stats().seconds * 1e3);
    std::printf("%5s %6s %12s %14s %8s %10s %s\n", "pos", "token", "incremental", "full-recompute", "ratio",
                "ms", "bitwise");
    int64_t sum_incremental = 0, sum_full = 0;
    for (int i = 0; i < new_tokens && t < config.capacity; ++i, ++t) {
      const int32_t next = argmax_row(logits);
      tokens.push_back(next);
      session.write("ids", Box{{t, t + 1}}, std::vector<int32_t>{next});
      logits = session.read<float>("logits", Box{{t, t + 1}, {0, config.vocab}});
      const SessionStats stats = session.stats();

      GraphSession fresh(g);
      fresh.write("ids", Box{{0, t + 1}}, tokens);
      std::vector<float> want = fresh.read<float>("logits", Box{{t, t + 1}, {0, config.vocab}});
      const bool same = std::memcmp(want.data(), logits.data(), want.size() * sizeof(float)) == 0;
      sum_incremental += stats.elements_computed;
      sum_full += fresh.stats().elements_computed;
      std::printf("%5lld %6d %12lld %14lld %7.1fx %10.3f %s\n", static_cast<long long>(t), next,
                  static_cast<long long>(stats.elements_computed),
                  static_cast<long long>(fresh.stats().elements_computed),
                  static_cast<double>(fresh.stats().elements_computed) / static_cast<double>(stats.elements_computed),
                  stats.seconds * 1e3, same ? "equal" : "DIFFERENT");
      if (!same) return 1;
    }
    std::printf("total: %lld elements incremental vs %lld full recompute (%.1fx less work)\n",
                static_cast<long long>(sum_incremental), static_cast<long long>(sum_full),
                static_cast<double>(sum_full) / static_cast<double>(sum_incremental));
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
