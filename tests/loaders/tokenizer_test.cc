// Tokenizers on small vocabularies built in the test (tests/loaders/gguf_test_writer.h):
// merge order, byte fallback, special and user-defined tokens, the pre-tokenizer, streaming,
// chat formats, and every validation rule raising "[tokenizer] ..." instead of crashing.
// tokenizer_golden_test.cc checks the real models against Hugging Face.
#include "loaders/tokenizer.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "engine/error.h"
#include "loaders/gguf.h"
#include "loaders/tokenizer_state.h"
#include "tests/loaders/gguf_test_writer.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

// A tokenizer vocabulary to serialise as GGUF metadata. Empty optionals are left out.
struct Vocab {
  std::optional<std::string> model = "gpt2";
  std::optional<std::string> pre = "smollm";
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<float> scores;
  std::vector<std::string> merges;
  bool write_tokens = true;
  bool write_types = true;
  bool write_scores = false;
  bool write_merges = true;            // even when empty
  std::map<std::string, int64_t> ids;  // "bos" -> tokenizer.ggml.bos_token_id, ...
  std::map<std::string, bool> flags;   // "add_bos_token" -> tokenizer.ggml.add_bos_token, ...
  std::optional<std::string> chat_template;
  std::optional<std::string> architecture;
  std::function<void(GgufBuilder&)> extra;  // more keys, e.g. deliberately mistyped ones

  int32_t add(const std::string& piece, int32_t type = 1, float score = 0) {
    tokens.push_back(piece);
    types.push_back(type);
    scores.push_back(score);
    return static_cast<int32_t>(tokens.size() - 1);
  }

  std::vector<uint8_t> build() const {
    GgufBuilder b;
    const auto add_strings = [&](std::string key, const std::vector<std::string>& values) {
      b.add(std::move(key), [&](ByteWriter& w) {
        w.put<uint32_t>(kArray);
        w.put<uint32_t>(kString);
        w.put<uint64_t>(values.size());
        for (const std::string& v : values) w.put_string(v);
      });
    };
    if (architecture) b.add_string("general.architecture", *architecture);
    if (model) b.add_string("tokenizer.ggml.model", *model);
    if (pre) b.add_string("tokenizer.ggml.pre", *pre);
    if (write_tokens) add_strings("tokenizer.ggml.tokens", tokens);
    if (write_types) b.add_array<int32_t>("tokenizer.ggml.token_type", kI32, types);
    if (write_scores) b.add_array<float>("tokenizer.ggml.scores", kF32, scores);
    if (write_merges) add_strings("tokenizer.ggml.merges", merges);
    for (const auto& [name, id] : ids) {
      b.add_scalar<uint32_t>("tokenizer.ggml." + name + "_token_id", kU32,
                             static_cast<uint32_t>(id));
    }
    for (const auto& [name, value] : flags) {
      b.add_scalar<uint8_t>("tokenizer.ggml." + name, kBool, value ? 1 : 0);
    }
    if (chat_template) b.add_string("tokenizer.chat_template", *chat_template);
    if (extra) extra(b);
    return b.build();
  }
};

Tokenizer load(const Vocab& vocab) {
  auto bytes = std::make_shared<std::vector<uint8_t>>(vocab.build());
  auto span = std::as_bytes(std::span<const uint8_t>(bytes->data(), bytes->size()));
  return Tokenizer::from_gguf(GgufFile::parse(span, bytes, "vocab.gguf"));
}

// Asserts that `run` throws tessera::Error starting "[tokenizer] " and containing `needle`.
void check_error(const std::function<void()>& run, const std::string& needle) {
  try {
    run();
    FAIL("no error; expected one containing: " << needle);
  } catch (const Error& e) {
    const std::string message = e.what();
    CHECK_MESSAGE(message.rfind("[tokenizer] ", 0) == 0, message);
    CHECK_MESSAGE(message.find(needle) != std::string::npos,
                  message << "  (wanted: " << needle << ")");
  }
}

void check_rejects(const Vocab& vocab, const std::string& needle) {
  check_error([&] { load(vocab); }, needle);
}

