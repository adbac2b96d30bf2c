#include "loaders/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/error.h"

namespace tessera {

MappedFile map_file(const std::string& path, std::string_view loader) {
  const std::string where = absl::StrCat("[", std::string(loader), "] ", path, ": ");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(absl::StrCat(where, "cannot open: ", std::strerror(errno)));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    throw Error(absl::StrCat(where, "not a regular file"));
  }
  const size_t size = static_cast<size_t>(info.st_size);
  MappedFile file;
  if (size > 0) {
    void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    const int mmap_errno = errno;
    ::close(fd);
    if (addr == MAP_FAILED) throw Error(absl::StrCat(where, "mmap failed: ", std::strerror(mmap_errno)));
    file.owner = std::shared_ptr<const void>(addr, [size](const void* p) { ::munmap(const_cast<void*>(p), size); });
    file.bytes = std::span<const std::byte>(static_cast<const std::byte*>(addr), size);
  } else {
    ::close(fd);
  }
  return file;
}

}  // namespace tessera
