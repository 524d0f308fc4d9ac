// The memory-mapped view of a safetensors file's data: what streaming loads copy from
// (io/weight_load.cpp), one tensor at a time, without reading the file into a host buffer.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "leantrain/error.h"
#include "leantrain/safetensors.h"

namespace lt::io {

const uint8_t* SafetensorsReader::mapped_data() const {
  if (data_len_ == 0) return nullptr;
  if (!map_) {
    const int64_t len = data_start_ + data_len_;
    void* p = ::mmap(nullptr, size_t(len), PROT_READ, MAP_PRIVATE, fd_, 0);
    if (p == MAP_FAILED)
      fail("cannot map safetensors file '" + path_ + "'", std::string("mmap failed: ") + std::strerror(errno),
           "check that the file is on a local or mappable file system");
    ::madvise(p, size_t(len), MADV_SEQUENTIAL);  // a hint: tensors are read front to back
    map_ = p;
    map_len_ = len;
  }
  return static_cast<const uint8_t*>(map_) + data_start_;
}

void SafetensorsReader::unmap() const {
  if (!map_) return;
  ::munmap(map_, size_t(map_len_));
  map_ = nullptr;
  map_len_ = 0;
}

void SafetensorsReader::release_pages(int64_t begin, int64_t end) const {
  if (!map_ || end <= begin) return;
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  // Whole pages inside the range only: a page shared with a neighbouring tensor stays mapped.
  const int64_t lo = (data_start_ + begin + page - 1) / page * page, hi = (data_start_ + end) / page * page;
  if (hi > lo) ::madvise(static_cast<uint8_t*>(map_) + lo, size_t(hi - lo), MADV_DONTNEED);
}

}  // namespace lt::io