// The GPT-2 byte-to-unicode spelling, written independently of the loader's table.
std::string gpt2_char(uint8_t byte) {
  int unprintable_index = 0;
  for (int b = 0; b < byte; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    unprintable_index += printable ? 0 : 1;
  }
  const bool printable = (byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || byte >= 174;
  const uint32_t cp = printable ? byte : 256 + unprintable_index;
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

std::string gpt2_spell(std::string_view bytes) {
  std::string out;
  for (char c : bytes) out += gpt2_char(static_cast<uint8_t>(c));
  return out;
}

// Three control tokens (ids 0-2) and the 256 byte tokens.
Vocab byte_level_vocab() {
  Vocab v;
  v.add("<|endoftext|>", 3);
  v.add("<|im_start|>", 3);
  v.add("<|im_end|>", 3);
  for (int b = 0; b < 256; ++b) v.add(gpt2_char(static_cast<uint8_t>(b)));
  v.ids = {{"bos", 1}, {"eos", 2}};
  return v;
}

// Adds the merge "left right" (raw bytes) and, when new, its result token.
void add_merge(Vocab& v, std::string_view left, std::string_view right) {
  const std::string merged = gpt2_spell(left) + gpt2_spell(right);
  if (std::find(v.tokens.begin(), v.tokens.end(), merged) == v.tokens.end()) v.add(merged);
  v.merges.push_back(gpt2_spell(left) + " " + gpt2_spell(right));
}

// Token pieces of an encoding, for readable comparisons.
std::vector<std::string> pieces(const Tokenizer& t, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.emplace_back(t.token_piece(id));
  return out;
}

std::vector<std::string> spelled(std::initializer_list<std::string_view> words) {
  std::vector<std::string> out;
  for (std::string_view w : words) out.push_back(gpt2_spell(w));
  return out;
}

const std::string kSpace = "\xE2\x96\x81";  // "▁"

// SentencePiece vocabulary: <unk> <s> </s>, the 256 <0xNN> byte tokens, then `normal`.
Vocab spm_vocab(const std::vector<std::pair<std::string, float>>& normal, bool byte_tokens = true) {
  Vocab v;
  v.model = "llama";
  v.pre.reset();
  v.write_scores = true;
  v.write_merges = false;
  v.add("<unk>", 2);
  v.add("<s>", 3);
  v.add("</s>", 3);
  if (byte_tokens) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      v.add(name, 6);
    }
  }
  for (const auto& [piece, score] : normal) v.add(piece, 1, score);
  v.ids = {{"unknown", 0}, {"bos", 1}, {"eos", 2}};
  v.flags = {{"add_space_prefix", false}};
  return v;
}

std::string random_bytes(std::mt19937& rng, size_t max_length) {
  std::uniform_int_distribution<size_t> length(0, max_length);
  std::uniform_int_distribution<int> byte(0, 255);
  std::string out(length(rng), '\0');
  for (char& c : out) c = static_cast<char>(byte(rng));
  return out;
}

}  // namespace

TEST_CASE("loaders: tokenizer byte-level BPE merges by rank, lowest first") {
  Vocab v = byte_level_vocab();
  add_merge(v, "b", "c");  // rank 0
  add_merge(v, "a", "b");  // rank 1
  Tokenizer t = load(v);
  CHECK(pieces(t, t.encode("abc", false, false)) == spelled({"a", "bc"}));
  CHECK(pieces(t, t.encode("abab", false, false)) == spelled({"ab", "ab"}));

  Vocab swapped = byte_level_vocab();
  add_merge(swapped, "a", "b");
  add_merge(swapped, "b", "c");
  Tokenizer u = load(swapped);
  CHECK(pieces(u, u.encode("abc", false, false)) == spelled({"ab", "c"}));

  // Chained merges build whole words; the leading space of a word joins it as "Ġ".
  Vocab words = byte_level_vocab();
  add_merge(words, "h", "e");
  add_merge(words, "l", "l");
  add_merge(words, "he", "ll");
  add_merge(words, "hell", "o");
  add_merge(words, " ", "hello");
  Tokenizer w = load(words);
  CHECK(pieces(w, w.encode("hello hello", false, false)) == spelled({"hello", " hello"}));
  // Words never merge across pre-tokenizer boundaries: "o" and " " are in different words.
  CHECK(pieces(w, w.encode("hello, hello", false, false)) == spelled({"hello", ",", " hello"}));
  // A run of one pair merges left to right.
  Vocab triple = byte_level_vocab();
  add_merge(triple, "a", "a");
  Tokenizer x = load(triple);
  CHECK(pieces(x, x.encode("aaa", false, false)) == spelled({"aa", "a"}));
}

