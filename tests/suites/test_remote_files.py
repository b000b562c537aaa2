"""Each benchmark suite declares its remote files (BenchmarkSuite.remote_files); the downloader names no suite."""
from __future__ import annotations

import pytest

from harness.benchmark import RemoteFile, get_suite
from harness.errors import ConfigError
from suites.download import download_dataset, downloadable_suites


def test_the_suites_with_official_downloads_declare_them():
    assert set(downloadable_suites()) == {"beir", "miracl", "mkqa", "cmteb", "dureader"}
    assert not get_suite("synthetic").has_downloads()


@pytest.mark.parametrize(("suite", "dataset", "name", "first_url"), [
    ("beir", "scifact", "scifact", "http://mirror/scifact.zip"),
    ("miracl", "sw", "sw", "http://mirror/miracl/resolve/main/miracl-v1.0-sw/topics/topics.miracl-v1.0-sw-dev.tsv"),
    ("mkqa", None, "mkqa", "http://mirror/mkqa.jsonl.gz"),
    ("dureader", None, "dureader-retrieval", "http://mirror/dureader-retrieval-baseline-dataset.tar.gz"),
])
def test_a_suite_names_its_folder_and_files(suite, dataset, name, first_url):
    folder, files = get_suite(suite).remote_files(dataset, base_url="http://mirror/")
    assert folder == name
    assert all(isinstance(f, RemoteFile) for f in files)
    assert files[0].url == first_url


def test_the_mkqa_corpus_is_beirs_nq_zip():
    _, files = get_suite("mkqa").remote_files(None, base_url="http://mirror", with_corpus=True)
    assert [(f.url, f.target, f.unpack) for f in files[1:]] == [("http://mirror/nq.zip", "nq", "zip")]
    assert files[1].md5


def test_a_suite_without_downloads_is_refused_naming_those_with(tmp_path):
    with pytest.raises(ConfigError, match=r"suite 'synthetic' has no download source \(.*beir.*\)"):
        download_dataset("synthetic", cache=tmp_path)
    with pytest.raises(ConfigError, match="pick a BEIR dataset"):
        download_dataset("beir", cache=tmp_path)
