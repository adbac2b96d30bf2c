// Truncated, corrupt and oversized model files through the whole load path (GGUF parse, LLM
// config, graph build, a session's first read): each is an Error, never a crash.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "doctest/doctest.h"
#include "engine/session.h"
#include "loaders/gguf.h"
#include "loaders/llm.h"
#include "tests/reliability/tiny_llm.h"

namespace tessera {
namespace {

using testing::poke;
using testing::TempFile;
using testing::TinyLlm;

// Loads, builds and runs one decode step; returns false when an Error rejected the file.
bool load_and_run(const std::vector<uint8_t>& bytes) {
  TempFile file(bytes, "tiny_llm_corrupt");
  try {
    auto model = LlmModel::load(file.path(), 4);
    auto session = model->new_session();
    session->write("ids", Box{{0, 1}}, std::vector<int32_t>{0});
    (void)session->read<float>("logits", Box{{0, 1}, {0, model->config().vocab}});
    return true;
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK_MESSAGE(what.rfind("[", 0) == 0, what);
    return false;
  }
}

TEST_CASE("reliability: a tiny LLM file truncated anywhere is an Error") {
  TinyLlm tiny;
  const std::vector<uint8_t> bytes = tiny.build();
  CHECK(load_and_run(bytes));
  const size_t data = tiny.at["data"];
  std::vector<size_t> cuts;
  for (size_t cut = 0; cut < data; cut += 7) cuts.push_back(cut);
  for (size_t cut = data; cut < bytes.size(); cut += 97) cuts.push_back(cut);
  cuts.push_back(bytes.size() - 1);
  for (size_t cut : cuts) {
    CAPTURE(cut);
    CHECK_FALSE(load_and_run(std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(cut))));
  }
}

TEST_CASE("reliability: overlapping tensors and offsets past the end are an Error") {
  TinyLlm tiny;
  const std::vector<uint8_t> good = tiny.build();
  std::vector<uint8_t> bytes = good;
  poke<uint64_t>(bytes, tiny.at["tensor:blk.0.attn_q.weight:offset"], 0);  // onto token_embd.weight
  CHECK_THROWS_WITH_AS(GgufFile::parse(std::as_bytes(std::span(bytes)), nullptr), doctest::Contains("overlap"), Error);
  CHECK_FALSE(load_and_run(bytes));
  bytes = good;
  poke<uint64_t>(bytes, tiny.at["tensor:output_norm.weight:offset"], uint64_t{1} << 40);
  CHECK_THROWS_WITH_AS(GgufFile::parse(std::as_bytes(std::span(bytes)), nullptr),
                       doctest::Contains("past the end"), Error);
  bytes = good;
  poke<uint64_t>(bytes, tiny.at["kv_count"], uint64_t{1} << 62);
  CHECK_THROWS_WITH_AS(GgufFile::parse(std::as_bytes(std::span(bytes)), nullptr),
                       doctest::Contains("metadata count"), Error);
  bytes = good;
  poke<uint64_t>(bytes, tiny.at["tensor_count"], ~uint64_t{0});
  CHECK_FALSE(load_and_run(bytes));
}

TEST_CASE("reliability: absurd hyper-parameters are an Error") {
  for (int variant = 0; variant < 4; ++variant) {
    CAPTURE(variant);
    TinyLlm m;
    if (variant == 0) m.vocab_size = uint64_t{1} << 40;  // disagrees with the embedding
    if (variant == 1) m.key_length = uint64_t{1} << 62;
    if (variant == 2) m.vocab_size = ~uint64_t{0};  // does not fit int64
    if (variant == 3) m.kv_heads = 0;
    CHECK_FALSE(load_and_run(m.build()));
  }
}

TEST_CASE("reliability: random corruption of a tiny LLM header never crashes the load path") {
  TinyLlm tiny;
  const std::vector<uint8_t> good = tiny.build();
  const size_t header = tiny.at["data"];
  const uint64_t seed = 20251123;
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  int loaded = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<uint8_t> bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < flips; ++i) {
      const size_t at = rng() % header;
      bytes[at] = static_cast<uint8_t>(bytes[at] ^ (1u << (rng() % 8)));
    }
    loaded += load_and_run(bytes) ? 1 : 0;
  }
  MESSAGE("loaded ", loaded, " of 300 corrupted files");
}

TEST_CASE("reliability: the real models' headers without their data are an Error") {
  for (const char* name : {"models/SmolLM2-135M-Instruct.Q4_1.gguf", "models/gemma-3-270m-q4_k_m.gguf"}) {
    const std::string path = std::string(TESSERA_SOURCE_DIR) + "/" + name;
    if (!std::filesystem::exists(path)) continue;
    CAPTURE(name);
    const uint64_t header_bytes = GgufFile::open(path).data_offset();
    std::vector<uint8_t> header(header_bytes);
    std::ifstream in(path, std::ios::binary);
    in.read(reinterpret_cast<char*>(header.data()), static_cast<std::streamsize>(header.size()));
    CHECK_THROWS_WITH_AS(GgufFile::parse(std::as_bytes(std::span(header)), nullptr), doctest::Contains("[gguf]"), Error);
    CHECK_FALSE(load_and_run(header));
  }
}

}  // namespace
}  // namespace tessera
