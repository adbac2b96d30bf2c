// LLM throughput on this machine, for each GGUF model given, with each thread count: prefill of
// 128 and of 512 tokens (each from an empty context), greedy decode at context 128 and 1024;
// not a test. Peers run the same measurements on the same files with the same thread count in
// Python subprocesses (.venv/bin/python): llama.cpp through llama-cpp-python
// (bench/peer_llama_cpp.py) and, on request, PyTorch + transformers loading the GGUF file
// dequantised to float32 (bench/peer_transformers.py). Each loads the model once, then rounds
// alternate (ours, then each peer's) so that all see the same machine load. Prints min and
// median over the rounds, the load average seen and the decode bandwidth bound: the weight bytes
// one decoded token reads over the read bandwidth measured in this run (a read loop over a 1 GiB
// huge-page buffer with the same thread count, once at the start and again right before and
// right after each of our rounds, the round keeping the better of its two: the bound uses the
// median of the rounds' reads, and each round's decode is also put against its own read's
// bound, since the machine's bandwidth moves within a run; "with K/V" adds the K/V cache's bytes
// at that context to the weights'). Then, per model, for the last session: the
// planner's share of a decode step, the plan cache's hits and the time of a read that needs no
// recomputation.
//
//   llm_bench [--threads LIST] [--rounds R] [--steps S] [--peers LIST] [--mapped-weights] [--cpu-time]
//             [--kv f32|f16|q8_0] [--backend NAME [--backend-full]] MODEL.gguf...
//
// --kv picks our K/V cache's dtype (default f32; llama.cpp's default cache, which its peer
// uses, is f16; with --kv q8_0 its peer keeps a q8_0 cache too, with flash attention, which
// llama.cpp needs for a quantised V).
//
// --backend NAME also runs a session on that backend (a GPU plugin: opencl, vulkan, cuda; the ops
// it lacks run on the CPU fallback with the same thread count) in the same rounds, after ours, as
// a row of its own, and prints its device and the steps that fell back per read. On a device it
// measures prefill 128 and decode at 128 only, unless --backend-full (PoCL and lavapipe emulate a
// GPU on these CPUs: the long contexts take minutes there).
//
// Our linear kernels read TESSERA_LINEAR from the environment (24-bit activations when unset,
// TESSERA_LINEAR=int8 for int8 activations, =f32 for float ones); the header says which ran.
#include <immintrin.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/llm_peers.h"
#include "bench/profile_table.h"
#include "kernels/cpu/cpu_kernels.h"
#include "loaders/llm.h"
#include "loaders/tokenizer.h"

using namespace tessera;
using namespace tessera::bench;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// --cpu-time: our rounds are timed in process CPU seconds instead of wall-clock seconds. On a
// machine shared with other work a 1-thread run then counts only the time it actually ran (with
// more threads it also counts the workers' waiting, so it is meant for 1 thread).
bool g_cpu_time = false;

