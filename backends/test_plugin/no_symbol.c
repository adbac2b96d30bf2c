/* A shared library without the plugin entry point: the registry must report it, not crash. */
int tessera_backend_not_the_entry_point(void) { return 0; }
