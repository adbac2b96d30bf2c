// Region growth benchmark (a program, not a test): how the cost of planning evolves with the
// history of a GraphSession under scattered single-element reads.
//
// Graph: x = input [257, 257] f32; y = tanh(x) * x; z = matmul(y, w) with a constant w;
// out = z + x. The run makes --reads single-element reads of `out` at random positions (fixed
// seed) and writes one random element of x after every --write-every reads. At the checkpoints
// (after 0, 1000, 3000 and 6000 reads, those within --reads) it prints the box count of the
// valid region of `out` and of the largest valid region of any node, then times a probe of 100
// reads and 100 writes at other random positions (a separate generator, so the main sequence
// does not depend on the probes; the probes are part of the session's history, though). After
// the last checkpoint it times one read of the whole output.
//
// Usage: region_bench [--reads N] [--write-every K] [--seed S]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "engine/session.h"

using namespace tessera;

namespace {

constexpr int64_t kSide = 257;
constexpr int kProbe = 100;

struct Options {
  int reads = 6000;
  int write_every = 100;
  uint64_t seed = 7;
};

void print_usage(std::FILE* f) {
  std::fprintf(
      f,
      "usage: region_bench [--reads N] [--write-every K] [--seed S]\n"
      "  Scattered single-element reads of a [257, 257] output (tanh, mul, matmul, add),\n"
      "  one single-element input write every K reads; prints valid-region box counts and\n"
      "  read/write times at checkpoints (after 0, 1000, 3000, 6000 reads), then the time\n"
      "  of one full read. Defaults: --reads 6000 --write-every 100 --seed 7.\n");
}

bool parse(int argc, char** argv, Options* options) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      print_usage(stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) return false;
    const long long value = std::atoll(argv[++i]);
    if (arg == "--reads" && value >= 0) {
      options->reads = static_cast<int>(value);
    } else if (arg == "--write-every" && value > 0) {
      options->write_every = static_cast<int>(value);
    } else if (arg == "--seed") {
      options->seed = static_cast<uint64_t>(value);
    } else {
      return false;
    }
  }
  return true;
}

double micros_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
      .count();
}

struct Summary {
  double median = 0, min = 0;
};

Summary summarize(std::vector<double> times) {
  std::sort(times.begin(), times.end());
  return {times[times.size() / 2], times.front()};
}

class Driver {
 public:
  Driver(GraphSession& session, uint64_t seed) : session_(session), rng_(seed) {}

  Box random_cell() {
    const int64_t r = static_cast<int64_t>(rng_() % kSide),
                  c = static_cast<int64_t>(rng_() % kSide);
    return Box{{r, r + 1}, {c, c + 1}};
  }
  double read_one() {
    const Box cell = random_cell();
    const auto start = std::chrono::steady_clock::now();
    session_.read("out", cell, std::as_writable_bytes(std::span<float>(&sink_, 1)));
    return micros_since(start);
  }
  double write_one() {
    const Box cell = random_cell();
    const float value = static_cast<float>(rng_() % 1000) / 1000.0f;
    const auto start = std::chrono::steady_clock::now();
    session_.write("x", cell, std::span<const float>(&value, 1));
    return micros_since(start);
  }

 private:
  GraphSession& session_;
  std::mt19937_64 rng_;
  float sink_ = 0;
};

size_t largest_valid_region(const GraphSession& session) {
  size_t most = 0;
  for (NodeId id = 0; id < session.graph().size(); ++id)
    most = std::max(most, session.valid_region(id).boxes().size());
  return most;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse(argc, argv, &options)) {
    print_usage(stderr);
    return 2;
  }

  Graph g;
  Tensor x = g.input("x", {kSide, kSide}, DType::F32);
  std::vector<float> weights(static_cast<size_t>(kSide * kSide));
  for (size_t i = 0; i < weights.size(); ++i)
    weights[i] = static_cast<float>(i % 17) / 17.0f - 0.5f;
  Tensor w = g.constant({kSide, kSide}, weights);
  Tensor out = matmul(tanh(x) * x, w) + x;
  g.output("out", out);
  GraphSession session(g);
  std::vector<float> initial(static_cast<size_t>(kSide * kSide));
  for (size_t i = 0; i < initial.size(); ++i) initial[i] = static_cast<float>(i % 101) / 101.0f;
  session.write("x", Box{{0, kSide}, {0, kSide}}, initial);

  Driver main_sequence(session, options.seed);
  Driver probe(session, options.seed ^ 0x9E3779B97F4A7C15ull);
  std::printf(
      "region_bench: [%lld, %lld] output, %d scattered reads, a write every %d reads, seed %llu\n",
      static_cast<long long>(kSide), static_cast<long long>(kSide), options.reads,
      options.write_every, static_cast<unsigned long long>(options.seed));
  std::printf("%8s %11s %13s %12s %10s %13s %10s\n", "reads", "out boxes", "largest boxes",
              "read med us", "read min", "write med us", "write min");
  const int checkpoints[] = {0, 1000, 3000, 6000};
  int done = 0;
  for (int checkpoint : checkpoints) {
    if (checkpoint > options.reads) break;
    for (; done < checkpoint; ++done) {
      main_sequence.read_one();
      if ((done + 1) % options.write_every == 0) main_sequence.write_one();
    }
    const size_t out_boxes = session.valid_region(out.id).boxes().size();
    const size_t largest = largest_valid_region(session);
    std::vector<double> reads, writes;
    for (int i = 0; i < kProbe; ++i) {
      reads.push_back(probe.read_one());
      writes.push_back(probe.write_one());
    }
    const Summary r = summarize(reads), wr = summarize(writes);
    std::printf("%8d %11zu %13zu %12.1f %10.1f %13.1f %10.1f\n", checkpoint, out_boxes, largest,
                r.median, r.min, wr.median, wr.min);
    std::fflush(stdout);
  }
  std::vector<float> full(static_cast<size_t>(kSide * kSide));
  const auto start = std::chrono::steady_clock::now();
  session.read("out", Box{{0, kSide}, {0, kSide}}, std::as_writable_bytes(std::span<float>(full)));
  const double full_us = micros_since(start);
  std::printf("full read of %lld elements: %.1f ms (valid boxes of out before it: see last row)\n",
              static_cast<long long>(kSide * kSide), full_us / 1000.0);
  return 0;
}