TEST_CASE("loaders: tokenizer Llama-3 pre-tokenizer takes whole-word tokens before merging") {
  Vocab v = byte_level_vocab();
  add_merge(v, "a", "b");
  add_merge(v, "c", "d");
  v.add(gpt2_spell("abcd"));  // no merge builds it
  for (const std::string pre : {"llama-bpe", "qwen2"}) {
    CAPTURE(pre);
    v.pre = pre;
    Tokenizer t = load(v);
    const auto expected = pre == "qwen2" ? spelled({"ab", "cd"}) : spelled({"abcd"});
    CHECK(pieces(t, t.encode("abcd", false, false)) == expected);
    CHECK(t.decode(t.encode("abcd ab\n\n", false, false)) == "abcd ab\n\n");
  }
}

TEST_CASE("loaders: tokenizer byte-level BPE round trips any bytes") {
  Vocab v = byte_level_vocab();
  add_merge(v, " ", "t");
  add_merge(v, "h", "e");
  add_merge(v, " t", "he");
  add_merge(v, "\xC3", "\xA9");
  Tokenizer t = load(v);
  for (std::string text :
       {std::string("the theme"), std::string("caf\xC3\xA9 \xF0\x9F\x98\x80 \xE6\x97\xA5"),
        std::string("tabs\tand\nnew\r\nlines  "), std::string("\xFF\xFE invalid \xC3"),
        std::string("nul\0byte", 8), std::string()}) {
    CAPTURE(text);
    CHECK(t.decode(t.encode(text, false, false)) == text);
  }
  const unsigned seed = 1234;
  std::mt19937 rng(seed);
  for (int i = 0; i < 200; ++i) {
    const std::string text = random_bytes(rng, 40);
    CHECK_MESSAGE(t.decode(t.encode(text, false, false)) == text, "seed " << seed << " case " << i);
  }
}

