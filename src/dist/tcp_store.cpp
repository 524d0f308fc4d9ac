// The smallest store that starts a NCCL job: rank 0 listens at MASTER_ADDR:MASTER_PORT and hands
// one payload (the NCCL unique id) to each of the other ranks; they connect, retrying until rank
// 0 is up. Every wait is bounded by timeout_seconds(), so a rank that never comes ends the job
// with one line instead of a hang.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "leantrain/dist.h"
#include "leantrain/error.h"
#include "dist/tcp_listen.h"

namespace lt::dist {

namespace {

using Clock = std::chrono::steady_clock;

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

// The listening socket `leantrain train --devices N` opened for rank 0 (LEANTRAIN_STORE_FD), when
// it is one on MASTER_PORT; else -1 (rank 0 binds the port itself).
int inherited_listener(const LaunchInfo& li) {
  const char* v = std::getenv("LEANTRAIN_STORE_FD");
  if (!v) return -1;
  char* end = nullptr;
  const long fd = std::strtol(v, &end, 10);
  if (!*v || *end || fd < 0 || fd > 1 << 20) return -1;
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (::getsockname(int(fd), reinterpret_cast<sockaddr*>(&a), &len) != 0 || a.sin_family != AF_INET ||
      ntohs(a.sin_port) != li.master_port)
    return -1;
  ::unsetenv("LEANTRAIN_STORE_FD");
  return int(fd);
}

// A connection to a port nobody listens on, from the same host, can meet itself (TCP
// simultaneous open when the kernel picks the destination port as the source): not rank 0.
bool self_connected(int fd) {
  sockaddr_in me{}, peer{};
  socklen_t a = sizeof me, b = sizeof peer;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &a) != 0 || ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &b) != 0)
    return false;
  return me.sin_port == peer.sin_port && me.sin_addr.s_addr == peer.sin_addr.s_addr;
}

std::string where(const LaunchInfo& li) { return li.master_addr + ":" + std::to_string(li.master_port); }

[[noreturn]] void store_fail(const LaunchInfo& li, const std::string& why) {
  fail("rank " + std::to_string(li.rank) + ": the rendezvous at " + where(li), why,
       "check MASTER_ADDR / MASTER_PORT and that every rank started (--dist-timeout sets the wait)");
}

// Waits until fd is ready for `events` or the deadline passes.
void wait_ready(const LaunchInfo& li, int fd, short events, Clock::time_point deadline) {
  for (;;) {
    int ms = int(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (ms <= 0) store_fail(li, "timed out waiting for the other ranks");
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, ms);
    if (rc > 0) return;
    if (rc < 0 && errno != EINTR) store_fail(li, std::strerror(errno));
  }
}

void send_all(const LaunchInfo& li, int fd, const void* data, size_t n, Clock::time_point deadline) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    wait_ready(li, fd, POLLOUT, deadline);
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) store_fail(li, k == 0 ? "the peer closed the connection" : std::strerror(errno));
    p += k, n -= size_t(k);
  }
}

void recv_all(const LaunchInfo& li, int fd, void* data, size_t n, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    wait_ready(li, fd, POLLIN, deadline);
    ssize_t k = ::recv(fd, p, n, 0);
    if (k <= 0) store_fail(li, k == 0 ? "rank 0 closed the connection early" : std::strerror(errno));
    p += k, n -= size_t(k);
  }
}

sockaddr_in resolve(const LaunchInfo& li) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(li.master_addr.c_str(), nullptr, &hints, &res) != 0 || !res)
    store_fail(li, "MASTER_ADDR does not resolve to an IPv4 address");
  sockaddr_in a = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
  ::freeaddrinfo(res);
  a.sin_port = htons(uint16_t(li.master_port));
  return a;
}

}  // namespace

int tcp_listen(int port) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) return -1;
  int one = 1;
  ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(uint16_t(port));
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(s, 128) != 0) {
    const int e = errno;
    ::close(s);
    errno = e;
    return -1;
  }
  return s;
}

std::string tcp_store_exchange(const LaunchInfo& li, const std::string& payload) {
  if (li.world_size == 1) return payload;
  if (li.master_addr.empty() || li.master_port == 0)
    store_fail(li, "MASTER_ADDR and MASTER_PORT must both be set for a job of several ranks");
  const auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(timeout_seconds() * 1000));
  sockaddr_in addr = resolve(li);
  if (li.rank == 0) {
    Fd s(inherited_listener(li));
    if (s.get() < 0) {
      s.reset(tcp_listen(li.master_port));
      if (s.get() < 0) store_fail(li, std::string("cannot listen: ") + std::strerror(errno));
    }
    const uint64_t n = payload.size();
    for (int served = 1; served < li.world_size; ++served) {
      wait_ready(li, s.get(), POLLIN, deadline);
      Fd c(::accept(s.get(), nullptr, nullptr));
      if (c.get() < 0) store_fail(li, std::strerror(errno));
      send_all(li, c.get(), &n, sizeof n, deadline);
      send_all(li, c.get(), payload.data(), payload.size(), deadline);
    }
    return payload;
  }
  for (;;) {  // rank 0 may not listen yet: retry until the deadline
    Fd c(::socket(AF_INET, SOCK_STREAM, 0));
    if (::connect(c.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && !self_connected(c.get())) {
      uint64_t n = 0;
      recv_all(li, c.get(), &n, sizeof n, deadline);
      if (n > (1u << 20)) store_fail(li, "the store answered with a malformed length");
      std::string out(size_t(n), '\0');
      recv_all(li, c.get(), out.data(), out.size(), deadline);
      return out;
    }
    if (Clock::now() > deadline) store_fail(li, "rank 0 never answered");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace lt::dist
