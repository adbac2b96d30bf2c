// Core demo: a small transformer with random weights decodes token by token. Per token it
// prints the elements the session computed against what a fresh session computing the whole
// prefix needs, and checks that both give bitwise the same logits. Then it edits one token of
// the prompt and prints the planner's explanation of what the next read will recompute and
// why (in full with --explain), and the plan cache's figures.
//
//   tiny_decode [--smoke] [--explain]
#include <cstdio>
#include <cstring>
#include <string_view>

#include "engine/session.h"
#include "examples/tiny_transformer.h"

using namespace tessera;
using namespace tessera::examples;

int main(int argc, char** argv) {
  bool smoke = false, explain = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--smoke") smoke = true;
    else if (a == "--explain") explain = true;
    else {
      std::printf("usage: tiny_decode [--smoke] [--explain]\n"
                  "Decodes with a random-weight transformer, comparing each step with a fresh full\n"
                  "recompute; then edits a prompt token and explains what the next read recomputes.\n");
      return a == "--help" ? 0 : 2;
    }
  }
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

    // Edit prompt token 4 and ask the planner what reading the last row would recompute.
    session.write("ids", Box{{4, 5}}, std::vector<int32_t>{7});
    const Box last{{t - 1, t}, {0, config.vocab}};
    const Explanation why = session.explain("logits", last);
    int64_t nodes = 0;
    for (const Explanation::Entry& e : why.entries) nodes += e.compute.empty() ? 0 : 1;
    std::printf("edit of token 4: the next read recomputes %lld elements in %lld nodes (rows >= 4 only)\n",
                static_cast<long long>(why.elements), static_cast<long long>(nodes));
    if (explain) std::printf("%s", why.to_string().c_str());
    else if (!why.entries.empty())
      std::printf("  e.g. %%%d %s: %s (--explain prints every node)\n", why.entries.back().node,
                  why.entries.back().op.c_str(), why.entries.back().why.c_str());
    session.read<float>("logits", last);
    if (session.stats().elements_computed != why.elements) {
      std::fprintf(stderr, "explain predicted %lld elements, the read computed %lld\n",
                   static_cast<long long>(why.elements), static_cast<long long>(session.stats().elements_computed));
      return 1;
    }
    const PlanCacheStats& plans = session.stats().plans;
    std::printf("plan cache: %lld plans, %lld hits, %lld misses\n", static_cast<long long>(plans.size),
                static_cast<long long>(plans.hits), static_cast<long long>(plans.misses));
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
