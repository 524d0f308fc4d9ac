// Issue 47 (hostile inputs, round 3), the parts below the command line: the bounded regex search
// gives the matches an unbounded one gives and refuses a rescanning pattern quickly; SHA-256 of
// the tokenizer digest; duplicate JSON keys found; an exit inside BLAS explained; meta's pinned
// account holds no memory and the data loader fills no batch on meta.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <gtest/gtest.h>
#include <pcre2.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>

#include "backend/cpu/blas_call.h"
#include "io/sha256.h"
#include "io/unique_keys.h"
#include "leantrain/data.h"
#include "leantrain/memory.h"
#include "memory/host_allocators.h"
#include "text/regex.h"
#include "unit/error_of.h"

namespace lt {
namespace {

using Matches = std::vector<std::pair<size_t, size_t>>;

// The matches of `pattern` over the whole of `text`, found as Regex::find_all finds them (an empty
// match where the previous one ended moves on one character), with one unbounded pcre2_match per
// match: the reference for the windowed search.
Matches reference_matches(const std::string& pattern, const std::string& text) {
  int err = 0;
  PCRE2_SIZE at = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &err, &at, nullptr);
  EXPECT_NE(code, nullptr) << pattern;
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  Matches out;
  size_t pos = 0, last_end = 0;
  bool have_last = false;
  while (pos <= text.size()) {
    const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos, 0, md, nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[0] == ov[1] && have_last && last_end == ov[1]) {
      size_t step = 1;
      while (pos + step < text.size() && (static_cast<unsigned char>(text[pos + step]) & 0xC0) == 0x80) ++step;
      pos += step;
      continue;
    }
    pos = ov[1];
    have_last = true;
    last_end = ov[1];
    out.emplace_back(ov[0], ov[1]);
  }
  pcre2_match_data_free(md);
  pcre2_code_free(code);
  return out;
}

TEST(HostileInputs, WindowedRegexSearchFindsTheMatchesOfAWholeTextSearch) {
  // GPT-2's pattern with \s written out (Regex rewrites \s so; here the reference gets it as is),
  // and patterns that look behind, ahead, at line ends, at word boundaries, or match empty.
  const std::vector<std::string> patterns = {
      "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\p{White_Space}\\p{L}\\p{N}]+|\\p{White_Space}+(?!\\P{White_Space})|"
      "\\p{White_Space}+",
      "[a-z]+$", "^\\w+", "(?<=a)b+", "\\b\\w{3}\\b", "x*", "(?i)ab|a", "\\d{1,3}(?=(\\d{3})+(?!\\d))", "\\w*[xy]|.",
      "a(?=b{20})", "\\p{Han}+|\\p{Latin}{2,}"};
  const std::vector<std::string> alphabet = {"a", "b", "x", "y", "1", "2", " ", "  ", "\n", ",", "'s", "\xC3\xA9",
                                             "\xE6\x97\xA5", "\xF0\x9F\x91\x8D", "ab", "bbbbbbbbbbbbbbbbbbbbbbbb"};
  std::mt19937 rng(47);
  for (const std::string& p : patterns) {
    const text::Regex re(p, false, "test pattern");
    for (int t = 0; t < 300; ++t) {
      std::string text;
      const int pieces = int(rng() % 400);  // up to about 3 KiB: searches cross window ends
      for (int i = 0; i < pieces; ++i) text += alphabet[rng() % alphabet.size()];
      ASSERT_EQ(re.find_all(text), reference_matches(p, text)) << "pattern " << p << " text '" << text << "'";
    }
  }
}

