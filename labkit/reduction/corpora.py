"""Real text that ships with Python, for the compression table: no download, the same bytes everywhere.

The lab's own corpus is a small synthetic grammar: it repeats whole phrases far more than real
writing does, so it compresses several times better and would overstate the contrast with model
data. Two real samples sit beside it, read from the standard library of the running Python
(``sysconfig``'s ``stdlib`` path), each a fixed, sorted list of files concatenated in order:

* ``python source``: the ``email`` package's modules (code, comments, docstrings);
* ``python docs``: ``pydoc_data/topics.py``, the text of the Language Reference that ``help()`` shows.

The same Python version gives the same bytes on every machine.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

from labkit.errors import LabkitError, require_choice, require_positive

STDLIB_TEXTS: dict[str, tuple[str, ...]] = {
    "python source": tuple(f"email/{name}.py" for name in (
        "__init__", "_encoded_words", "_header_value_parser", "_parseaddr", "_policybase", "base64mime",
        "charset", "contentmanager", "encoders", "errors", "feedparser", "generator", "header",
        "headerregistry", "iterators", "message", "parser", "policy", "quoprimime", "utils")),
    "python docs": ("pydoc_data/topics.py",),
}


def stdlib_dir() -> Path:
    """The running Python's standard-library directory."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_text(name: str, max_bytes: int = 131072) -> bytes:
    """The first ``max_bytes`` bytes of sample ``name`` (its files concatenated in the listed order)."""
    require_choice("name", name, STDLIB_TEXTS)
    require_positive("max_bytes", max_bytes)
    out = bytearray()
    for rel in STDLIB_TEXTS[name]:
        path = stdlib_dir() / rel
        if not path.is_file():
            raise LabkitError(f"name {name!r} needs {rel} from Python's standard library, not found under "
                              f"{stdlib_dir()}")
        out += path.read_bytes()
        if len(out) >= max_bytes:
            break
    return bytes(out[:max_bytes])
