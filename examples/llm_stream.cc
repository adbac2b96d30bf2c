// Streams a completion from a real GGUF model token by token. Each decode step writes one token
// into the "ids" input and reads one row of logits: the session recomputes one row of every
// node and reuses the kept K/V rows. Prints per-token latency and elements computed.
//
//   llm_stream --model models/SmolLM2-135M-Instruct.Q4_1.gguf --prompt "..." [--chat]
//              [--tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S]
//              [--capacity C] [--threads N] [--kv f32|f16|q8_0] [--interactive] [--edit "new prompt"] [--quiet]
//              [--backend NAME]
//
// --interactive reads one prompt per line from stdin; each new prompt is compared with the
// tokens already in the session and only the changed suffix is recomputed. --edit runs the
// prompt, then the edited prompt, and reports how much of the first was reused.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "loaders/llm.h"
#include "loaders/tokenizer.h"

using namespace tessera;

namespace {

constexpr const char* kUsage =
    "usage: llm_stream --model FILE.gguf [--prompt TEXT] [--chat | --raw] [--tokens N]\n"
    "                  [--temperature T] [--top-k K] [--top-p P] [--seed S] [--capacity C]\n"
    "                  [--threads N] [--kv f32|f16|q8_0] [--interactive] [--edit \"new prompt\"]\n"
    "                  [--quiet] [--backend NAME] [--smoke]\n"
    "Streams a completion token by token, each step recomputing one row of every node.\n"
    "--interactive reads one prompt per line and recomputes only the changed suffix; --edit runs\n"
    "the prompt, then the edited one, and reports how much of the first was reused.\n";

struct Options {
  std::string model, prompt = "What is the capital of France?", edit, backend;
  bool chat = true, interactive = false, quiet = false, smoke = false;
  int tokens = 48;
  int threads = 0;  // 0: one per hardware thread
  double temperature = 0, top_p = 1;
  int top_k = 0;
  uint64_t seed = 1;
  int64_t capacity = 1024;
  DType kv = DType::F32;  // K/V cache dtype
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw Error("[llm_stream] " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      std::exit(0);
    }
    if (a == "--model") o.model = next();
    else if (a == "--prompt") o.prompt = next();
    else if (a == "--edit") o.edit = next();
    else if (a == "--raw") o.chat = false;
    else if (a == "--chat") o.chat = true;
    else if (a == "--tokens") o.tokens = std::stoi(next());
    else if (a == "--temperature") o.temperature = std::stod(next());
    else if (a == "--top-k") o.top_k = std::stoi(next());
    else if (a == "--top-p") o.top_p = std::stod(next());
    else if (a == "--threads") o.threads = std::stoi(next());
    else if (a == "--seed") o.seed = std::stoull(next());
    else if (a == "--capacity") o.capacity = std::stoll(next());
    else if (a == "--kv") {
      const std::string v = next();
      if (v != "f32" && v != "f16" && v != "q8_0") throw Error("[llm_stream] --kv takes f32, f16 or q8_0, got " + v);
      o.kv = v == "f16" ? DType::F16 : v == "q8_0" ? DType::Q8_0 : DType::F32;
    }
    else if (a == "--interactive") o.interactive = true;
    else if (a == "--quiet") o.quiet = true;
    else if (a == "--smoke") o.smoke = true;
    else if (a == "--backend") o.backend = next();
    else throw Error("[llm_stream] unknown argument " + a);
  }
  return o;
}

