// LLM throughput on this machine: prefill of 128 tokens, decode at context 128 and at context
// 1024, for each GGUF model given on the command line. Prints tokens/s, the planner's share of
// a decode step (region analysis + plan lookup), the plan cache's hits, and the time of a read
// that needs no recomputation; not a test.
//
//   llm_bench models/SmolLM2-135M-Instruct.Q4_1.gguf models/gemma-3-270m-q4_k_m.gguf
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "loaders/llm.h"
#include "loaders/tokenizer.h"

using namespace tessera;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Decodes `steps` greedy tokens after position t - 1; returns seconds per token. Appends the
// planning seconds of every step to `plan_seconds`.
double decode(GraphSession& s, std::vector<int32_t>& ids, int64_t vocab, int steps, std::vector<double>& plan_seconds) {
  std::vector<float> row = s.read<float>("logits", Box{{static_cast<int64_t>(ids.size()) - 1, static_cast<int64_t>(ids.size())}, {0, vocab}});
  double total = 0;
  for (int i = 0; i < steps; ++i) {
    int32_t next = 0;
    for (int64_t v = 1; v < vocab; ++v)
      if (row[static_cast<size_t>(v)] > row[static_cast<size_t>(next)]) next = static_cast<int32_t>(v);
    const int64_t t = static_cast<int64_t>(ids.size());
    ids.push_back(next);
    const auto start = std::chrono::steady_clock::now();
    s.write("ids", Box{{t, t + 1}}, std::vector<int32_t>{next});
    row = s.read<float>("logits", Box{{t, t + 1}, {0, vocab}});
    total += seconds_since(start);
    plan_seconds.push_back(s.stats().plan_seconds);
  }
  return total / steps;
}

// Reads row t of a kept node (the first layer's K: nothing to recompute) `n` times; returns
// (min, median) seconds. (Logits are transient in LLM sessions: reading them again recomputes.)
std::pair<double, double> noop_reads(GraphSession& s, NodeId node, int64_t t, int n) {
  const Node& k = s.graph().node(node);
  Box box = Box::full(k.shape);
  box[0] = Interval(t, t + 1);
  std::vector<float> row(static_cast<size_t>(box.volume()));
  std::vector<double> times;
  for (int i = 0; i < n; ++i) {
    const auto start = std::chrono::steady_clock::now();
    s.read_node(node, box, std::as_writable_bytes(std::span<float>(row)));
    times.push_back(seconds_since(start));
  }
  return {*std::min_element(times.begin(), times.end()), median(times)};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0) {
    std::fprintf(argc < 2 ? stderr : stdout,
                 "usage: llm_bench [--mapped-weights] MODEL.gguf [MODEL.gguf ...]\n"
                 "--mapped-weights: read weights from the file mapping instead of huge-page copies.\n"
                 "Prefill 128 tokens, decode at context 128 and 1024; prints tokens/s, the planner's\n"
                 "share of a decode step, plan cache hits and the time of a read with nothing to do.\n");
    return argc < 2 ? 2 : 0;
  }
  bool huge_pages = true;
  try {
    for (int m = 1; m < argc; ++m) {
      if (std::strcmp(argv[m], "--mapped-weights") == 0) {
        huge_pages = false;
        continue;
      }
      auto model = LlmModel::load(argv[m], 1100);
      Tokenizer tokenizer = Tokenizer::from_gguf(model->file());
      const int64_t vocab = model->config().vocab;
      std::string text;
      while (static_cast<int64_t>(tokenizer.encode(text, true, false).size()) < 1100)
        text += "The quick brown fox jumps over the lazy dog while the engine keeps what it computed. ";
      std::vector<int32_t> corpus = tokenizer.encode(text, true, false);

      SessionOptions options;
      options.pool = MemoryPool::create(MemoryPoolOptions{.huge_page_weights = huge_pages});
      auto s = model->new_session(options);
      std::vector<int32_t> ids(corpus.begin(), corpus.begin() + 128);
      auto start = std::chrono::steady_clock::now();
      s->write("ids", Box{{0, 128}}, ids);
      s->read<float>("logits", Box{{127, 128}, {0, vocab}});
      const double prefill = seconds_since(start);
      std::vector<double> plan_128, plan_1024;
      const double decode_128 = decode(*s, ids, vocab, 16, plan_128);

      // Grow the context to 1024 (a second prefill of the remaining rows), then decode.
      ids.assign(corpus.begin(), corpus.begin() + 1024);
      start = std::chrono::steady_clock::now();
      s->write("ids", Box{{128, 1024}}, std::vector<int32_t>(ids.begin() + 128, ids.end()));
      s->read<float>("logits", Box{{1023, 1024}, {0, vocab}});
      const double prefill_896 = seconds_since(start);
      const double decode_1024 = decode(*s, ids, vocab, 16, plan_1024);
      const auto [noop_min, noop_median] = noop_reads(*s, model->keys()[0].id, static_cast<int64_t>(ids.size()) - 1, 200);
      const PlanCacheStats& plans = s->stats().plans;

      std::printf("%s (%s, %lld layers)\n", argv[m], model->config().arch_name.c_str(),
                  static_cast<long long>(model->config().layers));
      std::printf("  prefill 128 tokens:        %8.1f tokens/s  (%.3f s)\n", 128 / prefill, prefill);
      std::printf("  decode at context 128:     %8.1f tokens/s  (%.2f ms/token)\n", 1 / decode_128, decode_128 * 1e3);
      std::printf("  prefill 128 -> 1024:       %8.1f tokens/s  (%.3f s)\n", 896 / prefill_896, prefill_896);
      std::printf("  decode at context 1024:    %8.1f tokens/s  (%.2f ms/token)\n", 1 / decode_1024, decode_1024 * 1e3);
      std::printf("  planning per decode step:  %8.1f us at 128 (%.2f%%), %.1f us at 1024 (%.2f%%), median\n",
                  median(plan_128) * 1e6, 100 * median(plan_128) / decode_128, median(plan_1024) * 1e6,
                  100 * median(plan_1024) / decode_1024);
      std::printf("  read with nothing to do:   %8.2f us min, %.2f us median (200 reads of a kept K row)\n", noop_min * 1e6,
                  noop_median * 1e6);
      std::printf("  plan cache:                %8lld hits, %lld misses, %lld plans\n",
                  static_cast<long long>(plans.hits), static_cast<long long>(plans.misses),
                  static_cast<long long>(plans.size));
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
