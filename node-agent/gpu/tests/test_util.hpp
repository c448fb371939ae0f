#pragma once
#include <poll.h>

#include <cstdlib>
#include <string>

// True when fd becomes readable within timeout_ms.
inline bool Readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

// A fresh directory under TMPDIR (or /tmp).
inline std::string TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string t = std::string(base != nullptr ? base : "/tmp") + "/agent-gpu-XXXXXX";
  char* made = ::mkdtemp(t.data());
  return made != nullptr ? std::string(made) : std::string();
}
