// Any argument list, and any --config file, for the hybrid3d command line.
// The input is "ARG\nARG\n...\0CONFIG TEXT": the part before the first NUL
// is one argument per line after the program name; the rest, if any, is
// written to a file that `--config` then names (after the first argument,
// the subcommand). Parsing either succeeds or throws CLI::ParseError or
// h3d::UsageError: one clear message. Anything else is a finding.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "command_line.hpp"
#include "hybrid3d/core/error.hpp"
#include "scratch_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string config_path = scratch_path("cli", ".toml");
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  std::vector<std::string> args{"hybrid3d"};
  size_t start = 0;
  const std::string line_part = input.substr(0, nul);
  while (start <= line_part.size() && args.size() < 64) {
    const size_t end = std::min(line_part.find('\n', start), line_part.size());
    args.push_back(line_part.substr(start, end - start));
    start = end + 1;
  }
  if (nul != std::string::npos) {
    FILE* f = std::fopen(config_path.c_str(), "wb");
    if (!f) return 0;
    std::fwrite(input.data() + nul + 1, 1, size - nul - 1, f);
    std::fclose(f);
    args.insert(args.begin() + std::min<size_t>(2, args.size()), {"--config", config_path});
  }
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  h3d::CommandLine cli;
  try {
    cli.parse(int(argv.size()), argv.data());
  } catch (const CLI::ParseError&) {
    // CLI11's own message (unknown flag, bad number, --help)
  } catch (const h3d::UsageError&) {
    // our message: a value the flags alone show to be wrong
  }
  return 0;
}
