#include "backends/registry.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#ifndef TESSERA_INSTALL_BACKEND_DIR
#define TESSERA_INSTALL_BACKEND_DIR "/usr/local/lib/tessera"
#endif

namespace tessera {

namespace {

constexpr std::string_view kPrefix = "libtessera_backend_";
constexpr std::string_view kSuffix = ".so";

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

// Why a plugin file gave no backend, or the backend; `want` (when not empty) must be its name.
absl::StatusOr<std::unique_ptr<Backend>> load_plugin(const std::string& path,
                                                     std::string_view want) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return absl::NotFoundError("no such file");
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat("dlopen failed: ", why != nullptr ? why : "unknown error"));
  }
  auto reject = [&](std::string message) {
    dlclose(handle);  // nothing of it was used
    return absl::FailedPreconditionError(std::move(message));
  };
  void* symbol = dlsym(handle, TESSERA_BACKEND_PLUGIN_SYMBOL);
  if (symbol == nullptr)
    return reject(absl::StrCat("no entry point '", TESSERA_BACKEND_PLUGIN_SYMBOL, "'"));
  const TesseraBackendPlugin* plugin = reinterpret_cast<TesseraBackendPluginFn>(symbol)();
  if (plugin == nullptr) return reject("the entry point returned no descriptor");
  if (plugin->abi_version != TESSERA_BACKEND_ABI_VERSION)
    return reject(absl::StrCat("plugin ABI version ", plugin->abi_version, ", this build needs ",
                               TESSERA_BACKEND_ABI_VERSION));
  if (plugin->name == nullptr || plugin->create == nullptr) return reject("incomplete descriptor");
  if (!want.empty() && std::string_view(plugin->name) != want)
    return reject(
        absl::StrCat("the library is backend '", plugin->name, "', not '", std::string(want), "'"));
  char error[512] = {};
  Backend* backend = plugin->create(error, sizeof(error));
  error[sizeof(error) - 1] = '\0';
  // The library stays loaded (even on failure, create may have registered things): see backend.h.
  if (backend == nullptr)
    return absl::FailedPreconditionError(absl::StrCat("create failed: ", error));
  return std::unique_ptr<Backend>(backend);
}

}  // namespace

std::vector<std::string> BackendRegistry::default_search_path() {
  std::vector<std::string> path;
  if (const char* env = std::getenv("TESSERA_BACKEND_PATH"))
    for (absl::string_view dir : absl::StrSplit(env, ':', absl::SkipEmpty()))
      path.emplace_back(dir);
  path.emplace_back(TESSERA_INSTALL_BACKEND_DIR);
  return path;
}

absl::StatusOr<std::unique_ptr<Backend>> BackendRegistry::create(std::string_view name) const {
  if (name == "cpu") return make_cpu_backend();
  if (name == "reference") return make_reference_backend();
  if (!valid_name(name))
    return absl::InvalidArgumentError(
        absl::StrCat("[backend] '", std::string(name),
                     "' is not a backend name (lower-case letters, digits, '_')"));
  std::vector<std::string> tried;
  for (const std::string& dir : search_path_) {
    const std::string path =
        absl::StrCat(dir, "/", std::string(kPrefix), std::string(name), std::string(kSuffix));
    absl::StatusOr<std::unique_ptr<Backend>> backend = load_plugin(path, name);
    if (backend.ok()) return backend;
    tried.push_back(absl::StrCat(path, " (", backend.status().message(), ")"));
  }
  return absl::NotFoundError(absl::StrCat(
      "[backend] no backend '", std::string(name), "': built in are cpu, reference; tried ",
      tried.empty() ? std::string("no plugin directory") : absl::StrJoin(tried, "; "),
      " (set TESSERA_BACKEND_PATH to the plugin directories)"));
}

absl::StatusOr<std::unique_ptr<Backend>> BackendRegistry::create_from_file(
    const std::string& path) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = load_plugin(path, "");
  if (backend.ok()) return backend;
  return absl::Status(backend.status().code(),
                      absl::StrCat("[backend] ", path, ": ", backend.status().message()));
}

std::vector<std::string> BackendRegistry::available() const {
  std::vector<std::string> names = {"cpu", "reference"};
  for (const std::string& dir : search_path_) {
    std::error_code ec;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string file = it->path().filename().string();
      if (file.size() <= kPrefix.size() + kSuffix.size() || !file.starts_with(kPrefix) ||
          !file.ends_with(kSuffix))
        continue;
      std::string name = file.substr(kPrefix.size(), file.size() - kPrefix.size() - kSuffix.size());
      if (valid_name(name) && std::find(names.begin(), names.end(), name) == names.end())
        names.push_back(name);
    }
  }
  return names;
}

}  // namespace tessera
