// Random-graph differential test: random DAGs drawn from the whole op list, random partial
// writes and partial reads; every incremental read must be bitwise equal to a fresh session's
// full computation.
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <random>

#include "engine/ops.h"
#include "engine/session.h"

using namespace tessera;

namespace {

struct InputSpec {
  std::string name;
  Shape shape;
  DType dtype;
  double lo, hi;
};

class RandomGraph {
 public:
  RandomGraph(Graph& g, std::mt19937_64& rng) : g_(g), rng_(rng) {
    rows_ = uniform(2, 6);
    cols_ = 2 * uniform(1, 3);  // even, for rope
    add_input("x", {rows_, cols_}, DType::F32, -2, 2);
    add_input("y", {rows_, cols_}, DType::F32, -2, 2);
    add_input("z", {cols_}, DType::F32, 0.5, 2);
    ids_ = add_input("ids", {rows_}, DType::I32, 0, 1);
  }

  const std::vector<InputSpec>& inputs() const { return inputs_; }
  const std::vector<Tensor>& pool() const { return pool_; }

  // Adds random ops until the graph holds at least `min_nodes` computed nodes.
  void grow(int min_nodes) {
    int attempts = 0;
    while (computed_nodes() < min_nodes && attempts++ < 2000) {
      int which = uniform(0, kOps - 1);
      try {
        Tensor t = make(which);
        if (t.node().volume() == 0) continue;  // empty slices are legal but untestable here
        if (t.dtype() == DType::F32) pool_.push_back(t);
        used_[which] = true;
      } catch (const Error&) {
        // An incompatible draw (e.g. shapes that do not broadcast): draw again.
      }
    }
  }

  int computed_nodes() const {
    int n = 0;
    for (NodeId id = 0; id < g_.size(); ++id)
      if (g_.node(id).kind != OpKind::Input && g_.node(id).kind != OpKind::Constant) ++n;
    return n;
  }
  uint32_t kinds_used() const {
    uint32_t mask = 0;
    for (int i = 0; i < kOps; ++i) mask |= used_[i] ? (1u << i) : 0u;
    return mask;
  }
  static constexpr int kOps = 26;

 private:
  int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }
  Tensor add_input(const std::string& name, const Shape& shape, DType dtype, double lo, double hi) {
    Tensor t = g_.input(name, shape, dtype);
    inputs_.push_back({name, shape, dtype, lo, hi});
    if (dtype == DType::F32) pool_.push_back(t);
    return t;
  }
  // Recent tensors are picked more often so that chains get deep.
  Tensor pick() {
    size_t n = pool_.size();
    size_t back = static_cast<size_t>(uniform(0, static_cast<int64_t>(std::min<size_t>(n, 6)) - 1));
    return rng_() % 3 == 0 ? pool_[static_cast<size_t>(uniform(0, static_cast<int64_t>(n) - 1))] : pool_[n - 1 - back];
  }
  Tensor pick_matrix() {
    for (int i = 0; i < 20; ++i) {
      Tensor t = pick();
      if (t.rank() == 2) return t;
    }
    return pool_[0];
  }
  Tensor weight(const Shape& shape) {
    std::vector<float> v(static_cast<size_t>(shape_volume(shape)));
    std::normal_distribution<float> d(0.f, 0.5f);
    for (float& x : v) x = d(rng_);
    return g_.constant(shape, v);
  }
  Tensor as_image(Tensor t) { return reshape(t, {1, 1, t.dim(0), t.dim(1)}); }

