// Lists the backends this build can create (built-in and plugins on TESSERA_BACKEND_PATH, else
// the build's plugin directory) with the device each one runs on, or why it is absent; with
// names, only those (`list_backends cpu`: the CPU kernels' instruction set, which
// scripts/isa_cap.sh compares with and without a TESSERA_CPU_ISA cap).
//
//   list_backends [--smoke] [NAME...]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/registry.h"

using namespace tessera;

int main(int argc, char** argv) {
  std::vector<std::string> names;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: list_backends [--smoke] [NAME...]\nLists the backends this build can create (or the named ones), with "
          "their device or why each is absent.\n");
      return 0;
    }
    if (a == "--smoke") continue;
    if (a.starts_with("-")) {
      std::fprintf(stderr, "error: [list_backends] unknown argument %s\n", a.c_str());
      return 2;
    }
    names.push_back(a);
  }
  if (names.empty()) names = {"cpu", "reference", "opencl", "vulkan", "cuda", "devsim"};
  if (std::getenv("TESSERA_BACKEND_PATH") == nullptr) setenv("TESSERA_BACKEND_PATH", TESSERA_PLUGIN_DIR, 1);
  BackendRegistry registry;
  for (const std::string& name : names) {
    absl::StatusOr<std::unique_ptr<Backend>> backend = registry.create(name);
    if (backend.ok()) std::printf("%-10s available: %s\n", name.c_str(), (*backend)->description().c_str());
    else std::printf("%-10s absent: %s\n", name.c_str(), std::string(backend.status().message()).substr(0, 160).c_str());
  }
  return 0;
}
