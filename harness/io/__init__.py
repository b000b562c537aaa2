"""Small file helpers shared by every module: atomic writes and compressed reads."""
from harness.io.atomic import (
    OutputExistsError,
    atomic_dir,
    atomic_write,
    atomic_write_json,
    atomic_write_text,
    check_new_file,
    check_replaceable,
    foreign_entries,
    read_record,
)
from harness.io.files import open_text, sha256_file, sha256_files

__all__ = [
    "OutputExistsError",
    "atomic_dir",
    "atomic_write",
    "atomic_write_json",
    "atomic_write_text",
    "check_new_file",
    "check_replaceable",
    "foreign_entries",
    "read_record",
    "open_text",
    "sha256_file",
    "sha256_files",
]
