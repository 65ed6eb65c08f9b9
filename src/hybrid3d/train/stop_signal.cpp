#include "hybrid3d/train/stop_signal.hpp"

#include <csignal>

namespace h3d {

namespace {

volatile std::sig_atomic_t g_stop = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_stop) {  // the second one: give up at once
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_stop = 1;
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking calls (MPI, file reads) carry on
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

bool stop_requested() { return g_stop != 0; }

}  // namespace h3d