TEST_CASE("loaders: tokenizer pre-tokenizer splits like the GPT-2 regex") {
  // Expected words from Python's `regex` module with the GPT-2 pattern; smollm first isolates
  // every \p{N}.
  struct Case {
    std::string text;
    std::vector<std::string> gpt2;
    std::vector<std::string> smollm;
  };
  const std::vector<Case> cases = {
      {"Hello world", {"Hello", " world"}, {"Hello", " world"}},
      {"  two  spaces  ", {" ", " two", " ", " spaces", "  "}, {" ", " two", " ", " spaces", "  "}},
      {"it's 'S they're we'LL I'd",
       {"it", "'s", " '", "S", " they", "'re", " we", "'", "LL", " I", "'d"},
       {"it", "'s", " '", "S", " they", "'re", " we", "'", "LL", " I", "'d"}},
      {"a\n\n b\t\tc \n",
       {"a", "\n\n", " b", "\t", "\t", "c", " \n"},
       {"a", "\n\n", " b", "\t", "\t", "c", " \n"}},
      {"x2y 42 3.14 -7",
       {"x", "2", "y", " 42", " 3", ".", "14", " -", "7"},
       {"x", "2", "y", " ", "4", "2", " ", "3", ".", "1", "4", " -", "7"}},
      {"¡Hola! ¿Qué tal? naïve café",
       {"¡", "Hola", "!", " ¿", "Qué", " tal", "?", " naïve", " café"},
       {"¡", "Hola", "!", " ¿", "Qué", " tal", "?", " naïve", " café"}},
      {"日本語 テキスト", {"日本語", " テキスト"}, {"日本語", " テキスト"}},
      {"emoji 😀👍 ok", {"emoji", " 😀👍", " ok"}, {"emoji", " 😀👍", " ok"}},
      {"nbsp\302\240here \343\200\200wide",
       {"nbsp", "\302\240", "here", " ", "\343\200\200", "wide"},
       {"nbsp", "\302\240", "here", " ", "\343\200\200", "wide"}},
      {"½ ² ١٢٣ Ⅳ", {"½", " ²", " ١٢٣", " Ⅳ"}, {"½", " ", "²", " ", "١", "٢", "٣", " ", "Ⅳ"}},
      {"tabs\t\tend\t", {"tabs", "\t", "\t", "end", "\t"}, {"tabs", "\t", "\t", "end", "\t"}},
      {"   ", {"   "}, {"   "}},
      {" ", {" "}, {" "}},
      {"!!!???", {"!!!???"}, {"!!!???"}},
      {"a'", {"a", "'"}, {"a", "'"}},
      {"''s", {"''", "s"}, {"''", "s"}},
      {"\r\n\r\n", {"\r\n\r\n"}, {"\r\n\r\n"}},
      {"x \302\240y", {"x", " ", "\302\240", "y"}, {"x", " ", "\302\240", "y"}},
  };
  const auto words = [](PreTokenizer pre, const std::string& text) {
    std::vector<std::string> out;
    for (std::string_view w : pre_tokenize(pre, text)) out.emplace_back(w);
    return out;
  };
  for (const Case& c : cases) {
    CAPTURE(c.text);
    CHECK(words(PreTokenizer::Gpt2, c.text) == c.gpt2);
    CHECK(words(PreTokenizer::SmolLm, c.text) == c.smollm);
  }
  // The Llama-3 / Qwen2 regex (Qwen2 takes one digit at a time), from Python's `regex` module.
  const std::vector<Case> llama3_cases = {
      {"Hello world", {"Hello", " world"}, {"Hello", " world"}},
      {"  two  spaces  ", {" ", " two", " ", " spaces", "  "}, {" ", " two", " ", " spaces", "  "}},
      {"it's 'S they're we'LL I'd",
       {"it", "'s", " '", "S", " they", "'re", " we", "'LL", " I", "'d"},
       {"it", "'s", " '", "S", " they", "'re", " we", "'LL", " I", "'d"}},
      {"a\n\n b\t\tc \n",
       {"a", "\n\n", " b", "\t", "\tc", " \n"},
       {"a", "\n\n", " b", "\t", "\tc", " \n"}},
      {"x2y 42 3.14 -7 1234567",
       {"x", "2", "y", " ", "42", " ", "3", ".", "14", " -", "7", " ", "123", "456", "7"},
       {"x",  "2", "y", " ", "4", "2", " ", "3", ".", "1", "4",
        " -", "7", " ", "1", "2", "3", "4", "5", "6", "7"}},
      {"¡Hola! ¿Qué tal? naïve café",
       {"¡Hola", "!", " ¿", "Qué", " tal", "?", " naïve", " café"},
       {"¡Hola", "!", " ¿", "Qué", " tal", "?", " naïve", " café"}},
      {"emoji 😀👍 ok", {"emoji", " 😀👍", " ok"}, {"emoji", " 😀👍", " ok"}},
      {"nbsp\302\240here \343\200\200wide",
       {"nbsp", "\302\240here", " ", "\343\200\200wide"},
       {"nbsp", "\302\240here", " ", "\343\200\200wide"}},
      {"½ ² ١٢٣ Ⅳ",
       {"½", " ", "²", " ", "١٢٣", " ", "Ⅳ"},
       {"½", " ", "²", " ", "١", "٢", "٣", " ", "Ⅳ"}},
      {"tabs\t\tend\t", {"tabs", "\t", "\tend", "\t"}, {"tabs", "\t", "\tend", "\t"}},
      {"''s", {"''", "s"}, {"''", "s"}},
      {"\r\n\r\n", {"\r\n\r\n"}, {"\r\n\r\n"}},
      {"x \302\240y", {"x", " ", "\302\240y"}, {"x", " ", "\302\240y"}},
      {"(hello) [world]\n",
       {"(hello", ")", " [", "world", "]\n"},
       {"(hello", ")", " [", "world", "]\n"}},
      {"end.\n\n  next", {"end", ".\n\n", " ", " next"}, {"end", ".\n\n", " ", " next"}},
      {"foo  \n\t bar", {"foo", "  \n", "\t", " bar"}, {"foo", "  \n", "\t", " bar"}},
      {"a,\r\nb", {"a", ",\r\n", "b"}, {"a", ",\r\n", "b"}},
      {"\tx", {"\tx"}, {"\tx"}},
      {"...\n\nok", {"...\n\n", "ok"}, {"...\n\n", "ok"}},
      {"  \n", {"  \n"}, {"  \n"}},
  };
  for (const Case& c : llama3_cases) {
    CAPTURE(c.text);
    CHECK(words(PreTokenizer::Llama3, c.text) == c.gpt2);
    CHECK(words(PreTokenizer::Qwen2, c.text) == c.smollm);
  }
  // Invalid UTF-8 is covered byte by byte, never dropped.
  const std::string invalid = "a\xFF\xC3(b\xE2\x82";
  for (PreTokenizer pre :
       {PreTokenizer::Gpt2, PreTokenizer::SmolLm, PreTokenizer::Llama3, PreTokenizer::Qwen2}) {
    std::string joined;
    for (std::string_view w : pre_tokenize(pre, invalid)) joined += w;
    CHECK(joined == invalid);
  }
}

