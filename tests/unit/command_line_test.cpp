// The command line and --config files (apps/hybrid3d/command_line.hpp):
// values land in the options, the command line wins over the file, and
// every malformed input is a ParseError or a UsageError naming its cause.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "command_line.hpp"
#include "config_file.hpp"
#include "hybrid3d/core/error.hpp"
#include "hybrid3d/models/registry.hpp"

using namespace h3d;

namespace {

std::string write_config(const std::string& text) {
  static int n = 0;
  const std::string path = "/tmp/h3d_cfg_" + std::to_string(getpid()) + "_" + std::to_string(n++) + ".toml";
  std::ofstream(path) << text;
  return path;
}

void parse(CommandLine& cli, std::vector<std::string> args) {
  args.insert(args.begin(), "hybrid3d");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  cli.parse(int(argv.size()), argv.data());
}

}  // namespace

TEST(CommandLine, ConfigFileValuesAndPrecedence) {
  const std::string path = write_config(
      "# a run\n"
      "model = \"cosmoflow\"   # quoted\n"
      "lr = 0.05\n"
      "spatial = 2x1x1\n"
      "decay-boundaries = [10, 20]\n"
      "--decay-factors = ['0.5', '0.25']\n"
      "batchnorm = true\n"
      "quiet = false\n"
      "[predict]\n"
      "window-overlap = 0.75\n"
      "[train]\n"
      "steps = 7 ; seven\n"
      "batch-size = 4\n");
  CommandLine cli;
  parse(cli, {"train", "--batch-size", "8", "--config", path});  // given before the file, still wins
  EXPECT_EQ(cli.command(), "train");
  EXPECT_EQ(cli.train.model.model, "cosmoflow");
  EXPECT_DOUBLE_EQ(cli.train.schedule.lr, 0.05);
  EXPECT_EQ(cli.train.spatial, (std::array<int, 3>{2, 1, 1}));
  EXPECT_EQ(cli.train.schedule.boundaries, (std::vector<int64_t>{10, 20}));
  EXPECT_EQ(cli.train.schedule.factors, (std::vector<double>{0.5, 0.25}));
  EXPECT_TRUE(cli.train.model.batchnorm);
  EXPECT_FALSE(cli.train.quiet);
  EXPECT_EQ(cli.train.steps, 7);
  EXPECT_EQ(cli.train.batch_size, 8);

  CommandLine pred;
  parse(pred, {"predict", "--config=" + path, "--init", "w", "--input", "i.h5", "--out", "o.h5"});
  EXPECT_DOUBLE_EQ(pred.predict.window_overlap, 0.75);  // [predict] applies, [train] does not
  std::remove(path.c_str());
}

TEST(CommandLine, RefusesMalformedInput) {
  const std::vector<std::pair<std::vector<std::string>, bool>> cases = {  // args, UsageError (else ParseError)
      {{"train", "--spatial", "2x2"}, true},
      {{"train", "--spatial", "0x1x1"}, true},
      {{"train", "--decay-factors", "1,2x"}, true},
      {{"train", "--halo-overlap", "auto"}, true},  // halo: on or off only
      {{"train", "--allreduce-overlap", "sometimes"}, true},
      {{"predict", "--init", "w", "--out", "o", "--halo-overlap", "maybe"}, true},
      {{"train", "--batch-size", "0"}, true},
      {{"train", "--threads", "-1"}, true},
      {{"train", "--config"}, true},
      {{"train", "--lr", "fast"}, false},
      {{"train", "--bogus"}, false},
      {{"predict", "--input", "x"}, false},  // --init and --out missing
      {{"nonsense"}, false},
      {{}, false},
  };
  for (const auto& c : cases) {
    CommandLine cli;
    std::string joined;
    for (auto& a : c.first) joined += a + " ";
    if (c.second)
      EXPECT_THROW(parse(cli, c.first), UsageError) << joined;
    else
      EXPECT_THROW(parse(cli, c.first), CLI::ParseError) << joined;
  }
}

