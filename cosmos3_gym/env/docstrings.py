"""Docstrings as the text people read them in: ``--help`` (the dataclass flags) and the generated
reference pages, without Sphinx markup."""

from __future__ import annotations

import re


def plain_text(doc: str) -> str:
    """A docstring as ``--help`` shows it: Sphinx roles become their target (``:func:`~a.b``` -> ``b``,
    ``:mod:`a.b``` -> ``a.b``) and reST's double backquotes Markdown's single ones."""
    doc = re.sub(r":[a-z]+:`(~?)([^`]+)`", lambda m: f"`{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}`", doc)
    return doc.replace("``", "`")
