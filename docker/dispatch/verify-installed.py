"""Checks, inside the dispatch image, that its Python packages are exactly what the lock pins and that
every installed file is as its package shipped it.

    python3 verify-installed.py requirements.lock

Three things must hold, or it prints each breach and exits 1:

* every installed distribution is pinned by the lock at that version (pip, which CPython's own
  ensurepip wheel installs, is the one exception), and every package the lock pins is installed;
* every file a distribution's RECORD lists with a sha256 has that hash: nothing was changed after
  installation (a build machine's proxy CA appended to a certifi bundle, say);
* every file in site-packages belongs to an installed distribution (a `.pth` start-up hook among
  them), and no `sitecustomize` or `usercustomize` module is anywhere on the path: no start-up hook of
  the build machine's came along.

It checks a build, it does not seal an image: whoever can rewrite an image can rewrite a RECORD with
the file it lists. build-offline runs it before importing the image; the live test suite runs it in
the finished image.
"""

import base64
import hashlib
import importlib.metadata
import re
import sys
import sysconfig
from pathlib import Path

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lock):
    pinned = {}
    for line in Path(lock).read_text().splitlines():
        match = PIN.match(line)
        if match:
            pinned[canonical(match.group(1))] = match.group(2)
    return pinned


def sha256_record(data):
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def main(lock):
    pinned = pins(lock)
    breaches = []
    installed = {}
    owned = set()
    for dist in importlib.metadata.distributions():
        name = canonical(dist.metadata["Name"])
        installed[name] = dist.version
        if name != "pip" and pinned.get(name) != dist.version:
            breaches.append(f"{name} {dist.version} is installed; the lock pins {pinned.get(name, 'no such package')}")
        for file in dist.files or []:
            path = Path(file.locate()).resolve()
            owned.add(path)
            if not file.hash or file.hash.mode != "sha256":
                continue
            try:
                data = path.read_bytes()
            except OSError as error:
                breaches.append(f"{path} of {name} cannot be read: {error}")
                continue
            if sha256_record(data) != file.hash.value:
                breaches.append(f"{path} of {name} differs from its RECORD")
    for name, version in sorted(pinned.items()):
        if name not in installed:
            breaches.append(f"{name} {version} is pinned but not installed")
    site = Path(sysconfig.get_paths()["purelib"])
    unowned = sorted(
        path
        for path in site.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.resolve() not in owned
    )
    for path in unowned[:20]:
        breaches.append(f"{path} belongs to no installed package")
    if len(unowned) > 20:
        breaches.append(f"... and {len(unowned) - 20} more files that belong to no installed package")
    for entry in sys.path:
        for hook in ("sitecustomize", "usercustomize"):
            for found in Path(entry or ".").glob(f"{hook}*"):
                breaches.append(f"{found} is a start-up hook on the path")
    for breach in breaches:
        print(f"verify-installed: {breach}")
    if breaches:
        return 1
    print(f"verify-installed: {len(installed)} packages, each as the lock pins it and as it shipped")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: verify-installed.py requirements.lock")
    sys.exit(main(sys.argv[1]))
