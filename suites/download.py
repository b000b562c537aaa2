"""Downloading benchmark data from its official public location, verified and cached atomically.

``harness data download --suite S --dataset D [--cache DIR] [--base-url URL]``

Every dataset is built in a temporary folder next to its cache folder: each file is
streamed to disk while its SHA-256 (and MD5) is computed, checked, unpacked if it is
an archive, and only when everything verified is the temporary folder renamed to
``<cache>/<suite>/<dataset>``.  A failed or interrupted download leaves nothing in the
cache (an older complete copy stays untouched until the new one has verified).

A finished download carries the harness's record of its files (``.harness-files``, naming the
download).  Only such a folder counts as cached, and ``--force`` replaces only such a folder
holding nothing else; any other folder at ``<cache>/<suite>/<dataset>`` (your own copy, notes
added to a download, one from an older version) is an error naming it, never used or deleted.

Checksums
    Known checksums are data in the suite modules: BEIR's published MD5 of every zip
    (plus SHA-256 where established).  For files without a published checksum the
    SHA-256 is recorded on the first successful download in ``<cache>/checksums.json``
    (keyed by suite, dataset and file, not by URL, so a mirror must serve the same
    bytes) and every later download of that file is verified against it.  Delete an
    entry to accept a new upstream version on purpose.

Sources: each suite declares its remote files (``BenchmarkSuite.remote_files``; ``--base-url`` replaces the
host part, e.g. a mirror or a local server)
    beir      ``<base>/<name>.zip`` (default base: the BEIR UKP host)
    miracl    ``<base>/miracl/resolve/main/miracl-v1.0-<lang>/{topics,qrels}/...`` and with
              ``--with-corpus`` ``<base>/miracl-corpus/resolve/main/miracl-corpus-v1.0-<lang>/docs-<n>.jsonl.gz``
    mkqa      the release ``mkqa.jsonl.gz`` (apple/ml-mkqa); ``--with-corpus`` adds BEIR's NQ corpus
    cmteb     the task's mteb hub dataset at mteb's pinned revision (parquet files)
    dureader  the DuReader-Retrieval baseline dataset archive (Baidu CDN)
"""
from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import shutil
import stat
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from harness.benchmark import SUITES, RemoteFile, get_suite, list_suites
from harness.errors import ConfigError, HarnessError, InputError
from harness.io import OutputExistsError, atomic_dir, atomic_write_json, read_record
from harness.io.paths import child_of

log = logging.getLogger("harness.download")
LEDGER = "checksums.json"
USER_AGENT = "retrieval-harness/0.1 (+benchmark download)"


class DownloadError(HarnessError):
    """A download failed, or its bytes did not match the expected checksum."""


def default_cache() -> Path:
    return Path(os.environ.get("HARNESS_DATA", Path.home() / ".cache" / "retrieval-harness" / "data"))


def _stream(url: str, dest: Path, timeout: float = 60.0) -> tuple[str, str, int]:
    """Download ``url`` to ``dest``; returns (sha256, md5, bytes).  HTTP 404 raises FileNotFoundError."""
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    sha, md5, size = hashlib.sha256(), hashlib.md5(), 0  # noqa: S324 - md5 only to match published sums
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response, open(dest, "wb") as out:  # noqa: S310
            total = int(response.headers.get("Content-Length") or 0)
            bar = _progress(total, Path(url).name)
            while block := response.read(1 << 20):
                out.write(block)
                sha.update(block)
                md5.update(block)
                size += len(block)
                if bar is not None:
                    bar.update(len(block))
            if bar is not None:
                bar.close()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise FileNotFoundError(url) from None
        raise DownloadError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise DownloadError(f"{url}: {getattr(exc, 'reason', exc)}") from None
    return sha.hexdigest(), md5.hexdigest(), size


def _progress(total: int, name: str):
    if total < (8 << 20):
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        return None
    return tqdm(total=total, unit="B", unit_scale=True, desc=name, leave=False)


class UnsafeArchiveError(InputError, DownloadError):
    """An archive member that would land outside the target folder, or a link/device member."""


