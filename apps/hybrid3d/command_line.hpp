// The hybrid3d command line: every subcommand and flag, and the checks that
// the flags alone allow (no files, no MPI), so a bad command line is refused
// before any rank does work. main.cpp decides how the job ends; this file
// only parses. fuzz/command_line_fuzz.cpp feeds it hostile argument lists.
//
// Each subcommand also takes `--config FILE`: the same flags in a file
// (config_file.hpp); a flag given on the command line wins over the file.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "hybrid3d/data/generate_options.hpp"
#include "hybrid3d/data/preprocess_options.hpp"
#include "hybrid3d/train/plan_options.hpp"
#include "hybrid3d/train/predict_options.hpp"
#include "hybrid3d/train/train_options.hpp"

namespace h3d {

class CommandLine {
 public:
  CommandLine();
  CommandLine(const CommandLine&) = delete;  // the parser holds pointers to the members below
  CommandLine& operator=(const CommandLine&) = delete;

  // Throws CLI::ParseError (CLI::CallForHelp for --help) for what CLI11
  // refuses, h3d::UsageError for values the flags alone show to be wrong.
  void parse(int argc, const char* const* argv);
  // Prints --help or a parse error the way CLI11 does; returns its exit code.
  int print(const CLI::Error& e) { return app_.exit(e); }

  // The subcommand given: "train", "generate", "preprocess", "predict" or "plan".
  std::string command() const;

  // The --model names in the help. The parser stays light (no model
  // code); the unit tests hold this to models/registry.hpp's names.
  static constexpr const char* kModelNames = "cosmoflow | cosmoflow-lbann | resnet3d | unet3d";

  TrainOptions train;
  GenerateOptions generate;
  PreprocessOptions preprocess;
  PredictOptions predict;
  PlanOptions plan;
  int threads = 0;  // --threads of train or predict (0: the default)

 private:
  // Replaces `--config FILE` after the subcommand by the file's flags, put
  // first so that the command line's own flags win (the last one counts).
  void expand_config(std::vector<std::string>& args) const;
  // --spatial, --threads, --halo-overlap, --backend: declared once for train and predict.
  struct LayoutFlags {
    std::string spatial = "1x1x1", halo_overlap = "on", old_overlap;
    int threads = 0;
  };
  void add_layout_flags(CLI::App* app, LayoutFlags& f, std::string& backend);
  void finish_layout(const LayoutFlags& f, std::array<int, 3>& spatial, bool& halo_overlap);
  void finish_train();
  void finish_predict();

  CLI::App app_{"hybrid3d: hybrid data x spatial parallel training of 3D CNNs"};
  CLI::App *train_ = nullptr, *gen_ = nullptr, *prep_ = nullptr, *pred_ = nullptr, *plan_ = nullptr;
  LayoutFlags train_layout_, pred_layout_;
  std::string decay_boundaries_, decay_factors_, class_weights_, allreduce_overlap_ = "auto";
  bool no_prefetch_ = false;
  std::string memory_per_rank_, plan_memory_;
  std::string config_help_only_;
};

}  // namespace h3d
