// The smallest host program: the devices the engine found (built with pkg-config by
// tests/install/check_install.sh:  c++ -std=c++20 devices.cpp $(pkg-config --cflags --libs kestrel)).
#include <kestrel/engine.h>

#include <cstdio>

int main() {
  for (const kestrel::PluginInfo& plugin : kestrel::Engine::global().plugins())
    for (const kestrel::DeviceInfo& device : plugin.devices)
      std::printf("%s:%d %s\n", plugin.name.c_str(), device.index, device.name.c_str());
  return 0;
}
