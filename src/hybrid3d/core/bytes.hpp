// Memory sizes as people write them ("1500MiB", "2GiB", "512 MB"), and how
// much memory this node has left.
#pragma once
#include <cstdint>
#include <string>

namespace h3d {

// "1.50 GiB", "37.2 MiB", "812 KiB", "96 B".
std::string format_bytes(int64_t bytes);
// A size with its unit: B, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB,
// GB, TB (powers of 1000), case-insensitive, optionally spaced
// ("1500MiB", "2 GiB", "1.5GB"). UsageError naming `flag` for anything
// else, a missing unit included.
int64_t parse_bytes(const std::string& text, const std::string& flag);

// The memory this node can still give: MemAvailable (/proc/meminfo), or
// what the cgroup's limit leaves if that is less (a batch job's share).
int64_t available_memory_bytes();

}  // namespace h3d
