// libFuzzer target: a GGUF file from the bytes through the whole load path. Parse it, read every
// metadata value with the getters of its type, then the tokenizer and the LLM config; when the
// file describes a small model, build its graph and run one decode step. Any outcome but a
// tessera::Error (crash, sanitizer report, other exception) is a finding.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

#include "engine/session.h"
#include "loaders/gguf.h"
#include "loaders/llm.h"
#include "loaders/tokenizer.h"

namespace {

using namespace tessera;

void touch_value(const GgufValue& v) {
  switch (v.type()) {
    case GgufValueType::String: (void)v.as_string(); break;
    case GgufValueType::F32: (void)v.as_f32(); break;
    case GgufValueType::F64: (void)v.as_f64(); break;
    case GgufValueType::Bool: (void)v.as_bool(); break;
    case GgufValueType::Array:
      if (v.element_type() == GgufValueType::String) {
        (void)v.strings().size();
      } else if (v.element_type() == GgufValueType::Array) {
        for (const GgufValue& inner : v.arrays()) touch_value(inner);
      } else if (v.size() > 0) {
        (void)v.element(v.size() - 1);
        (void)v.element(0);
      }
      break;
    default: (void)v.as_integer(); break;
  }
}

// A model small enough to build and run in a fuzz iteration.
bool small_model(const LlmConfig& c) {
  return c.layers <= 2 && c.dim <= 64 && c.ffn <= 128 && c.heads <= 8 && c.vocab <= 512 && c.head_dim <= 64;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const GgufFile file = GgufFile::parse(std::as_bytes(std::span(data, size)), nullptr, "fuzz.gguf");
    for (const GgufKeyValue& kv : file.metadata()) {
      try {
        touch_value(kv.value);
      } catch (const Error&) {
      }
    }
    for (const GgufTensor& t : file.tensors())
      if (t.size_bytes > 0) (void)static_cast<volatile uint8_t>(static_cast<uint8_t>(t.data[t.size_bytes - 1]));
    try {
      const Tokenizer tokenizer = Tokenizer::from_gguf(file);
      const std::vector<int32_t> ids = tokenizer.encode("Hello, world! \xc3\xa9\xff", true, true);
      (void)tokenizer.decode(ids);
    } catch (const Error&) {
    }
    const LlmConfig config = read_llm_config(file);
    if (!small_model(config)) return 0;
    // LlmModel loads from a path: hand it the same bytes through a temporary file.
    char path[] = "/tmp/tessera_fuzz_XXXXXX";
    const int fd = ::mkstemp(path);
    if (fd < 0) return 0;
    const bool written = ::write(fd, data, size) == static_cast<ssize_t>(size);
    ::close(fd);
    try {
      if (written) {
        auto model = LlmModel::load(path, 4);
        auto session = model->new_session(SessionOptions{.threads = 1});
        session->write("ids", Box{{0, 2}}, std::vector<int32_t>{0, static_cast<int32_t>(config.vocab - 1)});
        (void)session->read<float>("logits", Box{{1, 2}, {0, config.vocab}});
      }
    } catch (const Error&) {
    }
    ::unlink(path);
  } catch (const Error&) {
  }
  return 0;
}
