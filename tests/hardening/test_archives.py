"""Archive extraction (downloads) writes only inside its target folder: crafted tar and zip
archives with absolute paths, ``..``, escaping links, devices or setuid bits are refused (or
sanitised) with an InputError that names the archive and the member."""
from __future__ import annotations

import functools
import http.server
import io
import os
import stat
import tarfile
import threading
import zipfile
from pathlib import Path

import pytest

from harness.errors import InputError
from suites.download import DownloadError, UnsafeArchiveError, _unpack, download_dataset

ARCHIVE = "https://example.org/evil-archive"


def snapshot(root: Path, skip: Path) -> set[str]:
    """Every path under ``root`` outside ``skip`` (the extraction target)."""
    return {str(p) for p in root.rglob("*") if skip not in p.parents and p != skip}


def make_tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def file_member(name: str, data: bytes = b"payload", mode: int = 0o644, uid: int = 0) -> tuple:
    info = tarfile.TarInfo(name)
    info.mode, info.uid, info.gid, info.uname, info.gname = mode, uid, uid, "", ""
    return info, data


def link_member(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


def special_member(name: str, kind: bytes) -> tuple:
    info = tarfile.TarInfo(name)
    info.type, info.devmajor, info.devminor = kind, 1, 3
    return info, None


@pytest.fixture()
def place(tmp_path):
    """``(archive dir, target dir)`` inside one tmp folder, with a decoy file beside the target."""
    (tmp_path / "archives").mkdir()
    (tmp_path / "secret.txt").write_text("do not touch")
    (tmp_path / "cache" / "dataset").mkdir(parents=True)
    return tmp_path / "archives", tmp_path / "cache" / "dataset"


def refused(tmp_path: Path, archive: Path, kind: str, target: Path, member: str, strip_top: bool = False):
    before = snapshot(tmp_path, target)
    with pytest.raises(UnsafeArchiveError) as info:
        _unpack(archive, kind, target, strip_top, source=ARCHIVE)
    assert snapshot(tmp_path, target) == before                       # nothing written outside the target
    assert (tmp_path / "secret.txt").read_text() == "do not touch"
    assert not [p for p in target.rglob("*") if p.is_symlink()]      # and no link left inside it
    message = str(info.value)
    assert message.startswith(f"{ARCHIVE}: ") and repr(member) in message
    assert isinstance(info.value, InputError) and isinstance(info.value, DownloadError)
    return message


def test_unsafe_classes_are_input_and_download_errors():
    err = UnsafeArchiveError("a.tar", "unsafe path '../x' in archive")
    assert err.path == "a.tar" and str(err) == "a.tar: unsafe path '../x' in archive"


# ---------------------------------------------------------------------------------- tar
@pytest.mark.parametrize("name", ["../escape.txt", "data/../../escape.txt", "ABSOLUTE"])
def test_tar_paths_outside_the_target_are_refused(tmp_path, place, name):
    archives, target = place
    if name == "ABSOLUTE":
        name = str(tmp_path / "abs-escape.txt")
    archive = make_tar(archives / "a.tar.gz", [file_member("data/ok.txt"), file_member(name)])
    message = refused(tmp_path, archive, "tar", target, name)
    assert "unsafe path" in message
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "abs-escape.txt").exists()


@pytest.mark.parametrize("link, target_of_link", [("etc", "/etc"), ("up", "../../.."), ("data/up", "../../secret.txt"),
                                                  ("abs", "ABSOLUTE")])
def test_tar_symlinks_leaving_the_target_are_refused(tmp_path, place, link, target_of_link):
    archives, target = place
    if target_of_link == "ABSOLUTE":
        target_of_link = str(tmp_path)
    # The link, then a file written through it: the classic two-step escape (not into /etc, should it
    # ever succeed: a failing test must not write into the system).
    through = [] if target_of_link == "/etc" else [file_member(f"{link}/pwned.txt")]
    archive = make_tar(archives / "a.tar.gz", [file_member("data/ok.txt"), link_member(link, target_of_link),
                                               *through])
    message = refused(tmp_path, archive, "tar", target, link)
    assert "unsafe member" in message
    assert not (tmp_path / "pwned.txt").exists()


@pytest.mark.parametrize("target_of_link", ["../../secret.txt", "/etc/hostname"])
def test_tar_hardlinks_leaving_the_target_are_refused(tmp_path, place, target_of_link):
    archives, target = place
    archive = make_tar(archives / "a.tar.gz", [link_member("hl", target_of_link, tarfile.LNKTYPE)])
    refused(tmp_path, archive, "tar", target, "hl")


@pytest.mark.parametrize("kind", [tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE])
def test_tar_device_and_fifo_members_are_refused(tmp_path, place, kind):
    archives, target = place
    archive = make_tar(archives / "a.tar.gz", [file_member("data/ok.txt"), special_member("data/dev", kind)])
    refused(tmp_path, archive, "tar", target, "data/dev")


def test_tar_link_escaping_only_after_strip_top_is_refused(tmp_path, place):
    """``top/l -> ../x`` stays inside the staging folder, but not once ``top/`` is stripped."""
    archives, target = place
    archive = make_tar(archives / "a.tar.gz", [file_member("top/ok.txt"), link_member("top/l", "../x")])
    message = refused(tmp_path, archive, "tar", target, "l", strip_top=True)
    assert "points outside the dataset folder" in message