// --overlap meant three things; it is three flags now, and the old one
// says which to use instead of "unknown option".
TEST(CommandLine, OverlapFlagsApartAndTheOldOneExplained) {
  CommandLine train;
  parse(train, {"train", "--halo-overlap", "off", "--allreduce-overlap", "on"});
  EXPECT_FALSE(train.train.halo_overlap);
  EXPECT_EQ(train.train.allreduce_overlap, Overlap::kOn);
  CommandLine defaults;
  parse(defaults, {"train"});
  EXPECT_TRUE(defaults.train.halo_overlap);
  EXPECT_EQ(defaults.train.allreduce_overlap, Overlap::kAuto);
  CommandLine pred;
  parse(pred, {"predict", "--init", "w", "--out", "o", "--window-overlap", "0.25", "--halo-overlap", "off"});
  EXPECT_DOUBLE_EQ(pred.predict.window_overlap, 0.25);
  EXPECT_FALSE(pred.predict.halo_overlap);
  const std::vector<std::pair<std::vector<std::string>, std::string>> old = {
      {{"train", "--overlap", "off"}, "--halo-overlap on|off"},
      {{"train", "--overlap=on"}, "--allreduce-overlap on|off|auto"},
      {{"predict", "--init", "w", "--out", "o", "--overlap", "0.5"}, "--window-overlap"},
  };
  for (const auto& c : old) {
    CommandLine cli;
    try {
      parse(cli, c.first);
      ADD_FAILURE() << "accepted " << c.first[0] << " " << c.first.back();
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(c.second), std::string::npos) << e.what();
    }
  }
}

// The model and layout flags are declared once for both commands: each
// lands in its own command's options.
TEST(CommandLine, ModelAndLayoutFlagsTheSameForTrainAndPredict) {
  const std::vector<std::string> shared = {"--model", "unet3d", "--input-size", "24", "--in-channels", "2",
                                           "--classes", "5", "--base-channels", "6", "--levels", "2",
                                           "--kernel-size", "3", "--batchnorm", "--seed", "9",
                                           "--spatial", "2x1x2", "--threads", "3", "--backend", "ref"};
  CommandLine train, pred;
  std::vector<std::string> t = {"train"}, p = {"predict", "--init", "w", "--out", "o"};
  t.insert(t.end(), shared.begin(), shared.end());
  p.insert(p.end(), shared.begin(), shared.end());
  parse(train, t);
  parse(pred, p);
  for (const auto* c : {&train, &pred}) {
    const ModelOptions& m = c == &train ? c->train.model : c->predict.model;
    EXPECT_EQ(m.model, "unet3d");
    EXPECT_EQ(m.input_size, 24);
    EXPECT_EQ(m.in_channels, 2);
    EXPECT_EQ(m.classes, 5);
    EXPECT_EQ(m.base_channels, 6);
    EXPECT_EQ(m.levels, 2);
    EXPECT_EQ(m.kernel_size, 3);
    EXPECT_TRUE(m.batchnorm);
    EXPECT_EQ(m.seed, 9u);
    EXPECT_EQ(c->threads, 3);
    EXPECT_EQ(c == &train ? c->train.spatial : c->predict.spatial, (std::array<int, 3>{2, 1, 2}));
    EXPECT_EQ(c == &train ? c->train.backend : c->predict.backend, "ref");
  }
}

// The help lists the models the registry builds, no more, no fewer.
TEST(CommandLine, ModelHelpListsTheRegistry) {
  std::string names;
  for (const auto& n : ModelRegistry::instance().names()) names += (names.empty() ? "" : " | ") + n;
  EXPECT_EQ(names, CommandLine::kModelNames);
  EXPECT_GE(ModelRegistry::instance().names().size(), 3u);
}

TEST(ConfigFile, NamesTheLineOfEachFault) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"lr 0.1\n", "line 1: expected 'name = value'"},
      {"\n\n[train\n", "line 3: a section header must end with ']'"},
      {"[a b]\n", "is not a section name"},
      {"lr = \"0.1\n", "a quote is not closed"},
      {"lr = \"0.1\" x\n", "unexpected text after the quoted value"},
      {"decay-factors = [1, 2\n", "a list must end with ']'"},
      {"9lives = 1\n", "is not a flag name"},
      {std::string("lr = 1\0", 7), "is not a text file"},
  };
  for (const auto& c : cases) {
    try {
      parse_config_text(c.first, "f.toml", "train");
      ADD_FAILURE() << "accepted: " << c.first;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(c.second), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parse_config_text(std::string((1 << 20) + 1, '#'), "f.toml", "train"), UsageError);
  EXPECT_THROW(read_config_file("/tmp"), UsageError);  // a directory
}
