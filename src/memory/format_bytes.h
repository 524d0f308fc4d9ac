// Sizes as people read them, in binary units: "1.50 GiB", "12.00 MiB", "3.0 KiB", "512 B" (the
// allocator's errors, the memory table, plans). Below train, so offload's disk tier can use it.
#pragma once
#include <cstdint>
#include <string>

namespace lt {

std::string format_bytes(int64_t bytes);

}  // namespace lt
