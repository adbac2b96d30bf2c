// A read-only memory mapping of a whole file, shared by the loaders (GGUF, safetensors).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace tessera {

struct MappedFile {
  std::span<const std::byte> bytes;   // the file's contents (empty for an empty file)
  std::shared_ptr<const void> owner;  // unmaps when the last holder lets go
};

// Maps `path`. Errors (missing, not a regular file, mmap failure) throw Error prefixed
// "[<loader>] <path>: ".
MappedFile map_file(const std::string& path, std::string_view loader);

}  // namespace tessera
