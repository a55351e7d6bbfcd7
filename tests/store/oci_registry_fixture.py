"""Registries on loopback for the OCI pull tests (tests/store/test_oci_pull.py, tests/vm/vm_oci.py).

Everything is built and served here, on 127.0.0.1, from a temporary directory; nothing talks to
any other host. Debian's docker-registry serves three ways: anonymous, with htpasswd (bcrypt,
from apache2-utils' htpasswd -B) basic auth, and behind a token proxy written here (the
registry's own token auth needs signed JWTs): the proxy answers 401 with a Bearer challenge,
issues a token at its realm to the right basic credentials, and forwards requests that carry
the token to the anonymous registry.

The image is built with umoci from the host's static busybox: layer one holds busybox,
/etc/os-release, /etc/deleted-file and the directory /opt/replaced; layer two deletes
/etc/deleted-file and replaces /opt/replaced with a file. It is pushed with skopeo, plus an
index (tag "multi") whose linux/amd64 entry is that manifest and whose arm64 entry is a
different image, and a third image ("voidbox/tampered:1") whose own layer is then altered in the
registry's storage so it no longer matches its digest.
"""

import base64
import contextlib
import hashlib
import http.client
import http.server
import json
import os
import shutil
import socket
import socketserver
import subprocess
import tempfile
import threading
import time
import urllib.request

REPO = "voidbox/test"
TAG = "1"
TAMPERED_REPO = "voidbox/tampered"
USER = "tester"
PASSWORD = "s3cret-pass"
TOKEN = "voidbox-test-token-0123456789"
SERVICE = "voidbox-fixture"
OS_RELEASE = 'PRETTY_NAME="voidbox OCI test image"\nID=voidboxtest\n'
BUSYBOX_APPLETS = ["sh", "cat", "ls", "test", "echo", "grep", "mount", "stat", "id", "readlink"]
# generous: under the nested harness everything runs emulated
READY_TIMEOUT_S = 60


class Checks:
    """Prints one line per check; failed() says how many failed."""

    def __init__(self):
        self.failures = 0

    def __call__(self, cond, what, detail=""):
        if cond:
            print("ok: " + what)
        else:
            self.failures += 1
            print("FAIL: %s %s" % (what, detail))

    def finish(self):
        print("%d failure(s)" % self.failures)
        return 1 if self.failures else 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(*args, **kw):
    subprocess.run(list(args), check=True, stdout=subprocess.DEVNULL, **kw)


def need(*programs):
    missing = [p for p in programs if not shutil.which(p)]
    if missing:
        raise SystemExit("missing programs: %s (scripts/install-deps installs them)" % " ".join(missing))


class Registry:
    """One docker-registry process with its own config and storage."""

    def __init__(self, workdir, name, htpasswd=None):
        self.port = free_port()
        self.root = os.path.join(workdir, name)
        os.makedirs(self.root)
        config = os.path.join(self.root, "config.yml")
        auth = ""
        if htpasswd:
            auth = "auth:\n  htpasswd:\n    realm: voidbox-test\n    path: %s\n" % htpasswd
        with open(config, "w") as f:
            f.write("version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n"
                    "storage:\n  filesystem:\n    rootdirectory: %s/storage\n"
                    "http:\n  addr: 127.0.0.1:%d\n%s" % (self.root, self.port, auth))
        self.log = open(os.path.join(self.root, "registry.log"), "w")
        self.proc = subprocess.Popen(["docker-registry", "serve", config], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        self.address = "127.0.0.1:%d" % self.port
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.log.flush()
                    with open(self.log.name, errors="replace") as f:
                        said = f.read()[-2000:]
                    raise SystemExit("docker-registry did not start (status %s): %s" %
                                     (self.proc.poll(), said))
                time.sleep(0.1)

    def blob_data_path(self, digest):
        hexdigest = digest.split(":", 1)[1]
        return os.path.join(self.root, "storage/docker/registry/v2/blobs/sha256",
                            hexdigest[:2], hexdigest, "data")

    def stop(self):
        self.proc.terminate()
        self.proc.wait()
        self.log.close()


class TokenProxy(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def make_proxy_handler(upstream_port, own_port):
    realm = "http://127.0.0.1:%d/token" % own_port
    basic = "Basic " + base64.b64encode(("%s:%s" % (USER, PASSWORD)).encode()).decode()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def reply(self, status, body=b"", headers=()):
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path.startswith("/token"):
                if self.headers.get("Authorization") != basic:
                    return self.reply(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}')
                return self.reply(200, json.dumps({"token": TOKEN}).encode(),
                                  [("Content-Type", "application/json")])
            if self.headers.get("Authorization") != "Bearer " + TOKEN:
                challenge = 'Bearer realm="%s",service="%s",scope="repository:%s:pull"' % (
                    realm, SERVICE, REPO)
                return self.reply(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}',
                                  [("WWW-Authenticate", challenge)])
            conn = http.client.HTTPConnection("127.0.0.1", upstream_port)
            headers = {k: v for k, v in self.headers.items() if k.lower() == "accept"}
            conn.request("GET", self.path, headers=headers)
            resp = conn.getresponse()
            body = resp.read()
            keep = [(k, v) for k, v in resp.getheaders()
                    if k.lower() in ("content-type", "docker-content-digest")]
            conn.close()
            self.reply(resp.status, body, keep)

    return Handler


def build_image(workdir):
    layout = os.path.join(workdir, "oci")
    bundle = os.path.join(workdir, "bundle")
    image = layout + ":" + TAG
    run("umoci", "init", "--layout", layout)
    run("umoci", "new", "--image", image)
    run("umoci", "unpack", "--image", image, bundle)
    rootfs = os.path.join(bundle, "rootfs")
    for d in ("bin", "etc", "opt/replaced/sub", "tmp"):
        os.makedirs(os.path.join(rootfs, d), exist_ok=True)
    shutil.copy(shutil.which("busybox"), os.path.join(rootfs, "bin/busybox"))
    for applet in BUSYBOX_APPLETS:
        os.symlink("busybox", os.path.join(rootfs, "bin", applet))
    with open(os.path.join(rootfs, "etc/os-release"), "w") as f:
        f.write(OS_RELEASE)
    with open(os.path.join(rootfs, "etc/deleted-file"), "w") as f:
        f.write("the second layer deletes this\n")
    with open(os.path.join(rootfs, "opt/replaced/sub/old"), "w") as f:
        f.write("under the directory the second layer replaces\n")
    run("umoci", "repack", "--refresh-bundle", "--image", image, bundle)
    os.unlink(os.path.join(rootfs, "etc/deleted-file"))
    shutil.rmtree(os.path.join(rootfs, "opt/replaced"))
    with open(os.path.join(rootfs, "opt/replaced"), "w") as f:
        f.write("a file now\n")
    run("umoci", "repack", "--refresh-bundle", "--image", image, bundle)
    # the tampered image: the same two layers and one of its own
    with open(os.path.join(rootfs, "etc/tampered-layer"), "w") as f:
        f.write("this layer is altered in the registry " * 64 + "\n")
    run("umoci", "repack", "--image", layout + ":tampered", bundle)
    return layout


def push(layout, tag, registry, repo, creds=None, dest_tag=TAG):
    args = ["skopeo", "--insecure-policy", "copy", "--quiet", "--dest-tls-verify=false"]
    if creds:
        args += ["--dest-creds", creds]
    run(*(args + ["oci:%s:%s" % (layout, tag), "docker://%s/%s:%s" % (registry, repo, dest_tag)]))


def registry_get(address, path, accept=None):
    req = urllib.request.Request("http://%s%s" % (address, path))
    if accept:
        req.add_header("Accept", accept)
    with urllib.request.urlopen(req) as resp:
        return resp.read(), resp.headers


def put_index(address, amd64, arm64):
    """Tags an OCI index "multi": arm64 entry first, so picking the first entry is wrong."""
    def entry(manifest, arch):
        return {"mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": "sha256:" + hashlib.sha256(manifest).hexdigest(),
                "size": len(manifest), "platform": {"architecture": arch, "os": "linux"}}
    index = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                        "manifests": [entry(arm64, "arm64"), entry(amd64, "amd64")]}).encode()
    req = urllib.request.Request("http://%s/v2/%s/manifests/multi" % (address, REPO), data=index,
                                 method="PUT")
    req.add_header("Content-Type", "application/vnd.oci.image.index.v1+json")
    urllib.request.urlopen(req).read()