double now_seconds() {
  if (!g_cpu_time) return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double min_of(const std::vector<double>& v) { return v.empty() ? 0 : *std::min_element(v.begin(), v.end()); }
double max_of(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }
double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

double load_average() {
  double load[1] = {0};
  return getloadavg(load, 1) == 1 ? load[0] : -1;
}

// ---- read bandwidth --------------------------------------------------------------------------

volatile uint64_t g_sink = 0;

__attribute__((target("avx2"))) uint64_t sum_avx2(const std::byte* p, size_t bytes) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (size_t i = 0; i + 128 <= bytes; i += 128) {
    a = _mm256_add_epi64(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_add_epi64(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    c = _mm256_add_epi64(c, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    d = _mm256_add_epi64(d, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

// Bytes per second of reading a 1 GiB buffer of transparent huge pages, split across `threads`
// threads; the best of `passes`. The buffer is made once and kept (each round measures again,
// around our decode: llm_bench pairs each round with its own reads).
double read_bandwidth(int threads, int passes) {
  constexpr size_t kBytes = size_t{1} << 30, kHuge = size_t{2} << 20;
  static std::byte* buffer = [] {
    auto* b = static_cast<std::byte*>(std::aligned_alloc(kHuge, kBytes));
    if (b != nullptr) {
      madvise(b, kBytes, MADV_HUGEPAGE);
      // No two pages alike: a buffer of equal pages (a memset) kept for the whole run was
      // deduplicated under us (2-thread reads late in a run came out at 42-62 GB/s, from cache).
      auto* words = reinterpret_cast<uint64_t*>(b);
      for (size_t i = 0; i < kBytes / 8; ++i) words[i] = i * 0x9E3779B97F4A7C15ull;
    }
    return b;
  }();
  if (buffer == nullptr) return 0;
  double best = 0;
  std::vector<uint64_t> sums(static_cast<size_t>(threads));
  for (int pass = 0; pass < passes; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> team;
    const size_t share = kBytes / static_cast<size_t>(threads);
    for (int t = 0; t < threads; ++t)
      team.emplace_back([&, t] { sums[static_cast<size_t>(t)] = sum_avx2(buffer + share * static_cast<size_t>(t), share); });
    for (std::thread& member : team) member.join();
    best = std::max(best, static_cast<double>(kBytes) / seconds_since(start));
  }
  for (uint64_t s : sums) g_sink = g_sink + s;  // the sums are used: the loads stay
  return best;
}

// Weight bytes a decode step reads: every tensor of the file once (the linear weights, norms),
// except that an untied token embedding is read one row at a time (a tied one is also the output
// projection, read whole).
double decode_weight_bytes(const LlmModel& model) {
  double bytes = 0;
  for (const GgufTensor& t : model.file().tensors()) {
    if (t.name == "token_embd.weight" && !model.config().tied_output)
      bytes += static_cast<double>(t.row_bytes());
    else
      bytes += static_cast<double>(t.size_bytes);
  }
  return bytes;
}

// K/V cache bytes a decode step at `context` reads: every layer's visible keys and values.
double kv_cache_bytes(const LlmModel& model, int64_t context) {
  const LlmConfig& c = model.config();
  double bytes = 0;
  for (int64_t layer = 0; layer < c.layers; ++layer) {
    const int64_t keys = c.is_sliding(layer) ? std::min(context, c.sliding_window) : context;
    bytes += 2.0 * static_cast<double>(dtype_bytes(model.options().kv_dtype, keys * c.kv_heads * c.head_dim));
  }
  return bytes;
}

// ---- our measurements ------------------------------------------------------------------------


// Seconds of each decode step's engine overheads: planning (region analysis and plan lookup)
// and the write of the new id (its dirt through the graph).
struct Overheads {
  std::vector<double> plan, write;
  void clear() {
    plan.clear();
    write.clear();
  }
};

// Greedy decode of `steps` tokens after the ids [0, t); returns seconds per token. Appends each
// step's overheads to `overheads`.
double decode(GraphSession& s, std::vector<int32_t> ids, int64_t vocab, int steps, Overheads& overheads) {
  const int64_t last = static_cast<int64_t>(ids.size()) - 1;
  std::vector<float> row = s.read<float>("logits", Box{{last, last + 1}, {0, vocab}});
  double total = 0;
  for (int i = 0; i < steps; ++i) {
    int32_t next = 0;
    for (int64_t v = 1; v < vocab; ++v)
      if (row[static_cast<size_t>(v)] > row[static_cast<size_t>(next)]) next = static_cast<int32_t>(v);
    const int64_t t = static_cast<int64_t>(ids.size());
    ids.push_back(next);
    const double start = now_seconds();
    s.write("ids", Box{{t, t + 1}}, std::vector<int32_t>{next});
    const double written = now_seconds();
    // Into the same buffer every step (as a decode loop would): the engine computes the logits
    // row straight into it, no allocation or copy.
    s.read("logits", Box{{t, t + 1}, {0, vocab}}, std::as_writable_bytes(std::span<float>(row)));
    total += now_seconds() - start;
    overheads.plan.push_back(s.stats().plan_seconds);
    overheads.write.push_back(written - start);
  }
  return total / steps;
}

// Writes ids [0, n) (everything after them becomes stale) and reads logits row n - 1.
double prefill(GraphSession& s, const std::vector<int32_t>& corpus, int64_t n, int64_t vocab) {
  const double start = now_seconds();
  s.write("ids", Box{{0, n}}, std::vector<int32_t>(corpus.begin(), corpus.begin() + n));
  s.read<float>("logits", Box{{n - 1, n}, {0, vocab}});
  return now_seconds() - start;
}

// `full`: also prefill 512 and decode at 1024.
Figures measure(GraphSession& s, const std::vector<int32_t>& corpus, int64_t vocab, int steps,
                Overheads& at_128, Overheads& at_1024, bool full = true) {
  Figures f;
  f.prefill128 = prefill(s, corpus, 128, vocab);
  f.prefill_fallback = s.stats().fallback_steps;
  f.decode128 = decode(s, {corpus.begin(), corpus.begin() + 128}, vocab, steps, at_128);
  f.decode_fallback = s.stats().fallback_steps;
  f.decode_copies = s.stats().copies;
  if (!full) return f;
  f.prefill512 = prefill(s, corpus, 512, vocab);
  s.write("ids", Box{{512, 1024}}, std::vector<int32_t>(corpus.begin() + 512, corpus.begin() + 1024));
  s.read<float>("logits", Box{{1023, 1024}, {0, vocab}});
  f.decode1024 = decode(s, {corpus.begin(), corpus.begin() + 1024}, vocab, steps, at_1024);
  return f;
}

// Reads row t of a kept node (the first layer's K: nothing to recompute) `n` times; returns
// (min, median) seconds. (Logits are transient in LLM sessions: reading them again recomputes.)
std::pair<double, double> noop_reads(GraphSession& s, NodeId node, int64_t t, int n) {
  const Node& k = s.graph().node(node);
  Box box = Box::full(k.shape);
  box[0] = Interval(t, t + 1);
  std::vector<std::byte> row(static_cast<size_t>(dtype_bytes(k.dtype, box.volume())));
  std::vector<double> times;
  for (int i = 0; i < n; ++i) {
    const auto start = std::chrono::steady_clock::now();
    s.read_node(node, box, row);
    times.push_back(seconds_since(start));
  }
  return {min_of(times), median_of(times)};
}

// Writes of one id at row t, back to back (caches warm, unlike a decode step's write, which
// follows a step that streamed every weight): min and median seconds.
std::pair<double, double> hot_writes(GraphSession& s, int64_t t, int n) {
  std::vector<double> times;
  for (int i = 0; i < n; ++i) {
    const auto start = std::chrono::steady_clock::now();
    s.write("ids", Box{{t, t + 1}}, std::vector<int32_t>{1});
    times.push_back(seconds_since(start));
  }
  return {min_of(times), median_of(times)};
}


struct Options {
  std::vector<int> threads = {1, 2};
  int rounds = 3, steps = 16;
  std::vector<std::string> peers = {"llama.cpp"};
  bool huge_pages = true;
  std::vector<std::string> models;
  std::string backend;  // a device backend measured beside ours
  bool backend_full = false;
  DType kv = DType::F32;  // our K/V cache
  int decode_only = 0;  // --decode-only N: N decode steps from context `context` only (for a profiler)
  int64_t context = 128;
  bool profile = false;  // --profile (with --decode-only): time per op
};

void print_usage(std::FILE* f) {
  std::fprintf(f,
               "usage: llm_bench [--threads LIST] [--rounds R] [--steps S] [--peers LIST] [--mapped-weights] "
               "[--cpu-time]\n"
               "                 [--kv f32|f16|q8_0] [--backend NAME [--backend-full]] MODEL.gguf...\n"
               "  --threads LIST   comma-separated thread counts (default 1,2)\n"
               "  --rounds R       rounds of (ours, llama.cpp) per model and thread count (default 3), after a warm-up\n"
               "  --steps S        decode steps averaged per context (default 16)\n"
               "  --peers LIST     peers run by .venv/bin/python, alternating rounds with ours: llama.cpp\n"
               "                   (bench/peer_llama_cpp.py), torch (transformers, float32: bench/peer_transformers.py);\n"
               "                   default llama.cpp; --no-peer: none\n"
               "  --mapped-weights read weights from the file mapping instead of huge-page copies (the int8\n"
               "                   linear reads its packed copy either way)\n"
               "  --backend NAME   also measure a session on that backend (opencl, vulkan, cuda: plugins on\n"
               "                   TESSERA_BACKEND_PATH): prefill 128 and decode @128, all four with --backend-full\n"
               "  --kv f32|f16|q8_0 our K/V cache's dtype (default f32; llama.cpp's peer keeps its default, f16,\n"
               "                   but for q8_0, which it then keeps too)\n"
               "  --cpu-time       time our rounds in process CPU seconds (for 1 thread on a busy machine;\n"
               "                   peers stay wall-clock)\n"
               "  --decode-only N  only a prefill of C tokens (--context C, default 128), then N decode steps on\n"
               "                   the first thread count, no peer and no bandwidth measurement (for a profiler)\n"
               "  --profile        with --decode-only: time every step (SessionOptions::profile) and print the time per op\n"
               "Prefill 128 and 512 tokens, decode at context 128 and 1024 (tokens/s, min and median over\n"
               "rounds), the decode bandwidth bound, the planner's share of a decode step, plan cache hits\n"
               "and the time of a read with nothing to do.\n");
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      print_usage(stdout);
      std::exit(0);
    } else if (arg == "--no-peer") {
      o.peers.clear();
    } else if (arg == "--cpu-time") {
      g_cpu_time = true;
    } else if (arg == "--mapped-weights") {
      o.huge_pages = false;
    } else if (arg == "--backend-full") {
      o.backend_full = true;
    } else if (arg == "--kv" && i + 1 < argc) {
      const std::string v = argv[++i];
      if (v != "f32" && v != "f16" && v != "q8_0") return false;
      o.kv = v == "f16" ? DType::F16 : v == "q8_0" ? DType::Q8_0 : DType::F32;
    } else if (arg == "--backend" && i + 1 < argc) {
      o.backend = argv[++i];
    } else if (arg == "--profile") {
      o.profile = true;
    } else if (arg == "--context" && i + 1 < argc) {
      o.context = std::max<int64_t>(1, std::atoll(argv[++i]));
    } else if (arg == "--decode-only" && i + 1 < argc) {
      o.decode_only = std::max(1, std::atoi(argv[++i]));
    } else if ((arg == "--threads" || arg == "--rounds" || arg == "--steps" || arg == "--peers") && i + 1 < argc) {
      const char* v = argv[++i];
      if (arg == "--peers") {
        o.peers.clear();
        std::stringstream list(v);
        for (std::string item; std::getline(list, item, ',');) {
          if (item == "none") continue;
          if (std::none_of(std::begin(kPeers), std::end(kPeers), [&](const PeerKind& k) { return item == k.label; }))
            return false;
          o.peers.push_back(item);
        }
      }
      if (arg == "--rounds") o.rounds = std::max(1, std::atoi(v));
      if (arg == "--steps") o.steps = std::max(1, std::atoi(v));
      if (arg == "--threads") {
        o.threads.clear();
        std::stringstream list(v);
        for (std::string item; std::getline(list, item, ',');)
          if (std::atoi(item.c_str()) > 0) o.threads.push_back(std::atoi(item.c_str()));
        if (o.threads.empty()) return false;
      }
    } else if (!arg.empty() && arg[0] != '-') {
      o.models.push_back(arg);
    } else {
      return false;
    }
  }
  return !o.models.empty();
}

// tokens/s from seconds: `tokens` / seconds.
double rate(double seconds, double tokens) { return seconds > 0 ? tokens / seconds : 0; }

// A text of at least `tokens` tokens.
std::vector<int32_t> corpus_of(const Tokenizer& tokenizer, int64_t tokens) {
  std::string text;
  while (static_cast<int64_t>(tokenizer.encode(text, true, false).size()) < tokens)
    text += "The quick brown fox jumps over the lazy dog while the engine keeps what it computed. ";
  return tokenizer.encode(text, true, false);
}

// --decode-only N: per model, a prefill of --context tokens then N greedy decode steps, on the first
// thread count; prints tokens/s and the median planning and write time per step.
int decode_only(const Options& options) {
  try {
    for (const std::string& path : options.models) {
      const int64_t context = options.context;
      auto model = LlmModel::load(path, context + options.decode_only + 1, LlmOptions{.kv_dtype = options.kv});
      const std::vector<int32_t> corpus = corpus_of(Tokenizer::from_gguf(model->file()), context);
      SessionOptions session_options;
      session_options.threads = options.threads.front();
      session_options.pool = MemoryPool::create(MemoryPoolOptions{.huge_page_weights = options.huge_pages});
      session_options.profile = options.profile;
      std::unique_ptr<GraphSession> s = model->new_session(session_options);
      prefill(*s, corpus, context, model->config().vocab);
      s->clear_profile();
      Overheads overheads;
      const double seconds = decode(*s, {corpus.begin(), corpus.begin() + context}, model->config().vocab,
                                    options.decode_only, overheads);
      std::printf("%s, %d thread(s): %d decode steps from context %lld: %.1f tokens/s; planning %.1f us, write %.1f "
                  "us per step (median)\n",
                  path.c_str(), options.threads.front(), options.decode_only, static_cast<long long>(context), rate(seconds, 1),
                  median_of(overheads.plan) * 1e6, median_of(overheads.write) * 1e6);
      if (!options.profile) continue;
      bench::print_profile(s->stats().profile, options.decode_only, "token");
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "llm_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse(argc, argv, options)) {
    print_usage(stderr);
    return 2;
  }
  if (options.decode_only > 0) return decode_only(options);
  std::vector<PeerKind> peers;  // those whose module imports
  for (const PeerKind& kind : kPeers) {
    if (std::find(options.peers.begin(), options.peers.end(), kind.label) == options.peers.end()) continue;
    const std::string check = absl::StrCat(".venv/bin/python -c 'import ", kind.module, "' >/dev/null 2>&1");
    if (access(".venv/bin/python", X_OK) == 0 && std::system(check.c_str()) == 0) peers.push_back(kind);
    else std::fprintf(stderr, "%s peer unavailable (%s fails)\n", kind.label, check.c_str());
  }
  if (!options.backend.empty() && std::getenv("TESSERA_BACKEND_PATH") == nullptr)
    setenv("TESSERA_BACKEND_PATH", TESSERA_PLUGIN_DIR, 1);
  const char* linear = std::getenv("TESSERA_LINEAR");
  std::vector<double> loads = {load_average()};
  std::vector<double> bandwidth;
  for (int threads : options.threads) bandwidth.push_back(read_bandwidth(threads, 5));
  std::printf("LLM figures, tokens/s as min-time / median-time rounds (%d rounds, %d decode steps each); our linear "
              "kernels: TESSERA_LINEAR=%s, decode weight prefetch %lld bytes ahead, %d-bit vectors where both run; "
              "our K/V cache %s%s\n",
              options.rounds, options.steps, linear != nullptr && *linear != '\0' ? linear : "(unset: int24)",
              static_cast<long long>(cpu::stream_prefetch_distance()), cpu::wide_vectors() ? 512 : 256, dtype_name(options.kv),
              g_cpu_time ? "; ours timed in process CPU seconds" : "");
  for (size_t t = 0; t < options.threads.size(); ++t)
    std::printf("read bandwidth, %d thread(s): %.1f GB/s (1 GiB huge-page buffer, best of 5)\n", options.threads[t],
                bandwidth[t] * 1e-9);
  try {
    for (const std::string& path : options.models) {
      auto model = LlmModel::load(path, 1100, LlmOptions{.kv_dtype = options.kv});
      const int64_t vocab = model->config().vocab;
      const std::vector<int32_t> corpus = corpus_of(Tokenizer::from_gguf(model->file()), 1100);
      const double weight_bytes = decode_weight_bytes(*model);
      std::printf("\n%s (%s, %lld layers): %.1f MB of weights read per decoded token (and %.1f MB of %s K/V "
                  "cache at context 1024, not in the bound; the \"with K/V\" row counts them)\n",
                  path.c_str(), model->config().arch_name.c_str(), static_cast<long long>(model->config().layers),
                  weight_bytes * 1e-6, kv_cache_bytes(*model, 1024) * 1e-6, dtype_name(options.kv));
      std::printf("%3s %-9s | %-15s | %-15s | %-15s | %-15s | %s\n", "thr", "engine", "prefill 128", "prefill 512",
                  "decode @128", "decode @1024", "decode bound");
      std::unique_ptr<GraphSession> s;
      Overheads at_128, at_1024;
      for (size_t t = 0; t < options.threads.size(); ++t) {
        SessionOptions session_options;
        session_options.threads = options.threads[t];
        session_options.pool = MemoryPool::create(MemoryPoolOptions{.huge_page_weights = options.huge_pages});
        s.reset();
        s = model->new_session(session_options);
        std::vector<Figures> ours;
        // Per round of ours: the higher of a read right before it and one right after it.
        std::vector<double> round_bandwidth;
        std::vector<std::vector<Figures>> theirs(peers.size());
        std::vector<std::unique_ptr<Peer>> running;
        for (const PeerKind& kind : peers) {
          std::fprintf(stderr, "%s, %d thread(s): loading in %s\n", path.c_str(), options.threads[t], kind.script);
          // With our q8_0 cache, llama.cpp keeps one too (like for like); else its default (f16).
          const std::string kv = options.kv == DType::Q8_0 && kind.q8_0_kv ? "q8_0" : "";
          running.push_back(std::make_unique<Peer>(kind.script, path, options.threads[t], options.steps, kv));
          if (!running.back()->ready()) std::fprintf(stderr, "%s did not start\n", kind.script);
        }
        measure(*s, corpus, vocab, 2, at_128, at_1024);  // warm-up: compiles the plans
        at_128.clear();
        at_1024.clear();
        std::unique_ptr<GraphSession> device;  // on options.backend
        std::vector<Figures> on_device;
        Overheads device_plans;
        if (!options.backend.empty()) {
          SessionOptions device_options;
          device_options.threads = options.threads[t];
          device_options.backend_name = options.backend;
          device = model->new_session(device_options);
          std::fprintf(stderr, "%s, %d thread(s): warming up on %s\n", path.c_str(), options.threads[t],
                       device->backend().description().c_str());
          measure(*device, corpus, vocab, 2, device_plans, device_plans, options.backend_full);  // compiles plans and kernels
        }
        for (int round = 0; round < options.rounds; ++round) {
          loads.push_back(load_average());
          std::fprintf(stderr, "%s, %d thread(s): round %d/%d (load %.2f)\n", path.c_str(), options.threads[t],
                       round + 1, options.rounds, loads.back());
          // A round is paired with the better of two reads: a single read that a neighbour
          // disturbed (32 GB/s where the rounds around it read 40) put a round above its bound.
          const double before = read_bandwidth(options.threads[t], 3);
          ours.push_back(measure(*s, corpus, vocab, options.steps, at_128, at_1024));
          round_bandwidth.push_back(std::max(before, read_bandwidth(options.threads[t], 3)));
          if (device) on_device.push_back(measure(*device, corpus, vocab, options.steps, device_plans, device_plans, options.backend_full));
          for (size_t p = 0; p < running.size(); ++p) {
            Figures f;
            if (running[p]->round(f)) theirs[p].push_back(f);
            else if (running[p]->ready()) std::fprintf(stderr, "%s failed (round %d)\n", peers[p].script, round + 1);
          }
        }
        auto row = [&](const char* engine, const std::vector<Figures>& figures) {
          if (figures.empty()) return;
          std::printf("%3d %-9s", options.threads[t], engine);
          const std::pair<double Figures::*, double> columns[] = {{&Figures::prefill128, 128},
                                                                 {&Figures::prefill512, 512},
                                                                 {&Figures::decode128, 1},
                                                                 {&Figures::decode1024, 1}};
          for (const auto& [field, tokens] : columns) {
            std::vector<double> seconds;
            for (const Figures& f : figures) seconds.push_back(f.*field);
            if (min_of(seconds) == 0) std::printf(" | %15s", "-");  // not measured
            else std::printf(" | %6.1f / %6.1f", rate(min_of(seconds), tokens), rate(median_of(seconds), tokens));
          }
          std::printf(" |\n");
        };
        row("tessera", ours);
        row(options.backend.c_str(), on_device);
        for (size_t p = 0; p < peers.size(); ++p) row(peers[p].label, theirs[p]);
        // The bound with the median of the rounds' reads; each round's decode against the bound of
        // its own read (the machine's bandwidth moves within a run), best and median round.
        std::printf("%3d %-9s | %15s | %15s | %15s | %15s | %6.1f tokens/s\n", options.threads[t], "bound", "", "", "",
                    "", median_of(round_bandwidth) / weight_bytes);
        // `bytes` read per token: the weights, or the weights and the K/V cache at that context.
        auto paired = [&](double Figures::*field, double bytes) {
          std::vector<double> shares;
          for (size_t r = 0; r < ours.size() && r < round_bandwidth.size(); ++r)
            if (ours[r].*field > 0 && round_bandwidth[r] > 0)
              shares.push_back(100 * bytes / (ours[r].*field * round_bandwidth[r]));
          if (shares.empty()) return std::string(15, ' ');
          char text[32];
          std::snprintf(text, sizeof(text), "%5.1f%% / %4.1f%%", max_of(shares),
                        median_of(shares));
          return std::string(text);
        };
        std::printf("%3d %-9s | %15s | %15s | %15s | %15s | reads %.1f-%.1f GB/s\n", options.threads[t], "of bound", "",
                    "", paired(&Figures::decode128, weight_bytes).c_str(),
                    paired(&Figures::decode1024, weight_bytes).c_str(), min_of(round_bandwidth) * 1e-9,
                    max_of(round_bandwidth) * 1e-9);
        std::printf("%3d %-9s | %15s | %15s | %15s | %15s | weights and K/V cache read\n", options.threads[t], "with K/V",
                    "", "", paired(&Figures::decode128, weight_bytes + kv_cache_bytes(*model, 128)).c_str(),
                    paired(&Figures::decode1024, weight_bytes + kv_cache_bytes(*model, 1024)).c_str());
        if (!on_device.empty())
          std::printf("%3d %-9s : %s; per read %lld steps on the CPU fallback (prefill), %lld (decode) with %lld copies\n",
                      options.threads[t], options.backend.c_str(), device->backend().description().c_str(),
                      static_cast<long long>(on_device.back().prefill_fallback),
                      static_cast<long long>(on_device.back().decode_fallback),
                      static_cast<long long>(on_device.back().decode_copies));
      }
      // A row of the first layer's K cache; a quantised cache cannot be read: the ids' row then.
      NodeId noop_node = model->keys()[0].id;
      if (is_quantized(s->graph().node(noop_node).dtype)) noop_node = s->graph().find_input("ids");
      const auto [noop_min, noop_median] = noop_reads(*s, noop_node, 1023, 200);
      const auto [write_min, write_median] = hot_writes(*s, 1023, 200);
      const PlanCacheStats& plans = s->stats().plans;
      std::printf("  last session: planning per decode step %.1f us at 128, %.1f us at 1024 (median), its write "
                  "%.1f us, %.1f us (back to back: %.1f us min, %.1f us median); read with nothing to do %.2f us min, %.2f us "
                  "median; plan cache %lld hits, %lld misses, %lld plans\n",
                  median_of(at_128.plan) * 1e6, median_of(at_1024.plan) * 1e6, median_of(at_128.write) * 1e6,
                  median_of(at_1024.write) * 1e6, write_min * 1e6, write_median * 1e6, noop_min * 1e6, noop_median * 1e6,
                  static_cast<long long>(plans.hits), static_cast<long long>(plans.misses),
                  static_cast<long long>(plans.size));
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  loads.push_back(load_average());
  std::printf("\n(prefill: tokens/s of a prefill from an empty context; decode: greedy tokens/s at that context; "
              "bound: read bandwidth / weight bytes per token, with the median over our rounds of the better of the reads "
              "made right before and right after each; of bound: each round's decode against its own read's bound, best / median round; with K/V: the "
              "same with the K/V cache's bytes at that context added to the weights)\n"
              "load average (1 min) seen: min %.2f, max %.2f\n",
              min_of(loads), max_of(loads));
  return 0;
}
