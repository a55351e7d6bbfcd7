/*
 * The registry client (see oci_pull.h). One curl easy handle is reused for every request of
 * a pull, so its connection is too. Each request goes through oci_request, which answers a
 * 401 once: it parses the challenge, gets a Bearer token from the realm (or builds a Basic
 * header from the caller's credentials) and repeats the request; a second 401 is the error.
 *
 * Response bodies go to a sink: a bounded memory buffer (manifests, tokens), or a blob
 * writer that hashes what it writes and refuses more bytes than the descriptor declared.
 * Bodies of error answers are never written to a blob; a bounded prefix is kept for the
 * error sentence (its control bytes made spaces, as in the headers kept) and the transfer
 * stops there, so an endless error answer ends too. Every request has a deadline: a fixed
 * allowance, and for a blob as much again as its declared size takes at a slow link's rate,
 * so a registry that trickles bytes cannot hold a pull open forever. Only http and https are
 * spoken, redirects included (registries redirect blob downloads to storage); curl drops our
 * Authorization header when a redirect leaves the host. libcurl is opened when the first
 * pull starts (src/dynlib/curl_dl.h).
 */
#include "store/oci_pull.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "common/text.h"
#include "dynlib/curl_dl.h"
#include "store/oci_blobs.h"

#define OCI_HTTP_OK 200
#define OCI_HTTP_UNAUTHORIZED 401
#define OCI_HTTP_NOT_FOUND 404
#define OCI_URL_MAX 4096
#define OCI_HEADER_MAX 2048
#define OCI_AUTH_HEADER_MAX (OCI_TOKEN_MAX + 64)
#define OCI_ERROR_BODY_MAX 256
#define OCI_CONTENT_TYPE_MAX 256
#define OCI_MAX_REDIRECTS 5L
#define OCI_CONNECT_TIMEOUT_S 30L
/* A transfer slower than this many bytes per second for OCI_LOW_SPEED_TIME_S is dropped. */
#define OCI_LOW_SPEED_LIMIT 1L
#define OCI_LOW_SPEED_TIME_S 60L
/* A blob's deadline grows by one second per this many declared bytes (a slow link's rate). */
#define OCI_TRANSFER_RATE_MIN (16ull << 10)
#define OCI_PROTOCOLS "http,https"
#define OCI_USER_AGENT "voidbox/0.1"
#define OCI_DIGEST_SHORT 19 /* "sha256:" and 12 hex digits */
#define OCI_BAR_WIDTH 30
#define OCI_BYTES_PER_MIB (1024.0 * 1024.0)
#define OCI_PERCENT 100
#define OCI_SCOPE_PULL_FORMAT "repository:%s:pull"
#define OCI_ACCEPT_MANIFESTS                                                                \
	"Accept: " OCI_MEDIA_OCI_INDEX ", " OCI_MEDIA_OCI_MANIFEST ", " OCI_MEDIA_DOCKER_LIST \
	", " OCI_MEDIA_DOCKER_MANIFEST
#define OCI_CRED_MAX 1024
#define OCI_PULL_PURPOSE "pulling an OCI image"

enum oci_sink_kind {
	OCI_SINK_MEMORY,
	OCI_SINK_BLOB,
};

struct oci_sink {
	enum oci_sink_kind kind;
	/* memory */
	char *buf;
	size_t len;
	size_t max;
	/* blob */
	struct oci_blob_writer *writer;
	unsigned long long expected;
	int write_rc;
	/* both */
	unsigned long long received;
	bool overflow;
	bool error_cut; /* an error answer's body went past error_body and was stopped */
	char error_body[OCI_ERROR_BODY_MAX];
	size_t error_len;
};

struct oci_client {
	CURL *curl;
	const struct oci_ref *ref;
	const struct oci_pull_options *options;
	const char *scheme; /* "http" or "https" */
	char authorization[OCI_AUTH_HEADER_MAX];
	/* from the last response */
	long status;
	char content_type[OCI_CONTENT_TYPE_MAX];
	char challenge[OCI_HEADER_MAX];
	/* progress of the blob being fetched */
	const char *progress_label;
	unsigned long long progress_total;
	int progress_shown; /* the percentage on screen; -1: none yet */
};

