// Reading safetensors: the header is validated as strictly as the reference implementation
// does (every tensor's bytes match shape x dtype, tensors tile the data section exactly), so a
// corrupt or truncated file fails at open with a message naming the tensor, not later.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/checked_math.h"
#include "io/file_io.h"
#include "io/input_file.h"
#include "io/unique_keys.h"
#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "leantrain/safetensors.h"

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace lt::io {

namespace {

constexpr int64_t kMaxHeader = 100'000'000;  // the reference reader's limit

[[noreturn]] void bad_file(const std::string& path, const std::string& why) {
  fail("invalid safetensors file '" + path + "'", why, "re-export the file with the safetensors library");
}

DType entry_dtype(const std::string& path, const std::string& name, const std::string& s) {
  static const std::pair<const char*, DType> known[] = {{"F32", DType::F32}, {"F64", DType::F64},
                                                        {"F16", DType::F16}, {"BF16", DType::BF16},
                                                        {"I32", DType::I32}, {"I64", DType::I64},
                                                        {"U8", DType::U8}};
  for (auto& [n, t] : known)
    if (s == n) return t;
  bad_file(path, "tensor '" + name + "' has unknown or unsupported dtype '" + s +
                     "' (leantrain reads F32, F64, F16, BF16, I32, I64, U8)");
}

TensorEntry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& v) {
  if (!v.is_object()) bad_file(path, "header entry '" + name + "' is not an object");
  auto dt = v.find("dtype"), sh = v.find("shape"), off = v.find("data_offsets");
  if (dt == v.end() || !dt->is_string()) bad_file(path, "tensor '" + name + "' has no string \"dtype\"");
  if (sh == v.end() || !sh->is_array()) bad_file(path, "tensor '" + name + "' has no \"shape\" array");
  if (off == v.end() || !off->is_array() || off->size() != 2)
    bad_file(path, "tensor '" + name + "' has no \"data_offsets\" pair");
  TensorEntry e;
  e.name = name;
  e.dtype = entry_dtype(path, name, dt->get<std::string>());
  for (auto& d : *sh) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(INT64_MAX))
      bad_file(path, "tensor '" + name + "' has a bad shape " + sh->dump());
    e.shape.push_back(int64_t(d.get<uint64_t>()));
  }
  const std::string fix = "re-export the file with the safetensors library";
  const int64_t count =
      checked_product(e.shape, "tensor '" + name + "' in '" + path + "': the element count of shape " + sh->dump(), fix);
  for (auto& o : *off)
    if (!o.is_number_unsigned() || o.get<uint64_t>() > uint64_t(INT64_MAX))
      bad_file(path, "tensor '" + name + "' has bad data_offsets " + off->dump());
  e.begin = int64_t((*off)[0].get<uint64_t>());
  e.end = int64_t((*off)[1].get<uint64_t>());
  const int64_t need = checked_mul(count, int64_t(dtype_size(e.dtype)),
                                   "tensor '" + name + "' in '" + path + "': the byte size of shape " + sh->dump(), fix);
  if (e.end < e.begin || e.end - e.begin != need)
    bad_file(path, "tensor '" + name + "' has data_offsets " + off->dump() + " for " + std::to_string(e.end - e.begin) +
                       " bytes, but shape " + shape_str(e.shape) + " of " + dtype_safetensors_name(e.dtype) +
                       " needs " + std::to_string(need));
  return e;
}

}  // namespace

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  InputFile file(path);  // a regular file: a FIFO named *.safetensors would block a plain open()
  fd_ = file.release();
  try {
    parse_header();
  } catch (...) {
    ::close(fd_);  // the destructor does not run when the constructor throws
    fd_ = -1;
    throw;
  }
}

