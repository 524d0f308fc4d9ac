// PickleWriter against bytes written out by hand from the pickle spec (Lib/pickle.py opcodes,
// protocol 4 framing); they are also what CPython 3.11's pickle.dumps(v, protocol=4) returns.
#include <gtest/gtest.h>

#include "io/pickle_writer.h"
#include "leantrain/error.h"
#include "test_pickle_decode.h"

namespace lt {
namespace {

using io::PickleWriter;

std::string hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string o;
  for (unsigned char c : s) {
    if (!o.empty()) o += ' ';
    o += d[c >> 4];
    o += d[c & 15];
  }
  return o;
}

template <class F>
std::string pickled(F f) {
  PickleWriter w;
  f(w);
  return hex(w.finish());
}

// Payloads under 4 bytes go unframed; others sit in one FRAME (0x95 + 8-byte length).
TEST(Pickle, Scalars) {
  EXPECT_EQ(pickled([](PickleWriter& w) { w.none(); }), "80 04 4e 2e");
  EXPECT_EQ(pickled([](PickleWriter& w) { w.boolean(true); }), "80 04 88 2e");
  EXPECT_EQ(pickled([](PickleWriter& w) { w.boolean(false); }), "80 04 89 2e");
  EXPECT_EQ(pickled([](PickleWriter& w) { w.integer(1); }), "80 04 4b 01 2e");
  EXPECT_EQ(pickled([](PickleWriter& w) { w.integer(255); }), "80 04 4b ff 2e");
  EXPECT_EQ(pickled([](PickleWriter& w) { w.integer(300); }), "80 04 95 04 00 00 00 00 00 00 00 4d 2c 01 2e");
  EXPECT_EQ(pickled([](PickleWriter& w) { w.integer(65536); }), "80 04 95 06 00 00 00 00 00 00 00 4a 00 00 01 00 2e");
  EXPECT_EQ(pickled([](PickleWriter& w) { w.integer(-1); }), "80 04 95 06 00 00 00 00 00 00 00 4a ff ff ff ff 2e");
  EXPECT_EQ(pickled([](PickleWriter& w) { w.integer(-2147483648LL); }),
            "80 04 95 06 00 00 00 00 00 00 00 4a 00 00 00 80 2e");
  // LONG1: the shortest little-endian two's complement.
  EXPECT_EQ(pickled([](PickleWriter& w) { w.integer(2147483648LL); }),
            "80 04 95 08 00 00 00 00 00 00 00 8a 05 00 00 00 80 00 2e");
  EXPECT_EQ(pickled([](PickleWriter& w) { w.integer(-2147483649LL); }),
            "80 04 95 08 00 00 00 00 00 00 00 8a 05 ff ff ff 7f ff 2e");
  EXPECT_EQ(pickled([](PickleWriter& w) { w.integer(int64_t(1) << 40); }),
            "80 04 95 09 00 00 00 00 00 00 00 8a 06 00 00 00 00 00 01 2e");
  EXPECT_EQ(pickled([](PickleWriter& w) { w.integer(INT64_MIN); }),
            "80 04 95 0b 00 00 00 00 00 00 00 8a 08 00 00 00 00 00 00 00 80 2e");
  EXPECT_EQ(pickled([](PickleWriter& w) { w.uinteger(uint64_t(1) << 63); }),
            "80 04 95 0c 00 00 00 00 00 00 00 8a 09 00 00 00 00 00 00 00 80 00 2e");
  EXPECT_EQ(pickled([](PickleWriter& w) { w.real(1.5); }),
            "80 04 95 0a 00 00 00 00 00 00 00 47 3f f8 00 00 00 00 00 00 2e");
  EXPECT_EQ(pickled([](PickleWriter& w) { w.str("a"); }), "80 04 95 05 00 00 00 00 00 00 00 8c 01 61 94 2e");
}

TEST(Pickle, LongStringUsesBinunicode) {
  std::string s(300, 'x');
  PickleWriter w;
  w.str(s);
  std::string b = w.finish();
  // PROTO, FRAME header, then 'X' + 4-byte length, the text, MEMOIZE, STOP.
  ASSERT_EQ(b.size(), 2 + 9 + 5 + 300 + 2);
  EXPECT_EQ(hex(b.substr(11, 5)), "58 2c 01 00 00");
  EXPECT_EQ(lt::test::unpickle(b).value, s);
}

TEST(Pickle, Containers) {
  EXPECT_EQ(pickled([](PickleWriter& w) { w.begin_list(0); w.end_list(); }), "80 04 5d 94 2e");
  EXPECT_EQ(pickled([](PickleWriter& w) { w.begin_dict(0); w.end_dict(); }), "80 04 7d 94 2e");
  // One item: APPEND / SETITEM; more: MARK ... APPENDS / SETITEMS.
  EXPECT_EQ(pickled([](PickleWriter& w) { w.begin_list(1); w.none(); w.end_list(); }), "80 04 95 05 00 00 00 00 00 00 00 5d 94 4e 61 2e");
  EXPECT_EQ(pickled([](PickleWriter& w) { w.begin_list(2); w.integer(1); w.integer(2); w.end_list(); }),
            "80 04 95 09 00 00 00 00 00 00 00 5d 94 28 4b 01 4b 02 65 2e");
  EXPECT_EQ(pickled([](PickleWriter& w) { w.begin_dict(1); w.key("a"); w.integer(1); w.end_dict(); }),
            "80 04 95 0a 00 00 00 00 00 00 00 7d 94 8c 01 61 94 4b 01 73 2e");
  // A repeated string is fetched from the memo (dict is memo 0, "k" memo 1).
  EXPECT_EQ(pickled([](PickleWriter& w) { w.begin_dict(1); w.key("k"); w.str("k"); w.end_dict(); }),
            "80 04 95 0a 00 00 00 00 00 00 00 7d 94 8c 01 6b 94 68 01 73 2e");
  // Nested: {"a": [True, None]}
  EXPECT_EQ(pickled([](PickleWriter& w) {
              w.begin_dict(1);
              w.key("a");
              w.begin_list(2);
              w.boolean(true);
              w.none();
              w.end_list();
              w.end_dict();
            }),
            "80 04 95 0e 00 00 00 00 00 00 00 7d 94 8c 01 61 94 5d 94 28 88 4e 65 73 2e");
}

TEST(Pickle, BatchesOfAThousand) {
  PickleWriter w;
  w.begin_list(1001);
  for (int i = 0; i < 1001; ++i) w.integer(0);
  w.end_list();
  std::string b = w.finish();
  ASSERT_EQ(b.size(), 2020u);  // as CPython: one frame, 1000 + 1 items
  EXPECT_EQ(hex(b.substr(0, 15)), "80 04 95 d9 07 00 00 00 00 00 00 5d 94 28 4b");
  EXPECT_EQ(hex(b.substr(b.size() - 6)), "65 28 4b 00 65 2e");  // APPENDS, MARK, 0, APPENDS, STOP
  EXPECT_EQ(lt::test::unpickle(b).value.size(), 1001u);

  PickleWriter d;  // a dict of exactly 1000 ends with an empty batch, like CPython's C pickler
  d.begin_dict(1000);
  for (int i = 0; i < 1000; ++i) {
    d.key(std::to_string(i));
    d.integer(i);
  }
  d.end_dict();
  std::string db = d.finish();
  EXPECT_EQ(hex(db.substr(db.size() - 4)), "75 28 75 2e");
  EXPECT_EQ(lt::test::unpickle(db).value["999"], 999);
}

TEST(Pickle, LargeOutputIsFramedAndStreams) {
  nlohmann::json want = nlohmann::json::array();
  PickleWriter w;
  std::string streamed;
  w.begin_list(30000);
  for (int i = 0; i < 30000; ++i) {
    std::string s = "item-" + std::to_string(i);
    want.push_back(s);
    w.str(s);
    if (i % 1000 == 0) streamed += w.take();
  }
  w.end_list();
  streamed += w.finish();
  lt::test::Unpickled u = lt::test::unpickle(streamed);
  EXPECT_EQ(u.value, want);
  ASSERT_GT(u.frames, 3);
  for (size_t i = 0; i + 1 < u.frame_sizes.size(); ++i) {
    EXPECT_GE(u.frame_sizes[i], 64u * 1024) << "frame " << i;
    EXPECT_LT(u.frame_sizes[i], 65u * 1024) << "frame " << i;
  }
}

TEST(Pickle, RepeatedKeysUseTheMemo) {
  PickleWriter w;
  w.begin_list(600);
  for (int i = 0; i < 600; ++i) {
    w.begin_dict(1);
    w.key("action");
    w.str("alloc");
    w.end_dict();
  }
  w.end_list();
  std::string b = w.finish();
  // Each dict after the first: } MEMOIZE h<k> h<v> SETITEM = 6 bytes, or 12 with 5-byte LONG_BINGETs
  // once the memo passes 255 ("action" and "alloc" are memo 1 and 2, so they stay short).
  EXPECT_LT(b.size(), 600u * 7 + 64);
  nlohmann::json v = lt::test::unpickle(b).value;
  ASSERT_EQ(v.size(), 600u);
  EXPECT_EQ(v[599]["action"], "alloc");
}

TEST(Pickle, MisuseIsAnError) {
  PickleWriter w;
  w.begin_list(2);
  w.integer(1);
  EXPECT_THROW(w.end_list(), lt::Error);
  PickleWriter d;
  d.begin_dict(1);
  d.key("a");
  d.integer(1);
  EXPECT_THROW(d.integer(2), lt::Error);  // more items than announced
}

}  // namespace
}  // namespace lt
