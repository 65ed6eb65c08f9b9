// A file of this fuzzing process's own, for parsers that read from a path:
// in /dev/shm (memory) where it is writable, else /tmp.
#pragma once
#include <unistd.h>

#include <string>

inline std::string scratch_path(const std::string& tag, const std::string& ext) {
  const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  return std::string(dir) + "/h3d_" + tag + "_fuzz_" + std::to_string(getpid()) + ext;
}