  Tensor make(int which) {
    Tensor a = pick_matrix();
    const int64_t r = a.dim(0), c = a.dim(1);
    switch (which) {
      case 0: return unary(static_cast<UnaryFn>(uniform(0, static_cast<int64_t>(UnaryFn::Count) - 1)), a);
      case 1: {
        auto fn = static_cast<BinaryFn>(uniform(0, static_cast<int64_t>(BinaryFn::Ge)));
        Tensor out = binary(fn, a, pick());
        return out.dtype() == DType::Bool ? where(out, a, pick()) : out;
      }
      case 2: return where(gt(a, pick()), pick(), a);
      case 3: return cast(cast(a, rng_() % 2 ? DType::F16 : DType::BF16), DType::F32);
      case 4: {
        auto fn = static_cast<ReduceFn>(uniform(0, 4));
        return a + reduce(fn, a, {uniform(0, 1)}, true);
      }
      case 5: return cast(argmax(a, uniform(0, 1), true), DType::F32) + a;
      case 6: return cumsum(a, uniform(0, 1));
      case 7: return rng_() % 2 ? matmul(a, weight({c, c})) : matmul(a, transpose(pick_matrix(), 0, 1));
      case 8: return reshape(reshape(a, {r * c}), {c, r});
      case 9: return transpose(a, 0, 1);
      case 10: {
        int64_t axis = uniform(0, 1), n = a.dim(static_cast<int>(axis));
        int64_t start = uniform(0, n - 1), step = uniform(1, 2);
        Tensor s = slice(a, axis, start, n, step);
        std::vector<int64_t> before{0, 0}, after{0, 0};
        after[static_cast<size_t>(axis)] = n - s.dim(static_cast<int>(axis));
        return pad(s, before, after, 0.5f);
      }
      case 11: {
        Tensor parts[] = {a, pick()};
        Tensor cat = concat(parts, uniform(0, 1));
        return slice(cat, 0, 1, cat.dim(0));
      }
      case 12: return slice(repeat(a, {2, 1}), 0, uniform(0, r), uniform(0, r) + r);
      case 13: return flip(a, {uniform(0, 1)});
      case 14: return expand(sum(a, {0}, true), {r, c});
      case 15: {
        Tensor table = pick_matrix();
        if (table.dim(0) < 2) throw Error("table too small");
        return gather(table, ids_);
      }
      case 16: return rng_() % 2 ? triu(a, uniform(-1, 1)) : tril(a, uniform(-1, 1));
      case 17: return a + arange(g_, c, -1.0, 0.25) + (rng_() % 2 ? rand(g_, {r, c}, rng_() % 5) : randn(g_, {r, c}, rng_() % 5));
      case 18: return rng_() % 2 ? softmax(a, uniform(0, 1)) : log_softmax(a, -1);
      case 19: return rng_() % 2 ? rms_norm(a, weight({c}), 1e-5) : layer_norm(a, weight({c}), weight({c}), 1e-5);
      case 20: return reshape(group_norm(reshape(a, {1, r, c, 1}), 1, Tensor{}, Tensor{}, 1e-5), {r, c});
      case 21: {
        if (c % 2) throw Error("odd");
        Tensor pos = arange(g_, r, 0, 1, DType::I32);
        return reshape(rope(reshape(a, {r, 1, c}), pos, c, 100.0, rng_() % 2 ? RopeMode::HalfSplit : RopeMode::Interleaved),
                       {r, c});
      }
      case 22: {
        Conv2dParams p;
        p.pad_h = p.pad_w = 1;
        p.dilation_h = uniform(1, 2);
        p.pad_h = p.dilation_h;
        return reshape(conv2d(as_image(a), weight({1, 1, 3, 3}), weight({1}), p), {r, c});
      }
      case 23: return reshape(pool2d(as_image(a), rng_() % 2 ? PoolKind::Max : PoolKind::Avg, 3, 1, 1), {r, c});
      case 24: return reshape(pool2d(upsample_nearest(as_image(a), 2), PoolKind::Avg, 2, 2, 0), {r, c});
      case 25: {
        if (a.dim(0) != r) throw Error("shape");
        AttentionParams p;
        p.scale = 0.5;
        p.window = rng_() % 2 ? uniform(1, 3) : 0;
        p.softcap = rng_() % 2 ? 5.0 : 0.0;
        Tensor q = reshape(a, {r, 1, c}), k = reshape(pick_matrix(), {r, 1, c}), v = reshape(pick_matrix(), {r, 1, c});
        return reshape(attention(q, k, v, p), {r, c});
      }
    }
    throw Error("unreachable");
  }

  Graph& g_;
  std::mt19937_64& rng_;
  int64_t rows_, cols_;
  Tensor ids_;
  std::vector<InputSpec> inputs_;
  std::vector<Tensor> pool_;
  bool used_[kOps] = {};
};

std::vector<std::byte> random_values(const InputSpec& in, int64_t count, std::mt19937_64& rng) {
  std::vector<std::byte> bytes(static_cast<size_t>(count * dtype_size(in.dtype)));
  for (int64_t i = 0; i < count; ++i) {
    if (in.dtype == DType::I32) {
      int32_t v = static_cast<int32_t>(std::uniform_int_distribution<int64_t>(static_cast<int64_t>(in.lo),
                                                                              static_cast<int64_t>(in.hi))(rng));
      std::memcpy(bytes.data() + i * 4, &v, 4);
    } else {
      float v = static_cast<float>(std::uniform_real_distribution<double>(in.lo, in.hi)(rng));
      std::memcpy(bytes.data() + i * 4, &v, 4);
    }
  }
  return bytes;
}

Box random_box(const Shape& shape, std::mt19937_64& rng) {
  Box b = Box::of_rank(static_cast<int>(shape.size()));
  for (int d = 0; d < b.rank(); ++d) {
    int64_t x = std::uniform_int_distribution<int64_t>(0, shape[d] - 1)(rng);
    int64_t y = std::uniform_int_distribution<int64_t>(0, shape[d] - 1)(rng);
    b[d] = rng() % 3 == 0 ? Interval(0, shape[d]) : Interval(std::min(x, y), std::max(x, y) + 1);
  }
  return b;
}