// Greedy when temperature is 0; otherwise temperature, then top-k, then top-p (nucleus). Only
// as many candidates as the cut needs are ordered (the whole vocabulary, sorted per token, took
// a third of a sampled SmolLM2 step).
int32_t sample(const std::vector<float>& logits, const Options& o, std::mt19937_64& rng) {
  if (o.temperature <= 0) return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  const size_t vocab = logits.size();
  const float top = *std::max_element(logits.begin(), logits.end());
  auto weight = [&](int32_t i) { return std::exp((logits[static_cast<size_t>(i)] - top) / o.temperature); };
  const size_t k = o.top_k > 0 ? std::min<size_t>(static_cast<size_t>(o.top_k), vocab) : vocab;
  if (k == vocab && o.top_p >= 1) {  // the full distribution: no ordering at all
    std::vector<double> p(vocab);
    for (size_t i = 0; i < vocab; ++i) p[i] = weight(static_cast<int32_t>(i));
    std::discrete_distribution<size_t> pick(p.begin(), p.end());
    return static_cast<int32_t>(pick(rng));
  }
  // Candidates by logit, highest first (ties: higher id first); the first n ordered.
  std::vector<int32_t> order(vocab);
  for (size_t i = 0; i < vocab; ++i) order[i] = static_cast<int32_t>(i);
  auto before = [&](int32_t a, int32_t b) {
    const float x = logits[static_cast<size_t>(a)], y = logits[static_cast<size_t>(b)];
    return x > y || (x == y && a > b);
  };
  auto order_first = [&](size_t n) {
    std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n - 1), order.end(), before);
    std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), before);
  };
  // Top-k renormalises over its k candidates; top-p alone over the whole vocabulary, so the cut
  // can be found among the first n once their mass reaches top_p.
  double total = 0;
  if (k < vocab) {
    order_first(k);
    for (size_t i = 0; i < k; ++i) total += weight(order[i]);
  } else {
    for (size_t i = 0; i < vocab; ++i) total += weight(static_cast<int32_t>(i));
  }
  size_t n = std::min<size_t>(k, 64);
  for (;;) {
    if (k == vocab) order_first(n);
    double cumulative = 0;
    size_t keep = 0;
    while (keep < n && cumulative < o.top_p) cumulative += weight(order[keep++]) / total;
    if (cumulative >= o.top_p || n == k) {
      std::vector<double> p(keep);
      for (size_t i = 0; i < keep; ++i) p[i] = weight(order[i]);
      std::discrete_distribution<size_t> pick(p.begin(), p.end());
      return order[pick(rng)];
    }
    n = std::min(k, 8 * n);
  }
}

struct Stream {
  const LlmModel& model;
  const Tokenizer& tokenizer;
  GraphSession& session;
  const Options& options;
  std::vector<int32_t> tokens;  // what the "ids" input holds, positions 0..size-1
  std::mt19937_64 rng;

  std::vector<float> logits(int64_t row) {
    return session.read<float>("logits", Box{{row, row + 1}, {0, model.config().vocab}});
  }

  // Makes the session hold `prompt`, writing only from the first position that differs.
  // Returns the number of reused prompt positions.
  int64_t set_prompt(const std::vector<int32_t>& prompt) {
    size_t same = 0;
    while (same < prompt.size() && same < tokens.size() && prompt[same] == tokens[same]) ++same;
    if (same == prompt.size() && same > 0) --same;  // the last row must be read again anyway
    tokens = prompt;
    const int64_t n = static_cast<int64_t>(prompt.size());
    const int64_t p = static_cast<int64_t>(same);
    session.write("ids", Box{{p, n}}, std::vector<int32_t>(prompt.begin() + p, prompt.end()));
    return p;
  }

