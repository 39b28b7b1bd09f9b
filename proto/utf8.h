/* utf8.h - proto's UTF-8: well-formedness (RFC 3629) and cutting text at a character.
 *
 * Every check of UTF-8 in tfetch goes through here: the strict JSON gate, the JSON writer's
 * escaping, tensor names and metadata, and the messages that quote a name. Well-formed means
 * shortest form, no surrogates (U+D800..U+DFFF), nothing above U+10FFFF. Pure; any thread.
 */
#ifndef TFP_UTF8_H
#define TFP_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length (1-4) of the well-formed UTF-8 sequence at s (n bytes readable), storing its code
 * point in *cp (if not NULL); 0 if s does not start one (n 0, a continuation byte, an overlong
 * form, a surrogate, a value above U+10FFFF, or a sequence cut short). */
size_t tfp_utf8_next(const unsigned char *s, size_t n, uint32_t *cp);
/* 1 if all n bytes are well-formed UTF-8, else 0. */
int tfp_utf8_valid(const char *s, size_t n);
/* The length of s[0..len) cut to at most max bytes without splitting a character: len if it
 * fits, else max moved back past any continuation bytes. */
size_t tfp_utf8_cut(const char *s, size_t len, size_t max);

#endif
