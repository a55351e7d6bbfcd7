/*
 * A small libcurl client for the messaging tests: one request, its status and its body parsed
 * as JSON, over TCP (a member's port) or a unix socket (the control routes). Tests read a
 * status and a JSON value in one line, so each check says what it expects.
 */
#ifndef VOIDBOX_TESTS_MESSAGING_SIDECAR_HTTP_H
#define VOIDBOX_TESTS_MESSAGING_SIDECAR_HTTP_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#define SIDECAR_HTTP_URL_MAX 512
#define SIDECAR_HTTP_TIMEOUT_SECS 10L

struct sidecar_http_answer {
	long status;
	json_t *json; /* NULL when the body is not JSON */
	char *body;
	size_t len;
};

static size_t sidecar_http_write(char *data, size_t size, size_t nmemb, void *opaque)
{
	struct sidecar_http_answer *answer = opaque;
	size_t n = size * nmemb;
	char *grown = realloc(answer->body, answer->len + n + 1);

	if (!grown)
		return 0;
	memcpy(grown + answer->len, data, n);
	answer->body = grown;
	answer->len += n;
	answer->body[answer->len] = '\0';
	return n;
}

/* unix_path NULL: TCP to 127.0.0.1:port. body NULL: no body. header: one extra or NULL. */
static inline struct sidecar_http_answer sidecar_http(const char *unix_path, uint16_t port,
						      const char *method, const char *path,
						      const char *body, const char *header)
{
	struct sidecar_http_answer answer = { 0 };
	struct curl_slist *headers = NULL;
	char url[SIDECAR_HTTP_URL_MAX];
	CURL *curl = curl_easy_init();

	if (!curl)
		return answer;
	if (unix_path) {
		snprintf(url, sizeof(url), "http://localhost%s", path);
		curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, unix_path);
	} else {
		snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", port, path);
	}
	curl_easy_setopt(curl, CURLOPT_URL, url);
	curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT, SIDECAR_HTTP_TIMEOUT_SECS);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, sidecar_http_write);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer);
	headers = curl_slist_append(headers, "Content-Type: application/json");
	if (header)
		headers = curl_slist_append(headers, header);
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
	if (body) {
		curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	}
	if (curl_easy_perform(curl) == CURLE_OK)
		curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &answer.status);
	if (answer.body)
		answer.json = json_loadb(answer.body, answer.len, 0, NULL);
	curl_slist_free_all(headers);
	curl_easy_cleanup(curl);
	return answer;
}

static inline void sidecar_http_free(struct sidecar_http_answer *answer)
{
	json_decref(answer->json);
	free(answer->body);
	memset(answer, 0, sizeof(*answer));
}

/* The error shape {code, message, retryable} with this code. */
static inline int sidecar_http_is_error(const struct sidecar_http_answer *answer,
					const char *code)
{
	const char *got = json_string_value(json_object_get(answer->json, "code"));

	return got && strcmp(got, code) == 0 &&
	       json_is_string(json_object_get(answer->json, "message")) &&
	       json_is_boolean(json_object_get(answer->json, "retryable")) &&
	       json_object_size(answer->json) == 3;
}

#endif
