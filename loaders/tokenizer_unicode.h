// Unicode helpers for the tokenizers: UTF-8 decoding that never fails and the code point
// classes the pre-tokenizer regexes need (\p{L}, \p{N}, \s). Internal to loaders/tokenizer*.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::unicode {

enum class CodepointClass : uint8_t { Other, Letter, Number, Whitespace };

// Letter = general category L*, Number = N*, Whitespace = the White_Space property (Unicode
// 14 tables). Everything else, including invalid code points, is Other.
CodepointClass classify(char32_t cp);

// A code point decoded from UTF-8: `length` bytes (1..4). Invalid or truncated sequences
// decode byte by byte as kInvalid with length 1, so every byte of the input is covered.
struct Utf8Char {
  char32_t cp = 0;
  uint32_t length = 1;
};
inline constexpr char32_t kInvalid = 0xFFFFFFFF;

Utf8Char decode_utf8(std::string_view text, size_t pos);

// Byte length of a UTF-8 sequence from its lead byte (1 for continuation or invalid bytes).
uint32_t utf8_length_from_lead(uint8_t lead);

void append_utf8(std::string& out, char32_t cp);

}  // namespace tessera::unicode
