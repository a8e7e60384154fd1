// A shared library that is not a Kestrel plugin: it exports no kestrel_plugin_v1.
extern "C" __attribute__((visibility("default"))) int some_other_library_function() { return 42; }
