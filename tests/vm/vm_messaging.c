/*
 * Messaging between agents in real VMs: a two-stage pipeline (two boots, the fewest two agents
 * need) whose boxes both have messaging enabled. The mock claude-code plays each model and,
 * through MOCK_CLAUDE_BASH, acts in its guest: the scout sends an intent with void-message
 * (over the user-mode network to the sidecar at 10.0.2.2) and reads its context; the reader,
 * in the next stage's VM, reads its inbox with void-message and again through void-mcp over
 * stdio. The reader's result text must hold the scout's message both ways, which proves the
 * whole path: VOID_SIDECAR_URL, the egress policy, the sidecar, the iteration advancing
 * between stages, the tools in the image and .mcp.json. The scout also sends its own URL;
 * the reader's guest must be refused the scout's listener (each VM is granted only its own
 * member's port) and still reach its own.
 *
 * The run happens in this process (pipeline_run), so the sidecar does too; its loopback
 * listeners need lo up, which L1 of the nested harness starts without. The test image is
 * the built one plus the mock agent, void-message and void-mcp (vm_test_initramfs_with).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/pipeline.h"
#include "vm_test.h"

#define TEST_SPEC_MAX 8192
#define TEST_SUMMARY "the door is blue"

static struct guest_image_paths image;
static char test_initramfs[] = "/tmp/voidbox-messaging-initramfs-XXXXXX";

/* kernel, initramfs */
static const char spec_format[] =
	"api_version: v1\n"
	"kind: pipeline\n"
	"name: vm-messaging\n"
	"sandbox:\n"
	"  mode: local\n"
	"  kernel: %s\n"
	"  initramfs: %s\n"
	"  memory_mb: 256\n"
	"  vcpus: 1\n"
	"  network: true\n"
	"  network_allow: [\"203.0.113.0/24\"]\n"
	"pipeline:\n"
	"  boxes:\n"
	"    - name: scout\n"
	"      prompt: Scout the door\n"
	"      messaging: {enabled: true}\n"
	"      sandbox:\n"
	"        env:\n"
	"          MOCK_CLAUDE_BASH: \"{ void-message send --kind signal --audience broadcast"
	" --summary '" TEST_SUMMARY "' && void-message send --kind signal --audience broadcast"
	" --summary url=$VOID_SIDECAR_URL && void-message context; } 2>&1\"\n"
	"    - name: reader\n"
	"      prompt: Read the inbox\n"
	"      messaging: {enabled: true}\n"
	"      sandbox:\n"
	"        env:\n"
	"          MOCK_CLAUDE_BASH: |\n"
	"            { void-message inbox && printf '%%s\\n'"
	" '{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"vm\",\"version\":\"1\"}}}'"
	" '{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}'"
	" '{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"read_peer_messages\",\"arguments\":{}}}'"
	" | void-mcp; } 2>&1\n"
	"            scout=$(void-message inbox | grep -o 'url=http://[0-9.:]*' | head -n 1 | cut -c 5-)\n"
	"            echo \"scout-url:$scout\"\n"
	"            wget -q -O /dev/null \"$scout/v1/health\" 2>&1 && echo SCOUT-REACHED || echo SCOUT-REFUSED\n"
	"            wget -q -O - \"$VOID_SIDECAR_URL/v1/health\" 2>&1\n"
	"  stages:\n"
	"    - {type: box, name: scout}\n"
	"    - {type: box, name: reader}\n";

static size_t count_of(const char *text, const char *needle)
{
	size_t n = 0;

	for (const char *at = text; at && (at = strstr(at, needle)); at += strlen(needle))
		n++;
	return n;
}

static void test_intent_reaches_next_agent(void)
{
	char spec_text[TEST_SPEC_MAX];
	struct spec_diagnostics diag;
	struct run_report report;
	const char *scout, *reader;
	struct spec *spec;

	snprintf(spec_text, sizeof(spec_text), spec_format, image.kernel, test_initramfs);
	spec_diagnostics_init(&diag);
	spec = spec_parse_buffer(spec_text, strlen(spec_text), "vm-messaging.yaml", NULL, &diag);
	if (!spec)
		spec_diagnostics_print(&diag, stderr);
	spec_diagnostics_free(&diag);
	CHECK(spec != NULL);
	if (!spec)
		return;
	CHECK_INT_EQ(run_report_init(&report, spec->name, spec->kind), 0);
	CHECK_INT_EQ(pipeline_run(spec, NULL, &report), 0);
	if (!report.success)
		fprintf(stderr, "  error: %s\n", report.error ? report.error : "(none)");
	CHECK_INT_EQ((long)report.stage_count, 2);
	if (report.stage_count != 2)
		goto out;
	scout = report.stages[0].output ? report.stages[0].output : "";
	reader = report.stages[1].output ? report.stages[1].output : "";
	printf("  scout: %s\n  reader: %s\n", scout, reader);
	/* the scout's intent was stamped, and its context names its peer */
	CHECK(strstr(scout, "bash (exit 0)") != NULL);
	CHECK(strstr(scout, "\"from_candidate_id\":\"scout\"") != NULL);
	CHECK(strstr(scout, "\"peers\":[\"reader\"]") != NULL);
	/* .mcp.json reached both guests (the mock reports the servers it finds) */
	CHECK(strstr(scout, "mcp: void") != NULL && strstr(reader, "mcp: void") != NULL);
	/* the reader saw it twice: void-message inbox, then void-mcp's read_peer_messages */
	CHECK(strstr(reader, "bash (exit 0)") != NULL);
	CHECK_INT_EQ((long)count_of(reader, TEST_SUMMARY), 2);
	CHECK(strstr(reader, "\"candidate_id\":\"reader\"") != NULL);
	CHECK(strstr(reader, "\"serverInfo\":{\"name\":\"void-mcp\"") != NULL);
	/*
	 * the scout's listener, whose URL the scout sent, is its own guest's alone: the reader's
	 * guest is refused it (it would speak as the scout), and reaches its own
	 */
	CHECK(strstr(reader, "scout-url:http://10.0.2.2:") != NULL);
	CHECK(strstr(reader, "SCOUT-REFUSED") != NULL);
	CHECK(strstr(reader, "Connection refused") != NULL); /* a reset, not a timeout */
	CHECK(strstr(reader, "SCOUT-REACHED") == NULL);
	CHECK(strstr(reader, "\"status\":\"ok\"") != NULL);
out:
	run_report_free(&report);
	spec_free(spec);
}

int main(int argc, char **argv)
{
	struct vm_test_bin bins[3];
	int rc;

	if (argc < 4) {
		fprintf(stderr, "usage: %s MOCK-CLAUDE VOID-MESSAGE VOID-MCP\n", argv[0]);
		return 2;
	}
	vm_test_require_vm(&image);
	rc = vm_test_loopback_up();
	if (rc < 0) {
		fprintf(stderr, "FAIL: cannot bring the loopback interface up: %s\n", strerror(-rc));
		return 1;
	}
	bins[0] = (struct vm_test_bin){ "claude-code", argv[1] };
	bins[1] = (struct vm_test_bin){ "void-message", argv[2] };
	bins[2] = (struct vm_test_bin){ "void-mcp", argv[3] };
	rc = vm_test_initramfs_with(image.initramfs, bins, 3, test_initramfs);
	if (rc < 0) {
		fprintf(stderr, "FAIL: cannot build the test initramfs: %s\n", strerror(-rc));
		return 1;
	}
	RUN_TEST(test_intent_reaches_next_agent);
	unlink(test_initramfs);
	return harness_finish();
}
