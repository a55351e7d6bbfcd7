/*
 * The one place that pins the agent CLIs the flavoured guest images carry: which npm package,
 * which version, where its tarball is, the registry's `dist.integrity` (sha512, base64) the
 * downloaded tarball must match, and which file in it becomes which guest program.
 *
 * To move a flavour to a newer release, take every value from the registry itself:
 *   npm view @anthropic-ai/claude-code-linux-x64@VERSION dist.tarball dist.integrity
 *   npm view @openai/codex@VERSION-linux-x64 dist.tarball dist.integrity
 * and check the member paths with `tar tzf`. A tarball that does not hash to its pin is
 * refused before anything in it is unpacked.
 *
 * claude-code ships a native (Bun-compiled) binary per platform; the glibc build is taken and
 * its libraries come from the host's Debian glibc (the musl build would need a musl loader the
 * image does not otherwise have). codex ships static-pie musl binaries (codex, the code-mode
 * host it runs for its default model's JavaScript tool, ripgrep), which need nothing else.
 */
#ifndef VOIDBOX_STORE_AGENT_PINS_H
#define VOIDBOX_STORE_AGENT_PINS_H

#define AGENT_PIN_CLAUDE_PACKAGE "@anthropic-ai/claude-code-linux-x64"
#define AGENT_PIN_CLAUDE_VERSION "2.1.332"
#define AGENT_PIN_CLAUDE_TARBALL \
	"https://registry.npmjs.org/@anthropic-ai/claude-code-linux-x64/-/claude-code-linux-x64-2.1.332.tgz"
#define AGENT_PIN_CLAUDE_INTEGRITY \
	"sha512-f4JWhzwYutJIHScC7/dYOPX6s28tt7ZADhsOi8zwOHq5fFPEuUeChh2NMfinSg0GrUckYxaeebC4h0DqiKzLcw=="
#define AGENT_PIN_CLAUDE_MEMBER "package/claude"

#define AGENT_PIN_CODEX_PACKAGE "@openai/codex"
#define AGENT_PIN_CODEX_VERSION "0.169.0-linux-x64"
#define AGENT_PIN_CODEX_TARBALL \
	"https://registry.npmjs.org/@openai/codex/-/codex-0.169.0-linux-x64.tgz"
#define AGENT_PIN_CODEX_INTEGRITY \
	"sha512-o05NyAOCDygSPRo1yinzxvkRSdmsZyBD9E7mbpmjRanSfM8lypqWtQgEo4XfNkwhuCR2aFu8mlGOsQGFXVbVww=="
#define AGENT_PIN_CODEX_MEMBER "package/vendor/x86_64-unknown-linux-musl/bin/codex"
#define AGENT_PIN_CODEX_HOST_MEMBER "package/vendor/x86_64-unknown-linux-musl/bin/codex-code-mode-host"
#define AGENT_PIN_CODEX_RG_MEMBER "package/vendor/x86_64-unknown-linux-musl/codex-path/rg"

#endif
