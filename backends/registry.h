// BackendRegistry: finds backends by name at run time.
//
// "cpu" and "reference" are built in. Any other name is a plugin, libtessera_backend_<name>.so,
// looked up in the directories of the search path in order (the first that loads wins): the
// entries of TESSERA_BACKEND_PATH (colon-separated; empty entries skipped), then the install
// location <CMAKE_INSTALL_PREFIX>/lib/tessera. The plugin ABI is documented at the end of
// backends/backend.h. A missing directory or file, a file dlopen rejects (not a library, a
// missing runtime library such as libcuda), a library without the entry point, another ABI
// version or a failing create() make the backend absent: create() returns NotFound listing
// every path tried and why, never crashes. Thread-safe (no mutable state; dlopen is).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/backend.h"

namespace tessera {

class BackendRegistry {
 public:
  // TESSERA_BACKEND_PATH's directories (read now), then the install location.
  static std::vector<std::string> default_search_path();
  BackendRegistry() : BackendRegistry(default_search_path()) {}
  explicit BackendRegistry(std::vector<std::string> search_path)
      : search_path_(std::move(search_path)) {}

  const std::vector<std::string>& search_path() const { return search_path_; }
  // A new backend called `name` (lower-case letters, digits and '_'): a built-in one or a plugin.
  // InvalidArgument for a malformed name; NotFound (with every path tried) when absent.
  absl::StatusOr<std::unique_ptr<Backend>> create(std::string_view name) const;
  // A new backend from one plugin file (its own name, whatever the file is called).
  static absl::StatusOr<std::unique_ptr<Backend>> create_from_file(const std::string& path);
  // The built-in names, then the plugin names whose files exist on the search path (files are
  // not loaded: a name listed here may still fail to create).
  std::vector<std::string> available() const;

 private:
  std::vector<std::string> search_path_;
};

}  // namespace tessera
