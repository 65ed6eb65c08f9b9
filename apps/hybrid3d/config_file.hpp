// `--config FILE`: flags kept in a file, so a long run's command line can be
// resubmitted as `hybrid3d train --config run.toml`. The format is the
// common subset of TOML and INI:
//
//   # a comment (also ';')
//   model = "cosmoflow"        # quotes optional
//   spatial = 2x1x1
//   decay-boundaries = [100, 200]   # a list becomes 100,200
//   batchnorm = true           # a switch: true gives --batchnorm, false nothing
//   [train]                    # what follows applies only to `hybrid3d train`
//   lr = 0.01
//
// Keys are the long flag names without "--". A key in the subcommand's
// section must be one of its flags; a key before any section must be a flag
// of some subcommand (so one file can serve train and predict). The file is
// checked against a size limit and every key before anything else happens;
// errors name the file and line.
#pragma once
#include <string>
#include <vector>

namespace h3d {

struct ConfigEntry {
  std::string key, value;  // value without quotes; a list joined by commas
  int line = 0;
  bool shared = false;  // before any [section]: for every subcommand that has the flag
};

// The entries of `text` that apply to `section` (the subcommand's name).
// Throws UsageError naming `path` and the line for anything malformed.
std::vector<ConfigEntry> parse_config_text(const std::string& text, const std::string& path,
                                           const std::string& section);

// The file's text (at most 1 MiB); UsageError if it cannot be read.
std::string read_config_file(const std::string& path);

}  // namespace h3d
