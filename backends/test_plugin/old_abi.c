/* A plugin descriptor of another ABI version: the registry must reject it before reading any
 * other member. */
#include <stddef.h>
#include <stdint.h>

struct OldDescriptor {
  uint32_t abi_version;
};

static const struct OldDescriptor kDescriptor = {0xdead};

__attribute__((visibility("default"))) const struct OldDescriptor* tessera_backend_plugin(void) {
  return &kDescriptor;
}