TEST(HostileInputs, ARescanningPatternIsRefusedQuicklyNotRunForMinutes) {
  const text::Regex re("\\w*[xy]|.", false, "tokenizer T: pre_tokenizer.pattern");
  const std::string doc(200000, 'a');  // 84 s before the bound (issue 47)
  const auto start = std::chrono::steady_clock::now();
  const std::string e = test::error_of([&] { re.find_all(doc); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_NE(e.find("tokenizer T: pre_tokenizer.pattern: the regular expression rescans the text: on a text of 200000 "
                   "bytes it needed more than 16 passes over it"),
            std::string::npos)
      << e;
  // A short document with the same pattern is fine, and so is a long one of GPT-2's pattern.
  EXPECT_EQ(re.find_all(std::string(1000, 'a') + "x").size(), 1u);
  const text::Regex gpt2("'s|'t| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", false, "gpt2");
  std::string prose;
  while (prose.size() < 400000) prose += "The quick brown fox, 12345 times,   jumps\n\n over it's lazy dog. ";
  EXPECT_GT(gpt2.find_all(prose).size(), 50000u);
  EXPECT_EQ(gpt2.find_all(std::string(300000, ' ')).size(), 1u);  // one long run of white space
}

TEST(HostileInputs, Sha256MatchesTheStandardVectors) {
  EXPECT_EQ(io::sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(io::sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(io::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  io::Sha256 h;  // in pieces, across block boundaries
  for (int i = 0; i < 1000; ++i) h.update(std::string(1000, 'a'));
  EXPECT_EQ(h.hex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(HostileInputs, DuplicateJsonKeysAreFoundAtAnyDepth) {
  auto dup = [](const std::string& text) {
    const io::UniqueKeys keys;
    (void)nlohmann::json::parse(text, keys.callback());
    return keys.duplicate();
  };
  EXPECT_EQ(dup(R"({"text": "a", "text": "b"})"), "text");
  EXPECT_EQ(dup(R"({"a": {"x": 1, "x": 2}, "b": 3})"), "x");
  EXPECT_EQ(dup(R"({"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 1}, {"x": 2}]})"), "");  // one per object
  EXPECT_EQ(dup(R"([{"k": 1}, {"k": 2, "j": {"k": 3}}])"), "");
}

TEST(HostileInputs, AnExitInsideBlasIsExplained) {
  testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        const cpu::BlasCall call;
        std::fputs("OpenBLAS: malloc failed in gemm_driver\n", stderr);
        std::exit(1);
      },
      testing::ExitedWithCode(1), "leantrain: error: out of host memory inside a matrix multiply");
  EXPECT_EXIT(
      {
        { const cpu::BlasCall call; }
        std::exit(3);  // after the call: nothing is added
      },
      testing::ExitedWithCode(3), "^$");
}

TEST(HostileInputs, MetaPinnedMemoryIsCountedNotHeld) {
  std::unique_ptr<Allocator> a = make_host_pinned_allocator(Device::meta());
  const int64_t huge = int64_t(1) << 45;  // 32 TiB: no machine has it
  Block b = a->allocate(huge);
  EXPECT_EQ(b.ptr, nullptr);
  EXPECT_EQ(a->stats().allocated_bytes.current, huge);
  a->deallocate(b);
  EXPECT_EQ(a->stats().allocated_bytes.current, 0);
}

// Images that count how often a sample is read.
class CountedImages final : public Dataset {
 public:
  int64_t size() const override { return 64; }
  Shape input_shape() const override { return {3, 8, 8}; }
  DType input_dtype() const override { return DType::F32; }
  Shape target_shape() const override { return {}; }
  void get(int64_t, void*, int64_t* target) const override {
    ++reads;
    *target = 0;
  }
  mutable std::atomic<int64_t> reads{0};
};

TEST(HostileInputs, TheLoaderFillsNoBatchOnMeta) {
  MetaAllocatorScope scope(false);
  auto ds = std::make_shared<CountedImages>();
  Allocator& pinned = pinned_host_allocator(Device::meta());
  for (int prefetch : {0, 2}) {
    LoaderOptions o;
    o.batch_size = 16;
    o.device = Device::meta();
    o.workers = 2;
    o.prefetch = prefetch;
    DataLoader loader(ds, o);
    for (int i = 0; i < 6; ++i) {  // past an epoch's end
      Batch b = loader.next();
      EXPECT_EQ(b.inputs.device(), Device::meta());
      EXPECT_EQ(b.inputs.shape(), (Shape{16, 3, 8, 8}));
    }
    // No sample was read, yet the ring of prefetch + 2 buffers is counted as on a real device.
    EXPECT_EQ(ds->reads.load(), 0);
    EXPECT_GE(pinned.stats().allocated_bytes.current, int64_t(prefetch + 2) * 16 * 3 * 8 * 8 * 4);
  }
  EXPECT_EQ(pinned.stats().allocated_bytes.current, 0);
}

}  // namespace
}  // namespace lt