static size_t oci_on_body(char *data, size_t size, size_t nmemb, void *opaque)
{
	struct oci_client *client = opaque;
	struct oci_sink *sink;
	char *private_data = NULL;
	size_t len = size * nmemb;
	long status = 0;

	curl_dl.easy_getinfo(client->curl, CURLINFO_PRIVATE, &private_data);
	sink = (struct oci_sink *)(void *)private_data;
	curl_dl.easy_getinfo(client->curl, CURLINFO_RESPONSE_CODE, &status);
	if (status != OCI_HTTP_OK) {
		size_t room = sizeof(sink->error_body) - 1 - sink->error_len;
		size_t take = len < room ? len : room;

		memcpy(sink->error_body + sink->error_len, data, take);
		text_make_printable(sink->error_body + sink->error_len, take);
		sink->error_len += take;
		sink->error_body[sink->error_len] = '\0';
		if (take < len) {
			sink->error_cut = true;
			return 0;
		}
		return len;
	}
	sink->received += len;
	if (sink->kind == OCI_SINK_MEMORY) {
		if (sink->len + len > sink->max) {
			sink->overflow = true;
			return 0;
		}
		memcpy(sink->buf + sink->len, data, len);
		sink->len += len;
		return len;
	}
	if (sink->received > sink->expected) {
		sink->overflow = true;
		return 0;
	}
	sink->write_rc = oci_blob_writer_write(sink->writer, data, len);
	return sink->write_rc < 0 ? 0 : len;
}

/* Copies header name's value (trimmed) into out when line is that header. */
static void oci_take_header(const char *line, size_t len, const char *name, char *out,
			    size_t size)
{
	size_t name_len = strlen(name);

	if (len <= name_len || strncasecmp(line, name, name_len) != 0)
		return;
	line += name_len;
	len -= name_len;
	while (len > 0 && (*line == ' ' || *line == '\t')) {
		line++;
		len--;
	}
	while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == '\n' || line[len - 1] == ' '))
		len--;
	if (len >= size)
		len = size - 1; /* a header too long for its field: it fails to parse later */
	memcpy(out, line, len);
	text_make_printable(out, len);
	out[len] = '\0';
}

static size_t oci_on_header(char *data, size_t size, size_t nmemb, void *opaque)
{
	struct oci_client *client = opaque;
	size_t len = size * nmemb;

	if (len >= strlen("HTTP/") && strncmp(data, "HTTP/", strlen("HTTP/")) == 0) {
		/* a new response (after a redirect): forget the last one's headers */
		client->content_type[0] = '\0';
		client->challenge[0] = '\0';
	}
	oci_take_header(data, len, "Content-Type:", client->content_type,
			sizeof(client->content_type));
	oci_take_header(data, len, "WWW-Authenticate:", client->challenge,
			sizeof(client->challenge));
	return len;
}

static void oci_short_digest(const char *digest, char *out, size_t size)
{
	snprintf(out, size, "%.*s", OCI_DIGEST_SHORT, digest);
}

static bool oci_pull_cancelled(const struct oci_pull_options *options)
{
	return options->cancelled && options->cancelled();
}

int oci_pull_check_cancel(const struct oci_pull_options *options, char *err, size_t errlen)
{
	if (!oci_pull_cancelled(options))
		return 0;
	snprintf(err, errlen, "%s", OCI_PULL_CANCELLED_ERROR);
	return -ECANCELED;
}

static int oci_on_progress(void *opaque, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
			   curl_off_t ulnow)
{
	struct oci_client *client = opaque;
	FILE *out = client->options->progress_stream ? client->options->progress_stream : stderr;
	unsigned long long total = client->progress_total, now = (unsigned long long)dlnow;
	int filled, percent;

	(void)dltotal;
	(void)ultotal;
	(void)ulnow;
	if (oci_pull_cancelled(client->options))
		return 1; /* libcurl ends the transfer with CURLE_ABORTED_BY_CALLBACK */
	if (client->options->progress != OCI_PROGRESS_BAR || !client->progress_label || total == 0)
		return 0;
	if (now > total)
		now = total;
	percent = (int)(now * OCI_PERCENT / total);
	if (percent == client->progress_shown)
		return 0; /* redrawn only when the figure changes */
	client->progress_shown = percent;
	filled = (int)(now * OCI_BAR_WIDTH / total);
	fprintf(out, "\r%s [%-*.*s] %6.1f/%.1f MiB %3d%%", client->progress_label, OCI_BAR_WIDTH,
		filled, "##############################", (double)now / OCI_BYTES_PER_MIB,
		(double)total / OCI_BYTES_PER_MIB, percent);
	fflush(out);
	return 0;
}

