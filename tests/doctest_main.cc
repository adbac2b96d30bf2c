// The test binaries' main: doctest's, except that a run whose --test-case filter selects no test
// case fails. ctest runs one case per process by name, and a name CMake cannot carry (it cuts a
// list at ';') would otherwise select nothing and pass without running a single check.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>

namespace {

unsigned selected_cases = 0;  // test cases that passed the filters, from the last run

struct CountSelected : doctest::IReporter {
  explicit CountSelected(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override { selected_cases = stats.numTestCasesPassingFilters; }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

REGISTER_LISTENER("count_selected", 1, CountSelected);

}  // namespace

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int result = context.run();
  if (context.shouldExit()) return result;
  bool filtered = false;
  for (int i = 1; i < argc; ++i)
    filtered = filtered || std::strncmp(argv[i], "--test-case=", 12) == 0 || std::strncmp(argv[i], "-tc=", 4) == 0;
  if (filtered && selected_cases == 0) {
    std::fprintf(stderr, "no test case matches the --test-case filter\n");
    return 1;
  }
  return result;
}
