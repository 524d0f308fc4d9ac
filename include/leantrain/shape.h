#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace lt {

using Shape = std::vector<int64_t>;

int64_t numel(const Shape& s);
Shape contiguous_strides(const Shape& s);
std::string shape_str(const Shape& s);  // "[2, 3, 4]"
// Normalises a possibly negative dimension index; throws lt::Error when out of range.
int64_t wrap_dim(int64_t d, int64_t rank);

}  // namespace lt