def _unpack(archive: Path, kind: str, into: Path, strip_top: bool, source: str | None = None) -> None:
    """Unpack ``archive`` into ``into``; ``source`` (the URL) names the archive in errors."""
    into.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=into))
    name = source or str(archive)
    try:
        if kind == "zip":
            _extract_zip(archive, staging, name)
        elif kind == "tar":
            _extract_tar(archive, staging, name)
        else:
            raise ConfigError(f"unknown archive kind {kind!r}")
        top = staging
        entries = [p for p in staging.iterdir() if not p.name.startswith("__MACOSX")]
        if strip_top and len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
            top = entries[0]
        for item in top.iterdir():
            if item.name.startswith("__MACOSX"):
                continue
            shutil.move(str(item), str(into / item.name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _check_links(into, name)


def _check_links(folder: Path, archive: str) -> None:
    """Links the tar filter accepted inside the staging folder must still point inside after
    ``strip_top`` moved them one level up (e.g. ``top/l -> ../x``)."""
    root = folder.resolve()
    for path in folder.rglob("*"):
        if path.is_symlink() and not path.resolve().is_relative_to(root):
            target = os.readlink(path)
            path.unlink()
            raise UnsafeArchiveError(archive, f"link {path.relative_to(folder).as_posix()!r} -> {target!r} points "
                                     "outside the dataset folder; nothing was kept")


def _check_member(name: str, archive: str) -> None:
    """Refuse absolute paths (also Windows drive/UNC forms) and any ``..`` component."""
    parts = PurePosixPath(name.replace("\\", "/")).parts
    drive = len(name) > 1 and name[0].isalpha() and name[1] == ":"
    if name.startswith(("/", "\\")) or drive or ".." in parts:
        raise UnsafeArchiveError(archive, f"unsafe path {name!r} in archive (absolute or with '..'); nothing "
                                 "was kept")


def _extract_zip(archive: Path, staging: Path, name: str) -> None:
    # zipfile never creates links, devices or setuid files, but it silently rewrites unsafe
    # names; refuse them (and members flagged as links/devices) so a bad archive is visible.
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            _check_member(info.filename, name)
            mode = info.external_attr >> 16
            if stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):      # type bits, when a tool wrote them
                raise UnsafeArchiveError(name, f"refusing link or special member {info.filename!r} in archive")
        zf.extractall(staging)


def _extract_tar(archive: Path, staging: Path, name: str) -> None:
    with tarfile.open(archive) as tf:
        members = tf.getmembers()
        for member in members:
            _check_member(member.name, name)
        if hasattr(tarfile, "data_filter"):
            # The "data" filter (Python >= 3.11.4): refuses links leaving the folder and devices,
            # clears setuid/setgid/sticky and group/other write bits, and ignores stored owners.
            try:
                tf.extractall(staging, members=members, filter="data")
            except tarfile.FilterError as exc:
                bad = exc.tarinfo.name if exc.tarinfo is not None else "?"
                raise UnsafeArchiveError(name, f"unsafe member {bad!r} in archive: {exc}; nothing was kept") \
                    from None
        else:  # older Pythons: no links at all, only regular files and folders with plain modes
            safe = []
            for member in members:
                if not (member.isfile() or member.isdir()):
                    raise UnsafeArchiveError(name, f"refusing link or special member {member.name!r} in archive")
                member = copy.copy(member)
                member.mode = (member.mode & 0o755) | (0o600 if member.isfile() else 0o700)
                member.uid, member.gid, member.uname, member.gname = os.getuid(), os.getgid(), "", ""
                safe.append(member)
            tf.extractall(staging, members=safe)  # members checked and sanitised above


class Ledger:
    """SHA-256 of files without a published checksum, recorded on first download."""

    def __init__(self, cache: Path):
        self.path = cache / LEDGER
        self.entries: dict[str, str] = {}
        if self.path.exists():
            self.entries = json.loads(self.path.read_text(encoding="utf-8"))

    def save(self) -> None:
        atomic_write_json(self.path, dict(sorted(self.entries.items())))


def is_download(folder: str | Path, key: str) -> bool:
    """True for a folder :func:`fetch` wrote for ``key``: its record of files names that download."""
    record = read_record(folder)
    return record is not None and record.get("download") == key


def fetch(files: Iterable[RemoteFile], dest: str | Path, *, cache: str | Path, key: str, force: bool = False) -> Path:
    """Fetch, verify and unpack ``files`` into ``dest`` atomically; returns ``dest``.

    A finished download carries the harness's record (:func:`harness.io.atomic.write_record`, naming
    ``key``): only such a folder is returned as cached, and ``force`` replaces only such a folder, and
    only while it holds nothing but the downloaded files.  Anything else at ``dest`` (a folder of your
    own, an unverified copy) is an error naming it, never used or deleted."""
    dest, cache = Path(dest), Path(cache)
    what = f"a download of {key} by the harness"
    if os.path.lexists(dest) and not (dest.is_dir() and not dest.is_symlink() and not any(dest.iterdir())):
        if not is_download(dest, key):
            raise OutputExistsError(f"{dest} exists but is not {what} (it has no download record: made by hand, "
                                    f"by another tool or by an older version); refusing to use or replace it: move "
                                    f"it away (or remove it), then download again")
        if not force:
            log.info("%s already cached in %s", key, dest)
            return dest
    ledger = Ledger(cache)
    recorded: dict[str, str] = {}
    probing_done = False
    with atomic_dir(dest, overwrite=True, is_ours=lambda p: is_download(p, key), what=what,
                    record={"download": key}) as tmp:
        for item in files:
            if item.probe and probing_done:
                continue
            download_to = tmp / ".download"
            try:
                sha, md5, size = _stream(item.url, download_to)
            except FileNotFoundError:
                if item.probe:  # the shard sequence ended
                    probing_done = True
                    continue
                raise DownloadError(f"{item.url}: HTTP 404 not found") from None
            entry = f"{key}/{item.target}"
            _verify(item, entry, sha, md5, ledger)
            if entry not in ledger.entries and not item.sha256:
                recorded[entry] = sha
            log.info("fetched %s (%d bytes, sha256 %s)", item.url, size, sha[:12])
            if item.unpack:
                _unpack(download_to, item.unpack, tmp / item.target, item.strip_top, source=item.url)
                download_to.unlink()
            else:
                target = tmp / item.target
                target.parent.mkdir(parents=True, exist_ok=True)
                download_to.replace(target)
    if recorded:
        ledger.entries.update(recorded)
        ledger.save()
    return dest


def _verify(item: RemoteFile, entry: str, sha: str, md5: str, ledger: Ledger) -> None:
    expected = [("SHA-256", item.sha256, sha), ("MD5", item.md5, md5),
                ("recorded SHA-256", ledger.entries.get(entry) if not item.sha256 else None, sha)]
    for what, want, got in expected:
        if want and want.lower() != got:
            raise DownloadError(f"{item.url}: {what} mismatch (expected {want}, got {got}); nothing was cached")


def downloadable_suites() -> list[str]:
    """The registered suites that declare remote files, in registry order."""
    return [name for name in list_suites() if SUITES.get(name).has_downloads()]


def download_dataset(suite: str, dataset: str | None = None, *, cache: str | Path | None = None,
                     base_url: str | None = None, force: bool = False, with_corpus: bool = False) -> Path:
    """Download one dataset of a suite into ``<cache>/<suite>/<dataset>``; returns that folder."""
    cache = Path(cache) if cache else default_cache()
    # Each suite declares its remote files (BenchmarkSuite.remote_files); no suite is named here.
    sources = downloadable_suites()
    if suite not in sources:
        raise ConfigError(f"suite {suite!r} has no download source ({', '.join(sources)})")
    name, files = get_suite(suite).remote_files(dataset, base_url=base_url, with_corpus=with_corpus)
    # the dataset comes from the command line (--dataset): one folder below the cache, never ../elsewhere
    return fetch(files, child_of(cache, suite, name, what="dataset"), cache=cache, key=f"{suite}/{name}", force=force)
