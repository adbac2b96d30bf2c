// The real models' tokenizers given arbitrary bytes and arbitrary id sequences: encoding never
// crashes and yields ids inside the vocabulary, decoding in-range ids never crashes, and an
// out-of-range id is an Error naming it (also through the streaming decoder).
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "doctest/doctest.h"
#include "engine/error.h"
#include "loaders/gguf.h"
#include "loaders/tokenizer.h"

namespace tessera {
namespace {

std::vector<std::string> model_paths() {
  std::vector<std::string> paths;
  for (const char* name : {"models/SmolLM2-135M-Instruct.Q4_1.gguf", "models/gemma-3-270m-q4_k_m.gguf"}) {
    const std::string path = std::string(TESSERA_SOURCE_DIR) + "/" + name;
    if (std::filesystem::exists(path)) paths.push_back(path);
  }
  return paths;
}

TEST_CASE("reliability: tokenizers encode arbitrary bytes and decode arbitrary ids") {
  const uint64_t seed = 77;
  CAPTURE(seed);
  for (const std::string& path : model_paths()) {
    CAPTURE(path);
    const GgufFile file = GgufFile::open(path);
    const Tokenizer t = Tokenizer::from_gguf(file);
    const int32_t vocab = t.vocab_size();
    std::mt19937_64 rng(seed);
    for (int trial = 0; trial < 200; ++trial) {
      std::string text(rng() % 64, '\0');
      for (char& c : text) c = static_cast<char>(rng() % 256);
      if (trial % 4 == 0) text += "<|im_start|><start_of_turn><bos></s>";
      try {
        const std::vector<int32_t> ids = t.encode(text, trial % 2 == 0, trial % 3 == 0);
        for (int32_t id : ids) REQUIRE((id >= 0 && id < vocab));
        (void)t.decode(ids, trial % 2 == 1);
      } catch (const Error& e) {
        CHECK_MESSAGE(std::string(e.what()).rfind("[tokenizer]", 0) == 0, e.what());
      }
      std::vector<int32_t> ids(rng() % 16);
      for (int32_t& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
      (void)t.decode(ids, false);
      TokenStreamDecoder stream(t);
      for (int32_t id : ids) (void)stream.push(id);
      (void)stream.flush();
    }
    for (int32_t bad : {-1, vocab, vocab + 1, INT32_MIN, INT32_MAX}) {
      CAPTURE(bad);
      const std::vector<int32_t> ids = {0, bad};
      CHECK_THROWS_WITH_AS(t.decode(ids), doctest::Contains("token id"), Error);
      CHECK_THROWS_AS(t.token_text(bad), Error);
      CHECK_THROWS_AS(t.is_special(bad), Error);
      CHECK_FALSE(t.is_eog(bad));
      TokenStreamDecoder stream(t);
      CHECK_THROWS_AS(stream.push(bad), Error);
      CHECK(stream.push(0).size() < 64);  // still usable
    }
  }
}

}  // namespace
}  // namespace tessera