TEST_CASE("loaders: tokenizer special tokens are parsed only when asked") {
  Vocab v = byte_level_vocab();
  const int32_t tagged = v.add("<t>x", 3);
  const int32_t tag = v.add("<t>", 3);
  const int32_t user = v.add("@@", 4);  // user-defined: always matched
  Tokenizer t = load(v);
  const std::string text = "<|im_start|>hi<|im_end|>";
  const auto parsed = t.encode(text, false, true);
  REQUIRE(parsed.size() == 4);
  CHECK(parsed.front() == 1);
  CHECK(parsed.back() == 2);
  const auto plain = t.encode(text, false, false);
  CHECK(plain.size() == text.size());  // byte tokens only: no merges in this vocabulary
  CHECK(t.decode(plain) == text);
  CHECK(t.decode(parsed) == text);
  CHECK(t.decode(parsed, true) == "hi");
  // Leftmost-longest: "<t>x" beats "<t>".
  CHECK(t.encode("<t>xy<t>", false, true) == std::vector<int32_t>{tagged, t.token_id("y"), tag});
  CHECK(t.encode("a@@b", false, false) ==
        std::vector<int32_t>{t.token_id("a"), user, t.token_id("b")});
  CHECK(t.token_type(user) == TokenType::UserDefined);
  CHECK_FALSE(t.is_special(user));
  CHECK(t.decode(std::vector<int32_t>{user}, true) == "@@");
}

TEST_CASE("loaders: tokenizer ids, flags and end-of-generation tokens") {
  Vocab v = byte_level_vocab();
  Tokenizer t = load(v);
  CHECK(t.vocab_size() == 259);
  CHECK(t.model() == TokenizerModel::BytePairGpt2);
  CHECK(t.bos() == 1);
  CHECK(t.eos() == 2);
  CHECK_FALSE(t.add_bos());  // byte-level BPE default
  CHECK(t.encode("a", true, false) == std::vector<int32_t>{t.token_id("a")});
  CHECK(t.token_id("<|im_end|>") == 2);
  CHECK(t.token_id("not a token") == -1);
  CHECK(t.token_piece(3 + ' ') == "\xC4\xA0");  // "Ġ"
  CHECK(t.token_text(3 + ' ') == " ");
  CHECK(t.is_eog(2));
  CHECK(t.is_eog(0));  // <|endoftext|>
  CHECK_FALSE(t.is_eog(1));
  CHECK_FALSE(t.is_eog(-5));
  CHECK(t.is_special(1));

  v.flags = {{"add_bos_token", true}, {"add_eos_token", true}};
  Tokenizer u = load(v);
  CHECK(u.encode("a", true, false) == std::vector<int32_t>{1, u.token_id("a"), 2});
  CHECK(u.encode("", true, false) == std::vector<int32_t>{1, 2});
  CHECK(u.encode("a", false, false) == std::vector<int32_t>{u.token_id("a")});

  Vocab sentencepiece = spm_vocab({{"a", -1}});
  Tokenizer s = load(sentencepiece);
  CHECK(s.add_bos());  // SentencePiece default
  CHECK(s.encode("a", true, false) == std::vector<int32_t>{1, s.token_id("a")});
}

