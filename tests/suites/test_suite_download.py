"""Downloads against a local HTTP server (127.0.0.1) serving files built from ../shared/data:
verified, cached atomically, and nothing cached when a checksum does not match."""
from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import json
import threading
import zipfile
from pathlib import Path

import pytest

from harness.benchmark import get_suite
from harness.cli import main
from suites.download import LEDGER, DownloadError, RemoteFile, download_dataset, fetch


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep test output clean
        pass


@pytest.fixture()
def server(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(QuietHandler, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def zip_beir(src: Path, dest: Path, name: str) -> None:
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(src.rglob("*")):
            if path.is_file() and path.name != "SOURCE.md":
                zf.write(path, f"{name}/{path.relative_to(src)}")


def cache_entries(cache: Path) -> list[str]:
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*")) if cache.exists() else []


def test_beir_zip_checksum_mismatch_leaves_nothing(shared_data, server, tmp_path):
    www, url = server
    # our re-zipped SciFact is not byte-identical to BEIR's scifact.zip: its published MD5 fails
    zip_beir(shared_data / "scifact", www / "scifact.zip", "scifact")
    cache = tmp_path / "cache"
    with pytest.raises(DownloadError, match="mismatch"):
        download_dataset("beir", "scifact", cache=cache, base_url=url)
    assert cache_entries(cache) in ([], ["beir"])              # no dataset, no partial folder, no ledger


def test_beir_download_records_then_verifies_checksum(shared_data, server, tmp_path):
    www, url = server
    zip_beir(shared_data / "scifact", www / "scifact-copy.zip", "scifact-copy")
    cache = tmp_path / "cache"
    path = download_dataset("beir", "scifact-copy", cache=cache, base_url=url)
    assert path == cache / "beir" / "scifact-copy"
    loaded = get_suite("beir").load(path)
    assert len(loaded.dataset.corpus) == 5183 and len(loaded.dataset.queries) == 300
    ledger = json.loads((cache / LEDGER).read_text())
    digest = hashlib.sha256((www / "scifact-copy.zip").read_bytes()).hexdigest()
    assert ledger == {"beir/scifact-copy/.": digest}
    # cached: a second call does not download (the server file may even be gone)
    (www / "scifact-copy.zip").rename(www / "moved.zip")
    assert download_dataset("beir", "scifact-copy", cache=cache, base_url=url) == path
    # upstream bytes change: a forced re-download fails against the recorded checksum, old copy intact
    zip_beir(shared_data / "cmrc2018-dev-retrieval", www / "scifact-copy.zip", "scifact-copy")
    with pytest.raises(DownloadError, match="recorded SHA-256 mismatch"):
        download_dataset("beir", "scifact-copy", cache=cache, base_url=url, force=True)
    assert len(get_suite("beir").load(path).dataset.corpus) == 5183
    assert not [p for p in (cache / "beir").iterdir() if p.name.startswith(".")]


def test_known_sha256_verified(server, tmp_path):
    www, url = server
    (www / "f.txt").write_bytes(b"hello")
    good = hashlib.sha256(b"hello").hexdigest()
    dest = fetch([RemoteFile(f"{url}/f.txt", "f.txt", sha256=good)], tmp_path / "c" / "x", cache=tmp_path / "c",
                 key="k")
    assert (dest / "f.txt").read_bytes() == b"hello"
    assert not (tmp_path / "c" / LEDGER).exists()             # published checksums are not recorded
    with pytest.raises(DownloadError, match="SHA-256 mismatch"):
        fetch([RemoteFile(f"{url}/f.txt", "f.txt", sha256="0" * 64)], tmp_path / "c" / "y", cache=tmp_path / "c",
              key="k2")
    assert not (tmp_path / "c" / "y").exists()


def test_missing_file_is_a_clear_error(server, tmp_path):
    _, url = server
    with pytest.raises(DownloadError, match="404"):
        fetch([RemoteFile(f"{url}/nope.zip", ".", unpack="zip")], tmp_path / "c" / "x", cache=tmp_path / "c", key="k")
    assert cache_entries(tmp_path / "c") == []


def test_miracl_release_download_and_load(shared_data, server, tmp_path):
    """Release-format files for the subset's judged queries (so the partial corpus is complete for them)."""
    www, url = server
    subset = shared_data / "miracl-dev-subset" / "sw"
    judged = [line.split("\t") for line in (subset / "qrels" / "dev.tsv").read_text().splitlines()[1:]]
    qids = {q for q, _, _ in judged}
    base = www / "miracl" / "resolve" / "main" / "miracl-v1.0-sw"
    (base / "topics").mkdir(parents=True)
    (base / "qrels").mkdir()
    topics = [line for line in (shared_data / "miracl" / "topics" / "topics.miracl-v1.0-sw-dev.tsv")
              .read_text(encoding="utf-8").splitlines() if line.split("\t")[0] in qids]
    (base / "topics" / "topics.miracl-v1.0-sw-dev.tsv").write_text("\n".join(topics) + "\n", encoding="utf-8")
    (base / "qrels" / "qrels.miracl-v1.0-sw-dev.tsv").write_text(
        "".join(f"{q}\tQ0\t{d}\t{r}\n" for q, d, r in judged), encoding="utf-8")
    shard = www / "miracl-corpus" / "resolve" / "main" / "miracl-corpus-v1.0-sw" / "docs-0.jsonl.gz"
    shard.parent.mkdir(parents=True)
    with gzip.open(shard, "wt", encoding="utf-8") as out, open(subset / "corpus.jsonl", encoding="utf-8") as src:
        for line in src:
            row = json.loads(line)
            out.write(json.dumps({"docid": row["_id"], "title": row["title"], "text": row["text"]}) + "\n")
    cache = tmp_path / "cache"
    path = download_dataset("miracl", "sw", cache=cache, base_url=url, with_corpus=True)
    assert (path / "topics" / "topics.miracl-v1.0-sw-dev.tsv").exists()
    loaded = get_suite("miracl").load(path, dataset="sw")
    beir = get_suite("miracl").load(subset)
    assert len(loaded.dataset.queries) == len(beir.dataset.queries) == 43
    assert loaded.dataset.corpus.ids == beir.dataset.corpus.ids
    assert loaded.dataset.qrels.to_dict() == beir.dataset.qrels.to_dict()
    assert dict(loaded.card.extra)["source"] == "release"
    assert len(json.loads((cache / LEDGER).read_text())) == 3      # topics, qrels, one corpus shard


def test_mkqa_release_download_via_cli(shared_data, server, tmp_path, capsys):
    www, url = server
    (www / "mkqa.jsonl.gz").write_bytes((shared_data / "mkqa" / "test_mkqa.jsonl.gz").read_bytes())
    cache = tmp_path / "cache"
    assert main(["data", "download", "--suite", "mkqa", "--cache", str(cache), "--base-url", url]) == 0
    path = Path(capsys.readouterr().out.strip())
    from suites.benchmarks.mkqa import read_mkqa

    assert len(read_mkqa(path / "mkqa.jsonl.gz")) == 6


def test_cli_download_error_is_one_line(server, tmp_path, capsys):
    _, url = server
    assert main(["data", "download", "--suite", "beir", "--dataset", "nfcorpus", "--cache", str(tmp_path / "c"),
                 "--base-url", url]) == 2
    err = capsys.readouterr().err
    assert "404" in err and err.count("\n") == 1


def test_unsafe_archive_member_refused(server, tmp_path):
    www, url = server
    with zipfile.ZipFile(www / "evil.zip", "w") as zf:
        zf.writestr("../escape.txt", "x")
    with pytest.raises(DownloadError, match="unsafe path"):
        fetch([RemoteFile(f"{url}/evil.zip", ".", unpack="zip")], tmp_path / "c" / "x", cache=tmp_path / "c", key="k")
    assert not (tmp_path / "c" / "escape.txt").exists() and not (tmp_path / "escape.txt").exists()


def test_partial_failure_caches_nothing(shared_data, server, tmp_path):
    """MKQA with corpus: the release file downloads, BEIR's NQ zip fails its published MD5 -> no folder."""
    www, url = server
    (www / "mkqa.jsonl.gz").write_bytes((shared_data / "mkqa" / "test_mkqa.jsonl.gz").read_bytes())
    zip_beir(shared_data / "scifact", www / "nq.zip", "nq")
    cache = tmp_path / "cache"
    with pytest.raises(DownloadError, match="nq.zip: MD5 mismatch"):
        download_dataset("mkqa", cache=cache, base_url=url, with_corpus=True)
    assert cache_entries(cache) in ([], ["mkqa"])
    assert not (cache / LEDGER).exists()
