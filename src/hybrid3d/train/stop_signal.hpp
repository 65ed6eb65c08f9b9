// Graceful stops: SIGTERM or SIGINT (a batch system's time limit, Ctrl-C)
// on any rank asks the job to stop after the current step; the Trainer
// then agrees over MPI, writes a checkpoint and ends with exit code 4. A
// second signal ends the process at once (default action).
#pragma once

namespace h3d {

void install_stop_handlers();
bool stop_requested();  // a first signal arrived on this rank

}  // namespace h3d
