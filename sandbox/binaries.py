"""Build the sandbox's control-plane binaries from Go modules, once per version, into the user's cache.

kube-apiserver, kube-controller-manager, kube-scheduler and kubectl come from the k8s.io/kubernetes
module (sandbox/gobuild/kube/go.mod pins it and every staging module); etcd comes from
go.etcd.io/etcd/server/v3 (sandbox/gobuild/etcd/go.mod). The cache key is a hash of the go.mod and
go.sum, so a version bump rebuilds and an unchanged tree reuses the binaries in seconds.
"""

import fcntl
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import time

GOBUILD = pathlib.Path(__file__).resolve().parent / "gobuild"

_KUBE_PKGS = [
    "k8s.io/kubernetes/cmd/kube-apiserver",
    "k8s.io/kubernetes/cmd/kube-controller-manager",
    "k8s.io/kubernetes/cmd/kube-scheduler",
    "k8s.io/kubernetes/cmd/kubectl",
]
_ETCD_PKG = "go.etcd.io/etcd/server/v3"

# binary name -> the sandbox/gobuild directory whose go.mod builds it
BINARIES = {
    "kube-apiserver": "kube",
    "kube-controller-manager": "kube",
    "kube-scheduler": "kube",
    "kubectl": "kube",
    "etcd": "etcd",
}


def cache_root():
    base = os.environ.get("KUBENODES_SANDBOX_CACHE")
    if base:
        return pathlib.Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(xdg) / "kubenodes-sandbox"


def _required_version(moddir, module):
    for line in (GOBUILD / moddir / "go.mod").read_text().splitlines():
        parts = line.split("//")[0].split()
        if parts[:1] == ["require"]:
            parts = parts[1:]
        if len(parts) == 2 and parts[0] == module:
            return parts[1]
    raise RuntimeError("%s is not required in sandbox/gobuild/%s/go.mod" % (module, moddir))


def _key(moddir):
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update((GOBUILD / moddir / name).read_bytes())
    return digest.hexdigest()[:12]


def kube_version():
    return _required_version("kube", "k8s.io/kubernetes")


def etcd_version():
    return _required_version("etcd", "go.etcd.io/etcd/server/v3")


def bin_dir(moddir):
    version = kube_version() if moddir == "kube" else etcd_version()
    return cache_root() / ("%s-%s-%s" % (moddir, version, _key(moddir))) / "bin"


def path_of(name):
    """Absolute path of a built binary (it may not exist yet: see ensure())."""
    return bin_dir(BINARIES[name]) / ("etcd" if name == "etcd" else name)


def _go_build(moddir, out, packages, ldflags, tags, out_name=None):
    tmp = out.parent / "bin.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    # One package builds to a named file (etcd's main package is ".../server/v3"); several to a directory.
    target = str(tmp / out_name) if out_name else str(tmp) + "/"
    cmd = ["go", "build", "-trimpath", "-o", target]
    if tags:
        cmd += ["-tags=" + tags]
    if ldflags:
        cmd += ["-ldflags=" + ldflags]
    cmd += packages
    env = dict(os.environ, GOFLAGS="-mod=mod")
    proc = subprocess.Popen(cmd, cwd=GOBUILD / moddir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    started = time.monotonic()
    done = threading.Event()

    def heartbeat():
        # A cold kube-apiserver build takes minutes: never stay silent that long.
        while not done.wait(30):
            print("  ... still building %s (%ds so far)" % (moddir, time.monotonic() - started), flush=True)

    threading.Thread(target=heartbeat, daemon=True).start()
    output = proc.communicate()[0].decode(errors="replace")
    done.set()
    if proc.returncode != 0:
        sys.stderr.write(output)
        raise RuntimeError("go build in sandbox/gobuild/%s failed (exit %d)" % (moddir, proc.returncode))
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return time.monotonic() - started


def ensure(quiet=False):
    """Build whatever is missing; return {binary name: path}."""
    if shutil.which("go") is None:
        raise RuntimeError("the Go toolchain is needed to build the sandbox binaries: 'go' is not on PATH")
    for moddir in ("etcd", "kube"):
        out = bin_dir(moddir)
        wanted = [n for n, d in BINARIES.items() if d == moddir]
        if all((out / n).exists() for n in wanted):
            if not quiet:
                print("sandbox binaries: reusing %s" % out, flush=True)
            continue
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out.parent / "build.lock", "w") as lock:
            # Several checkouts running `make setup` at once would race on bin.partial: one builds, the
            # others wait here and then find the binaries.
            if not quiet:
                print("sandbox binaries: waiting for the build lock %s" % lock.name, flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
            _build_one(moddir, out, wanted, quiet)
    return {name: str(path_of(name)) for name in BINARIES}


def _build_one(moddir, out, wanted, quiet):
    if all((out / n).exists() for n in wanted):
        if not quiet:
            print("sandbox binaries: reusing %s" % out, flush=True)
        return
    if moddir == "kube":
        version = kube_version()
        minor = version.lstrip("v").split(".")[1]
        ldflags = ("-s -w -X k8s.io/component-base/version.gitVersion=%s "
                   "-X k8s.io/component-base/version.gitMajor=1 "
                   "-X k8s.io/component-base/version.gitMinor=%s "
                   "-X k8s.io/component-base/version.gitTreeState=clean" % (version, minor))
        packages, tags = _KUBE_PKGS, "selinux,notest,grpcnotrace"
        what = "kube-apiserver, kube-controller-manager, kube-scheduler, kubectl %s" % version
    else:
        ldflags, tags, packages = "-s -w", "", [_ETCD_PKG]
        what = "etcd %s" % etcd_version()
    print("sandbox binaries: building %s into %s (a cold build takes several minutes)" % (what, out), flush=True)
    took = _go_build(moddir, out, packages, ldflags, tags, out_name="etcd" if moddir == "etcd" else None)
    print("sandbox binaries: built %s in %ds" % (what, took), flush=True)


if __name__ == "__main__":
    ensure()
