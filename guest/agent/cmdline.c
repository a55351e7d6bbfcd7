/*
 * Tokenises the command line in place-free passes (no allocation, no global state) because the
 * same text is parsed for several purposes at boot and by tests. Tokens are split on ASCII
 * whitespace; the kernel's quoting is not needed for any key the agent reads.
 */
#include "cmdline.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CMDLINE_FILE_MAX (64 * 1024)
#define HEX_BASE 16
#define DECIMAL_BASE 10

struct cmdline_token {
	const char *start;
	size_t len;
};

/* Advances *cursor past the next token; returns false at the end of text. */
static bool cmdline_next_token(const char **cursor, struct cmdline_token *token)
{
	const char *p = *cursor;

	while (*p && isspace((unsigned char)*p))
		p++;
	if (!*p)
		return false;
	token->start = p;
	while (*p && !isspace((unsigned char)*p))
		p++;
	token->len = (size_t)(p - token->start);
	*cursor = p;
	return true;
}

static bool token_has_prefix(const struct cmdline_token *token, const char *prefix)
{
	size_t len = strlen(prefix);

	return token->len >= len && memcmp(token->start, prefix, len) == 0;
}

static int hex_digit_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + DECIMAL_BASE;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + DECIMAL_BASE;
	return -1;
}

int cmdline_hex_decode(const char *hex, size_t hex_len, uint8_t *out, size_t out_len)
{
	if (hex_len != 2 * out_len)
		return -EINVAL;
	for (size_t i = 0; i < out_len; i++) {
		int hi = hex_digit_value(hex[2 * i]);
		int lo = hex_digit_value(hex[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -EINVAL;
		out[i] = (uint8_t)(hi * HEX_BASE + lo);
	}
	return 0;
}

static bool parse_epoch(const char *text, size_t len, int64_t *out)
{
	int64_t value = 0;

	if (len == 0)
		return false;
	for (size_t i = 0; i < len; i++) {
		if (!isdigit((unsigned char)text[i]))
			return false;
		if (value > (INT64_MAX - (text[i] - '0')) / DECIMAL_BASE)
			return false;
		value = value * DECIMAL_BASE + (text[i] - '0');
	}
	*out = value;
	return true;
}

int cmdline_parse(const char *text, struct agent_cmdline *out)
{
	struct cmdline_token token;
	const char *cursor = text ? text : "";
	size_t secret_key_len = strlen(CMDLINE_SECRET_KEY);
	size_t clock_key_len = strlen(CMDLINE_CLOCK_KEY);

	memset(out, 0, sizeof(*out));
	while (cmdline_next_token(&cursor, &token)) {
		if (token_has_prefix(&token, CMDLINE_SECRET_KEY)) {
			uint8_t secret[CMDLINE_SECRET_SIZE];

			if (cmdline_hex_decode(token.start + secret_key_len,
					       token.len - secret_key_len, secret,
					       sizeof(secret)) == 0) {
				memcpy(out->secret, secret, sizeof(secret));
				out->has_secret = true;
			}
		} else if (token_has_prefix(&token, CMDLINE_CLOCK_KEY)) {
			int64_t epoch;

			if (parse_epoch(token.start + clock_key_len, token.len - clock_key_len,
					&epoch)) {
				out->clock_epoch_secs = epoch;
				out->has_clock = true;
			}
		}
	}
	return 0;
}

/* Module names compare with '-' and '_' treated as equal, as the kernel does. */
static bool module_name_char_equal(char a, char b)
{
	if (a == '-')
		a = '_';
	if (b == '-')
		b = '_';
	return a == b;
}

static bool token_names_module(const struct cmdline_token *token, const char *module,
			       size_t *param_offset)
{
	size_t len = strlen(module);
	const char *eq;

	if (token->len <= len + 1 || token->start[len] != '.')
		return false;
	for (size_t i = 0; i < len; i++)
		if (!module_name_char_equal(token->start[i], module[i]))
			return false;
	eq = memchr(token->start + len + 1, '=', token->len - len - 1);
	if (!eq || eq == token->start + len + 1)
		return false;
	*param_offset = len + 1;
	return true;
}

int cmdline_module_params(const char *text, const char *module, char *out, size_t out_size)
{
	struct cmdline_token token;
	const char *cursor = text ? text : "";
	size_t used = 0;

	if (out_size == 0)
		return -ENOSPC;
	out[0] = '\0';
	while (cmdline_next_token(&cursor, &token)) {
		size_t offset, param_len, needed;

		if (!token_names_module(&token, module, &offset))
			continue;
		param_len = token.len - offset;
		needed = param_len + (used ? 1 : 0);
		if (used + needed + 1 > out_size)
			return -ENOSPC;
		if (used)
			out[used++] = ' ';
		memcpy(out + used, token.start + offset, param_len);
		used += param_len;
		out[used] = '\0';
	}
	return (int)used;
}

int cmdline_read_file(const char *path, char **out)
{
	char *buf;
	size_t used = 0;
	int fd, err = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	buf = malloc(CMDLINE_FILE_MAX + 1);
	if (!buf) {
		err = -ENOMEM;
		goto out_close;
	}
	while (used < CMDLINE_FILE_MAX) {
		ssize_t n = read(fd, buf + used, CMDLINE_FILE_MAX - used);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			err = -errno;
			free(buf);
			goto out_close;
		}
		if (n == 0)
			break;
		used += (size_t)n;
	}
	buf[used] = '\0';
	*out = buf;
out_close:
	close(fd);
	return err;
}
