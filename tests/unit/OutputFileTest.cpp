//===- OutputFileTest.cpp - Outputs written without harm ------------------===//
//
// runtime/support/OutputFile.h: a file is replaced whole or left as it was
// (a write that fails half-way, as on a full disk, leaves the old bytes and
// no temporary file); links are written through; devices and pipes are
// written in place; directories, missing folders and inputs are refused.
// The command-line side is tests/e2e/reliability_cli.sh.
//
//===----------------------------------------------------------------------===//

#include "runtime/support/OutputFile.h"

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace mimo;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "mimo-out-XXXXXX");
    path = ::mkdtemp(pattern.data());
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string contents(const fs::path &p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

size_t entries(const fs::path &dir) {
  size_t n = 0;
  for (auto it = fs::directory_iterator(dir); it != fs::directory_iterator();
       ++it)
    ++n;
  return n;
}

TEST(OutputFile, NewAndExistingFilesAreReplacedWholeLinksWrittenThrough) {
  TempDir dir;
  std::string problem;
  fs::path out = dir.path / "plan.json";
  ASSERT_TRUE(writeOutput(out.string(), "first", problem)) << problem;
  EXPECT_EQ(contents(out), "first");
  ::chmod(out.c_str(), 0640);
  ASSERT_TRUE(writeOutput(out.string(), "second", problem)) << problem;
  EXPECT_EQ(contents(out), "second");
  struct stat st{};
  ASSERT_EQ(::stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u) << "the file keeps its mode";
  fs::create_symlink("plan.json", dir.path / "link.json");
  ASSERT_TRUE(writeOutput((dir.path / "link.json").string(), "third", problem))
      << problem;
  EXPECT_TRUE(fs::is_symlink(dir.path / "link.json"));
  EXPECT_EQ(contents(out), "third");
  // A dangling link: the file it names is created.
  fs::create_symlink("made.json", dir.path / "dangling.json");
  ASSERT_TRUE(
      writeOutput((dir.path / "dangling.json").string(), "fourth", problem))
      << problem;
  EXPECT_TRUE(fs::is_symlink(dir.path / "dangling.json"));
  EXPECT_EQ(contents(dir.path / "made.json"), "fourth");
  EXPECT_EQ(entries(dir.path), 4u) << "no temporary file left";
}

TEST(OutputFile, AWriteThatFailsHalfWayLeavesTheOldFile) {
  // A file size limit stands in for a full disk: the write fails with
  // EFBIG part of the way through.
  TempDir dir;
  fs::path out = dir.path / "plan.json";
  std::string problem;
  ASSERT_TRUE(writeOutput(out.string(), "the good plan", problem));
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit{100, 100};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    std::string reason;
    bool ok = writeOutput(out.string(), std::string(100000, 'x'), reason);
    std::_Exit(!ok && reason.find("left as it was") != std::string::npos ? 0
                                                                         : 1);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(contents(out), "the good plan");
  EXPECT_EQ(entries(dir.path), 1u) << "no temporary file left";
}

TEST(OutputFile, PipesAndDevicesAreWrittenInPlace) {
  TempDir dir;
  std::string problem;
  std::optional<OutputTarget> null = checkOutput("/dev/null", {}, problem);
  ASSERT_TRUE(null);
  EXPECT_EQ(null->mode, OutputMode::InPlace);
  std::optional<OutputTarget> stdoutTarget =
      checkOutput("/dev/stdout", {}, problem);
  ASSERT_TRUE(stdoutTarget);
  EXPECT_EQ(stdoutTarget->mode, OutputMode::InPlace);
  fs::create_symlink("/dev/null", dir.path / "null-link");
  std::optional<OutputTarget> link =
      checkOutput((dir.path / "null-link").string(), {}, problem);
  ASSERT_TRUE(link);
  EXPECT_EQ(link->mode, OutputMode::InPlace);
  // A FIFO: with no reader, refused at once (never blocks).
  fs::path fifo = dir.path / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_FALSE(writeOutput(fifo.string(), "x", problem));
  EXPECT_NE(problem.find("FIFO that nothing reads"), std::string::npos)
      << problem;
  EXPECT_TRUE(fs::is_fifo(fifo));
}

TEST(OutputFile, DirectoriesMissingFoldersAndInputsAreRefused) {
  TempDir dir;
  std::string problem;
  EXPECT_FALSE(checkOutput(dir.path.string(), {}, problem));
  EXPECT_NE(problem.find("is a directory"), std::string::npos) << problem;
  EXPECT_FALSE(checkOutput((dir.path / "no" / "x.json").string(), {}, problem));
  EXPECT_NE(problem.find("does not exist"), std::string::npos) << problem;
  EXPECT_FALSE(checkOutput("", {}, problem));
  fs::path data = dir.path / "data.jsonl";
  std::ofstream(data) << "{}\n";
  fs::create_symlink("data.jsonl", dir.path / "alias.jsonl");
  for (const char *name : {"data.jsonl", "alias.jsonl"}) {
    EXPECT_FALSE(
        checkOutput((dir.path / name).string(), {data.string()}, problem));
    EXPECT_NE(problem.find("the output is the input"), std::string::npos)
        << problem;
    EXPECT_FALSE(writeOutput((dir.path / name).string(), "", problem,
                             {(dir.path / "alias.jsonl").string()}));
  }
  EXPECT_EQ(contents(data), "{}\n");
  // A missing input is no reason to refuse.
  EXPECT_TRUE(checkOutput((dir.path / "new.json").string(),
                          {(dir.path / "gone").string()}, problem));
  // Streamed (metrics): the same checks, then line by line.
  StreamedOutput metrics;
  EXPECT_FALSE(metrics.open(data.string(), {data.string()}, problem));
  ASSERT_TRUE(
      metrics.open((dir.path / "m.jsonl").string(), {data.string()}, problem));
  EXPECT_TRUE(metrics.write("{\"step\": 1}\n"));
  EXPECT_TRUE(metrics.write("{\"step\": 2}\n"));
  EXPECT_EQ(contents(dir.path / "m.jsonl"), "{\"step\": 1}\n{\"step\": 2}\n");
}

} // namespace
