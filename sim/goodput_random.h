// The seeded random numbers of the goodput simulation (goodput_sim.cc): xoshiro256** seeded by
// SplitMix64, and the uniform and exponential variates built on it by hand, so that a seed gives
// the same failures with every standard library (std::*_distribution is not specified bit for
// bit).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace rtft::bench::goodput {

inline uint64_t SplitMix64(uint64_t* x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& s : s_) s = SplitMix64(&seed);
  }
  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double Exponential(double mean) { return -mean * std::log1p(-Uniform()); }
  int Below(int n) { return std::min(n - 1, static_cast<int>(Uniform() * n)); }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace rtft::bench::goodput
