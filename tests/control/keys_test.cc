// Job keys: generation, the key file (mode 0600, checked on load) and the bootstrap line.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <fstream>

#include "control/wire/keys.h"
#include "test_util.h"

namespace rtft::control {
namespace {

TEST(JobKeys, GenerateSaveLoad) {
  auto keys = GenerateJobKeys();
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->server_public.size(), 40u);
  EXPECT_NE(keys->server_public, keys->client_public);
  auto other = GenerateJobKeys();
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->client_secret, keys->client_secret);

  TempDir dir;
  const std::string path = dir.path() + "/job.keys";
  ASSERT_TRUE(SaveJobKeys(path, *keys).ok());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto loaded = LoadJobKeys(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->server_secret, keys->server_secret);
  EXPECT_EQ(loaded->client_public, keys->client_public);

  // A key file others can read is refused.
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  auto exposed = LoadJobKeys(path);
  EXPECT_EQ(exposed.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(exposed.status().message().find("0644"), std::string::npos);
  EXPECT_EQ(LoadJobKeys(dir.path() + "/missing").status().code(), StatusCode::kNotFound);
}

TEST(JobKeys, LoadRejectsBadFiles) {
  TempDir dir;
  auto keys = GenerateJobKeys();
  ASSERT_TRUE(keys.ok());
  auto write = [&](const std::string& text) {
    const std::string path = dir.path() + "/k";
    std::ofstream(path) << text;
    ::chmod(path.c_str(), 0600);
    return LoadJobKeys(path).status();
  };
  EXPECT_EQ(write("server_public " + keys->server_public + "\n").code(),
            StatusCode::kInvalidArgument);  // incomplete
  // A public key that does not belong to its secret.
  auto other = GenerateJobKeys();
  EXPECT_EQ(write("server_public " + other->server_public + "\nserver_secret " +
                  keys->server_secret + "\nclient_public " + keys->client_public +
                  "\nclient_secret " + keys->client_secret + "\n")
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(write("bogus line here\n").code(), StatusCode::kInvalidArgument);
  // A FIFO in the key file's place is refused at once instead of blocking the reader.
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(LoadJobKeys(fifo).status().code(), StatusCode::kInvalidArgument);
}

TEST(JobKeys, BootstrapLine) {
  auto keys = GenerateJobKeys();
  ASSERT_TRUE(keys.ok());
  const std::string line = EncodeJobKeys(*keys);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  auto back = DecodeJobKeys(line);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->client_secret, keys->client_secret);
  EXPECT_FALSE(DecodeJobKeys("rtft-keys-1 a b c d").ok());
  EXPECT_FALSE(DecodeJobKeys(line + " extra").ok());
  EXPECT_FALSE(DecodeJobKeys("").ok());
}

}  // namespace
}  // namespace rtft::control
