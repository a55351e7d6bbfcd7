/*
 * Text that came from outside (a guest's stderr, its error strings, a program's output) and
 * that the host prints, logs or serialises: control bytes made harmless before the text
 * reaches a terminal or a log file, UTF-8 cut and repaired so a JSON encoder accepts it. Each
 * helper works in place or returns a length, so a caller keeps its own buffer.
 */
#ifndef VOIDBOX_COMMON_TEXT_H
#define VOIDBOX_COMMON_TEXT_H

#include <stddef.h>

/*
 * Makes the control characters of text spaces, in place: the C0 bytes (below 0x20, so also
 * line breaks and ESC), DEL, and the C1 controls U+0080..U+009F in their UTF-8 form (both
 * bytes), which some terminals take as escape sequences too.
 */
void text_make_printable(char *text, size_t len);

/*
 * Makes every byte of text that is not part of a well-formed UTF-8 sequence (RFC 3629: no
 * overlong forms, no surrogates, nothing above U+10FFFF) a '?', in place; valid text is
 * left as it is.
 */
void text_utf8_repair(char *text, size_t len);

/* The length of text cut to at most max bytes without splitting a UTF-8 sequence. */
size_t text_utf8_cut(const char *text, size_t len, size_t max);

#endif
