#include "client/input.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>

namespace topo::cli {
namespace {

constexpr InputLimit kLimit = {1000, "a test input", "the test's limit", "use a smaller one"};

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/topo-input-test-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string Write(const std::string& name, const std::string& text) const {
    const std::string p = path + "/" + name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  std::string path;
};

TEST_CASE("ReadInputFile: a file within the limit is read whole") {
  TempDir dir;
  const std::string p = dir.Write("ok.json", std::string(1000, 'x'));
  core::Result<std::string> r = ReadInputFile(p, kLimit);
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(r.value() == std::string(1000, 'x'));
  CHECK(ReadInputFile(dir.Write("empty", ""), kLimit).value().empty());
}

TEST_CASE("ReadInputFile: a larger regular file is refused with its size, the limit and the fix") {
  TempDir dir;
  const std::string p = dir.Write("big.json", std::string(1001, 'x'));
  core::Result<std::string> r = ReadInputFile(p, kLimit);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() ==
        p + " is 1001 bytes, more than a test input may hold: at most 1000 bytes, the "
            "test's limit; use a smaller one");
}

TEST_CASE("ReadInputFile: an endless device stops one byte past the limit") {
  const InputLimit mib = {size_t{1} << 20, "a job spec (--spec)", "", ""};
  core::Result<std::string> r = ReadInputFile("/dev/zero", mib);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() ==
        "/dev/zero holds more than a job spec (--spec) may hold (reading stopped at 1 MiB): at "
        "most 1 MiB (1048576 bytes)");
}

TEST_CASE("ReadInputFd: a pipe is read with the same bound, and within it whole") {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  // More than the limit, less than a pipe's buffer: no writer thread needed.
  const std::string text(3000, 'y');
  REQUIRE(write(fds[1], text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  close(fds[1]);
  core::Result<std::string> r = ReadInputFd(fds[0], "<stdin>", kLimit);
  close(fds[0]);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().find("<stdin> holds more than a test input may hold") == 0);

  REQUIRE(pipe(fds) == 0);
  REQUIRE(write(fds[1], "{\"gpus\": 8}", 11) == 11);
  close(fds[1]);
  r = ReadInputFd(fds[0], "<stdin>", kLimit);
  close(fds[0]);
  REQUIRE(r.ok());
  CHECK(r.value() == "{\"gpus\": 8}");
}

TEST_CASE("ReadInputFile: directories and missing files name the path") {
  TempDir dir;
  core::Result<std::string> r = ReadInputFile(dir.path, kLimit);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() == dir.path + ": is a directory, not a file");
  r = ReadInputFile(dir.path + "/nope", kLimit);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() == dir.path + "/nope: cannot open (No such file or directory)");
}

TEST_CASE("FormatBytes") {
  CHECK(FormatBytes(1) == "1 byte");
  CHECK(FormatBytes(300) == "300 bytes");
  CHECK(FormatBytes(10240) == "10 KiB");
  CHECK(FormatBytes(131071) == "127.9 KiB");
  CHECK(FormatBytes(153600) == "150 KiB");
  CHECK(FormatBytes(size_t{1} << 20) == "1 MiB");
  CHECK(FormatBytes(5033164) == "4.7 MiB");
  CHECK(FormatBytes(size_t{3} << 30) == "3 GiB");
}

}  // namespace
}  // namespace topo::cli

TEST_CASE("ParseWhen: relative, dated and refused forms of --since/--until") {
  const int64_t now = 1800000000000;  // 2027-01-15
  CHECK(topo::cli::ParseWhen("7d", now, "--since").value() == now - 7 * 86400000LL);
  CHECK(topo::cli::ParseWhen("12h", now, "--since").value() == now - 12 * 3600000LL);
  CHECK(topo::cli::ParseWhen("30m", now, "--since").value() == now - 30 * 60000LL);
  CHECK(topo::cli::ParseWhen("2w", now, "--since").value() == now - 14 * 86400000LL);
  CHECK(topo::cli::ParseWhen("now", now, "--until").value() == now);
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 10;
  tm.tm_mday = 1;
  tm.tm_isdst = -1;
  const int64_t midnight = static_cast<int64_t>(std::mktime(&tm)) * 1000;
  CHECK(topo::cli::ParseWhen("2026-11-01", now, "--since").value() == midnight);
  CHECK(topo::cli::ParseWhen("2026-11-01T14:30", now, "--since").value() ==
        midnight + (14 * 60 + 30) * 60000LL);
  CHECK(topo::cli::ParseWhen("2026-11-01 14:30:05", now, "--since").value() ==
        midnight + (14 * 3600 + 30 * 60 + 5) * 1000LL);
  for (const char* bad : {"", "7", "7y", "d", "-7d", "2026-13-01", "2026-02-30", "2026-11-01T25:00",
                          "2026-11-01T14", "yesterday", "99999999d"}) {
    CAPTURE(bad);
    topo::core::Result<int64_t> r = topo::cli::ParseWhen(bad, now, "--since");
    REQUIRE_FALSE(r.ok());
    CHECK(r.message().find("--since") != std::string::npos);
    CHECK(r.message().find("7d") != std::string::npos);
  }
}

TEST_CASE("ParseTimePoint: now, now+DURATION, ISO-8601 with or without a zone, Unix ms") {
  using topo::cli::ParseTimePoint;
  const int64_t now = 1800000000000;  // 2027-01-15
  CHECK(ParseTimePoint("now", now, "--start").value() == now);
  CHECK(ParseTimePoint("now+2h", now, "--start").value() == now + 2 * 3600000LL);
  CHECK(ParseTimePoint("now+1h30m", now, "--start").value() == now + 90 * 60000LL);
  CHECK(ParseTimePoint("1800000123456", now, "--start").value() == 1800000123456);
  // UTC and offsets: 2026-11-01T14:30Z is 1793543400 s.
  CHECK(ParseTimePoint("2026-11-01T14:30Z", now, "--start").value() == 1793543400000);
  CHECK(ParseTimePoint("2026-11-01T14:30:05Z", now, "--start").value() == 1793543405000);
  CHECK(ParseTimePoint("2026-11-01T16:30+02:00", now, "--start").value() == 1793543400000);
  CHECK(ParseTimePoint("2026-11-01T09:00-05:30", now, "--start").value() == 1793543400000);
  // Local time without a zone, as ParseWhen reads it.
  CHECK(ParseTimePoint("2026-11-01T14:30", now, "--start").value() ==
        topo::cli::ParseWhen("2026-11-01T14:30", now, "--start").value());
  CHECK(ParseTimePoint("2026-11-01", now, "--end").value() ==
        topo::cli::ParseWhen("2026-11-01", now, "--end").value());
  for (const char* bad :
       {"", "soon", "7d", "now+", "now+5", "now-1h", "2026-13-01T00:00Z", "2026-11-01T14:30+25:00",
        "2026-11-01T14:30+0x:00", "1800000000", "99999999999999999"}) {
    CAPTURE(bad);
    topo::core::Result<int64_t> r = ParseTimePoint(bad, now, "--start");
    REQUIRE_FALSE(r.ok());
    CHECK(r.message().rfind("--start: ", 0) == 0);
    CHECK(r.message().find("now+2h") != std::string::npos);
  }
  // Seconds given for milliseconds: the error says how to write them.
  CHECK(ParseTimePoint("1800000000", now, "--start").message().find("1800000000000") !=
        std::string::npos);
}