  void generate(const std::vector<int32_t>& prompt) {
    const auto start = std::chrono::steady_clock::now();
    const int64_t reused = set_prompt(prompt);
    const int64_t n = static_cast<int64_t>(tokens.size());
    if (n + 1 >= model.capacity()) throw Error("[llm_stream] prompt does not fit the capacity");
    std::vector<float> row = logits(n - 1);
    const double prefill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("[prompt: %lld tokens, %lld reused, %lld recomputed; %lld elements in %.1f ms, %.1f tokens/s]\n",
                static_cast<long long>(n), static_cast<long long>(reused), static_cast<long long>(n - reused),
                static_cast<long long>(session.stats().elements_computed), prefill_s * 1e3,
                static_cast<double>(n - reused) / prefill_s);
    TokenStreamDecoder text(tokenizer);
    struct Step {
      int32_t token;
      double ms;
      int64_t elements;
    };
    std::vector<Step> steps;
    for (int i = 0; i < options.tokens && static_cast<int64_t>(tokens.size()) < model.capacity(); ++i) {
      const int32_t next = sample(row, options, rng);
      if (tokenizer.is_eog(next)) break;
      std::fputs(text.push(next).c_str(), stdout);
      std::fflush(stdout);
      const int64_t t = static_cast<int64_t>(tokens.size());
      tokens.push_back(next);
      const auto step_start = std::chrono::steady_clock::now();
      session.write("ids", Box{{t, t + 1}}, std::vector<int32_t>{next});
      row = logits(t);
      const double ms = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count() * 1e3;
      steps.push_back({next, ms, session.stats().elements_computed});
    }
    std::fputs(text.flush().c_str(), stdout);
    std::printf("\n");
    if (steps.empty()) return;
    double total_ms = 0;
    for (const Step& s : steps) total_ms += s.ms;
    if (!options.quiet) {
      std::printf("%6s %8s %12s  %s\n", "pos", "ms", "elements", "token");
      for (size_t i = 0; i < steps.size(); ++i)
        std::printf("%6lld %8.2f %12lld  %s\n", static_cast<long long>(n + static_cast<int64_t>(i)), steps[i].ms,
                    static_cast<long long>(steps[i].elements), std::string(tokenizer.token_piece(steps[i].token)).c_str());
    }
    std::printf("[decode: %zu tokens, %.2f ms/token, %.1f tokens/s, %lld elements/token]\n", steps.size(),
                total_ms / static_cast<double>(steps.size()), 1e3 * static_cast<double>(steps.size()) / total_ms,
                static_cast<long long>(steps.back().elements));
  }
};

std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, const std::string& text, bool chat) {
  if (!chat) return tokenizer.encode(text, true, false);
  ChatMessage message{"user", text};
  return tokenizer.encode(tokenizer.apply_chat_template(std::span<const ChatMessage>(&message, 1), true), true, true);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o = parse(argc, argv);
    if (o.smoke) {
      // The smoke test of the suite: a short run when the models are present.
      if (o.model.empty()) o.model = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
      FILE* f = std::fopen(o.model.c_str(), "rb");
      if (f == nullptr) {
        std::printf("llm_stream --smoke: %s missing, nothing to do\n", o.model.c_str());
        return 0;
      }
      std::fclose(f);
      o.tokens = 8;
      o.capacity = 128;
      o.quiet = true;
    }
    if (o.model.empty()) throw Error("[llm_stream] --model is required");
    auto model = LlmModel::load(o.model, o.capacity, LlmOptions{.kv_dtype = o.kv});
    Tokenizer tokenizer = Tokenizer::from_gguf(model->file());
    SessionOptions session_options;
    session_options.backend_name = o.backend;  // empty: the CPU backend
    if (o.threads > 0) session_options.threads = o.threads;
    auto session = model->new_session(session_options);
    const LlmConfig& c = model->config();
    std::printf("[%s: %lld layers, dim %lld, %lld/%lld heads, vocab %lld, capacity %lld, backend %s]\n",
                c.arch_name.c_str(), static_cast<long long>(c.layers), static_cast<long long>(c.dim),
                static_cast<long long>(c.heads), static_cast<long long>(c.kv_heads), static_cast<long long>(c.vocab),
                static_cast<long long>(model->capacity()), session->backend().description().c_str());
    Stream stream{*model, tokenizer, *session, o, {}, std::mt19937_64(o.seed)};
    if (o.interactive) {
      std::printf("Type a prompt per line (an edit of the previous one reuses its unchanged prefix); empty line quits.\n");
      std::string line;
      while (std::printf("> "), std::fflush(stdout), std::getline(std::cin, line) && !line.empty()) {
        try {
          stream.generate(encode_prompt(tokenizer, line, o.chat));
        } catch (const Error& e) {
          std::printf("error: %s\n", e.what());
        }
      }
      return 0;
    }
    std::printf("> %s\n", o.prompt.c_str());
    stream.generate(encode_prompt(tokenizer, o.prompt, o.chat));
    if (!o.edit.empty()) {
      std::printf("> %s\n", o.edit.c_str());
      stream.generate(encode_prompt(tokenizer, o.edit, o.chat));
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
