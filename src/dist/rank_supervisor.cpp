#include "dist/rank_supervisor.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace lt::dist {

namespace {

volatile sig_atomic_t g_child = 0;
volatile sig_atomic_t g_passed_on = 0;  // a signal this supervisor forwarded: the job is ending

void pass_on(int sig) {
  g_passed_on = 1;
  if (g_child > 0) ::kill(pid_t(g_child), sig);
}

}  // namespace

void supervise_rank_if_asked() {
  if (!std::getenv(kSuperviseEnv)) return;
  ::unsetenv(kSuperviseEnv);
  const pid_t child = ::fork();
  if (child < 0) return;  // no supervisor, the rank runs as it would have
  if (child == 0) return;
  g_child = child;
  struct sigaction sa {};
  sa.sa_handler = pass_on;
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) ::sigaction(sig, &sa, nullptr);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) std::_Exit(WEXITSTATUS(status));
  const int sig = WTERMSIG(status);
  if (!g_passed_on) {
    const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
    std::fprintf(stderr, "leantrain: error: rank %s was killed by signal %d (%s); ending the other ranks\n",
                 rank ? rank : "?", sig, strsignal(sig));
    std::fflush(stderr);
  }
  std::_Exit(128 + sig);
}

}  // namespace lt::dist
