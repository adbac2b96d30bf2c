// libFuzzer target: the real models' tokenizers (byte-level BPE of SmolLM2, SentencePiece of
// Gemma-3) on arbitrary input. The first byte picks the tokenizer and the mode: encode the rest
// as text (with and without special-token parsing), or decode it as int32 ids (any value,
// out-of-range ones included) in one call and through the streaming decoder. Encoded ids must
// lie in the vocabulary; out-of-range ids must be an Error. Models are found under
// $TESSERA_MODELS or the source tree's models/.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/error.h"
#include "loaders/gguf.h"
#include "loaders/tokenizer.h"

namespace {

using namespace tessera;

struct Loaded {
  std::vector<std::unique_ptr<GgufFile>> files;
  std::vector<Tokenizer> tokenizers;
};

const Loaded& loaded() {
  static const Loaded all = [] {
    Loaded l;
    const char* env = std::getenv("TESSERA_MODELS");
    const std::string dir = env != nullptr ? env : std::string(TESSERA_SOURCE_DIR) + "/models";
    for (const char* name : {"SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"}) {
      try {
        l.files.push_back(std::make_unique<GgufFile>(GgufFile::open(dir + "/" + name)));
        l.tokenizers.push_back(Tokenizer::from_gguf(*l.files.back()));
      } catch (const Error& e) {
        std::fprintf(stderr, "tokenizer_fuzz: skipping %s: %s\n", name, e.what());
      }
    }
    if (l.tokenizers.empty()) {
      std::fprintf(stderr, "tokenizer_fuzz: no model files found in %s\n", dir.c_str());
      std::abort();
    }
    return l;
  }();
  return all;
}

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "tokenizer_fuzz: %s\n", what);
  __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Loaded& all = loaded();
  const uint8_t mode = data[0];
  const Tokenizer& t = all.tokenizers[mode % all.tokenizers.size()];
  const int32_t vocab = t.vocab_size();
  ++data;
  --size;
  if ((mode >> 1) % 2 == 0) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    try {
      const std::vector<int32_t> ids = t.encode(text, (mode >> 2) & 1, (mode >> 3) & 1);
      for (int32_t id : ids)
        if (id < 0 || id >= vocab) finding("encode produced an id outside the vocabulary");
      (void)t.decode(ids, (mode >> 4) & 1);
    } catch (const Error&) {
    }
    return 0;
  }
  std::vector<int32_t> ids(size / 4);
  if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * 4);
  // Mostly in-range ids (mode bit 2), else the raw values.
  bool any_bad = false;
  for (int32_t& id : ids) {
    if ((mode >> 2) & 1) id = static_cast<int32_t>(static_cast<uint32_t>(id) % static_cast<uint32_t>(vocab));
    any_bad = any_bad || id < 0 || id >= vocab;
  }
  bool threw = false;
  try {
    (void)t.decode(ids, (mode >> 3) & 1);
  } catch (const Error&) {
    threw = true;
  }
  if (threw != any_bad) finding(any_bad ? "an out-of-range id was decoded" : "decoding valid ids failed");
  TokenStreamDecoder stream(t, (mode >> 3) & 1);
  for (int32_t id : ids) {
    try {
      (void)stream.push(id);
      (void)t.is_eog(id);
    } catch (const Error&) {
      if (id >= 0 && id < vocab) finding("streaming a valid id failed");
    }
  }
  (void)stream.flush();
  return 0;
}
