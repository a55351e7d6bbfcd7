#!/usr/bin/env python3
"""`voidbox image pull|list|rm|prune` against real registries on loopback (oci_registry_fixture.py).

An image with two layers (the second deletes a file and replaces a directory with a file) is
pulled anonymously, through an index whose first entry is another platform, with basic auth
(credentials from VOIDBOX_REGISTRY_AUTH; refused without them and with a wrong password) and
behind a Bearer token endpoint (--username/--password-stdin; refused anonymously). A spec's
sandbox.image on either private registry fails, before any VM, saying to pull it with
--username first. The root
filesystem is read back with debugfs. A blob altered in the registry is refused with a digest
error and leaves nothing behind: no blob, no temporary file, no rootfs, no reference. list
shows every reference; rm keeps a rootfs another reference still names and removes the last,
and leaves the blobs; prune deletes the blobs no remaining reference needs (an index, a refused
image's manifest and config) and the temporary file of a pull that no longer runs (not a
running one's), then, with no reference left, every blob.

usage: test_oci_pull.py PATH-TO-VOIDBOX
"""

import json
import os
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oci_registry_fixture as fx  # noqa: E402

check = fx.Checks()


def main():
    with fx.session("voidbox-oci-pull-") as (fixture, work):
        run_checks(os.path.abspath(sys.argv[1]), fixture, work)
    return check.finish()


def run_checks(voidbox, fixture, work):
    home = os.path.join(work, "home")
    oci = os.path.join(home, "oci")
    env = dict(os.environ, VOIDBOX_HOME=home)
    env.pop("VOIDBOX_REGISTRY_AUTH", None)

    def voidbox_run(*args, extra_env=None, stdin=None):
        return subprocess.run([voidbox] + list(args), env=dict(env, **(extra_env or {})),
                              input=stdin, capture_output=True, text=True)

    def debugfs(rootfs, request):
        r = subprocess.run(["debugfs", "-R", request, rootfs], capture_output=True, text=True)
        return r.stdout + r.stderr

    anon_ref = fixture.anon.address + "/" + fx.REPO + ":" + fx.TAG
    r = voidbox_run("image", "pull", anon_ref)
    check(r.returncode == 0, "anonymous pull", r.stderr)
    fields = r.stdout.split()
    check(len(fields) == 4 and fields[1] == fixture.manifest_digest,
          "the pull reports the manifest digest", r.stdout)
    check("done" in r.stderr, "progress lines on a non-terminal stderr", r.stderr)
    rootfs = fields[3] if len(fields) == 4 else ""
    check(rootfs == os.path.join(oci, "images", fixture.manifest_digest[7:], "rootfs.ext4"),
          "the rootfs is kept by manifest digest", rootfs)
    check("voidbox OCI test image" in debugfs(rootfs, "cat /etc/os-release"),
          "the rootfs holds layer one's /etc/os-release")
    check("File not found" in debugfs(rootfs, "stat /etc/deleted-file") and
          "File not found" not in debugfs(rootfs, "stat /etc/os-release"),
          "layer two's whiteout deleted /etc/deleted-file")
    check("Type: regular" in debugfs(rootfs, "stat /opt/replaced"),
          "layer two replaced the directory /opt/replaced with a file")

    r = voidbox_run("image", "pull", fixture.anon.address + "/" + fx.REPO + ":multi")
    check(r.returncode == 0 and fixture.manifest_digest in r.stdout,
          "an index resolves to its linux/amd64 entry (not the first)", r.stdout + r.stderr)

    basic_ref = fixture.basic.address + "/" + fx.REPO + ":" + fx.TAG
    r = voidbox_run("image", "pull", basic_ref)
    check(r.returncode != 0 and "needs a user name and password" in r.stderr,
          "basic auth without credentials is refused, saying what to pass", r.stderr)
    check_spec_says_pull_first(voidbox_run, work, basic_ref, "basic auth")
    r = voidbox_run("image", "pull", basic_ref,
                    extra_env={"VOIDBOX_REGISTRY_AUTH": fx.USER + ":wrong"})
    check(r.returncode != 0 and "refused the credentials" in r.stderr,
          "basic auth with a wrong password is refused", r.stderr)
    r = voidbox_run("image", "pull", basic_ref,
                    extra_env={"VOIDBOX_REGISTRY_AUTH": fx.USER + ":" + fx.PASSWORD})
    check(r.returncode == 0 and fixture.manifest_digest in r.stdout,
          "basic auth with VOIDBOX_REGISTRY_AUTH pulls", r.stderr)

    token_ref = fixture.token_address + "/" + fx.REPO + ":" + fx.TAG
    r = voidbox_run("image", "pull", token_ref)
    check(r.returncode != 0 and "token endpoint" in r.stderr,
          "the token endpoint refuses an anonymous pull", r.stderr)
    check_spec_says_pull_first(voidbox_run, work, token_ref, "a token endpoint")
    r = voidbox_run("image", "pull", "--username", fx.USER, "--password-stdin", token_ref,
                    stdin=fx.PASSWORD + "\n")
    check(r.returncode == 0 and fixture.manifest_digest in r.stdout,
          "a Bearer challenge is answered with a token and the pull succeeds", r.stderr)

    images_before = sorted(os.listdir(os.path.join(oci, "images")))
    r = voidbox_run("image", "pull", fixture.anon.address + "/" + fx.TAMPERED_REPO + ":" + fx.TAG)
    check(r.returncode != 0 and "digest mismatch" in r.stderr and
          fixture.tampered_layer in r.stderr,
          "a tampered blob is refused with a digest error naming it", r.stderr)
    blob_dir = os.path.join(oci, "blobs", "sha256")

    def cached_blobs():
        return [b for b in os.listdir(blob_dir) if not b.startswith(".")]

    blobs = os.listdir(blob_dir)
    check(fixture.tampered_layer[7:] not in blobs, "the tampered blob is not cached")
    check(not [b for b in blobs if b.startswith(".tmp")], "no temporary file is left", blobs)
    check(sorted(os.listdir(os.path.join(oci, "images"))) == images_before,
          "no rootfs is made from a tampered image")
    check(not os.listdir(os.path.join(oci, "tmp")), "no scratch tree is left")

    r = voidbox_run("image", "list")
    check(r.returncode == 0 and anon_ref in r.stdout and basic_ref in r.stdout and
          token_ref in r.stdout and fx.TAMPERED_REPO not in r.stdout,
          "image list shows the pulled references and not the refused one", r.stdout)
    r = voidbox_run("--output", "json", "image", "list")
    try:
        listed = json.loads(r.stdout)
    except ValueError:
        listed = []
    check(len([e for e in listed if e.get("manifest") == fixture.manifest_digest]) == 4,
          "image list --output json holds the four references", r.stdout + r.stderr)

    for ref in (anon_ref, basic_ref, token_ref):
        r = voidbox_run("image", "rm", ref)
        check(r.returncode == 0, "image rm " + ref, r.stderr)
    check_prune_keeps_needed(voidbox_run, oci, fixture)
    check(os.path.exists(rootfs), "the rootfs stays while a reference names it")
    r = voidbox_run("image", "rm", fixture.anon.address + "/" + fx.REPO + ":multi")
    check(r.returncode == 0 and not os.path.exists(rootfs),
          "removing the last reference removes the rootfs", r.stderr)
    check(os.path.exists(os.path.join(blob_dir, fixture.manifest_digest[7:])),
          "image rm leaves the blobs in the cache")
    r = voidbox_run("image", "prune")
    check(r.returncode == 0 and not cached_blobs(),
          "image prune with no pulled image left empties the blob cache",
          r.stdout + r.stderr + " ".join(cached_blobs()))
    r = voidbox_run("image", "rm", anon_ref)
    check(r.returncode != 0 and "no pulled image" in r.stderr,
          "removing an image that is not pulled fails", r.stderr)


