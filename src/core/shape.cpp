#include "leantrain/shape.h"

#include "leantrain/error.h"

namespace lt {

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

int64_t wrap_dim(int64_t d, int64_t rank) {
  int64_t w = d < 0 ? d + rank : d;
  LT_CHECK(w >= 0 && w < rank, "dimension " + std::to_string(d) + " out of range",
           "the tensor has " + std::to_string(rank) + " dimensions", "use a dimension in [-rank, rank)");
  return w;
}

}  // namespace lt
