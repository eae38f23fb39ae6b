"""The build backend of sglpatch itself (PEP 517 and PEP 660), standard library
only, that writes nothing into the source tree: `pip install .` works from a
read-only checkout, and leaves no `build/` or `.egg-info` behind.

pip runs it with the checkout as its working directory (pyproject.toml:
`build-backend = "sglpatch.build_backend"`, `backend-path = ["python"]`). The
metadata comes from pyproject.toml's [project] table, the version from
`sglpatch/__init__.py`; the wheel holds the package's modules and its patch
series, as setuptools' would.
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile
from pathlib import Path
from typing import Dict, List

try:
    import tomllib
except ImportError:  # Python < 3.11: pyproject.toml's build requirements add it
    import tomli as tomllib

_PACKAGE = "sglpatch"
_SOURCE = Path("python") / _PACKAGE
_DATA = ("patches/series", "patches/*.patch", "patches/manifest.json")
_TAG = "py3-none-any"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # zip's earliest date: the same wheel each time


def _project() -> dict:
    with open("pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def _version() -> str:
    text = (_SOURCE / "__init__.py").read_text(encoding="utf-8")
    return re.search(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", text, re.M).group(1)


def _dist_info() -> str:
    return f"{_PACKAGE}-{_version()}.dist-info"


def _metadata() -> bytes:
    project = _project()
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}",
             f"Version: {_version()}", f"Summary: {project['description']}"]
    if "license" in project:
        lines.append(f"License: {project['license']['text']}")
    if "requires-python" in project:
        lines.append(f"Requires-Python: {project['requires-python']}")
    readme = project.get("readme")
    body = ""
    if readme:
        lines.append("Description-Content-Type: text/markdown")
        body = "\n" + Path(readme).read_text(encoding="utf-8")
    return ("\n".join(lines) + "\n" + body).encode("utf-8")


def _dist_info_files() -> Dict[str, bytes]:
    scripts = _project().get("scripts", {})
    entry_points = "[console_scripts]\n" + "".join(
        f"{name} = {target}\n" for name, target in scripts.items())
    wheel = (f"Wheel-Version: 1.0\nGenerator: {_PACKAGE}.build_backend\n"
             f"Root-Is-Purelib: true\nTag: {_TAG}\n")
    return {"METADATA": _metadata(), "WHEEL": wheel.encode(),
            "entry_points.txt": entry_points.encode(),
            "top_level.txt": f"{_PACKAGE}\n".encode()}


def _package_files() -> List[Path]:
    files = sorted(p for p in _SOURCE.glob("*.py") if p.is_file())
    for pattern in _DATA:
        files.extend(sorted(_SOURCE.glob(pattern)))
    return files


def _record_row(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"{name},sha256={digest.decode()},{len(data)}\n"


def _write_wheel(wheel_directory: str, files: Dict[str, bytes]) -> str:
    """A wheel of `files` (name in the wheel: bytes) and the dist-info."""
    dist_info = _dist_info()
    files = dict(files)
    for name, data in _dist_info_files().items():
        files[f"{dist_info}/{name}"] = data
    record = "".join(_record_row(name, data) for name, data in files.items())
    files[f"{dist_info}/RECORD"] = (record + f"{dist_info}/RECORD,,\n").encode()
    name = f"{_PACKAGE}-{_version()}-{_TAG}.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w",
                         zipfile.ZIP_DEFLATED) as wheel:
        for arcname, data in files.items():
            info = zipfile.ZipInfo(arcname, date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)
    return name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, {
        f"{_PACKAGE}/{path.relative_to(_SOURCE).as_posix()}": path.read_bytes()
        for path in _package_files()
    })


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel whose .pth puts the checkout's python/ on sys.path."""
    where = os.path.abspath(_SOURCE.parent)
    return _write_wheel(wheel_directory, {
        f"__editable__.{_PACKAGE}-{_version()}.pth": (where + "\n").encode()})


def build_sdist(sdist_directory, config_settings=None):
    base = f"{_PACKAGE}-{_version()}"
    members = {"PKG-INFO": _metadata()}
    for path in [Path("pyproject.toml"), Path(_project().get("readme", "README.md")),
                 *_package_files()]:
        members[path.as_posix()] = path.read_bytes()
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as sdist:
        for arcname, data in members.items():
            info = tarfile.TarInfo(f"{base}/{arcname}")
            info.size, info.mode = len(data), 0o644
            sdist.addfile(info, io.BytesIO(data))
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


get_requires_for_build_editable = get_requires_for_build_sdist = get_requires_for_build_wheel
