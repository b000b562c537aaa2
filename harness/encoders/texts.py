"""Texts handed to a Rust (``tokenizers``) tokenizer without growing the caller's corpus.

To read a Python ``str``, the tokenizer binding asks CPython for its UTF-8 bytes
(``PyUnicode_AsUTF8AndSize``).  For a string that is not pure ASCII, CPython builds that UTF-8
copy once and keeps it inside the string object for as long as the string lives.  Tokenising the
corpus's own string objects therefore leaves a UTF-8 copy of every non-ASCII document attached to
the corpus: memory that grows with the corpus, not with the batch or shard (measured on
SciFact-like passages, 41% of them non-ASCII: about 1.3 KB per document, 120 MB more at 100k
documents than at 20k).  Tokenising fresh copies of the non-ASCII texts instead lets that UTF-8
copy die with the window being tokenised.
"""
from __future__ import annotations

from collections.abc import Iterable


def detached(texts: Iterable[str]) -> list[str]:
    """``texts`` as a list in which every non-ASCII string is a fresh copy (ASCII ones need none:
    CPython shares their bytes with the UTF-8 view), so a tokenizer's UTF-8 view of it is freed
    with the copy instead of staying on the caller's string."""
    return [t if t.isascii() else t.encode("utf-8", "surrogatepass").decode("utf-8", "surrogatepass")
            for t in texts]
