"""Content-addressed on-disk cache of generated code (README (Layout) habit 8).

Key: SHA-256 of the generating content (symbolic source or generated source) + backend + compiler flags +
versions of Python, SymPy, numpy, cffi + platform + codegen version.  Location: ``$TPDE_CACHE_DIR`` or
``~/.cache/symbolic_tpde``.

Integrity and concurrency:

* every write goes to a temporary file in the cache directory, then ``os.replace`` (atomic on POSIX), so a
  reader sees either nothing or a complete file;
* text entries start with a header line carrying the SHA-256 of the body; binary artefacts (shared
  objects) are content-addressed (``<key>.<sha>.so``) and referenced by a small text entry, so two processes
  building the same key at once both end with a complete, verified artefact whatever the interleaving;
* an entry whose checksum does not match (truncated, garbled) is reported with a ``warnings.warn`` and
  treated as missing, so the caller rebuilds and overwrites it.

No global counters, no ``chdir``, no pickles: entries are text or shared objects.

An unusable cache never stops the tool (issue 11): when the directory cannot be created or written (read-only
file system, no permission, the path is a file) the cache says so once on stderr, naming ``TPDE_CACHE_DIR``,
and continues in a private temporary directory removed at exit (so the run computes as without a cache);
an unreadable entry is treated as missing.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import platform
import sys
import tempfile
import warnings
from pathlib import Path

#: Version of the code generators; part of every cache key (re-exported by :mod:`.numpy_backend`).
CODEGEN_VERSION = "2"

_HEADER = "# symbolic_tpde-cache sha256="


class CacheCorruptWarning(UserWarning):
    """A cache entry failed its checksum and is being rebuilt."""


def cache_dir() -> Path:
    """``$TPDE_CACHE_DIR`` or ``~/.cache/symbolic_tpde`` (created by :class:`Cache`, not here)."""
    root = os.environ.get("TPDE_CACHE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "symbolic_tpde"


_FALLBACK: list[Path] = []
_ANNOUNCED: set[str] = set()


def _fallback_root() -> Path:
    """A private temporary directory for this process (removed at exit)."""
    if not _FALLBACK:
        import shutil

        path = Path(tempfile.mkdtemp(prefix="tpde-nocache-"))
        atexit.register(shutil.rmtree, path, True)
        _FALLBACK.append(path)
    return _FALLBACK[0]


def _unusable(root: Path, exc: OSError) -> Path:
    """Announce once that ``root`` cannot be used and return the fallback directory."""
    if root.exists() and not root.is_dir():
        why = "is a file, not a directory"
    else:
        why = f"cannot be written ({exc.strerror or exc})"
    msg = (f"symbolic_tpde: the code cache {root} {why}; computing without the cache (set TPDE_CACHE_DIR to "
           "a writable directory to keep generated code between runs)")
    if msg not in _ANNOUNCED:
        _ANNOUNCED.add(msg)
        print(msg, file=sys.stderr)
    return _fallback_root()


@functools.lru_cache(maxsize=None)
def _dist_version(name: str) -> str:
    """Installed version of a distribution, read from its metadata (no import: this module stays SymPy-free)."""
    # fast path (the warm start reads this): the version in the name of the ``<name>-<version>.dist-info``
    # directory next to the package, found without importing it; importlib.metadata costs ~15 ms
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin and name != "symbolic_tpde":
        site = Path(spec.origin).parent.parent
        norm = name.replace("-", "_").lower()
        try:
            hits = [e for e in os.listdir(site) if e.lower().startswith(norm + "-") and e.endswith(".dist-info")]
        except OSError:
            hits = []
        if len(hits) == 1:
            return hits[0][len(norm) + 1:-len(".dist-info")]
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:  # pragma: no cover - cffi is optional
        return "none"


def _versions() -> str:
    import numpy

    return (f"python={sys.version.split()[0]};impl={sys.implementation.cache_tag};sympy={_dist_version('sympy')};"
            f"numpy={numpy.__version__};cffi={_dist_version('cffi')};platform={platform.platform()};"
            f"machine={platform.machine()};codegen={CODEGEN_VERSION}")


def make_key(content: str, backend: str, flags: tuple[str, ...] | list[str] = ()) -> str:
    """Hex SHA-256 over content, backend, flags and the environment versions."""
    h = hashlib.sha256()
    for part in (backend, "\x00".join(flags), _versions(), content):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x01")
    return h.hexdigest()


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename (no partial file
    is ever visible; the temporary is removed on any failure)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-" + path.name[:16] + "-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


class Cache:
    """A cache directory.  ``Cache()`` uses :func:`cache_dir`."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root is not None else cache_dir()
        self.configured = self.root
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self.root = _unusable(self.root, exc)

    @property
    def usable(self) -> bool:
        """False when the configured directory could not be used (running on the private fallback)."""
        return self.root == self.configured

    def _write(self, path: Path, data: bytes) -> Path:
        try:
            atomic_write(path, data)
            return path
        except OSError as exc:
            if _FALLBACK and path.parent == _FALLBACK[0]:
                raise
            self.root = _unusable(self.configured, exc)
            alt = self.root / path.name
            atomic_write(alt, data)
            return alt

    def path(self, key: str, suffix: str) -> Path:
        return self.root / f"{key}{suffix}"

    # -- text entries -------------------------------------------------------------------------------------
    def get_text(self, key: str, suffix: str) -> str | None:
        """The stored text, or ``None`` when absent or corrupt (corrupt: warn, the caller rebuilds)."""
        p = self.path(key, suffix)
        try:
            raw = p.read_bytes()
        except FileNotFoundError:
            return None
        except OSError:  # unreadable (permissions, a directory in its place): treat as missing
            return None
        head, sep, body = raw.partition(b"\n")
        ok = False
        if sep and head.startswith(_HEADER.encode()):
            ok = head[len(_HEADER):].decode("ascii", "replace") == hashlib.sha256(body).hexdigest()
        if not ok:
            warnings.warn(f"symbolic_tpde cache entry {p} is corrupt (checksum mismatch); rebuilding it",
                          CacheCorruptWarning, stacklevel=3)
            return None
        return body.decode("utf-8", "surrogatepass")

    def put_text(self, key: str, suffix: str, text: str) -> Path:
        body = text.encode("utf-8", "surrogatepass")
        p = self.path(key, suffix)
        return self._write(p, (_HEADER + hashlib.sha256(body).hexdigest() + "\n").encode() + body)

    # -- binary artefacts ---------------------------------------------------------------------------------
    def get_file(self, key: str, suffix: str) -> Path | None:
        """Path of a verified binary artefact, or ``None`` when absent or corrupt (warns when corrupt)."""
        ref = self.get_text(key, suffix + ".ref")
        if ref is None:
            return None
        p = self.root / ref.strip()
        try:
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
        except OSError:
            digest = ""
        if not p.name.startswith(key) or digest[:24] not in p.name:
            warnings.warn(f"symbolic_tpde cache artefact {p} is missing or corrupt; rebuilding it",
                          CacheCorruptWarning, stacklevel=3)
            return None
        return p

    def put_file(self, key: str, suffix: str, data: bytes) -> Path:
        """Store ``data`` content-addressed and point the key's reference at it; returns the artefact path."""
        digest = hashlib.sha256(data).hexdigest()[:24]
        p = self._write(self.path(f"{key}.{digest}", suffix), data)
        self.put_text(key, suffix + ".ref", p.name)
        return p