static int oci_base64(const char *in, size_t len, char *out, size_t size)
{
	if ((len + 2) / 3 * 4 + 1 > size)
		return -ENAMETOOLONG;
	EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)in, (int)len);
	return 0;
}

static int oci_basic_header(const struct oci_pull_options *options, char *out, size_t size)
{
	char cred[OCI_CRED_MAX], encoded[OCI_CRED_MAX * 2];
	int n = snprintf(cred, sizeof(cred), "%s:%s", options->username,
			 options->password ? options->password : "");

	if (n < 0 || (size_t)n >= sizeof(cred) || oci_base64(cred, (size_t)n, encoded,
							      sizeof(encoded)) < 0)
		return -ENAMETOOLONG;
	n = snprintf(out, size, "Authorization: Basic %s", encoded);
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* One GET of url into sink; *status and the client's header fields are set. 0 or -EIO. */
static int oci_get(struct oci_client *client, const char *url, const char *accept,
		   const char *authorization, struct oci_sink *sink, char *err, size_t errlen)
{
	unsigned int timeout_option = client->options->request_timeout_s;
	long timeout_s = (long)(timeout_option ? timeout_option : OCI_REQUEST_TIMEOUT_S);
	struct curl_slist *headers = NULL;
	CURLcode code;
	int rc = 0;

	if (accept)
		headers = curl_dl.slist_append(headers, accept);
	if (authorization && *authorization)
		headers = curl_dl.slist_append(headers, authorization);
	if (sink->kind == OCI_SINK_BLOB)
		timeout_s += (long)(sink->expected / OCI_TRANSFER_RATE_MIN);
	client->status = 0;
	client->content_type[0] = '\0';
	client->challenge[0] = '\0';
	curl_dl.easy_setopt(client->curl, CURLOPT_URL, url);
	curl_dl.easy_setopt(client->curl, CURLOPT_TIMEOUT, timeout_s);
	curl_dl.easy_setopt(client->curl, CURLOPT_HTTPHEADER, headers);
	curl_dl.easy_setopt(client->curl, CURLOPT_PRIVATE, sink);
	code = curl_dl.easy_perform(client->curl);
	curl_dl.easy_getinfo(client->curl, CURLINFO_RESPONSE_CODE, &client->status);
	if (code == CURLE_ABORTED_BY_CALLBACK && oci_pull_cancelled(client->options)) {
		snprintf(err, errlen, "%s", OCI_PULL_CANCELLED_ERROR);
		rc = -ECANCELED;
	} else if (code != CURLE_OK &&
		   !(code == CURLE_WRITE_ERROR &&
		     (sink->overflow || sink->write_rc || sink->error_cut))) {
		snprintf(err, errlen, "cannot fetch %s: %s", url, curl_dl.easy_strerror(code));
		rc = -EIO;
	}
	curl_dl.easy_setopt(client->curl, CURLOPT_HTTPHEADER, NULL);
	curl_dl.slist_free_all(headers);
	return rc;
}

static int oci_fetch_token(struct oci_client *client, const struct oci_auth_challenge *challenge,
			   char *err, size_t errlen)
{
	char url[OCI_URL_MAX], scope[OCI_AUTH_FIELD_MAX], basic[OCI_AUTH_HEADER_MAX] = "";
	char token[OCI_TOKEN_MAX];
	char *service = NULL, *scope_esc = NULL;
	struct oci_sink sink = { .kind = OCI_SINK_MEMORY, .max = OCI_TOKEN_BODY_MAX };
	int rc, n;

	if (strncmp(challenge->realm, "https://", strlen("https://")) != 0 &&
	    strncmp(challenge->realm, "http://", strlen("http://")) != 0) {
		snprintf(err, errlen, "registry %s names a token realm '%.200s' that is not an http(s) URL",
			 client->ref->registry, challenge->realm);
		return -EPROTO;
	}
	if (challenge->scope[0])
		snprintf(scope, sizeof(scope), "%s", challenge->scope);
	else if (snprintf(scope, sizeof(scope), OCI_SCOPE_PULL_FORMAT, client->ref->repository) >=
		 (int)sizeof(scope))
		return -ENAMETOOLONG;
	service = curl_dl.easy_escape(client->curl, challenge->service, 0);
	scope_esc = curl_dl.easy_escape(client->curl, scope, 0);
	sink.buf = malloc(sink.max);
	if (!service || !scope_esc || !sink.buf) {
		rc = -ENOMEM;
		snprintf(err, errlen, "out of memory asking for a registry token");
		goto out;
	}
	n = snprintf(url, sizeof(url), "%s%cservice=%s&scope=%s", challenge->realm,
		     strchr(challenge->realm, '?') ? '&' : '?', service, scope_esc);
	if (n < 0 || (size_t)n >= sizeof(url)) {
		rc = -ENAMETOOLONG;
		snprintf(err, errlen, "the token URL of registry %s is too long", client->ref->registry);
		goto out;
	}
	if (client->options->username && oci_basic_header(client->options, basic, sizeof(basic)) < 0) {
		rc = -ENAMETOOLONG;
		snprintf(err, errlen, "the registry user name and password are too long");
		goto out;
	}
	rc = oci_get(client, url, NULL, basic, &sink, err, errlen);
	if (rc < 0)
		goto out;
	if (sink.overflow) {
		rc = -EMSGSIZE;
		snprintf(err, errlen, "the token endpoint of %s sent more than %u bytes",
			 client->ref->registry, OCI_TOKEN_BODY_MAX);
		goto out;
	}
	if (client->status != OCI_HTTP_OK) {
		rc = -EACCES;
		snprintf(err, errlen, "the token endpoint of %s refused (HTTP %ld)%s; check the user name and password (--username, VOIDBOX_REGISTRY_AUTH)",
			 client->ref->registry, client->status,
			 client->options->username ? "" : " to an anonymous pull");
		goto out;
	}
	rc = oci_token_parse(sink.buf, sink.len, token, sizeof(token), err, errlen);
	if (rc < 0)
		goto out;
	snprintf(client->authorization, sizeof(client->authorization), "Authorization: Bearer %s",
		 token);
out:
	curl_dl.free(service);
	curl_dl.free(scope_esc);
	free(sink.buf);
	return rc;
}

/* Answers a 401's challenge by setting client->authorization. 0 or -errno with err. */
static int oci_authenticate(struct oci_client *client, char *err, size_t errlen)
{
	struct oci_auth_challenge challenge;

	if (oci_auth_challenge_parse(client->challenge, strlen(client->challenge), &challenge) < 0) {
		snprintf(err, errlen, "registry %s asks for authentication with a challenge voidbox does not understand: '%.200s'",
			 client->ref->registry, client->challenge);
		return -EPROTO;
	}
	if (challenge.scheme == OCI_AUTH_SCHEME_BEARER)
		return oci_fetch_token(client, &challenge, err, errlen);
	if (!client->options->username) {
		snprintf(err, errlen, "registry %s needs a user name and password: pass --username and --password-stdin, or set VOIDBOX_REGISTRY_AUTH=USER:PASSWORD",
			 client->ref->registry);
		return -EACCES;
	}
	if (oci_basic_header(client->options, client->authorization,
			     sizeof(client->authorization)) < 0) {
		snprintf(err, errlen, "the registry user name and password are too long");
		return -ENAMETOOLONG;
	}
	return 0;
}

/*
 * GET scheme://registry/v2/repository/<kind>/<name> into sink, authenticating once when
 * asked (a 401's body went to the sink's error buffer, so the sink starts clean again).
 */
static int oci_request(struct oci_client *client, const char *kind, const char *name,
		       const char *accept, struct oci_sink *sink, char *err, size_t errlen)
{
	char url[OCI_URL_MAX];
	int n = snprintf(url, sizeof(url), "%s://%s/v2/%s/%s/%s", client->scheme,
			 client->ref->registry, client->ref->repository, kind, name);
	int rc;

	if (n < 0 || (size_t)n >= sizeof(url)) {
		snprintf(err, errlen, "the URL for %s is too long", name);
		return -ENAMETOOLONG;
	}
	rc = oci_get(client, url, accept, client->authorization, sink, err, errlen);
	if (rc == 0 && client->status == OCI_HTTP_UNAUTHORIZED && !client->authorization[0]) {
		rc = oci_authenticate(client, err, errlen);
		if (rc == 0) {
			sink->len = 0;
			sink->received = 0;
			sink->error_len = 0;
			sink->error_cut = false;
			rc = oci_get(client, url, accept, client->authorization, sink, err, errlen);
		}
	}
	if (rc < 0)
		return rc;
	if (client->status == OCI_HTTP_UNAUTHORIZED) {
		snprintf(err, errlen, "registry %s refused the credentials for %s (HTTP 401); check --username / VOIDBOX_REGISTRY_AUTH",
			 client->ref->registry, client->ref->repository);
		return -EACCES;
	}
	if (client->status == OCI_HTTP_NOT_FOUND) {
		snprintf(err, errlen, "registry %s has no %s %s in %s", client->ref->registry,
			 kind, name, client->ref->repository);
		return -ENOENT;
	}
	if (client->status != OCI_HTTP_OK) {
		snprintf(err, errlen, "registry %s answered HTTP %ld for %s: %.160s",
			 client->ref->registry, client->status, name, sink->error_body);
		return -EIO;
	}
	return 0;
}

/* Fetches a manifest into the blob cache and parses it; name is a tag or a digest. */
static int oci_fetch_manifest(struct oci_client *client, const char *name, const char *digest,
			      struct oci_manifest *manifest, char *digest_out, char *err,
			      size_t errlen)
{
	struct oci_sink sink = { .kind = OCI_SINK_MEMORY, .max = OCI_MANIFEST_BYTES_MAX };
	struct oci_blob_writer *writer = NULL;
	int rc;

	sink.buf = malloc(sink.max);
	if (!sink.buf) {
		snprintf(err, errlen, "out of memory fetching a manifest");
		return -ENOMEM;
	}
	rc = oci_request(client, "manifests", name, OCI_ACCEPT_MANIFESTS, &sink, err, errlen);
	if (rc < 0)
		goto out;
	if (sink.overflow) {
		rc = -EMSGSIZE;
		snprintf(err, errlen, "registry %s sent a manifest larger than %u bytes for %s",
			 client->ref->registry, OCI_MANIFEST_BYTES_MAX, name);
		goto out;
	}
	rc = oci_digest_of(sink.buf, sink.len, digest_out);
	if (rc < 0) {
		snprintf(err, errlen, "cannot hash the manifest for %s", name);
		goto out;
	}
	/* the cache keeps the manifest too; the writer refuses bytes that are not digest's */
	rc = oci_blob_writer_open(client->options->oci_dir, digest ? digest : digest_out, &writer,
				  err, errlen);
	if (rc == 0)
		rc = oci_blob_writer_write(writer, sink.buf, sink.len);
	if (rc == 0) {
		rc = oci_blob_writer_commit(writer, err, errlen);
		writer = NULL;
	}
	if (rc < 0)
		goto out;
	rc = oci_manifest_parse(sink.buf, sink.len, client->content_type, manifest, err, errlen);
out:
	oci_blob_writer_abort(writer);
	free(sink.buf);
	return rc;
}

static void oci_progress_line(struct oci_client *client, const char *fmt, const char *label,
			      unsigned long long size)
{
	FILE *out = client->options->progress_stream ? client->options->progress_stream : stderr;

	if (client->options->progress == OCI_PROGRESS_NONE)
		return;
	fprintf(out, fmt, label, (double)size / OCI_BYTES_PER_MIB);
	fflush(out);
}

/* Fetches desc into the cache unless it is there and still matches. */
static int oci_fetch_blob(struct oci_client *client, const struct oci_descriptor *desc,
			  unsigned long long *downloaded, char *err, size_t errlen)
{
	struct oci_sink sink = { .kind = OCI_SINK_BLOB, .expected = desc->size };
	char path[PATH_MAX], label[OCI_DIGEST_SHORT + 1];
	int rc;

	rc = oci_blob_path(client->options->oci_dir, desc->digest, path, sizeof(path));
	if (rc < 0) {
		snprintf(err, errlen, "no cache path for blob %s", desc->digest);
		return rc;
	}
	oci_short_digest(desc->digest, label, sizeof(label));
	if (access(path, F_OK) == 0 && oci_blob_verify_file(path, desc->digest, err, errlen) == 0) {
		oci_progress_line(client, "%s: cached (%.1f MiB)\n", label, desc->size);
		return 0;
	}
	/*
	 * A cached blob that no longer matches is fetched again and replaced by the commit's
	 * rename, never unlinked first: a pull of the same image running alongside may have
	 * published the blob since this one looked, and needs it to stay.
	 */
	rc = oci_blob_writer_open(client->options->oci_dir, desc->digest, &sink.writer, err, errlen);
	if (rc < 0)
		return rc;
	if (client->options->progress == OCI_PROGRESS_LINES)
		oci_progress_line(client, "%s: downloading %.1f MiB\n", label, desc->size);
	client->progress_label = label;
	client->progress_total = desc->size;
	client->progress_shown = -1;
	rc = oci_request(client, "blobs", desc->digest, NULL, &sink, err, errlen);
	client->progress_label = NULL;
	if (client->options->progress == OCI_PROGRESS_BAR)
		fputc('\n', client->options->progress_stream ? client->options->progress_stream :
							       stderr);
	if (rc == 0 && sink.write_rc < 0) {
		rc = sink.write_rc;
		snprintf(err, errlen, "cannot write blob %s into the image cache %s: %s%s; nothing "
			 "was cached", desc->digest, client->options->oci_dir, strerror(-rc),
			 rc == -ENOSPC || rc == -EDQUOT ?
				 ": free space there (voidbox image prune drops unused blobs), or set "
				 "VOIDBOX_HOME to a file system with room" : "");
	} else if (rc == 0 && (sink.overflow || sink.received != desc->size)) {
		rc = -EBADMSG;
		snprintf(err, errlen, "registry %s sent %s%llu bytes for blob %s, whose manifest says %llu; nothing was cached",
			 client->ref->registry, sink.overflow ? "more than " : "", sink.received,
			 desc->digest, (unsigned long long)desc->size);
	}
	if (rc < 0) {
		oci_blob_writer_abort(sink.writer);
		return rc;
	}
	rc = oci_blob_writer_commit(sink.writer, err, errlen);
	if (rc == 0) {
		*downloaded += desc->size;
		if (client->options->progress == OCI_PROGRESS_LINES)
			oci_progress_line(client, "%s: done (%.1f MiB)\n", label, desc->size);
	}
	return rc;
}

static int oci_client_init(struct oci_client *client, const struct oci_ref *ref,
			   const struct oci_pull_options *options, char *err, size_t errlen)
{
	int rc;

	memset(client, 0, sizeof(*client));
	client->ref = ref;
	client->options = options;
	client->scheme = oci_registry_scheme(ref->registry, options->insecure);
	rc = curl_dl_load(OCI_PULL_PURPOSE, err, errlen);
	if (rc < 0)
		return rc;
	client->curl = curl_dl.easy_init();
	if (!client->curl) {
		snprintf(err, errlen, "cannot start libcurl");
		return -ENOMEM;
	}
	curl_dl.easy_setopt(client->curl, CURLOPT_PROTOCOLS_STR, OCI_PROTOCOLS);
	curl_dl.easy_setopt(client->curl, CURLOPT_REDIR_PROTOCOLS_STR, OCI_PROTOCOLS);
	curl_dl.easy_setopt(client->curl, CURLOPT_FOLLOWLOCATION, 1L);
	curl_dl.easy_setopt(client->curl, CURLOPT_MAXREDIRS, OCI_MAX_REDIRECTS);
	curl_dl.easy_setopt(client->curl, CURLOPT_CONNECTTIMEOUT, OCI_CONNECT_TIMEOUT_S);
	curl_dl.easy_setopt(client->curl, CURLOPT_LOW_SPEED_LIMIT, OCI_LOW_SPEED_LIMIT);
	curl_dl.easy_setopt(client->curl, CURLOPT_LOW_SPEED_TIME, OCI_LOW_SPEED_TIME_S);
	curl_dl.easy_setopt(client->curl, CURLOPT_USERAGENT, OCI_USER_AGENT);
	curl_dl.easy_setopt(client->curl, CURLOPT_NOSIGNAL, 1L);
	curl_dl.easy_setopt(client->curl, CURLOPT_WRITEFUNCTION, oci_on_body);
	curl_dl.easy_setopt(client->curl, CURLOPT_WRITEDATA, client);
	curl_dl.easy_setopt(client->curl, CURLOPT_HEADERFUNCTION, oci_on_header);
	curl_dl.easy_setopt(client->curl, CURLOPT_HEADERDATA, client);
	curl_dl.easy_setopt(client->curl, CURLOPT_XFERINFOFUNCTION, oci_on_progress);
	curl_dl.easy_setopt(client->curl, CURLOPT_XFERINFODATA, client);
	curl_dl.easy_setopt(client->curl, CURLOPT_NOPROGRESS, 0L);
	/* no proxy from the environment: a pull talks to the registry it names */
	curl_dl.easy_setopt(client->curl, CURLOPT_NOPROXY, "*");
	return 0;
}

int oci_pull(const struct oci_ref *ref, const struct oci_pull_options *options,
	     struct oci_pull_result *out, char *err, size_t errlen)
{
	struct oci_client client;
	struct oci_manifest *top = calloc(1, sizeof(*top));
	int rc;

	memset(out, 0, sizeof(*out));
	if (!top) {
		snprintf(err, errlen, "out of memory pulling %s", ref->repository);
		return -ENOMEM;
	}
	rc = oci_client_init(&client, ref, options, err, errlen);
	if (rc < 0)
		goto out;
	rc = oci_fetch_manifest(&client, ref->digest[0] ? ref->digest : ref->tag,
				ref->digest[0] ? ref->digest : NULL, top, out->manifest_digest,
				err, errlen);
	if (rc < 0)
		goto out;
	if (top->kind == OCI_MANIFEST_INDEX) {
		char index_digest[OCI_DIGEST_LEN + 1];

		memcpy(index_digest, out->manifest_digest, sizeof(index_digest));
		rc = oci_fetch_manifest(&client, top->platform.digest, top->platform.digest,
					&out->manifest, out->manifest_digest, err, errlen);
		if (rc == 0 && out->manifest.kind != OCI_MANIFEST_IMAGE) {
			rc = -EINVAL;
			snprintf(err, errlen, "the linux/amd64 entry of index %s is another index",
				 index_digest);
		}
		if (rc < 0)
			goto out;
	} else {
		out->manifest = *top;
	}
	if (out->manifest.config.size > OCI_CONFIG_BYTES_MAX) {
		rc = -EMSGSIZE;
		snprintf(err, errlen, "the image config %s claims %llu bytes; voidbox takes up to %u",
			 out->manifest.config.digest, (unsigned long long)out->manifest.config.size,
			 OCI_CONFIG_BYTES_MAX);
		goto out;
	}
	rc = oci_fetch_blob(&client, &out->manifest.config, &out->downloaded_bytes, err, errlen);
	for (size_t i = 0; rc == 0 && i < out->manifest.layer_count; i++) {
		/* a cached layer takes no request, so no progress callback would see the cancel */
		rc = oci_pull_check_cancel(options, err, errlen);
		if (rc == 0)
			rc = oci_fetch_blob(&client, &out->manifest.layers[i],
					    &out->downloaded_bytes, err, errlen);
	}
out:
	if (client.curl)
		curl_dl.easy_cleanup(client.curl);
	free(top);
	return rc;
}
