// hybrid3d command line. Parses flags (command_line.hpp), builds the
// Trainer, runs it, and decides how the job ends on error:
//  - a UsageError (a flag, a layout, a file every rank reads the same) is
//    printed once and every rank exits 2, after agreeing over MPI that some
//    rank failed (so a failure on one rank never leaves the others waiting);
//  - any other error during training is printed by the failing rank, which
//    then aborts the whole job (MPI_Abort), so nothing hangs;
//  - SIGTERM / SIGINT stops training after the current step with a
//    checkpoint: exit 4 (a second signal ends the process at once);
//  - a checkpoint that cannot be written (a full disk) stops every rank
//    alike: exit 5, the earlier checkpoints intact.
#include <cstdio>

#include "command_line.hpp"
#include "hybrid3d/core/error.hpp"
#include "hybrid3d/data/preprocess.hpp"
#include "hybrid3d/data/universe_writer.hpp"
#include "hybrid3d/models/registry.hpp"
#include "hybrid3d/parallel/comm.hpp"
#include "hybrid3d/parallel/threads.hpp"
#include "hybrid3d/train/plan_command.hpp"
#include "hybrid3d/train/checkpoint.hpp"
#include "hybrid3d/train/predictor.hpp"
#include "hybrid3d/train/regression_predictor.hpp"
#include "hybrid3d/train/stop_signal.hpp"
#include "hybrid3d/train/trainer.hpp"

namespace {

void print_error(const std::exception& e, int rank, int size) {
  if (size > 1 && !dynamic_cast<const h3d::UsageError*>(&e))
    std::fprintf(stderr, "hybrid3d: error (rank %d): %s\n", rank, e.what());
  else
    std::fprintf(stderr, "hybrid3d: error: %s\n", e.what());
  std::fflush(stderr);
}

// Every rank says whether it failed; the lowest failing rank prints. Returns
// true if any rank failed. Collective: all ranks must reach it.
bool any_rank_failed(const h3d::Comm& world, const std::exception* local) {
  const int lowest = world.allreduce_min(local ? world.rank() : world.size());
  if (local && lowest == world.rank()) print_error(*local, world.rank(), world.size());
  return lowest < world.size();
}

// `hybrid3d generate` and `preprocess`: bad options and inputs are found
// alike on every rank (exit 2, rank 0 prints); a failure while writing
// aborts the job.
template <typename Tool>
int run_tool(const h3d::Comm& world, Tool tool) {
  try {
    tool();
  } catch (const h3d::UsageError& e) {
    if (world.rank() == 0) print_error(e, 0, 1);
    return 2;
  } catch (const std::exception& e) {
    print_error(e, world.rank(), world.size());
    h3d::mpi_abort(1);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  h3d::mpi_init(&argc, &argv);
  int code = 0;
  {
    h3d::Comm world = h3d::Comm::world();
    h3d::CommandLine cli;
    try {
      cli.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      if (world.rank() == 0) cli.print(e);
      h3d::mpi_finalize();
      return 0;
    } catch (const CLI::ParseError& e) {
      if (world.rank() == 0) {
        std::fprintf(stderr, "hybrid3d: error: %s (see hybrid3d %s --help)\n", e.what(), argc > 1 ? argv[1] : "");
      }
      h3d::mpi_finalize();
      return 2;
    } catch (const h3d::UsageError& e) {
      if (world.rank() == 0) print_error(e, 0, 1);
      h3d::mpi_finalize();
      return 2;
    }
    const std::string command = cli.command();

    if (command != "train") {
      if (command == "generate")
        code = run_tool(world, [&] {
          if (cli.generate.kind == "segmentation")
            h3d::generate_segmentation_cases(world, cli.generate);
          else if (cli.generate.kind == "cosmoflow")
            h3d::generate_universes(world, cli.generate);
          else
            H3D_THROW(h3d::UsageError, "--kind '" << cli.generate.kind << "' is unknown; use cosmoflow or segmentation");
        });
      else if (command == "preprocess")
        code = run_tool(world, [&] { h3d::preprocess_universes(world, cli.preprocess); });
      else if (command == "plan")
        code = run_tool(world, [&] { h3d::run_plan(world, cli.plan); });
      else
        code = run_tool(world, [&] {
          h3d::set_rank_threads(world, cli.threads);
          if (h3d::is_segmentation(cli.predict.model))
            h3d::predict_volume(world, cli.predict);
          else
            h3d::predict_regression(world, cli.predict);
        });
      h3d::mpi_finalize();
      return code;
    }

    std::unique_ptr<h3d::Trainer> trainer;
    std::unique_ptr<std::exception> failure;
    try {
      h3d::set_rank_threads(world, cli.threads);
      trainer = std::make_unique<h3d::Trainer>(world, cli.train);
    } catch (const h3d::UsageError& e) {
      failure = std::make_unique<h3d::UsageError>(e);
    } catch (const std::exception& e) {
      failure = std::make_unique<h3d::Error>(e.what());
    }
    if (any_rank_failed(world, failure.get())) {
      trainer.reset();
      h3d::mpi_finalize();
      return 2;
    }

    try {
      h3d::install_stop_handlers();
      trainer->run();
      if (trainer->stopped_by_signal()) code = 4;
    } catch (const h3d::CheckpointError& e) {
      // Every rank learnt that the checkpoint failed: one message, clean exit.
      if (world.rank() == 0) print_error(e, 0, 1);
      code = 5;
    } catch (const h3d::UsageError& e) {
      // Detected identically by every rank (a non-finite loss): one message, clean exit.
      if (world.rank() == 0) print_error(e, 0, 1);
      code = 3;
    } catch (const std::exception& e) {
      print_error(e, world.rank(), world.size());
      h3d::mpi_abort(1);
    }
  }
  h3d::mpi_finalize();
  return code;
}
