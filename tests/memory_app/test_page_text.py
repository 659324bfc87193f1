"""The page's text filters: an assistant's reply as Markdown, sanitised; a snippet's terms
marked, the rest escaped."""

from html.parser import HTMLParser

import pytest

from memory_app.templatetags.page_text import REPLY_TAGS, highlight, markdown


class _Elements(HTMLParser):
    """Every element of an HTML text, with its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, attrs))


def test_markdown_renders_structure_and_keeps_only_safe_links():
    html = markdown("**bold** and [site](https://example.com) and [mail](mailto:a@b.c)")
    assert "<strong>bold</strong>" in html
    assert '<a href="https://example.com" rel="noopener noreferrer nofollow">site</a>' in html
    assert 'href="mailto:a@b.c"' in html


@pytest.mark.parametrize(
    "hostile",
    [
        "<script>alert(1)</script>",
        '<img src=x onerror="alert(1)">',
        "[x](javascript:alert(1))",
        "[x](JaVaScRiPt:alert(1))",
        "[x](data:text/html;base64,PHNjcmlwdD4=)",
        "<a href='javascript:alert(1)'>x</a>",
        '<iframe src="https://example.com"></iframe>',
        "[x](vbscript:msgbox)",
        "![img](https://example.com/x.png)",
    ],
)
def test_markdown_never_lets_markup_script_or_a_dangerous_link_through(hostile):
    parsed = _Elements()
    parsed.feed(markdown(hostile))
    for tag, attributes in parsed.found:
        assert tag in REPLY_TAGS, tag
        for name, value in attributes:
            assert not name.startswith("on"), name
            if name == "href":
                assert value.startswith(("https:", "http:", "mailto:")), value


def test_highlight_marks_terms_and_escapes_everything_else():
    assert highlight("a <b>Tea</b> tea", ["tea"]) == (
        "a &lt;b&gt;<mark>Tea</mark>&lt;/b&gt; <mark>tea</mark>"
    )
    assert highlight("<i>", []) == "&lt;i&gt;"
