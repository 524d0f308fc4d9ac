// Where a tensor lives: the CPU, a CUDA GPU, or `meta` (shapes only: no data, no compute,
// the same allocation sequence; this is how a dry-run predicts memory).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace lt {

enum class DeviceType : uint8_t { CPU, CUDA, Meta };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }
  static Device meta() { return {DeviceType::Meta, 0}; }
  static Device parse(std::string_view s);  // "cpu", "cuda", "cuda:1", "meta"; throws lt::Error

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool is_meta() const { return type == DeviceType::Meta; }
  std::string str() const;
  bool operator==(const Device&) const = default;
};

// True when this binary has the CUDA backend and a GPU answers.
bool cuda_available();
int cuda_device_count();

}  // namespace lt
