#include "core/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace meshtrain::crc32c {
namespace {

constexpr std::uint32_t kPoly = 0x82F63B78u;  // 0x1EDC6F41 bit-reversed
constexpr std::uint32_t kOne = 0x80000000u;   // the polynomial 1 in reflected order

struct Tables {
  std::uint32_t slice[8][256];
  std::uint32_t x2n[67];  ///< x^(2^k) modulo the polynomial, k = 0..66 (n < 2^64 bytes = 2^67 bits)
  bool hw = false;
};

// Bitwise product in the reflected representation (zlib's multmodp): no table, so the
// table of powers below can be built with it.
std::uint32_t multiply_slow(std::uint32_t a, std::uint32_t b) {
  std::uint32_t m = kOne, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = b & 1 ? (b >> 1) ^ kPoly : b >> 1;
  }
  return p;
}

bool cpu_has_sse42() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSE4_2) != 0;
#else
  return false;
#endif
}

const Tables& tables() {
  static const Tables t = [] {
    Tables t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ kPoly : c >> 1;
      t.slice[0][i] = c;
    }
    for (int k = 1; k < 8; ++k)
      for (int i = 0; i < 256; ++i) t.slice[k][i] = (t.slice[k - 1][i] >> 8) ^ t.slice[0][t.slice[k - 1][i] & 0xFF];
    std::uint32_t p = kOne >> 1;  // x^1
    t.x2n[0] = p;
    for (int k = 1; k < 67; ++k) t.x2n[k] = p = multiply_slow(p, p);
    t.hw = cpu_has_sse42();
    return t;
  }();
  return t;
}

std::uint32_t update_portable(std::uint32_t crc, const unsigned char* p, std::size_t n) {
  const Tables& t = tables();
  while (n >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);  // little-endian hosts only (the checkpoint code asserts it)
    w ^= crc;
    crc = t.slice[7][w & 0xFF] ^ t.slice[6][(w >> 8) & 0xFF] ^ t.slice[5][(w >> 16) & 0xFF] ^
          t.slice[4][(w >> 24) & 0xFF] ^ t.slice[3][(w >> 32) & 0xFF] ^ t.slice[2][(w >> 40) & 0xFF] ^
          t.slice[1][(w >> 48) & 0xFF] ^ t.slice[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) crc = (crc >> 8) ^ t.slice[0][(crc ^ *p++) & 0xFF];
  return crc;
}

#if defined(__x86_64__)
// The crc32 instruction through inline assembly rather than the SSE4.2 intrinsics: those
// need the function compiled for SSE4.2 (a target attribute), which not every compiler
// that builds this file accepts (nvcc_wrapper in CUDA builds); the assembler takes the
// instruction either way, and it only runs where cpuid reported it.
inline std::uint64_t hw_crc64(std::uint64_t crc, std::uint64_t v) {
  __asm__("crc32q %1, %0" : "+r"(crc) : "rm"(v));
  return crc;
}
inline std::uint32_t hw_crc8(std::uint32_t crc, unsigned char v) {
  __asm__("crc32b %1, %0" : "+r"(crc) : "rm"(v));
  return crc;
}

// One dependency chain of crc32q has a latency of 3 cycles and a throughput of 1: three
// independent chains over three blocks, joined with two multiplications, run ~3x faster
// (this is what checkpoints spend per saved byte).
constexpr std::size_t kBlock = 4096;

// op(x) = multiply(A, x) for a fixed A as four byte tables (x -> A x is linear over GF(2)).
struct ConstMultiplier {
  std::uint32_t t[4][256];
  explicit ConstMultiplier(std::uint32_t a) {
    for (int j = 0; j < 4; ++j)
      for (std::uint32_t b = 0; b < 256; ++b) t[j][b] = multiply_slow(a, b << (8 * j));
  }
  std::uint32_t operator()(std::uint32_t x) const {
    return t[0][x & 0xFF] ^ t[1][(x >> 8) & 0xFF] ^ t[2][(x >> 16) & 0xFF] ^ t[3][x >> 24];
  }
};

