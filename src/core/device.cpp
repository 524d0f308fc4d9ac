#include "leantrain/device.h"

#include <charconv>

#include "leantrain/error.h"

namespace lt {

Device Device::parse(std::string_view s) {
  if (s == "cpu") return cpu();
  if (s == "meta") return meta();
  if (s == "cuda") return cuda(0);
  if (s.starts_with("cuda:")) {
    int idx = -1;
    auto tail = s.substr(5);
    auto [p, ec] = std::from_chars(tail.data(), tail.data() + tail.size(), idx);
    if (ec == std::errc() && p == tail.data() + tail.size() && idx >= 0) return cuda(idx);
  }
  fail("unknown device '" + std::string(s) + "'", "devices are cpu, cuda, cuda:N and meta",
       "pass --device cpu, cuda, cuda:0 or auto");
}

std::string Device::str() const {
  switch (type) {
    case DeviceType::CPU: return "cpu";
    case DeviceType::Meta: return "meta";
    case DeviceType::CUDA: return "cuda:" + std::to_string(index);
  }
  return "?";
}

}  // namespace lt