TEST_CASE("loaders: tokenizer SentencePiece merges by score, leftmost on ties") {
  const auto tokenize = [](float ab, float bc, const std::string& text) {
    Tokenizer t = load(spm_vocab({{"a", -10}, {"b", -10}, {"c", -10}, {"ab", ab}, {"bc", bc}}));
    return pieces(t, t.encode(text, false, false));
  };
  CHECK(tokenize(-1, -2, "abc") == std::vector<std::string>{"ab", "c"});
  CHECK(tokenize(-2, -1, "abc") == std::vector<std::string>{"a", "bc"});
  CHECK(tokenize(-1, -1, "abc") == std::vector<std::string>{"ab", "c"});
  CHECK(tokenize(-1, -1, "bcab") == std::vector<std::string>{"bc", "ab"});

  // Spaces are "▁" and merge like any character; merged pieces keep merging.
  Tokenizer t = load(spm_vocab({{"a", -10},
                                {"b", -10},
                                {kSpace, -10},
                                {kSpace + "b", -3},
                                {"ab", -2},
                                {"ab" + kSpace + "b", -1}}));
  CHECK(pieces(t, t.encode("a b", false, false)) == std::vector<std::string>{"a", kSpace + "b"});
  CHECK(pieces(t, t.encode("ab b", false, false)) == std::vector<std::string>{"ab" + kSpace + "b"});
  CHECK(t.decode(t.encode("ab b  a", false, false)) == "ab b  a");
  // A merge never produces a control or byte token.
  Vocab v = spm_vocab({{"<", -1}, {"s", -1}, {">", -1}, {"<s", -1}});
  Tokenizer u = load(v);
  CHECK(pieces(u, u.encode("<s>", false, false)) == std::vector<std::string>{"<s", ">"});
  CHECK(u.encode("<s>", false, true) == std::vector<int32_t>{1});
}

TEST_CASE("loaders: tokenizer SentencePiece byte fallback and unknown tokens") {
  Tokenizer t = load(spm_vocab({{"a", -1}, {kSpace, -1}}));
  const std::string text = "a \xC3\xA9 \xF0\x9F\x98\x80\n\xFF";
  const auto ids = t.encode(text, false, false);
  CHECK(pieces(t, ids) == std::vector<std::string>{"a", kSpace, "<0xC3>", "<0xA9>", kSpace,
                                                   "<0xF0>", "<0x9F>", "<0x98>", "<0x80>", "<0x0A>",
                                                   "<0xFF>"});
  CHECK(t.decode(ids) == text);
  CHECK(t.token_text(t.token_id("<0x0A>")) == "\n");
  CHECK(t.token_type(t.token_id("<0x0A>")) == TokenType::Byte);

  // Without byte tokens, an unknown character is <unk>; without <unk> either, an error.
  Vocab no_bytes = spm_vocab({{"a", -1}}, false);
  Tokenizer u = load(no_bytes);
  CHECK(u.encode("a\xC3\xA9", false, false) == std::vector<int32_t>{u.token_id("a"), 0});
  no_bytes.ids.erase("unknown");
  Tokenizer w = load(no_bytes);
  check_error([&] { w.encode("a\xC3\xA9", false, false); }, "no token, byte token or unknown");

  const unsigned seed = 99;
  std::mt19937 rng(seed);
  // (A space needs a "▁" token: its byte fallback would decode as "▁", as in sentencepiece.)
  Tokenizer r =
      load(spm_vocab({{"a", -1}, {"b", -2}, {kSpace, -3}, {"ab", -0.5f}, {kSpace + "a", -0.7f}}));
  for (int i = 0; i < 200; ++i) {
    const std::string random = random_bytes(rng, 40);
    CHECK_MESSAGE(r.decode(r.encode(random, false, false)) == random,
                  "seed " << seed << " case " << i);
  }
}

TEST_CASE("loaders: tokenizer SentencePiece dummy prefix and user-defined tokens") {
  Vocab v = spm_vocab({{"a", -5}, {"b", -5}, {kSpace, -5}, {kSpace + "a", -1}, {kSpace + "b", -1}});
  const int32_t turn = v.add("<turn>", 3);
  const int32_t newline = v.add("\n", 4);
  const int32_t spaces = v.add("  ", 4);
  v.flags["add_space_prefix"] = true;
  Tokenizer t = load(v);
  CHECK(t.add_space_prefix());
  CHECK(pieces(t, t.encode("a b", false, false)) ==
        std::vector<std::string>{kSpace + "a", kSpace + "b"});
  CHECK(t.decode(t.encode("a b", false, false)) == "a b");
  CHECK(t.decode(t.encode(" a", false, false)) == " a");
  // The prefix also follows a special token.
  CHECK(t.encode("<turn>a", false, true) == std::vector<int32_t>{turn, t.token_id(kSpace + "a")});
  // User-defined tokens are matched whole in the raw text, longest first.
  v.flags["add_space_prefix"] = false;
  Tokenizer u = load(v);
  CHECK(u.encode("a\n  b", false, false) ==
        std::vector<int32_t>{u.token_id("a"), newline, spaces, u.token_id("b")});
  CHECK(u.decode(u.encode("a\n  b", false, false)) == "a\n  b");
}

