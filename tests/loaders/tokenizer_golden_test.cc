// Tokenizers of the real models against the Hugging Face goldens in tests/llm/golden
// (<model>_tokenizer.json, written with transformers from the same GGUF files): ids with and
// without special tokens, decoding, and chat prompts. The goldens are committed; the models
// come from scripts/fetch_models.sh and the tests are skipped with a MESSAGE without them.
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "engine/error.h"
#include "loaders/gguf.h"
#include "loaders/tokenizer.h"

using namespace tessera;

namespace {

const std::string kSourceDir = TESSERA_SOURCE_DIR;

// Just enough JSON for the golden files: objects, arrays, strings (with \u escapes), numbers,
// booleans and null.
struct Json {
  std::variant<std::nullptr_t, bool, double, std::string, std::vector<Json>,
               std::map<std::string, Json>>
      value;

  bool is_null() const { return std::holds_alternative<std::nullptr_t>(value); }
  const std::string& str() const { return std::get<std::string>(value); }
  double number() const { return std::get<double>(value); }
  bool boolean() const { return std::get<bool>(value); }
  const std::vector<Json>& array() const { return std::get<std::vector<Json>>(value); }
  const Json& operator[](const std::string& key) const {
    return std::get<std::map<std::string, Json>>(value).at(key);
  }
  bool has(const std::string& key) const {
    const auto& object = std::get<std::map<std::string, Json>>(value);
    return object.count(key) != 0;
  }
  std::vector<int32_t> ids() const {
    std::vector<int32_t> out;
    for (const Json& item : array()) out.push_back(static_cast<int32_t>(item.number()));
    return out;
  }
};

class JsonParser {
 public:
  explicit JsonParser(std::string text) : text_(std::move(text)) {}

  Json parse() {
    Json json = value();
    skip_space();
    if (pos_ != text_.size()) throw Error("[json] trailing characters");
    return json;
  }

 private:
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  char next() {
    if (pos_ >= text_.size()) throw Error("[json] unexpected end");
    return text_[pos_++];
  }
  void expect(char c) {
    if (next() != c) throw Error(std::string("[json] expected ") + c);
  }
  bool literal(std::string_view word) {
    if (text_.compare(pos_, word.size(), word) != 0) return false;
    pos_ += word.size();
    return true;
  }

  Json value() {
    skip_space();
    if (pos_ >= text_.size()) throw Error("[json] unexpected end");
    const char c = text_[pos_];
    if (c == '{') return object();
    if (c == '[') return array();
    if (c == '"') return Json{string()};
    if (literal("true")) return Json{true};
    if (literal("false")) return Json{false};
    if (literal("null")) return Json{nullptr};
    size_t used = 0;
    const double number = std::stod(text_.substr(pos_, 32), &used);
    pos_ += used;
    return Json{number};
  }

  Json object() {
    expect('{');
    std::map<std::string, Json> members;
    skip_space();
    if (text_[pos_] == '}') return ++pos_, Json{std::move(members)};
    for (;;) {
      skip_space();
      std::string key = string();
      skip_space();
      expect(':');
      members[key] = value();
      skip_space();
      if (next() == '}') return Json{std::move(members)};
    }
  }

  Json array() {
    expect('[');
    std::vector<Json> items;
    skip_space();
    if (text_[pos_] == ']') return ++pos_, Json{std::move(items)};
    for (;;) {
      items.push_back(value());
      skip_space();
      if (next() == ']') return Json{std::move(items)};
    }
  }

  uint32_t hex4() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = v * 16 + std::stoul(std::string(1, next()), nullptr, 16);
    return v;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      const char c = next();
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      const char e = next();
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {  // surrogate pair
            expect('\\');
            expect('u');
            cp = 0x10000 + ((cp - 0xD800) << 10) + (hex4() - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: out += e; break;  // \" \\ \/
      }
    }
  }

  std::string text_;
  size_t pos_ = 0;
};

Json read_golden(const std::string& name) {
  const std::string path = kSourceDir + "/tests/llm/golden/" + name;
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "missing golden file " << path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return JsonParser(buffer.str()).parse();
}

// The model's tokenizer, or nullptr (with a MESSAGE) when the model file is absent.
std::unique_ptr<Tokenizer> load_model(const std::string& file) {
  const std::string path = kSourceDir + "/models/" + file;
  if (!std::filesystem::exists(path)) {
    MESSAGE("skipping: models/" << file << " not found (run scripts/fetch_models.sh)");
    return nullptr;
  }
  return std::make_unique<Tokenizer>(Tokenizer::from_gguf(GgufFile::open(path)));
}

std::string printable(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out += c;
    }
  }
  return out;
}

// Every golden string: encode with and without BOS (special text parsed, as transformers
// does), decode, decode skipping special tokens. Returns the number of mismatching strings.
int check_strings(const Tokenizer& tokenizer, const Json& golden) {
  int failures = 0;
  for (const Json& entry : golden["strings"].array()) {
    const std::string& text = entry["text"].str();
    CAPTURE(printable(text));
    const auto with_special = tokenizer.encode(text, true, true);
    const auto without_special = tokenizer.encode(text, false, true);
    const bool ok = with_special == entry["ids_with_special"].ids() &&
                    without_special == entry["ids_without_special"].ids();
    CHECK(with_special == entry["ids_with_special"].ids());
    CHECK(without_special == entry["ids_without_special"].ids());
    CHECK(tokenizer.decode(entry["ids_without_special"].ids()) == entry["decoded"].str());
    CHECK(tokenizer.decode(entry["ids_with_special"].ids(), true) ==
          entry["decoded_with_special_skip"].str());
    // Plain-text round trip, special text included, when nothing is parsed as special.
    CHECK(tokenizer.decode(tokenizer.encode(text, false, false)) == text);
    failures += ok ? 0 : 1;
  }
  return failures;
}

