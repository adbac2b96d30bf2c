// Byte-level BPE (GPT-2 style): pre-tokenizer, byte-to-unicode table, merges.
#include <limits>
#include <queue>

#include "absl/strings/str_cat.h"
#include "engine/error.h"
#include "loaders/gguf.h"
#include "loaders/tokenizer_state.h"
#include "loaders/tokenizer_unicode.h"

namespace tessera {
namespace {

using unicode::CodepointClass;

struct Codepoint {
  char32_t cp;
  CodepointClass cls;
  size_t offset;  // byte offset in the text
};

// One match of the GPT-2 regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// starting at cps[i], within [i, end). Returns the index one past the match.
size_t match_gpt2(const std::vector<Codepoint>& cps, size_t i, size_t end) {
  const char32_t cp = cps[i].cp;
  if (cp == '\'' && i + 1 < end) {
    const char32_t c1 = cps[i + 1].cp;
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return i + 2;
    if (i + 2 < end) {
      const char32_t c2 = cps[i + 2].cp;
      if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
        return i + 3;
      }
    }
  }
  // ' ?X+' for X in letters, numbers, other: an optional space, then a run of one class.
  size_t k = i;
  if (cp == ' ' && i + 1 < end && cps[i + 1].cls != CodepointClass::Whitespace) k = i + 1;
  const CodepointClass run = cps[k].cls;
  if (run != CodepointClass::Whitespace) {
    while (k < end && cps[k].cls == run) ++k;
    return k;
  }
  // Whitespace: all of it at the end of the text, else all but the last one (which then
  // prefixes the next word), else the single whitespace character.
  size_t j = i;
  while (j < end && cps[j].cls == CodepointClass::Whitespace) ++j;
  if (j == end) return end;
  return j - i >= 2 ? j - 1 : j;
}

bool is_newline(char32_t cp) {
  return cp == '\r' || cp == '\n';
}

// One match of the Llama-3 / Qwen2 regex (see PreTokenizer) at cps[i], within [i, end).
size_t match_llama3(const std::vector<Codepoint>& cps, size_t i, size_t end, size_t max_digits) {
  const auto lower = [](char32_t c) { return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c; };
  if (cps[i].cp == '\'' && i + 1 < end) {
    const char32_t c1 = lower(cps[i + 1].cp);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return i + 2;
    if (i + 2 < end) {
      const char32_t c2 = lower(cps[i + 2].cp);
      if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
        return i + 3;
      }
    }
  }
  const CodepointClass cls = cps[i].cls;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  size_t k = i;
  if (cls != CodepointClass::Letter && cls != CodepointClass::Number && !is_newline(cps[i].cp) &&
      i + 1 < end && cps[i + 1].cls == CodepointClass::Letter) {
    k = i + 1;
  }
  if (cps[k].cls == CodepointClass::Letter) {
    while (k < end && cps[k].cls == CodepointClass::Letter) ++k;
    return k;
  }
  if (cls == CodepointClass::Number) {
    for (k = i; k < end && k - i < max_digits && cps[k].cls == CodepointClass::Number;) ++k;
    return k;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  k = cps[i].cp == ' ' && i + 1 < end && cps[i + 1].cls == CodepointClass::Other ? i + 1 : i;
  if (cps[k].cls == CodepointClass::Other) {
    while (k < end && cps[k].cls == CodepointClass::Other) ++k;
    while (k < end && is_newline(cps[k].cp)) ++k;
    return k;
  }
  // Whitespace: through its last newline (\s*[\r\n]+), else as in GPT-2.
  size_t j = i;
  while (j < end && cps[j].cls == CodepointClass::Whitespace) ++j;
  for (size_t p = j; p > i; --p) {
    if (is_newline(cps[p - 1].cp)) return p;
  }
  if (j == end) return end;
  return j - i >= 2 ? j - 1 : j;
}

void split(PreTokenizer pre, std::string_view text, const std::vector<Codepoint>& cps, size_t begin,
           size_t end, std::vector<std::string_view>& words) {
  const auto offset = [&](size_t i) { return i < cps.size() ? cps[i].offset : text.size(); };
  for (size_t i = begin; i < end;) {
    size_t next = 0;
    switch (pre) {
      case PreTokenizer::Gpt2:
      case PreTokenizer::SmolLm:
        next = match_gpt2(cps, i, end);
        break;
      case PreTokenizer::Llama3:
        next = match_llama3(cps, i, end, 3);
        break;
      case PreTokenizer::Qwen2:
        next = match_llama3(cps, i, end, 1);
        break;
    }
    words.push_back(text.substr(offset(i), offset(next) - offset(i)));
    i = next;
  }
}

std::array<char32_t, 256> make_byte_table() {
  std::array<char32_t, 256> table{};
  char32_t next_unprintable = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable =
        (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    table[b] = printable ? static_cast<char32_t>(b) : next_unprintable++;
  }
  return table;
}

// A token's bytes: each code point of its spelling through the inverse byte table; code
// points outside the table (not produced by the byte-level encoder) are kept as UTF-8.
std::string bytes_of_piece(std::string_view piece,
                           const absl::flat_hash_map<char32_t, uint8_t>& inverse) {
  std::string out;
  for (size_t pos = 0; pos < piece.size();) {
    const unicode::Utf8Char ch = unicode::decode_utf8(piece, pos);
    const auto it = ch.cp == unicode::kInvalid ? inverse.end() : inverse.find(ch.cp);
    if (it != inverse.end()) {
      out += static_cast<char>(it->second);
    } else {
      out.append(piece.substr(pos, ch.length));
    }
    pos += ch.length;
  }
  return out;
}

PreTokenizer pre_tokenizer_for(const Tokenizer::State& state, std::string_view name) {
  // Names grouped as in llama.cpp's llama-vocab.cpp, which gives each group one regex.
  struct Group {
    PreTokenizer pre;
    std::initializer_list<std::string_view> names;
  };
  static const Group kGroups[] = {
      {PreTokenizer::Gpt2, {"gpt2", "mpt", "olmo", "jais", "trillion"}},
      {PreTokenizer::SmolLm,
       {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"}},
      {PreTokenizer::Llama3,
       {"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral", "dbrx", "smaug-bpe"}},
      {PreTokenizer::Qwen2, {"qwen2", "deepseek-r1-qwen", "stablelm2", "hunyuan"}},
  };
  for (const Group& group : kGroups) {
    for (std::string_view candidate : group.names) {
      if (name == candidate) return group.pre;
    }
  }
  state.fail(absl::StrCat("unsupported pre-tokenizer '", std::string(name),
                          "' for a gpt2 vocabulary (supported: gpt2, smollm, llama3, qwen2 and "
                          "names llama.cpp treats alike)"));
}

struct Candidate {
  int32_t rank;
  int32_t left;  // symbol index
  int32_t left_id;
  int32_t right_id;
  // Lowest rank first; leftmost first among equal ranks (the same pair).
  bool operator<(const Candidate& other) const {
    return rank != other.rank ? rank > other.rank : left > other.left;
  }
};

void encode_word(const Tokenizer::State& state, std::string_view word, std::vector<int32_t>& out) {
  struct Symbol {
    int32_t id;  // -1: byte without a token; -2: merged into its left neighbour
    int32_t prev;
    int32_t next;
  };
  const auto n = static_cast<int32_t>(word.size());
  std::vector<Symbol> symbols(n);
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = {state.byte_tokens[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1};
  }
  std::priority_queue<Candidate> agenda;
  const auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0 || symbols[left].id < 0 || symbols[right].id < 0) return;
    const uint64_t key =
        (static_cast<uint64_t>(symbols[left].id) << 32) | static_cast<uint32_t>(symbols[right].id);
    const auto it = state.merges.find(key);
    if (it == state.merges.end()) return;
    agenda.push({it->second.rank, left, symbols[left].id, symbols[right].id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i, i + 1);

  while (!agenda.empty()) {
    const Candidate c = agenda.top();
    agenda.pop();
    Symbol& left = symbols[c.left];
    if (left.id != c.left_id || left.next < 0 || symbols[left.next].id != c.right_id) continue;
    const int32_t right = left.next;
    const uint64_t key =
        (static_cast<uint64_t>(c.left_id) << 32) | static_cast<uint32_t>(c.right_id);
    left.id = state.merges.at(key).result;
    left.next = symbols[right].next;
    if (left.next >= 0) symbols[left.next].prev = c.left;
    symbols[right].id = -2;
    consider(left.prev, c.left);
    consider(c.left, left.next);
  }

  for (int32_t i = 0; i >= 0 && i < n; i = symbols[i].next) {
    if (symbols[i].id >= 0) {
      out.push_back(symbols[i].id);
    } else if (state.unk >= 0) {
      out.push_back(state.unk);
    } else {
      state.fail(absl::StrCat("byte 0x", absl::Hex(static_cast<uint8_t>(word[i]), absl::kZeroPad2),
                              " has no token and there is no unknown token"));
    }
  }
}

}  // namespace

const std::array<char32_t, 256>& gpt2_byte_to_codepoint() {
  static const std::array<char32_t, 256> table = make_byte_table();
  return table;
}

std::vector<std::string_view> pre_tokenize(PreTokenizer pre, std::string_view text) {
  std::vector<Codepoint> cps;
  cps.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const unicode::Utf8Char ch = unicode::decode_utf8(text, pos);
    const CodepointClass cls =
        ch.cp == unicode::kInvalid ? CodepointClass::Other : unicode::classify(ch.cp);
    cps.push_back({ch.cp, cls, pos});
    pos += ch.length;
  }
  std::vector<std::string_view> words;
  if (pre != PreTokenizer::SmolLm) {
    split(pre, text, cps, 0, cps.size(), words);
    return words;
  }
  // SmolLm: each number code point is a piece of its own; the regex runs inside the rest.
  size_t begin = 0;
  for (size_t i = 0; i <= cps.size(); ++i) {
    if (i < cps.size() && cps[i].cls != CodepointClass::Number) continue;
    split(pre, text, cps, begin, i, words);
    if (i < cps.size()) split(pre, text, cps, i, i + 1, words);
    begin = i + 1;
  }
  return words;
}

void load_bpe_vocab(const GgufFile& file, Tokenizer::State& state) {
  const GgufValue* pre = file.find("tokenizer.ggml.pre");
  if (pre == nullptr) state.fail("missing tokenizer.ggml.pre");
  std::string pre_name;
  try {
    pre_name = std::string(pre->as_string());
  } catch (const Error& e) {
    state.fail(absl::StrCat("metadata tokenizer.ggml.pre: ", e.what()));
  }
  state.pre = pre_tokenizer_for(state, pre_name);

  const auto& table = gpt2_byte_to_codepoint();
  absl::flat_hash_map<char32_t, uint8_t> inverse;
  for (int b = 0; b < 256; ++b) {
    inverse[table[b]] = static_cast<uint8_t>(b);
    std::string piece;
    unicode::append_utf8(piece, table[b]);
    state.byte_tokens[b] = state.find_piece(piece);
  }
  state.texts.resize(state.pieces.size());
  for (size_t id = 0; id < state.pieces.size(); ++id) {
    const TokenType type = state.types[id];
    const bool raw = type == TokenType::Control || type == TokenType::UserDefined;
    state.texts[id] = raw ? state.pieces[id] : bytes_of_piece(state.pieces[id], inverse);
  }

  const GgufValue* merges = file.find("tokenizer.ggml.merges");
  if (merges == nullptr) state.fail("missing tokenizer.ggml.merges");
  const std::vector<std::string_view>* lines = nullptr;
  try {
    lines = &merges->strings();
  } catch (const Error& e) {
    state.fail(absl::StrCat("metadata tokenizer.ggml.merges: ", e.what()));
  }
  if (lines->size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    state.fail("tokenizer.ggml.merges has more than 2^31 - 1 merges");
  }
  state.merges.reserve(lines->size());
  const auto lookup = [&](size_t rank, std::string_view line, std::string_view piece) {
    const int32_t id = state.find_piece(piece);
    if (id < 0) {
      state.fail(absl::StrCat("merge ", rank, " '", std::string(line), "': '", std::string(piece),
                              "' is not a token"));
    }
    return id;
  };
  for (size_t rank = 0; rank < lines->size(); ++rank) {
    const std::string_view line = (*lines)[rank];
    const size_t space = line.size() < 2 ? std::string_view::npos : line.find(' ', 1);
    if (space == std::string_view::npos || space + 1 == line.size()) {
      state.fail(absl::StrCat("merge ", rank, " '", std::string(line),
                              "' is not two pieces separated by a space"));
    }
    const std::string_view left = line.substr(0, space);
    const std::string_view right = line.substr(space + 1);
    const int32_t left_id = lookup(rank, line, left);
    const int32_t right_id = lookup(rank, line, right);
    const int32_t result = lookup(rank, line, absl::StrCat(std::string(left), std::string(right)));
    const uint64_t key = (static_cast<uint64_t>(left_id) << 32) | static_cast<uint32_t>(right_id);
    state.merges.try_emplace(key, BpeMerge{static_cast<int32_t>(rank), result});  // first wins
  }
}

void encode_bpe(const Tokenizer::State& state, std::string_view text, std::vector<int32_t>& out) {
  const auto& table = gpt2_byte_to_codepoint();
  std::string spelled;
  for (std::string_view word : pre_tokenize(state.pre, text)) {
    if (state.pre == PreTokenizer::Llama3) {  // Llama-3's ignore_merges
      spelled.clear();
      for (char c : word) unicode::append_utf8(spelled, table[static_cast<uint8_t>(c)]);
      const int32_t id = state.find_piece(spelled);
      if (id >= 0 && state.types[id] == TokenType::Normal) {
        out.push_back(id);
        continue;
      }
    }
    encode_word(state, word, out);
  }
}

}  // namespace tessera
