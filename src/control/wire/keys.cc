#include "control/wire/keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <zmq.h>

namespace rtft::control {
namespace {

constexpr size_t kZ85KeyChars = 40;
constexpr const char* kLineTag = "rtft-keys-1";

bool IsZ85Key(const std::string& key) {
  if (key.size() != kZ85KeyChars) return false;
  uint8_t raw[32];
  return zmq_z85_decode(raw, key.c_str()) != nullptr;
}

// The public key that belongs to `secret`, or "" when it is not a key.
std::string PublicOf(const std::string& secret) {
  char pub[kZ85KeyChars + 1] = {};
  if (!IsZ85Key(secret) || zmq_curve_public(pub, secret.c_str()) != 0) return "";
  return pub;
}

Status Validate(const JobKeys& k) {
  const std::pair<const char*, const std::string*> all[] = {{"server_public", &k.server_public},
                                                            {"server_secret", &k.server_secret},
                                                            {"client_public", &k.client_public},
                                                            {"client_secret", &k.client_secret}};
  for (const auto& [name, value] : all) {
    if (!IsZ85Key(*value)) {
      return Status::InvalidArgument(std::string("job keys: ") + name +
                                     " is not a 40-character Z85 CURVE key");
    }
  }
  if (PublicOf(k.server_secret) != k.server_public)
    return Status::InvalidArgument("job keys: server_public does not match server_secret");
  if (PublicOf(k.client_secret) != k.client_public)
    return Status::InvalidArgument("job keys: client_public does not match client_secret");
  return Status::Ok();
}

}  // namespace

StatusOr<JobKeys> GenerateJobKeys() {
  if (!zmq_has("curve")) return Status::Unimplemented("libzmq was built without CURVE");
  char pub[kZ85KeyChars + 1], sec[kZ85KeyChars + 1];
  JobKeys keys;
  if (zmq_curve_keypair(pub, sec) != 0) return Status::FromErrno(errno, "zmq_curve_keypair");
  keys.server_public = pub;
  keys.server_secret = sec;
  if (zmq_curve_keypair(pub, sec) != 0) return Status::FromErrno(errno, "zmq_curve_keypair");
  keys.client_public = pub;
  keys.client_secret = sec;
  return keys;
}

Status SaveJobKeys(const std::string& path, const JobKeys& keys) {
  RTFT_RETURN_IF_ERROR(Validate(keys));
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::FromErrno(errno, "creating " + tmp);
  std::ostringstream text;
  text << "# rt-ft job keys (CURVE, Z85); keep private\n"
       << "server_public " << keys.server_public << "\n"
       << "server_secret " << keys.server_secret << "\n"
       << "client_public " << keys.client_public << "\n"
       << "client_secret " << keys.client_secret << "\n";
  const std::string data = text.str();
  // The umask may have narrowed the mode further, never widened it; make it exactly 0600.
  bool ok = ::fchmod(fd, 0600) == 0 &&
            ::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size()) &&
            ::fsync(fd) == 0;
  int err = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    if (ok) err = errno;
    ::unlink(tmp.c_str());
    return Status::FromErrno(err, "writing " + path);
  }
  return Status::Ok();
}

StatusOr<JobKeys> LoadJobKeys(const std::string& path) {
  // O_NONBLOCK: a FIFO in the file's place must not hang the job; it is refused below.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Status::FromErrno(errno, "opening job key file " + path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return Status::FromErrno(err, "stat " + path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument("job key file " + path + " is not a regular file");
  }
  if ((st.st_mode & 077) != 0) {
    ::close(fd);
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::PermissionDenied("job key file " + path + " has mode " + mode +
                                    "; it must not be accessible by group or others (chmod 600)");
  }
  std::string data(4096, '\0');
  ssize_t n = ::read(fd, data.data(), data.size());
  int err = errno;
  ::close(fd);
  if (n < 0) return Status::FromErrno(err, "reading " + path);
  if (static_cast<size_t>(n) == data.size())
    return Status::InvalidArgument("job key file " + path + " is too large");
  data.resize(n);
  JobKeys keys;
  std::istringstream lines(data);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name, value, extra;
    fields >> name >> value;
    if (name.empty()) continue;
    std::string* slot = name == "server_public"   ? &keys.server_public
                        : name == "server_secret" ? &keys.server_secret
                        : name == "client_public" ? &keys.client_public
                        : name == "client_secret" ? &keys.client_secret
                                                  : nullptr;
    if (!slot || value.empty() || (fields >> extra))
      return Status::InvalidArgument("job key file " + path + ": bad line '" + name + " ...'");
    *slot = value;
  }
  Status s = Validate(keys);
  if (!s.ok()) return s.Annotate(path);
  return keys;
}

std::string EncodeJobKeys(const JobKeys& keys) {
  return std::string(kLineTag) + " " + keys.server_public + " " + keys.server_secret + " " +
         keys.client_public + " " + keys.client_secret;
}

StatusOr<JobKeys> DecodeJobKeys(const std::string& text) {
  std::istringstream fields(text);
  std::string tag, extra;
  JobKeys keys;
  fields >> tag >> keys.server_public >> keys.server_secret >> keys.client_public >>
      keys.client_secret;
  if (tag != kLineTag || (fields >> extra))
    return Status::InvalidArgument("not an rt-ft job key line");
  RTFT_RETURN_IF_ERROR(Validate(keys));
  return keys;
}

}  // namespace rtft::control