std::vector<ChatMessage> chat_messages(const Json& chat) {
  std::vector<ChatMessage> messages;
  for (const Json& m : chat["messages"].array()) {
    messages.push_back({m["role"].str(), m["content"].str()});
  }
  return messages;
}

}  // namespace

TEST_CASE("loaders: tokenizer SmolLM2 matches the Hugging Face golden ids") {
  const Json golden = read_golden("smollm2-135m-instruct-q4_1_tokenizer.json");
  auto tokenizer = load_model(golden["gguf"]["file"].str());
  if (!tokenizer) return;
  const Json& facts = golden["facts"];
  CHECK(tokenizer->model() == TokenizerModel::BytePairGpt2);
  CHECK(tokenizer->vocab_size() == static_cast<int32_t>(facts["vocab_size_incl_added"].number()));
  CHECK(tokenizer->bos() == static_cast<int32_t>(facts["bos_token_id"].number()));
  CHECK(tokenizer->eos() == static_cast<int32_t>(facts["eos_token_id"].number()));
  CHECK(tokenizer->add_bos() == facts["add_bos_token"].boolean());
  CHECK(tokenizer->is_eog(tokenizer->token_id("<|im_end|>")));
  CHECK_FALSE(tokenizer->is_eog(tokenizer->token_id("<|im_start|>")));
  CHECK(check_strings(*tokenizer, golden) == 0);
}

TEST_CASE("loaders: tokenizer Gemma-3 matches the Hugging Face golden ids") {
  const Json golden = read_golden("gemma-3-270m-q4_k_m_tokenizer.json");
  auto tokenizer = load_model(golden["gguf"]["file"].str());
  if (!tokenizer) return;
  const Json& facts = golden["facts"];
  CHECK(tokenizer->model() == TokenizerModel::SentencePiece);
  CHECK(tokenizer->vocab_size() == static_cast<int32_t>(facts["vocab_size_incl_added"].number()));
  CHECK(tokenizer->bos() == static_cast<int32_t>(facts["bos_token_id"].number()));
  CHECK(tokenizer->eos() == static_cast<int32_t>(facts["eos_token_id"].number()));
  CHECK(tokenizer->add_bos() == facts["add_bos_token"].boolean());
  CHECK_FALSE(tokenizer->add_space_prefix());
  CHECK(tokenizer->is_eog(tokenizer->token_id("<end_of_turn>")));
  CHECK(tokenizer->is_eog(tokenizer->eos()));
  CHECK(check_strings(*tokenizer, golden) == 0);
}

TEST_CASE("loaders: tokenizer chat templates render as transformers does") {
  struct Case {
    const char* golden;
    const char* bos_text;  // the template's leading bos_token; encode adds the id instead
  };
  for (const Case& c : {Case{"smollm2-135m-instruct-q4_1_tokenizer.json", ""},
                        Case{"gemma-3-270m-q4_k_m_tokenizer.json", "<bos>"}}) {
    const std::string golden_name = c.golden;
    CAPTURE(golden_name);
    const Json golden = read_golden(c.golden);
    auto tokenizer = load_model(golden["gguf"]["file"].str());
    if (!tokenizer) continue;
    for (const std::string name : {"single_turn", "multi_turn"}) {
      CAPTURE(name);
      const Json& chat = golden["chat"][name];
      const auto messages = chat_messages(chat);
      const std::string prompt =
          tokenizer->apply_chat_template(messages, chat["add_generation_prompt"].boolean());
      CHECK(printable(c.bos_text + prompt) == printable(chat["text"].str()));
      CHECK(tokenizer->encode(prompt, true, true) == chat["ids"].ids());
    }
  }
}

TEST_CASE("loaders: tokenizer TEMP extra") {
  std::ifstream in("/tmp/tok/extra.json");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const Json extra = JsonParser(buffer.str()).parse();
  for (auto [name, file] : {std::pair<std::string, std::string>{"smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"},
                            {"gemma3", "gemma-3-270m-q4_k_m.gguf"}}) {
    auto tokenizer = load_model(file);
    CAPTURE(name);
    for (const Json& row : extra[name].array()) {
      const std::string& text = row["text"].str();
      CAPTURE(printable(text));
      if (tokenizer->encode(text, false, true) != row["ids"].ids()) {
        std::string a, b;
        for (int32_t id : tokenizer->encode(text, false, true)) a += std::to_string(id) + "|" + std::string(tokenizer->token_piece(id)) + " ";
        for (int32_t id : row["ids"].ids()) b += std::to_string(id) + "|" + std::string(tokenizer->token_piece(id)) + " ";
        MESSAGE(name << "\nours: " << a << "\nhf:   " << b);
      }
      if (!row["ids_plain"].is_null()) CHECK(tokenizer->encode(text, false, false) == row["ids_plain"].ids());
      CHECK(tokenizer->decode(row["ids"].ids()) == row["decoded"].str());
      CHECK(tokenizer->decode(tokenizer->encode(text, false, false)) == text);
    }
  }
}
