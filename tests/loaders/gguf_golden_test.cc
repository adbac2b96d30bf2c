// Cross-checks against gguf-py (tests/loaders/golden/gguf_reference.txt, written by
// scripts/gguf_reference.py) and reads the real models fetched by scripts/fetch_models.sh.
// Tests needing models/ are skipped with a MESSAGE when the files are absent.
#include <doctest/doctest.h>
#include <xxhash.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "loaders/gguf.h"
#include "loaders/quant.h"

using namespace tessera;

namespace {

const std::string kSourceDir = TESSERA_SOURCE_DIR;
const std::string kSmolLm = "SmolLM2-135M-Instruct.Q4_1.gguf";
const std::string kGemma = "gemma-3-270m-q4_k_m.gguf";

std::string model_path(const std::string& file) {
  return kSourceDir + "/models/" + file;
}

bool have_model(const std::string& file) {
  if (std::filesystem::exists(model_path(file))) return true;
  MESSAGE("skipping: models/" << file << " not found (run scripts/fetch_models.sh)");
  return false;
}

// Same generator and sanitising as scripts/gguf_reference.py.
std::vector<uint8_t> synthetic_blocks(GgmlType type, uint64_t seed, int64_t n) {
  const size_t size = static_cast<size_t>(ggml_row_size(type, n));
  std::vector<uint8_t> bytes;
  uint64_t state = seed;
  while (bytes.size() < size) {
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<uint8_t>(z >> (8 * i)));
  }
  bytes.resize(size);
  std::vector<size_t> f16_fields;  // byte offsets of f16 fields within a block
  switch (type) {
    case GgmlType::F32:
      for (size_t i = 3; i < size; i += 4) bytes[i] &= 0xBF;
      return bytes;
    case GgmlType::F16:
    case GgmlType::BF16:
      for (size_t i = 1; i < size; i += 2) bytes[i] &= 0xBF;
      return bytes;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
      f16_fields = {0, 2};
      break;
    case GgmlType::Q6_K:
      f16_fields = {208};
      break;
    default:
      f16_fields = {0};
      break;
  }
  const size_t block_bytes = static_cast<size_t>(ggml_block_bytes(type));
  for (size_t block = 0; block < size; block += block_bytes) {
    for (size_t field : f16_fields) bytes[block + field + 1] &= 0xBF;
  }
  return bytes;
}

struct GoldenEntry {
  std::string kind;  // "synthetic" or "real"
  std::string type_name, file, tensor;
  uint32_t type_id = 0;
  uint64_t seed = 0, row = 0;
  int64_t n = 0;
  uint64_t hash = 0;
  std::vector<uint32_t> samples;  // float32 bit patterns of the first values
};

std::vector<GoldenEntry> read_golden() {
  std::ifstream in(kSourceDir + "/tests/loaders/golden/gguf_reference.txt");
  REQUIRE_MESSAGE(in.good(), "missing tests/loaders/golden/gguf_reference.txt");
  std::vector<GoldenEntry> entries;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    GoldenEntry e;
    fields >> e.kind;
    if (e.kind == "synthetic") {
      fields >> e.type_name >> e.type_id >> e.seed >> e.n;
    } else {
      fields >> e.file >> e.tensor >> e.type_id >> e.row >> e.n;
    }
    fields >> std::hex >> e.hash;
    uint32_t bits;
    while (fields >> bits) e.samples.push_back(bits);
    REQUIRE_MESSAGE(!fields.bad(), line);
    entries.push_back(std::move(e));
  }
  return entries;
}

void check_against(const GoldenEntry& e, const std::vector<float>& values) {
  REQUIRE(static_cast<int64_t>(values.size()) == e.n);
  for (size_t i = 0; i < e.samples.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &values[i], 4);
    CAPTURE(i);
    CHECK(bits == e.samples[i]);
  }
  CHECK(XXH64(values.data(), values.size() * sizeof(float), 0) == e.hash);
}

}  // namespace

TEST_CASE("loaders: dequantisers match gguf-py on random blocks of every format") {
  int checked = 0;
  for (const GoldenEntry& e : read_golden()) {
    if (e.kind != "synthetic") continue;
    CAPTURE(e.type_name);
    const GgmlTypeTraits* traits = ggml_type_traits(e.type_id);
    REQUIRE(traits != nullptr);
    const std::vector<uint8_t> bytes = synthetic_blocks(traits->type, e.seed, e.n);
    std::vector<float> values(static_cast<size_t>(e.n));
    dequantize_row(traits->type, bytes.data(), values.data(), e.n);
    check_against(e, values);
    ++checked;
  }
  CHECK(checked == 11);
}

TEST_CASE("loaders: dequantised rows of the real models match gguf-py") {
  std::map<std::string, std::unique_ptr<GgufFile>> files;
  int checked = 0;
  for (const GoldenEntry& e : read_golden()) {
    if (e.kind != "real") continue;
    if (!files.count(e.file)) {
      files[e.file] = have_model(e.file)
                          ? std::make_unique<GgufFile>(GgufFile::open(model_path(e.file)))
                          : nullptr;
    }
    const GgufFile* file = files[e.file].get();
    if (file == nullptr) continue;
    CAPTURE(e.tensor);
    CAPTURE(e.row);
    const GgufTensor& t = file->tensor(e.tensor);
    REQUIRE(static_cast<uint32_t>(t.type) == e.type_id);
    REQUIRE(t.row_length() == e.n);
    REQUIRE(e.row < static_cast<uint64_t>(t.row_count()));
    std::vector<float> values(static_cast<size_t>(e.n));
    dequantize_row(t.type, t.data + e.row * t.row_bytes(), values.data(), e.n);
    check_against(e, values);
    ++checked;
  }
  MESSAGE("compared " << checked << " real rows against gguf-py");
}