// Copies box `box` out of a dense full tensor of `shape`.
std::vector<std::byte> extract(const std::vector<std::byte>& full, const Shape& shape, const Box& box, int size) {
  std::vector<std::byte> out;
  Shape strides = row_major_strides(shape);
  int64_t index[kMaxRank];
  for (int d = 0; d < box.rank(); ++d) index[d] = box.begin(d);
  if (box.empty()) return out;
  while (true) {
    int64_t o = 0;
    for (int d = 0; d < box.rank(); ++d) o += index[d] * strides[static_cast<size_t>(d)];
    out.insert(out.end(), full.begin() + o * size, full.begin() + (o + 1) * size);
    int d = box.rank() - 1;
    for (; d >= 0; --d) {
      if (++index[d] < box.end(d)) break;
      index[d] = box.begin(d);
    }
    if (d < 0) break;
  }
  return out;
}

void run_case(uint64_t seed, uint32_t* kinds_seen) {
  std::mt19937_64 rng(seed);
  Graph g;
  RandomGraph gen(g, rng);
  gen.grow(20);
  REQUIRE(gen.computed_nodes() >= 20);
  *kinds_seen |= gen.kinds_used();
  // Outputs: the last tensor and two others.
  const auto& pool = gen.pool();
  g.output("out0", pool.back());
  g.output("out1", pool[pool.size() - 2]);
  g.output("out2", pool[static_cast<size_t>(rng() % pool.size())]);

  SessionOptions options;
  int64_t budgets[] = {-1, -1, 0, 256, 2048};
  options.cache_budget_bytes = budgets[rng() % 5];
  GraphSession session(g, options);
  std::vector<std::vector<std::byte>> current;
  for (const InputSpec& in : gen.inputs()) {
    current.push_back(random_values(in, shape_volume(in.shape), rng));
    session.write(in.name, Box::full(in.shape), current.back());
  }
  for (int step = 0; step < 6; ++step) {
    CAPTURE(seed);
    CAPTURE(step);
    // A random partial write (sometimes two).
    for (int w = 0; w < 1 + static_cast<int>(rng() % 2); ++w) {
      size_t k = rng() % gen.inputs().size();
      const InputSpec& in = gen.inputs()[k];
      Box box = random_box(in.shape, rng);
      std::vector<std::byte> data = random_values(in, box.volume(), rng);
      session.write(in.name, box, data);
      // Mirror into the full copy.
      Shape strides = row_major_strides(in.shape);
      int64_t j = 0;
      int64_t index[kMaxRank];
      for (int d = 0; d < box.rank(); ++d) index[d] = box.begin(d);
      while (true) {
        int64_t o = 0;
        for (int d = 0; d < box.rank(); ++d) o += index[d] * strides[static_cast<size_t>(d)];
        std::memcpy(current[k].data() + o * 4, data.data() + j * 4, 4);
        ++j;
        int d = box.rank() - 1;
        for (; d >= 0; --d) {
          if (++index[d] < box.end(d)) break;
          index[d] = box.begin(d);
        }
        if (d < 0) break;
      }
    }
    // A random partial read, compared with a fresh session's full computation.
    const auto& [name, id] = g.outputs()[rng() % g.outputs().size()];
    const Node& out = g.node(id);
    Box box = random_box(out.shape, rng);
    std::vector<std::byte> got(static_cast<size_t>(box.volume() * 4));
    session.read(name, box, got);
    GraphSession fresh(g);
    for (size_t k = 0; k < gen.inputs().size(); ++k)
      fresh.write(gen.inputs()[k].name, Box::full(gen.inputs()[k].shape), current[k]);
    std::vector<std::byte> full(static_cast<size_t>(out.volume() * 4));
    fresh.read(name, Box::full(out.shape), full);
    std::vector<std::byte> want = extract(full, out.shape, box, 4);
    REQUIRE_MESSAGE(std::memcmp(got.data(), want.data(), got.size()) == 0,
                    "incremental read differs from a fresh full computation, box ", box.to_string(), " of ", name);
  }
}

}  // namespace

TEST_CASE("session: random graphs, incremental reads bitwise equal to fresh full computation") {
  uint32_t kinds_seen = 0;
  for (uint64_t seed = 1; seed <= 2000; ++seed) run_case(seed, &kinds_seen);
  // Every op family of the generator was drawn at least once.
  CHECK(kinds_seen == (1u << RandomGraph::kOps) - 1);
}