TEST_CASE("loaders: tokenizer streaming holds back incomplete UTF-8") {
  Utf8StreamBuffer buffer;
  CHECK(buffer.push("a\xF0\x9F") == "a");
  CHECK_FALSE(buffer.empty());
  CHECK(buffer.push("\x98") == "");
  CHECK(buffer.push("\x80!") == "\xF0\x9F\x98\x80!");
  CHECK(buffer.push("\xC3") == "");
  CHECK(buffer.flush() == "\xC3");
  CHECK(buffer.empty());
  // Bytes that cannot start or continue a sequence pass straight through.
  CHECK(buffer.push("\xFF") == "\xFF");
  CHECK(buffer.push("\x80\x80\x80\x80") == "\x80\x80\x80\x80");

  Vocab v = byte_level_vocab();
  Tokenizer t = load(v);
  const std::string text = "<|im_start|>h\xC3\xA9 \xF0\x9F\x98\x80 \xE6\x97\xA5!<|im_end|>";
  TokenStreamDecoder stream(t);
  std::string streamed;
  for (int32_t id : t.encode(text, false, true)) {
    const std::string piece = stream.push(id);
    // Every chunk is whole characters.
    CHECK(Utf8StreamBuffer().push(piece) == piece);
    streamed += piece;
  }
  streamed += stream.flush();
  CHECK(streamed == "h\xC3\xA9 \xF0\x9F\x98\x80 \xE6\x97\xA5!");
}