def test_tar_setuid_and_foreign_owner_are_cleared_and_inside_links_kept(tmp_path, place):
    archives, target = place
    archive = make_tar(archives / "a.tar.gz", [
        file_member("top/bin/tool", b"#!/bin/sh\n", mode=0o4777, uid=12345),   # setuid, world-writable, foreign
        file_member("top/corpus.jsonl", b'{"_id": "d1"}\n', mode=0o2644),       # setgid
        link_member("top/alias.jsonl", "corpus.jsonl")])                        # a link that stays inside
    _unpack(archive, "tar", target, True, source=ARCHIVE)
    tool = (target / "bin" / "tool").stat()
    assert stat.S_IMODE(tool.st_mode) == 0o755                                  # setuid and g/o write gone
    assert stat.S_IMODE((target / "corpus.jsonl").stat().st_mode) == 0o644
    assert tool.st_uid == os.getuid()                                           # stored owner ignored (root too)
    assert (target / "alias.jsonl").is_symlink() and (target / "alias.jsonl").read_text() == '{"_id": "d1"}\n'
    assert sorted(p.name for p in target.iterdir()) == ["alias.jsonl", "bin", "corpus.jsonl"]


def test_tar_fallback_without_the_data_filter(tmp_path, place, monkeypatch):
    """Pythons before 3.11.4 have no ``filter=``: links and devices are refused, modes and owners sanitised."""
    archives, target = place
    monkeypatch.delattr(tarfile, "data_filter")
    assert not hasattr(tarfile, "data_filter")
    good = make_tar(archives / "good.tar.gz", [file_member("x/tool", b"#!/bin/sh\n", mode=0o4777, uid=12345)])
    _unpack(good, "tar", target, False, source=ARCHIVE)
    tool = (target / "x" / "tool").stat()
    assert stat.S_IMODE(tool.st_mode) == 0o755 and tool.st_uid == os.getuid()
    for n, (member, bad) in enumerate([("inside", link_member("inside", "x/tool")),
                                       ("up", link_member("up", "../secret.txt", tarfile.LNKTYPE)),
                                       ("dev", special_member("dev", tarfile.CHRTYPE)),
                                       ("../e.txt", file_member("../e.txt"))]):
        archive = make_tar(archives / f"bad{n}.tar.gz", [bad])
        refused(tmp_path, archive, "tar", target, member)


# ---------------------------------------------------------------------------------- zip
def make_zip(path: Path, names: list[str], link: str | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name in names:
            zf.writestr(zipfile.ZipInfo(name), "payload")
        if link is not None:
            info = zipfile.ZipInfo(link)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, "/etc")
    with zipfile.ZipFile(path) as zf:   # the crafted names are stored as written
        assert zf.namelist() == names + ([link] if link else [])
    return path


@pytest.mark.parametrize("name", ["/abs-escape.txt", "../escape.txt", "data/../../escape.txt", "..\\escape.txt",
                                  "C:/escape.txt"])
def test_zip_paths_outside_the_target_are_refused(tmp_path, place, name):
    archives, target = place
    archive = make_zip(archives / "a.zip", ["scifact/corpus.jsonl", name])
    message = refused(tmp_path, archive, "zip", target, name)
    assert "unsafe path" in message


def test_zip_symlink_entry_is_refused(tmp_path, place):
    archives, target = place
    archive = make_zip(archives / "a.zip", ["scifact/corpus.jsonl"], link="scifact/etc")
    message = refused(tmp_path, archive, "zip", target, "scifact/etc")
    assert "link or special member" in message


def test_zip_with_safe_members_unpacks(tmp_path, place):
    archives, target = place
    archive = make_zip(archives / "a.zip", ["scifact/corpus.jsonl", "scifact/qrels/test.tsv", "__MACOSX/._x"])
    _unpack(archive, "zip", target, True, source=ARCHIVE)
    assert sorted(str(p.relative_to(target)) for p in target.rglob("*")) == ["corpus.jsonl", "qrels",
                                                                             "qrels/test.tsv"]


# ------------------------------------------------------------------- through the download
class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_dureader_download_of_an_escaping_tar_caches_nothing(tmp_path, capsys):
    from harness.cli import main

    www = tmp_path / "www"
    www.mkdir()
    make_tar(www / "dureader-retrieval-baseline-dataset.tar.gz",
             [file_member("dureader/passage-collection/part-00", b"p\n"), link_member("dureader/x", "../../../..")])
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(www)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        with pytest.raises(UnsafeArchiveError, match=r"dureader-retrieval-baseline-dataset\.tar\.gz: unsafe member "
                                                     r"'dureader/x'"):
            download_dataset("dureader", cache=tmp_path / "cache", base_url=url)
        assert sorted(p.name for p in (tmp_path / "cache").rglob("*")) == ["dureader"]   # the suite folder only
        rc = main(["data", "download", "--suite", "dureader", "--cache", str(tmp_path / "cache"), "--base-url", url])
    finally:
        httpd.shutdown()
        httpd.server_close()
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and "unsafe member 'dureader/x'" in err