std::uint32_t update_hardware(std::uint32_t crc32, const unsigned char* p, std::size_t n) {
  std::uint64_t crc = crc32;
  if (n >= 3 * kBlock) {
    static const ConstMultiplier shift1(detail::zeros_operator(kBlock));
    static const ConstMultiplier shift2(detail::zeros_operator(2 * kBlock));
    while (n >= 3 * kBlock) {
      std::uint64_t c1 = 0, c2 = 0;
      for (std::size_t i = 0; i < kBlock; i += 8) {
        std::uint64_t a, b, c;
        std::memcpy(&a, p + i, 8);
        std::memcpy(&b, p + kBlock + i, 8);
        std::memcpy(&c, p + 2 * kBlock + i, 8);
        crc = hw_crc64(crc, a);
        c1 = hw_crc64(c1, b);
        c2 = hw_crc64(c2, c);
      }
      // U(s, A B C) = U(s, A) x^|BC| + U(0, B) x^|C| + U(0, C).
      crc = shift2(static_cast<std::uint32_t>(crc)) ^ shift1(static_cast<std::uint32_t>(c1)) ^
            static_cast<std::uint32_t>(c2);
      p += 3 * kBlock;
      n -= 3 * kBlock;
    }
  }
  while (n >= 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    crc = hw_crc64(crc, v);
    p += 8;
    n -= 8;
  }
  std::uint32_t c = static_cast<std::uint32_t>(crc);
  while (n--) c = hw_crc8(c, *p++);
  return c;
}
#endif

}  // namespace

namespace detail {

std::uint32_t update(std::uint32_t state, const unsigned char* p, std::size_t n, bool allow_hardware) {
#if defined(__x86_64__)
  if (allow_hardware && tables().hw) return update_hardware(state, p, n);
#endif
  return update_portable(state, p, n);
}

std::uint32_t multiply(std::uint32_t a, std::uint32_t b) { return multiply_slow(a, b); }

std::uint32_t zeros_operator(std::uint64_t n) {
  const Tables& t = tables();
  std::uint32_t p = kOne;
  for (int k = 3; n; n >>= 1, ++k)  // 8 n bits: start at x^(2^3)
    if (n & 1) p = multiply_slow(t.x2n[k], p);
  return p;
}

}  // namespace detail

bool hardware() { return tables().hw; }

std::uint32_t extend(std::uint32_t crc, const void* data, std::size_t n) {
  return ~detail::update(~crc, static_cast<const unsigned char*>(data), n);
}

std::uint32_t value(const void* data, std::size_t n) { return extend(0, data, n); }

std::uint32_t combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t len_b) {
  return detail::multiply(detail::zeros_operator(len_b), crc_a) ^ crc_b;
}

std::uint32_t Contribution::op(std::uint64_t distance) {
  if (distance != cached_distance_) {
    cached_distance_ = distance;
    cached_op_ = detail::zeros_operator(distance);
  }
  return cached_op_;
}

void Contribution::add(std::uint64_t offset, const void* data, std::size_t n) {
  if (n == 0) return;
  const unsigned char* p = static_cast<const unsigned char*>(data);
  if (end_ > 0 && offset < end_) {
    // Out of order: this run is finished; a new one starts here.
    done_.emplace_back(acc_, end_);
    acc_ = 0;
    end_ = 0;
  }
  // The raw state of the run moved over the gap of zeros (nothing to do when adjacent,
  // and nothing when the run is empty: leading zeros leave a zero state at zero).
  if (acc_ != 0 && offset > end_) acc_ = detail::multiply(op(offset - end_), acc_);
  acc_ = detail::update(acc_, p, n);
  end_ = offset + n;
}

std::uint32_t Contribution::get() const {
  std::uint32_t r = detail::multiply(detail::zeros_operator(total_ - end_), acc_);
  for (const auto& [a, e] : done_) r ^= detail::multiply(detail::zeros_operator(total_ - e), a);
  return r;
}

std::uint32_t finish(std::uint32_t xor_of_contributions, std::uint64_t total) {
  // U(~0, D) = U(~0, zeros of D's length) + U(0, D); the CRC is its inversion.
  return ~(detail::multiply(detail::zeros_operator(total), 0xFFFFFFFFu) ^ xor_of_contributions);
}

}  // namespace meshtrain::crc32c