class Fixture:
    """Builds the image, starts the registries; stop() ends every process it started."""

    def __init__(self, workdir):
        need("docker-registry", "skopeo", "umoci", "htpasswd", "busybox")
        self.workdir = workdir
        self.registries = []
        self.proxy = None
        try:
            self.setup()
        except BaseException:
            self.stop()
            raise

    def setup(self):
        workdir = self.workdir
        layout = build_image(workdir)
        self.anon = self.start(Registry(workdir, "anon"))
        htpasswd = os.path.join(workdir, "htpasswd")
        run("htpasswd", "-Bbc", htpasswd, USER, PASSWORD, stderr=subprocess.DEVNULL)
        self.basic = self.start(Registry(workdir, "basic", htpasswd))
        push(layout, TAG, self.anon.address, REPO)
        push(layout, "tampered", self.anon.address, TAMPERED_REPO)
        # an index may only name manifests of its own repository
        push(layout, "tampered", self.anon.address, REPO, dest_tag="arm")
        push(layout, TAG, self.basic.address, REPO, "%s:%s" % (USER, PASSWORD))
        accept = "application/vnd.oci.image.manifest.v1+json"
        amd64, _ = registry_get(self.anon.address, "/v2/%s/manifests/%s" % (REPO, TAG), accept)
        arm64, _ = registry_get(self.anon.address,
                                "/v2/%s/manifests/%s" % (TAMPERED_REPO, TAG), accept)
        put_index(self.anon.address, amd64, arm64)
        self.manifest_digest = "sha256:" + hashlib.sha256(amd64).hexdigest()
        tampered = json.loads(arm64)
        self.tampered_layer = tampered["layers"][-1]["digest"]
        path = self.anon.blob_data_path(self.tampered_layer)
        with open(path, "r+b") as f:
            data = bytearray(f.read())
            data[len(data) // 2] ^= 0xFF
            f.seek(0)
            f.write(data)
        proxy_port = free_port()
        self.proxy = TokenProxy(("127.0.0.1", proxy_port),
                                make_proxy_handler(self.anon.port, proxy_port))
        threading.Thread(target=self.proxy.serve_forever, daemon=True).start()
        self.token_address = "127.0.0.1:%d" % proxy_port

    def start(self, registry):
        self.registries.append(registry)
        return registry

    def stop(self):
        if self.proxy:
            self.proxy.shutdown()
            self.proxy.server_close()
        for registry in self.registries:
            registry.stop()


@contextlib.contextmanager
def session(prefix):
    """A fresh work directory and a Fixture in it; both are gone afterwards."""
    work = tempfile.mkdtemp(prefix=prefix)
    fixture = None
    try:
        fixture = Fixture(os.path.join(work, "fixture"))
        yield fixture, work
    finally:
        if fixture:
            fixture.stop()
        shutil.rmtree(work, ignore_errors=True)
