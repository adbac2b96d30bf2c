// A tiny Llama-architecture GGUF (f32 weights, deterministic values) for tests that need a whole
// model without the real files, and hooks to corrupt it: metadata overrides and a replaced
// embedding table.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tests/loaders/gguf_test_writer.h"

namespace tessera::testing {

struct TinyLlm {
  uint32_t layers = 1, dim = 8, heads = 2, kv_heads = 1, ffn = 16, vocab = 12;
  std::optional<uint64_t> key_length;  // attention.key_length (absent: dim / heads)
  std::optional<uint64_t> vocab_size;  // llama.vocab_size (absent: from the embedding)
  std::optional<std::vector<uint64_t>> embedding_dims;  // ggml order; absent: {dim, vocab}

  static std::vector<uint8_t> f32_bytes(uint64_t count, uint32_t seed) {
    std::vector<uint8_t> bytes(count * 4);
    uint32_t state = seed * 2654435761u + 1;
    for (uint64_t i = 0; i < count; ++i) {
      state = state * 1664525u + 1013904223u;
      const float v = static_cast<float>(static_cast<int32_t>(state >> 9) % 1000) / 4000.0f;
      std::memcpy(bytes.data() + i * 4, &v, 4);
    }
    return bytes;
  }

  // Field offsets of the last build (GgufBuilder::at).
  std::map<std::string, size_t> at;

  std::vector<uint8_t> build() {
    GgufBuilder b;
    b.add_string("general.architecture", "llama");
    b.add_scalar<uint32_t>("llama.block_count", kU32, layers);
    b.add_scalar<uint32_t>("llama.embedding_length", kU32, dim);
    b.add_scalar<uint32_t>("llama.feed_forward_length", kU32, ffn);
    b.add_scalar<uint32_t>("llama.attention.head_count", kU32, heads);
    b.add_scalar<uint32_t>("llama.attention.head_count_kv", kU32, kv_heads);
    if (key_length) b.add_scalar<uint64_t>("llama.attention.key_length", kU64, *key_length);
    if (vocab_size) b.add_scalar<uint64_t>("llama.vocab_size", kU64, *vocab_size);
    const uint32_t hd = dim / heads;
    uint32_t seed = 1;
    auto tensor = [&](std::string name, std::vector<uint64_t> dims) {
      uint64_t count = 1;
      for (uint64_t d : dims) count *= d;
      b.add_tensor({std::move(name), dims, 0, f32_bytes(count, seed++)});
    };
    if (embedding_dims) {
      uint64_t count = 1;
      for (uint64_t d : *embedding_dims) count *= d;
      b.add_tensor({"token_embd.weight", *embedding_dims, 0, f32_bytes(count, seed++)});
    } else {
      tensor("token_embd.weight", {dim, vocab});
    }
    for (uint32_t l = 0; l < layers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      tensor(p + "attn_norm.weight", {dim});
      tensor(p + "attn_q.weight", {dim, heads * hd});
      tensor(p + "attn_k.weight", {dim, kv_heads * hd});
      tensor(p + "attn_v.weight", {dim, kv_heads * hd});
      tensor(p + "attn_output.weight", {heads * hd, dim});
      tensor(p + "ffn_norm.weight", {dim});
      tensor(p + "ffn_gate.weight", {dim, ffn});
      tensor(p + "ffn_up.weight", {dim, ffn});
      tensor(p + "ffn_down.weight", {ffn, dim});
    }
    tensor("output_norm.weight", {dim});
    std::vector<uint8_t> bytes = b.build();
    at = b.at;
    return bytes;
  }
};

// Writes bytes to a file under the system temp folder and removes it when destroyed.
class TempFile {
 public:
  TempFile(const std::vector<uint8_t>& bytes, const std::string& name) {
    path_ = (std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid()) + ".gguf")).string();
    std::ofstream out(path_, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  ~TempFile() { std::remove(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace tessera::testing