TEST_CASE("loaders: tokenizer chat formats") {
  const std::vector<ChatMessage> conversation = {
      {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", " Name one. "}};
  const std::vector<ChatMessage> user_only = {{"user", "Hi"}};

  Vocab smol = byte_level_vocab();
  smol.chat_template =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
      "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
      "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
      "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
      "'<|im_start|>assistant\n' }}{% endif %}";
  Tokenizer t = load(smol);
  CHECK(t.chat_format() == ChatFormat::ChatMl);
  CHECK(t.apply_chat_template(user_only, true) ==
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  CHECK(t.apply_chat_template(conversation, false) ==
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n Name one. <|im_end|>\n");
  CHECK(t.apply_chat_template({}, true) == "<|im_start|>assistant\n");

  // A plain ChatML template (escaped newlines, no default system prompt).
  smol.chat_template =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
      "message['content'] + '<|im_end|>\\n'}}{% endfor %}";
  Tokenizer plain = load(smol);
  CHECK(plain.apply_chat_template(user_only, true) ==
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");

  // Gemma: found by architecture when the file has no template.
  Vocab gemma = spm_vocab({{"a", -1}});
  gemma.architecture = "gemma3";
  Tokenizer g = load(gemma);
  CHECK(g.chat_format() == ChatFormat::Gemma);
  CHECK(g.apply_chat_template(conversation, true) ==
        "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello."
        "<end_of_turn>\n<start_of_turn>user\nName one.<end_of_turn>\n<start_of_turn>model\n");
  CHECK(g.apply_chat_template(user_only, false) == "<start_of_turn>user\nHi<end_of_turn>\n");
  const std::vector<ChatMessage> not_alternating = {{"user", "a"}, {"user", "b"}};
  check_error([&] { g.apply_chat_template(not_alternating, true); }, "must alternate");
  const std::vector<ChatMessage> assistant_first = {{"assistant", "a"}};
  check_error([&] { g.apply_chat_template(assistant_first, true); }, "must alternate");

  Vocab none = byte_level_vocab();
  check_error([&] { load(none).apply_chat_template(user_only, true); },
              "no supported chat template");
  none.chat_template = "{{ bos_token }}[INST] {{ messages[0]['content'] }} [/INST]";
  Tokenizer unknown = load(none);
  CHECK(unknown.chat_format() == ChatFormat::None);
  check_error([&] { unknown.apply_chat_template(user_only, true); }, "no supported chat template");
}

TEST_CASE("loaders: tokenizer rejects malformed vocabularies") {
  const auto bpe = [] {
    Vocab v = byte_level_vocab();
    add_merge(v, "a", "b");
    return v;
  };
  {
    Vocab v = bpe();
    v.model.reset();
    check_rejects(v, "missing tokenizer.ggml.model");
  }
  {
    Vocab v = bpe();
    v.model = "bert";
    check_rejects(v, "unsupported tokenizer model 'bert'");
  }
  {
    Vocab v = bpe();
    v.write_tokens = false;
    check_rejects(v, "missing tokenizer.ggml.tokens");
  }
  {
    Vocab v = bpe();
    v.write_tokens = false;
    v.extra = [](GgufBuilder& b) {
      b.add_array<int32_t>("tokenizer.ggml.tokens", kI32, std::vector<int32_t>{1, 2});
    };
    check_rejects(v, "tokenizer.ggml.tokens");
  }
  {
    Vocab v;
    v.write_types = false;
    check_rejects(v, "tokenizer.ggml.tokens is empty");
  }
  {
    Vocab v = bpe();
    v.types.pop_back();
    check_rejects(v, "token_type has");
  }
  {
    Vocab v = bpe();
    v.types[5] = 9;
    check_rejects(v, "unknown token type 9");
  }
  {
    Vocab v = bpe();
    v.write_merges = false;
    check_rejects(v, "missing tokenizer.ggml.merges");
  }
  {
    Vocab v = bpe();
    v.pre.reset();
    check_rejects(v, "missing tokenizer.ggml.pre");
  }
  {
    Vocab v = bpe();
    v.pre = "bloom";
    check_rejects(v, "unsupported pre-tokenizer 'bloom'");
  }
  {
    Vocab v = bpe();
    v.merges.push_back("zz q");
    check_rejects(v, "'zz' is not a token");
  }
  {
    Vocab v = bpe();
    v.merges.push_back("a c");  // "ac" is no token
    check_rejects(v, "'ac' is not a token");
  }
  {
    Vocab v = bpe();
    v.merges.push_back("abc");
    check_rejects(v, "not two pieces");
  }
  {
    Vocab v = bpe();
    v.merges.push_back("a ");
    check_rejects(v, "not two pieces");
  }
  {
    Vocab v = bpe();
    v.ids["bos"] = 100000;
    check_rejects(v, "bos_token_id 100000 is outside the vocabulary");
  }
  {
    Vocab v = bpe();
    v.extra = [](GgufBuilder& b) { b.add_string("tokenizer.ggml.eot_token_id", "7"); };
    check_rejects(v, "eot_token_id");
  }
  {
    Vocab v = bpe();
    v.ids.erase("bos");
    v.flags["add_bos_token"] = true;
    check_rejects(v, "no BOS token");
  }
  {
    Vocab v = spm_vocab({{"a", -1}});
    v.write_scores = false;
    check_rejects(v, "missing tokenizer.ggml.scores");
  }
  {
    Vocab v = spm_vocab({{"a", -1}});
    v.scores.pop_back();
    check_rejects(v, "scores has");
  }
  {
    Vocab v = spm_vocab({{"a", std::nanf("")}});
    check_rejects(v, "NaN score");
  }
  {
    Vocab v = spm_vocab({{"a", -1}});
    v.add("<0xZZ>", 6);
    check_rejects(v, "is not of the form <0xNN>");
  }
  {
    Vocab v = spm_vocab({{"a", -1}});
    v.extra = [](GgufBuilder& b) {
      b.add_scalar<uint32_t>("tokenizer.ggml.add_bos_token", kU32, 1);
    };
    check_rejects(v, "add_bos_token");
  }
}

TEST_CASE("loaders: tokenizer rejects bad ids and unencodable bytes") {
  Vocab v = byte_level_vocab();
  Tokenizer t = load(v);
  check_error([&] { t.decode(std::vector<int32_t>{5, 259}); }, "token id 259 is outside [0, 259)");
  check_error([&] { t.decode(std::vector<int32_t>{-1}); }, "token id -1");
  check_error([&] { t.token_text(-1); }, "token id -1");
  check_error([&] { t.token_piece(1000); }, "token id 1000");
  check_error([&] { t.token_type(259); }, "token id 259");
  TokenStreamDecoder stream(t);
  check_error([&] { stream.push(300); }, "token id 300");

  // A byte-level vocabulary missing a byte token: <unk> when there is one, else an error.
  Vocab missing = byte_level_vocab();
  missing.tokens[3 + 'z'] = "zz-not-a-byte";
  Tokenizer u = load(missing);
  check_error([&] { u.encode("z", false, false); }, "byte 0x7a has no token");
  missing.ids["unknown"] = 0;
  Tokenizer w = load(missing);
  CHECK(w.encode("az", false, false) == std::vector<int32_t>{w.token_id("a"), 0});
}
