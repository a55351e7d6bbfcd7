#!/usr/bin/env python3
"""A VM booted from an image pulled from a registry, through the voidbox command.

The registries of tests/store/oci_registry_fixture.py run on this machine's loopback (inside the
nested L1 when run-vm-suite uses it). `voidbox exec --image REF` finds the image not cached,
pulls it (so --image pulls on demand), and boots one VM from its root filesystem, in which one
command checks many things: /etc/os-release is the image's, the file layer two deleted is gone,
the directory it replaced is a file, the root is the overlay (writes land in memory), and
/workspace and the sandbox user's home work. `fork --image` then boots a parent from the
cached image and restores two children from its snapshot (the snapshot names the read-only
rootfs, which each child reopens), all three reading the image's files. The pulled image is
listed; `snapshot create --image` saves a named snapshot on the image's root (its config hash
differs from a snapshot without the image) and `exec --snapshot ID` restores it there; and a
reference to a tampered image is refused by `exec --image` with a digest error before any VM
boots.

The L1 boots with its loopback interface down: it is brought up first when it is.
The pull goes into a private VOIDBOX_HOME (the shared one is read-only inside L1); the kernel
and initramfs come from the shared home's default image through VOID_BOX_KERNEL and
VOID_BOX_INITRAMFS unless those are set already.

usage: vm_oci.py PATH-TO-VOIDBOX
"""

import json
import os
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "store"))
import oci_registry_fixture as fx  # noqa: E402

OVERLAYFS_MAGIC_HEX = "794c7630"
IFF_UP = 0x1
GUEST_SCRIPT = (
    "cat /etc/os-release; "
    "test ! -e /etc/deleted-file && echo CHECK-deleted-gone; "
    "test -f /opt/replaced && echo CHECK-replaced-is-file; "
    "cat /opt/replaced; "
    "echo CHECK-fs-$(stat -f -c %t /); "
    "echo in-memory > /tmp/probe && cat /tmp/probe; "
    "test -d /workspace && touch $HOME/written && echo CHECK-home-writable"
)

check = fx.Checks()


def guest_image_env():
    """VOID_BOX_KERNEL / VOID_BOX_INITRAMFS from the shared home's default image."""
    if os.environ.get("VOID_BOX_KERNEL") and os.environ.get("VOID_BOX_INITRAMFS"):
        return {}
    home = os.environ.get("VOIDBOX_HOME") or os.path.join(os.environ["HOME"], ".void-box")
    image = os.path.join(home, "images", "default")
    kernel = os.path.join(image, "vmlinuz")
    for name in ("initramfs.cpio", "initramfs.cpio.gz"):
        initramfs = os.path.join(image, name)
        if os.path.exists(kernel) and os.path.exists(initramfs):
            return {"VOID_BOX_KERNEL": kernel, "VOID_BOX_INITRAMFS": initramfs}
    raise SystemExit("no guest image in %s: run `voidbox image build` first" % image)


def loopback_up():
    """The nested L1 boots with lo down; the registries need it (only ever brought up)."""
    with open("/sys/class/net/lo/flags") as f:
        if int(f.read(), 16) & IFF_UP:
            return
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)


def main():
    loopback_up()
    with fx.session("voidbox-vm-oci-") as (fixture, work):
        run_checks(os.path.abspath(sys.argv[1]), fixture, work)
    return check.finish()


