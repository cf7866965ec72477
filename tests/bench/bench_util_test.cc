// rtft-bench's option parsers (bench/common/bench_util.h): the lists a user types, and what
// must be refused.
#include "bench/common/bench_util.h"

#include <sched.h>

#include <gtest/gtest.h>

namespace rtft::bench {
namespace {

TEST(BenchUtil, CpuListsAreReadAsTasksetWritesThem) {
  EXPECT_EQ(*ParseCpuList("0"), (std::vector<int>{0}));
  EXPECT_EQ(*ParseCpuList("0-1"), (std::vector<int>{0, 1}));
  EXPECT_EQ(*ParseCpuList("4,0-2,2"), (std::vector<int>{0, 1, 2, 4}));
  EXPECT_EQ(*ParseCpuList("7-7"), (std::vector<int>{7}));
}

TEST(BenchUtil, BadCpuListsAreRefused) {
  for (const char* bad : {"", ",", "1,", "-1", "a", "1-", "-", "3-1", "1.5", "0x2", " 1",
                          "99999999999999999999", "1024", "0-1024"})
    EXPECT_FALSE(ParseCpuList(bad).ok()) << "'" << bad << "'";
  EXPECT_TRUE(ParseCpuList(std::to_string(CPU_SETSIZE - 1)).ok());
}

TEST(BenchUtil, CountLists) {
  EXPECT_EQ(*ParseCountList("64,256"), (std::vector<uint64_t>{64, 256}));
  EXPECT_FALSE(ParseCountList("-3").ok());
  EXPECT_FALSE(ParseCountList("x").ok());
}

}  // namespace
}  // namespace rtft::bench
