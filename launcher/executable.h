// Finding the application to run as execvp would, so that dp-launch can refuse, before any slot
// joins, an application that cannot be executed (bad usage), and so that the keeper, which may
// not allocate, gets a path it can hand to execve.
#pragma once

#include <string>

#include "rtft/status.h"

namespace rtft::launch {

// Resolves APP as execvp would (PATH when it has no '/'): a regular file this process may
// execute. The error names APP and says what is wrong.
StatusOr<std::string> ResolveExecutable(const std::string& app);
// The same as an errno (0: found, into *path), for the bootstrap's exchange.
int FindExecutable(const std::string& app, std::string* path);

}  // namespace rtft::launch