def run_checks(voidbox, fixture, work):
    env = dict(os.environ, **guest_image_env())
    env["VOIDBOX_HOME"] = os.path.join(work, "home")
    env.pop("VOIDBOX_REGISTRY_AUTH", None)
    ref = fixture.anon.address + "/" + fx.REPO + ":" + fx.TAG
    serial = os.path.join(work, "serial.log")
    r = subprocess.run([voidbox, "exec", "--serial-log", serial, "--image", ref, "--",
                        "sh", "-c", GUEST_SCRIPT], env=env, capture_output=True, text=True)
    out = r.stdout
    check(r.returncode == 0, "exec --image pulls the image and runs in a VM booted from it",
          "status %d: %s" % (r.returncode, r.stderr[-2000:]))
    if r.returncode != 0 and os.path.exists(serial):
        with open(serial, errors="replace") as f:
            lines = [l for l in f if any(w in l.lower() for w in ("oci", "rootfs", "vda", "ext4", "error", "fail"))]
        sys.stderr.write("".join(lines[-40:]))
    check(": done (" in r.stderr, "the pull's progress lines are shown", r.stderr[-500:])
    check(fx.OS_RELEASE in out, "cat /etc/os-release shows the image's", out)
    check("CHECK-deleted-gone" in out, "the file layer two deleted is gone in the guest", out)
    check("CHECK-replaced-is-file" in out and "a file now" in out,
          "the directory layer two replaced is its file in the guest", out)
    check("CHECK-fs-" + OVERLAYFS_MAGIC_HEX in out, "the guest's root is the overlay", out)
    check("in-memory" in out, "the root takes writes (in guest memory)", out)
    check("CHECK-home-writable" in out, "/workspace and the sandbox user's home work", out)

    r = subprocess.run([voidbox, "image", "list"], env=env, capture_output=True, text=True)
    check(ref in r.stdout, "the image pulled by exec --image is listed", r.stdout)

    # fork: the parent (booted from the cached image) is snapshotted in memory and its
    # children restored from it; each reopens the read-only rootfs the snapshot names
    r = subprocess.run([voidbox, "fork", "--children", "2", "--image", ref, "--", "sh", "-c",
                        "cat /etc/os-release; test ! -e /etc/deleted-file && echo CHECK-gone"],
                       env=env, capture_output=True, text=True)
    check(r.returncode == 0 and r.stdout.count("exit 0") == 3 and
          r.stdout.count("ID=voidboxtest") == 3 and r.stdout.count("CHECK-gone") == 3,
          "fork --image: the parent and two children run on the image's root",
          "status %d: %s %s" % (r.returncode, r.stdout[-1500:], r.stderr[-1500:]))

    check_named_snapshot(voidbox, env, ref)

    tampered = fixture.anon.address + "/" + fx.TAMPERED_REPO + ":" + fx.TAG
    r = subprocess.run([voidbox, "exec", "--image", tampered, "--", "true"], env=env,
                       capture_output=True, text=True)
    check(r.returncode != 0 and "digest mismatch" in r.stderr,
          "exec --image refuses a tampered image before booting", r.stderr[-500:])


def check_named_snapshot(voidbox, env, ref):
    """snapshot create --image saves a VM on the image's root; exec --snapshot restores it there."""
    r = subprocess.run([voidbox, "--output", "json", "snapshot", "create", "--image", ref, "--",
                        "sh", "-c", "echo saved > /tmp/before-snapshot"],
                       env=env, capture_output=True, text=True)
    check(r.returncode == 0, "snapshot create --image saves a VM booted from the image",
          "status %d: %s" % (r.returncode, r.stderr[-1500:]))
    if r.returncode != 0:
        return
    created = json.loads(r.stdout)
    r = subprocess.run([voidbox, "--output", "json", "snapshot", "create", "--", "true"],
                       env=env, capture_output=True, text=True)
    plain = json.loads(r.stdout).get("config_hash") if r.returncode == 0 else None
    check(plain is not None and plain != created["config_hash"],
          "the config hash of a snapshot on the image differs from one without it",
          "status %d: %s %s" % (r.returncode, r.stdout[-500:], r.stderr[-500:]))
    r = subprocess.run([voidbox, "exec", "--snapshot", created["id"], "--", "sh", "-c",
                        "cat /etc/os-release /tmp/before-snapshot; "
                        "test ! -e /etc/deleted-file && echo CHECK-gone"],
                       env=env, capture_output=True, text=True)
    check(r.returncode == 0 and "ID=voidboxtest" in r.stdout and "saved" in r.stdout and
          "CHECK-gone" in r.stdout,
          "exec --snapshot restores the named snapshot on the image's root",
          "status %d: %s %s" % (r.returncode, r.stdout[-1500:], r.stderr[-1500:]))


if __name__ == "__main__":
    sys.exit(main())
