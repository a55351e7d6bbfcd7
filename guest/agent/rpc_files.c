/*
 * One small function per RPC (the file RPCs and SetPolicy), each: decode, operate, encode,
 * send, free. Operation failures are answered with success=false, the guard's message and the
 * code of its errno (the host acts on the code); only undecodable bodies are protocol errors.
 */
#include "rpc_files.h"

#include "agent_log.h"
#include "files.h"
#include "restore.h"
#include "proto/protocol.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rpc_send_status(struct agent_conn *conn, uint8_t type, uint32_t request_id,
		     const char *error, int err)
{
	struct proto_status_response response = {
		.success = !error,
		.error = (char *)error,
		.code = error ? proto_error_code_from_errno(err ? err : -EIO) : PROTO_ERROR_NONE,
	};
	uint8_t *body;
	size_t len;

	if (proto_status_response_encode(&response, &body, &len) != 0)
		return;
	conn_send(conn, type, request_id, body, len);
	free(body);
}

static int rpc_write_file(struct agent_conn *conn, uint32_t request_id, const uint8_t *body,
			  size_t len)
{
	struct proto_write_file request = { 0 };
	const char *why = NULL;
	char *error = NULL;
	int err;

	if (proto_write_file_decode(body, len, &request, &why) != 0) {
		agent_warn("WriteFile %u malformed: %s", request_id, why ? why : "?");
		return -EPROTO;
	}
	if (restore_is_rekey_path(request.path)) {
		err = restore_apply(request.content.data, request.content.len, conn->ctx->is_pid1,
				    &error);

		/*
		 * every other old connection is gone before the host hears of the switch, and
		 * the new session may set its policy once
		 */
		if (err == 0) {
			restore_retire_stale_connections(conn->fd);
			policy_store_reopen(conn->ctx->policy);
		}
		rpc_send_status(conn, PROTO_MSG_WRITE_FILE_RESPONSE, request_id, error, err);
		free(error);
		proto_write_file_free(&request);
		return 0;
	}
	err = files_write(&conn->ctx->roots, request.path, request.content.data,
			  request.content.len, request.create_parents, &error);
	if (err != 0 && !error)
		error = strdup("WriteFile failed");
	if (error)
		agent_info("WriteFile %u: %s", request_id, error);
	rpc_send_status(conn, PROTO_MSG_WRITE_FILE_RESPONSE, request_id, error, err);
	free(error);
	proto_write_file_free(&request);
	return 0;
}

/* Decodes a path request, logging a malformed one: 0 or -EPROTO (the connection ends). */
static int rpc_decode_path(const char *rpc, uint32_t request_id, const uint8_t *body, size_t len,
			   struct proto_path_request *request)
{
	const char *why = NULL;

	if (proto_path_request_decode(body, len, request, &why) == 0)
		return 0;
	agent_warn("%s %u malformed: %s", rpc, request_id, why ? why : "?");
	return -EPROTO;
}

static int rpc_mkdir_p(struct agent_conn *conn, uint32_t request_id, const uint8_t *body,
		       size_t len)
{
	struct proto_path_request request = { 0 };
	char *error = NULL;
	int err;

	if (rpc_decode_path("MkdirP", request_id, body, len, &request) < 0)
		return -EPROTO;
	err = files_mkdir_p(&conn->ctx->roots, request.path, &error);
	if (err != 0 && !error)
		error = strdup("MkdirP failed");
	rpc_send_status(conn, PROTO_MSG_MKDIR_P_RESPONSE, request_id, error, err);
	free(error);
	proto_path_request_free(&request);
	return 0;
}

static int rpc_read_file(struct agent_conn *conn, uint32_t request_id, const uint8_t *body,
			 size_t len)
{
	struct proto_read_file_response response = { 0 };
	struct proto_path_request request = { 0 };
	uint8_t *out;
	size_t out_len;
	int err;

	if (rpc_decode_path("ReadFile", request_id, body, len, &request) < 0)
		return -EPROTO;
	err = files_read(&conn->ctx->roots, request.path, &response.content.data,
			 &response.content.len, &response.error);
	if (err != 0 && !response.error)
		response.error = strdup("ReadFile failed");
	response.success = !response.error;
	if (response.error)
		response.code = proto_error_code_from_errno(err ? err : -EIO);
	if (proto_read_file_response_encode(&response, &out, &out_len) == 0) {
		conn_send(conn, PROTO_MSG_READ_FILE_RESPONSE, request_id, out, out_len);
		free(out);
	}
	proto_read_file_response_free(&response);
	proto_path_request_free(&request);
	return 0;
}

static int rpc_file_stat(struct agent_conn *conn, uint32_t request_id, const uint8_t *body,
			 size_t len)
{
	struct proto_file_stat_response response = { 0 };
	struct proto_path_request request = { 0 };
	uint8_t *out;
	size_t out_len;
	int err;

	if (rpc_decode_path("FileStat", request_id, body, len, &request) < 0)
		return -EPROTO;
	err = files_stat(&conn->ctx->roots, request.path, &response.exists, &response.size,
			 &response.error);
	if (response.error)
		response.code = proto_error_code_from_errno(err ? err : -EIO);
	response.has_size = response.exists;
	if (proto_file_stat_response_encode(&response, &out, &out_len) == 0) {
		conn_send(conn, PROTO_MSG_FILE_STAT_RESPONSE, request_id, out, out_len);
		free(out);
	}
	proto_file_stat_response_free(&response);
	proto_path_request_free(&request);
	return 0;
}

int rpc_policy_handle(struct agent_conn *conn, uint32_t request_id, const uint8_t *body,
		      size_t len)
{
	struct proto_set_policy request = { 0 };
	struct policy_allowlist list;
	struct policy_limits limits;
	const char *why = NULL;
	char *error = NULL;
	int err;

	if (proto_set_policy_decode(body, len, &request, &why) != 0) {
		agent_warn("SetPolicy %u malformed: %s", request_id, why ? why : "?");
		return -EPROTO;
	}
	limits = (struct policy_limits){ .max_open_files = request.max_open_files,
					 .max_processes = request.max_processes,
					 .max_file_size = request.max_file_size };
	err = policy_allowlist_build(&list, request.allow_all_commands, request.commands,
				     request.commands_count, &why);
	if (!err)
		err = policy_store_set(conn->ctx->policy, &list, &limits, &why);
	if (err && asprintf(&error, "Refusing SetPolicy: %s", err == -ENOMEM ?
			    "out of memory" : why) < 0)
		error = NULL;
	if (err)
		agent_warn("SetPolicy %u: %s", request_id, error ? error : "refused");
	rpc_send_status(conn, PROTO_MSG_SET_POLICY_RESPONSE, request_id,
			err && !error ? "Refusing SetPolicy" : error, err);
	free(error);
	proto_set_policy_free(&request);
	return 0;
}

int rpc_files_handle(struct agent_conn *conn, uint8_t type, uint32_t request_id,
		     const uint8_t *body, size_t len)
{
	switch (type) {
	case PROTO_MSG_WRITE_FILE:
		return rpc_write_file(conn, request_id, body, len);
	case PROTO_MSG_MKDIR_P:
		return rpc_mkdir_p(conn, request_id, body, len);
	case PROTO_MSG_READ_FILE:
		return rpc_read_file(conn, request_id, body, len);
	case PROTO_MSG_FILE_STAT:
		return rpc_file_stat(conn, request_id, body, len);
	default:
		return -EINVAL;
	}
}
