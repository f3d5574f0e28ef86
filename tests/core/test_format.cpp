// core/format: the small text helpers that messages are made of. Expected values are
// written out by hand (the dates from the calendar, not from the code under test).
#include <gtest/gtest.h>

#include <string>

#include "core/format.hpp"

using namespace meshtrain;

TEST(UtcTimeText, EpochAndItsNeighbours) {
  EXPECT_EQ(utc_time_text(0), "1970-01-01 00:00:00.000000000 UTC");
  EXPECT_EQ(utc_time_text(1), "1970-01-01 00:00:00.000000001 UTC");
  // Before 1970 the fraction stays non-negative: one nanosecond before the epoch.
  EXPECT_EQ(utc_time_text(-1), "1969-12-31 23:59:59.999999999 UTC");
}

TEST(UtcTimeText, AFileTimeKeepsItsNanoseconds) {
  // 2025-12-01 20:37:01 UTC is 1764621421 s after the epoch.
  EXPECT_EQ(utc_time_text(1764621421123456789LL), "2025-12-01 20:37:01.123456789 UTC");
  EXPECT_NE(utc_time_text(1764621421123456789LL), utc_time_text(1764621421123456788LL));
  // A leap day.
  EXPECT_EQ(utc_time_text(951782400LL * 1000000000LL), "2000-02-29 00:00:00.000000000 UTC");
}

TEST(FormatBytes, Units) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1.5 * 1024 * 1024 * 1024), "1.50 GiB");
}