def run_spec_on_image(voidbox_run, work, ref):
    """voidbox run of a workflow on sandbox.image ref; it fails at the pull, before any VM."""
    spec = os.path.join(work, "private-image.yaml")
    with open(spec, "w") as f:
        f.write("api_version: v1\nkind: workflow\nname: private-image\n"
                "sandbox:\n  mode: local\n  image: %s\n"
                "workflow:\n  steps:\n    - name: one\n      run:\n        program: \"true\"\n"
                % ref)
    # stand-in kernel and initramfs files: the image is resolved before they are read
    stand_in = os.path.join(work, "stand-in-boot-file")
    open(stand_in, "w").close()
    return voidbox_run("run", "--file", spec,
                       extra_env={"VOID_BOX_KERNEL": stand_in, "VOID_BOX_INITRAMFS": stand_in})


def check_spec_says_pull_first(voidbox_run, work, ref, kind):
    r = run_spec_on_image(voidbox_run, work, ref)
    out = r.stdout + r.stderr
    check(r.returncode != 0 and "wants credentials" in out and
          "voidbox image pull --username USER --password-stdin " + ref in out,
          "sandbox.image on a registry with %s says to pull with --username first" % kind, out)


def check_prune_keeps_needed(voidbox_run, oci, fixture):
    """With one reference left, prune keeps its manifest, config and layers, and nothing else."""
    blob_dir = os.path.join(oci, "blobs", "sha256")
    with open(os.path.join(blob_dir, fixture.manifest_digest[7:])) as f:
        manifest = json.load(f)
    needed = {fixture.manifest_digest[7:], manifest["config"]["digest"][7:]}
    needed |= {layer["digest"][7:] for layer in manifest["layers"]}
    before = set(os.listdir(blob_dir))
    live_name = ".tmp-%d-live" % os.getpid()  # this script runs: a pull still writing
    stray = os.path.join(blob_dir, live_name)
    open(stray, "w").close()
    ended = subprocess.Popen(["true"])  # a pid that has ended: a pull that was killed
    ended.wait()
    gone_path = os.path.join(blob_dir, ".tmp-%d-gone" % ended.pid)
    open(gone_path, "w").close()
    r = voidbox_run("image", "prune")
    after = set(os.listdir(blob_dir)) - {live_name}
    check(r.returncode == 0 and after == needed and before - needed and
          "removed %d blob" % len(before - needed) in r.stdout,
          "image prune deletes the blobs (an index, a refused image's) no pulled image needs",
          "%s: before %s after %s needed %s" % (r.stdout + r.stderr, sorted(before),
                                                sorted(after), sorted(needed)))
    check(os.path.exists(stray), "image prune leaves a running pull's temporary file alone")
    check(not os.path.exists(gone_path), "image prune removes a killed pull's temporary file")
    os.unlink(stray)
    r = voidbox_run("image", "list")
    check(fixture.manifest_digest[:19] in r.stdout, "the remaining image is still listed", r.stdout)


if __name__ == "__main__":
    sys.exit(main())
