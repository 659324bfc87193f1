"""How the page shows text it did not write: an assistant's reply rendered as Markdown and
sanitised, a search snippet with its matched terms marked. Both escape everything else, so a
reply or a message can never bring markup, script or a `javascript:` link of its own."""

import re

import nh3
from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

register = template.Library()

# CommonMark with tables and strikethrough; raw HTML in a reply is shown as text, never parsed
# as markup, and markdown-it refuses `javascript:`, `vbscript:`, `file:` and most `data:` links.
_MARKDOWN = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(
    ["table", "strikethrough"]
)
# What a rendered reply may hold after nh3 (ammonia) cleans it: text structure and links only.
REPLY_TAGS = {
    "p", "br", "strong", "em", "del", "code", "pre", "blockquote", "ul", "ol", "li",
    "h1", "h2", "h3", "h4", "h5", "h6", "hr", "a", "table", "thead", "tbody", "tr", "th", "td",
}  # fmt: skip
_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "th": {"align"}, "td": {"align"}}
_SCHEMES = {"http", "https", "mailto"}


@register.filter
def markdown(text: str) -> SafeString:
    """`text` (an assistant's reply) as sanitised HTML: Markdown rendered by markdown-it-py,
    then cleaned by nh3 to `REPLY_TAGS`, links only to http(s) and mailto and opened with
    `rel="noopener noreferrer nofollow"`."""
    rendered = _MARKDOWN.render(text or "")
    cleaned = nh3.clean(
        rendered,
        tags=REPLY_TAGS,
        attributes=_ATTRIBUTES,
        url_schemes=_SCHEMES,
        link_rel="noopener noreferrer nofollow",
    )
    return mark_safe(cleaned)  # noqa: S308 (nh3's output, from markdown-it's escaped HTML)


@register.filter
def highlight(text: str, terms: list[str]) -> SafeString:
    """`text` escaped, each occurrence of one of `terms` (case-insensitive) in `<mark>`."""
    words = sorted({term for term in terms or () if term}, key=len, reverse=True)
    if not words:
        return escape(text)
    pattern = re.compile("|".join(re.escape(word) for word in words), re.IGNORECASE)
    parts, last = [], 0
    for match in pattern.finditer(text):
        parts += [escape(text[last : match.start()]), f"<mark>{escape(match.group())}</mark>"]
        last = match.end()
    parts.append(escape(text[last:]))
    return mark_safe("".join(parts))  # noqa: S308 (every piece escaped above)
