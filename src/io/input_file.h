// Opening the files leantrain reads (data, weights, configs). Only a regular file is read: a
// directory, FIFO, device or socket is one clear error before any read, so `--data /dev/zero` or
// a FIFO named model.safetensors can neither hang the run nor fill its memory. The open uses
// O_NONBLOCK (a FIFO would otherwise block in open() until a writer comes), and the kind is
// judged by fstat on the opened descriptor. Files read whole have a size cap.
#pragma once
#include <cstdint>
#include <string>

namespace lt::io {

inline constexpr int64_t kMaxTextBytes = int64_t(4) << 30;     // a text corpus, all its files together
inline constexpr int64_t kMaxConfigBytes = int64_t(64) << 20;  // config.json, state.json: small JSON read whole

// "4 GiB", "64 MiB" or "123 bytes": a cap as the messages name it.
std::string limit_str(int64_t bytes);

class InputFile {
 public:
  // Opens `path` for reading. Throws lt::Error naming the path when it cannot be opened or is
  // not a regular file (after following symlinks).
  explicit InputFile(const std::string& path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  int fd() const { return fd_; }
  int64_t size() const { return size_; }  // fstat's size at open
  // The whole file. More than max_bytes (also when the file grows, or a /proc-like file reports a
  // wrong size) is an lt::Error: "... more than <limit> leantrain reads <as_what> (<fix>)".
  std::string read_all(int64_t max_bytes, const std::string& as_what, const std::string& fix);
  // Hands the descriptor over (e.g. to gzdopen, which closes it); this object no longer owns it.
  int release();

 private:
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
};

// InputFile(path).read_all(max_bytes, as_what, fix).
std::string read_input_file(const std::string& path, int64_t max_bytes, const std::string& as_what,
                            const std::string& fix);

// For readers that open the file themselves (std::ifstream): the same refusals for a path that
// exists (not a regular file, larger than max_bytes); a missing path passes, so the caller still
// reports it in its own words.
void check_input_file_if_exists(const std::string& path, int64_t max_bytes, const std::string& as_what,
                                const std::string& fix);

}  // namespace lt::io
