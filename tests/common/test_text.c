/*
 * The text helpers on the bytes a guest can send: every control character (C0, DEL, C1 in
 * UTF-8) becomes a space and nothing else changes; ill-formed UTF-8 (stray continuation
 * bytes, overlong forms, surrogates, code points past U+10FFFF, a sequence cut short)
 * becomes '?' while well-formed text stays; a cut never splits a sequence.
 */
#include "common/text.h"
#include "harness.h"

#include <string.h>

#define TEST_TEXT_MAX 64

/* text (len bytes, may hold NULs) after fn, as a C string in out */
static const char *after(void (*fn)(char *, size_t), const char *text, size_t len,
			 char out[TEST_TEXT_MAX])
{
	memcpy(out, text, len);
	out[len] = '\0';
	fn(out, len);
	return out;
}

static void test_make_printable(void)
{
	static const char mixed[] = "a\x1b[2Jb\x07\tc\x7f\n\x01z\0y";
	char out[TEST_TEXT_MAX];

	CHECK_INT_EQ(memcmp(after(text_make_printable, mixed, sizeof(mixed) - 1, out),
			    "a [2Jb  c   z y", sizeof(mixed) - 1), 0);
	/* U+009B (CSI) and U+0085 are C1; U+00A0, U+00E9 and U+20AC are text */
	CHECK_STR_EQ(after(text_make_printable, "x\xc2\x9b" "1m\xc2\x85", 7, out), "x  1m  ");
	CHECK_STR_EQ(after(text_make_printable, "\xc2\xa0\xc3\xa9\xe2\x82\xac", 7, out),
		     "\xc2\xa0\xc3\xa9\xe2\x82\xac");
	/* a lone 0xC2 at the end is left for the UTF-8 repair */
	CHECK_STR_EQ(after(text_make_printable, "ok\xc2", 3, out), "ok\xc2");
	text_make_printable(NULL, 0);
}

static void test_utf8_repair(void)
{
	char out[TEST_TEXT_MAX];

	CHECK_STR_EQ(after(text_utf8_repair, "plain \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 15,
			   out),
		     "plain \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
	CHECK_STR_EQ(after(text_utf8_repair, "a\xff" "b\x80" "c", 5, out), "a?b?c");
	/* overlong forms of '/' and of U+0000 */
	CHECK_STR_EQ(after(text_utf8_repair, "\xc0\xaf\xe0\x80\xaf", 5, out), "?????");
	/* a UTF-16 surrogate (U+D800) and U+110000 */
	CHECK_STR_EQ(after(text_utf8_repair, "\xed\xa0\x80\xf4\x90\x80\x80", 7, out),
		     "???????");
	/* sequences cut short by the end and by an ASCII byte */
	CHECK_STR_EQ(after(text_utf8_repair, "\xe2\x82", 2, out), "??");
	CHECK_STR_EQ(after(text_utf8_repair, "\xf0\x9f" "x", 3, out), "??x");
}

static void test_utf8_cut(void)
{
	static const char euro3[] = "\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac"; /* 9 bytes */

	CHECK_INT_EQ(text_utf8_cut("abc", 3, 10), 3);
	CHECK_INT_EQ(text_utf8_cut("abcdef", 6, 4), 4);
	CHECK_INT_EQ(text_utf8_cut(euro3, 9, 3), 3);
	CHECK_INT_EQ(text_utf8_cut(euro3, 9, 4), 3);
	CHECK_INT_EQ(text_utf8_cut(euro3, 9, 5), 3);
	CHECK_INT_EQ(text_utf8_cut(euro3, 9, 6), 6);
	/* only continuation bytes: no boundary to back off to, so the cut stays */
	CHECK_INT_EQ(text_utf8_cut("\x80\x80\x80\x80\x80\x80", 6, 5), 5);
}

int main(void)
{
	RUN_TEST(test_make_printable);
	RUN_TEST(test_utf8_repair);
	RUN_TEST(test_utf8_cut);
	return harness_finish();
}
