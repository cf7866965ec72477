// The subcommands of rtft-ckpt, one function each. They print results on stdout and return the
// process exit status: 0 when everything worked (for verify: everything verified), 1 otherwise,
// after printing "rtft-ckpt: <message>" on stderr.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace rtft::tools {

int ListCommand(const std::string& dir);
int VerifyCommand(const std::string& dir, std::optional<uint64_t> version);
int DumpCommand(const std::string& file);
int CatCommand(const std::string& file, const std::string& tensor, uint64_t limit);
int ConfigCommand();

}  // namespace rtft::tools