void SafetensorsReader::parse_header() {
  const std::string& path = path_;
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail("cannot open safetensors file '" + path + "'", std::strerror(errno), "");
  if (!S_ISREG(st.st_mode))
    fail("cannot open safetensors file '" + path + "'", "it is not a regular file", "pass the path of a .safetensors file");
  const int64_t size = int64_t(st.st_size);
  if (size < 8) bad_file(path, "it has " + std::to_string(size) + " bytes, fewer than the 8-byte header length");
  uint64_t n = 0;
  detail::read_exact(fd_, &n, 8, 0, path);
  if (n > uint64_t(size - 8))
    bad_file(path, "the header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(size) +
                       " bytes)");
  if (int64_t(n) > kMaxHeader) bad_file(path, "the header is " + std::to_string(n) + " bytes, more than 100 MB");
  std::string text(size_t(n), '\0');
  detail::read_exact(fd_, text.data(), int64_t(n), 8, path);
  data_start_ = 8 + int64_t(n);
  const int64_t data_len = size - data_start_;
  data_len_ = data_len;

  if (text.empty() || text[0] != '{') bad_file(path, "the header does not start with '{'");
  const UniqueKeys keys;
  nlohmann::json header = nlohmann::json::parse(text, keys.callback(), false);
  if (header.is_discarded()) bad_file(path, "the header is not valid JSON");
  if (!keys.duplicate().empty())
    bad_file(path, "the header names '" + keys.duplicate() + "' twice, and which of the two is meant is a guess");
  if (!header.is_object()) bad_file(path, "the header is JSON but not an object");
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) bad_file(path, "__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) bad_file(path, "__metadata__ value '" + m.key() + "' is not a string");
        metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    entries_.push_back(parse_entry(path, it.key(), *it));
  }
  // The tensors must tile the data section: no gap, no overlap, nothing past the end.
  std::sort(entries_.begin(), entries_.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  int64_t pos = 0;
  for (const TensorEntry& e : entries_) {
    if (e.end > data_len)
      bad_file(path, "tensor '" + e.name + "' has data_offsets [" + std::to_string(e.begin) + ", " +
                         std::to_string(e.end) + "] beyond the data section (" + std::to_string(data_len) + " bytes)");
    if (e.begin != pos)
      bad_file(path, "tensor '" + e.name + "' starts at byte " + std::to_string(e.begin) + " of the data, expected " +
                         std::to_string(pos) + " (tensors overlap or leave a gap)");
    pos = e.end;
  }
  if (pos != data_len)
    bad_file(path, "the tensors cover " + std::to_string(pos) + " bytes but the data section has " +
                       std::to_string(data_len));
  for (size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].name] = i;
}

SafetensorsReader::~SafetensorsReader() {
  unmap();
  if (fd_ >= 0) ::close(fd_);
}

const TensorEntry* SafetensorsReader::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

void SafetensorsReader::read_into(const std::string& name, const Tensor& dst, bool allow_cast) const {
  const TensorEntry* e = find(name);
  LT_CHECK(e, "tensor '" + name + "' is not in '" + path_ + "'", "the file has no tensor of that name",
           "check the name or the file");
  LT_CHECK(e->shape == dst.shape(),
           "shape mismatch for '" + name + "'",
           "the file '" + path_ + "' has " + shape_str(e->shape) + ", the destination is " + shape_str(dst.shape()),
           "load a file made for this model configuration");
  LT_CHECK(allow_cast || e->dtype == dst.dtype(), "dtype mismatch for '" + name + "'",
           std::string("the file '") + path_ + "' has " + dtype_safetensors_name(e->dtype) + ", the destination is " +
               dtype_safetensors_name(dst.dtype()),
           "convert the file or allow casting on load");
  if (dst.device().is_meta()) return;
  NoGradGuard no_grad;
  const int64_t n = e->end - e->begin;
  if (dst.device().is_cpu() && dst.dtype() == e->dtype && dst.is_contiguous()) {
    if (n > 0) detail::read_exact(fd_, dst.raw_data(), n, data_start_ + e->begin, path_);
    return;
  }
  // One host staging tensor, never more than this one tensor's bytes.
  MemoryCategoryScope other(Category::Other);
  Tensor host = Tensor::empty(e->shape, e->dtype, Device::cpu());
  if (n > 0) detail::read_exact(fd_, host.raw_data(), n, data_start_ + e->begin, path_);
  copy_(dst, host);
}

Tensor SafetensorsReader::read(const std::string& name, Device device) const {
  const TensorEntry* e = find(name);
  LT_CHECK(e, "tensor '" + name + "' is not in '" + path_ + "'", "the file has no tensor of that name",
           "check the name or the file");
  Tensor t = Tensor::empty(e->shape, e->dtype, device);
  read_into(name, t);
  return t;
}

std::map<std::string, Tensor> load_safetensors(const std::string& path, Device device,
                                               std::map<std::string, std::string>* metadata) {
  SafetensorsReader r(path);
  std::map<std::string, Tensor> out;
  for (const TensorEntry& e : r.entries()) out[e.name] = r.read(e.name, device);
  if (metadata) *metadata = r.metadata();
  return out;
}

}  // namespace lt::io