TEST_CASE("loaders: SmolLM2 gguf metadata and tensors") {
  if (!have_model(kSmolLm)) return;
  const GgufFile f = GgufFile::open(model_path(kSmolLm));
  CHECK(f.version() == 3);
  CHECK(f.get_string("general.architecture") == "llama");
  CHECK(f.get_u32("llama.block_count") == 30);
  CHECK(f.get_u32("llama.context_length") == 8192);
  CHECK(f.get_u32("llama.embedding_length") == 576);
  CHECK(f.get_u32("llama.feed_forward_length") == 1536);
  CHECK(f.get_u32("llama.attention.head_count") == 9);
  CHECK(f.get_u32("llama.attention.head_count_kv") == 3);
  CHECK(f.get_u32("llama.rope.dimension_count") == 64);
  CHECK(f.get_f32("llama.rope.freq_base") == 100000.0f);
  CHECK(f.get_string("tokenizer.ggml.model") == "gpt2");
  CHECK(f.get_string_array("tokenizer.ggml.tokens").size() == 49152);
  CHECK(f.get_string_array("tokenizer.ggml.tokens")[1] == "<|im_start|>");
  CHECK(f.get_i32_array("tokenizer.ggml.token_type").size() == 49152);
  CHECK(f.get_string_array("tokenizer.ggml.merges").size() == 48900);
  CHECK(f.get_u32("tokenizer.ggml.bos_token_id") == 1);
  CHECK(f.get_u32("tokenizer.ggml.eos_token_id") == 2);
  CHECK(f.has("tokenizer.chat_template"));
  CHECK(f.tensors().size() == 272);
  CHECK(f.alignment() == 32);
  const GgufTensor& embed = f.tensor("token_embd.weight");
  CHECK(embed.type == GgmlType::Q8_0);
  CHECK(embed.shape() == Shape{49152, 576});
  CHECK(f.tensor("blk.0.ffn_down.weight").type == GgmlType::Q4_1);
  CHECK(f.tensor("blk.0.ffn_down.weight").shape() == Shape{576, 1536});
  CHECK(f.tensor("blk.29.attn_k.weight").shape() == Shape{192, 576});
  CHECK(f.tensor("output_norm.weight").type == GgmlType::F32);
  std::vector<float> row(576);
  dequantize_row(embed.type, embed.data, row.data(), 576);
  for (float v : row) CHECK(std::isfinite(v));
}

TEST_CASE("loaders: Gemma-3 gguf metadata and tensors") {
  if (!have_model(kGemma)) return;
  const GgufFile f = GgufFile::open(model_path(kGemma));
  CHECK(f.version() == 3);
  CHECK(f.get_string("general.architecture") == "gemma3");
  CHECK(f.get_u32("gemma3.block_count") == 18);
  CHECK(f.get_u32("gemma3.context_length") == 32768);
  CHECK(f.get_u32("gemma3.embedding_length") == 640);
  CHECK(f.get_u32("gemma3.feed_forward_length") == 2048);
  CHECK(f.get_u32("gemma3.attention.head_count") == 4);
  CHECK(f.get_u32("gemma3.attention.head_count_kv") == 1);
  CHECK(f.get_u32("gemma3.attention.key_length") == 256);
  CHECK(f.get_u32("gemma3.attention.sliding_window") == 512);
  CHECK(f.get_f32("gemma3.rope.freq_base") == 1000000.0f);
  CHECK(f.get_string("tokenizer.ggml.model") == "llama");
  CHECK(f.get_string_array("tokenizer.ggml.tokens").size() == 262144);
  CHECK(f.get_f32_array("tokenizer.ggml.scores").size() == 262144);
  CHECK(f.get_u32("tokenizer.ggml.bos_token_id") == 2);
  CHECK(f.get_u32("tokenizer.ggml.eos_token_id") == 1);
  CHECK(f.get_bool("tokenizer.ggml.add_bos_token"));
  CHECK(f.tensors().size() == 236);
  const GgufTensor& embed = f.tensor("token_embd.weight");
  CHECK(embed.type == GgmlType::Q8_0);
  CHECK(embed.shape() == Shape{262144, 640});
  CHECK(f.tensor("blk.0.attn_q.weight").shape() == Shape{1024, 640});
  CHECK(f.tensor("blk.0.attn_k_norm.weight").shape() == Shape{256});
  CHECK(f.tensor("blk.0.ffn_down.weight").type == GgmlType::Q6_K);
  CHECK(f.tensor("blk.0.attn_output.weight").type == GgmlType::Q4_K);
  std::vector<float> row(640);
  dequantize_row(embed.type, embed.data, row.data(), 640);
  for (float v : row) CHECK(std::isfinite(v));
  // Every tensor in the file dequantises (first row) to finite values.
  for (const GgufTensor& t : f.tensors()) {
    CAPTURE(t.name);
    REQUIRE(ggml_can_dequantize(t.type));
    std::vector<float> first(static_cast<size_t>(t.row_length()));
    dequantize_row(t.type, t.data, first.data(), t.row_length());
    bool finite = true;
    for (float v : first) finite = finite && std::isfinite(v);
    CHECK(finite);
  }
}
