// Sizes that overflow int64 are rejected with an Error when a node is built (they used to hit
// signed overflow in Box::volume, repeat, reshape and dtype_bytes), and the size helpers
// saturate instead of overflowing.
#include <cstdint>
#include <limits>

#include "doctest/doctest.h"
#include "engine/graph.h"
#include "engine/ops.h"
#include "loaders/llm.h"
#include "regions/box.h"
#include "tests/reliability/tiny_llm.h"

namespace tessera {
namespace {

constexpr int64_t k2e31 = int64_t{1} << 31;
constexpr int64_t k2e32 = int64_t{1} << 32;
constexpr int64_t k2e62 = int64_t{1} << 62;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST_CASE("reliability: an input whose element count or byte size overflows int64 is an Error") {
  Graph g;
  CHECK_THROWS_WITH_AS(g.input("x", {k2e32, k2e32}, DType::F32), doctest::Contains("[input]"), Error);
  CHECK_THROWS_WITH_AS(g.input("y", {k2e31, k2e31}, DType::F32), doctest::Contains("byte size"), Error);
  CHECK_THROWS_WITH_AS(g.input("z", {kMax}, DType::I64), doctest::Contains("[input]"), Error);
  CHECK(g.size() == 0);
  // Large but representable: building is fine (nothing is allocated until a session exists).
  Tensor ok = g.input("ok", {k2e31, k2e31}, DType::Bool);
  CHECK(ok.node().size_bytes() == k2e62);
  CHECK_THROWS_AS(g.constant({k2e32, k2e32}, DType::F32, {}), Error);
}

TEST_CASE("reliability: movement ops whose result overflows int64 are an Error") {
  Graph g;
  Tensor one = g.input("one", {1}, DType::F32);
  Tensor x = g.input("x", {2, 2}, DType::F32);
  CHECK_THROWS_WITH_AS(expand(one, {k2e32, k2e32}), doctest::Contains("[expand]"), Error);
  CHECK_THROWS_WITH_AS(repeat(x, {k2e62, 4}), doctest::Contains("[repeat]"), Error);
  CHECK_THROWS_WITH_AS(repeat(x, {kMax, 1}), doctest::Contains("[repeat]"), Error);
  CHECK_THROWS_WITH_AS(pad(x, {kMax, 0}, {1, 0}), doctest::Contains("[pad]"), Error);
  CHECK_THROWS_WITH_AS(pad(x, {k2e32, 0}, {0, k2e32}), doctest::Contains("[pad]"), Error);
  CHECK_THROWS_WITH_AS(reshape(x, {-1, k2e62, k2e62}), doctest::Contains("[reshape]"), Error);
  CHECK_THROWS_WITH_AS(reshape(x, {k2e32, k2e32}), doctest::Contains("[reshape]"), Error);
  Tensor big = g.input("big", {k2e62}, DType::Bool);
  Tensor parts[] = {big, big};
  CHECK_THROWS_WITH_AS(concat(parts, 0), doctest::Contains("[concat]"), Error);
  CHECK_THROWS_WITH_AS(split(x, 0, {kMax, 2}), doctest::Contains("[split]"), Error);
  CHECK_THROWS_AS(upsample_nearest(reshape(x, {1, 1, 2, 2}), k2e32), Error);
}

TEST_CASE("reliability: slice with a step of INT64_MAX takes one element") {
  Graph g;
  Tensor x = g.input("x", {4, 6}, DType::F32);
  CHECK(slice(x, 0, 0, 4, kMax).shape() == Shape{1, 6});
  CHECK(slice(x, 1, 5, 6, kMax).shape() == Shape{4, 1});
  CHECK(slice(x, 0, 2, 2, kMax).shape() == Shape{0, 6});
}

TEST_CASE("reliability: conv2d and pool2d with huge padding are an Error") {
  Graph g;
  Tensor x = g.input("x", {1, 1, 4, 4}, DType::F32);
  Tensor w = g.constant({1, 1, 3, 3}, std::vector<float>(9, 1.0f));
  Conv2dParams p;
  p.pad_h = p.pad_w = int64_t{1} << 40;
  CHECK_THROWS_WITH_AS(conv2d(x, w, Tensor{}, p), doctest::Contains("[conv2d]"), Error);
  p.pad_h = p.pad_w = k2e62;
  CHECK_THROWS_WITH_AS(conv2d(x, w, Tensor{}, p), doctest::Contains("[conv2d]"), Error);
  p = Conv2dParams{};
  p.dilation_h = k2e62;
  CHECK_THROWS_WITH_AS(conv2d(x, w, Tensor{}, p), doctest::Contains("[conv2d]"), Error);
  CHECK_THROWS_AS(pool2d(x, PoolKind::Max, 2, 1, k2e62), Error);
}

TEST_CASE("reliability: size helpers saturate instead of overflowing") {
  CHECK(shape_volume(Shape{k2e32, k2e32}) == kMax);
  CHECK(shape_volume(Shape{k2e32, k2e32, 0}) == 0);
  CHECK(dtype_bytes(DType::F32, k2e62) == kMax);
  CHECK(dtype_bytes(DType::Q8_0, kMax) == kMax);
  CHECK(Box{{0, k2e32}, {0, k2e32}}.volume() == kMax);
  CHECK(Box{{0, k2e32}, {5, 5}}.volume() == 0);
  CHECK(Interval(std::numeric_limits<int64_t>::min(), kMax).size() == kMax);
  CHECK_THROWS_WITH_AS(checked_mul("op", "what", k2e32, k2e32), doctest::Contains("[op] what"), Error);
  CHECK_THROWS_AS(checked_add("op", "what", kMax, 1), Error);
  CHECK(checked_mul("op", "what", k2e31, k2e31) == k2e62);
}

TEST_CASE("reliability: tensor handles that are not nodes of their graph are an Error") {
  Graph g;
  Tensor x = g.input("x", {4, 6}, DType::F32);
  for (NodeId id : {-1, 1000, INT32_MAX}) {
    const Tensor bad{&g, id};
    CAPTURE(id);
    CHECK_THROWS_AS(reshape(bad, {24}), Error);
    CHECK_THROWS_AS(transpose(bad, 0, 1), Error);
    CHECK_THROWS_AS(permute(bad, {1, 0}), Error);
    CHECK_THROWS_AS(slice(bad, 0, 0, 1), Error);
    CHECK_THROWS_AS(pad(bad, {1, 1}, {1, 1}), Error);
    CHECK_THROWS_AS(flip(bad, {0}), Error);
    CHECK_THROWS_AS(repeat(bad, {1, 1}), Error);
    CHECK_THROWS_AS(expand(bad, {4, 6}), Error);
    const Tensor pair[] = {x, bad};
    CHECK_THROWS_AS(concat(pair, 0), Error);
    CHECK_THROWS_AS(stack(pair, 0), Error);
    CHECK_THROWS_AS(split(bad, 0, {2, 2}), Error);
    CHECK_THROWS_AS(x + bad, Error);
    CHECK_THROWS_AS(matmul(x, bad), Error);
    CHECK_THROWS_WITH_AS(g.output("y", bad), doctest::Contains("[output]"), Error);
  }
  CHECK_THROWS_AS(g.output("y", Tensor{}), Error);
  CHECK(g.outputs().empty());
}

TEST_CASE("reliability: LLM sizes that overflow are an Error, never a crash") {
  using testing::TempFile;
  using testing::TinyLlm;
  {
    TinyLlm tiny;
    TempFile file(tiny.build(), "tiny_llm");
    CHECK_NOTHROW(LlmModel::load(file.path(), 8));
    CHECK_THROWS_WITH_AS(LlmModel::load(file.path(), k2e62), doctest::Contains("[input]"), Error);
    CHECK_THROWS_AS(LlmModel::load(file.path(), kMax), Error);
  }
  {
    TinyLlm m;
    m.heads = static_cast<uint32_t>(k2e31);
    m.kv_heads = 1;
    m.key_length = static_cast<uint64_t>(k2e31);
    TempFile file(m.build(), "tiny_llm_heads");
    CHECK_THROWS_AS(LlmModel::load(file.path(), 8), Error);
  }
  {
    TinyLlm m;
    m.key_length = 0;
    TempFile file(m.build(), "tiny_llm_key_length");
    CHECK_THROWS_WITH_AS(LlmModel::load(file.path(), 8), doctest::Contains("key_length"), Error);
  }
}

TEST_CASE("reliability: a GGUF embedding with 0 dims and no vocab_size is an Error") {
  testing::TinyLlm m;
  m.embedding_dims = std::vector<uint64_t>{};
  testing::TempFile file(m.build(), "tiny_llm_scalar_embedding");
  CHECK_THROWS_WITH_AS(LlmModel::load(file.path(), 8), doctest::Contains("token_embd.weight"), Error);
  m.embedding_dims = std::vector<uint64_t>{8, 12, 1};
  testing::TempFile file3(m.build(), "tiny_llm_rank3_embedding");
  CHECK_THROWS_WITH_AS(LlmModel::load(file3.path(), 8), doctest::Contains("token_embd.weight"), Error);
}

}  // namespace
}  // namespace tessera
