"""The translation catalogues as files: every entry of a `.po` translated, and its compiled
`.mo` (committed beside it) current, for the page's catalogue and the site's alike."""

import gettext
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def po_entries(path: Path) -> dict[str, str]:
    """msgid -> msgstr of a .po file (the header aside), continuation lines joined."""
    entries = {}
    for block in path.read_text(encoding="utf-8").split("\n\n"):
        assert "#, fuzzy" not in block, block
        found = re.search(r'^msgid ((?:".*"\n)+)msgstr ((?:".*"\n?)+)', block + "\n", re.M)
        if found:
            msgid, msgstr = (
                "".join(re.findall(r'"(.*)"', part)).replace('\\"', '"').replace("\\n", "\n")
                for part in found.groups()
            )
            if msgid:
                entries[msgid] = msgstr
    return entries


def translated_and_compiled(messages: Path) -> dict[str, str]:
    """The entries of `messages/django.po`, once it is checked that each is translated and
    that `django.mo` holds exactly those translations."""
    entries = po_entries(messages / "django.po")
    assert [msgid for msgid, msgstr in entries.items() if not msgstr] == []
    with (messages / "django.mo").open("rb") as compiled:
        catalogue = gettext.GNUTranslations(compiled)
    assert {msgid: catalogue.gettext(msgid) for msgid in entries} == entries
    return entries
